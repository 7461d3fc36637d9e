"""OpenAI's custom tools (corral.tools.request, corral.tools.grammar, corral.tools.shapes): a
call's input is held to the tool's grammar (Lark, regex, or free text), written in the
`<tool_call>` envelope as the JSON string `{"input": ...}` and answered as `{"type": "custom",
"custom": {"name", "input"}}`. Inputs are checked with the `lark` parser and Python's `re`,
independent of corral's compiler; the real model through the `openai` client."""

from __future__ import annotations

import json
import re

import lark
import openai
import pytest
from corral.tools import ToolError, cli, parse_tool_request
from corral.tools.grammar import compile_dfa, grammar
from corral.tools.messages import message_calls
from corral.tools.render import call_text as rendered
from corral.tools.server import ServerConfig, background_server
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

ASK = [{"role": "user", "content": "Add two numbers with the tool."}]
SUM_LARK = """start: expr
expr: NUMBER | "(" NUMBER " + " expr ")"
NUMBER: /[0-9]{1,3}/
"""
CODE = r"[a-z]{2,5}\(\d{1,2}\)\n?"


def custom(name: str, syntax: str | None = None, definition: str | None = None) -> dict:
    tool = {"name": name}
    if syntax is not None:
        tool["format"] = {
            "type": "grammar",
            "grammar": {"syntax": syntax, "definition": definition},
        }
    return {"type": "custom", "custom": tool}


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TOOLS = [custom("calc", "lark", SUM_LARK), custom("code", "regex", CODE), custom("note")]
NAMED = {"type": "custom", "custom": {"name": "calc"}}


def call_text(name: str, text: str) -> bytes:
    arguments = json.dumps({"input": text}, ensure_ascii=False, separators=(",", ":"))
    return f'<tool_call>{{"name":"{name}","arguments":{arguments}}}</tool_call>'.encode()


def dfa_of(**extra):
    return compile_dfa(grammar(parse_tool_request({"messages": ASK, **extra})))


@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=12))
def test_a_custom_calls_input_is_exactly_its_grammars_language_json_escaped(text):
    dfa = dfa_of(tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    parser = lark.Lark(SUM_LARK)
    try:
        parser.parse(text)
        in_lark = text.count("(") <= 5  # within the recursion bound
    except lark.LarkError:
        in_lark = False
    assert dfa.matches(call_text("calc", text)) == in_lark
    assert dfa.matches(call_text("code", text)) == bool(re.fullmatch(CODE, text))
    assert dfa.matches(call_text("note", text))  # free text
    raw = f'<tool_call>{{"name":"note","arguments":{{"input":"{text}"}}}}</tool_call>'
    try:  # the raw text is json.dumps's spelling of some input (of itself, or "\\f" of "\f")
        canonical = json.dumps(json.loads(f'"{text}"'), ensure_ascii=False)[1:-1] == text
    except ValueError:
        canonical = False
    assert dfa.matches(raw.encode()) == canonical  # one spelling: json.dumps's


@pytest.mark.parametrize("text", ["7", "(1 + 22)", "(1 + (2 + 333))", "(1+2)", ""])
def test_a_named_custom_tool_is_exactly_one_call_of_it(text):
    dfa = dfa_of(tools=[WEATHER, *TOOLS], tool_choice=NAMED)
    try:
        lark.Lark(SUM_LARK).parse(text)
        expected = True
    except lark.LarkError:
        expected = False
    assert dfa.matches(call_text("calc", text)) == expected
    assert not dfa.matches(call_text("code", "ab(1)"))


def test_custom_and_function_tools_mix_under_auto():
    dfa = dfa_of(tools=[WEATHER, *TOOLS])
    assert dfa.matches(b'{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>')
    assert dfa.matches(call_text("code", "ab(12)\n")[len("<tool_call>") :])


@pytest.mark.parametrize(
    "tools, choice, param",
    [
        ([{"type": "custom"}], None, "tools[0].custom"),
        ([{"type": "custom", "custom": {"name": "x y"}}], None, "tools[0].custom.name"),
        ([custom("x", "ebnf", "a")], None, "tools[0].custom.format.grammar.syntax"),
        ([custom("x", "lark", None)], None, "tools[0].custom.format.grammar.definition"),
        ([custom("x"), custom("x")], None, "tools[1].custom.name"),
        ([custom("x")], {"type": "function", "function": {"name": "x"}},
         "tool_choice.function.name"),
        ([WEATHER], {"type": "custom", "custom": {"name": "get_weather"}},
         "tool_choice.custom.name"),
        ([{"type": "web_search"}], None, "tools[0].type"),
    ],
)  # fmt: skip
def test_a_malformed_custom_tool_is_a_400_naming_the_field(tools, choice, param):
    body = {"messages": ASK, "tools": tools}
    if choice is not None:
        body["tool_choice"] = choice
    with pytest.raises(ToolError) as caught:
        parse_tool_request(body)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_a_custom_grammar_error_names_its_line_and_column():
    with pytest.raises(ToolError) as caught:
        grammar(
            parse_tool_request(
                {"messages": ASK, "tools": [custom("x", "lark", 'start: "a"\n  | ) "b"\n')]}
            )
        )
    assert caught.value.param == "tools[0].custom.format.grammar.definition"
    assert "line 2 column" in caught.value.message


# --- the real model through the openai client ----------------------------------------------------


@pytest.fixture(scope="module")
def server(smollm2):
    with background_server(smollm2, ServerConfig(batch_size=4, max_len=512)) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=300)


def test_the_models_custom_calls_come_back_as_the_api_writes_them(client):
    done = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=ASK, tools=TOOLS, n=4, seed=1,
        tool_choice="required", max_tokens=80, parallel_tool_calls=False,
    )  # fmt: skip
    assert done.choices
    for choice in done.choices:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert call.type == "custom" and call.id
        if call.custom.name == "calc":
            lark.Lark(SUM_LARK).parse(call.custom.input)
        elif call.custom.name == "code":
            assert re.fullmatch(CODE, call.custom.input)
        else:
            assert call.custom.name == "note"
    named = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=ASK, tools=TOOLS, tool_choice=NAMED, max_tokens=80
    )
    (call,) = named.choices[0].message.tool_calls
    assert (call.type, call.custom.name) == ("custom", "calc")
    lark.Lark(SUM_LARK).parse(call.custom.input)
    code = {"type": "custom", "custom": {"name": "code"}}
    named = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", messages=ASK, tools=TOOLS, tool_choice=code, n=3, seed=5
    )
    for choice in named.choices:
        (call,) = choice.message.tool_calls
        assert call.custom.name == "code" and re.fullmatch(CODE, call.custom.input)


def test_a_stream_with_custom_tools_is_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct", messages=ASK, tools=TOOLS, stream=True
        )
    assert "stream" in str(bad.value) and "custom" in str(bad.value)


@settings(max_examples=40, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=12))
def test_a_replayed_custom_call_renders_as_it_was_generated(text):
    call = {"id": "c1", "type": "custom", "custom": {"name": "note", "input": text}}
    messages = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    request = parse_tool_request({"messages": messages, "tools": TOOLS})
    ((name, arguments),) = message_calls(request.messages[1], 1)
    assert rendered(name, arguments).encode() == call_text("note", text)
    assert dfa_of(tools=TOOLS, tool_choice="required").matches(call_text("note", text))


def test_a_malformed_replayed_custom_call_is_a_400_naming_it():
    call = {"id": "c1", "type": "custom", "custom": {"name": "note"}}
    messages = [*ASK, {"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(ToolError) as caught:
        parse_tool_request({"messages": messages, "tools": TOOLS})
    assert (caught.value.status, caught.value.param) == (400, "messages[1].tool_calls[0].custom")


def test_a_batch_lines_custom_calls_are_answered_as_custom(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cli, "load_model", lambda path=None, **kwargs: StandInModel())
    lines = []
    for i, tool in enumerate(["calc", "code"]):
        choice = {"type": "custom", "custom": {"name": tool}}
        body = {"messages": ASK, "tools": TOOLS, "tool_choice": choice, "seed": i, "n": 3,
                "max_tokens": 200}  # fmt: skip
        lines.append(json.dumps({"custom_id": tool, "method": "POST", "url": "/v1/chat/completions",
                                 "body": body}))  # fmt: skip
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    assert cli.main(["generate", str(tmp_path / "in.jsonl"), "--quiet"]) == 0
    outputs = (tmp_path / "in.output.jsonl").read_text().splitlines()
    assert len(outputs) == 2
    for text in outputs:
        out = json.loads(text)
        for choice in out["response"]["body"]["choices"]:
            (call,) = choice["message"]["tool_calls"]
            assert call["type"] == "custom" and call["custom"]["name"] == out["custom_id"]
            if out["custom_id"] == "calc":
                lark.Lark(SUM_LARK).parse(call["custom"]["input"])
            else:
                assert re.fullmatch(CODE, call["custom"]["input"])

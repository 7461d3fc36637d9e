"""vLLM's request extension `structured_outputs` (corral.tools.request, corral.tools.grammar):
the request's validation, the grammar it compiles to, and answers of the real model through the
`openai` client (`extra_body`), each checked with an independent oracle: Python's `re` for a
regex, the `lark` parser for a grammar, `jsonschema` for a schema, the list itself for a choice."""

from __future__ import annotations

import json
import re

import jsonschema
import lark
import openai
import pytest
from corral.automata import tree_to_dfa
from corral.tools import ToolError, parse_tool_request
from corral.tools.grammar import compile_dfa, grammar
from corral.tools.server import ServerConfig, background_server
from hypothesis import given, settings
from hypothesis import strategies as st

ASK = [{"role": "user", "content": "Answer."}]
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object"}},
}
DATE = r"20[0-9]{2}-(0[1-9]|1[0-2])-[0-2][0-9]"
SUM_LARK = """start: expr
expr: NUMBER | expr_paren
expr_paren: "(" NUMBER " + " expr ")"
NUMBER: /[0-9]{1,3}/
"""
SUM_GBNF = r"""root ::= expr
expr ::= num | "(" num " + " expr ")"
num ::= [0-9] | [0-9] [0-9] | [0-9] [0-9] [0-9]
"""
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def request(structured, **extra) -> dict:
    return {"messages": ASK, "structured_outputs": structured, **extra}


def accepts(body: dict, text: str) -> bool:
    """Whether the DFA of the request's grammar accepts `text`."""
    return compile_dfa(grammar(parse_tool_request(body))).matches(text.encode())


def error_of(body: dict) -> ToolError:
    with pytest.raises(ToolError) as caught:
        grammar(parse_tool_request(body))
    return caught.value


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "structured, param",
    [
        ({}, "structured_outputs"),
        ({"regex": "a", "choice": ["a"]}, "structured_outputs"),
        ({"whitespace_pattern": " "}, "structured_outputs.whitespace_pattern"),
        ({"structural_tag": "{}"}, "structured_outputs.structural_tag"),
        ({"choice": []}, "structured_outputs.choice"),
        ({"choice": ["a", 1]}, "structured_outputs.choice"),
        ({"regex": 3}, "structured_outputs.regex"),
        ({"json": "{not json"}, "structured_outputs.json"),
        ({"json": [1]}, "structured_outputs.json"),
        ("regex", "structured_outputs"),
    ],
)
def test_a_malformed_structured_outputs_is_a_400_naming_the_field(structured, param):
    error = error_of(request(structured))
    assert (error.status, error.param) == (400, param)


@pytest.mark.parametrize("name", ["guided_regex", "guided_grammar", "guided_choice", "guided_json"])
def test_vllms_removed_guided_fields_are_refused_by_name(name):
    error = error_of({"messages": ASK, name: "x"})
    assert (error.status, error.param, error.code) == (400, name, "unsupported_parameter")
    assert "structured_outputs" in error.message


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_object"}},
        {"tools": [WEATHER]},
        {"tools": [WEATHER], "tool_choice": "required"},
    ],
)
def test_structured_outputs_with_another_whole_answer_constraint_is_a_400(extra):
    error = error_of(request({"regex": "a"}, **extra))
    assert (error.status, error.param) == (400, "structured_outputs")
    assert error.code == "invalid_parameter_combination"


def test_structured_outputs_with_tool_choice_none_holds_the_answer():
    body = request({"regex": "yes|no"}, tools=[WEATHER], tool_choice="none")
    assert accepts(body, "yes") and not accepts(body, "<tool_call>")


def test_a_stop_string_is_refused_with_structured_outputs():
    error = error_of(request({"regex": "a+"}, stop=["b"]))
    assert (error.status, error.param) == (400, "stop")


@pytest.mark.parametrize(
    "text, line, column",
    [
        ('root ::= "a"\nb ::= [z-a]\n', 2, 7),
        ('root ::= "a" (\n', 1, 14),
        ('start: a\na: "x" |\n  b\n', 3, 3),
    ],
)
def test_a_grammar_error_names_its_line_and_column(text, line, column):
    error = error_of(request({"grammar": text}))
    assert error.status in (400, 422) and error.param == "structured_outputs.grammar"
    assert f"line {line} column" in error.message


def test_a_refused_grammar_construct_is_a_422():
    error = error_of(request({"grammar": 'start: a\n%declare B\na: "x"\n'}))
    assert (error.status, error.code) == (422, "unsupported_parameter")
    assert "line 2" in error.message


def test_a_refused_regex_is_a_422_naming_the_field():
    error = error_of(request({"regex": r"(a)\1"}))
    assert (error.status, error.param) == (422, "structured_outputs.regex")


# --- languages against independent oracles -----------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.text(st.characters(codec="utf-8"), max_size=6), min_size=1, max_size=6),
    st.text(st.characters(codec="utf-8"), max_size=6),
)
def test_a_choice_is_exactly_one_of_its_strings(choices, other):
    body = request({"choice": choices})
    for choice in choices:
        assert accepts(body, choice)
    assert accepts(body, other) == (other in choices)
    assert accepts(body, choices[0] + choices[-1]) == (choices[0] + choices[-1] in choices)


@pytest.mark.parametrize("text", ["7", "(1 + 22)", "(1 + (2 + 333))", "(1+2)", "1234", "()"])
def test_gbnf_and_lark_grammars_are_their_languages(text):
    parser = lark.Lark(SUM_LARK)
    try:
        parser.parse(text)
        expected = text.count("(") <= 4  # within the recursion bound
    except lark.LarkError:
        expected = False
    assert accepts(request({"grammar": SUM_LARK}), text) == expected
    assert accepts(request({"grammar": SUM_GBNF}), text) == expected


# --- the real model through the openai client ----------------------------------------------------


@pytest.fixture(scope="module")
def client(smollm2):
    with background_server(smollm2, ServerConfig(batch_size=4, max_len=512)) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)


def answers(client, structured: dict, stream: bool, n: int = 2) -> list[str]:
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "Give an answer."}],
        "max_tokens": 40,
        "seed": 3,
        "n": n,
        "extra_body": {"structured_outputs": structured},
    }
    if not stream:
        done = client.chat.completions.create(**body)
        assert all(c.finish_reason == "stop" for c in done.choices)
        return [c.message.content for c in done.choices]
    texts = [""] * n
    for chunk in client.chat.completions.create(stream=True, **body):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    return texts


@pytest.mark.parametrize("stream", [False, True])
def test_the_models_answers_match_each_kind(client, stream):
    for text in answers(client, {"regex": DATE}, stream):
        assert re.fullmatch(DATE, text)
    for text in answers(client, {"choice": ["red", "green", "blue"]}, stream):
        assert text in ("red", "green", "blue")
    parser = lark.Lark(SUM_LARK)
    for text in answers(client, {"grammar": SUM_LARK}, stream):
        parser.parse(text)
    for text in answers(client, {"grammar": SUM_GBNF}, stream):
        parser.parse(text)
    for text in answers(client, {"json": PERSON}, stream):
        jsonschema.validate(json.loads(text), PERSON)


def test_the_server_answers_a_grammar_error_with_its_line_and_column(client):
    with pytest.raises(openai.BadRequestError) as bad:
        answers(client, {"grammar": 'root ::= "a"\nb ::= [z-a]\n'}, False)
    assert "line 2 column" in str(bad.value)
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct",
            messages=ASK,
            response_format={"type": "json_object"},
            extra_body={"structured_outputs": {"regex": "a"}},
        )
    assert "structured_outputs" in str(bad.value)


def test_tree_of_a_choice_is_its_set():
    dfa = tree_to_dfa(grammar(parse_tool_request(request({"choice": ["a", "ab"]}))).tree)
    assert dfa.matches(b"a") and dfa.matches(b"ab") and not dfa.matches(b"b")

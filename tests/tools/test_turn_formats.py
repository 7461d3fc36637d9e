"""Turn formats (docs/tools.md, "Turn formats"): each family's format is detected from its real
chat template; llama.cpp's expectations of what each family's output parses to (its
tests/test-chat.cpp, re-expressed here as data) hold under every split of the text; every text a
family's grammar accepts (DFA samples over hypothesis-built tool schemas, with and without
thinking, special tokens as their symbols) parses under random splits to calls of the request's
tools whose arguments validate with jsonschema, its thought as reasoning and never as content.
"""

import json
import os
import random
import re
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from corral.automata.special import special_symbol
from corral.kernels import Vocabulary
from corral.model.generate import GenerationResult
from corral.tools import ToolError, parse_tool_request
from corral.tools.events import collect_turn
from corral.tools.formats import (
    DEEPSEEK_R1,
    DEVSTRAL,
    FORMATS,
    HARMONY,
    HERMES,
    LLAMA3,
    MISTRAL_NEMO,
    MISTRAL_SMALL,
    QWEN3,
    QWEN3_CODER,
    detect_format,
    format_named,
)
from corral.tools.grammar import compile_dfa, grammar
from corral.tools.parser import ToolParser
from corral.tools.render import one_call_per_turn, render_request, template_turns
from corral.tools.serving import ChoiceStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(os.environ.get("CORRAL_TEST_DATA") or ROOT.parent / "shared" / "data")
TEMPLATES = DATA / "llama.cpp" / "templates"  # the full data's (tests/conftest.py)
DETECTED = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "qwen3",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral-nemo",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral-small",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": "deepseek-r1",
    "google-gemma-2-2b-it.jinja": "hermes",  # takes no tools: corral describes them itself
    "Qwen3-Coder.jinja": "qwen3-coder",
    "openai-gpt-oss-120b.jinja": "harmony",
}


@pytest.mark.parametrize("file, name", list(DETECTED.items()))
def test_each_real_template_is_detected_as_its_family(file, name):
    if not TEMPLATES.is_dir():
        pytest.skip(f"the full test data is not at {TEMPLATES.parent.parent}")
    found = detect_format((TEMPLATES / file).read_text())
    assert (found and found.name) == name


MARKERS = [  # the strings llama.cpp's handlers look for, in templates made of them alone
    ("{{ tools }}<tool_call>", "hermes"),
    ("{{ tools }}<think></think><tool_call>", "qwen3"),
    ('<|start_header_id|>{{ tools }}{"name": "parameters"}', "llama3"),
    ("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "mistral-nemo"),
    ("{{ tools }}[TOOL_CALLS]{{ name }}[CALL_ID]{{ id }}[ARGS]", "mistral-small"),
    ("{{ tools }}[TOOL_CALLS]{{ name }}[ARGS]", "devstral"),
    ("<think>{{ tools }}<｜tool▁calls▁begin｜>", "deepseek-r1"),
    ("{{ messages }}", "hermes"),
    ("{{ tools }}<tool_call><function=", "qwen3-coder"),
    ("{% for tool in tools %}<|channel|>{% endfor %}", "harmony"),
    ("{% for tool in tools %}{{ tool }}{% endfor %}", None),
]


@pytest.mark.parametrize("template, name", MARKERS)
def test_detection_reads_the_markers(template, name):
    found = detect_format(template)
    assert (found and found.name) == name


def test_an_unknown_format_name_is_a_400_naming_it():
    with pytest.raises(Exception) as caught:
        format_named("chatml-xyz")
    assert caught.value.status == 400 and "chatml-xyz" in caught.value.message


# --- llama.cpp's expectations (tests/test-chat.cpp), re-expressed as data ---------------------

ASSIST = "Hello, world!\nWhat's up?"
CALL = [("special_function", {"arg1": 1})]
EXPECTATIONS = [  # (format, thinking, output, reasoning, content, calls)
    (HERMES, False, ASSIST, None, ASSIST, []),
    (
        HERMES,
        False,
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        None,
        None,
        CALL,
    ),
    (QWEN3, True, "<think>I'm\nthinking</think>" + ASSIST, "I'm\nthinking", ASSIST, []),
    (QWEN3, True, ASSIST, None, ASSIST, []),
    (
        QWEN3,
        True,
        "<think>\nI'm\nthinking\n</think>\n\n"
        '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>',
        "I'm\nthinking",
        None,
        CALL,
    ),
    (DEEPSEEK_R1, True, "I'm\nthinking</think>" + ASSIST, "I'm\nthinking", ASSIST, []),
    (DEEPSEEK_R1, True, "</think>" + ASSIST, None, ASSIST, []),
    (
        DEEPSEEK_R1,
        False,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>special_function\n"
        '```json\n{"arg1": 1}```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        None,
        None,
        CALL,
    ),
    (MISTRAL_NEMO, False, ASSIST, None, ASSIST, []),
    (
        MISTRAL_NEMO,
        False,
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}}]',
        None,
        None,
        CALL,
    ),
    (MISTRAL_SMALL, False, ASSIST, None, ASSIST, []),
    (MISTRAL_SMALL, False, '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', None, None, CALL),
    (
        MISTRAL_SMALL,
        False,
        ASSIST + '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
        None,
        ASSIST,
        CALL,
    ),
    (
        MISTRAL_SMALL,
        False,
        '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}'
        '[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}',
        None,
        None,
        [*CALL, ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    (QWEN3_CODER, False, ASSIST, None, ASSIST, []),
    (
        QWEN3_CODER,
        False,
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
        "</function>\n</tool_call>",
        None,
        None,
        CALL,
    ),
    (
        QWEN3_CODER,
        False,
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
        "</function>\n</tool_call>\n<tool_call>\n<function=special_function_with_opt>\n"
        "<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n"
        "</function>\n</tool_call>",
        None,
        None,
        [*CALL, ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    (
        QWEN3_CODER,
        False,
        "<tool_call>\n<function=python>\n<parameter=code>\n"
        'def hello():\n    print("Hello, world!")\n\nhello()\n'
        "</parameter>\n</function>\n</tool_call>",
        None,
        None,
        [("python", {"code": 'def hello():\n    print("Hello, world!")\n\nhello()'})],
    ),
    (HARMONY, True, "<|channel|>final<|message|>" + ASSIST, None, ASSIST, []),
    (HARMONY, True, "<|channel|>commentary<|message|>" + ASSIST, None, ASSIST, []),
    (
        HARMONY,
        True,
        "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant"
        "<|channel|>final<|message|>" + ASSIST,
        "I'm\nthinking",
        ASSIST,
        [],
    ),
    (
        HARMONY,
        True,
        "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant"
        "<|channel|>commentary to=functions.special_function <|constrain|>json"
        '<|message|>{"arg1": 1}',
        "I'm\nthinking",
        None,
        CALL,
    ),
    (LLAMA3, False, ASSIST, None, ASSIST, []),
    # call ids: (name, arguments, id)
    (
        MISTRAL_NEMO,
        False,
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]',
        None,
        None,
        [("special_function", {"arg1": 1}, "123456789")],
    ),
    (
        MISTRAL_SMALL,
        False,
        '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
        None,
        None,
        [("special_function", {"arg1": 1}, "123456789")],
    ),
    (
        MISTRAL_SMALL,
        False,
        '[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
        '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}',
        None,
        None,
        [
            ("special_function", {"arg1": 1}, "000000001"),
            ("special_function_with_opt", {"arg1": 1, "arg2": 2}, "000000002"),
        ],
    ),
    (DEVSTRAL, False, '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', None, None, CALL),
    (
        DEVSTRAL,
        False,
        ASSIST + '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
        None,
        ASSIST,
        CALL,
    ),
    # corral's own: markup that begins inside a header that breaks off is read as markup
    (
        HARMONY,
        True,
        "<|channel|>final<|message|>I want to=functions.x<|end|>",
        None,
        "I want to=functions.x",
        [],
    ),
    (
        HARMONY,
        True,
        "<|channel|>commentary to=functions.f<|channel|>commentary to=functions.special_function"
        ' <|constrain|>json<|message|>{"arg1": 1}',
        None,
        "<|channel|>commentary to=functions.f",
        CALL,
    ),
    # Harmony's other call headers
    (
        HARMONY,
        True,
        ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        None,
        None,
        CALL,
    ),
    (
        HARMONY,
        True,
        '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
        None,
        None,
        CALL,
    ),
    (
        HARMONY,
        True,
        ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
        None,
        None,
        CALL,
    ),
    (
        HARMONY,
        True,
        '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
        None,
        None,
        CALL,
    ),
    (
        HARMONY,
        True,
        "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
        '<|start|>assistant to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
        "I'm\nthinking",
        None,
        CALL,
    ),
    (  # as gpt-oss's template writes an earlier call, then a second call after `<|call|>`
        HARMONY,
        True,
        "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
        "<|start|>assistant to=functions.special_function<|channel|>commentary json"
        '<|message|>{"arg1": 1}<|call|><|start|>assistant<|channel|>commentary '
        'to=functions.special_function_with_opt <|constrain|>json<|message|>{"arg1": 1, "arg2": 2}',
        "I'm\nthinking",
        None,
        [*CALL, ("special_function_with_opt", {"arg1": 1, "arg2": 2})],
    ),
    (LLAMA3, False, '{"name": "special_function", "parameters": {"arg1": 1}}', None, None, CALL),
]


INTEGER = {"type": "integer"}
LLAMA_CPP_TOOLS = parse_tool_request(  # test-chat.cpp's tools
    {
        "messages": [{"role": "user", "content": "Go."}],
        "tools": [
            {
                "type": "function",
                "function": {"name": name, "parameters": {"type": "object", "properties": p}},
            }
            for name, p in [
                ("special_function", {"arg1": INTEGER}),
                ("special_function_with_opt", {"arg1": INTEGER, "arg2": INTEGER}),
                ("python", {"code": {"type": "string"}}),
            ]
        ],
    }
).tools


def parsed(fmt, thinking: bool, text: str, cuts, tools=LLAMA_CPP_TOOLS) -> tuple:
    """`(reasoning, content, calls)` of `text` pushed in the pieces between `cuts`."""
    parser = ToolParser("r", fmt.parser_syntax(thinking, tools))
    events = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        events += parser.push(text[a:b])
    return collect_turn(events + parser.finish())


@pytest.mark.parametrize("case", EXPECTATIONS, ids=lambda c: f"{c[0].name}:{c[2][:24]!r}")
def test_llama_cpps_expectations_hold_under_every_split(case):
    fmt, thinking, text, reasoning, content, calls = case
    splits = [[]] + [[i] for i in range(len(text) + 1)]
    rng = random.Random(0)
    splits += [sorted(rng.sample(range(len(text) + 1), 4)) for _ in range(20)]
    for cuts in splits:
        got_reasoning, got_content, got_calls = parsed(fmt, thinking, text, cuts)
        assert (got_reasoning, got_content) == (reasoning, content), cuts
        got = [(c.name, json.loads(c.arguments), c.id) for c in got_calls]
        assert len(got) == len(calls), cuts  # an expected id is compared when given
        assert [g[: len(e)] for g, e in zip(got, calls, strict=True)] == calls, cuts


# --- grammar and parser agree, per family ---------------------------------------------------

SPECIAL_IDS = {  # special tokens in the families' vocabularies
    "[TOOL_CALLS]": 5,
    "[ARGS]": 6,
    "<|channel|>": 7,
    "<|message|>": 8,
    "<|end|>": 9,
    "<|start|>": 10,
    "<|constrain|>": 11,
    "[CALL_ID]": 12,
}
SAMPLES = 6


def as_text(data: bytes) -> str:
    """Generated bytes with each symbol written as its special token's text (the oracle's own
    replacement, independent of `Vocabulary.text_of_symbols`)."""
    for text, i in SPECIAL_IDS.items():
        data = data.replace(special_symbol(i), text.encode())
    assert b"\xff" not in data
    return data.decode("utf-8")


PROPERTY = st.fixed_dictionaries(
    {},
    optional={
        "n": st.just({"type": "integer", "minimum": -5, "maximum": 900}),
        "s": st.just({"type": "string", "maxLength": 6}),
        "b": st.just({"type": "boolean"}),
        "e": st.just({"enum": ["a b", 'q"}', 3]}),
        "o": st.just({"type": "object", "properties": {"x": {"type": "number"}}}),
        "l": st.just({"type": "array", "items": {"type": "integer"}, "maxItems": 3}),
    },
)


@st.composite
def parameters(draw) -> dict:
    properties = draw(PROPERTY)
    required = draw(st.lists(st.sampled_from(sorted(properties) or ["-"]), unique=True))
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    required = [r for r in required if r in properties]
    if required:
        schema["required"] = required
    return schema


def tool(name: str, schema: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": schema}}


FAMILIES = [f for f in FORMATS.values()]
ID_WRITTEN = {  # the oracle: where each family writes a call's id
    "mistral-nemo": r'"id": "([a-zA-Z0-9]{9})"\}',
    "mistral-small": r"\[CALL_ID\]([a-zA-Z0-9]{9})\[ARGS\]",
}


@pytest.mark.parametrize("fmt", FAMILIES, ids=lambda f: f.name)
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schemas=st.lists(parameters(), min_size=1, max_size=2), seed=st.integers(0, 2**16))
def test_every_text_the_grammar_accepts_parses_to_valid_calls(fmt, schemas, seed):
    tools = [tool(f"f_{k}", s) for k, s in enumerate(schemas)]
    rng, np_rng = random.Random(seed), np.random.default_rng(seed)
    if fmt.xml_parameters and any("e" in s["properties"] for s in schemas):
        body = {"messages": [{"role": "user", "content": "Go."}], "tools": tools}
        with pytest.raises(ToolError) as caught:  # a parameter of strings and numbers
            grammar(parse_tool_request(body | {"tool_choice": "required"}), fmt)
        assert caught.value.status == 422 and caught.value.param.endswith("properties.e")
        return
    specials = {t: i for t, i in SPECIAL_IDS.items() if t in fmt.specials}
    choices = [("required", True), ("required", False)]
    choices += [({"type": "function", "function": {"name": "f_0"}}, True)]
    for thinking in {False, fmt.thinking is not None}:
        for choice, parallel in choices:
            body = {"messages": [{"role": "user", "content": "Go."}], "tools": tools}
            body |= {"tool_choice": choice, "parallel_tool_calls": parallel}
            request = parse_tool_request(body)
            dfa = compile_dfa(grammar(request, fmt, specials, thinking))
            most = min(4, fmt.max_calls) if parallel and choice == "required" else 1
            for _ in range(SAMPLES):
                text = as_text(dfa.sample(np_rng))
                if thinking and fmt.thinking.prompt_opens:
                    text_seen = fmt.thinking.open + text
                else:
                    text_seen = text
                cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
                reasoning, content, calls = parsed(fmt, thinking, text, cuts, request.tools)
                assert content is None, text
                assert 1 <= len(calls) <= most, text
                for c in calls:
                    schema = request.tool(c.name).parameters
                    jsonschema.validate(json.loads(c.arguments), schema)
                if choice not in ("required",):
                    assert {c.name for c in calls} == {"f_0"}
                if fmt.call_id:  # every call writes its id; a repeat is replaced by corral's
                    written = re.findall(ID_WRITTEN[fmt.name], text)
                    assert len(written) == len(calls), text
                    ids = [
                        w if w not in written[:k] else f"call_r_{k}" for k, w in enumerate(written)
                    ]
                    assert [c.id for c in calls] == ids, text
                thought = None
                if thinking and fmt.thinking.close in text_seen:  # the oracle: str.partition
                    inside = text_seen.partition(fmt.thinking.close)[0]
                    thought = inside.removeprefix(fmt.thinking.open).strip(" \t\n\r") or None
                assert reasoning == thought, text


@pytest.mark.parametrize("fmt", [MISTRAL_NEMO, MISTRAL_SMALL, DEVSTRAL], ids=lambda f: f.name)
def test_a_special_opener_is_its_symbol_and_auto_needs_no_trigger(fmt):
    """Under auto, a format whose opener is a special token of the model constrains from the
    first token: free text (which never holds a symbol) then optionally the calls, opened by
    the symbol and nowhere else."""
    tools = [tool("f", {"type": "object", "properties": {"a": {"type": "integer"}}})]
    request = parse_tool_request({"messages": [{"role": "user", "content": "Go."}], "tools": tools})
    g = grammar(request, fmt, SPECIAL_IDS)
    assert g.trigger is None
    dfa = compile_dfa(g)
    symbol = special_symbol(SPECIAL_IDS["[TOOL_CALLS]"])
    assert dfa.matches(b"Hi there.")
    assert not dfa.matches(b"Hi " + symbol + b" there.")  # the symbol opens calls only
    assert not dfa.matches(b"Hi " + special_symbol(99) + b" there.")  # no other symbol
    opener = symbol + (b"[" if fmt is MISTRAL_NEMO else b"")
    body = b'{"name": "f", "arguments": {"a":1}, "id": "a1B2c3D4e"}]'
    if fmt is MISTRAL_SMALL:
        body = b"f" + special_symbol(SPECIAL_IDS["[CALL_ID]"]) + b"a1B2c3D4e"
        body += special_symbol(SPECIAL_IDS["[ARGS]"]) + b'{"a":1}'
    if fmt is DEVSTRAL:  # no id
        body = b"f" + special_symbol(SPECIAL_IDS["[ARGS]"]) + b'{"a":1}'
    assert dfa.matches(b"Hi " + opener + body)
    for wrong in (b"a1B2c3D4", b"a1B2c3D4e5", b"a1B2c3_4e"):  # nine alphanumerics, always
        assert fmt is DEVSTRAL or not dfa.matches(
            b"Hi " + opener + body.replace(b"a1B2c3D4e", wrong)
        )


# --- a stream of symbols ----------------------------------------------------------------------

THOUGHT_CALL = (  # Harmony, its markup as symbols of the ids above, a thought, one call
    special_symbol(7)
    + b"analysis"
    + special_symbol(8)
    + "I'm thinking é".encode()
    + special_symbol(9)
    + special_symbol(10)
    + b"assistant"
    + special_symbol(7)
    + b"commentary to=functions.special_function "
    + special_symbol(11)
    + b"json"
    + special_symbol(8)
    + b'{"arg1": 1}'
)


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(0, len(THOUGHT_CALL)), max_size=6).map(sorted))
def test_a_stream_cut_inside_symbols_gives_the_answers_events(cuts):
    """`ChoiceStream` holds a symbol cut short until whole and reads it as its token's text:
    wherever the steps cut the bytes, the deltas fold to the unstreamed answer."""
    vocabulary = Vocabulary([b"a"] + [None] * 12, eos_ids=[0]).with_special_symbols(
        {i: text for text, i in SPECIAL_IDS.items()}
    )
    syntax = HARMONY.parser_syntax(True)
    result = GenerationResult(THOUGHT_CALL, (), (), "stop", 1, 1)
    stream = ChoiceStream("r", (), syntax, vocabulary)
    events = []
    for a, b in zip([0, *cuts], [*cuts, len(THOUGHT_CALL)], strict=True):
        events += stream.feed(THOUGHT_CALL[a:b])
    events += stream.finish(result)
    reasoning, content, calls = collect_turn(events)
    assert (reasoning, content) == ("I'm thinking é", None)
    assert [(c.name, json.loads(c.arguments)) for c in calls] == CALL


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_an_unknown_tool_format_on_the_command_line_is_refused_by_name(command, capsys):
    from corral.tools.cli import main

    with pytest.raises(SystemExit) as caught:  # argparse's refusal, exit status 2
        main([command, "--tool-format", "chatml-xyz"])
    assert caught.value.code == 2
    error = capsys.readouterr().err
    assert "--tool-format" in error and "qwen3-coder" in error  # the known names listed


# --- rendering: ids the template accepts, one call a turn ---------------------------------------

ANY_ID = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(call_id=ANY_ID)
def test_history_ids_are_nine_alphanumerics_and_keep_the_models_own(call_id):
    for fmt in (MISTRAL_NEMO, MISTRAL_SMALL):
        mapped = fmt.history_id(call_id)
        assert re.fullmatch(fmt.call_id, mapped) and fmt.history_id(call_id) == mapped
        if re.fullmatch("[a-zA-Z0-9]{9}", call_id):
            assert mapped == call_id  # an id a Mistral model wrote is kept


def conversation(ids: list[str], order: list[int]) -> dict:
    """A request whose assistant turn calls f_k with id ids[k], answered in `order`."""
    calls = [
        {"id": i, "type": "function", "function": {"name": f"f_{k}", "arguments": f'{{"a": {k}}}'}}
        for k, i in enumerate(ids)
    ]
    results = [{"role": "tool", "tool_call_id": ids[k], "content": f"r{k}"} for k in order]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    tools = [tool(f"f_{k}", schema) for k in range(len(ids))]
    for t in tools:
        t["function"]["description"] = "d"
    messages = [{"role": "user", "content": "Go."}, {"role": "assistant", "tool_calls": calls}]
    messages += [*results, {"role": "assistant", "content": "Done."}]
    return {"messages": messages + [{"role": "user", "content": "More."}], "tools": tools}


@pytest.mark.parametrize("fmt", [MISTRAL_NEMO, MISTRAL_SMALL], ids=lambda f: f.name)
@settings(max_examples=25, deadline=None)
@given(ids=st.lists(ANY_ID, min_size=1, max_size=3, unique=True), data=st.data())
def test_mistral_templates_render_any_ids_as_one_id_per_call(fmt, ids, data):
    """Mistral's templates refuse ids that are not nine alphanumerics: each id of the
    conversation is written as `history_id` maps it, the call's and its result's alike."""
    file = {MISTRAL_NEMO: "mistralai-Mistral-Nemo-Instruct-2407.jinja"}.get(
        fmt, "Mistral-Small-3.2-24B-Instruct-2506.jinja"
    )
    if not TEMPLATES.is_dir():
        pytest.skip(f"the full test data is not at {TEMPLATES.parent.parent}")
    order = data.draw(st.permutations(range(len(ids))))
    request = parse_tool_request(conversation(ids, list(order)))
    prompt = str(
        render_request(
            (TEMPLATES / file).read_text(),
            request,
            turn_format=fmt,
            special_tokens={"bos_token": "<s>", "eos_token": "</s>"},
        )
    )
    for k, i in enumerate(ids):
        mapped = fmt.history_id(i)
        if fmt is MISTRAL_NEMO:
            assert f'"arguments": {{"a": {k}}}, "id": "{mapped}"}}' in prompt
            assert f'{{"content": r{k}, "call_id": "{mapped}"}}' in prompt
        else:
            assert f'f_{k}[CALL_ID]{mapped}[ARGS]{{"a": {k}}}' in prompt
            assert f"[TOOL_RESULTS]{mapped}[TOOL_CONTENT]r{k}[/TOOL_RESULTS]" in prompt


def test_two_ids_that_map_to_one_are_a_400_naming_the_call():
    taken = MISTRAL_NEMO.history_id("call_abc123")  # nine alphanumerics, kept as they are
    request = parse_tool_request(conversation(["call_abc123", taken], [0, 1]))
    with pytest.raises(ToolError) as caught:
        render_request("{{ messages }}", request, turn_format=MISTRAL_NEMO)
    assert caught.value.status == 400 and caught.value.param == "messages[1].tool_calls[1].id"


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 4), data=st.data())
def test_one_call_per_turn_puts_each_result_after_its_call(n, data):
    """A turn of n calls, answered in any order, becomes n turns of one call, each followed by
    its result (the oracle: the pairs in call order), its content on the first."""
    order = data.draw(st.permutations(range(n)))
    ids = [f"call_{k}" for k in range(n)]
    request = parse_tool_request(conversation(ids, list(order)))
    turns = one_call_per_turn(template_turns(request.messages))
    pairs = [
        (t["role"], (t.get("tool_calls") or [{}])[0].get("id") or t.get("tool_call_id"))
        for t in turns
    ]
    expected = [("user", None)] + [p for i in ids for p in (("assistant", i), ("tool", i))]
    assert pairs == expected + [("assistant", None), ("user", None)]


def test_gpt_oss_renders_every_call_of_an_earlier_turn():
    """gpt-oss's template writes only the first call of an assistant turn: each call becomes a
    turn of its own, in the form the template writes (`<|start|>assistant to=functions.N`)."""
    if not TEMPLATES.is_dir():
        pytest.skip(f"the full test data is not at {TEMPLATES.parent.parent}")
    request = parse_tool_request(conversation(["call_a", "call_b"], [1, 0]))
    template = (TEMPLATES / "openai-gpt-oss-120b.jinja").read_text()
    prompt = str(render_request(template, request, turn_format=HARMONY))
    first = prompt.index('to=functions.f_0<|channel|>commentary json<|message|>{"a": 0}<|call|>')
    second = prompt.index('to=functions.f_1<|channel|>commentary json<|message|>{"a": 1}<|call|>')
    assert first < prompt.index('<|message|>"r0"') < second < prompt.index('<|message|>"r1"')


def test_llamas_built_in_tool_names_are_ordinary_functions():
    """corral never gives Llama's template `builtin_tools`: a function named `brave_search` is
    described and called as JSON, like any other (docs/tools.md, "Turn formats")."""
    if not TEMPLATES.is_dir():
        pytest.skip(f"the full test data is not at {TEMPLATES.parent.parent}")
    schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    body = {
        "messages": [{"role": "user", "content": "Go."}],
        "tools": [tool("brave_search", schema)],
    }
    request = parse_tool_request(body | {"tool_choice": "required"})
    template = (TEMPLATES / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    prompt = str(render_request(template, request, turn_format=LLAMA3))
    assert "Tools: brave_search" not in prompt and '"name": "brave_search"' in prompt
    dfa = compile_dfa(grammar(request, LLAMA3))
    assert dfa.matches(b'{"name": "brave_search", "parameters": {"query":"x"}}')
    assert not dfa.matches(b'<|python_tag|>brave_search.call(query="x")')

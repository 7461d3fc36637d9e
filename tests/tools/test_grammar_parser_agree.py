"""The tool grammar and the streaming parser agree (docs/design.md section 5): every text a tool
grammar's DFA accepts, pushed to the parser in random pieces, comes out as calls of the request's
tools whose arguments are JSON objects that validate against the tool's `parameters`, with no
content for a forced call. Checked for every tool_choice (named, required with and without
parallel calls, auto after the trigger, auto with a json_object response_format) over the shared
example schemas, BFCL's sample in tests/data, and hypothesis-built parameter schemas (objects, type
lists, untyped and `{}` schemas, unusual member names); a parameters schema that admits no object
is a 422 naming it.
"""

import json
import random

import jsonschema
import numpy as np
import pytest
from corral.automata import schema_to_dfa
from corral.tools import ToolError, ToolParser, bfcl_tools, collect, compile_dfa, parse_tool_request
from corral.tools.grammar import grammar
from corral.tools.parser import OPENER
from example_schemas import HAND_SCHEMAS, WEATHER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SAMPLES = 12  # texts sampled from each grammar's DFA
PREFIXES = ["", "Sure.\n\n", "a < b <tool_ and <tool_call then "]  # free text before a trigger


def call(arguments: str) -> bytes:
    return f'<tool_call>{{"name":"f","arguments":{arguments}}}</tool_call>'.encode()


def tool(name: str, parameters: dict) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def request(tools: list, **fields):
    body = {"messages": [{"role": "user", "content": "Go."}], "tools": tools, **fields}
    return parse_tool_request(body)


def admits_an_object(parameters: dict) -> bool:
    """The oracle, independent of the grammar's code: the schema's own DFA has an edge on `{`
    from its start state."""
    return schema_to_dfa(parameters).trans[0, ord("{")] >= 0


def pushed(text: str, rng: random.Random):
    """`(content, calls)` of `text` pushed to a fresh parser in 1 to 6 random pieces."""
    cuts = sorted(rng.sample(range(len(text) + 1), min(rng.randint(0, 5), len(text) + 1)))
    parser = ToolParser("r")
    events = []
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        events += parser.push(text[a:b])
    return collect(events + parser.finish())


def check_calls(calls, req, low: int, high: int, names=None) -> None:
    assert low <= len(calls) <= high, calls
    for c in calls:
        assert c.name in (names or {t.name for t in req.tools})
        arguments = json.loads(c.arguments)
        assert isinstance(arguments, dict), c.arguments
        jsonschema.validate(arguments, req.tool(c.name).parameters)


def texts(g, seed: int):
    dfa = compile_dfa(g)
    np_rng = np.random.default_rng(seed)
    return [dfa.sample(np_rng).decode("utf-8") for _ in range(SAMPLES)]


def check_every_tool_choice(tools: list, seed: int = 0) -> int:
    """Run every tool_choice's grammar through the parser (see the module docstring); returns
    the number of texts checked. A tool whose parameters admit no object must be a 422."""
    rng = random.Random(seed)
    bad = [i for i, t in enumerate(tools) if not admits_an_object(t["function"]["parameters"])]
    if bad:
        with pytest.raises(ToolError) as caught:
            grammar(request(tools, tool_choice="required"))
        assert caught.value.status == 422
        assert caught.value.param == f"tools[{bad[0]}].function.parameters"
        tools = [t for i, t in enumerate(tools) if i not in bad]
        if not tools:
            return 0
    checked = 0
    name = tools[0]["function"]["name"]
    named = request(tools, tool_choice={"type": "function", "function": {"name": name}})
    forced = [
        (named, 1, {name}),
        (request(tools, tool_choice="required"), 4, None),
        (request(tools, tool_choice="required", parallel_tool_calls=False), 1, None),
    ]
    for req, most, names in forced:
        for text in texts(grammar(req), seed):
            content, calls = pushed(text, rng)
            assert content is None, text
            check_calls(calls, req, 1, most, names)
            checked += 1
    auto = request(tools)
    g = grammar(auto)
    assert g.trigger == OPENER
    for i, text in enumerate(texts(g, seed)):
        prefix = PREFIXES[i % len(PREFIXES)]
        content, calls = pushed(prefix + OPENER + text, rng)
        assert content == (prefix or None), text
        check_calls(calls, auto, 1, 1)
        checked += 1
    json_auto = request(tools, response_format={"type": "json_object"})
    for text in texts(grammar(json_auto), seed):
        content, calls = pushed(text, rng)
        if text.startswith(OPENER):
            assert content is None, text
            check_calls(calls, json_auto, 1, 1)
        else:
            assert calls == [] and isinstance(json.loads(content), dict), text
        checked += 1
    return checked


# --- the cases of the issue -------------------------------------------------------------------

NOT_ALWAYS_OBJECTS = [
    {},
    {"description": "untyped"},
    {"type": ["object", "null"]},
    {"type": ["null", "object"], "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"anyOf": [{"type": "object", "properties": {"x": {"type": "string"}}}, {"type": "array"}]},
    {"type": ["object", "string", "integer"]},
]


@pytest.mark.parametrize("parameters", NOT_ALWAYS_OBJECTS)
def test_arguments_are_always_an_object(parameters):
    tools = [tool("f", parameters)]
    req = request(tools, tool_choice="required", parallel_tool_calls=False)
    dfa = compile_dfa(grammar(req))
    for arguments in ["null", "5", '"x"', "[]", "true"]:
        assert not dfa.matches(call(arguments))
    assert check_every_tool_choice(tools) > 0


def test_untyped_parameters_take_any_object_nested_a_few_levels():
    req = request([tool("f", {"description": "anything"})], tool_choice="required")
    dfa = compile_dfa(grammar(req))
    for arguments in ["{}", '{"a":1}', '{"a":{"b":[null,"x"]}}', '{"a":{"b":{"c":1}}}']:
        assert dfa.matches(call(arguments))


@pytest.mark.parametrize(
    "parameters", [{"type": "string"}, {"type": "integer"}, {"type": ["null", "array"]}]
)
def test_parameters_that_admit_no_object_are_a_422_naming_them(parameters):
    tools = [WEATHER, tool("f", parameters)]
    for choice in ("required", "auto", {"type": "function", "function": {"name": "f"}}):
        with pytest.raises(ToolError) as caught:
            grammar(request(tools, tool_choice=choice))
        assert (caught.value.status, caught.value.code) == (422, "unsupported_parameter")
        assert caught.value.param == "tools[1].function.parameters"
        assert "no JSON object" in caught.value.message
    # a named call of another tool does not compile f's schema
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert grammar(request(tools, tool_choice=named)) is not None


# --- the shared examples and BFCL's sample ------------------------------------------------------


def test_the_shared_example_schemas_as_parameters():
    schemas = [s for s in HAND_SCHEMAS if isinstance(s, dict)]
    checked = 0
    for i, parameters in enumerate(schemas):
        checked += check_every_tool_choice([tool("f", parameters), WEATHER], seed=i)
    assert checked > 100


def bfcl_tool_sets(sample_data) -> list[list]:
    """The first entries of each BFCL file in tests/data whose schemas the subset takes."""
    sets = []
    for path in sorted((sample_data / "bfcl").glob("*.jsonl")):
        taken = 0
        for line in path.read_text(encoding="utf-8").splitlines():
            tools = bfcl_tools(json.loads(line)["function"])
            try:
                grammar(request(tools, tool_choice="required"))
            except ToolError:
                continue
            sets.append(tools)
            taken += 1
            if taken == 4:
                break
    return sets


def test_bfcl_tools(sample_data):
    sets = bfcl_tool_sets(sample_data)
    assert len(sets) >= 10, "too few BFCL entries in tests/data to check"
    assert sum(check_every_tool_choice(tools, seed=i) for i, tools in enumerate(sets)) > 500


# --- hypothesis-built parameters ---------------------------------------------------------------

LEAVES = [
    {"type": "string"},
    {"type": "string", "maxLength": 3},
    {"type": "integer", "minimum": -3},
    {"type": "number"},
    {"type": "boolean"},
    {"type": ["string", "null"]},
    {"enum": ["a", 1, None]},
    {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
    {},
]
NAMES = st.sampled_from(["a", "b", "city", "é", 'q"uote', "back\\slash", "</tool_call>", "{"])
OBJECT_TYPES = [
    {"type": "object"},
    {"type": ["object", "null"]},
    {"type": ["string", "object"]},
    {"type": ["object", "array"]},
    {},
]


@st.composite
def parameters(draw) -> dict:
    kind = draw(st.sampled_from(["object", "object", "object", "anyOf", "bare", "no object"]))
    if kind == "bare":
        return draw(st.sampled_from([{}, {"description": "x"}, {"type": ["object", "null"]}]))
    if kind == "no object":
        return draw(st.sampled_from([{"type": "integer"}, {"type": ["null", "string"]}]))
    names = draw(st.lists(NAMES, max_size=3, unique=True))
    properties = {n: draw(st.sampled_from(LEAVES)) for n in names}
    required = [n for n in names if draw(st.booleans())]
    schema = {**draw(st.sampled_from(OBJECT_TYPES)), "properties": properties}
    if required:
        schema["required"] = required
    if kind == "anyOf":
        return {"anyOf": [schema, draw(st.sampled_from(LEAVES))]}
    return schema


@settings(
    max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(schemas=st.lists(parameters(), min_size=1, max_size=3), seed=st.integers(0, 2**16))
def test_random_parameters(schemas, seed):
    tools = [tool(f"f{i}", s) for i, s in enumerate(schemas)]
    check_every_tool_choice(tools, seed)

"""Many tools (docs/tools.md, "Many tools: stitched grammars"): a tool-call grammar compiles the
envelope and the names as one DFA and each tool's arguments as their own (`Piece`, cached across
grammars), stitched into one table (`corral.automata.stitch`).

- Differential, on random small tool lists under every tool_choice: the stitched DFA, minimized,
  is the canonical DFA of the whole grammar's tree compiled at once (the old way), and a tool
  list sharing a tool with an earlier one reuses that tool's piece.
- 48 tools of one integer and one short string, and 128 BFCL tools, compile under required,
  a named tool and auto; texts sampled from the DFA are calls whose arguments validate with
  `jsonschema`.
- SmolLM2's vocabulary with random logits (a random model) makes valid calls with 128 tools.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import tree_to_dfa
from corral.automata.minimize import minimize, number_breadth_first
from corral.tools import ToolError, bfcl_tools, collect, parse_text, parse_tool_request
from corral.tools.grammar import Piece, compile_dfa, grammar, piece_dfa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

IDENTITY = np.arange(256, dtype=np.int32)
MESSAGES = [{"role": "user", "content": "Go."}]

properties = st.dictionaries(
    st.sampled_from(["a", "b", "ab"]),
    st.sampled_from(
        [
            {"type": "integer"},
            {"type": "boolean"},
            {"type": "string", "maxLength": 2},
            {"enum": ["x", 1]},
            {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
        ]
    ),
    max_size=2,
)
parameters = properties.flatmap(
    lambda props: st.builds(
        lambda required: {"type": "object", "properties": props, "required": required},
        st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]),
    )
)
tool_lists = st.lists(
    st.tuples(st.text("fg", min_size=1, max_size=3), parameters),
    min_size=1,
    max_size=4,
    unique_by=lambda t: t[0],
).map(
    lambda tools: [{"type": "function", "function": {"name": n, "parameters": p}} for n, p in tools]
)


def request_of(tools, choice, **fields):
    return parse_tool_request(
        {"messages": MESSAGES, "tools": tools, "tool_choice": choice, **fields}
    )


def canonical(dfa):
    trans, accept = minimize(dfa.trans, dfa.accept)
    return number_breadth_first(trans, accept, IDENTITY)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool_lists, st.sampled_from(["required", "named", "auto"]), st.booleans(), st.data())
def test_the_stitched_grammar_is_the_grammar_compiled_at_once(tools, choice, parallel, data):
    if choice == "named":
        name = data.draw(st.sampled_from([t["function"]["name"] for t in tools]))
        choice = {"type": "function", "function": {"name": name}}
    fields = {"parallel_tool_calls": parallel}
    if data.draw(st.booleans()):
        schema = {"type": "object", "properties": {"r": {"type": "integer"}}}
        fields["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": schema},
        }
    g = grammar(request_of(tools, choice, **fields))
    stitched = compile_dfa(g)
    expected = tree_to_dfa(g.tree)  # the whole grammar in one compile, as before pieces
    result = canonical(stitched)
    assert np.array_equal(result.trans, expected.trans)
    assert np.array_equal(result.accept, expected.accept)
    # another tool list with these tools reuses their pieces, each compiled once
    before = {id(piece_dfa(p)) for p in pieces_of(g.expression)}
    other = grammar(request_of(tools[::-1], "required", parallel_tool_calls=False))
    assert before <= {id(piece_dfa(p)) for p in pieces_of(other.expression)}


def pieces_of(e) -> list[Piece]:
    """The `Piece`s of an expression."""
    if isinstance(e, Piece):
        return [e]
    parts = getattr(e, "parts", None) or getattr(e, "options", None) or ()
    if hasattr(e, "part"):
        parts = (e.part,)
    return [p for part in parts for p in pieces_of(part)]


def forty_eight_small_tools():
    """The issue's case: 48 tools of one integer and one short string each."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"count_{i}": {"type": "integer"},
                        f"label_{i}": {"type": "string", "maxLength": 12},
                    },
                    "required": [f"count_{i}", f"label_{i}"],
                },
            },
        }
        for i in range(48)
    ]


def bfcl_128(sample_data):
    """128 BFCL tools: the distinct functions of the sample's BFCL files (65), then the same
    again with the name and each top-level parameter suffixed `_2`, as many as make 128."""
    seen = {}
    for path in sorted((sample_data / "bfcl").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for function in json.loads(line)["function"]:
                seen.setdefault(function["name"], function)
    tools = bfcl_tools(list(seen.values()))
    for tool in list(tools):
        f = tool["function"]
        p = f["parameters"]
        renamed = {k + "_2": v for k, v in p.get("properties", {}).items()}
        required = [k + "_2" for k in p.get("required", [])]
        parameters = {**p, "properties": renamed, "required": required}
        tools.append(
            {
                "type": "function",
                "function": {**f, "name": f["name"] + "_2", "parameters": parameters},
            }
        )
    assert len(tools) >= 128
    return tools[:128]


def check_samples(request, dfa, seed, n=30):
    """`n` texts sampled from `dfa` parse into calls of the request's tools whose arguments
    validate against their parameters."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        text = dfa.sample(rng, 0.5).decode("utf-8")
        if not text.startswith("<tool_call>"):
            text = "<tool_call>" + text  # auto: the constraint starts after the trigger
        content, calls = collect(parse_text(text))
        assert content is None and calls, text
        for call in calls:
            parameters = request.tool(call.name).parameters
            jsonschema.validate(json.loads(call.arguments), parameters)


@pytest.mark.parametrize("choice", ["required", "named", "auto"])
@pytest.mark.parametrize("tools", ["48 small", "128 BFCL"])
def test_many_tools_compile_under_every_tool_choice(sample_data, tools, choice):
    tools = forty_eight_small_tools() if tools == "48 small" else bfcl_128(sample_data)
    if choice == "named":
        choice = {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
    request = request_of(tools, choice)
    dfa = compile_dfa(grammar(request))
    check_samples(request, dfa, 7)


@pytest.fixture(scope="module")
def engine(smollm2):
    from corral.tools.completions import Completions

    return Completions(smollm2)


@pytest.mark.slow
@pytest.mark.parametrize("choice", ["required", "named", "auto"])
def test_a_random_model_makes_valid_calls_with_128_tools(engine, sample_data, choice):
    """SmolLM2's vocabulary, Gaussian logits: under auto the walk starts after the trigger."""
    from corral.kernels import Constraint, SamplingParams, constrained_sample

    tools = bfcl_128(sample_data)
    if choice == "named":
        choice = {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
    request = request_of(tools, choice)
    g = grammar(request)
    index = engine.compiler.index(g)
    rng = np.random.default_rng(5)
    names = set()
    for _ in range(6):
        constraint = Constraint(index)
        ids = []
        while not constraint.done:
            logits = rng.standard_normal(index.vocabulary.size, dtype=np.float32) * np.float32(3)
            left = max(constraint.tokens_to_complete(), 1) if len(ids) >= 256 else None
            token, _ = constrained_sample(
                logits, constraint, SamplingParams(), rng, tokens_left=left
            )
            constraint.advance(token)
            ids.append(token)
        text = (g.trigger or "") + index.vocabulary.decode(ids).decode("utf-8")
        content, calls = collect(parse_text(text))
        assert content is None and 1 <= len(calls) <= 4, text
        for call in calls:
            jsonschema.validate(json.loads(call.arguments), request.tool(call.name).parameters)
            names.add(call.name)
    assert len(names) > 1 or isinstance(choice, dict)  # the calls are not all of one tool


@pytest.mark.slow
def test_smollm2_makes_a_valid_call_with_128_tools(engine, smollm2, sample_data):
    """The engine end to end (jump-forward, the budget rule) on the 128-tool grammar; the
    prompt is short, as 128 definitions do not fit SmolLM2's 8,192-token context."""
    from corral.kernels import Constraint
    from corral.model.generate import generate
    from corral.model.generation_request import GenerationRequest

    request = request_of(bfcl_128(sample_data), "required")
    prompt = smollm2.tokenizer.encode("Call a tool to find the area of a circle of radius 3:")
    index = engine.compiler.index(grammar(request))
    (result,) = generate(smollm2, [GenerationRequest(prompt, 160, constraint=Constraint(index))])
    assert result.finish_reason == "stop", result
    content, calls = collect(parse_text(result.text))
    assert content is None and calls, result.text
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), request.tool(call.name).parameters)


def test_a_tool_past_the_state_limit_is_a_422_naming_that_tool():
    tools = forty_eight_small_tools()[:3]
    huge = {"type": "string", "pattern": "^[ab]*a[ab]{16}$"}  # 2^17 DFA states alone
    tools[1]["function"]["parameters"]["properties"]["count_1"] = huge
    with pytest.raises(ToolError) as info:
        compile_dfa(grammar(request_of(tools, "required")))
    assert (info.value.status, info.value.param) == (422, "tools[1].function.parameters")


def test_a_stitched_table_past_its_bound_is_a_422_naming_the_tools(monkeypatch):
    import corral.tools.grammar as tool_grammar
    from corral.automata.stitch import stitch

    monkeypatch.setattr(tool_grammar, "stitch", lambda e, p: stitch(e, p, max_states=1000))
    with pytest.raises(ToolError) as info:
        compile_dfa(grammar(request_of(forty_eight_small_tools(), "required")))
    assert (info.value.status, info.value.param) == (422, "tools")
    assert "max_stitched_states=1000" in info.value.message

"""Forced calls from a model with random logits (docs/design.md sections 4 and 5:
a forced call from a random model is valid).

Whatever the logits, text sampled under a forced tool_choice's grammar holds calls that the parser
extracts and whose arguments validate against the tool's parameters. The vocabulary is
SmolLM2's real one (49152 tokens, multi-byte and UTF-8 tokens, specials), the logits are fresh
Gaussian noise at every step; grammars go through the engine's `GrammarCompiler`.
"""

import json

import jsonschema
import numpy as np
import pytest
from corral.kernels import Constraint, SamplingParams, TokenIndex, constrained_sample
from corral.tools import bfcl_tools, collect, grammar, parse_text, parse_tool_request
from corral.tools.completions import Completions
from example_schemas import WEATHER

pytestmark = pytest.mark.slow

WALKS = 40
BUDGET = 256  # tokens; past it the walk steers towards the end, as an engine near max_tokens does


@pytest.fixture(scope="module")
def engine(smollm2):
    return Completions(smollm2)


KINDS = ('"float"', '"array"', '"enum"', '"string"', '"boolean"')


def bfcl_three_tools(sample_data):
    """The first three functions of the first BFCL `multiple` entry whose three functions use
    between them floats, arrays, enums, strings and booleans, converted to OpenAI tools (read
    from the sample in tests/data, which keeps that entry, multiple_117, of the full data)."""
    with open(sample_data / "bfcl" / "BFCL_v4_multiple.jsonl", encoding="utf-8") as lines:
        for line in lines:
            functions = json.loads(line)["function"][:3]
            if len(functions) == 3 and all(kind in json.dumps(functions) for kind in KINDS):
                return bfcl_tools(functions)
    raise AssertionError("no BFCL entry with three such functions")


def walk(index: TokenIndex, rng: np.random.Generator) -> str:
    """Sample one answer under the grammar from random logits; return its text. Past `BUDGET`
    tokens every step brings a complete answer one token closer (the token budget rule)."""
    constraint = Constraint(index)
    params = SamplingParams(temperature=1.0)
    ids = []
    while not constraint.done:
        logits = rng.standard_normal(index.vocabulary.size, dtype=np.float32) * np.float32(3)
        left = max(constraint.tokens_to_complete(), 1) if len(ids) >= BUDGET else None
        token, _ = constrained_sample(logits, constraint, params, rng, tokens_left=left)
        constraint.advance(token)
        ids.append(token)
    assert constraint.is_complete()
    return index.vocabulary.decode(ids).decode("utf-8")


def check_walks(engine, request, seed):
    """`WALKS` answers of a forced request; returns the number of calls of each."""
    g = grammar(request)
    assert g.trigger is None
    index = engine.compiler.index(g)
    names = {tool.name for tool in request.tools}
    rng = np.random.default_rng(seed)
    counts = []
    for i in range(WALKS):
        text = walk(index, rng)
        content, calls = collect(parse_text(text, f"walk{i}"))
        assert content is None, text
        assert 1 <= len(calls) <= (4 if request.parallel_tool_calls else 1), text
        for n, call in enumerate(calls):
            assert call.id == f"call_walk{i}_{n}"
            assert call.name in names
            arguments = json.loads(call.arguments)
            jsonschema.validate(arguments, request.tool(call.name).parameters)
        counts.append(len(calls))
    return counts


def test_forced_call_from_a_random_model_is_valid(engine):
    request = parse_tool_request(
        {
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        }
    )
    assert check_walks(engine, request, 1) == [1] * WALKS


@pytest.mark.parametrize("parallel", [True, False])
def test_required_call_with_three_bfcl_tools_from_a_random_model_is_valid(
    engine, sample_data, parallel
):
    request = parse_tool_request(
        {
            "messages": [{"role": "user", "content": "Go."}],
            "tools": bfcl_three_tools(sample_data),
            "tool_choice": "required",
            "parallel_tool_calls": parallel,
        }
    )
    counts = check_walks(engine, request, 2 if parallel else 3)
    if parallel:
        assert max(counts) > 1  # parallel calls (the default) do occur
    else:
        assert counts == [1] * WALKS


@pytest.mark.parametrize(
    "parameters", [{"description": "anything"}, {"type": ["object", "null"]}, {"type": "object"}]
)
def test_forced_calls_with_loose_parameters_are_calls_with_object_arguments(engine, parameters):
    """Arguments are always a JSON object, so every forced answer is a call the parser takes
    (before, `null`, `5` or `[]` arguments came back as plain text with no tool_calls)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    messages = [{"role": "user", "content": "Go."}]
    request = parse_tool_request({"messages": messages, "tools": [tool], "tool_choice": "required"})
    assert min(check_walks(engine, request, 4)) >= 1

"""Forced calls from a model with random logits (DESIGN.md sections 4 and 5; tool-calls-spec
section 4: forced_call_from_a_random_model_is_valid).

Whatever the logits, text sampled under a forced tool_choice's grammar holds calls that the parser
extracts and whose arguments validate against the tool's parameters. The vocabulary is
SmolLM2's real one (49152 tokens, multi-byte and UTF-8 tokens, specials), the logits are fresh
Gaussian noise at every step.
"""

import json

import jsonschema
import numpy as np
import pytest
from corral.kernels import (
    Constraint,
    SamplingParams,
    TokenIndex,
    Vocabulary,
    constrained_sample,
    sample,
)
from corral.tools import (
    bfcl_tools,
    collect,
    grammar,
    parse_text,
    parse_tool_request,
    vocab_bytes,
)

pytestmark = pytest.mark.slow

WALKS = 40
BUDGET = 256  # tokens; past it the walk steers towards the end, as an engine near max_tokens does

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def vocabulary(smollm2):
    return Vocabulary(tuple(vocab_bytes(smollm2, smollm2.eos_ids)), smollm2.eos_ids)


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


def walk(index: TokenIndex, vocabulary: Vocabulary, rng: np.random.Generator) -> str:
    """Sample one answer under the grammar from random logits; return its text."""
    constraint = Constraint(index)
    params = SamplingParams(temperature=1.0)
    ids = []
    while not constraint.done:
        logits = rng.standard_normal(vocabulary.size, dtype=np.float32) * np.float32(3)
        mask = None
        if len(ids) >= BUDGET:
            for distance in (constraint.distance - 1, constraint.distance):
                candidate = constraint.mask(max_distance=max(distance, 0))
                if candidate.any():
                    mask = candidate
                    break
        if mask is None:
            token, _ = constrained_sample(logits, constraint, params, rng)
        else:
            token, _ = sample(logits, params, rng, mask)
        constraint.advance(token)
        ids.append(token)
    assert constraint.is_complete()
    return vocabulary.decode(ids).decode("utf-8")


def check_walks(request, vocabulary, seed, names):
    g = grammar(request)
    assert g.trigger is None
    index = TokenIndex(g.dfa(), vocabulary)
    rng = np.random.default_rng(seed)
    counts = []
    for i in range(WALKS):
        text = walk(index, vocabulary, rng)
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


def test_forced_call_from_a_random_model_is_valid(vocabulary):
    request = parse_tool_request(
        {
            "messages": [{"role": "user", "content": "Weather?"}],
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        }
    )
    counts = check_walks(request, vocabulary, 1, {"get_weather"})
    assert counts == [1] * WALKS


def test_required_call_with_three_bfcl_tools_from_a_random_model_is_valid(vocabulary, sample_data):
    tools = bfcl_three_tools(sample_data)
    request = parse_tool_request(
        {
            "messages": [{"role": "user", "content": "Go."}],
            "tools": tools,
            "tool_choice": "required",
        }
    )
    counts = check_walks(request, vocabulary, 2, {t["function"]["name"] for t in tools})
    assert max(counts) > 1  # parallel calls (the default) do occur


def test_required_single_call_with_three_bfcl_tools_is_valid(vocabulary, sample_data):
    tools = bfcl_three_tools(sample_data)
    request = parse_tool_request(
        {
            "messages": [{"role": "user", "content": "Go."}],
            "tools": tools,
            "tool_choice": "required",
            "parallel_tool_calls": False,
        }
    )
    counts = check_walks(request, vocabulary, 3, {t["function"]["name"] for t in tools})
    assert counts == [1] * WALKS

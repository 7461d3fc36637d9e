"""Whatever the logits, constrained output parses and satisfies its schema (docs/design.md section
4). Walks with random logits at temperature 1 through each schema's index end in EOS, and their text
passes `json.loads` and `jsonschema`. The schemas: a set of this module's, and the hand-made
schemas shared with the schema compiler's tests (`example_schemas.HAND_SCHEMAS`)."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import schema_to_dfa
from corral.kernels import (
    Constraint,
    SamplingParams,
    TokenIndex,
    Vocabulary,
    constrained_sample,
)
from example_schemas import HAND_SCHEMAS

STRING = {"type": "string"}
INTEGER = {"type": "integer"}
SCHEMAS = {
    "city": {"type": "object", "properties": {"city": STRING}, "required": ["city"]},
    "tool call": {
        "type": "object",
        "properties": {
            "name": {"const": "get_weather"},
            "arguments": {
                "type": "object",
                "properties": {
                    "city": STRING,
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                    "days": INTEGER,
                },
                "required": ["city", "unit"],
            },
        },
        "required": ["name", "arguments"],
    },
    "twelve properties": {
        "type": "object",
        "properties": {
            "id": INTEGER,
            "name": STRING,
            "email": STRING,
            "age": INTEGER,
            "score": {"type": "number"},
            "active": {"type": "boolean"},
            "role": {"enum": ["admin", "editor", "viewer"]},
            "tags": {"type": "array", "items": STRING, "minItems": 1, "maxItems": 5},
            "address": {
                "type": "object",
                "properties": {"street": STRING, "zip": STRING},
                "required": ["street"],
            },
            "manager": {"type": ["string", "null"]},
            "created": STRING,
            "notes": STRING,
        },
        "required": ["id", "name", "role", "tags"],
    },
    "integer": INTEGER,
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "null": {"type": "null"},
    "string": STRING,
    "enum": {"enum": ["red", "green", 1, None, True, "日本", {"a": [1]}]},
    "const": {"const": {"a": [1, 2.5, 'x"y']}},
    "array bounds": {"type": "array", "items": INTEGER, "minItems": 2, "maxItems": 4},
    "array": {"type": "array", "items": {"type": "number"}},
    "any of": {"anyOf": [STRING, INTEGER, {"type": "array", "items": {"type": "boolean"}}]},
    "type list": {"type": ["string", "null", "integer"]},
    "all optional": {
        "type": "object",
        "properties": {"x": INTEGER, "y": STRING, "z": {"type": "boolean"}},
        "additionalProperties": False,
    },
    "no properties": {"type": "object"},
    "nested": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"sku": STRING, "qty": INTEGER},
                    "required": ["sku", "qty"],
                },
                "maxItems": 3,
            }
        },
        "required": ["items"],
    },
}


def synthetic_vocabulary() -> Vocabulary:
    """Every single byte, JSON punctuation pieces, words, numbers, whole UTF-8 characters and
    pieces of them, duplicates, specials, and an EOS: any text can be spelled, and many ways."""
    pieces = [bytes([b]) for b in range(256)]
    pieces += [s.encode() for s in ['{"', '":"', '","', '"}', '":', ',"', '"]', '["', "[", "]}"]]
    pieces += [s.encode() for s in ["true", "false", "null", "nu", "ll", "0", "12", "-3", ".5"]]
    pieces += [s.encode() for s in ["e+", "E-1", "city", "name", "Paris", " the", "\\n", '\\"']]
    pieces += [s.encode() for s in ["\\u00e9", "\\u", "é", "日本", "€", "😀", 'x"', '"x']]
    pieces += [b"\xc3", b"\xa9", b"\xe6\x97", b"\xf0\x9f", b"\x98\x80", b'{"a":[1,', b"{}"]
    pieces += [b"get_weather", b"celsius", b"fahren", b"heit", b"admin", b"role", b"tags"]
    pieces += [b"\x00", b"\x1f", b"\x7f", b"\xff"]  # duplicates of single bytes
    return Vocabulary.from_list([*pieces, None, b"", None], eos_ids=[len(pieces) + 2])


VOCABULARY = synthetic_vocabulary()


def walk(
    index, seed: int, max_steps: int = 5000, steer_after: int | None = None
) -> tuple[bytes, list[float]]:
    """Sample with random logits at temperature 1 until the constraint is done (each step's
    logits are one of 16 random rows, drawn at random, scaled by a random factor). After
    `steer_after` steps, only tokens that bring acceptance at least one token closer are allowed
    (the engine's budget rule, `Constraint.mask(tokens_left)`, with as few tokens left as the
    answer needs), so the walk ends within `tokens_to_complete()` more steps."""
    rng = np.random.default_rng(seed)
    bank = rng.standard_normal((16, index.vocabulary.size)).astype(np.float32)
    constraint = Constraint(index)
    output, logprobs = [], []
    params = SamplingParams(temperature=1.0)
    for _ in range(max_steps):
        if constraint.done:
            break
        logits = bank[rng.integers(16)] * np.float32(rng.uniform(0.5, 3))
        left = None
        if steer_after is not None and len(output) >= steer_after:
            left = max(constraint.tokens_to_complete(), 1)
        token, logprob = constrained_sample(logits, constraint, params, rng, (), output, left)
        constraint.advance(token)
        output.append(token)
        logprobs.append(logprob)
    assert constraint.done, "the walk did not end"
    assert constraint.is_complete()
    return index.vocabulary.decode(output), logprobs


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_constrained_output_always_parses(name):
    schema = SCHEMAS[name]
    index = TokenIndex(schema_to_dfa(schema), VOCABULARY)
    for seed in range(25):
        text, logprobs = walk(index, seed)
        value = json.loads(text.decode("utf-8"))
        jsonschema.validate(value, schema)
        assert all(lp <= 1e-6 and np.isfinite(lp) for lp in logprobs)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tool call", "twelve properties", "nested"])
def test_constrained_output_parses_on_the_smollm2_vocabulary(name, smollm2):
    vocabulary, _ = smollm2
    schema = SCHEMAS[name]
    index = TokenIndex(schema_to_dfa(schema), vocabulary)
    for seed in range(5):
        # A random walk over 49,152 tokens stays in a string for thousands of steps (few tokens
        # hold a quote): steer to the end after 100 steps.
        text, _ = walk(index, seed, steer_after=100)
        jsonschema.validate(json.loads(text.decode("utf-8")), schema)


def validate(value, schema) -> None:
    """jsonschema validation, formats included (those the installed checkers know)."""
    cls = jsonschema.validators.validator_for(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)


def test_the_shared_schema_set_is_there():
    """The parametrized test below must not silently run zero cases."""
    assert len(HAND_SCHEMAS) >= 30


@pytest.mark.parametrize("number", range(len(HAND_SCHEMAS)))
def test_constrained_output_always_parses_for_the_hand_made_schemas(number):
    schema = HAND_SCHEMAS[number]
    index = TokenIndex(schema_to_dfa(schema), VOCABULARY)
    for seed in range(25):
        # Steered after 300 steps so that long string and array loops end in test time.
        text, _ = walk(index, seed, steer_after=300)
        validate(json.loads(text.decode("utf-8")), schema)

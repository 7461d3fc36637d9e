"""`RowConstraints`'s budget under a host engine's stopping rule, without the engine: the loop of
llama-cpp-python's `create_completion` and of transformers' `generate` (stop when EOS is sampled,
else after `max_new_tokens` tokens, EOS counted), sampling uniformly among the allowed tokens of
SmolLM2's vocabulary. Whenever the budget holds the grammar's shortest answer and its EOS, the
answer ends with EOS (finish_reason `stop`) within it, and validates with `re.fullmatch` /
`jsonschema`, independent of corral's compiler."""

from __future__ import annotations

import functools
import json
import re

import jsonschema
import numpy as np
import pytest
from corral.integrations.rows import RowConstraints, grammar_index
from corral.kernels import Constraint, TokenIndex
from corral.model.loading import default_gguf
from corral.model.vocabulary import vocabulary_from_gguf
from hypothesis import given, settings
from hypothesis import strategies as st

GRAMMARS = {
    "pets": ("regex", r"(yes|no), [0-9]{1,2} (cats|dogs)"),
    "words": ("regex", r"[a-z]+( [a-z]+)*"),
    "number": ("regex", r"[0-9]{1,3}"),
    "trip": (
        "schema",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "days": {"type": "integer"},
            },
            "required": ["city", "days"],
        },
    ),
    "integers": ("schema", {"type": "array", "items": {"type": "integer"}}),
}
PROMPT = [1, 2, 3]  # any ids: the prompt is not constrained


@functools.cache
def index(name: str) -> TokenIndex:
    kind, grammar = GRAMMARS[name]
    vocabulary = vocabulary_from_gguf(default_gguf())
    return grammar_index(vocabulary, **{kind: grammar})


def host_run(rows: RowConstraints, max_new_tokens: int, seed: int) -> tuple[bytes, str]:
    """(the answer's bytes, finish_reason) of one row generated as llama.cpp and `generate` do:
    each step samples an allowed token; EOS ends the answer (`stop`), else it is appended, and
    `max_new_tokens` tokens end it (`length`)."""
    rng = np.random.default_rng(seed)
    vocabulary = rows.vocabulary
    ids = list(PROMPT)
    for _ in range(max_new_tokens):
        allowed = rows.allowed(np.array([ids]), vocabulary.size)[0]
        token = int(rng.choice(np.flatnonzero(allowed)))
        if token in vocabulary.eos_ids:
            return _text(vocabulary, ids), "stop"
        ids.append(token)
    return _text(vocabulary, ids), "length"


def _text(vocabulary, ids: list[int]) -> bytes:
    return b"".join(vocabulary.tokens[t] for t in ids[len(PROMPT) :])


def valid(name: str, text: bytes) -> bool:
    kind, grammar = GRAMMARS[name]
    if kind == "regex":
        return re.fullmatch(grammar.encode(), text) is not None
    try:
        jsonschema.validate(json.loads(text), grammar)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(GRAMMARS)),
    slack=st.integers(0, 24),
    seed=st.integers(0, 2**32 - 1),
)
def test_an_answer_that_fits_ends_with_eos(name, slack, seed):
    shortest = Constraint(index(name)).tokens_to_complete()  # text tokens, EOS not counted
    max_new_tokens = shortest + 1 + slack
    text, finish_reason = host_run(
        RowConstraints([index(name)], max_new_tokens), max_new_tokens, seed
    )
    assert finish_reason == "stop", (max_new_tokens, text)
    assert valid(name, text), text


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_a_budget_without_room_for_eos_cuts_the_answer(name):
    shortest = Constraint(index(name)).tokens_to_complete()
    for max_new_tokens in range(1, shortest + 1):
        rows = RowConstraints([index(name)], max_new_tokens)
        assert host_run(rows, max_new_tokens, seed=max_new_tokens)[1] == "length"


SCHEMAS = [g for kind, g in GRAMMARS.values() if kind == "schema"] + [
    True,
    {"enum": ["a", 1, None]},
    {"type": "string", "pattern": "^[a-c]{2}$"},
]


@settings(max_examples=20, deadline=None)
@given(schema=st.sampled_from(SCHEMAS), indent=st.sampled_from([None, 0, 2, "\t"]))
def test_a_schema_as_json_text_is_the_schema_it_spells(schema, indent):
    vocabulary = index("number").vocabulary
    text = json.dumps(schema, indent=indent)
    from_text, from_value = (grammar_index(vocabulary, schema=s).dfa for s in (text, schema))
    assert np.array_equal(from_text.trans, from_value.trans)  # canonical: equal languages,
    assert np.array_equal(from_text.accept, from_value.accept)  # equal tables


@pytest.mark.parametrize("text", ["{nope", '{"type": "string"', "", "[1, 2", "{} {}"])
def test_a_schema_text_that_is_not_json_is_a_value_error_naming_schema(text):
    vocabulary = index("number").vocabulary
    with pytest.raises(ValueError, match=r"^schema is not JSON text: .*line \d+ column \d+"):
        grammar_index(vocabulary, schema=text)

"""The last attempt after the NFA state limit (`SchemaLimits.narrowed`,
`corral.automata.schema.compiler.compile_schema`): string and array bounds lowered to the
fallback caps, a sub-language of the schema's valid instances."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import TooManyDfaStatesError, TooManyNfaStatesError, schema_to_dfa
from corral.automata.limits import Limits, SchemaLimits
from corral.automata.schema import compiler
from corral.automata.schema.keywords import bounds_above

EVENT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 200},
        "tags": {"type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 20}},
        "count": {"type": "integer"},
    },
    "required": ["name"],
}
SMALL_NFA = Limits(max_nfa_states=5_000)  # EVENT: 25,440 NFA states; 4,104 narrowed


def test_past_the_nfa_limit_a_schema_compiles_with_the_fallback_caps():
    no_fallback = SchemaLimits(fallback_string_length=256, fallback_array_length=64)
    with pytest.raises(TooManyNfaStatesError):
        schema_to_dfa(EVENT, SMALL_NFA, no_fallback)
    dfa = schema_to_dfa(EVENT, SMALL_NFA)
    expected = schema_to_dfa(EVENT, schema_limits=SchemaLimits().narrowed(False))
    assert np.array_equal(dfa.trans, expected.trans)
    assert np.array_equal(dfa.accept, expected.accept)
    assert dfa.matches(json.dumps({"name": "x" * 32}, separators=(",", ":")).encode())
    assert not dfa.matches(json.dumps({"name": "x" * 33}, separators=(",", ":")).encode())
    rng = np.random.default_rng(1)
    for _ in range(100):
        value = json.loads(dfa.sample(rng))
        jsonschema.validate(value, EVENT)
        assert len(value["name"]) <= 32 and len(value.get("tags", [])) <= 8


def test_the_fallback_is_not_tried_after_the_dfa_limit(monkeypatch):
    made = []
    real = compiler.Compiler
    monkeypatch.setattr(compiler, "Compiler", lambda *a: made.append(a) or real(*a))
    with pytest.raises(TooManyDfaStatesError):
        schema_to_dfa(EVENT, Limits(max_dfa_states=100))
    assert len(made) == 1


def test_the_fallback_is_not_tried_when_it_changes_nothing(monkeypatch):
    schema = {"type": "array", "maxItems": 8, "items": {"type": "string", "maxLength": 30}}
    made = []
    real = compiler.Compiler
    monkeypatch.setattr(compiler, "Compiler", lambda *a: made.append(a) or real(*a))
    with pytest.raises(TooManyNfaStatesError):
        schema_to_dfa(schema, Limits(max_nfa_states=100))
    assert len(made) == 1


def test_a_fallback_that_fails_too_raises_the_first_error():
    with pytest.raises(TooManyNfaStatesError) as info:
        schema_to_dfa(EVENT, Limits(max_nfa_states=50))
    assert info.value.limit == "max_nfa_states"


def test_narrowed_lowers_only_the_caps_and_the_unrolling_after_recursion():
    limits = SchemaLimits(max_depth=9, max_string_length=100, max_array_length=4)
    assert limits.narrowed(False) == SchemaLimits(
        max_depth=9, max_string_length=32, max_array_length=4
    )
    assert limits.narrowed(True).max_recursion == 1


@pytest.mark.parametrize(
    "document, above",
    [
        ({"maxLength": 33}, True),
        ({"maxLength": 32, "items": {"maxItems": 9}}, True),
        ({"properties": {"a": {"maxItems": 8, "maxLength": 32}}}, False),
        ({"maxLength": True, "enum": [1.5]}, False),
    ],
)
def test_bounds_above(document, above):
    assert bounds_above(document, 32, 8) is above

"""Schemas that combine only `type`s (allOf, anyOf, oneOf, not, if/then/else) compile to the
types `jsonschema` says they allow, and to the empty language when they allow none: a part
whose types meet no type of another's is no value, never a malformed `type` (a fresh user's
`{"type": "integer", "not": {"type": "boolean"}}` was refused as "type must be a name or a
non-empty list"). A combinator corral does not compile exactly may still be refused, naming
itself (docs/algebra.md)."""

from __future__ import annotations

import pytest
from corral.automata import EmptyLanguageError, SchemaError, schema_to_dfa
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

TYPES = ["null", "boolean", "integer", "number", "string", "array", "object"]
PROBES = {"null": None, "true": True, "1": 1, "1.5": 1.5, '"s"': "s", "[]": [], "{}": {}}
"""A value of each JSON type, and an integer and a non-integer number: a schema of types alone
allows exactly the types of the probes it allows."""

type_value = st.sampled_from(TYPES) | st.lists(
    st.sampled_from(TYPES), min_size=1, max_size=3, unique=True
)
leaf = type_value.map(lambda t: {"type": t})


def _combinations(inner):
    parts = st.lists(inner, min_size=1, max_size=3)
    return st.one_of(
        parts.map(lambda p: {"allOf": p}),
        parts.map(lambda p: {"anyOf": p}),
        parts.map(lambda p: {"oneOf": p}),
        inner.map(lambda s: {"not": s}),
        st.tuples(leaf, inner).map(lambda t: {**t[0], "not": t[1]}),
        st.tuples(inner, st.none() | inner, st.none() | inner).map(
            lambda t: (
                {"if": t[0]}
                | ({} if t[1] is None else {"then": t[1]})
                | ({} if t[2] is None else {"else": t[2]})
            )
        ),
    )


schemas = st.recursive(leaf, _combinations, max_leaves=5)


@settings(max_examples=300, deadline=None)
@given(schema=schemas)
@example(schema={"type": "integer", "not": {"type": "boolean"}})
@example(schema={"type": ["integer", "null"], "not": {"type": "boolean"}})
@example(schema={"if": {"type": "string"}, "else": {"type": "integer"}})
@example(schema={"anyOf": [{"allOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}]})
@example(schema={"allOf": [{"type": "string"}, {"type": "integer"}]})
def test_type_combinations_allow_the_types_jsonschema_allows(schema):
    validator = Draft202012Validator(schema)
    valid = {text for text, value in PROBES.items() if validator.is_valid(value)}
    try:
        dfa = schema_to_dfa(schema)
    except EmptyLanguageError:
        assert not valid, f"refused as empty, but {sorted(valid)} are valid"
        return
    except SchemaError as error:  # a documented refusal of a combinator (docs/algebra.md)
        assert error.keyword != "type", str(error)
        assert "not supported" in str(error), str(error)
        return
    accepted = {text for text in PROBES if dfa.matches(text.encode())}
    assert accepted == valid


@pytest.mark.parametrize(
    "schema, reason",
    [
        ({"allOf": [{"type": 5}, {"type": "string"}]}, "type must be a name or a non-empty list"),
        ({"allOf": [{"type": []}, {"type": "string"}]}, "type must be a name or a non-empty list"),
        ({"allOf": [{"type": "strin"}, {"type": "string"}]}, "unknown type 'strin'"),
    ],
)
def test_a_malformed_type_in_a_combination_is_named(schema, reason):
    with pytest.raises(SchemaError, match=reason) as caught:
        schema_to_dfa(schema)
    assert caught.value.keyword == "type"

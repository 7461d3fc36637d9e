"""`oneOf` branches that accept every value of one JSON type (`corral.automata.schema.disjoint`,
`accepted_types` and `without_shared_types`; docs/algebra.md, "The keywords"): a value of a type
two branches accept whole is valid against no `oneOf`, so the type is taken out of every branch
before the disjointness proofs and the algebra.

- `accepted_types` against `jsonschema`: every value of a type it names validates (formats
  included: jsonschema's format checkers pass every non-string).
- Random `oneOf`s of such branches: sampled texts validate, and random instances of every type
  are accepted only when valid.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import ConstrainError, SchemaError, dumps, schema_to_dfa
from corral.automata.schema.disjoint import accepted_types
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import validator_for

values_of_type = {
    "null": st.none(),
    "boolean": st.booleans(),
    "number": st.one_of(st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6, allow_nan=False)),
    "string": st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=6),
    "array": st.lists(st.integers(0, 3), max_size=3),
    "object": st.dictionaries(st.sampled_from(["a", "b"]), st.integers(0, 3), max_size=2),
}
any_value = st.one_of(*values_of_type.values())

branch = st.sampled_from(
    [
        True,
        {},
        {"format": "uuid"},
        {"format": "date-time"},
        {"format": "int32"},
        {"pattern": "^a"},
        {"maxLength": 2},
        {"minimum": 3},
        {"type": "integer"},
        {"type": "number"},
        {"type": ["string", "null"]},
        {"type": "string", "pattern": "b"},
        {"required": ["a"]},
        {"type": "array", "maxItems": 1},
        {"maxItems": 2},
        {"enum": [1, "a", None]},
        {"type": "object", "properties": {"a": {"type": "integer"}}},
        {"not": {"type": "null"}},
        {"description": "anything"},
    ]
)


def validator(schema):
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


@settings(max_examples=200, deadline=None)
@given(branch, st.data())
def test_accepted_types_accept_every_value_of_the_type(schema, data):
    check = validator(schema)
    for t in accepted_types(schema):
        value = data.draw(values_of_type[t])
        assert check.is_valid(value), (schema, t, value)


def test_format_checkers_pass_every_non_string():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    others = [None, True, 0, -3, 2.5, [], ["x"], {}, {"a": 1}]
    for fmt in checker.checkers:
        if fmt in ("int32", "int64", "float", "double"):  # numeric formats: not claimed
            continue
        for value in others:
            assert checker.conforms(value, fmt), (fmt, value)


def assert_one_of_sound(branches, values, seed: int) -> None:
    """`oneOf: branches`, unless refused: 20 sampled texts (generator seeded `seed`) validate
    with jsonschema, and every one of `values` the DFA accepts is valid."""
    schema = {"oneOf": branches}
    try:
        dfa = schema_to_dfa(schema)
    except ConstrainError:
        return
    check = validator(schema)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        assert check.is_valid(json.loads(dfa.sample(rng))), schema
    for value in values:
        if dfa.matches(dumps(value).encode("utf-8")):
            assert check.is_valid(value), (schema, value)


@settings(max_examples=120, deadline=None)
@given(st.lists(branch, min_size=2, max_size=3), st.lists(any_value, min_size=10, max_size=10))
def test_random_one_ofs_are_sound(branches, instances):
    assert_one_of_sound(branches, instances, seed=len(instances))


@pytest.mark.parametrize(
    ("branches", "removed"),
    [
        ([{"pattern": "^a"}, {"maxLength": 2}], b"null"),  # untyped: non-strings in both
        ([{"type": ["string", "null"], "pattern": "^a"}, {"type": ["null", "string"]}], b"null"),
        ([{}, {"type": "boolean"}, {"type": "string", "maxLength": 1}], b"true"),
    ],
)
def test_shared_types_leave_only_the_types_where_branches_differ(branches, removed):
    schema = {"oneOf": branches}
    dfa = schema_to_dfa(schema)  # the first was refused as an inexact oneOf before
    check = validator(schema)
    for value in [None, True, 0, 7, 2.5, [], {}, "", "a", "ab", "abc", "b", "bcd", "xyz"]:
        if dfa.matches(dumps(value).encode("utf-8")):
            assert check.is_valid(value), (branches, value)
    assert dfa.matches(b'"abc"') == check.is_valid("abc")
    assert not dfa.matches(removed)


formatted = st.recursive(
    st.sampled_from(
        [
            {"type": "string", "format": "uuid"},
            {"type": "string", "format": "date", "maxLength": 12},
            {"format": "email"},
            {"type": "string", "pattern": "^[0-9a-f-]+$"},
            {"type": "integer"},
        ]
    ),
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["a", "b"]), inner, min_size=1, max_size=2).map(
            lambda p: {"type": "object", "properties": p, "required": sorted(p)[:1]}
        ),
        inner.map(lambda s: {"type": "array", "items": s, "maxItems": 2}),
        st.lists(inner, min_size=2, max_size=2).map(lambda b: {"anyOf": b}),
        inner.map(lambda s: {"not": s}),
        st.lists(inner, min_size=2, max_size=2).map(lambda b: {"oneOf": b}),
    ),
    max_leaves=4,
)
instances = st.recursive(
    st.one_of(
        st.sampled_from(
            ["", "x", "2024-01-01", "2024-13-01", "a@b.c", "{12345678-1234-1234-1234-123456789abc}"]
        ),
        st.uuids().map(str),
        st.integers(-3, 3),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=2),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    ),
    max_leaves=4,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(formatted, min_size=2, max_size=3), st.lists(instances, min_size=8, max_size=8))
def test_one_ofs_with_formats_are_sound(branches, values):
    assert_one_of_sound(branches, values, seed=0)


def test_a_format_branch_beside_a_pattern_branch_is_refused_not_narrowed():
    """Snowplow sp_209: the shared types leave strings only, where uuid ∧ pattern is inexact
    (the format's checker accepts more spellings than its regex): refused, naming oneOf. A
    narrower compile (subtracting the pattern branch without the format) would lose every
    `$...` string without a word (found by a new-user trial)."""
    schema = {"oneOf": [{"format": "uuid"}, {"pattern": "^\\$[A-Z0-9-_]+"}]}
    with pytest.raises(SchemaError) as caught:
        schema_to_dfa(schema)
    assert caught.value.keyword == "oneOf"

"""JSON Schema compares numbers by value (issue 33, item 4): `2.0` is the integer `2` in `enum`,
`const`, bounds, `multipleOf`, `not` and `oneOf`; a schema whose language is empty is refused
naming its keyword and pointer; an unbounded number is a finite double of at most 17 digits.

The oracle is `jsonschema` (draft 2020-12): over the canonical integers -30..30, corral's DFA
accepts `str(k)` exactly when the validator accepts `k` (every keyword of the family is exact on
integers), and every text the DFA accepts among a few fractions validates.
"""

from __future__ import annotations

import json
import math
import re

import jsonschema
import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    SchemaError,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.product import intersection
from corral.automata.schema.json_text import SHORT_NUMBER, json_object_regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VALIDATOR = jsonschema.Draft202012Validator
INTEGERS = range(-30, 31)
FRACTIONS = ["0.5", "-1.5", "2.25", "7.5", "-0.5"]


@st.composite
def atoms(draw, depth: int = 0):
    """A small numeric schema: a type, then some of enum, const, the four bounds, multipleOf,
    and (one level down) `not` or `oneOf` of other atoms."""
    schema: dict = {}
    kind = draw(st.sampled_from(["integer", "number", None]))
    if kind is not None:
        schema["type"] = kind
    keys = draw(
        st.sets(
            st.sampled_from(
                ["enum", "const", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]
                + ["multipleOf"]
                + (["not", "oneOf"] if depth == 0 else [])
            ),
            max_size=3,
        )
    )
    for key in sorted(keys):
        if key == "enum":
            schema[key] = draw(st.lists(_values(), min_size=1, max_size=4))
        elif key == "const":
            schema[key] = draw(_values())
        elif key == "multipleOf":
            k = draw(st.integers(2, 5))
            schema[key] = float(k) if draw(st.booleans()) else k
        elif key == "not":
            schema[key] = draw(atoms(depth + 1))
        elif key == "oneOf":
            schema[key] = draw(st.lists(atoms(depth + 1), min_size=2, max_size=3))
        else:
            schema[key] = draw(_integers())
    return schema


def _integers():
    """An integer, sent as an int or as the float a Python client holds."""
    return st.integers(-12, 12).flatmap(lambda k: st.sampled_from([k, float(k)]))


def _values():
    """Enum values: integers as ints or integral floats, now and then a fraction."""
    return st.one_of(
        _integers(),
        st.sampled_from([0.5, -1.5, 2.25]),
    )


def _pointer_resolves(schema, pointer: str) -> bool:
    node = schema
    for token in pointer.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=atoms())
def test_numbers_compare_by_value_as_jsonschema_does(schema):
    """On integers the language is exactly the valid values, whether the schema holds 2 or
    2.0; an empty language is an error naming a keyword and a pointer of the schema."""
    valid = VALIDATOR(schema).is_valid
    try:
        dfa = schema_to_dfa(schema)
    except EmptyLanguageError as error:
        assert isinstance(error, SchemaError), error  # names where, as every refusal does
        assert _pointer_resolves(schema, error.pointer), (schema, error.pointer)
        assert error.keyword is not None or error.pointer, (schema, error)
        assert not any(valid(k) for k in INTEGERS), schema
        return
    except SchemaError as error:  # refused as outside the subset: it says where
        assert _pointer_resolves(schema, error.pointer), (schema, error.pointer)
        return
    for k in INTEGERS:
        assert dfa.matches(str(k).encode()) == valid(k), (schema, k)
    for text in FRACTIONS:
        if dfa.matches(text.encode()):
            assert valid(json.loads(text)), (schema, text)


def test_integral_floats_in_enum_and_const_are_integers():
    dfa = schema_to_dfa({"type": "integer", "enum": [1.0, 2.0, 3.0]})
    assert [dfa.matches(t) for t in (b"1", b"2", b"3", b"1.0", b"4")] == [True] * 3 + [False] * 2
    assert schema_to_dfa({"type": "integer", "const": 2.0}).matches(b"2")
    assert schema_to_dfa({"enum": [1, 1.0]}).n_states == schema_to_dfa({"const": 1}).n_states


def test_an_empty_enum_names_its_keyword_and_pointer():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "enum": [1.5]}}}
    schema["required"] = ["n"]
    try:
        schema_to_dfa(schema)
    except EmptyLanguageError as error:
        assert isinstance(error, SchemaError)
        assert (error.pointer, error.keyword) == ("/properties/n", "enum")
    else:
        raise AssertionError("an empty language was compiled")


@settings(max_examples=300, deadline=None)
@given(
    mantissa=st.from_regex(re.compile(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?"), fullmatch=True),
    exponent=st.one_of(st.none(), st.integers(-999, 999)),
)
def test_an_unbounded_number_is_a_finite_double_of_17_digits(mantissa, exponent):
    """`{"type": "number"}` writes the numbers of at most 17 digits with an exponent of
    magnitude at most 289, all finite doubles."""
    text = mantissa if exponent is None else f"{mantissa}e{exponent}"
    digits = len(re.sub(r"[^0-9]", "", mantissa))
    expected = digits <= 17 and (exponent is None or abs(exponent) <= 289)
    assert _NUMBER.matches(text.encode()) == expected, text
    if expected:
        assert math.isfinite(float(text))


_NUMBER = schema_to_dfa({"type": "number"})


def test_1e400_is_not_a_number_corral_writes():
    assert not _NUMBER.matches(b"1e400") and not _NUMBER.matches(b"1" * 150)
    assert _NUMBER.matches(b"1e289") and _NUMBER.matches(b"0.1234567890123456")
    assert regex_to_dfa(SHORT_NUMBER).n_states == _NUMBER.n_states


def test_a_bounded_number_is_not_narrowed_to_17_digits():
    """Bounds ask for their own range (no exponent, exact decimals), digits unlimited."""
    dfa = schema_to_dfa({"type": "number", "minimum": 0, "maximum": 1})
    assert dfa.matches(b"0." + b"3" * 40)


def test_refusals_are_constrain_errors():
    try:
        schema_to_dfa({"const": 2.0, "type": "string"})
    except ConstrainError as error:
        assert isinstance(error, SchemaError) and error.keyword == "const"


_TOO_LONG = regex_to_dfa(r"-?[0-9]{17,}(\.[0-9]+)?")
"""Numbers with 17 or more integer digits: past 2**53, up to those a double reads as infinity."""


@settings(max_examples=60, deadline=None)
@given(
    bound=st.one_of(  # an exclusive bound at +-2**53 leaves nothing in reach: refused
        st.integers(1 - 2**53, 2**53 - 1), st.floats(-1e15, 1e15, allow_nan=False).map(float)
    ),
    keyword=st.sampled_from(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]),
)
def test_a_one_sided_number_range_stays_within_2_to_the_53(bound, keyword):
    """A `number` with one bound writes no number of 17 or more integer digits (a reader holds
    every one as a finite double), and keeps the numbers on the bound's side up to 2**53."""
    dfa = schema_to_dfa({"type": "number", keyword: bound})
    with pytest.raises(EmptyLanguageError):
        intersection(dfa, _TOO_LONG)
    inside = 2**53 if keyword in ("minimum", "exclusiveMinimum") else -(2**53)
    assert dfa.matches(str(inside).encode())


_JSON_OBJECT = regex_to_dfa(json_object_regex(3))


@settings(max_examples=100, deadline=None)
@given(
    mantissa=st.from_regex(re.compile(r"-?(0|[1-9][0-9]{0,30})(\.[0-9]{1,30})?"), fullmatch=True),
    exponent=st.one_of(st.none(), st.integers(-999, 999)),
    nested=st.booleans(),
)
def test_json_object_numbers_are_those_of_an_unbounded_number(mantissa, exponent, nested):
    """`response_format: json_object` writes the numbers `{"type": "number"}` writes: finite
    doubles of at most 17 digits, at any depth."""
    text = mantissa if exponent is None else f"{mantissa}e{exponent}"
    value = f'{{"a":[{text}]}}' if nested else f'{{"a":{text}}}'
    assert _JSON_OBJECT.matches(value.encode()) == _NUMBER.matches(text.encode()), value


WRAPS = {  # a part holding `inner` (and `other`) deep inside, negated or not; texts to check
    # (corral writes no member or item its schema does not list: on objects and arrays its
    # language is a subset of the valid texts, on integers exactly them)
    "not property": (
        lambda inner, other: {"type": "object", "not": {"properties": {"a": inner}}},
        ["{}"] + [f'{{"a":{k}}}' for k in range(-3, 4)],
    ),
    "property": (
        lambda inner, other: {"type": "object", "properties": {"a": inner}},
        ["{}"] + [f'{{"a":{k}}}' for k in range(-3, 4)],
    ),
    "not item": (
        lambda inner, other: {"type": "array", "not": {"items": inner}},
        ["[]"] + [f"[{k}]" for k in range(-3, 4)],
    ),
    "not oneOf": (
        lambda inner, other: {"type": "integer", "not": {"oneOf": [inner, other]}},
        [str(k) for k in range(-3, 4)],
    ),
    "oneOf beside not": (
        lambda inner, other: {"type": "integer", "not": other, "oneOf": [{"enum": [0]}, inner]},
        [str(k) for k in range(-3, 4)],
    ),
    "anyOf beside not": (
        lambda inner, other: {"type": "integer", "not": other, "anyOf": [{"enum": [0]}, inner]},
        [str(k) for k in range(-3, 4)],
    ),
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inner=atoms(depth=1), other=atoms(depth=1), wrap=st.sampled_from(sorted(WRAPS)))
def test_a_contradiction_deep_inside_a_part_never_empties_the_whole_part(inner, other, wrap):
    """Bounds that contradict inside a property, an item or a branch of a part: the language is
    exactly the valid texts among integers, objects and arrays of them, or the schema is
    refused; never another language (the fault this pins: a contradiction deep inside a
    negated part, or inside a branch beside `not`, made the whole part empty)."""
    build, texts = WRAPS[wrap]
    schema = build(inner, other)
    valid = VALIDATOR(schema).is_valid
    exact = schema.get("type") == "integer"
    try:
        dfa = schema_to_dfa(schema)
    except EmptyLanguageError:
        assert not exact or not any(valid(json.loads(t)) for t in texts), schema
        return
    except SchemaError as error:  # refused: it says where
        assert _pointer_resolves(schema, error.pointer), (schema, error.pointer)
        return
    for text in texts:
        if exact or dfa.matches(text.encode()):
            assert dfa.matches(text.encode()) == valid(json.loads(text)), (schema, text)

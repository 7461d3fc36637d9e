"""The schemas corral used to refuse most often (docs/design.md section 3, beyond the subset): the
formats hostname, idn-hostname, ipv6, duration and exact leap years; unknown formats; required
names not in `properties`; non-integer number bounds; `multipleOf`; `\\u` escapes in strings;
`minProperties` one above the listed members; `uniqueItems` over a finite item language.

Each language is checked against independent oracles: `jsonschema` with its format checker (the
format extras of the test extra), `datetime`, `ipaddress`, Python's decimal and float
arithmetic. Every string the DFA accepts must validate (soundness); common valid values must be
accepted where the docstrings say they are.
"""

from __future__ import annotations

import datetime
import functools
import ipaddress
import json
import math
from decimal import Decimal

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    SchemaError,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.schema.formats import FORMATS, HOST_LABEL_LENGTH, HOST_LABELS
from corral.automata.schema.values import json_key
from hypothesis import example, given, settings
from hypothesis import strategies as st

CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER


@functools.cache
def format_dfa(name: str):
    return regex_to_dfa(FORMATS[name])


def _needs(format_name: str):
    """Skip when `jsonschema` has no checker for the format (its format extra is missing)."""
    return pytest.mark.skipif(
        format_name not in CHECKER.checkers,
        reason=f"jsonschema checks {format_name!r} only with its format extra",
    )


def _valid(schema, value) -> bool:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(value)


def _samples(dfa, n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [dfa.sample(rng).decode("utf-8") for _ in range(n)]


# ---------------------------------------------------------------------------------------------
# Formats


@pytest.mark.parametrize(
    "name", ["date", "date-time", "time", "duration", "hostname", "idn-hostname", "ipv6"]
)
def test_every_sampled_format_string_passes_the_format_checker(name):
    if name not in CHECKER.checkers:
        pytest.skip(f"jsonschema checks {name!r} only with its format extra")
    dfa = format_dfa(name)
    for text in _samples(dfa, 400):
        assert CHECKER.conforms(text, name), (name, text)


def test_february_29_is_written_exactly_in_leap_years():
    dfa = format_dfa("date")
    for year in range(1, 10_000):
        text = f"{year:04d}-02-29"
        try:
            datetime.date.fromisoformat(text)
            leap = True
        except ValueError:
            leap = False
        assert dfa.matches(text.encode()) == leap, text
    assert dfa.matches(b"2024-02-29") and not dfa.matches(b"1900-02-29")
    assert not dfa.matches(b"0000-01-01")  # no year 0 in datetime or RFC 3339


@settings(max_examples=300, deadline=None)
@given(st.dates())
def test_every_calendar_date_is_accepted(day):
    assert format_dfa("date").matches(day.isoformat().encode())


@_needs("date-time")
@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789-:TZ+.", min_size=10, max_size=25))
def test_date_time_near_misses_are_refused_when_the_checker_refuses(text):
    if format_dfa("date-time").matches(text.encode()):
        assert CHECKER.conforms(text, "date-time"), text


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return "%" not in text


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**128 - 1), st.sampled_from(["compressed", "exploded", "v4"]))
def test_ipv6_addresses_in_every_spelling_are_accepted(value, spelling):
    address = ipaddress.IPv6Address(value)
    if spelling == "v4":
        head = address.exploded.rsplit(":", 2)[0]
        text = f"{head}:{ipaddress.IPv4Address(value & 0xFFFFFFFF)}"
    else:
        text = getattr(address, spelling)
    assert format_dfa("ipv6").matches(text.encode()), text


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="0123456789abcdefABCDEF:.", max_size=45))
def test_ipv6_matches_ipaddress_exactly(text):
    assert format_dfa("ipv6").matches(text.encode()) == _is_ipv6(text), text


@_needs("hostname")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab0-.", max_size=40))
def test_hostname_near_misses_are_refused_when_fqdn_refuses(text):
    for name in ("hostname", "idn-hostname"):
        if format_dfa(name).matches(text.encode()):
            assert CHECKER.conforms(text, name), (name, text)


def test_the_longest_hostname_stays_within_253_characters():
    assert HOST_LABELS * HOST_LABEL_LENGTH + HOST_LABELS - 1 <= 253
    longest = ".".join(["a" * HOST_LABEL_LENGTH] * HOST_LABELS)
    assert format_dfa("hostname").matches(longest.encode())
    assert not format_dfa("hostname").matches((longest + ".a").encode())


@_needs("duration")
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="PTYMWDHS0123456789", max_size=14))
def test_duration_near_misses_are_refused_when_the_checker_refuses(text):
    if format_dfa("duration").matches(text.encode()):
        assert CHECKER.conforms(text, "duration"), text


def test_common_durations_are_accepted():
    dfa = format_dfa("duration")
    for text in ["P1Y2M3DT4H5M6S", "PT1M", "P2W", "P1D", "PT36H", "P0D"]:
        assert dfa.matches(text.encode()), text


def test_unknown_format_names_constrain_nothing_and_spec_names_are_refused():
    plain = schema_to_dfa({"type": "string"})
    unknown = schema_to_dfa({"type": "string", "format": "my-format"})
    assert np.array_equal(unknown.trans, plain.trans)
    assert np.array_equal(unknown.accept, plain.accept)
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({"type": "string", "format": "relative-json-pointer"})
    assert info.value.keyword == "format"


# ---------------------------------------------------------------------------------------------
# required names not in properties


def test_a_required_name_not_listed_is_written_with_the_additional_value():
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["b"],
        "additionalProperties": {"type": "boolean"},
    }
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'{"b":true}') and dfa.matches(b'{"a":1,"b":false}')
    assert not dfa.matches(b"{}") and not dfa.matches(b'{"b":1}')
    for text in _samples(dfa, 50):
        assert _valid(schema, json.loads(text)), text


def test_a_required_name_takes_its_pattern_property_and_dependencies():
    schema = {
        "type": "object",
        "required": ["x1"],
        "patternProperties": {"^x": {"type": "string", "maxLength": 2}},
        "dependentRequired": {"x1": ["y"]},
        "additionalProperties": {"type": "null"},
    }
    dfa = schema_to_dfa(schema)
    assert dfa.matches(b'{"x1":"ab","y":null}') and not dfa.matches(b'{"x1":"ab"}')
    for text in _samples(dfa, 50):
        assert _valid(schema, json.loads(text)), text


def test_a_required_name_with_no_additional_members_is_the_empty_language():
    schema = {"type": "object", "properties": {"a": {}}, "required": ["b"]}
    schema["additionalProperties"] = False
    with pytest.raises(Exception, match="no value"):
        schema_to_dfa(schema)


# ---------------------------------------------------------------------------------------------
# Numbers

_BOUND = st.one_of(
    st.decimals(min_value=-1000, max_value=1000, places=3, allow_nan=False).map(float),
    st.sampled_from([0.1, 0.5, 0.3, 99999999999.99, -99999999999.99, 1e-06, 4.294967295]),
    # bounds whose decimals start with long runs of zeros (an exclusive 0 is 5e-324 inclusive)
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 1e-300, -2e-300, 1.5e-200]),
)
_NUMBER_TEXT = st.builds(
    lambda sign, whole, frac: f"{sign}{whole}{frac}",
    st.sampled_from(["", "-"]),
    st.sampled_from(["0", "1", "3", "99", "999", "1000", "99999999999"]),
    st.one_of(st.just(""), st.from_regex(r"\.[0-9]{1,18}", fullmatch=True)),
)


@settings(max_examples=80, deadline=None)
@example(lo=-5e-324, hi=0.0, lo_open=True, hi_open=True, texts=["0"] * 10)  # a new user's run
@given(
    lo=st.one_of(st.none(), _BOUND),
    hi=st.one_of(st.none(), _BOUND),
    lo_open=st.booleans(),
    hi_open=st.booleans(),
    texts=st.lists(_NUMBER_TEXT, min_size=10, max_size=10),
)
def test_decimal_bounds_agree_with_python_comparison(lo, hi, lo_open, hi_open, texts):
    schema = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_open else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_open else "maximum"] = hi
    try:
        dfa = schema_to_dfa(schema)
    except SchemaError:  # an empty range: no float (what a JSON number parses to) lies inside
        assert lo is not None and hi is not None
        least = math.nextafter(lo, math.inf) if lo_open else lo  # adjacent floats: none between
        most = math.nextafter(hi, -math.inf) if hi_open else hi
        assert least > most, schema
        return
    for text in texts + _samples(dfa, 10):
        if dfa.matches(text.encode()):
            assert _valid(schema, json.loads(text)), (schema, text)
    for value in (lo, hi):  # the float's own shortest spelling, on its right side
        if value is not None and not float(value).is_integer():
            text = format(Decimal(repr(float(value))), "f")  # written without exponent
            assert dfa.matches(text.encode()) == _valid(schema, float(value)), (schema, text)


def test_decimal_bound_examples():
    dfa = schema_to_dfa({"type": "number", "minimum": 0.5, "maximum": 99.99})
    for text, inside in [("0.5", True), ("0.49", False), ("99.99", True), ("99.991", False),
                         ("1", True), ("100", False), ("0.50000000001", True)]:  # fmt: skip
        assert dfa.matches(text.encode()) == inside, text
    strict = schema_to_dfa({"type": "number", "exclusiveMinimum": 0.5})
    assert not strict.matches(b"0.5") and not strict.matches(b"0.50000000000000000001")
    assert strict.matches(b"0.51") and strict.matches(b"1")


@settings(max_examples=60, deadline=None)
@given(k=st.integers(1, 120), lo=st.integers(-500, 500), span=st.integers(0, 800))
def test_integer_multiple_of_k_agrees_with_python_arithmetic(k, lo, span):
    schema = {"type": "integer", "multipleOf": k, "minimum": lo, "maximum": lo + span}
    try:
        dfa = schema_to_dfa(schema)
    except SchemaError:
        assert not any(v % k == 0 for v in range(lo, lo + span + 1))
        return
    for v in range(lo - 3, lo + span + 4):
        inside = lo <= v <= lo + span and v % k == 0
        assert dfa.matches(str(v).encode()) == inside, (k, v)


@pytest.mark.parametrize("step", [7, 11, 100, 1.0, 0.01, 0.001, 0.5, 0.25])
def test_sampled_multiples_validate(step):
    for kind in ("integer", "number"):
        schema = {"type": kind, "multipleOf": step}
        for text in _samples(schema_to_dfa(schema), 100):
            assert _valid(schema, json.loads(text)), (schema, text)


def test_a_float_step_is_admitted_only_when_integer_quotients_are_exact():
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({"type": "number", "multipleOf": 0.1})  # 3 / 0.1 == 30.000000000000004
    assert info.value.keyword == "multipleOf"
    dfa = schema_to_dfa({"type": "number", "multipleOf": 0.01, "maximum": 10**6})
    for v in range(-2000, 2000):  # jsonschema's own float check, integer by integer
        assert dfa.matches(str(v).encode()) and (v / 0.01).is_integer()
    assert math.isclose(float(Decimal("0.01")), 0.01)


# ---------------------------------------------------------------------------------------------
# String escapes


def test_a_surrogate_pair_counts_as_one_character_and_lone_surrogates_are_never_written():
    short = schema_to_dfa({"type": "string", "maxLength": 1})
    assert short.matches(b'"\\uD83D\\uDE00"') and short.matches('"😀"'.encode())
    plain = schema_to_dfa({"type": "string"})
    for dfa in (short, plain):
        for text in ['"\\ud800"', '"\\udc00"', '"\\ud83d"', '"\\ude00\\ud83d"']:
            assert not dfa.matches(text.encode()), text
    for text in _samples(plain, 300) + _samples(short, 300):
        json.loads(text).encode("utf-8")  # no lone surrogate: the text has a UTF-8 form


@given(st.floats(min_value=0, max_value=1e6, exclude_min=True, allow_subnormal=True))
@settings(max_examples=200, deadline=None)
def test_any_positive_multiple_of_compiles_or_is_refused_cleanly(step):
    # Every positive step (subnormal, tiny, huge, fractional) either compiles or raises a
    # ConstrainError naming multipleOf; never an arithmetic error.
    try:
        schema_to_dfa({"type": "integer", "minimum": -50, "maximum": 50, "multipleOf": step})
    except ConstrainError as error:
        assert getattr(error, "keyword", "multipleOf") == "multipleOf"


# ---------------------------------------------------------------------------------------------
# minProperties above the listed members: one member the schema does not list

_VALUES = [{"type": "integer", "maximum": 5}, {"type": "string", "maxLength": 1}, {"type": "null"}]
_PATTERNS = ["^x", "a", "^[0-9]+$", "b$", "^\\w$"]
_NAMES = ["a", "b", "x", "xa", "12", "ab", "zb", "", "é", "x\n", "a b", "q"]


@st.composite
def extra_member_schemas(draw):
    listed = draw(st.lists(st.sampled_from(["a", "b", "xb"]), max_size=2, unique=True))
    schema = {"type": "object", "properties": {n: draw(st.sampled_from(_VALUES)) for n in listed}}
    schema["minProperties"] = len(listed) + draw(st.sampled_from([1, 1, 2]))
    patterns = draw(st.lists(st.sampled_from(_PATTERNS), max_size=2, unique=True))
    if patterns:
        schema["patternProperties"] = {p: draw(st.sampled_from(_VALUES)) for p in patterns}
    schema["additionalProperties"] = draw(st.sampled_from([True, False, *_VALUES]))
    if draw(st.booleans()):
        schema["dependentRequired"] = {draw(st.sampled_from(_NAMES)): listed[:1]}
    return schema


@given(extra_member_schemas())
@settings(max_examples=60, deadline=None)
def test_min_properties_above_the_listed_members_is_sound(schema):
    try:
        dfa = schema_to_dfa(schema)
    except ConstrainError:  # two members beyond the listed ones, contradictory merges, ...
        return
    for text in _samples(dfa, 40):
        assert _valid(schema, json.loads(text)), (schema, text)
    # differential: objects of tricky names (pattern matches, listed names, non-ASCII, controls)
    rng = np.random.default_rng(1)
    for _ in range(200):
        names = rng.choice(_NAMES, size=rng.integers(0, 4), replace=False)
        value = {str(n): [1, "s", None][rng.integers(0, 3)] for n in names}
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        if dfa.matches(text.encode("utf-8")):
            assert _valid(schema, value), (schema, text)


def test_min_properties_one_above_the_listed_members_writes_an_unlisted_member():
    snowplow = {"minProperties": 1, "patternProperties": {"^iglu:": {"type": "integer"}}}
    dfa = schema_to_dfa({**snowplow, "additionalProperties": False})
    assert dfa.matches(b'{"iglu:a":1}') and not dfa.matches(b'{"a":1}')
    assert not dfa.matches(b"{}") and not dfa.matches(b'{"iglu:a":"x"}')
    free = schema_to_dfa({"type": "object", "minProperties": 1})
    assert free.matches(b'{"k":[1,{"a":null}]}') and not free.matches(b"{}")
    listed = {"type": "object", "properties": {"a": {"type": "null"}}, "minProperties": 2}
    dfa = schema_to_dfa(listed)
    assert dfa.matches(b'{"a":null,"b":true}') and not dfa.matches(b'{"a":null,"a":true}')
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({**listed, "minProperties": 3})
    assert info.value.keyword == "minProperties"


# ---------------------------------------------------------------------------------------------
# uniqueItems over a finite item language

_FINITE_ITEMS = [
    {"enum": ["a", "b", 1, 1.0, None, [1], {"x": 1, "y": 2}, {"y": 2, "x": 1}]},
    {"type": "boolean"},
    {"type": "integer", "minimum": -2, "maximum": 3},
    {"enum": [0, False, "0", 0.0]},
    {"const": "only"},
]


@given(
    st.sampled_from(_FINITE_ITEMS),
    st.integers(0, 4),
    st.one_of(st.none(), st.integers(0, 3)),
)
@settings(max_examples=60, deadline=None)
def test_unique_items_over_a_finite_item_language_is_sound(items, low, spread):
    schema = {"type": "array", "items": items, "uniqueItems": True, "minItems": low}
    high = None if spread is None else low + spread
    if high is not None:
        schema["maxItems"] = high
    values = items.get("enum") or [items.get("const")] if "type" not in items else None
    values = values or {"boolean": [True, False], "integer": list(range(-3, 5))}[items["type"]]
    try:
        dfa = schema_to_dfa(schema)
    except EmptyLanguageError:  # fewer distinct values than minItems
        distinct = {json_key(v) for v in values if _valid(items, v)}
        assert low > len(distinct) or (high is not None and high < low)
        return
    for text in _samples(dfa, 40):
        assert _valid(schema, json.loads(text)), (schema, text)
    # differential: arrays of the items' values (and neighbours) with repeats, in every order
    rng = np.random.default_rng(2)
    for _ in range(200):
        picked = [values[i] for i in rng.integers(0, len(values), size=rng.integers(0, 5))]
        text = json.dumps(picked, separators=(",", ":"), ensure_ascii=False)
        if dfa.matches(text.encode("utf-8")):
            assert _valid(schema, picked), (schema, text)


def test_unique_items_writes_each_value_once_and_refuses_infinite_items():
    dfa = schema_to_dfa({"type": "array", "items": {"enum": [1, 1.0, 2]}, "uniqueItems": True})
    assert dfa.matches(b"[1,2]") and not dfa.matches(b"[1,1.0]") and not dfa.matches(b"[1,1]")
    with pytest.raises(SchemaError) as info:
        schema_to_dfa({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
    assert info.value.keyword == "uniqueItems"

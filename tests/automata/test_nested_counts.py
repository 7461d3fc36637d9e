"""Nested counted repeats compile within bounded work or are refused naming the limit (the
project standard: a blow-up is refused past the documented limits, never a hang).

The kind: arrays' `minItems`/`maxItems`, strings' `minLength`/`maxLength` and `pattern`s with
`{m,n}` nested inside each other, and objects of optional members. Five arrays nested with
`maxItems: 64` counted millions of NFA states: the count refused the first attempt at once, but
naming the part at fault built each nested part's NFA up to `max_nfa_states` (6.6 s before the
narrowed compile). Now the count itself is O(form nodes x nesting) and the part at fault is
found by counting. No timing here: the tests count the NFA states the builders make.

The oracles: `jsonschema` on values drawn around the bounds (for an exact compile, the DFA
accepts a value's compact text exactly when it is valid; a narrowed compile's language is a
subset), and the JSON pointer named resolves in the schema.
"""

from __future__ import annotations

import contextlib
import json
import random

import corral.automata.nfa as nfa_module
import corral.automata.schema.compiler as compiler_module
import corral.automata.schema.nfa_size as nfa_size
import jsonschema
import pytest
from corral.automata import (
    EmptyLanguageError,
    LimitError,
    Limits,
    SchemaError,
    TooManyNfaStatesError,
    compile_schema_dfa,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.schema.compiler import Compiler, _compile
from corral.automata.schema.nfa_size import TooLarge, nfa_states
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LIMITS = Limits(max_nfa_states=3_000, max_dfa_states=2_000, max_subset_work=2_000_000)
NAMED = {"max_nfa_states", "max_dfa_states", "max_subset_work", "max_product_nodes"}


@st.composite
def bounds(draw, most: int) -> dict:
    lo = draw(st.sampled_from([None, 0, 1, 2, 5]))
    hi = draw(st.sampled_from([None, 1, 3, 8, 16, most]))
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    return {"lo": lo, "hi": hi}


@st.composite
def shapes(draw, depth: int = 0) -> dict:
    """A schema of nested counted repeats: arrays, strings with length bounds or a pattern of
    nested `{m,n}`, objects of optional members (at most 4 levels)."""
    kind = draw(st.sampled_from(["array", "array", "string", "object", "integer"]))
    if depth >= 4 and kind in ("array", "object"):
        kind = "string"
    if kind == "integer":
        return {"type": "integer"}
    if kind == "string":
        b = draw(bounds(64))
        schema = {"type": "string"}
        if draw(st.booleans()):
            inner = draw(st.sampled_from(["a", "[ab]", "ab?"]))
            for _ in range(draw(st.integers(1, 3))):
                m = draw(st.integers(0, 3))
                inner = f"(?:{inner}){{{m},{m + draw(st.integers(0, 12))}}}"
            schema["pattern"] = f"^{inner}$"
        if b["lo"] is not None:
            schema["minLength"] = b["lo"]
        if b["hi"] is not None:
            schema["maxLength"] = b["hi"]
        return schema
    if kind == "array":
        b = draw(bounds(64))
        schema = {"type": "array", "items": draw(shapes(depth + 1))}
        if b["lo"] is not None:
            schema["minItems"] = b["lo"]
        if b["hi"] is not None:
            schema["maxItems"] = b["hi"]
        return schema
    names = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=5, unique=True))
    props = {name: draw(shapes(depth + 1)) for name in names}
    required = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    return {"type": "object", "properties": props, "required": sorted(required)}


def values(schema: dict, rng) -> object:
    """A value of the schema's shape, each size drawn around its bounds (so some are invalid)."""
    kind = schema["type"]
    if kind == "integer":
        return rng.choice([0, -7, 12345])
    if kind == "string":
        lo, hi = schema.get("minLength", 0), schema.get("maxLength", 6)
        n = max(0, rng.choice([lo, hi, lo - 1, hi + 1, (lo + hi) // 2]))
        return "".join(rng.choice("aab") for _ in range(min(n, 80)))
    if kind == "array":
        lo, hi = schema.get("minItems", 0), schema.get("maxItems", 3)
        n = max(0, rng.choice([lo, hi, lo - 1, hi + 1, (lo + hi) // 2]))
        return [values(schema["items"], rng) for _ in range(min(n, 70))]
    return {k: values(s, rng) for k, s in schema["properties"].items() if rng.random() < 0.7}


class Work:
    """The NFA states every builder made, and the compile attempts, while installed."""

    def __init__(self, monkeypatch):
        self.builders, self.attempts = [], 0
        init, attempt = nfa_module._Builder.__init__, compiler_module._attempt

        def made(builder, *args, **kwargs):
            init(builder, *args, **kwargs)
            self.builders.append(builder)

        def counted(*args, **kwargs):
            self.attempts += 1
            return attempt(*args, **kwargs)

        monkeypatch.setattr(nfa_module._Builder, "__init__", made)
        monkeypatch.setattr(compiler_module, "_attempt", counted)

    @property
    def nfa_states(self) -> int:
        return sum(len(builder.epsilon) for builder in self.builders)


def resolves(schema, pointer: str) -> bool:
    node = schema
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=shapes(), seed=st.integers(0, 2**32 - 1))
def test_nested_counts_compile_exactly_or_are_refused_after_bounded_work(schema, seed):
    with pytest.MonkeyPatch.context() as monkeypatch:
        work = Work(monkeypatch)
        try:
            got = compile_schema_dfa(schema, LIMITS)
        except LimitError as error:
            got = None
            assert error.limit in NAMED, error
            assert f"limit {error.limit}=" in str(error)
            if isinstance(error, TooManyNfaStatesError) and error.pointer is not None:
                assert resolves(schema, error.pointer), (error.pointer, schema)
                assert str(error).startswith(f"{error.pointer or '/'}: ")
        except EmptyLanguageError:  # a pattern no length in the bounds fits
            got = None
        except SchemaError as error:  # a pattern whose count passes the limit: its keyword
            got = None
            assert error.keyword == "pattern" and resolves(schema, error.pointer), error
    # Each attempt builds at most one NFA to the limit, and naming the part at fault builds
    # only parts counted within `MARGIN` of it (the old naming built every nested level).
    assert work.nfa_states <= 2 * LIMITS.max_nfa_states * max(work.attempts, 1), (
        work.attempts,
        schema,
    )
    if got is None:
        return
    check = jsonschema.Draft202012Validator(schema)
    rng = random.Random(seed)
    for _ in range(12):
        value = values(schema, rng)
        text = json.dumps(value, separators=(",", ":")).encode()
        accepted = got.result.matches(text)
        if got.exact:
            assert accepted == check.is_valid(value), (text, schema)
        elif accepted:
            assert check.is_valid(value), (text, schema)


@pytest.mark.parametrize("depth", [3, 5, 8])
def test_arrays_nested_with_max_items_compile_or_are_refused_after_bounded_work(depth):
    """The reported case (5 arrays of `maxItems: 64`), at the default limits: narrowed or
    refused with the pointer of the nested level past the limit, after at most one NFA built
    to the limit per attempt."""
    schema = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "maxItems": 64, "items": schema}
    with pytest.MonkeyPatch.context() as monkeypatch:
        work = Work(monkeypatch)
        try:
            got = compile_schema_dfa(schema)
            assert got.narrowed
        except TooManyNfaStatesError as error:
            assert resolves(schema, error.pointer) and "/items" in error.pointer
    assert work.nfa_states <= 2 * Limits().max_nfa_states * work.attempts


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(1, 40), hi=st.integers(2, 64), most=st.integers(100, 10**6))
def test_the_count_of_nested_repeats_is_a_few_steps_per_level(depth, hi, most):
    """Counting nested repeats stops at `most` or finishes after O(nesting x bound) memo
    look-ups, not O(states): 40 arrays of 64 items each are counted in a few thousand."""
    schema = {"type": "integer"}
    for _ in range(depth):
        schema = {"type": "array", "maxItems": hi, "items": schema}
    compiler = Compiler(schema, None, compiler_module.DEFAULT_SCHEMA_LIMITS)
    form = _compile(schema, compiler)
    counter_steps = []
    real = dict.get

    class Memo(dict):
        def get(self, key, default=None):
            counter_steps.append(1)
            return real(self, key, default)

    with pytest.MonkeyPatch.context() as monkeypatch:
        made = nfa_size._Counter.__init__

        def init(counter, *args):
            made(counter, *args)
            counter.memo = Memo()

        monkeypatch.setattr(nfa_size._Counter, "__init__", init)
        with contextlib.suppress(TooLarge):
            nfa_states(form, compiler.trees, most)
    assert len(counter_steps) <= 4 * (hi + 2) * depth + 100, len(counter_steps)


@pytest.mark.parametrize(
    ("schema", "shown"),
    [
        ({"type": "string", "minLength": 1e308}, "minLength 1e+308 is too large"),
        ({"type": "array", "minItems": 1e308}, "minItems 1e+308 is too large"),
        ({"type": "array", "minItems": 2000.0}, "minItems 2000.0 is too large"),
        ({"type": "array", "minItems": 10**5000}, "minItems about 10**5000 is too large"),
        ({"type": "string", "minLength": 10**40}, "minLength about 10**40 is too large"),
        ({"type": "integer", "multipleOf": 1e300}, "multipleOf 1e+300 is above 1000"),
    ],
)
def test_a_large_count_is_named_as_written(schema, shown):
    """A float count is echoed as Python writes it, a huge integer in a short form: not the
    309 digits of 1e308 (nor a ValueError: Python writes no integer of 4,301 digits)."""
    with pytest.raises((LimitError, SchemaError)) as caught:
        schema_to_dfa(schema)
    assert shown in str(caught.value)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize("digits", [25, 400, 5000])
def test_a_huge_repetition_bound_is_refused_in_a_short_form(digits):
    with pytest.raises(LimitError) as caught:
        regex_to_dfa("a{1," + "9" * digits + "}")
    assert caught.value.limit == "max_repetition"
    assert f"({digits} digits)" in str(caught.value) and len(str(caught.value)) < 200

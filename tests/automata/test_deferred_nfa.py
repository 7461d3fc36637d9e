"""The deferred NFA of `LazyDfa` (`tree_to_nfa(..., deferred=True)`): alternatives and the copies
of counted repeats are stubs built as the rows reach them. The language must not change: the
oracles are the eager construction (the canonical tables after minimization must be equal,
whatever the order the rows were made in), Python's `re` on drawn strings, and the builder's
own count (the parts built are the states the whole build makes, stubs aside)."""

from __future__ import annotations

import re

import corral.automata.lazy as lazy_module
import numpy as np
import pytest
from corral.automata import (
    EmptyLanguageError,
    LimitError,
    Limits,
    TooManyNfaStatesError,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.lazy import LazyDfa, lazy_regex_dfa, lazy_schema_dfa
from corral.automata.nfa import _Builder, tree_to_nfa
from corral.automata.parse import parse
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from test_lazy_dfa import check_live, make_in_order

ATOMS = st.sampled_from(["a", "b", "[ab]", "é", "(?:ab|ba)", "a?", "[a-c]*", "(?:)"])


@st.composite
def counted(draw, depth: int = 0) -> str:
    """Counted repeats nested in groups and alternations: `(?:(?:a|b){2,5}c){0,4}`..."""
    kind = draw(st.sampled_from(["atom", "repeat", "repeat", "alt", "seq"]))
    if kind == "atom" or depth >= 2:
        return draw(ATOMS)
    inner = draw(counted(depth + 1))
    if kind == "repeat":
        lo = draw(st.integers(0, 4))
        hi = draw(st.sampled_from([lo, lo + 1, lo + 3, lo + 6, None]))
        return f"(?:{inner}){{{lo},{'' if hi is None else hi}}}"
    other = draw(counted(depth + 1))
    return f"(?:{inner}|{other})" if kind == "alt" else inner + other


def _strings(pattern: str, rng: np.random.Generator, lazy_dfa) -> list[str]:
    """Strings to ask `re` about: random ones over the pattern's letters, and samples of the
    canonical DFA (so that both answers occur)."""
    out = ["", "a", "ab", "ba", "é", "aé"]
    for _ in range(20):
        out.append("".join(rng.choice(list("abcé"), size=int(rng.integers(0, 14)))))
    for _ in range(10):
        out.append(lazy_dfa.sample(rng).decode("utf-8"))
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=counted(), seed=st.integers(0, 2**32 - 1), rows=st.none() | st.integers(0, 10))
def test_a_deferred_nfa_gives_the_eager_canonical_dfa_and_res_language(pattern, seed, rows):
    try:
        expected = regex_to_dfa(pattern)
    except EmptyLanguageError:
        with pytest.raises(EmptyLanguageError):
            lazy_regex_dfa(pattern)
        return
    except LimitError:
        assume(False)
    lazy = LazyDfa(parse(pattern), deferred=True)  # (a small NFA is built whole by default)
    rng = np.random.default_rng(seed)
    make_in_order(lazy, rng, rows)
    got = lazy.to_dfa()
    np.testing.assert_array_equal(got.trans, expected.trans)
    np.testing.assert_array_equal(got.accept, expected.accept)
    check_live(lazy)
    for text in _strings(pattern, rng, got):
        wanted = re.fullmatch(pattern, text) is not None
        assert got.matches(text.encode()) == wanted, (pattern, text)


@settings(max_examples=100, deadline=None)
@given(pattern=counted())
def test_the_parts_built_are_the_states_the_whole_build_makes(pattern):
    """Built whole (every stub built), the deferred NFA has the eager NFA's states plus one
    stub each: the parts are built at the same memo keys."""
    try:
        node = parse(pattern)
    except LimitError:
        assume(False)
    eager = tree_to_nfa(node).n_states
    builder = _Builder(Limits(), deferred=True)
    builder.new_state()
    builder.build(node, 0)
    builder.pending.build_all()
    assert len(builder.epsilon) - len(builder.stub_of) == eager


def _arrays(depth: int, most: int) -> dict:
    schema = {"type": "string", "maxLength": most}
    for _ in range(depth):
        schema = {"type": "array", "items": schema, "maxItems": 4}
    return schema


@settings(max_examples=40, deadline=None)
@example(depth=0, most=2, members=2, seed=0)
@given(
    depth=st.integers(0, 2),
    most=st.integers(1, 40),
    members=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_deferred_schema_nfa_gives_the_schemas_canonical_dfa(depth, most, members, seed):
    """Objects of optional members holding counted strings and arrays: equal canonical tables,
    rows made in any order first. (The example: the schema's tree was freed after the
    construction, and a repeat node made later took the id of one of its nodes, a memo key:
    a smaller language, until the deferred NFA kept the tree alive.)"""
    schema = {
        "type": "object",
        "properties": {f"p{i}": _arrays((depth + i) % 3, most + i) for i in range(members)},
    }
    expected = schema_to_dfa(schema)
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(lazy_module, "DEFER", 0)  # deferred however small
        lazy = lazy_schema_dfa(schema)
    assert lazy._deferred is not None
    make_in_order(lazy, np.random.default_rng(seed), 8)
    got = lazy.to_dfa()
    np.testing.assert_array_equal(got.trans, expected.trans)
    np.testing.assert_array_equal(got.accept, expected.accept)


def test_a_first_row_builds_only_what_it_reaches():
    """`{0,256}` strings in 12 members: the first rows build a small part of the NFA (the
    eager one has 12 x 256 copies of a character). A small NFA is built whole (`DEFER`)."""
    schema = {
        "type": "object",
        "properties": {f"k{i}": {"type": "string", "maxLength": 256} for i in range(12)},
    }
    lazy = lazy_schema_dfa(schema)
    lazy.row(0)
    lazy.row(int(lazy.row(0)[ord("{")]))
    made = lazy._nfa.n_states
    lazy.finish()
    whole = lazy._nfa.n_states
    assert made * 20 < whole, (made, whole)
    assert lazy_schema_dfa({"type": "string", "maxLength": 8})._deferred is None


def test_a_deferred_nfa_past_the_limit_is_refused_at_construction():
    """The limit is met where the eager construction meets it: a tree counted past
    `max_nfa_states` is built whole at once (regex), a schema counted past it too."""
    with pytest.raises(TooManyNfaStatesError):
        LazyDfa(parse("(?:a|b){0,400}"), Limits(max_nfa_states=500))
    with pytest.raises(TooManyNfaStatesError):
        lazy_schema_dfa({"type": "string", "maxLength": 200}, Limits(max_nfa_states=100))

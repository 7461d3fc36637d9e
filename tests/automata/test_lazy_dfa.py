"""`LazyDfa` (corral.automata.lazy): made on demand, in any order, it is a DFA of the pattern's
language whose every state is live, and `to_dfa()` is `regex_to_dfa`'s canonical table; the
oracles are the eager compile and a search over the lazy rows."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import (
    EmptyLanguageError,
    LimitError,
    Limits,
    TooManyDfaStatesError,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.lazy import LazyDfa, lazy_regex_dfa, lazy_schema_dfa
from corral.automata.nfa import tree_to_nfa
from corral.automata.parse import parse
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from regex_strategies import bare_patterns
from test_fragment_copies import schemas

DEAD_PIECES = ["[^\\s\\S]", "(?:[^\\s\\S]x|y)", "a[^\\s\\S]*", "(?:b|[^\\s\\S])c"]
"""Pieces with NFA states that cannot reach acceptance (`Nfa.trimmed` False), which the lazy
construction must keep out of its states."""

untrimmed = st.lists(
    st.sampled_from(["a", "b*", "(?:ab|c)?", "[a-c]+", "é", *DEAD_PIECES]), min_size=1, max_size=5
).map("".join)


def make_in_order(lazy: LazyDfa, order: np.random.Generator, rows: int | None = None) -> None:
    """Make `rows` rows of `lazy` (None: every one), each time picking a state at random among
    those made but not expanded (a lazy index's walks ask in no fixed order)."""
    while rows is None or rows > 0:
        waiting = [s for s in range(lazy.n_states) if not lazy.is_expanded(s)]
        if not waiting:
            return
        lazy.row(int(order.choice(waiting)))
        rows = None if rows is None else rows - 1


def check_live(lazy: LazyDfa) -> None:
    """Every state made reaches an accepting state through the lazy rows (no dead state)."""
    n = lazy.n_states
    rows = np.stack([lazy.row(s) for s in range(n)])
    live = np.array([lazy.accepting(s) for s in range(n)])
    while True:
        reach = live | np.array([live[r[r >= 0]].any() for r in rows])
        if (reach == live).all():
            break
        live = reach
    assert live.all(), f"dead states {np.flatnonzero(~live).tolist()}"


@settings(max_examples=200, deadline=None)
@given(
    pattern=bare_patterns | untrimmed,
    seed=st.integers(0, 2**32 - 1),
    rows=st.none() | st.integers(0, 12),
)
@example(pattern="a(b|[^\\s\\S]c)", seed=0, rows=None)
def test_a_lazy_dfa_made_in_any_order_is_the_canonical_dfa(pattern, seed, rows):
    """Some rows (or all) made one at a time in a random order, then `finish` the rest."""
    try:
        expected = regex_to_dfa(pattern)
    except EmptyLanguageError:
        with pytest.raises(EmptyLanguageError):
            lazy_regex_dfa(pattern)
        return
    except LimitError:  # refused by the eager construction: no canonical DFA to compare with
        assume(False)
    lazy = lazy_regex_dfa(pattern)
    make_in_order(lazy, np.random.default_rng(seed), rows)
    made = {s: lazy.row(s) for s in range(lazy.n_states) if lazy.is_expanded(s)}
    table = lazy.finish()
    assert table.shape == (lazy.n_states, 256) and not table.flags.writeable
    assert all(lazy.is_expanded(s) for s in range(lazy.n_states))
    for s, row in made.items():  # the rows made before stay
        np.testing.assert_array_equal(table[s], row)
    check_live(lazy)
    for s in range(lazy.n_states):  # the rows a walk reads are the DFA's: same strings
        assert lazy.row(s).dtype == np.int32 and lazy.row(s).shape == (256,)
    got = lazy.to_dfa()
    np.testing.assert_array_equal(got.trans, expected.trans)
    np.testing.assert_array_equal(got.accept, expected.accept)


@settings(max_examples=60, deadline=None)
@given(schema=schemas)
def test_a_lazy_schema_dfa_is_the_schemas_canonical_dfa(schema):
    got = lazy_schema_dfa(schema).to_dfa()
    expected = schema_to_dfa(schema)
    np.testing.assert_array_equal(got.trans, expected.trans)
    np.testing.assert_array_equal(got.accept, expected.accept)


def test_the_first_row_makes_only_the_states_it_reaches():
    lazy = lazy_regex_dfa("abc(d|e)*")
    assert lazy.n_states == 1 and not lazy.is_expanded(0)
    row = lazy.row(0)
    assert lazy.n_states == 2 and row[ord("a")] == 1 and (np.delete(row, ord("a")) == -1).all()
    assert not row.flags.writeable
    with pytest.raises(IndexError, match="has not been made"):
        lazy.row(2)


def test_an_untrimmed_nfa_leaves_no_edge_to_a_dead_state():
    node = parse("a(b|cd[^\\s\\S])")
    assert not tree_to_nfa(node).trimmed
    lazy = LazyDfa(node)
    after_a = lazy.row(0)[ord("a")]
    assert lazy.row(after_a)[ord("b")] >= 0
    assert lazy.row(after_a)[ord("c")] == -1  # after `cd` only the empty class
    check_live(lazy)


def test_the_state_limit_is_met_as_states_are_made():
    lazy = lazy_regex_dfa("[ab]{6}", Limits(max_dfa_states=4))
    with pytest.raises(TooManyDfaStatesError):
        lazy.to_dfa()

"""Minimization (docs/design.md section 2): Hopcroft's refinement (Valmari-Lehtinen) against Moore's
refinement kept here as the oracle. Both are run on the same trimmed DFAs, from random patterns,
random tables and the schemas of the sample data, and must give identical canonical tables."""

from __future__ import annotations

import json
from unittest import mock

import corral.automata.minimize as minimize_module
import numpy as np
import pytest
from corral.automata import ConstrainError, Limits, parse, regex_to_dfa, schema_to_tree
from corral.automata.compile import deep_recursion
from corral.automata.determinize import byte_classes, remove_dead_states, subset_construction
from corral.automata.errors import EmptyLanguageError
from corral.automata.minimize import (
    equivalence_blocks,
    initial_blocks,
    minimize,
    moore_refine,
    number_breadth_first,
)
from corral.automata.nfa import tree_to_nfa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from regex_strategies import bare_patterns, equivalent_state_pairs

SMALL = Limits(max_dfa_states=3_000, max_nfa_states=30_000)


def moore_blocks(trans: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """The oracle: Moore's refinement, one round at a time, a state's signature being its block
    and its successors' blocks (-1 dead); stops when a round splits nothing."""
    block = np.unique(accept, return_inverse=True)[1].reshape(-1).astype(np.int64)
    n_blocks = int(block.max()) + 1
    while True:
        successors = np.where(trans >= 0, block[np.maximum(trans, 0)], -1)
        rows = [(b, *r) for b, r in zip(block.tolist(), successors.tolist(), strict=True)]
        ids: dict[tuple, int] = {}
        new = np.array([ids.setdefault(r, len(ids)) for r in rows], dtype=np.int64)
        if len(ids) == n_blocks:
            return block
        block, n_blocks = new, len(ids)


def moore_minimize(trans, accept):
    block = moore_blocks(trans, accept)
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first))
    members = first[order]
    block = rank[block]
    quotient = np.where(trans[members] >= 0, block[trans[members]], -1).astype(np.int32)
    return quotient, accept[members].copy()


def same_partition(a: np.ndarray, b: np.ndarray) -> bool:
    """True when two block labelings put the same states together."""
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def trimmed(tree):
    """(trans over classes, accept, byte_to_class) of a tree, before minimization."""
    with deep_recursion():
        nfa = tree_to_nfa(tree, SMALL)
        byte_to_class = byte_classes([m for m in nfa.edge_mask if m])
        trans, accept = subset_construction(nfa, byte_to_class, SMALL)
        trans, accept = remove_dead_states(trans, accept)
    return trans, accept, byte_to_class


def assert_same_tables(trans, accept, byte_to_class):
    assert same_partition(equivalence_blocks(trans, accept), moore_blocks(trans, accept))
    new = number_breadth_first(*minimize(trans, accept), byte_to_class)
    old = number_breadth_first(*moore_minimize(trans, accept), byte_to_class)
    assert np.array_equal(new.trans, old.trans) and np.array_equal(new.accept, old.accept)
    if new.n_states <= 40:
        assert equivalent_state_pairs(new.trans, new.accept) == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=bare_patterns)
def test_hopcroft_and_moore_give_identical_tables_on_random_patterns(pattern):
    try:
        parts = trimmed(parse(pattern, SMALL))
    except (EmptyLanguageError, ConstrainError):
        return
    assert_same_tables(*parts)


@st.composite
def random_dfas(draw):
    """A random partial DFA over a few classes, made reachable from 0 and trimmed."""
    n = draw(st.integers(1, 30))
    k = draw(st.integers(1, 4))
    cells = draw(st.lists(st.integers(-1, n - 1), min_size=n * k, max_size=n * k))
    accept = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    trans = np.array(cells, dtype=np.int32).reshape(n, k)
    seen, stack = {0}, [0]
    while stack:
        for t in trans[stack.pop()].tolist():
            if t >= 0 and t not in seen:
                seen.add(t)
                stack.append(t)
    keep = np.array(sorted(seen))
    new_id = np.full(n + 1, -1, dtype=np.int32)
    new_id[keep] = np.arange(len(keep))
    return new_id[trans[keep]], accept[keep]


@settings(max_examples=300, deadline=None)
@given(dfa=random_dfas())
def test_hopcroft_and_moore_agree_on_random_tables(dfa):
    trans, accept = dfa
    try:
        trans, accept = remove_dead_states(trans, accept)
    except EmptyLanguageError:
        return
    assert same_partition(equivalence_blocks(trans, accept), moore_blocks(trans, accept))


@settings(max_examples=150, deadline=None)
@given(
    dfa=random_dfas(),
    moore_rounds=st.sampled_from([0, 1, 2, 3, 12, 64]),
    first_rounds=st.sampled_from([1, 8, minimize_module.FIRST_MOORE_ROUNDS]),
)
def test_any_number_of_moore_rounds_before_hopcroft_gives_the_same_partition(
    dfa, moore_rounds, first_rounds
):
    """Moore's rounds hand any partition to the invariants and Hopcroft's refinement: the
    result is the same, however many rounds run before the invariants."""
    trans, accept = dfa
    try:
        trans, accept = remove_dead_states(trans, accept)
    except EmptyLanguageError:
        return
    with mock.patch.object(minimize_module, "FIRST_MOORE_ROUNDS", first_rounds):
        blocks = equivalence_blocks(trans, accept, moore_rounds=moore_rounds)
    assert same_partition(blocks, moore_blocks(trans, accept))


@settings(max_examples=200, deadline=None)
@given(dfa=random_dfas())
def test_initial_blocks_never_separate_equivalent_states(dfa):
    """(accepting, fewest bytes to acceptance) is a property of a state's language: the
    equivalence partition refines it, and it separates accepting states."""
    trans, accept = dfa
    try:
        trans, accept = remove_dead_states(trans, accept)
    except EmptyLanguageError:
        return
    initial, oracle = initial_blocks(trans, accept), moore_blocks(trans, accept)
    pairs = set(zip(oracle.tolist(), initial.tolist(), strict=True))
    assert len(pairs) == len(set(oracle.tolist()))  # one initial block per equivalence class
    assert all(len(set(accept[initial == b].tolist())) == 1 for b in set(initial.tolist()))


@settings(max_examples=150, deadline=None)
@given(dfa=random_dfas(), max_rounds=st.integers(1, 12))
def test_moore_refine_is_equivalence_when_stable_and_coarser_otherwise(dfa, max_rounds):
    """Stable: exactly equivalence. Not stable: coarser than equivalence and still separating
    accepting states (what Hopcroft's refinement may start from)."""
    trans, accept = dfa
    try:
        trans, accept = remove_dead_states(trans, accept)
    except EmptyLanguageError:
        return
    oracle = moore_blocks(trans, accept)
    block, stable = moore_refine(trans, accept, max_rounds, initial_blocks(trans, accept))
    if stable:
        assert same_partition(block, oracle)
    else:
        pairs = set(zip(oracle.tolist(), block.tolist(), strict=True))
        assert len(pairs) == len(set(oracle.tolist()))
        assert all(len(set(accept[block == b].tolist())) == 1 for b in set(block.tolist()))


def test_hash_collisions_in_moore_rounds_are_caught(monkeypatch):
    """With every signature hashing alike, the rounds must fall back to exact grouping."""
    monkeypatch.setattr(minimize_module, "_WEIGHTS", np.zeros(257, np.int64))
    for pattern in ["(ab|a)(c|bcd)(d*)", "(a|b)*a(a|b){5}", "[a-c]{0,9}x"]:
        trans, accept, _ = trimmed(parse(pattern, SMALL))
        blocks = equivalence_blocks(trans, accept, moore_rounds=64)
        assert same_partition(blocks, moore_blocks(trans, accept))


@pytest.mark.parametrize(
    "pattern",
    ["[a-z]{0,300}", "(ab|a)(c|bcd)(d*)", "(x+x+)+y", "(a|b)*a(a|b){5}", "a*|b*|(ab)*"],
)
def test_hopcroft_and_moore_agree_on_chains_and_loops(pattern):
    assert_same_tables(*trimmed(parse(pattern, SMALL)))


def test_a_long_chain_is_minimal():
    trans, accept, byte_to_class = trimmed(parse("[a-z]{0,300}", SMALL))
    assert minimize(trans, accept)[0].shape[0] == 301


def sample_schemas(data, every: int):
    for path in sorted((data / "jsonschemabench").glob("*.jsonl")):
        for i, line in enumerate(path.open(encoding="utf-8")):
            if i % every == 0:
                yield json.loads(line)["schema"]


def test_hopcroft_and_moore_give_identical_tables_on_schemas(sample_data):
    checked = 0
    for schema in sample_schemas(sample_data, every=5):
        try:
            with deep_recursion():
                parts = trimmed(schema_to_tree(schema, limits=SMALL))
        except ConstrainError:
            continue
        if parts[0].shape[0] > 800:
            continue  # the oracle is quadratic on chains
        assert_same_tables(*parts)
        checked += 1
    assert checked >= 15


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=bare_patterns)
def test_a_trimmed_nfa_gives_only_live_states(pattern):
    """`Nfa.trimmed` lets the pipeline skip dead-state removal: then removal changes nothing."""
    try:
        with deep_recursion():
            nfa = tree_to_nfa(parse(pattern, SMALL), SMALL)
            byte_to_class = byte_classes([m for m in nfa.edge_mask if m])
            trans, accept = subset_construction(nfa, byte_to_class, SMALL)
    except ConstrainError:
        return
    if nfa.trimmed:
        live_trans, live_accept = remove_dead_states(trans, accept)
        assert np.array_equal(live_trans, trans) and np.array_equal(live_accept, accept)


def test_empty_alternatives_and_byte_sets_untrim_the_nfa():
    from corral.automata.tree import Alt, ByteSet, Concat

    assert tree_to_nfa(parse("ab|c*")).trimmed
    assert not tree_to_nfa(Concat((ByteSet(2), Alt(())))).trimmed
    assert not tree_to_nfa(Alt((ByteSet(2), Concat((ByteSet(0), ByteSet(4)))))).trimmed
    assert not tree_to_nfa(parse("a(b|[^\\s\\S]c)")).trimmed
    assert regex_to_dfa("a(b|[^\\s\\S]c)").n_states == 3


def breadth_first_oracle(trans, accept):
    """The canonical numbering by its definition: a breadth-first search from state 0, each
    state's successors by increasing class, written one state at a time."""
    new_id, order = {0: 0}, [0]
    for s in order:
        for t in trans[s].tolist():
            if t >= 0 and t not in new_id:
                new_id[t] = len(order)
                order.append(t)
    table = [[new_id[t] if t >= 0 else -1 for t in trans[s].tolist()] for s in order]
    return np.array(table, dtype=np.int32).reshape(len(order), -1), accept[order]


@settings(max_examples=300, deadline=None)
@given(dfa=random_dfas(), seed=st.integers(0, 2**32 - 1))
def test_breadth_first_numbering_matches_its_definition_under_any_state_order(dfa, seed):
    """Renumbered at random (start kept at 0), a table gets the oracle's numbering back, both
    when the shortcut for an already breadth-first table applies and when it does not."""
    trans, accept = dfa
    n = trans.shape[0]
    perm = np.concatenate([[0], 1 + np.random.default_rng(seed).permutation(n - 1)])
    inverse = np.empty(n + 1, np.int32)
    inverse[perm] = np.arange(n)
    inverse[n] = -1
    shuffled = inverse[trans[np.argsort(inverse[:n])]]  # row i is the state numbered i
    shuffled_accept = accept[np.argsort(inverse[:n])]
    identity = np.arange(trans.shape[1], dtype=np.int32)
    want_trans, want_accept = breadth_first_oracle(shuffled, shuffled_accept)
    got = number_breadth_first(shuffled, shuffled_accept, identity)
    assert np.array_equal(got.trans, want_trans) and np.array_equal(got.accept, want_accept)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=bare_patterns)
def test_subset_construction_and_minimize_leave_tables_breadth_first(pattern):
    """Subset construction numbers its states breadth first, and the quotient keeps that
    order: the canonical numbering has nothing to change (so its shortcut is the common
    path)."""
    try:
        trans, accept, _ = trimmed(parse(pattern, SMALL))
    except (EmptyLanguageError, ConstrainError):
        return
    for table, acc in ((trans, accept), minimize(trans, accept)):
        want_trans, want_accept = breadth_first_oracle(table, acc)
        assert np.array_equal(table, want_trans) and np.array_equal(acc, want_accept)
        sources = np.nonzero(table >= 0)[0]
        assert minimize_module._is_breadth_first(table.shape[0], sources, table[table >= 0])

"""Runs (`run_categories`, `Vocabulary.run_row`): a state whose next steps on some byte
categories each go to one live state whatever the byte (a length-bounded string's counter)
starts its walk from the row of the tokens that run allows, and skips the subtrees inside it.
Checked against brute force: the runs by following the table byte by byte, the rows by reading
every token, and the masks of DFAs made of such chains by walking every token's bytes."""

from __future__ import annotations

import numpy as np
from corral.automata.dfa import Dfa
from corral.kernels import TokenIndex
from corral.kernels.masks.index import ALL_CATEGORIES, run_categories
from corral.kernels.masks.trie import BYTE_CATEGORY, N_CATEGORIES, loop_categories
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import (
    ALPHABET,
    SETTINGS,
    mask_ids,
    oracle_allowed,
    random_dfas,
    random_vocabularies,
)

CATEGORY_BYTES = [np.flatnonzero((BYTE_CATEGORY >> c) & 1) for c in range(N_CATEGORIES)]


@st.composite
def chain_dfas(draw, max_states: int = 7) -> Dfa:
    """A DFA whose states send whole byte categories to one state: a chain on one set of
    categories (state s to s + 1, as `maxLength` compiles a counter), other categories to a
    random state or the state itself, and single bytes overridden at random (a chain that
    splits or dies part-way)."""
    n = draw(st.integers(1, max_states))
    chain = draw(st.lists(st.integers(0, N_CATEGORIES - 1), min_size=1, max_size=4))
    trans = np.full((n, 256), -1, dtype=np.int32)
    for s in range(n):
        for c in draw(st.lists(st.integers(0, N_CATEGORIES - 1), max_size=3)):
            trans[s, CATEGORY_BYTES[c]] = draw(st.integers(-1, n - 1))
        for c in chain:
            trans[s, CATEGORY_BYTES[c]] = s + 1 if s + 1 < n else draw(st.integers(-1, n - 1))
        for b in draw(st.lists(st.sampled_from(ALPHABET), unique=True, max_size=3)):
            trans[s, b] = draw(st.integers(-1, n - 1))
    accept = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return Dfa(trans, accept)


def brute_run(trans: np.ndarray, own: int, state: int, limit: int) -> int:
    """Steps from `state` on which every byte of `own` goes to one live state (at most `limit`)."""
    members = np.flatnonzero(BYTE_CATEGORY & own)
    steps = 0
    while steps < limit and members.size:
        targets = set(trans[state, members].tolist())
        if len(targets) != 1 or min(targets) < 0:
            break
        (state,) = targets
        steps += 1
    return steps


@SETTINGS
@given(dfa=chain_dfas() | random_dfas(), depth=st.integers(1, 6))
def test_runs_follow_the_table(dfa, depth):
    trans = np.ascontiguousarray(dfa.trans, dtype=np.int32)
    loops = loop_categories(trans)
    own, run = run_categories(trans, loops, depth)
    for s in range(dfa.n_states):
        if loops[s] & ALL_CATEGORIES:
            assert (own[s], run[s]) == (loops[s] & ALL_CATEGORIES, depth)
            continue
        if own[s] == 0:
            assert run[s] == 0
            continue
        members = np.flatnonzero(BYTE_CATEGORY & own[s])
        (target,) = set(trans[s, members].tolist())  # one state for every byte of `own`
        assert target >= 0 and run[s] == brute_run(trans, int(own[s]), s, depth) >= 1
        for c in range(N_CATEGORIES):  # `own` is every category that goes to `target` whole
            whole = set(trans[s, CATEGORY_BYTES[c]].tolist()) == {target}
            assert whole == bool(own[s] >> c & 1)


@SETTINGS
@given(
    vocabulary=random_vocabularies(),
    own=st.integers(1, (1 << N_CATEGORIES) - 1),
    length=st.integers(0, 7),
)
def test_run_row_holds_the_short_tokens_inside_the_categories(vocabulary, own, length):
    row = vocabulary.run_row(own, length)
    expected = {
        t
        for t, data in enumerate(vocabulary.tokens)
        if data
        and t not in vocabulary.eos_ids
        and len(data) <= length
        and all(BYTE_CATEGORY[b] & own for b in data)
    }
    assert mask_ids(row) == expected
    if length >= vocabulary.trie.max_depth:
        np.testing.assert_array_equal(row, vocabulary.loop_row(own))


@SETTINGS
@given(
    dfa=chain_dfas(),
    vocabulary=random_vocabularies(),
    mode=st.sampled_from(["eager", "visit", "lazy"]),
)
def test_chain_masks_equal_brute_force_walk(dfa, vocabulary, mode):
    index = TokenIndex(dfa, vocabulary, mode=mode)
    for state in range(dfa.n_states):
        assert mask_ids(index.mask(state)) == oracle_allowed(dfa, vocabulary, state), state

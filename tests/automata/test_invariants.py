"""The language invariants that seed minimization (corral.automata.invariants): they never
separate two states with the same language, and they tell a chain's links apart."""

from __future__ import annotations

import numpy as np
from corral.automata import parse
from corral.automata.compile import deep_recursion
from corral.automata.determinize import byte_classes, remove_dead_states, subset_construction
from corral.automata.errors import EmptyLanguageError
from corral.automata.invariants import invariant_labels
from corral.automata.minimize import equivalence_blocks
from corral.automata.nfa import tree_to_nfa
from hypothesis import given, settings
from hypothesis import strategies as st


def equivalence_oracle(trans: np.ndarray, accept: np.ndarray) -> np.ndarray:
    """Language equivalence by Moore's refinement, one plain round at a time until stable."""
    block = accept.astype(np.int64)
    while True:
        rows = np.where(trans >= 0, block[np.maximum(trans, 0)], -1)
        keys = [(b, *r) for b, r in zip(block.tolist(), rows.tolist(), strict=True)]
        ids: dict[tuple, int] = {}
        new = np.array([ids.setdefault(k, len(ids)) for k in keys], dtype=np.int64)
        if len(ids) == len(set(block.tolist())):
            return block
        block = new


def refines(fine: np.ndarray, coarse: np.ndarray) -> bool:
    """True when every block of `fine` lies inside one block of `coarse`."""
    return len(set(zip(fine.tolist(), coarse.tolist(), strict=True))) == len(set(fine.tolist()))


@st.composite
def redundant_dfas(draw):
    """A random partial DFA, then a copy of it beside it with some edges of the original sent
    into the copy (languages unchanged, so many states have an equivalent twin), trimmed."""
    n = draw(st.integers(1, 25))
    k = draw(st.integers(1, 4))
    cells = draw(st.lists(st.integers(-1, n - 1), min_size=n * k, max_size=n * k))
    accept = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    trans = np.array(cells, dtype=np.int32).reshape(n, k)
    moved = np.array(draw(st.lists(st.booleans(), min_size=n * k, max_size=n * k))).reshape(n, k)
    top = np.where(moved & (trans >= 0), trans + n, trans)
    both = np.vstack([top, np.where(trans >= 0, trans + n, -1)]).astype(np.int32)
    accept = np.concatenate([accept, accept])
    seen, stack = {0}, [0]
    while stack:
        for t in both[stack.pop()].tolist():
            if t >= 0 and t not in seen:
                seen.add(t)
                stack.append(t)
    keep = np.array(sorted(seen))
    new_id = np.full(2 * n + 1, -1, dtype=np.int32)
    new_id[keep] = np.arange(len(keep))
    try:
        return remove_dead_states(new_id[both[keep]], accept[keep])
    except EmptyLanguageError:
        return np.zeros((1, k), np.int32) - 1, np.array([True])


@settings(max_examples=300, deadline=None)
@given(dfa=redundant_dfas())
def test_labels_never_separate_equivalent_states(dfa):
    trans, accept = dfa
    oracle = equivalence_oracle(trans, accept)
    labels = invariant_labels(trans, accept.astype(np.int64))
    assert refines(oracle, labels)  # equal languages, equal labels
    assert refines(labels, accept.astype(np.int64))


@settings(max_examples=200, deadline=None)
@given(dfa=redundant_dfas(), moore_rounds=st.sampled_from([1, 2, 3]))
def test_minimization_through_the_labels_is_language_equivalence(dfa, moore_rounds):
    """Few Moore rounds leave most of these unstable, so the labels and the second Moore pass
    (then Hopcroft's refinement) do the work."""
    trans, accept = dfa
    blocks = equivalence_blocks(trans, accept, moore_rounds=moore_rounds)
    oracle = equivalence_oracle(trans, accept)
    assert refines(blocks, oracle) and refines(oracle, blocks)


def before_minimization(pattern: str):
    with deep_recursion():
        nfa = tree_to_nfa(parse(pattern))
        trans, accept = subset_construction(nfa, byte_classes([m for m in nfa.edge_mask if m]))
        return remove_dead_states(trans, accept)


def test_a_counted_string_chain_is_told_apart_by_the_labels_alone():
    """`x[a-z]{0,300}|y[a-z]{0,300}` has two equivalent chains of 301 links: Moore's refinement
    would need 300 rounds; the labels give language equivalence at once."""
    trans, accept = before_minimization("x[a-z]{0,300}|y[a-z]{0,300}")
    labels = invariant_labels(trans, accept.astype(np.int64))
    oracle = equivalence_oracle(trans, accept)
    assert refines(labels, oracle) and refines(oracle, labels)
    assert len(set(labels.tolist())) == 302  # the start, then one per link

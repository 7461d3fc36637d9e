"""`TokenIndex.token_distance` (the budget rule, docs/design.md section 4) against a brute-force
search over every token from every state (`brute_force_token_distance`). The masks within a token
budget are checked against the same oracle in test_index_oracle.py."""

from __future__ import annotations

import numpy as np
from corral.kernels import TokenIndex
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import (
    SETTINGS,
    brute_force_token_distance,
    mask_ids,
    random_dfas,
    random_vocabularies,
)


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies())
def test_token_distance_equals_brute_force(dfa, vocabulary):
    index = TokenIndex(dfa, vocabulary)
    expected = brute_force_token_distance(dfa, vocabulary)
    assert index.token_distance.tolist() == expected
    assert index.token_distance.dtype == np.int32
    assert index.max_token_distance == max(expected)
    eos = set(vocabulary.eos_ids)
    for s in range(dfa.n_states):
        if expected[s] > 0:
            # the invariant the engine keeps: a state k + 1 tokens away has a way on within k
            assert mask_ids(index.mask_within_tokens(s, expected[s] - 1)) - eos


def test_states_with_more_token_ends_than_the_scratch_table_holds():
    """From the start of `a{0,80}b` the tokens a, aa, ..., a*80 end in 80 distinct states, more
    than `token_graph` keeps per state in its first pass: that state is walked again."""
    from corral.automata import regex_to_dfa
    from corral.kernels import Vocabulary
    from corral.kernels.masks.distance import _ENDS_WIDTH

    tokens = [b"a" * k for k in range(1, 81)] + [b"b", b"ab", None]
    vocabulary = Vocabulary.from_list(tokens, eos_ids=[len(tokens) - 1])
    dfa = regex_to_dfa("a{0,80}b")
    index = TokenIndex(dfa, vocabulary)
    assert len({index.next_state(0, t) for t in range(80)}) > _ENDS_WIDTH
    assert index.token_distance.tolist() == brute_force_token_distance(dfa, vocabulary)


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies(), budget=st.integers(0, 12))
def test_token_distance_bound_is_the_single_byte_token_distance(dfa, vocabulary, budget):
    """The bound is the token distance over the single-byte text tokens alone (brute force on
    that sub-vocabulary), so it is never below the true token distance; `completes_within`
    decides exactly as the token distance does."""
    from corral.kernels import Constraint, Vocabulary

    eos = set(vocabulary.eos_ids)
    singles = [
        data if data and len(data) == 1 and t not in eos else None
        for t, data in enumerate(vocabulary.tokens)
    ]
    only_singles = Vocabulary.from_list(singles + [None], eos_ids=[len(singles)])
    index = TokenIndex(dfa, vocabulary)
    expected_bound = brute_force_token_distance(dfa, only_singles)
    assert index.token_distance_bound.tolist() == expected_bound
    exact = index.token_distance.tolist()
    for s in range(dfa.n_states):
        if expected_bound[s] >= 0:
            assert 0 <= exact[s] <= expected_bound[s]
        if not dfa.accept[s] or index.can_continue(s):
            c = Constraint(index, s)
            if not c.done:
                assert c.completes_within(budget) == (0 <= exact[s] <= budget)
    if min(expected_bound, default=0) >= 0:
        assert index.max_token_distance_bound == max(expected_bound, default=0)
        assert index.max_token_distance_bound >= index.max_token_distance
    else:
        assert index.max_token_distance_bound == float("inf")

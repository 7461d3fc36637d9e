"""Every state's mask equals a pure-Python walk of every token's bytes, and
`next_state` agrees with `Dfa.step`, for random DFAs, random patterns and random vocabularies
(docs/design.md section 4)."""

from __future__ import annotations

import numpy as np
from corral.automata import regex_to_dfa
from corral.kernels import TokenIndex, unpack_ids
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import (
    SETTINGS,
    brute_force_token_distance,
    mask_ids,
    oracle_allowed,
    random_dfas,
    random_vocabularies,
)

MODES = st.sampled_from(["eager", "eager-parallel", "visit", "lazy"])


def check_index(dfa, vocabulary, mode):
    index = TokenIndex(dfa, vocabulary, mode=mode.split("-")[0], parallel=mode.endswith("parallel"))
    distance = brute_force_token_distance(dfa, vocabulary)
    for state in range(dfa.n_states):
        mask = index.mask(state)
        assert mask.dtype == np.uint32 and mask.shape == ((vocabulary.size + 31) // 32,)
        expected = oracle_allowed(dfa, vocabulary, state)
        assert mask_ids(mask) == expected, f"state {state}"
        assert index.allowed(state).tolist() == sorted(expected)
        for t, data in enumerate(vocabulary.tokens):
            walked = -1 if not data or t in vocabulary.eos_ids else dfa.step(state, data)
            assert index.next_state(state, t) == walked
        for k in (0, 1, 3, 50, 3, 1, 0, 60):  # again: the cache; above the plain mask's
            within = {
                t
                for t in expected - set(vocabulary.eos_ids)
                if 0 <= distance[index.next_state(state, t)] <= k
            } | (expected & set(vocabulary.eos_ids))
            assert mask_ids(index.mask_within_tokens(state, k)) == within
    return index


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies(), mode=MODES)
def test_random_dfa_masks_equal_brute_force_walk(dfa, vocabulary, mode):
    check_index(dfa, vocabulary, mode)


ATOMS = ["a", "b", "c", "é", "€", "[a-c]", "[^a]", ".", "\\{", '"', "(?:ab|c)", "(a|é)", "[ab€]"]
QUANTIFIERS = ["", "", "*", "+", "?", "{2}", "{1,3}"]
piece = st.tuples(st.sampled_from(ATOMS), st.sampled_from(QUANTIFIERS)).map("".join)
patterns = st.lists(piece, min_size=1, max_size=5).map("".join) | st.lists(
    st.lists(piece, min_size=1, max_size=3).map("".join), min_size=2, max_size=3
).map("|".join)


@SETTINGS
@given(pattern=patterns, vocabulary=random_vocabularies(), mode=MODES)
def test_random_pattern_masks_equal_brute_force_walk(pattern, vocabulary, mode):
    check_index(regex_to_dfa(pattern), vocabulary, mode)


@SETTINGS
@given(dfa=random_dfas(max_states=4), vocabulary=random_vocabularies())
def test_eager_and_lazy_agree_and_share_identical_rows(dfa, vocabulary):
    eager = TokenIndex(dfa, vocabulary, mode="eager")
    lazy = TokenIndex(dfa, vocabulary, mode="lazy")
    visit = TokenIndex(dfa, vocabulary, mode="visit")
    rows = {eager.mask(s).tobytes() for s in range(dfa.n_states)}
    assert eager.n_unique_masks == len(rows)
    for s in reversed(range(dfa.n_states)):  # visit in another order than the eager build
        np.testing.assert_array_equal(eager.mask(s), lazy.mask(s))
        np.testing.assert_array_equal(eager.mask(s), visit.mask(s))
        assert visit.can_continue(s) == eager.can_continue(s) == lazy.can_continue(s)
        assert unpack_ids(eager.mask(s)).tolist() == eager.allowed(s).tolist()
    assert visit.n_unique_masks == len(rows)
    assert visit.mask_bytes == eager.mask_bytes
    for s in range(dfa.n_states):  # identical rows are one shared array
        for t in range(dfa.n_states):
            same = eager.mask(s).tobytes() == eager.mask(t).tobytes()
            assert (visit.mask(s) is visit.mask(t)) == same

"""`TokenIndex.token_distance` and `mask_within_tokens` (the budget rule, DESIGN.md section 4)
against a brute-force search over every token from every state (`brute_force_token_distance`)."""

from __future__ import annotations

import numpy as np
from corral.kernels import TokenIndex
from hypothesis import HealthCheck, given, settings
from kernel_strategies import (
    brute_force_token_distance,
    mask_ids,
    oracle_allowed,
    random_dfas,
    random_vocabularies,
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies())
def test_token_distance_equals_brute_force(dfa, vocabulary):
    index = TokenIndex(dfa, vocabulary)
    expected = brute_force_token_distance(dfa, vocabulary)
    assert index.token_distance.tolist() == expected
    assert index.token_distance.dtype == np.int32
    eos = set(vocabulary.eos_ids)
    for s in range(dfa.n_states):
        allowed = oracle_allowed(dfa, vocabulary, s)
        for k in (0, 1, 2):
            within = {
                t for t in allowed - eos if 0 <= expected[dfa.step(s, vocabulary.tokens[t])] <= k
            } | (allowed & eos)
            assert mask_ids(index.mask_within_tokens(s, k)) == within
        if expected[s] > 0:
            # the invariant the engine keeps: a state k + 1 tokens away has a way on within k
            assert mask_ids(index.mask_within_tokens(s, expected[s] - 1)) - eos

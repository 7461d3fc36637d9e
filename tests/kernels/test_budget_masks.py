"""Budget masks from the per-state tables of `masks.budget` equal the walk for one budget
(`one_mask` with a limit, the trie walk every budget mask used to be), on random DFAs and
vocabularies, and on schemas of the test data over the real SmolLM2 vocabulary; the saturation
budget is exactly the first budget whose mask is the plain mask (docs/design.md section 4)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from corral.automata import ConstrainError, schema_to_dfa
from corral.kernels import Constraint, TokenIndex
from corral.kernels.masks import budget
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, random_dfas, random_vocabularies

MODES = st.sampled_from(["eager", "visit", "lazy"])


def walked(index: TokenIndex, state: int, max_tokens: int) -> np.ndarray:
    """The reference: one trie walk keeping the tokens within `max_tokens` of acceptance."""
    return index._walk(state, index.token_distance, max_tokens)


def check_state(index: TokenIndex, state: int, budgets) -> None:
    saturation = int(index._budget.saturation[state])
    for k in budgets:
        expected = walked(index, state, k)
        got = index.mask_within_tokens(state, k)
        np.testing.assert_array_equal(got, expected, err_msg=f"state {state}, budget {k}")
        assert (index.budget_mask(state, k) is None) == (not expected.any())
        assert not got.flags.writeable
        # saturation: the plain mask from that budget on, never below it
        plain = np.array_equal(expected, index.mask(state))
        if saturation != budget.NEVER:
            assert plain == (k >= saturation), (state, k, saturation)
        else:
            assert not plain


@SETTINGS
@given(
    dfa=random_dfas(),
    vocabulary=random_vocabularies(),
    mode=MODES,
    order=st.randoms(use_true_random=False),
)
def test_budget_masks_equal_the_walk_for_each_budget(dfa, vocabulary, mode, order):
    index = TokenIndex(dfa, vocabulary, mode=mode)
    states = list(range(dfa.n_states))
    order.shuffle(states)  # the first budget call of a state in any order, before or after mask
    for state in states:
        budgets = list(range(index.max_token_distance + 3)) * 2  # again: from the table
        order.shuffle(budgets)
        check_state(index, state, budgets)


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies(), budget_left=st.integers(1, 8))
def test_constraint_mask_under_a_tight_budget_is_the_budget_mask_else_the_plain_one(
    dfa, vocabulary, budget_left
):
    index = TokenIndex(dfa, vocabulary, mode="visit")
    for state in range(dfa.n_states):
        c = Constraint(index, state)
        if c.done:
            continue
        expected = walked(index, state, budget_left - 1)
        if not expected.any() or index.max_token_distance <= budget_left - 1:
            expected = index.mask(state)  # no token fits, or no state is too far: no budget
        np.testing.assert_array_equal(c.mask(budget_left), expected)


def test_the_table_cache_is_bounded_and_evicted_states_are_walked_again(monkeypatch):
    """`a{0,40}b` under a vocabulary of a, aa, aaa and b: each state's ends lie at a few
    distances, so every state has a table of rows; with room for 6 rows the LRU drops states
    and the masks stay the walk's."""
    from corral.automata import regex_to_dfa
    from corral.kernels import Vocabulary

    monkeypatch.setattr(budget, "CACHE_ROWS", 6)
    vocabulary = Vocabulary.from_list([b"a", b"aa", b"aaa", b"b", None], eos_ids=[4])
    index = TokenIndex(regex_to_dfa("a{0,40}b"), vocabulary)
    for _ in range(2):
        for state in range(index.n_states):
            check_state(index, state, range(0, 16))
            assert index._budget.cached_rows <= 6


def sample_schemas(root, limit: int = 6, max_states: int = 400):
    """The first schema of each JSONSchemaBench sample file that compiles to at most
    `max_states` states, up to `limit` of them."""
    found = []
    for path in sorted((root / "jsonschemabench").glob("*.jsonl")):
        for line in path.read_text().splitlines()[:3]:
            try:
                dfa = schema_to_dfa(json.loads(line)["schema"])
            except ConstrainError:
                continue
            if 2 < dfa.n_states <= max_states:
                found.append((path.stem, dfa))
                break
        if len(found) == limit:
            break
    return found


@pytest.mark.slow
def test_budget_masks_of_sample_schemas_over_smollm2_equal_the_walk(smollm2, sample_data):
    vocabulary, _ = smollm2
    schemas = sample_schemas(sample_data)
    assert len(schemas) >= 4
    rng = np.random.default_rng(0)
    for _name, dfa in schemas:
        index = TokenIndex(dfa, vocabulary)
        states = {0, *rng.choice(dfa.n_states, size=min(12, dfa.n_states), replace=False).tolist()}
        for state in sorted(states):
            sat = int(index._budget.saturation[state])
            near = {0, 1, int(index.token_distance[state])}
            if sat != budget.NEVER:
                near |= {sat - 2, sat - 1, sat, sat + 1}
            check_state(index, state, sorted(k for k in near if k >= 0))

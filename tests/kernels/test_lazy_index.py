"""`LazyTokenIndex` (corral.kernels.masks.lazy_index): the masks and transitions of a DFA made on
demand equal a brute-force walk of every token on the canonical DFA, and `TokenIndex`'s on the
real SmolLM2 vocabulary, state for state along the same tokens, however few states one walk
may report."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import EmptyLanguageError, regex_to_dfa, schema_to_dfa
from corral.automata.lazy import lazy_regex_dfa, lazy_schema_dfa
from corral.kernels import TokenIndex, unpack_ids
from corral.kernels.masks import lazy_index as lazy_index_module
from corral.kernels.masks.lazy_index import LazyTokenIndex
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, mask_ids, oracle_allowed, random_vocabularies
from test_constrained_output import SCHEMAS
from test_index_oracle import patterns

untrimmed = st.lists(st.sampled_from(["a", "b*", "(?:ab|c)", "é", "[^\\s\\S]c", "€?"]), min_size=1)


def paired_states(lazy: LazyTokenIndex, dfa, vocabulary, order: np.random.Generator):
    """Every (lazy state, canonical state) reached by the same tokens from the starts, in a
    random breadth-first order; `next_state` of every token checked on the way."""
    pairs, seen = [(0, 0)], {0: 0}
    for lazy_state, state in pairs:
        tokens = order.permutation(vocabulary.size).tolist()
        for t in tokens:
            data = vocabulary.tokens[t]
            walked = -1 if not data or t in vocabulary.eos_ids else dfa.step(state, data)
            got = lazy.next_state(lazy_state, t)
            assert (got < 0) == (walked < 0), f"token {t} from state {state}"
            if walked >= 0 and walked not in seen:
                seen[walked] = got
                pairs.append((got, walked))
            elif walked >= 0:
                assert lazy.is_accepting(got) == bool(dfa.accept[walked])
    return pairs


@SETTINGS
@given(
    pattern=patterns | untrimmed.map("".join),
    vocabulary=random_vocabularies(),
    seed=st.integers(0, 2**32 - 1),
    slots=st.sampled_from([1, 2, 256]),
    lazy_masks=st.sampled_from([None, 0, 1, 3]),
)
def test_lazy_masks_equal_the_brute_force_walk_of_the_canonical_dfa(
    pattern, vocabulary, seed, slots, lazy_masks
):
    try:
        dfa = regex_to_dfa(pattern)
    except EmptyLanguageError:  # (tests/automata/test_lazy_dfa.py: the lazy DFA says so too)
        return
    order = np.random.default_rng(seed)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(lazy_index_module, "PENDING_SLOTS", slots)  # few: more rounds
        lazy = LazyTokenIndex(lazy_regex_dfa(pattern), vocabulary, lazy_masks)
        for lazy_state, state in paired_states(lazy, dfa, vocabulary, order):
            mask = lazy.mask(lazy_state)
            assert mask.dtype == np.uint32 and mask.shape == ((vocabulary.size + 31) // 32,)
            assert mask_ids(mask) == oracle_allowed(dfa, vocabulary, state), f"state {state}"
            assert lazy.allowed(lazy_state).tolist() == sorted(mask_ids(mask))
            assert lazy.mask(lazy_state) is mask  # kept
        walked = len(paired_states(lazy, dfa, vocabulary, order))
        assert lazy.finished == (lazy_masks is not None and walked > lazy_masks)


GRAMMARS = [
    ("regex", r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d"),
    ("regex", "(cat|car|dog)s?"),
    *(("schema", schema) for schema in SCHEMAS.values()),
    (  # a length-bounded string's chain and an array of numbers
        "schema",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "tags": {"type": "array", "items": {"type": "number"}},
            },
            "required": ["city"],
        },
    ),
]


@pytest.mark.parametrize("lazy_masks", [1, None])
@pytest.mark.parametrize("kind, grammar", GRAMMARS)
def test_lazy_masks_equal_the_token_index_on_smollm2_along_random_walks(
    kind, grammar, lazy_masks, smollm2
):
    vocabulary, _ = smollm2
    dfa = regex_to_dfa(grammar) if kind == "regex" else schema_to_dfa(grammar)
    made = lazy_regex_dfa(grammar) if kind == "regex" else lazy_schema_dfa(grammar)
    lazy = LazyTokenIndex(made, vocabulary, lazy_masks)
    index = TokenIndex(dfa, vocabulary)
    eos = set(vocabulary.eos_ids)
    rng = np.random.default_rng(0)
    for _ in range(8):
        lazy_state, state = 0, 0
        for _ in range(80):
            np.testing.assert_array_equal(lazy.mask(lazy_state), index.mask(state))
            assert lazy.is_accepting(lazy_state) == index.is_accepting(state)
            text = [t for t in unpack_ids(index.mask(state)).tolist() if t not in eos]
            if not text:
                break
            token = int(rng.choice(text))
            lazy_state, state = lazy.next_state(lazy_state, token), index.next_state(state, token)
            assert lazy_state >= 0
    assert lazy.finished == (lazy_masks is not None)


def both_indexes(vocabulary, pattern: str):
    """(name, index) of `pattern` as a `TokenIndex` and as a `LazyTokenIndex` (first mask
    walked, so some states are made and others are not)."""
    lazy = LazyTokenIndex(lazy_regex_dfa(pattern), vocabulary)
    lazy.mask(0)
    return [("eager", TokenIndex(regex_to_dfa(pattern), vocabulary)), ("lazy", lazy)]


@pytest.mark.parametrize("state", [-1, -2, "past", 10**6])
def test_a_state_number_that_is_no_state_is_an_index_error_everywhere(state, smollm2):
    vocabulary, _ = smollm2
    token = vocabulary.tokens.index(b"a")
    for name, index in both_indexes(vocabulary, "abc"):
        n = index.dfa.n_states
        bad = n if state == "past" else state
        calls = [
            (index.mask, bad),
            (index.next_state, bad, token),
            (index.next_state, bad, vocabulary.eos_ids[0]),
            (index.step_bytes, bad, b"a"),
            (index.is_accepting, bad),
        ]
        if name == "lazy":
            calls += [(index.dfa.accepting, bad), (index.dfa.row, bad)]
        for function, *args in calls:
            with pytest.raises(IndexError, match=f"state {bad} "):
                function(*args)


@pytest.mark.parametrize("token", [-1, -49152, "size", 10**9])
def test_a_token_id_that_is_no_token_is_an_index_error(token, smollm2):
    vocabulary, _ = smollm2
    bad = vocabulary.size if token == "size" else token
    for _, index in both_indexes(vocabulary, ".*"):
        with pytest.raises(IndexError, match=f"token id {bad} out of range"):
            index.next_state(0, bad)


def test_wrong_arguments_are_named(smollm2):
    vocabulary, _ = smollm2
    for _, index in both_indexes(vocabulary, ".*"):
        with pytest.raises(TypeError, match="data must be bytes, not str"):
            index.step_bytes(0, "cat")
    with pytest.raises(TypeError, match="LazyTokenIndex takes a LazyDfa, not Dfa"):
        LazyTokenIndex(regex_to_dfa("a"), vocabulary)
    with pytest.raises(TypeError, match="TokenIndex takes a Dfa, not LazyDfa"):
        TokenIndex(lazy_regex_dfa("a"), vocabulary)
    for bad in (-1, 1.5, "1"):
        with pytest.raises(ValueError, match="lazy_masks must be None or an int >= 0"):
            LazyTokenIndex(lazy_regex_dfa("a"), vocabulary, bad)

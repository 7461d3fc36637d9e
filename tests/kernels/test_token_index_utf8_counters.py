"""Counters of UTF-8 characters (`maxLength` over a JSON string): a run whose every UTF-8
character, like each byte of its categories, goes to the counter's next state counts characters
(`DECODES_UTF8` on a state that does not loop, `run_categories`), so the tokens mixing those
bytes with valid UTF-8 are in its start row (`Vocabulary.run_row`) and their subtrees are
skipped. Checked against brute force: the flag by reading every character through the table,
the rows by decoding every token, the masks by walking every token's bytes."""

from __future__ import annotations

import numpy as np
from corral.automata import regex_to_dfa
from corral.automata.dfa import Dfa
from corral.kernels import TokenIndex
from corral.kernels.masks.index import ALL_CATEGORIES, run_categories
from corral.kernels.masks.trie import (
    BYTE_CATEGORY,
    DECODES_UTF8,
    N_CATEGORIES,
    UTF8_DECODER,
    loop_categories,
)
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, mask_ids, oracle_allowed
from test_trie_runs import CATEGORY_BYTES, CHARACTERS, utf8_vocabularies, valid_prefix


def next_after_characters(trans: np.ndarray, state: int) -> int | None:
    """The one live state every non-ASCII character read from `state` ends in, else None."""
    ends = set()
    for sequences in CHARACTERS:
        at = np.full(len(sequences), state)
        for k in range(sequences.shape[1]):
            at = trans[at, sequences[:, k]]
            if (at < 0).any():
                return None
        ends |= set(at.tolist())
    return ends.pop() if len(ends) == 1 else None


@st.composite
def counter_dfas(draw, vocabulary) -> Dfa:
    """A counter of `n` characters: states 0..n count, each reading some ASCII categories and
    every UTF-8 character (through its own copy of `UTF8_DECODER`'s states) to the next; `"`
    ends in an accepting state. Some transitions are then changed at random (bytes of the
    vocabulary's tokens), so a step of the chain may not hold."""
    n = draw(st.integers(1, 4))
    categories = draw(st.lists(st.integers(0, 8), min_size=1, max_size=9))
    accept_state = n + 1
    size = n + 2 + 7 * n
    trans = np.full((size, 256), -1, dtype=np.int32)
    for k in range(n):
        inner = {u: n + 2 + 7 * k + u - 1 for u in range(1, 8)}  # decoder state -> DFA state
        for c in categories:
            trans[k, CATEGORY_BYTES[c]] = k + 1
        for u in range(8):
            source = k if u == 0 else inner[u]
            for b in range(0x80, 0x100):
                v = UTF8_DECODER[u, b]
                if v >= 0:
                    trans[source, b] = k + 1 if v == 0 else inner[v]
    for k in range(n + 1):
        trans[k, ord('"')] = accept_state
    used = sorted({b for data in vocabulary.tokens if data for b in data})
    for _ in range(draw(st.integers(0, 3))):
        state = draw(st.integers(0, size - 1))
        trans[state, draw(st.sampled_from(used))] = draw(st.integers(-1, size - 1))
    return Dfa(trans, np.arange(size) == accept_state)


def check_counter_flags(trans: np.ndarray, depth: int) -> None:
    """Every state flagged as a counter of characters reads, from each state of its run, every
    UTF-8 character to the run's next state (the next state of its categories' bytes)."""
    loops = loop_categories(trans)
    own, run = run_categories(trans, loops, depth)
    for s in range(trans.shape[0]):
        if loops[s] & ALL_CATEGORIES or not own[s] & DECODES_UTF8:
            continue
        members = np.flatnonzero(BYTE_CATEGORY & own[s] & ALL_CATEGORIES)
        at = s
        for _ in range(int(run[s])):
            (following,) = set(trans[at, members].tolist())
            assert following >= 0 and next_after_characters(trans, at) == following
            at = following


@SETTINGS
@given(data=st.data(), vocabulary=utf8_vocabularies(), depth=st.integers(1, 6))
def test_counter_flags_and_masks_equal_brute_force(data, vocabulary, depth):
    dfa = data.draw(counter_dfas(vocabulary))
    check_counter_flags(np.ascontiguousarray(dfa.trans, dtype=np.int32), depth)
    for mode in ("eager", "visit", "lazy"):
        index = TokenIndex(dfa, vocabulary, mode=mode)
        for state in range(dfa.n_states):
            assert mask_ids(index.mask(state)) == oracle_allowed(dfa, vocabulary, state), state


@SETTINGS
@given(
    vocabulary=utf8_vocabularies(),
    bounds=st.tuples(st.integers(0, 3), st.integers(0, 5)),
    body=st.sampled_from(['[^"\\\\]', "[a-zé€😀 ]", ".", "[^a]"]),
)
def test_counted_strings_masks_equal_brute_force(vocabulary, bounds, body):
    low, high = min(bounds), max(bounds)
    dfa = regex_to_dfa(f'"{body}{{{low},{high}}}"')
    check_counter_flags(np.ascontiguousarray(dfa.trans, dtype=np.int32), 8)
    for mode in ("eager", "visit"):
        index = TokenIndex(dfa, vocabulary, mode=mode)
        for state in range(dfa.n_states):
            assert mask_ids(index.mask(state)) == oracle_allowed(dfa, vocabulary, state), state


@SETTINGS
@given(
    vocabulary=utf8_vocabularies(),
    own=st.integers(1, (1 << N_CATEGORIES) - 1),
    length=st.integers(0, 7),
)
def test_a_character_run_row_holds_the_tokens_of_few_characters(vocabulary, own, length):
    utf8 = int(np.bitwise_or.reduce(BYTE_CATEGORY[0x80:]))
    expected = {
        t
        for t, data in enumerate(vocabulary.tokens)
        if data
        and t not in vocabulary.eos_ids
        and valid_prefix(data)
        and all(BYTE_CATEGORY[b] & (own | utf8) for b in data)
        and sum(not 0x80 <= b < 0xC0 for b in data) <= length
    }
    assert mask_ids(vocabulary.run_row(own | DECODES_UTF8, length)) == expected


def test_a_counted_json_string_counts_characters():
    trans = np.ascontiguousarray(regex_to_dfa('"[^"\\\\]{0,5}"').trans, dtype=np.int32)
    own, run = run_categories(trans, loop_categories(trans), 16)
    counters = [s for s in range(trans.shape[0]) if own[s] & DECODES_UTF8]
    # after the opening quote: five characters left, then four, ..., then one
    assert sorted(int(run[s]) for s in counters) == [1, 2, 3, 4, 5]

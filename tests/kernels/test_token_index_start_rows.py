"""The start rows of the mask walks (`Vocabulary.run_row`, `loop_row`) are made from the
vocabulary's token groups (`Trie.token_groups`: the text tokens by the categories of their
bytes and UTF-8 validity), a group ORed whole and its long tokens cleared or its short tokens
set. Checked against brute force over every token's bytes, at every length around the longest
token, with and without `DECODES_UTF8`."""

from __future__ import annotations

import numpy as np
from corral.kernels.masks.trie import BYTE_CATEGORY, DECODES_UTF8, N_CATEGORIES, UTF8_CATEGORIES
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, mask_ids, random_vocabularies
from test_trie_runs import utf8_vocabularies, valid_prefix

vocabularies = st.one_of(random_vocabularies(), utf8_vocabularies())


def text_tokens(vocabulary) -> dict[int, bytes]:
    eos = set(vocabulary.eos_ids)
    return {t: data for t, data in enumerate(vocabulary.tokens) if data and t not in eos}


def characters(data: bytes) -> int:
    return sum(not 0x80 <= b < 0xC0 for b in data)


@SETTINGS
@given(vocabulary=vocabularies)
def test_token_groups_partition_the_text_tokens_by_categories_and_validity(vocabulary):
    trie = vocabulary.trie
    groups = trie.token_groups(vocabulary.n_words)
    tokens = text_tokens(vocabulary)
    seen: set[int] = set()
    for g, row in enumerate(groups.rows):
        members = mask_ids(row)
        assert members and not members & seen
        seen |= members
        for t in members:
            data = tokens[t]
            assert int(np.bitwise_or.reduce(BYTE_CATEGORY[list(data)])) == groups.categories[g]
            assert valid_prefix(data) == groups.valid[g]
        for ids, starts, size in (
            (groups.by_bytes, groups.bytes_start, len),
            (groups.by_chars, groups.chars_start, characters),
        ):
            for length in range(trie.max_depth + 1):
                part = ids[starts[g, length] : starts[g, length + 1]].tolist()
                assert all(size(tokens[t]) == length for t in part)
            assert set(ids[starts[g, 0] : starts[g, -1]].tolist()) == members
    assert seen == set(tokens)


@SETTINGS
@given(
    vocabulary=vocabularies,
    own=st.integers(0, (1 << N_CATEGORIES) - 1),
    decodes=st.booleans(),
    extra=st.integers(-8, 2),
)
def test_start_rows_against_brute_force(vocabulary, own, decodes, extra):
    length = max(0, vocabulary.trie.max_depth + extra)  # around the longest token
    inside = own | int(UTF8_CATEGORIES) if decodes else own
    expected = {
        t
        for t, data in text_tokens(vocabulary).items()
        if all(BYTE_CATEGORY[b] & inside for b in data)
        and (not decodes or valid_prefix(data))
        and (characters(data) if decodes else len(data)) <= length
    }
    row = vocabulary.run_row(own | (DECODES_UTF8 if decodes else 0), length)
    assert mask_ids(row) == expected
    assert not row.flags.writeable
    if length >= vocabulary.trie.max_depth:
        np.testing.assert_array_equal(row, vocabulary.loop_row(own, decodes_utf8=decodes))

"""The `Vocabulary` value type and the byte trie (docs/design.md section 4): token ids to raw bytes
from a list, decoding, spelling a byte string in tokens. The readers of tokenizer files are tested
in tests/model/test_vocabulary_readers.py."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels import Vocabulary, VocabularyError, build_trie
from corral.kernels.masks.trie import BYTE_CATEGORY
from hypothesis import given, settings
from kernel_strategies import random_vocabularies


def test_from_list():
    vocabulary = Vocabulary.from_list([b"a", "é", None, b""], eos_ids=[2])
    assert vocabulary.tokens == (b"a", b"\xc3\xa9", None, b"")
    assert vocabulary.eos_ids == (2,) and vocabulary.size == 4 and vocabulary.n_words == 1
    assert vocabulary.decode([0, 1, 2, 3]) == b"a\xc3\xa9"
    with pytest.raises(VocabularyError):
        Vocabulary.from_list([b"a"], eos_ids=[1])


def test_spell_prefers_one_token_else_single_bytes():
    vocabulary = Vocabulary.from_list([b"a", b"b", b"ab", b"a", b"c", None, b"abc"], eos_ids=[6])
    assert vocabulary.spell(b"ab") == [2]
    assert vocabulary.spell(b"ba") == [1, 0]  # the lowest id of duplicate bytes
    assert vocabulary.spell(b"abc") == [0, 1, 4]  # EOS is never text, whatever its bytes
    with pytest.raises(VocabularyError):
        vocabulary.spell(b"ad")


@settings(max_examples=100, deadline=None)
@given(vocabulary=random_vocabularies())
def test_trie_layout(vocabulary):
    """Depth-first order, subtree ranges, and every text token exactly once at its path."""
    trie = build_trie(vocabulary.tokens, exclude=vocabulary.eos_ids)
    assert trie is not None
    n = trie.n_nodes
    paths = [b""] * n
    stack = [b""]
    for i in range(1, n):
        d = int(trie.depth[i])
        assert 1 <= d <= len(stack)
        del stack[d:]
        paths[i] = stack[d - 1] + bytes([int(trie.byte[i])])
        stack.append(paths[i])
    assert paths[1:] == sorted(paths[1:]) and len(set(paths)) == n  # preorder, sorted children
    for i in range(n):
        inside = [j for j in range(i, n) if paths[j].startswith(paths[i])]
        assert inside == list(range(i, int(trie.end[i])))
    expected = {
        t: data for t, data in enumerate(vocabulary.tokens) if data and t not in vocabulary.eos_ids
    }
    seen = {}
    for i in range(n):
        for t in trie.token_ids[trie.token_start[i] : trie.token_start[i + 1]].tolist():
            assert t not in seen
            seen[t] = paths[i]
    assert seen == expected
    for i in range(n):
        below = set(b"".join(p[len(paths[i]) - 1 :] if i else p for p in paths[i : trie.end[i]]))
        expected_categories = np.bitwise_or.reduce(BYTE_CATEGORY[sorted(below)]) if below else 0
        assert trie.categories[i] == expected_categories
    assert trie.max_depth == max(map(len, expected.values()), default=0)
    assert trie.token_start.dtype == trie.token_ids.dtype == trie.end.dtype == np.int32
    assert vocabulary.trie is vocabulary.trie  # built once, cached

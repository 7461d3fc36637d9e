"""Runs (`run_categories`, `Vocabulary.run_row`): a state whose next steps on some byte
categories each go to one live state whatever the byte (a length-bounded string's counter)
starts its walk from the row of the tokens that run allows, and skips the subtrees inside it.
Checked against brute force: the runs by following the table byte by byte, the rows by reading
every token, and the masks of DFAs made of such chains by walking every token's bytes."""

from __future__ import annotations

import codecs

import numpy as np
from corral.automata import regex_to_dfa
from corral.automata.dfa import Dfa
from corral.kernels import TokenIndex, Vocabulary
from corral.kernels.masks.index import ALL_CATEGORIES, run_categories
from corral.kernels.masks.trie import (
    BYTE_CATEGORY,
    DECODES_UTF8,
    N_CATEGORIES,
    UTF8_CATEGORIES,
    UTF8_DECODER,
    loop_categories,
)
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


def _characters() -> list[np.ndarray]:
    """uint8 `[n, k]` for k = 2, 3, 4: every Unicode scalar value's UTF-8 encoding of k bytes."""
    by_length: dict[int, list[bytes]] = {2: [], 3: [], 4: []}
    for code in range(0x80, 0x110000):
        if not 0xD800 <= code < 0xE000:
            data = chr(code).encode()
            by_length[len(data)].append(data)
    return [np.frombuffer(b"".join(v), np.uint8).reshape(-1, k) for k, v in by_length.items()]


CHARACTERS = _characters()


def reads_characters_back(trans: np.ndarray, state: int) -> bool:
    """Every non-ASCII character read from `state` stays live and ends in `state`."""
    for sequences in CHARACTERS:
        at = np.full(len(sequences), state)
        for k in range(sequences.shape[1]):
            at = trans[at, sequences[:, k]]
            if (at < 0).any():
                return False
        if (at != state).any():
            return False
    return True


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
            assert (own[s] & ALL_CATEGORIES, run[s]) == (loops[s] & ALL_CATEGORIES, depth)
            if own[s] & DECODES_UTF8:  # sound: every UTF-8 character leads back to s
                assert reads_characters_back(trans, s)
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


# -- loops that read UTF-8 characters back to themselves (`DECODES_UTF8`) ---------------------

utf8_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4)


@st.composite
def utf8_vocabularies(draw) -> Vocabulary:
    """ASCII, whole characters of every UTF-8 length and pieces of them (a token cut inside a
    character, or starting inside one), one EOS."""
    tokens = []
    for text in draw(st.lists(utf8_text, min_size=1, max_size=40)):
        data = text.encode()
        start, stop = sorted(draw(st.lists(st.integers(0, len(data)), min_size=2, max_size=2)))
        tokens.append(data if draw(st.booleans()) else data[start:stop])
    tokens = [t for t in tokens if t] or [b"a"]
    return Vocabulary.from_list([*tokens, None], [len(tokens)])


@st.composite
def string_dfas(draw, vocabulary: Vocabulary) -> Dfa:
    """State 0 loops on some ASCII categories and reads UTF-8 characters through states 1-7
    (`UTF8_DECODER`'s) back to 0; `"` ends in accepting state 8. Some transitions are then
    changed at random (bytes of the vocabulary's tokens), so the decoder may not hold."""
    trans = np.full((9, 256), -1, dtype=np.int32)
    for c in draw(st.lists(st.integers(0, 8), max_size=9)):  # ASCII categories
        trans[0, CATEGORY_BYTES[c]] = 0
    for u in range(8):
        for b in range(0x80, 0x100):
            if UTF8_DECODER[u, b] >= 0:
                trans[u, b] = UTF8_DECODER[u, b]
    trans[0, ord('"')] = 8
    used = sorted({b for data in vocabulary.tokens if data for b in data})
    for _ in range(draw(st.integers(0, 3))):  # mostly state 0: a byte it takes or not
        state = draw(st.sampled_from([0, 0, 0, 0, *range(1, 9)]))
        trans[state, draw(st.sampled_from(used))] = draw(st.integers(-1, 8))
    return Dfa(trans, np.arange(9) == 8)


def valid_prefix(data: bytes) -> bool:
    """Whether `data` is a prefix of valid UTF-8 (Python's incremental decoder)."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


@SETTINGS
@given(vocabulary=utf8_vocabularies())
def test_utf8_states_follow_python_decoder(vocabulary):
    trie = vocabulary.trie
    paths = {}  # node -> its bytes, rebuilt from the preorder
    stack = [b""]
    for i in range(1, trie.n_nodes):
        d = int(trie.depth[i])
        del stack[d:]
        stack.append(stack[-1] + bytes([trie.byte[i]]))
        paths[i] = stack[-1]
    for i, data in paths.items():
        assert (trie.utf8_state[i] >= 0) == valid_prefix(data), data
        below = [paths[j] for j in range(i, int(trie.end[i]))]
        assert bool(trie.utf8_whole[i]) == all(map(valid_prefix, below)), data


@SETTINGS
@given(data=st.data(), vocabulary=utf8_vocabularies(), mode=st.sampled_from(["eager", "visit"]))
def test_decoding_loops_masks_equal_brute_force_walk(data, vocabulary, mode):
    dfa = data.draw(string_dfas(vocabulary))
    index = TokenIndex(dfa, vocabulary, mode=mode)
    for state in range(dfa.n_states):
        assert mask_ids(index.mask(state)) == oracle_allowed(dfa, vocabulary, state), state


def test_a_json_string_state_decodes_utf8():
    trans = np.ascontiguousarray(regex_to_dfa('"[^"\\\\]*"').trans, dtype=np.int32)
    own, _ = run_categories(trans, loop_categories(trans), 8)
    assert own[1] & DECODES_UTF8 and not own[0] & DECODES_UTF8


@SETTINGS
@given(vocabulary=utf8_vocabularies(), loops=st.integers(0, 0xFFFF))
def test_decoding_loop_row_adds_the_valid_utf8_tokens(vocabulary, loops):
    inside = (loops | int(UTF8_CATEGORIES)) & 0xFFFF
    expected = {
        t
        for t, data in enumerate(vocabulary.tokens)
        if data
        and t not in vocabulary.eos_ids
        and valid_prefix(data)
        and all(int(BYTE_CATEGORY[b]) & ~inside & 0xFFFF == 0 for b in data)
    }
    assert mask_ids(vocabulary.loop_row(loops, decodes_utf8=True)) == expected
    plain = {
        t
        for t, data in enumerate(vocabulary.tokens)
        if data
        and t not in vocabulary.eos_ids
        and all(int(BYTE_CATEGORY[b]) & ~loops & 0xFFFF == 0 for b in data)
    }
    assert mask_ids(vocabulary.loop_row(loops)) == plain

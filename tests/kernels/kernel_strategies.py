"""Hypothesis strategies and brute-force oracles shared by the kernel tests: random DFAs, random
vocabularies with every awkward kind of token, a pure-Python walk of every token, and the token
distance by Bellman-Ford over every token from every state."""

from __future__ import annotations

import numpy as np
from corral.automata.dfa import Dfa
from corral.kernels import Vocabulary
from corral.kernels.masks.trie import BYTE_CATEGORY, N_CATEGORIES
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""The property tests' settings: 150 examples, no deadline (the first examples compile kernels)."""

# Bytes the random DFAs and tokens use: ASCII, and the UTF-8 of é (C3 A9) and € (E2 82 AC).
ALPHABET = [ord("a"), ord("b"), ord("c"), ord("{"), ord('"'), 0xC3, 0xA9, 0xE2, 0x82, 0xAC]
PIECES = [b"a", b"b", b"c", b"ab", b"abc", b"ba", b"{", b'"', b'"a', "é".encode(), "€".encode()]
PIECES += [b"\xc3", b"\xa9", b"\xe2\x82", b"\x82\xac", b"a\xc3", "é€".encode(), b"aaaa"]


@st.composite
def random_dfas(draw, max_states: int = 6) -> Dfa:
    """A DFA over `ALPHABET` with random transitions (some dead) and random accepting states;
    some states loop to themselves on whole byte categories (as inside a JSON string), so that
    the walk's subtree skipping is exercised. Unlike a compiled DFA it may have states that
    cannot reach acceptance: the kernels must not care."""
    n = draw(st.integers(1, max_states))
    trans = np.full((n, 256), -1, dtype=np.int32)
    for s in range(n):
        for c in draw(st.lists(st.integers(0, N_CATEGORIES - 1), max_size=N_CATEGORIES)):
            trans[s, (BYTE_CATEGORY >> c) & 1 == 1] = s
        for b in draw(st.lists(st.sampled_from(ALPHABET), unique=True)):
            trans[s, b] = draw(st.integers(-1, n - 1))
    accept = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    return Dfa(trans, accept)


token = st.one_of(
    st.sampled_from(PIECES),
    st.binary(min_size=1, max_size=5).map(lambda b: bytes(ALPHABET[x % len(ALPHABET)] for x in b)),
    st.text(alphabet='abc{"é€', min_size=1, max_size=4).map(str.encode),
)


@st.composite
def random_vocabularies(draw, max_size: int = 80) -> Vocabulary:
    """Single bytes, multi-byte UTF-8 tokens, tokens holding part of a UTF-8 character,
    duplicates, special tokens (None), an empty token, and one or two EOS ids."""
    tokens: list[bytes | None] = draw(st.lists(token, min_size=1, max_size=max_size))
    tokens += draw(st.lists(st.sampled_from(tokens), max_size=5))  # duplicates
    tokens += [None] * draw(st.integers(0, 3))  # specials
    if draw(st.booleans()):
        tokens.append(b"")
    order = draw(st.permutations(range(len(tokens))))
    tokens = [tokens[i] for i in order]
    n_eos = draw(st.integers(1, 2))
    eos_ids = []
    for _ in range(n_eos):
        tokens.append(draw(st.sampled_from([None, b"</s>", b"a"])))  # EOS whatever its bytes
        eos_ids.append(len(tokens) - 1)
    return Vocabulary.from_list(tokens, eos_ids)


def oracle_allowed(dfa: Dfa, vocabulary: Vocabulary, state: int) -> set[int]:
    """The token ids allowed in `state` by docs/design.md section 4, walking every token's bytes."""
    allowed = set()
    for t, data in enumerate(vocabulary.tokens):
        if t in vocabulary.eos_ids:
            if dfa.accept[state]:
                allowed.add(t)
        elif data and dfa.step(state, data) >= 0:
            allowed.add(t)
    return allowed


def mask_ids(mask: np.ndarray) -> set[int]:
    """The set bits of a packed uint32 mask, read bit by bit (independently of the kernels)."""
    return {32 * w + j for w, word in enumerate(mask.tolist()) for j in range(32) if word >> j & 1}


def brute_force_token_distance(dfa, vocabulary) -> list[int]:
    """Bellman-Ford over the token graph, walking every token's bytes with `Dfa.step`."""
    n = dfa.n_states
    distance = [0 if dfa.accept[s] else -1 for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n):
            for t, data in enumerate(vocabulary.tokens):
                if not data or t in vocabulary.eos_ids:
                    continue
                e = dfa.step(s, data)
                if (
                    e >= 0
                    and distance[e] >= 0
                    and (distance[s] < 0 or distance[e] + 1 < distance[s])
                ):
                    distance[s] = distance[e] + 1
                    changed = True
    return distance

"""The thinking budget's rule (`corral.kernels.masks.budget.ThoughtBudget`) against a brute-force
walk of every token: `closing(s, k)`, the fewest tokens to a complete answer whose thinking block
closes within k tokens, equals a layered Bellman-Ford over the token graph, and every mask
keeps exactly the tokens after which such an answer still fits (docs/tools.md, "Thinking
budgets"); an engine that keeps to the masks never leaves a state where nothing fits."""

from __future__ import annotations

import numpy as np
from corral.automata import regex_to_dfa
from corral.kernels import TokenIndex
from corral.kernels.masks.budget import ThoughtBudget, thought_region
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import (
    SETTINGS,
    brute_force_token_distance,
    mask_ids,
    random_dfas,
    random_vocabularies,
)


def after_the_block(dfa, inside: np.ndarray) -> np.ndarray:
    """bool `[n_states]`: the states a path reaches after an outside state, byte by byte. A
    thinking block's states are those read before its closer (`thought_region`, which refuses
    a state reached both inside and after it), so none of these is inside: a random `inside`
    is cut to fit."""
    after = np.zeros(dfa.n_states, bool)
    stack = [s for s in range(dfa.n_states) if not inside[s]]
    while stack:
        for t in set(dfa.trans[stack.pop()].tolist()) - {-1}:
            if not after[t]:
                after[t] = True
                stack.append(t)
    return after


def brute_force_closing(dfa, vocabulary, inside, k_max: int) -> list[list[int]]:
    """closing[k][s] for k = 0..k_max, walking every token's bytes with `Dfa.step`."""
    distance = brute_force_token_distance(dfa, vocabulary)
    n = dfa.n_states
    rows = [[(0 if dfa.accept[s] else -1) if inside[s] else distance[s] for s in range(n)]]
    for _ in range(k_max):
        prev, row = rows[-1], []
        for s in range(n):
            if not inside[s]:
                row.append(distance[s])
                continue
            best = 0 if dfa.accept[s] else -1
            for t, data in enumerate(vocabulary.tokens):
                if best == 0 or not data or t in vocabulary.eos_ids:
                    continue
                e = dfa.step(s, data)
                d = -1 if e < 0 else (prev[e] if inside[e] else distance[e])
                if d >= 0 and (best < 0 or d + 1 < best):
                    best = d + 1
            row.append(best)
        rows.append(row)
    return rows


@SETTINGS
@given(dfa=random_dfas(), vocabulary=random_vocabularies(), data=st.data())
def test_closing_and_masks_equal_the_brute_force_walk(dfa, vocabulary, data):
    index = TokenIndex(dfa, vocabulary)
    inside = np.array(data.draw(st.lists(st.booleans(), min_size=dfa.n_states,
                                         max_size=dfa.n_states)), dtype=bool)  # fmt: skip
    thought = ThoughtBudget(index, inside)
    k_max = thought.saturation + 3
    expected = brute_force_closing(dfa, vocabulary, inside, k_max)
    for k in range(k_max + 1):
        assert [thought.closing(s, k) for s in range(dfa.n_states)] == expected[k], k
    distance = brute_force_token_distance(dfa, vocabulary)
    assert expected[thought.saturation] == [
        distance[s] if not inside[s] or distance[s] >= 0 else expected[k_max][s]
        for s in range(dfa.n_states)
    ]
    for s in np.flatnonzero(inside).tolist():
        for k in range(1, k_max + 1):
            for left in range(1, max(distance + [0]) + 3):
                want = set()
                for t, piece in enumerate(vocabulary.tokens):
                    if t in vocabulary.eos_ids:
                        if dfa.accept[s]:
                            want.add(t)
                        continue
                    e = dfa.step(s, piece) if piece else -1
                    if e >= 0 and 0 <= expected[k - 1][e] <= left - 1:
                        want.add(t)
                got = thought.mask(s, k, left)
                assert mask_ids(got) == want, (s, k, left)
                assert not got.flags.writeable


def test_the_region_is_the_states_before_the_closer():
    """`thought_region` on `<t>` THOUGHT `</t>` then digits: the states before the closer's
    last byte are inside, those after are not, and the opener's states are not yet open."""
    dfa = regex_to_dfa(r"(<t>[a-z]*<?/?t?[a-z]*</t>)?[0-9]+")
    block = regex_to_dfa(r"<t>[a-z]*<?/?t?[a-z]*</t>")
    trans = np.ascontiguousarray(block.trans, dtype=np.int32)
    opened = np.zeros(block.n_states, bool)
    state = block.step(0, b"<t>")
    stack = [state]
    opened[state] = True
    while stack:
        for nxt in trans[stack.pop()].tolist():
            if nxt >= 0 and not opened[nxt]:
                opened[nxt] = True
                stack.append(nxt)
    inside, is_open, ok = thought_region(
        np.ascontiguousarray(dfa.trans, dtype=np.int32), trans, block.accept.astype(bool), opened
    )
    assert ok
    for text, where in [(b"", "maybe"), (b"<", "maybe"), (b"<t>", "open"), (b"<t>ab</", "open"),
                        (b"<t>a</t>", "out"), (b"<t>a</t>1", "out"), (b"1", "out")]:  # fmt: skip
        s = dfa.step(0, text)
        assert inside[s] == (where != "out"), text
        assert is_open[s] == (where == "open"), text


@SETTINGS
@given(
    dfa=random_dfas(),
    vocabulary=random_vocabularies(),
    data=st.data(),
    budget=st.integers(0, 6),
    max_tokens=st.integers(1, 12),
)
def test_a_walk_under_the_masks_keeps_both_budgets(dfa, vocabulary, data, budget, max_tokens):
    """From a start where an answer fits both budgets, any token the masks allow leads to a
    complete answer within max_tokens whose tokens from inside states number at most the
    budget: the masks are never all-false before the end."""
    index = TokenIndex(dfa, vocabulary)
    inside = np.array(data.draw(st.lists(st.booleans(), min_size=dfa.n_states,
                                         max_size=dfa.n_states)), dtype=bool)  # fmt: skip
    inside &= ~after_the_block(dfa, inside)  # a block is never entered again (`thought_region`)
    thought = ThoughtBudget(index, inside)
    state, k, left = 0, budget, max_tokens
    if not thought.fits(state, k, left):
        return
    while True:
        if left == 0:
            assert dfa.accept[state]
            break
        if inside[state]:
            assert k >= 0
            row = thought.mask(state, k, left) if k >= 1 else None
            allowed = mask_ids(row) if row is not None else set()
        else:
            allowed = mask_ids(index.mask_within_tokens(state, left - 1))
        text = sorted(t for t in allowed if t not in vocabulary.eos_ids)
        if dfa.accept[state] and (not text or data.draw(st.booleans())):
            break  # EOS (allowed in an accepting state)
        assert text, (state, k, left)  # something fits until the answer is complete
        token = data.draw(st.sampled_from(text))
        k -= int(inside[state])
        left -= 1
        state = dfa.step(state, vocabulary.tokens[token])
    assert left >= 0 and k >= 0

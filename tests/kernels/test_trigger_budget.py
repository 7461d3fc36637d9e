"""The lazy trigger's budget rule (`corral.kernels.masks.trigger`) against a brute force: for random
DFAs, vocabularies, triggers, texts and budgets, a token is banned exactly when it completes the
trigger and the tokens left cannot finish the shortest call after it, counted as the engine
writes it (the token's bytes after the trigger walked into the call, or the token respelled),
with the token distances of a Bellman-Ford search over every token."""

from __future__ import annotations

import numpy as np
from corral.automata import regex_to_dfa
from corral.kernels import Constraint, TokenIndex, Vocabulary
from corral.kernels.masks.trigger import TriggerBudget, kmp_table, trigger_mask
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import (
    ALPHABET,
    SETTINGS,
    brute_force_token_distance,
    mask_ids,
    random_dfas,
    random_vocabularies,
)

TRIGGERS = [b"a", b"ab", b"aba", b'{"', b"abc{"]
PATTERNS = ["a", "ab*c", "(a|bc)+", '\\{"a":[bc]{1,3}\\}', "c{0,5}", '[abc{"]{2,6}', "(é|a)+b",
            "b(a|b)*", 'a{3,7}"']  # fmt: skip
GRAMMARS = st.one_of(st.sampled_from(PATTERNS).map(regex_to_dfa), random_dfas())


def brute_force_costs(dfa, vocabulary, trigger: bytes, text: bytes) -> dict[int, int | None]:
    """Token -> the tokens a call opened by it takes to finish, it included (None: never), for
    the tokens that complete the trigger after `text` (free, without the trigger): walking each
    token's bytes after `text` as the engine does."""
    distance = brute_force_token_distance(dfa, vocabulary)
    eos = set(vocabulary.eos_ids)
    texts = {data for t, data in enumerate(vocabulary.tokens) if data and t not in eos}

    def done(state: int) -> bool:  # complete, with no text token allowed: the call has ended
        return bool(dfa.accept[state]) and not any(dfa.step(state, d) >= 0 for d in texts)

    costs = {}
    for t, data in enumerate(vocabulary.tokens):
        if not data or t in eos:
            continue
        written = text + data
        at = written.find(trigger)
        if at < 0:
            continue
        e = at + len(trigger) - len(text)
        piece, rest = data[:e], data[e:]
        state = dfa.step(0, rest) if rest and not done(0) else -1
        if state >= 0:  # the constraint takes the bytes after the trigger
            cost = 1 + distance[state] if distance[state] >= 0 else None
        elif distance[0] < 0:
            cost = None
        elif not rest or piece in texts:  # the token itself, or respelled as one token
            cost = 1 + distance[0]
        elif all(bytes([b]) in texts for b in piece):  # respelled a byte a token
            cost = len(piece) + distance[0]
        else:
            cost = None
        costs[t] = cost
    return costs


ALPHABET_BYTES = st.binary(max_size=6).map(lambda b: bytes(ALPHABET[x % len(ALPHABET)] for x in b))


@SETTINGS
@given(
    dfa=GRAMMARS,
    vocabulary=random_vocabularies(),
    trigger=st.sampled_from(TRIGGERS),
    text=ALPHABET_BYTES,
    data=st.data(),
)
def test_a_trigger_is_allowed_exactly_while_the_tokens_left_finish_the_shortest_call(
    dfa, vocabulary, trigger, text, data
):
    # tokens that complete the trigger from some state, with bytes before and after it
    extra = data.draw(
        st.lists(
            st.tuples(ALPHABET_BYTES, st.integers(0, len(trigger) - 1), ALPHABET_BYTES).map(
                lambda p: p[0] + trigger[p[1] :] + p[2]
            ),
            max_size=6,
        )
    )
    if data.draw(st.booleans()):  # every byte spelled alone: every token can be respelled
        extra += [bytes([b]) for b in ALPHABET]
    vocabulary = Vocabulary(vocabulary.tokens + tuple(extra), vocabulary.eos_ids)
    if trigger in text:
        text = text[: text.index(trigger) + len(trigger) - 1]
    constraint = Constraint(TokenIndex(dfa, vocabulary))
    costs = brute_force_costs(dfa, vocabulary, trigger, text)
    budget = TriggerBudget(constraint, trigger)
    for left in range(1, 16):
        expected = {t for t, cost in costs.items() if cost is None or cost > left}
        assert set(budget.banned(text, left).tolist()) == expected, left
        mask = trigger_mask(constraint, trigger, text, left)
        if mask is None:
            assert not expected
        else:
            assert mask_ids(mask) == set(range(vocabulary.size)) - expected


@given(st.sampled_from(TRIGGERS), st.binary(max_size=12))
def test_the_trigger_automaton_finds_the_first_occurrence(trigger, data):
    """`kmp_table` against `bytes.find`: the state after each byte is the longest suffix that
    begins the trigger, and it reaches len(trigger) first where the first occurrence ends."""
    table = kmp_table(trigger)
    state = 0
    for i, b in enumerate(data):
        state = int(table[state, b])
        seen = data[: i + 1]
        if state == len(trigger):
            assert seen.find(trigger) == len(seen) - len(trigger)
            return
        assert trigger not in seen
        assert state == max(k for k in range(len(trigger)) if seen.endswith(trigger[:k]))
    assert np.all(table >= 0)

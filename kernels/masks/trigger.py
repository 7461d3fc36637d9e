"""The budget rule for a lazy trigger (tool_choice `auto`; docs/design.md section 5): a call the
trigger opens must be finishable in the tokens left, as a constrained answer must.

Free text runs until its bytes contain the trigger (`<tool_call>`); the engine then starts the
constraint on the bytes after it (docs/design.md section 5, tool_choice `auto`).
The budget rule keeps a constrained answer within `max_tokens`, but only from the trigger on: a
trigger written with fewer tokens left than the shortest call needs would leave a call cut in
its header, raw markup in the content. So a token that would complete the trigger is allowed
only while the tokens left can finish the shortest call after it.

The cost of token t, sampled in free text whose last bytes are the trigger's first q bytes (q,
the state of the trigger's Knuth-Morris-Pratt automaton, is the longest such q < len(trigger)),
when t's bytes complete the trigger e bytes in, is the tokens the answer takes from t on (t
included) to a complete call, as the engine writes it:

- t's bytes after the trigger (`rest = t[e:]`) are allowed by the constraint: `1 +
  tokens_to_complete()` of the constraint after `rest` (`Constraint.advance_bytes`);
- otherwise t is respelled as `t[:e]` (`Vocabulary.spell`, k tokens) and the constraint starts
  afresh: `k + tokens_to_complete()` from its start.

A cost that no budget meets (no token sequence completes the call) is `UNREACHABLE`. With
`tokens_left` tokens left (this one included), t is allowed iff its cost <= `tokens_left`.

`TriggerTokens` finds the tokens that complete the trigger from each q, whatever the grammar,
with one walk of the vocabulary's trie per q (`completing_nodes`, Numba; a subtree whose path
completes the trigger is taken whole), kept per (vocabulary, trigger); `TriggerBudget` costs
only those tokens in one grammar, kept per (index, start state, trigger), since every request
of a grammar shares it. `mask` is O(V / 32) when it bans a token and O(len(trigger)^2)
otherwise; `trigger_mask`, what the engine calls, skips even that while the budget is plenty.
"""

from __future__ import annotations

import threading
import weakref

import numba
import numpy as np
from corral.kernels.errors import TokenNotAllowedError, VocabularyError
from corral.kernels.masks.constraint import Constraint
from corral.kernels.masks.vocabulary import Vocabulary

UNREACHABLE = np.iinfo(np.int32).max
"""The cost of a token after which no token sequence completes the call."""

_BUDGETS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_TOKENS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()


def kmp_table(trigger: bytes) -> np.ndarray:
    """int32 `[L, 256]` (L = len(trigger) >= 1): the state after each byte from states 0..L-1
    of the automaton that finds `trigger`; a state is the length of the longest suffix of the
    bytes read that begins `trigger`, L once it is complete. O(L^2 * 256), L is small."""
    n = len(trigger)
    table = np.zeros((n, 256), np.int32)
    for q in range(n):
        for b in range(256):
            seen = trigger[:q] + bytes([b])
            k = q + 1
            while k and not seen.endswith(trigger[:k]):
                k -= 1
            table[q, b] = k
    return table


@numba.njit(cache=True)
def completing_nodes(kmp, start, byte, depth, end):
    """int32 `[n]`: the trie nodes (preorder, `corral.kernels.masks.trie`) whose path, read from
    automaton state `start` of `kmp` (`kmp_table`), first completes the trigger at the node:
    every token of the node's subtree completes it `depth[node]` bytes in. O(nodes visited),
    at most the trie's size."""
    n_states = kmp.shape[0]
    states = np.empty(byte.shape[0] + 1, np.int32)  # the automaton's state by depth
    states[0] = start
    out = np.empty(byte.shape[0], np.int32)
    count = 0
    i = 1
    while i < byte.shape[0]:
        d = depth[i]
        state = kmp[states[d - 1], byte[i]]
        if state == n_states:
            out[count] = i
            count += 1
            i = end[i]
        else:
            states[d] = state
            i += 1
    return out[:count]


class TriggerTokens:
    """The tokens of a vocabulary that complete a trigger, whatever the grammar after it.

    Args:
        vocabulary: the model's `Vocabulary` (its trie is built on first use).
        trigger: the trigger's bytes, non-empty.

    Attributes:
        ids: per automaton state q < len(trigger) (`kmp_table`), int32 `[n_q]`: the tokens
            that complete the trigger from q.
        ends: per q, int32 `[n_q]`: where in each token's bytes the trigger ends.
        respellings: per q, int32 `[n_q]`: the tokens `Vocabulary.spell` writes for each
            token's bytes up to the trigger's end (1 when the trigger ends with the token), -1
            when it cannot spell them.
    """

    def __init__(self, vocabulary: Vocabulary, trigger: bytes):
        if not trigger:
            raise ValueError("the trigger must be at least one byte")
        trie = vocabulary.trie
        kmp = kmp_table(trigger)
        self.ids, self.ends, self.respellings = [], [], []
        spelled: dict[bytes, int] = {}
        for q in range(len(trigger)):
            ids, ends = [], []
            for node in completing_nodes(kmp, q, trie.byte, trie.depth, trie.end).tolist():
                lo, hi = trie.token_start[node], trie.token_start[trie.end[node]]
                ids += trie.token_ids[lo:hi].tolist()
                ends += [int(trie.depth[node])] * (hi - lo)
            respellings = []
            for t, e in zip(ids, ends, strict=True):
                piece = vocabulary.tokens[t][:e]
                if piece not in spelled:
                    try:
                        spelled[piece] = len(vocabulary.spell(piece))
                    except VocabularyError:
                        spelled[piece] = -1
                respellings.append(spelled[piece])
            self.ids.append(np.asarray(ids, np.int32))
            self.ends.append(np.asarray(ends, np.int32))
            self.respellings.append(np.asarray(respellings, np.int32))
        self.spellable = all((r >= 0).all() for r in self.respellings)
        """True when every such token can be respelled."""


class TriggerBudget:
    """The tokens a lazy trigger may complete under a budget (module docstring).

    Args:
        constraint: the constraint the trigger starts, where it starts (a fresh one: its state
            is the call's first byte).
        trigger: the trigger's bytes, non-empty.

    Attributes:
        ids: per automaton state q < len(trigger), int32 `[n_q]`: the tokens that complete the
            trigger from q (`TriggerTokens.ids`).
        costs: per q, int32 `[n_q]`: their costs, in tokens (`UNREACHABLE`: never allowed).
        worst: the largest cost of all (-1 when no token completes the trigger): a budget of
            at least `worst` tokens bans nothing.
    """

    def __init__(self, constraint: Constraint, trigger: bytes):
        self.trigger = trigger
        vocabulary = constraint.index.vocabulary
        self.n_words = vocabulary.n_words
        self.size = vocabulary.size
        found = trigger_tokens(vocabulary, trigger)
        fresh = constraint.tokens_to_complete()
        self.ids, self.costs = found.ids, []
        for ids, ends, respellings in zip(found.ids, found.ends, found.respellings, strict=True):
            costs = [
                _cost(constraint, fresh, vocabulary.tokens[t][e:], k)
                for t, e, k in zip(ids.tolist(), ends.tolist(), respellings.tolist(), strict=True)
            ]
            self.costs.append(np.asarray(costs, np.int32))
        self.worst = max((int(c.max()) for c in self.costs if len(c)), default=-1)

    def state(self, text: bytes) -> int:
        """The automaton state after `text` (which does not contain the trigger): the length of
        its longest suffix that begins the trigger. O(len(trigger)^2)."""
        for q in range(min(len(self.trigger) - 1, len(text)), 0, -1):
            if text.endswith(self.trigger[:q]):
                return q
        return 0

    def banned(self, text: bytes, tokens_left: int) -> np.ndarray:
        """int32: the tokens that may not follow `text` with `tokens_left` tokens left (this one
        included): those that complete the trigger at a cost above `tokens_left`."""
        if tokens_left >= self.worst:
            return np.empty(0, np.int32)
        q = self.state(text)
        return self.ids[q][self.costs[q] > tokens_left]

    def mask(self, text: bytes, tokens_left: int) -> np.ndarray | None:
        """The packed mask (uint32 `[ceil(V / 32)]`) of free text after `text` with
        `tokens_left` tokens left: every token but the `banned` ones; None when none is."""
        banned = self.banned(text, tokens_left)
        if not len(banned):
            return None
        mask = np.full(self.n_words, 0xFFFFFFFF, np.uint32)
        if self.size % 32:
            mask[-1] = (1 << (self.size % 32)) - 1
        np.bitwise_and.at(mask, banned >> 5, ~(np.uint32(1) << (banned & 31).astype(np.uint32)))
        return mask


def _cost(constraint: Constraint, fresh: int, rest: bytes, respelling: int) -> int:
    """The cost of a token that completes the trigger (module docstring): `rest`, its bytes
    after the trigger; `fresh`, the constraint's own distance; `respelling`, the tokens that
    respell it (`TriggerTokens.respellings`)."""
    if rest:
        after = constraint.copy()
        try:
            after.advance_bytes(rest)
        except TokenNotAllowedError:
            pass  # refused: the engine respells the token
        else:
            needed = after.tokens_to_complete()
            return UNREACHABLE if needed < 0 else 1 + needed
    if fresh < 0 or respelling < 0:
        return UNREACHABLE
    return 1 + fresh if not rest else respelling + fresh


def trigger_mask(
    constraint: Constraint, trigger: bytes, text: bytes | bytearray, tokens_left: int
) -> np.ndarray | None:
    """`TriggerBudget.mask` of free text `text` waiting for `trigger` to start `constraint`,
    with `tokens_left` tokens left (this one included): None when no token is banned.

    Known without the token distances when every token that completes the trigger can be
    respelled (`TriggerTokens.spellable`) and `tokens_left` passes the vocabulary's longest
    token plus `TokenIndex.max_token_distance_bound`: every cost is then within it (the bytes
    after the trigger leave a state at most the bound from acceptance; a respelled piece takes
    at most a token a byte, then the call's shortest answer)."""
    index = constraint.index
    vocabulary = index.vocabulary
    plenty = tokens_left > vocabulary.trie.max_depth + index.max_token_distance_bound
    if plenty and trigger_tokens(vocabulary, trigger).spellable:
        return None
    return trigger_budget(constraint, trigger).mask(text, tokens_left)


def trigger_tokens(vocabulary: Vocabulary, trigger: bytes) -> TriggerTokens:
    """The `TriggerTokens` of `vocabulary` and `trigger`, made on first use and kept while the
    vocabulary lives (thread-safe)."""
    with _LOCK:
        kept = _TOKENS.setdefault(vocabulary, {})
        if trigger not in kept:
            kept[trigger] = TriggerTokens(vocabulary, trigger)
        return kept[trigger]


def trigger_budget(constraint: Constraint, trigger: bytes) -> TriggerBudget:
    """The `TriggerBudget` of `constraint`'s index, state and `trigger`, made on first use and
    kept while the index lives (thread-safe)."""
    key = (constraint.state, constraint.done, trigger)
    with _LOCK:
        kept = _BUDGETS.setdefault(constraint.index, {})
        if key not in kept:
            kept[key] = TriggerBudget(constraint, trigger)
        return kept[key]

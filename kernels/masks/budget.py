"""Budget masks: the tokens of a DFA state after which a complete answer still fits in k more
tokens (docs/design.md section 4; the budget rule of `corral.kernels.masks.distance`).

Token t is kept in state s under budget k when it is allowed there and the state it ends in is
at token distance `0 <= distance[e] <= k` from acceptance (plus EOS when s accepts). The set
depends on k only through the distinct distances of s's end states, which the token graph already
lists (`corral.kernels.masks.distance.token_graph`: the distinct end states of every state, from the
same walk as the masks). So, per state:

- `saturation[s]`, the largest distance among its end states (a large sentinel when some end
  state cannot reach acceptance at all): from that budget on the budget mask is the plain mask,
  known without a walk (0 for a state without text tokens);
- below it, one trie walk per state (`level_rows`, on the first budget below saturation) gives
  every budget's mask at once: row j of an `[m, ceil(V / 32)]` table holds the tokens ending at
  distance <= `levels[j]`, the m distinct distances of s's end states ascending, so the mask for k
  is the row of the largest level <= k (a binary search, no copy); below the smallest level no text
  token fits.

The rows are kept per state in a bounded LRU (`CACHE_ROWS` rows in all, least recently used
states out), computed lazily for the states a generation visits.

`ThoughtBudget` adds a second budget on a thinking block at the start of the answer: its
tokens at most a given count, the answer still complete within `max_tokens`
(docs/tools.md, "Thinking budgets").
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict

import numba
import numpy as np
from corral.automata.graph import distances_to
from corral.kernels.masks.distance import token_graph

CACHE_ROWS = 2048
"""The most budget rows (`level_rows`) kept per index, whole states least recently used out
(6 KiB a row for SmolLM2's 49,152 tokens: 12 MiB)."""

NEVER = np.iinfo(np.int32).max
"""`saturation` of a state with an end state that cannot reach acceptance: the plain mask holds a
token no budget keeps."""


class BudgetMasks:
    """The token distances of one index's DFA and its budget masks (module docstring).

    Args:
        trans: int32 `[n_states, 256]`, the DFA table (-1 dead); accept: bool `[n_states]`.
        loops: uint16 `[n_states]`, `corral.kernels.masks.trie.loop_categories(trans)`.
        trie: the vocabulary's `corral.kernels.Trie`.
        eos: int32 `[n_eos]`, the EOS ids (set in the rows of accepting states).
        n_words: `ceil(V / 32)`.

    Building it is the token-graph walk (one trie walk per state, `token_graph`) and a BFS.

    Attributes:
        distance: int32 `[n_states]`, the fewest text tokens to acceptance (-1: never).
        saturation: int32 `[n_states]` (see the module docstring).
    """

    def __init__(self, trans, accept, loops, trie, eos, n_words: int):
        self._trans, self._accept, self._loops = trans, accept, loops
        self._trie = trie
        self._trie_arrays = (
            trie.byte, trie.depth, trie.end, trie.categories, trie.token_start, trie.token_ids
        )  # fmt: skip
        self._eos, self._n_words = eos, n_words
        n_states = trans.shape[0]
        graph_trie = self._trie_arrays[:5]
        self._start, targets = token_graph(trans, loops, graph_trie, trie.max_depth)
        self._targets = targets
        sources = np.repeat(np.arange(n_states, dtype=np.int32), np.diff(self._start))
        self.distance = distances_to(n_states, sources, targets, np.asarray(accept, dtype=bool))
        self.distance.setflags(write=False)
        ends = self.distance[targets]
        self._ends = ends  # the distance of each edge's end state, by source (CSR)
        saturation = np.zeros(n_states, np.int32)
        np.maximum.at(saturation, sources, np.where(ends < 0, NEVER, ends).astype(np.int32))
        saturation.setflags(write=False)
        self.saturation = saturation
        self._saturation: list[int] = saturation.tolist()
        self._has_ends: list[bool] = (np.diff(self._start) > 0).tolist()
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, tuple[list[int], np.ndarray]] = OrderedDict()
        self._n_rows = 0

    @property
    def cached_rows(self) -> int:
        """Budget rows held now (at most `CACHE_ROWS`, unless one state alone has more)."""
        return self._n_rows

    def saturated(self, state: int, max_tokens: int) -> bool:
        """True when the budget mask of `state` for `max_tokens` is its plain mask. O(1)."""
        return max_tokens >= self._saturation[state]

    def has_ends(self, state: int) -> bool:
        """True when some text token is allowed in `state`. O(1)."""
        return self._has_ends[state]

    def row(self, state: int, max_tokens: int) -> np.ndarray | None:
        """The budget mask of `state` for `max_tokens` (>= 0) below saturation: uint32
        `[n_words]`, read-only, shared; None when no text token fits (EOS included or not:
        the caller's `nothing` row). O(log m) after one `level_rows` walk per state (kept in
        the LRU)."""
        with self._lock:
            entry = self._cache.get(state)
            if entry is not None:
                self._cache.move_to_end(state)
        if entry is None:
            entry = self._build(state)
        levels, rows = entry
        j = bisect.bisect_right(levels, max_tokens) - 1
        return rows[j] if j >= 0 else None

    def rows(self, state: int) -> tuple[list[int], np.ndarray]:
        """(levels, rows) of `state` (`level_rows`), from the LRU or walked now."""
        with self._lock:
            entry = self._cache.get(state)
        return entry if entry is not None else self._build(state)

    def _build(self, state: int) -> tuple[list[int], np.ndarray]:
        ends = self._ends[self._start[state] : self._start[state + 1]]
        levels = np.unique(ends[ends >= 0]).astype(np.int32)
        rows = level_rows(
            self._trans, self._loops, self._accept, self._trie_arrays, self._eos, self._n_words,
            self._trie.max_depth, state, self.distance, levels,
        )  # fmt: skip
        rows.setflags(write=False)
        entry = (levels.tolist(), rows)
        with self._lock:
            if state not in self._cache:
                self._cache[state] = entry
                self._n_rows += len(levels)
            while self._n_rows > CACHE_ROWS and len(self._cache) > 1:
                _, (dropped, _) = self._cache.popitem(last=False)
                self._n_rows -= len(dropped)
        return entry


@numba.njit(cache=True, inline="always")
def _set_bit(row, t):
    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@numba.njit(cache=True)
def level_rows(trans, loops, accept, trie, eos, n_words, max_depth, state, distance, levels):
    """uint32 `[m, n_words]`: row j holds the tokens allowed in `state` whose end state is at
    token distance `0 <= distance[e] <= levels[j]` (`levels`: int32 `[m]`, ascending, the
    distinct distances >= 0 of `state`'s end states), and the EOS ids when `state` accepts.

    One trie walk as `corral.kernels.masks.index`'s (a subtree whose byte categories all loop at its
    parent's state ends there whole), each token's bit set in the row of its end distance, then
    the rows OR-ed cumulatively: O(nodes visited * log m + allowed tokens + m * n_words).
    """
    byte, depth, end, categories, token_start, token_ids = trie
    m = levels.shape[0]
    rows = np.zeros((m, n_words), np.uint32)
    stack = np.empty(max_depth + 1, np.int32)
    stack[0] = state
    n_nodes = byte.shape[0]
    i = 1
    while i < n_nodes:
        d = depth[i]
        parent = stack[d - 1]
        if categories[i] & ~loops[parent] == 0:
            first, stop = token_start[i], token_start[end[i]]
            if first < stop and distance[parent] >= 0:
                row = rows[np.searchsorted(levels, distance[parent])]
                for k in range(first, stop):
                    _set_bit(row, token_ids[k])
            i = end[i]
            continue
        s = trans[parent, byte[i]]
        if s < 0:
            i = end[i]
            continue
        stack[d] = s
        first, stop = token_start[i], token_start[i + 1]
        if first < stop and distance[s] >= 0:
            row = rows[np.searchsorted(levels, distance[s])]
            for k in range(first, stop):
                _set_bit(row, token_ids[k])
        i += 1
    for j in range(1, m):
        for w in range(n_words):
            rows[j, w] |= rows[j - 1, w]
    if accept[state]:
        for j in range(m):
            for t in eos:
                _set_bit(rows[j], t)
    return rows


THOUGHT_ROWS = 256
"""The most (state, thought budget) tables a `ThoughtBudget` keeps (few states are inside a
thought, and only the last budgets below its saturation need one)."""


class ThoughtBudget:
    """The thinking block's budget over one index: which states are inside the block, and
    the fewest tokens to a complete answer when the block must close within k tokens.

    A token is a thought token when the state it is written from is inside the block
    (`inside`): the block's tokens, from the answer's first token through the one that writes
    the closer's last byte (the opener and closer included). With k thought tokens left and
    L tokens left in all, a token is allowed from an inside state when its end state e still
    fits: `0 <= closing(e, k - 1) <= L - 1`, where `closing(s, k)` is the fewest tokens from s
    to a complete answer over the paths that leave the block within k tokens (`distance[s]`
    outside the block; -1: none). `closing` is a shortest path over the token graph layered by
    k, computed once per index up to the k where it stops changing (`saturation`): from there
    on it equals `distance` and the mask is the plain budget mask.

    Args:
        index: the answer's `TokenIndex`.
        inside: bool `[n_states]`, the states inside the thinking block (`thought_region`):
            no path from a state outside it leads back inside (the block, once closed, is
            not opened again), so the tokens after it need no thought budget.
        opened: bool `[n_states]`, those where the block's opener is written (an optional
            block may still be left out in the others); None: all inside states.

    Attributes:
        inside: as given (read-only).
        saturation: the least k from which `closing(., k)` is `distance` everywhere.
    """

    def __init__(self, index, inside: np.ndarray, opened: np.ndarray | None = None):
        budget: BudgetMasks = index._budget
        self.index = index
        self.inside = np.ascontiguousarray(inside, dtype=np.bool_)
        self.inside.setflags(write=False)
        self._inside: list[bool] = self.inside.tolist()
        self._opened: list[bool] = (self.inside if opened is None else opened).tolist()
        self._distance = budget.distance
        self._budget = budget
        self._ids = np.flatnonzero(self.inside).astype(np.int32)
        self._pos = np.full(len(self.inside), -1, np.int32)
        self._pos[self._ids] = np.arange(len(self._ids), dtype=np.int32)
        self._table = closing_table(
            budget._start, budget._targets, budget.distance, self._pos, self._ids,
            np.ascontiguousarray(index.dfa.accept, dtype=np.bool_),
        )  # fmt: skip
        self.saturation = self._table.shape[0] - 1
        self._lock = threading.Lock()
        self._rows: OrderedDict[tuple[int, int], tuple[list[int], np.ndarray]] = OrderedDict()

    def closing(self, state: int, k: int) -> int:
        """The fewest tokens from `state` to a complete answer that leave the thinking block
        within `k` (>= 0) tokens; -1 when none does. O(1)."""
        j = self._pos[state]
        if j < 0:
            return int(self._distance[state])
        return int(self._table[min(k, self.saturation), j])

    def fits(self, state: int, k: int, tokens: int | float) -> bool:
        """True when a complete answer is reachable from `state` in at most `tokens` tokens
        with at most `k` more thought tokens."""
        needed = self.closing(state, k)
        return 0 <= needed <= tokens

    def is_inside(self, state: int) -> bool:
        """True when `state` is inside the thinking block. O(1)."""
        return self._inside[state]

    def is_open(self, state: int) -> bool:
        """True when `state` is inside the thinking block with its opener written. O(1)."""
        return self._opened[state]

    def mask(self, state: int, k: int, tokens_left: int) -> np.ndarray:
        """The packed mask (uint32 `[ceil(V / 32)]`, read-only, shared) of the tokens allowed
        in `state` (inside the block) with `k` >= 1 thought tokens and `tokens_left` >= 1
        tokens left: those whose end state e has `0 <= closing(e, k - 1) <= tokens_left - 1`,
        and EOS when `state` accepts (all-false when nothing fits). From `k - 1` =
        `saturation` on it is the index's `mask_within_tokens(state, tokens_left - 1)`; below,
        one trie walk (`level_rows`) per (state, k), kept in an LRU of `THOUGHT_ROWS`."""
        j = k - 1
        if j >= self.saturation:
            return self.index.mask_within_tokens(state, tokens_left - 1)
        key = (state, j)
        with self._lock:
            entry = self._rows.get(key)
            if entry is not None:
                self._rows.move_to_end(key)
        if entry is None:
            entry = self._build(state, j)
        levels, rows = entry
        at = bisect.bisect_right(levels, tokens_left - 1) - 1
        if at >= 0:
            return rows[at]
        return self.index._eos_row if self.index.is_accepting(state) else self.index._nothing

    def _build(self, state: int, j: int) -> tuple[list[int], np.ndarray]:
        distance = self._distance.copy()
        distance[self._ids] = self._table[j]
        budget = self._budget
        ends = distance[budget._targets[budget._start[state] : budget._start[state + 1]]]
        levels = np.unique(ends[ends >= 0]).astype(np.int32)
        rows = level_rows(
            budget._trans, budget._loops, budget._accept, budget._trie_arrays, budget._eos,
            budget._n_words, budget._trie.max_depth, state, distance, levels,
        )  # fmt: skip
        rows.setflags(write=False)
        entry = (levels.tolist(), rows)
        with self._lock:
            self._rows[(state, j)] = entry
            while len(self._rows) > THOUGHT_ROWS:
                self._rows.popitem(last=False)
        return entry


@numba.njit(cache=True)
def closing_table(start, targets, distance, pos, ids, accept):
    """int32 `[K + 1, len(ids)]`: row k holds `closing(s, k)` (`ThoughtBudget`) of each inside
    state s = ids[i] (`pos[s]` = i, -1 for a state outside the block), -1 where no path leaves
    the block within k tokens; K the first k whose row equals the one before (then every later
    row does). Row 0: 0 for an accepting state, else -1; row k: the least, over s's token-graph
    end states e (`targets[start[s]:start[s + 1]]`), of 1 + `distance[e]` outside the block or
    1 + row k - 1 at e inside. O(K * inside edges); K is finite since rows only decrease."""
    n = ids.shape[0]
    rows = [np.empty(n, np.int32)]
    for i in range(n):
        rows[0][i] = 0 if accept[ids[i]] else -1
    while True:
        prev = rows[-1]
        row = np.empty(n, np.int32)
        for i in range(n):
            s = ids[i]
            best = 0 if accept[s] else -1
            if best != 0:
                for edge in range(start[s], start[s + 1]):
                    e = targets[edge]
                    d = distance[e] if pos[e] < 0 else prev[pos[e]]
                    if d >= 0 and (best < 0 or d + 1 < best):
                        best = d + 1
            row[i] = best
        same = True
        for i in range(n):
            if row[i] != prev[i]:
                same = False
                break
        if same:
            break
        rows.append(row)
    out = np.empty((len(rows), n), np.int32)
    for k in range(len(rows)):
        out[k] = rows[k]
    return out


@numba.njit(cache=True)
def thought_region(trans, tracker, closed, opened):
    """(bool `[n_states]` inside, bool `[n_states]` open, ok): inside, the states of the DFA
    `trans` (int32 `[n, 256]`, -1 dead) reached from 0 while the DFA `tracker` (int32
    `[m, 256]`; the thinking block alone, `closed` its accepting states) has read the same
    bytes and is neither dead nor closed; open, those reached with the tracker in a state of
    `opened` (bool `[m]`: the block's opener written). ok is False when some state is also
    reached outside the block, or both with and without the opener written (its state alone
    would not say whether the thought is open). A search over the pairs (state, tracker
    state): O(n * m * 256)."""
    n, m = trans.shape[0], tracker.shape[0]
    inside = np.zeros(n, np.bool_)
    is_open = np.zeros(n, np.bool_)
    not_open = np.zeros(n, np.bool_)
    outside = np.zeros(n, np.bool_)
    seen = np.zeros((n, m), np.bool_)
    pairs = np.empty((n * m, 2), np.int32)
    rest = np.empty(n, np.int32)
    top, rest_top = 0, 0
    if closed[0]:
        outside[0] = True
        rest[0] = 0
        rest_top = 1
    else:
        inside[0] = True
        is_open[0] = opened[0]
        not_open[0] = not opened[0]
        seen[0, 0] = True
        pairs[0, 0], pairs[0, 1] = 0, 0
        top = 1
    while top > 0:
        top -= 1
        s, q = pairs[top, 0], pairs[top, 1]
        for b in range(256):
            t = trans[s, b]
            if t < 0:
                continue
            r = tracker[q, b]
            if r >= 0 and not closed[r]:
                if not seen[t, r]:
                    seen[t, r] = True
                    inside[t] = True
                    if opened[r]:
                        is_open[t] = True
                    else:
                        not_open[t] = True
                    pairs[top, 0], pairs[top, 1] = t, r
                    top += 1
            elif not outside[t]:
                outside[t] = True
                rest[rest_top] = t
                rest_top += 1
    while rest_top > 0:
        rest_top -= 1
        s = rest[rest_top]
        for b in range(256):
            t = trans[s, b]
            if t >= 0 and not outside[t]:
                outside[t] = True
                rest[rest_top] = t
                rest_top += 1
    ok = True
    for s in range(n):
        if (inside[s] and outside[s]) or (is_open[s] and not_open[s]):
            ok = False
    return inside, is_open, ok

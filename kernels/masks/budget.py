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

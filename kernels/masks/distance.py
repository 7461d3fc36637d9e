"""The fewest tokens from each DFA state to a complete answer (docs/design.md section 4): the one
budget rule, counted in tokens, of `Constraint.mask(tokens_left)` and of the engine's budget-aware
ending (`corral.model.generate`).

Bytes would be the wrong unit: `"celsius"` is 9 bytes and 3 tokens, and the engine must refuse
only budgets that truly cannot hold an answer and steer only when it must. The token graph has an
edge s -> e when some text token's bytes lead from s to e; the token distance is a breadth-first
search over it towards the accepting states (`corral.automata.graph.distances_to`, run by
`corral.kernels.masks.budget.BudgetMasks`, which keeps the graph for the budget masks).

The edges come from the same trie walk as the masks (`masks.index`): a walk from s visits
every token that stays live, and the state on the walk's stack at a node holding tokens is where
those tokens end.
"""

from __future__ import annotations

import numba
import numpy as np

_CHUNKS = 64
"""Chunks of states in the token-graph walk: each allocates O(n_states) scratch once."""


@numba.njit(cache=True)
def _ends(trans, loops, s, trie, stack, seen, out):
    """Write into `out` the distinct states where a text token from `s` ends; return how many.
    `seen` is a scratch bool array `[n_states]`, left all-False. A subtree whose byte categories
    all loop at its parent's state ends wholly there and is skipped, as in the mask walk
    (`corral.kernels.masks.index`). O(nodes visited)."""
    byte, depth, end, categories, token_start = trie
    stack[0] = s
    n = 0
    n_nodes = byte.shape[0]
    i = 1
    while i < n_nodes:
        d = depth[i]
        parent = stack[d - 1]
        if categories[i] & ~loops[parent] == 0:
            if token_start[i] < token_start[end[i]] and not seen[parent]:
                seen[parent] = True
                out[n] = parent
                n += 1
            i = end[i]
            continue
        state = trans[parent, byte[i]]
        if state < 0:
            i = end[i]
            continue
        stack[d] = state
        if token_start[i] < token_start[i + 1] and not seen[state]:
            seen[state] = True
            out[n] = state
            n += 1
        i += 1
    for k in range(n):
        seen[out[k]] = False
    return n


_ENDS_WIDTH = 32
"""End states per state kept by the first pass of `token_graph`; a state with more is walked
again in a second pass."""


@numba.njit(cache=True, parallel=True)
def token_graph(trans, loops, trie, max_depth):
    """The token graph in CSR form: `(start int64 [n_states + 1], targets int32 [n_edges])`,
    the distinct end states of state s being `targets[start[s]:start[s + 1]]`. `trie` is the
    tuple (byte, depth, end, categories, token_start); `loops` uint16 `[n_states]` the byte
    categories on which each state loops (`corral.kernels.masks.index.loop_categories`).

    One trie walk per state, parallel over chunks of states (each chunk allocates its scratch
    arrays once), keeping up to `_ENDS_WIDTH` end states per state in a scratch table; only a
    state with more ends is walked a second time, when the CSR arrays are filled:
    O(sum of nodes visited + n_states * (_CHUNKS + _ENDS_WIDTH)).
    """
    n_states = trans.shape[0]
    n_chunks = min(n_states, _CHUNKS)  # scratch arrays per chunk of states, not per state
    width = min(_ENDS_WIDTH, n_states)
    counts = np.zeros(n_states, np.int64)
    kept = np.empty((n_states, width), np.int32)
    for k in numba.prange(n_chunks):
        stack = np.empty(max_depth + 1, np.int32)
        seen = np.zeros(n_states, np.bool_)
        out = np.empty(n_states, np.int32)
        for s in range(k, n_states, n_chunks):
            n = _ends(trans, loops, s, trie, stack, seen, out)
            counts[s] = n
            if n <= width:
                kept[s, :n] = out[:n]
    start = np.zeros(n_states + 1, np.int64)
    start[1:] = np.cumsum(counts)
    targets = np.empty(start[n_states], np.int32)
    stack = np.empty(max_depth + 1, np.int32)
    seen = np.zeros(n_states, np.bool_)
    out = np.empty(n_states, np.int32)
    for s in range(n_states):
        n = counts[s]
        if n <= width:
            targets[start[s] : start[s] + n] = kept[s, :n]
        else:  # more ends than the scratch table holds: walk again
            _ends(trans, loops, s, trie, stack, seen, out)
            targets[start[s] : start[s] + n] = out[:n]
    return start, targets


@numba.njit(cache=True)
def byte_distance(trans, accept, usable):  # pragma: no cover - compiled
    """int32 `[n_states]`: the fewest bytes from each state to acceptance, walking only the bytes
    b where `usable[b]` (bool `[256]`); 0 on an accepting state, -1 where none is reached.
    With `usable` the bytes that are text tokens of their own, each such byte is one token, so a
    distance >= 0 bounds the token distance from above. A breadth-first search over the reversed
    edges, O(n_states * 256).

    trans int32 `[n_states, 256]` (-1 dead); accept bool `[n_states]`.
    """
    n = trans.shape[0]
    start = np.zeros(n + 1, np.int64)  # reversed edges, compressed by target
    for s in range(n):
        for b in range(256):
            t = trans[s, b]
            if usable[b] and t >= 0:
                start[t + 1] += 1
    for t in range(n):
        start[t + 1] += start[t]
    sources = np.empty(start[n], np.int32)
    fill = start[:n].copy()
    for s in range(n):
        for b in range(256):
            t = trans[s, b]
            if usable[b] and t >= 0:
                sources[fill[t]] = s
                fill[t] += 1
    dist = np.full(n, -1, np.int32)
    queue = np.empty(n, np.int32)
    head = tail = 0
    for s in range(n):
        if accept[s]:
            dist[s] = 0
            queue[tail] = s
            tail += 1
    while head < tail:
        t = queue[head]
        head += 1
        for i in range(start[t], start[t + 1]):
            s = sources[i]
            if dist[s] < 0:
                dist[s] = dist[t] + 1
                queue[tail] = s
                tail += 1
    return dist

"""Character-length analyses of a DFA over UTF-8 (docs/design.md section 3: string `minLength` and
`maxLength` next to a `pattern` or `format`).

A character starts at a byte below 0x80 or at 0xC0 and above; continuation bytes (0x80..0xBF)
add no character. `char_length_bounds` tells whether a pattern already implies the length
bounds; `length_product` applies them when it does not.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np
from corral.automata.dfa import Dfa
from corral.automata.errors import LimitError
from corral.automata.tree import EMPTY, Alt, ByteSet, Concat, Node

STARTS_CHARACTER = np.array([b < 0x80 or b >= 0xC0 for b in range(256)])
"""bool `[256]`: True for the bytes that begin a UTF-8 character."""


def char_length_bounds(dfa: Dfa) -> tuple[int, float]:
    """(fewest, most) characters of the strings of `dfa` (every state live); most is `math.inf`
    when the language is infinite. A 0-1 breadth-first search for the fewest, a depth-first
    longest path for the most; O(n_states * 256)."""
    n = dfa.n_states
    best = [math.inf] * n
    best[0] = 0
    queue = deque([0])
    while queue:
        s = queue.popleft()
        for b in np.flatnonzero(dfa.trans[s] >= 0):
            t = int(dfa.trans[s, b])
            cost = best[s] + int(STARTS_CHARACTER[b])
            if cost < best[t]:
                best[t] = cost
                if STARTS_CHARACTER[b]:
                    queue.append(t)
                else:
                    queue.appendleft(t)
    fewest = min(best[s] for s in range(n) if dfa.accept[s])
    # most: longest path, inf on a cycle (every state is live)
    order, state_of = [], [0] * n  # 0 new, 1 open, 2 done
    stack = [(0, iter(np.flatnonzero(dfa.trans[0] >= 0).tolist()))]
    state_of[0] = 1
    while stack:
        s, it = stack[-1]
        advanced = False
        for b in it:
            t = int(dfa.trans[s, b])
            if state_of[t] == 1:
                return fewest, math.inf
            if state_of[t] == 0:
                state_of[t] = 1
                stack.append((t, iter(np.flatnonzero(dfa.trans[t] >= 0).tolist())))
                advanced = True
                break
        if not advanced:
            state_of[s] = 2
            order.append(s)
            stack.pop()
    most = [-math.inf] * n
    for s in order:  # post-order: successors first
        m = 0 if dfa.accept[s] else -math.inf
        for b in np.flatnonzero(dfa.trans[s] >= 0):
            m = max(m, most[int(dfa.trans[s, b])] + int(STARTS_CHARACTER[b]))
        most[s] = m
    return fewest, most[0]


def length_product(dfa: Dfa, min_len: int, max_len: int, limit: int) -> Node:
    """The regex tree of the strings of `dfa` with between `min_len` and `max_len` characters:
    a DAG over (state, characters so far), each node an Alt of `byte set -> next node` edges.
    Its depth is the longest string in bytes: build it inside `deep_recursion()`.

    Raises:
        LimitError (`max_product_nodes`): n_states * (max_len + 1) > `limit`.
    """
    n = dfa.n_states
    if n * (max_len + 1) > limit:
        raise LimitError(
            "max_product_nodes", limit, "pattern with a length bound needs too many nodes"
        )
    starts = STARTS_CHARACTER.tolist()
    # Per state, its edges grouped by (target, whether the byte starts a character): the
    # groups are the same at every count, so they are made once per state, not per node.
    groups: list[list[tuple[int, int, int]]] = []
    for row in dfa.trans.tolist():
        masks: dict[tuple[int, int], int] = {}
        for b, t in enumerate(row):
            if t >= 0:
                masks[(t, starts[b])] = masks.get((t, starts[b]), 0) | (1 << b)
        groups.append([(t, step, mask) for (t, step), mask in masks.items()])
    memo: dict[tuple[int, int], Node] = {}

    def node(state: int, count: int) -> Node:
        key = (state, count)
        if key in memo:
            return memo[key]
        items = [
            Concat((ByteSet(mask), node(t, count + step)))
            for t, step, mask in groups[state]
            if count + step <= max_len
        ]
        if dfa.accept[state] and count >= min_len:
            items.append(EMPTY)
        out = Alt(tuple(items))
        memo[key] = out
        return out

    return node(0, 0)

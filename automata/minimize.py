"""DFA minimization and canonical numbering (DESIGN.md section 2: "minimize (Moore or Hopcroft:
split blocks until every state of a block moves to the same block on every class) -> number
breadth-first from the start state, taking bytes 0..255 in order").

Both work over byte classes: `trans` int32 `[n_states, n_classes]` (-1: dead), `accept` bool
`[n_states]`, start state 0, every state live (it can reach acceptance).
"""

from __future__ import annotations

import numpy as np
from corral.automata.dfa import Dfa


def minimize(trans: np.ndarray, accept: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Moore's partition refinement, one NumPy pass per round: a state's signature is its block
    and the blocks of its successors on every class; states with equal signatures stay together.
    Stops when a round splits nothing. Each round is O(n_states * n_classes); the number of
    rounds is at most the length of the longest shortest string telling two states
    apart, plus one.

    Returns the quotient `(trans, accept)`; the start state's block is numbered 0 (the others are
    numbered arbitrarily; `number_breadth_first` makes the form canonical).
    """
    _, block = np.unique(accept, return_inverse=True)  # blocks numbered 0, 1, ...
    block = block.reshape(-1).astype(np.int64)
    n_blocks = int(block.max()) + 1
    n = len(accept)
    while True:
        successors = np.where(trans >= 0, block[trans], -1)
        signature = np.concatenate([block[:, None], successors], axis=1)  # int64 [n, 1 + k]
        # Equal signatures get equal new blocks: rows compared as raw bytes in a dict, which is
        # much cheaper than np.unique(axis=0) for the small DFAs regexes usually give.
        raw, width = signature.tobytes(), signature.shape[1] * 8
        ids: dict[bytes, int] = {}
        new_block = np.fromiter(
            (ids.setdefault(raw[i * width : (i + 1) * width], len(ids)) for i in range(n)),
            dtype=np.int64,
            count=n,
        )
        if len(ids) == n_blocks:
            break
        block, n_blocks = new_block, len(ids)
    # Renumber blocks so the start's is 0, then build the quotient from one member per block.
    _, first = np.unique(block, return_index=True)
    order = np.argsort(first, kind="stable")  # blocks by their first member; state 0 is first
    rank = np.empty(n_blocks, dtype=np.int64)
    rank[order] = np.arange(n_blocks)
    members = first[order]
    block = rank[block]
    quotient = np.where(trans[members] >= 0, block[trans[members]], -1).astype(np.int32)
    return quotient, accept[members].copy()


def number_breadth_first(trans: np.ndarray, accept: np.ndarray, byte_to_class: np.ndarray) -> Dfa:
    """The canonical `Dfa`: states renumbered in breadth-first order from state 0, visiting each
    state's successors by increasing byte (classes are numbered in order of their smallest byte,
    so visiting classes in order is the same), then expanded from classes to bytes.

    Args:
        trans: int32 `[n_states, n_classes]`; accept: bool `[n_states]`;
        byte_to_class: int32 `[256]`.
    Returns:
        `Dfa` with trans int32 `[n_states, 256]` and accept bool `[n_states]`.
    """
    n = trans.shape[0]
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[0] = 0
    order = [0]
    head = 0
    while head < len(order):
        row = trans[order[head]]
        for t in row[row >= 0].tolist():
            if new_id[t] < 0:
                new_id[t] = len(order)
                order.append(t)
        head += 1
    order_arr = np.array(order, dtype=np.int64)
    renumbered = np.where(trans[order_arr] >= 0, new_id[trans[order_arr]], -1)
    full = np.ascontiguousarray(renumbered[:, byte_to_class], dtype=np.int32)
    return Dfa(full, accept[order_arr].astype(bool))

"""Stitching: one DFA table from an envelope DFA with holes and the DFAs of the pieces that fill
them (docs/tools.md, "Many tools: stitched grammars").

A grammar such as "any one of 128 tool calls" is a small envelope (the markup and the names)
around large pieces (each tool's arguments), each piece reachable only after its own prefix.
Compiling the union at once makes subset construction and minimization walk every piece
together; stitching compiles each piece alone (so it can be cached and reused by other
grammars) and the envelope with a *hole* where each piece goes, then copies each piece's table
into one table: the envelope's state before the hole takes the piece's first moves, and the
piece's accepting states take the moves of the envelope's state after the hole.

A hole is `hole(k)`: the byte `HOLE_MARKER` (0xFE, never a byte of UTF-8 text, nor of the
special-token symbols, which begin with 0xFF) then k in two bytes, big-endian. The envelope is
compiled from a tree holding `hole_tree(k)` where piece k goes.

The stitched table is a valid `Dfa` (state 0 the start, every state reachable and live) but it
is not minimal and not canonical (nor numbered breadth first): equal languages may give
different tables (a piece filling two holes is copied twice, once per state after the hole).
Nothing downstream needs minimality: masks, token distances, budget masks and jump-forward
read transitions only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from corral.automata.dfa import Dfa
from corral.automata.errors import TooManyDfaStatesError
from corral.automata.graph import reachable_from, table_edges
from corral.automata.limits import MAX_STITCHED_STATES
from corral.automata.tree import Node, literal_bytes

HOLE_MARKER = 0xFE
"""The first byte of every hole: never a byte of UTF-8 text or of a special-token symbol."""
MAX_PIECES = 1 << 16
"""How many distinct pieces a hole can name (its index in two bytes)."""


def hole(k: int) -> bytes:
    """The 3 bytes standing for piece `k` in an envelope. Raises ValueError unless
    0 <= k < `MAX_PIECES`."""
    if not 0 <= k < MAX_PIECES:
        raise ValueError(f"a hole names a piece 0 to {MAX_PIECES - 1}, not {k}")
    return bytes((HOLE_MARKER, k >> 8, k & 0xFF))


def hole_tree(k: int) -> Node:
    """The regex tree of `hole(k)`, to put in an envelope's tree where piece `k` goes."""
    return literal_bytes(hole(k))


def _only_edge(dfa: Dfa, state: int, what: str) -> tuple[int, int]:
    """(byte, target) of the single live edge of `state`; ValueError naming `what` otherwise."""
    live = np.flatnonzero(dfa.trans[state] >= 0)
    if len(live) != 1:
        raise ValueError(f"the envelope's state {state} is ambiguous {what}")
    return int(live[0]), int(dfa.trans[state, live[0]])


def _merge(rows: np.ndarray, moves: np.ndarray, what: str) -> np.ndarray:
    """`rows` (int32 `[n, 256]`) with their dead cells taken from `moves` (int32 `[256]`);
    ValueError naming `what` when a byte is live in both (the result would not be
    deterministic)."""
    if ((rows >= 0) & (moves >= 0)).any():
        raise ValueError(f"{what}: a byte both continues the piece and leaves it")
    return np.where(rows >= 0, rows, moves)


def stitch(envelope: Dfa, pieces: Sequence[Dfa], max_states: int = MAX_STITCHED_STATES) -> Dfa:
    """The DFA of `envelope`'s language with each `hole(k)` replaced by `pieces[k]`'s language.

    Args:
        envelope: a DFA whose only reads of `HOLE_MARKER` begin whole holes, each hole naming a
            piece in `pieces`, and no hole directly after another.
        pieces: one DFA per hole index; none accepts the empty string.
        max_states: most states the stitched table may have (default `MAX_STITCHED_STATES`):
            the envelope's (those inside its holes included) plus one copy of piece k per
            (hole k, state after the hole), counted before anything is allocated (the table is
            `n_states * 256 * 4` bytes).

    Returns:
        a `Dfa` (trans int32 `[n_states, 256]`, accept bool `[n_states]`; every state reachable
        from state 0 and live; the kept states in the order above: the envelope's, then each
        copy), not minimal (the module docstring). O(n_states * 256) vectorized.

    Raises:
        TooManyDfaStatesError: the stitched table would pass `max_states` (limit
            `max_stitched_states`).
        ValueError: the envelope breaks its contract (a hole naming no piece, a state before a
            hole that could also read the piece's first byte as envelope text, a hole right
            after a hole), a piece accepts the empty string, or the envelope reads 0xFE outside
            a hole. These are a caller's bugs, never a user's input.
    """
    sites = np.flatnonzero(envelope.trans[:, HOLE_MARKER] >= 0).tolist()
    holes = []  # (state before the hole, piece, state after the hole)
    for s in sites:
        high, inside = _only_edge(envelope, int(envelope.trans[s, HOLE_MARKER]), "after 0xFE")
        low, after = _only_edge(envelope, inside, "inside a hole")
        k = high << 8 | low
        if k >= len(pieces):
            raise ValueError(f"hole {k} names no piece ({len(pieces)} given)")
        if pieces[k].accept[0]:
            raise ValueError(f"piece {k} accepts the empty string")
        holes.append((s, k, after))
    blocks: dict[tuple[int, int], int] = {}  # (piece, state after) -> first state of its copy
    n = envelope.n_states
    for _, k, t in holes:
        if (k, t) not in blocks:
            blocks[k, t] = n
            n += pieces[k].n_states
    if n > max_states:
        raise TooManyDfaStatesError(
            "max_stitched_states", max_states, f"the stitched DFA would have {n:,} states"
        )
    trans = np.full((n, 256), -1, np.int32)
    accept = np.zeros(n, bool)
    trans[: envelope.n_states] = envelope.trans
    accept[: envelope.n_states] = envelope.accept
    for (k, t), o in blocks.items():
        piece = pieces[k]
        if envelope.trans[t, HOLE_MARKER] >= 0:
            raise ValueError(f"a hole directly after piece {k}'s hole")
        block = np.where(piece.trans >= 0, piece.trans + o, -1)
        finals = np.flatnonzero(piece.accept)
        block[finals] = _merge(block[finals], envelope.trans[t], f"after piece {k}")
        trans[o : o + piece.n_states] = block
        accept[o + finals] = envelope.accept[t]
    for s, k, t in holes:
        moves = trans[s].copy()
        moves[HOLE_MARKER] = -1
        trans[s] = _merge(trans[blocks[k, t]], moves, f"before piece {k}")
    kept = reachable_from(n, *table_edges(trans))  # drops the states inside holes
    if (trans[kept, HOLE_MARKER] >= 0).any():
        raise ValueError("the envelope reads byte 0xFE outside a hole")
    new_id = np.append(np.cumsum(kept, dtype=np.int32) - 1, np.int32(-1))  # [-1]: dead
    return Dfa(new_id[trans[kept]], accept[kept])

"""Boolean algebra on canonical DFAs: intersection, union, difference and complement (the product
construction; Hopcroft and Ullman, "Introduction to Automata Theory, Languages and Computation",
section 3.2, "closure under boolean operations"). Regular languages are closed under all four,
which is what lets the schema compiler (docs/design.md section 3) compile `not`, `oneOf`, `allOf`
that does not merge, and `if`/`then`/`else` exactly (`corral.automata.schema.exact`).

Each operation walks the pairs of states reachable from (0, 0), breadth first and one whole
frontier per NumPy step, over the byte classes both operands agree on; a missing side is the dead
state. The product is then trimmed (`remove_dead_states`), minimized (`minimize`) and numbered
breadth first (`number_breadth_first`), so equal languages give identical tables, exactly as
`tree_to_dfa` gives them.

Limit: the product may make at most `Limits.max_dfa_states` pairs before minimization (the same
limit subset construction obeys; default 40,000). Past it: `TooManyDfaStatesError`, raised as the
pair past the limit is discovered, never after the memory is spent.
"""

from __future__ import annotations

import numpy as np
from corral.automata.determinize import remove_dead_states
from corral.automata.dfa import Dfa
from corral.automata.errors import TooManyDfaStatesError
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.minimize import minimize, number_breadth_first

_KEEPS = {
    "intersection": lambda a, b: a & b,
    "union": lambda a, b: a | b,
    "difference": lambda a, b: a & ~b,
}
"""Per operation: which pairs (accept in a, accept in b) accept."""

_LIVE = {
    "intersection": lambda a, b: (a != 0) & (b != 0),
    "union": lambda a, b: (a != 0) | (b != 0),
    "difference": lambda a, b: a != 0,
}
"""Per operation: which successor pairs can still accept (0 is the dead state of a side)."""


def intersection(a: Dfa, b: Dfa, limits: Limits | None = None) -> Dfa:
    """The canonical DFA of L(a) ∩ L(b).

    Raises:
        EmptyLanguageError: the languages share no string.
        TooManyDfaStatesError: more than `limits.max_dfa_states` pairs.
    """
    return _product(a, b, "intersection", limits)


def union(a: Dfa, b: Dfa, limits: Limits | None = None) -> Dfa:
    """The canonical DFA of L(a) ∪ L(b). Raises TooManyDfaStatesError past the limit."""
    return _product(a, b, "union", limits)


def difference(a: Dfa, b: Dfa, limits: Limits | None = None) -> Dfa:
    """The canonical DFA of L(a) minus L(b).

    Raises:
        EmptyLanguageError: every string of `a` is in `b`.
        TooManyDfaStatesError: more than `limits.max_dfa_states` pairs.
    """
    return _product(a, b, "difference", limits)


def complement(a: Dfa, universe: Dfa, limits: Limits | None = None) -> Dfa:
    """The complement of L(a) within L(universe): `difference(universe, a)`. corral always
    complements within a universe of JSON texts (`corral.automata.schema.exact.UNIVERSE`): the
    complement within all byte strings would hold every text that is not JSON.

    Raises:
        EmptyLanguageError: the universe holds nothing outside L(a).
        TooManyDfaStatesError: more than `limits.max_dfa_states` pairs.
    """
    return _product(universe, a, "difference", limits)


def _product(a: Dfa, b: Dfa, operation: str, limits: Limits | None) -> Dfa:
    """The product of `a` and `b` keeping the pairs `_KEEPS[operation]` accepts. O(pairs x
    classes) NumPy work plus one dict lookup per new pair."""
    limit = (limits or DEFAULT_LIMITS).max_dfa_states
    keep = _KEEPS[operation]
    # Byte classes: bytes on which both tables move alike, numbered by their smallest byte
    # (one row of 4 x (n_a + n_b) bytes per byte value, compared as raw bytes).
    columns = np.ascontiguousarray(np.concatenate([a.trans.T, b.trans.T], axis=1))
    ids: dict[bytes, int] = {}
    byte_to_class = np.array(
        [ids.setdefault(columns[byte].tobytes(), len(ids)) for byte in range(256)], np.int32
    )
    class_bytes = np.unique(byte_to_class, return_index=True)[1]  # smallest byte of each class
    # Tables shifted by one so the dead state is row 0 (it moves to itself).
    ta = np.vstack([np.zeros(len(class_bytes), np.int64), a.trans[:, class_bytes] + 1])
    tb = np.vstack([np.zeros(len(class_bytes), np.int64), b.trans[:, class_bytes] + 1])
    acc_a = np.concatenate([[False], a.accept])
    acc_b = np.concatenate([[False], b.accept])
    width = b.n_states + 1
    index = {1 * width + 1: 0}  # pair code -> product state; start is (0, 0), shifted (1, 1)
    pairs = [np.array([1 * width + 1], dtype=np.int64)]
    rows: list[np.ndarray] = []
    frontier = pairs[0]
    while len(frontier):
        next_a = ta[frontier // width]  # [f, n_classes]
        next_b = tb[frontier % width]
        codes = next_a * width + next_b
        live = _LIVE[operation](next_a, next_b)
        new = []
        for code in np.unique(codes[live]).tolist():
            if code not in index:
                if len(index) >= limit:
                    raise TooManyDfaStatesError(
                        "max_dfa_states", limit, "the product automaton needs too many states"
                    )
                index[code] = len(index)
                new.append(code)
        lookup = np.vectorize(index.__getitem__, otypes=[np.int32])
        row = np.full(codes.shape, -1, dtype=np.int32)
        if live.any():
            row[live] = lookup(codes[live])
        rows.append(row)
        frontier = np.array(new, dtype=np.int64)
        pairs.append(frontier)
    codes_all = np.concatenate(pairs)
    trans = np.concatenate(rows, axis=0)
    accept = keep(acc_a[codes_all // width], acc_b[codes_all % width])
    trans, accept = remove_dead_states(trans, accept)
    trans, accept = minimize(trans, accept)
    return number_breadth_first(trans, accept, byte_to_class)

"""A DFA made on demand: the subset construction of a regex tree's NFA, one state at a time, as
a caller asks for states, so that a grammar's first mask comes before its whole DFA
(docs/python.md, "Masks made on demand").

A `LazyDfa` stops after the Thompson NFA: a state's row is made the first time it is asked for
(`Subsets.expand`, each byte its own class), so a mask walked from the start state costs the
states within a token's bytes of it, not the whole DFA. The NFA itself is built on demand
(`tree_to_nfa(..., deferred=True)`): each alternative and each copy of a counted repeat
(`maxLength`, `maxItems`, `{m,n}`) is a stub until a closure of a row's targets reaches it, so
a first mask does not pay for a `{0,256}` unrolled in full, nor for the members of an object
it has not reached (docs/benchmarks.md, "The lazy first mask").

What a `LazyDfa` is not: minimal or canonical. Its states are numbered in the order they are
made, and two states may accept the same strings; `to_dfa()` makes the rest and gives the
canonical `Dfa`, equal to `tree_to_dfa`'s. Every state it makes is live (can reach
acceptance): an NFA with states that cannot reach `ACCEPT` (`Nfa.trimmed` False) has them
dropped from every closure (`live_nfa_states`), so no edge leads to a dead state and the masks
walked on it are exact.

Tables are as in docs/design.md section 2: a row is int32 `[256]`, -1 dead.
"""

from __future__ import annotations

import numpy as np
from corral.automata.compile import deep_recursion
from corral.automata.determinize import (
    Subsets,
    _bits_matrix,
    _first_bytes,
    byte_classes,
    live_nfa_states,
)
from corral.automata.dfa import Dfa
from corral.automata.graph import true_cells
from corral.automata.limits import DEFAULT_LIMITS, Limits, SchemaLimits
from corral.automata.minimize import minimize, number_breadth_first
from corral.automata.nfa import tree_states, tree_to_nfa
from corral.automata.parse import parse
from corral.automata.schema.compiler import CountedBuild, compile_schema
from corral.automata.tree import Node

_EACH_BYTE = np.arange(256, dtype=np.int32)
"""The byte classes of a lazy construction: one per byte."""


class LazyDfa:
    """The DFA of a regex tree, its states made as they are asked for (module docstring).

    Args:
        node: a regex tree (`corral.automata.tree`), as `tree_to_dfa` takes.
        limits: `max_nfa_states` is checked here, `max_dfa_states` and `max_subset_work` as
            states are made.
        deferred: build the NFA's parts as rows reach them (module docstring): True when the
            caller has counted the NFA within `max_nfa_states` (`lazy_schema_dfa` counts the
            schema's form, and defers above `DEFER` states), False to build it whole here;
            None: deferred when `tree_states` counts it above `DEFER` and within the limit (a
            regex's tree; a schema's DAG of shared tails counts far above its NFA). An NFA
            with states that cannot reach acceptance is built whole (its live states are
            found over all of it).

    State 0 is the start. `n_states` grows as `row` makes states.

    Raises:
        EmptyLanguageError: the tree matches no string.
        TooManyNfaStatesError: the NFA passes `limits.max_nfa_states` (a deferred NFA that a
            caller's `deferred=True` wrongly let through: as `row` builds its parts).
    """

    def __init__(self, node: Node, limits: Limits | None = None, deferred: bool | None = None):
        if deferred is None:
            deferred = _deferred(node, limits)
        with deep_recursion():
            nfa = tree_to_nfa(node, limits, deferred=deferred)
            self._deferred = nfa.deferred  # None: the NFA is whole
            if self._deferred is not None and not nfa.trimmed:  # live states need it whole
                self._deferred.build_all()
                self._deferred = None
            if self._deferred is not None:
                self._deferred.ensure_closure(nfa.start)
        self._nfa = nfa
        self._masks = nfa.edge_mask
        live = None if nfa.trimmed else live_nfa_states(nfa)
        # Each byte its own class: the edges' atoms are sets of bytes, and no partition of the
        # bytes is computed before `to_dfa` (it costs as much as the first mask's rows).
        self._subsets = Subsets(nfa, _EACH_BYTE, limits, nfa.edge_mask, live)
        self._rows: list[np.ndarray | None] = []
        self._atom_bytes: dict[int, np.ndarray] = {}  # atom id -> its bytes, ascending

    @property
    def n_states(self) -> int:
        """The states made so far (each reached by some edge made so far, or the start)."""
        return self._subsets.n_states

    def is_expanded(self, state: int) -> bool:
        """True when `state`'s row has been made."""
        return state < len(self._rows) and self._rows[state] is not None

    def accepting(self, state: int) -> bool:
        """Whether `state` (made) accepts.

        Raises:
            IndexError: `state` has not been made.
        """
        if not 0 <= state < self.n_states:
            raise IndexError(f"state {state} has not been made (0 to {self.n_states - 1})")
        return self._subsets.accept[state]

    def row(self, state: int) -> np.ndarray:
        """int32 `[256]`, read-only: the state reached from `state` on each byte (-1 dead),
        making the row on first request (and the states it reaches, numbered next). O(edges
        of the state's kernel x atoms) the first time, O(1) after.

        Raises:
            IndexError: `state` has not been made.
            TooManyDfaStatesError, SubsetWorkError: making the row would pass
                `limits.max_dfa_states` or `limits.max_subset_work`.
        """
        if 0 <= state < len(self._rows):
            known = self._rows[state]
            if known is not None:
                return known
        if not 0 <= state < self.n_states:
            raise IndexError(f"state {state} has not been made (0 to {self.n_states - 1})")
        subsets = self._subsets
        first = len(subsets.edge_state)
        if self._deferred is not None and self._deferred.stubs:  # the parts the row reaches
            targets, ensure_closure = self._nfa.edge_target, self._deferred.ensure_closure
            with deep_recursion():
                for s in subsets.kernels[state]:
                    ensure_closure(targets[s])
        subsets.expand(state, state + 1)
        row = np.full(256, -1, dtype=np.int32)
        atoms, targets = subsets.edge_atom, subsets.edge_to
        for k in range(first, len(subsets.edge_state)):
            row[self._bytes_of(atoms[k])] = targets[k]
        row.setflags(write=False)
        if state >= len(self._rows):
            self._rows.extend([None] * (state + 1 - len(self._rows)))
        self._rows[state] = row
        return row

    def _bytes_of(self, atom: int) -> np.ndarray:
        """int64 `[n]`: the bytes of an atom (a 256-bit int), ascending, memoized per atom."""
        known = self._atom_bytes.get(atom)
        if known is None:
            bits = np.frombuffer(self._subsets.atoms[atom].to_bytes(32, "little"), np.uint8)
            known = np.flatnonzero(np.unpackbits(bits, bitorder="little"))
            self._atom_bytes[atom] = known
        return known

    def finish(self) -> np.ndarray:
        """Make every state at once; returns the whole table, int32 `[n_states, 256]` (-1
        dead), read-only, in the lazy numbering (the rows `row` gave stay). The states not yet
        expanded are expanded in one pass of the construction (the queue past the last
        expanded state in one call, as the eager construction runs) and their rows written
        together in NumPy: about the eager `subset_construction`'s cost for those states.

        Raises:
            TooManyDfaStatesError: the DFA passes `limits.max_dfa_states`.
        """
        if self._deferred is not None:
            with deep_recursion():
                self._deferred.build_all()
            self._deferred = None  # the NFA is whole: its builder's memo is freed
        subsets, rows = self._subsets, self._rows
        first_edge = len(subsets.edge_state)
        tail = len(rows)  # every state from here on is not expanded
        while tail > 0 and rows[tail - 1] is None:
            tail -= 1
        for state in range(tail):
            if rows[state] is None:
                subsets.expand(state, state + 1)
        subsets.expand(tail)  # to the end of the queue, which grows as it is read
        table = np.full((subsets.n_states, 256), -1, dtype=np.int32)
        for state, row in enumerate(rows):
            if row is not None:
                table[state] = row
        if len(subsets.edge_state) > first_edge:
            atoms = np.array(subsets.edge_atom[first_edge:])
            atom_bytes = _bits_matrix(subsets.atoms, 256)  # bool [n_atoms, 256]
            edge, byte = true_cells(atom_bytes[atoms])
            sources = np.array(subsets.edge_state[first_edge:])
            table[sources[edge], byte] = np.array(subsets.edge_to[first_edge:], np.int32)[edge]
        table.setflags(write=False)
        self._rows = list(table)
        return table

    def to_dfa(self) -> Dfa:
        """The canonical minimal `Dfa` of the tree (equal to `tree_to_dfa`'s): every state
        made (`finish`), then minimized and numbered breadth first. The lazy numbering is
        unchanged.

        Raises:
            TooManyDfaStatesError: the DFA passes `limits.max_dfa_states`.
        """
        table = self.finish()  # (the NFA whole first: the classes read every mask)
        byte_to_class = byte_classes(self._masks)
        trans = table[:, _first_bytes(byte_to_class)]
        accept = np.array(self._subsets.accept, dtype=bool)
        trans, accept = minimize(trans, accept)
        return number_breadth_first(trans, accept, byte_to_class)


DEFER = 4_000
"""An NFA counted at most this many states is built whole (about 4 ms of building at most):
a deferred one's stubs, its walk for empty alternations and the closures searched before each
row cost more than they save on a small NFA (docs/benchmarks.md, "The lazy first mask")."""


def _deferred(node: Node, limits: Limits | None) -> bool:
    """Whether the tree's NFA is counted (`tree_states`: exact on the parser's trees, far above
    the builder's on a schema's DAG of shared tails) above `DEFER` and within `max_nfa_states`:
    past the limit it is built whole at once, so that the limit is met at construction."""
    return DEFER < tree_states(node) + 1 <= (limits or DEFAULT_LIMITS).max_nfa_states


def lazy_regex_dfa(pattern: str, limits: Limits | None = None) -> LazyDfa:
    """A `LazyDfa` of `pattern` (docs/design.md section 2's subset, fullmatch over UTF-8 bytes): the
    language of `regex_to_dfa(pattern)`.

    Raises:
        PatternError: the pattern is malformed or outside the subset (with its position).
        EmptyLanguageError: it matches no string.
        LimitError subclasses: a limit of `limits` was passed (`max_dfa_states` only later, as
            `LazyDfa.row` makes states).
    """
    return LazyDfa(parse(pattern, limits), limits)


def lazy_schema_dfa(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> LazyDfa:
    """A `LazyDfa` of a JSON Schema's compact JSON texts: the language of
    `schema_to_dfa(schema)` (docs/design.md section 3), its regex tree compiled as
    `schema_to_tree` does.

    Raises the errors of `schema_to_tree`, and the NFA limit of `limits`; `max_dfa_states` is
    met later, as `LazyDfa.row` makes states (a `$ref` cycle is not unrolled less deeply then,
    as `schema_to_dfa` does before refusing).
    """
    build = CountedBuild(
        lambda tree, states: LazyDfa(tree, limits, deferred=states is not None and states > DEFER)
    )
    return compile_schema(schema, limits, schema_limits, build)[0]

"""The regex pipeline end to end (docs/design.md section 2): pattern -> tree -> Thompson NFA -> byte
classes -> subset construction -> dead-state removal (only when the NFA has states with no way
on, `Nfa.trimmed`) -> minimization (Moore's rounds, then Hopcroft's refinement if they do not
settle) -> breadth-first numbering.
`bench/compile.py` prints the time of each stage.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

from corral.automata.determinize import classes_of, remove_dead_states, subset_construction
from corral.automata.dfa import Dfa
from corral.automata.limits import Limits
from corral.automata.minimize import minimize, number_breadth_first
from corral.automata.nfa import tree_to_nfa
from corral.automata.parse import parse
from corral.automata.tree import Node


@contextmanager
def deep_recursion(limit: int = 50_000):
    """Raise Python's recursion limit to `limit` for the duration of the block. The Thompson
    construction recurses along a tree's depth, and a length-bounded string of a schema is a
    chain of up to 4 x maxLength byte levels, deeper than the default 1,000 frames. Python 3.11+
    runs Python-to-Python calls without the C stack, so a high limit is safe there."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def tree_to_dfa(node: Node, limits: Limits | None = None) -> Dfa:
    """The canonical minimal DFA of a regex tree (`corral.automata.tree`; it may be a DAG whose
    shared tails are built once).

    Returns a `Dfa`: trans int32 `[n_states, 256]` (-1 dead), accept bool `[n_states]`, start 0,
    every state live; equal languages give identical arrays.

    Raises:
        EmptyLanguageError: the tree matches no string.
        TooManyNfaStatesError, TooManyDfaStatesError: a limit of `limits` was passed.
    """
    with deep_recursion():
        return build_dfa(node, limits)


def build_dfa(node: Node, limits: Limits | None = None) -> Dfa:
    """`tree_to_dfa` for a caller already inside `deep_recursion()` (the schema compiler, which
    raises the limit once per public call); same result and errors."""
    nfa = tree_to_nfa(node, limits)
    byte_to_class, class_sets = classes_of(nfa.edge_mask)
    trans, accept = subset_construction(nfa, byte_to_class, limits, class_sets)
    if not nfa.trimmed:  # else every state is live (`Nfa.trimmed`)
        trans, accept = remove_dead_states(trans, accept)
    trans, accept = minimize(trans, accept)
    return number_breadth_first(trans, accept, byte_to_class)


def regex_to_dfa(pattern: str, limits: Limits | None = None) -> Dfa:
    """The canonical minimal DFA of `pattern` (docs/design.md section 2's subset, fullmatch
    semantics over UTF-8 bytes): `tree_to_dfa(parse(pattern, limits), limits)`.

    Raises:
        PatternError: the pattern is malformed or outside the subset (with its position).
        EmptyLanguageError: it matches no string.
        LimitError subclasses: a limit of `limits` was passed.
    """
    return tree_to_dfa(parse(pattern, limits), limits)

"""Language-level operations on a regex tree (`corral.automata.tree`), without building its
automaton: whether it is empty or holds the empty string, and its strings that start with a byte
of a set (Brzozowski's derivative, keeping the byte). Each walks a DAG once (memoized by node
identity): O(nodes reached), the shared tails shared in the result.
"""

from __future__ import annotations

import numpy as np
from corral.automata.dfa import Dfa
from corral.automata.errors import EmptyLanguageError
from corral.automata.product import intersection
from corral.automata.tree import Alt, Automaton, ByteSet, Concat, Node, Repeat

ALL_BYTES = (1 << 256) - 1
"""The 256-bit mask of every byte (a `ByteSet.mask`)."""


def starting_with(node: Node, first: int) -> Node:
    """The tree of the non-empty strings of `node`'s language whose first byte is in `first` (a
    256-bit mask, as `ByteSet.mask`). Only the items that can hold the first byte are rebuilt;
    an `Automaton` leaf becomes its product with `[first].*`."""
    return _starting_with(node, first, {}, {})


def is_nullable(node: Node) -> bool:
    """True when the empty string is in `node`'s language."""
    return _is_nullable(node, {})


def is_empty(node: Node) -> bool:
    """True when `node`'s language is empty."""
    return _is_empty(node, {})


def _starting_with(node: Node, first: int, memo: dict, nullable: dict) -> Node:
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, ByteSet):
        out = ByteSet(node.mask & first)
    elif isinstance(node, Alt):
        out = Alt(tuple(_starting_with(i, first, memo, nullable) for i in node.items))
    elif isinstance(node, Concat):
        options = []
        for k, item in enumerate(node.items):
            head = _starting_with(item, first, memo, nullable)
            options.append(Concat((head, *node.items[k + 1 :])))
            if not _is_nullable(item, nullable):
                break
        out = Alt(tuple(options))
    elif isinstance(node, Automaton):
        out = _automaton_starting_with(node.dfa, first)
    elif node.max == 0:
        out = Alt(())
    else:  # x{lo,hi}: a first non-empty x, then x{max(lo-1,0),hi-1} (x nullable or not)
        more = None if node.max is None else node.max - 1
        rest = Repeat(node.item, max(node.min - 1, 0), more)
        out = Concat((_starting_with(node.item, first, memo, nullable), rest))
    memo[key] = out
    return out


def _automaton_starting_with(dfa: Dfa, first: int) -> Node:
    """`starting_with` of a finished DFA: its product with the language `[first].*` (a two-state
    DFA), or the empty language when no string of `dfa` starts with a byte in `first`."""
    trans = np.full((2, 256), -1, np.int32)
    trans[0, [b for b in range(256) if first >> b & 1]] = 1
    trans[1, :] = 1
    try:
        return Automaton(intersection(dfa, Dfa(trans, np.array([False, True]))))
    except EmptyLanguageError:
        return Alt(())


def _is_nullable(node: Node, memo: dict) -> bool:
    key = id(node)
    if key not in memo:
        if isinstance(node, ByteSet):
            memo[key] = False
        elif isinstance(node, Concat):
            memo[key] = all(_is_nullable(i, memo) for i in node.items)
        elif isinstance(node, Alt):
            memo[key] = any(_is_nullable(i, memo) for i in node.items)
        elif isinstance(node, Automaton):
            memo[key] = bool(node.dfa.accept[0])
        else:
            memo[key] = node.min == 0 or _is_nullable(node.item, memo)
    return memo[key]


def _is_empty(node: Node, memo: dict) -> bool:
    key = id(node)
    if key not in memo:
        if isinstance(node, ByteSet):
            memo[key] = node.mask == 0
        elif isinstance(node, Concat):
            memo[key] = any(_is_empty(i, memo) for i in node.items)
        elif isinstance(node, Alt):
            memo[key] = all(_is_empty(i, memo) for i in node.items)
        elif isinstance(node, Automaton):
            memo[key] = False  # a canonical DFA's language is never empty
        else:
            memo[key] = node.min > 0 and _is_empty(node.item, memo)
    return memo[key]

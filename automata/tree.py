"""The regex tree: the common currency between the pattern parser, the schema compiler and the
Thompson construction (docs/design.md section 2).

A tree's leaves are sets of bytes, or whole DFAs (`Automaton`, spliced in by the NFA builder);
a non-ASCII character or class becomes alternations of sequences of byte sets (its UTF-8
encodings). Nodes are compared by identity (`eq=False`), so a node may be shared by several
parents: the schema compiler builds an object's optional members as a DAG whose shared tails the
NFA construction instantiates once (docs/design.md section 3).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class ByteSet:
    """One byte out of a set. `mask` is a 256-bit int: bit b set means byte b is in the set."""

    mask: int


@dataclass(frozen=True, eq=False)
class Concat:
    """The items one after another. `Concat(())` matches the empty string."""

    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Alt:
    """Any one of the items. `Alt(())` matches nothing (the empty language)."""

    items: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Repeat:
    """`item` repeated between `min` and `max` times (`max=None`: unbounded), greedily."""

    item: Node
    min: int
    max: int | None


@dataclass(frozen=True, eq=False)
class Automaton:
    """A finished DFA (`corral.automata.dfa.Dfa`) used as a fragment: its language, spliced into
    the NFA state for state (`corral.automata.nfa`). This is how the result of a product
    (`corral.automata.product`) sits inside a larger tree."""

    dfa: object


Node = ByteSet | Concat | Alt | Repeat | Automaton

EMPTY = Concat(())


def byte_set(values) -> ByteSet:
    """A `ByteSet` of the given byte values (ints in 0..255)."""
    mask = 0
    for b in values:
        mask |= 1 << b
    return ByteSet(mask)


SINGLE_BYTES = tuple(ByteSet(1 << b) for b in range(256))
"""One shared `ByteSet` per byte value. Sharing is safe (nodes are values; the NFA construction
builds a shared node once per continuation) and saves making a node per literal byte."""


def literal_bytes(data: bytes) -> Node:
    """The tree matching exactly `data` (its bytes are the shared `SINGLE_BYTES` nodes)."""
    return Concat(tuple([SINGLE_BYTES[b] for b in data]))

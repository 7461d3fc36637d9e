"""The intermediate form of a compiled schema, and its tree builder (docs/design.md section 3).

A schema is lowered to a small expression over JSON text: `Lit` (exact text), `Regex` (regex
text), `Subtree` (a regex tree: patterns, products), `Seq`, `Choice`, `Repeat` and `Object`
(members in order, each required or optional). Nodes are compared by identity, so a node may be
shared. Two back ends read it: `TreeBuilder` here (the primary path, to a regex tree for
`corral.automata.tree_to_dfa`) and `corral.automata.schema.text.TextRenderer` (regex text, only
for `json_schema_to_regex` and the CLI).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.automata import tree
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.nfa import register_fragment
from corral.automata.parse import parse

PINNED: dict[str, tree.Node] = {}
"""Regex text -> its tree under the default limits, for the primitives `pin_fragment` made."""


def pin_fragment(text: str) -> tree.Node:
    """The tree of regex text `text` under the default limits, kept for the process and
    registered with the NFA builder (`corral.automata.nfa.register_fragment`: each instance is
    a copy of one NFA of it). Every compile with the default limits gets this one tree for
    `text` (a `TreeBuilder` with other limits parses the text itself). For the primitives
    most schemas hold, several times each (the plain string, integer, number, boolean, a
    counted string's character): what a serving process parses once, parsed at import."""
    node = PINNED.get(text)
    if node is None:
        node = PINNED[text] = parse(text)
        register_fragment(node)
    return node


@dataclass(frozen=True, eq=False)
class Lit:
    """Exactly `text`."""

    text: str


@dataclass(frozen=True, eq=False)
class Regex:
    """A fragment given as regex text (docs/design.md section 2's subset); `precedence` 1 =
    alternation, 2 = sequence, 3 = atom (how much the text binds, for the text back end)."""

    text: str
    precedence: int


@dataclass(frozen=True, eq=False)
class Subtree:
    """A fragment given as a regex tree (patterns, pattern x length products)."""

    node: tree.Node


@dataclass(frozen=True, eq=False)
class Seq:
    """The items one after another."""

    items: tuple


@dataclass(frozen=True, eq=False)
class Choice:
    """Any one of the items; `Choice(())` is the empty language."""

    items: tuple


@dataclass(frozen=True, eq=False)
class Repeat:
    """`item` between `min` and `max` times (`max=None`: unbounded)."""

    item: object
    min: int
    max: int | None


@dataclass(frozen=True, eq=False)
class Object:
    """`{` members `}`: `members` are (member expression `"name":VALUE`, required) in schema
    order, with a comma exactly between the members written."""

    members: tuple


NOTHING = Choice(())
"""The empty language (one shared node: lowering steps test `is NOTHING`)."""

EMPTY = Seq(())
"""The empty string."""


def seq(*items):
    """`Seq(items)`, simplified: NOTHING if an item is NOTHING, empty strings dropped."""
    if any(item is NOTHING for item in items):
        return NOTHING
    items = tuple(item for item in items if item is not EMPTY)
    if not items:
        return EMPTY
    return items[0] if len(items) == 1 else Seq(items)


def choice(items):
    """`Choice(items)`, simplified: NOTHING items dropped, one item returned as is."""
    items = tuple(item for item in items if item is not NOTHING)
    if not items:
        return NOTHING
    return items[0] if len(items) == 1 else Choice(items)


def repeat(item, lo: int, hi: int | None):
    """`Repeat(item, lo, hi)`, simplified for NOTHING, `hi == 0` and `lo == hi == 1`."""
    if item is NOTHING or hi == 0:
        return EMPTY if lo == 0 else NOTHING
    if lo == hi == 1:
        return item
    return Repeat(item, lo, hi)


class TreeBuilder:
    """Form -> regex tree, for one compile. Shared form nodes give shared tree nodes, and each
    regex text is parsed once (`parse`, cached here).

    An object's members become `{` Alt_j(m_j after(j+1)) `}` where after(i) = Concat(o_i, ...,
    o_{n-1}) and o_i is `,m_i` or `(,m_i)?`: every Concat lists the same o nodes, so the NFA
    construction (memoized on node and continuation) builds each o_i once and the NFA stays
    linear in the number of members (docs/design.md section 3, "shared tails").
    """

    def __init__(self, limits: Limits | None):
        self.limits = limits
        self.memo: dict[int, tuple[object, tree.Node]] = {}  # id -> (form node kept alive, tree)
        self.parsed: dict[str, tree.Node] = {}

    def parse(self, text: str) -> tree.Node:
        """The regex tree of `text` (`corral.automata.parse`, with this builder's limits).
        Raises PatternError or LimitError as `parse` does."""
        node = self.parsed.get(text)
        if node is None:
            pinned = PINNED.get(text)
            if pinned is not None and (self.limits is None or self.limits == DEFAULT_LIMITS):
                node = self.parsed[text] = pinned
            else:
                node = self.parsed[text] = parse(text, self.limits)
        return node

    def build(self, node) -> tree.Node:
        """The regex tree of a form node. Raises TypeError on anything else."""
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit[1]
        kind = type(node)  # the form's node types are final: compared exactly, most first
        if kind is Seq:
            out = tree.Concat(tuple([self.build(item) for item in node.items]))
        elif kind is Lit:
            out = tree.literal_bytes(node.text.encode("utf-8"))
        elif kind is Regex:
            out = self.parse(node.text)
        elif kind is Choice:
            out = tree.Alt(tuple([self.build(item) for item in node.items]))
        elif kind is Object:
            out = self._object(node)
        elif kind is Repeat:
            out = tree.Repeat(self.build(node.item), node.min, node.max)
        elif kind is Subtree:
            out = node.node
        else:
            raise TypeError(f"not a schema form node: {node!r}")
        self.memo[id(node)] = (node, out)
        return out

    def _object(self, node: Object) -> tree.Node:
        comma = tree.ByteSet(1 << ord(","))
        members = [(self.build(m), required) for m, required in node.members]
        tails = []
        for member, required in members:
            piece = tree.Concat((comma, member))
            tails.append(piece if required else tree.Repeat(piece, 0, 1))
        firsts = []
        for j, (member, required) in enumerate(members):
            firsts.append(tree.Concat((member, *tails[j + 1 :])))
            if required:
                break
        else:
            firsts.append(tree.EMPTY)
        body = firsts[0] if len(firsts) == 1 else tree.Alt(tuple(firsts))
        return tree.Concat((tree.ByteSet(1 << ord("{")), body, tree.ByteSet(1 << ord("}"))))

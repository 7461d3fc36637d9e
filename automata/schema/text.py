"""The regex-text back end of the schema form (docs/design.md section 3), used only by
`json_schema_to_regex`, `json_object_regex` and the CLI; compiling goes through the tree.

An object is written in docs/design.md's nested form: two optional integers x, y give
`\\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\\}`. It grows quadratically with the number of
optional members, so the renderer estimates the length first and raises `LimitError`
(`max_regex_length`) before building a text past the limit. Literals are written with
`corral.automata.parse.escape`, the one escaper, so `parse(text)` gives the same language as
the tree back end.
"""

from __future__ import annotations

from corral.automata import tree
from corral.automata.errors import LimitError, SchemaTextError
from corral.automata.parse import escape
from corral.automata.schema.form import Choice, Lit, Object, Regex, Repeat, Seq, Subtree

NO_CHARACTER = "[^\\x00-\\U0010ffff]"
"""A class that matches nothing (the empty language, never reached for a compiled schema)."""


def _wrap(text: str, precedence: int, needed: int) -> str:
    return text if precedence >= needed else f"(?:{text})"


def _quantifier(lo: int, hi: int | None) -> str:
    if (lo, hi) == (0, 1):
        return "?"
    if (lo, hi) == (0, None):
        return "*"
    if (lo, hi) == (1, None):
        return "+"
    if hi is None:
        return f"{{{lo},}}"
    if lo == hi:
        return f"{{{lo}}}"
    return f"{{{lo},{hi}}}"


def _children(node) -> list:
    if isinstance(node, (Seq, Choice)):
        return list(node.items)
    if isinstance(node, Repeat):
        return [node.item]
    if isinstance(node, Object):
        return [m for m, _ in node.members]
    return []


class TextRenderer:
    """Form -> regex text in docs/design.md's form, checking the length before building any text.

    Raises (from `render`):
        LimitError (`max_regex_length`): the text would be longer than `limit` characters.
        SchemaTextError: a `Subtree` that is not made of whole characters (a product).
    """

    def __init__(self, limit: int):
        self.limit = limit
        self.memo: dict[int, tuple[str, int]] = {}
        self.sizes: dict[int, int] = {}

    def size(self, node) -> int:
        """An upper bound on the rendered length of `node` (iterative, memoized)."""
        stack = [node]
        while stack:
            cur = stack[-1]
            if id(cur) in self.sizes:
                stack.pop()
                continue
            children = _children(cur)
            missing = [c for c in children if id(c) not in self.sizes]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            total = sum(self.sizes[id(c)] + 4 for c in children) + 8
            if isinstance(cur, Lit):
                total = 2 * len(cur.text) + 4  # dumped JSON has no raw control characters
            elif isinstance(cur, Regex):
                total = len(cur.text) + 4
            elif isinstance(cur, Subtree):
                total = 64
            elif isinstance(cur, Object):
                n = len(cur.members)
                total = sum(self.sizes[id(m)] + 8 for m, _ in cur.members) * max(n, 1) + 8
            self.sizes[id(cur)] = min(total, 1 << 62)
        return self.sizes[id(node)]

    def render(self, node) -> str:
        """The regex text of a form node (its root holds every node alive while rendering)."""
        if self.size(node) > self.limit:
            raise LimitError(
                "max_regex_length",
                self.limit,
                f"the schema's regex text would have about {self.size(node)} characters",
            )
        return self._render(node)[0]

    def _render(self, node) -> tuple[str, int]:
        key = id(node)
        if key in self.memo:
            return self.memo[key]
        if isinstance(node, Lit):
            out = (escape(node.text), 3 if len(node.text) == 1 else 2)
        elif isinstance(node, Regex):
            out = (node.text, node.precedence)
        elif isinstance(node, Subtree):
            out = (tree_text(node.node), 1)
        elif isinstance(node, Seq):
            parts = [self._render(item) for item in node.items]
            out = ("".join(_wrap(t, p, 2) for t, p in parts), 2)
        elif isinstance(node, Choice):
            if not node.items:
                out = (NO_CHARACTER, 3)
            else:
                parts = [self._render(item) for item in node.items]
                out = ("|".join(_wrap(t, p, 2) for t, p in parts), 1)
        elif isinstance(node, Repeat):
            text, precedence = self._render(node.item)
            out = (_wrap(text, precedence, 3) + _quantifier(node.min, node.max), 2)
        elif isinstance(node, Object):
            out = (self._object(node), 2)
        else:
            raise TypeError(f"not a schema form node: {node!r}")
        self.memo[key] = out
        return out

    def _object(self, node: Object) -> str:
        """docs/design.md's nested form, built from the last member back:
        after(i) = `(?:,m_i)?` after(i+1) (`,m_i` when required);
        none(i) = `(?:m_i after(i+1)|none(i+1))` (`m_i after(i+1)` when required)."""
        members = [(self._render(m), required) for m, required in node.members]
        after = [""] * (len(members) + 1)
        for i in range(len(members) - 1, -1, -1):
            (text, precedence), required = members[i]
            piece = "," + _wrap(text, precedence, 2)
            after[i] = (piece if required else f"(?:{piece})?") + after[i + 1]
        none, none_precedence = "", 2
        for i in range(len(members) - 1, -1, -1):
            (text, precedence), required = members[i]
            head = _wrap(text, precedence, 2) + after[i + 1]
            if required:
                none, none_precedence = head, 2
            else:
                none, none_precedence = f"{head}|{_wrap(none, none_precedence, 2)}", 1
        return "\\{" + _wrap(none, none_precedence, 2) + "\\}"


# Regex trees made of whole characters (as `parse` builds them) back to text ------------------


def _class_char(code: int) -> str:
    ch = chr(code)
    if code < 0x20 or code == 0x7F:
        return f"\\x{code:02x}"
    if ch in "\\]-[^":
        return "\\" + ch
    return ch


def _ranges_text(ranges: list[tuple[int, int]]) -> str:
    """A bracket class of code point ranges (raw characters, ASCII controls as \\xHH)."""
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return escape(chr(ranges[0][0]))
    body = "".join(
        _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges
    )
    return f"[{body}]"


def _mask_ranges(mask: int) -> list[tuple[int, int]]:
    """The runs of set bits of a 256-bit byte mask, as (first, last) byte pairs."""
    out = []
    b = 0
    while b < 256:
        if mask >> b & 1:
            start = b
            while b + 1 < 256 and mask >> (b + 1) & 1:
                b += 1
            out.append((start, b))
        b += 1
    return out


def _flat_byte_sets(node: tree.Concat) -> list[tree.ByteSet] | None:
    """The byte sets of a Concat of byte sets (nested Concats flattened), or None when another
    kind of node is in it."""
    out = []
    for item in node.items:
        if isinstance(item, tree.ByteSet):
            out.append(item)
        elif isinstance(item, tree.Concat):
            inner = _flat_byte_sets(item)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out


def _char_ranges(node: tree.Node) -> list[tuple[int, int]] | None:
    """The code point ranges of a tree that matches exactly one character (an ASCII byte set,
    a UTF-8 byte-range sequence, or an Alt of those), or None."""
    if isinstance(node, tree.ByteSet):
        return _mask_ranges(node.mask) if node.mask < (1 << 128) and node.mask else None
    flat = _flat_byte_sets(node) if isinstance(node, tree.Concat) else None
    if flat:
        spans = [_mask_ranges(i.mask) for i in flat]
        if any(len(s) != 1 for s in spans) or len(spans) < 2:
            return None
        low = bytes(s[0][0] for s in spans)
        high = bytes(s[0][1] for s in spans)
        try:
            lo, hi = ord(low.decode("utf-8")), ord(high.decode("utf-8"))
        except (UnicodeDecodeError, TypeError):
            return None
        count = 1
        for s in spans:
            count *= s[0][1] - s[0][0] + 1
        return [(lo, hi)] if count == hi - lo + 1 else None
    if isinstance(node, tree.Alt) and node.items:
        out = []
        for item in node.items:
            ranges = _char_ranges(item)
            if ranges is None:
                return None
            out.extend(ranges)
        out.sort()
        merged = []
        for lo, hi in out:
            if merged and lo <= merged[-1][1] + 1:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        return merged
    return None


def tree_text(node: tree.Node) -> str:
    """Regex text of a tree built from character sets (as `parse` makes them).

    Raises:
        SchemaTextError: a byte set that is not a whole character (a product automaton).
    """
    return _tree_text(node)[0]


def _tree_text(node: tree.Node) -> tuple[str, int]:
    ranges = _char_ranges(node)
    if ranges is not None:
        return _ranges_text(ranges), 3
    if isinstance(node, tree.ByteSet):
        if node.mask == 0:
            return NO_CHARACTER, 3
        raise SchemaTextError("this schema has no regex text; use schema_to_tree or schema_to_dfa")
    if isinstance(node, tree.Automaton):  # a product (not, oneOf, if/then/else)
        raise SchemaTextError("this schema has no regex text; use schema_to_tree or schema_to_dfa")
    if isinstance(node, tree.Concat):
        parts = [_tree_text(item) for item in node.items]
        return "".join(_wrap(t, p, 2) for t, p in parts), 2
    if isinstance(node, tree.Alt):
        if not node.items:
            return NO_CHARACTER, 3
        parts = [_tree_text(item) for item in node.items]
        return "|".join(_wrap(t, p, 2) for t, p in parts), 1
    if isinstance(node, tree.Repeat):
        text, precedence = _tree_text(node.item)
        return _wrap(text, precedence, 3) + _quantifier(node.min, node.max), 2
    raise TypeError(f"not a regex tree node: {node!r}")

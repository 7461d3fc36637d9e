"""JSON Schema to a regex tree, regex text and canonical DFA (DESIGN.md section 3).

The language is compact JSON (no whitespace) with object members in the order the schema lists
them. Every string the DFA accepts parses with `json.loads` and validates against the schema
(soundness); the language may be smaller than the set of valid instances (a sub-language), never
larger. A schema is compiled to an intermediate expression (`_Lit`, `_Regex`, `_TreeLeaf`, `_Seq`,
`_Choice`, `_Repeat`, `_Object`) with two back ends:

- the tree back end (`schema_to_tree`, the primary path): regex-tree nodes (`corral.automata.tree`)
  in which an object's members form a DAG with shared tails, so an object with n optional members
  costs O(n) NFA states (the NFA construction instantiates a shared tail once);
- the text back end (`json_schema_to_regex`): DESIGN.md's nested form, e.g. two optional integers
  x, y give `\\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\\}`. It grows quadratically with optional
  members; past `SchemaLimits.max_regex_length` characters it raises `LimitError`.

Supported keywords (anything else that is a JSON Schema keyword of any draft is refused with a
`SchemaError` naming the keyword and the JSON pointer of the subschema):
- DESIGN.md's subset: `type` (a name or a list), `enum`, `const`, `items`, `minItems`, `maxItems`,
  `properties`, `required`, `additionalProperties` (any value: the language never has members the
  schema does not list), `anyOf`.
- Beyond it, where it is sound:
  - `$ref` to a local JSON pointer (`#`, `#/definitions/..`, `#/$defs/..`, any `#/...`) or to a
    root-relative URI equal to the root's `$id`, and `#name` anchors (`$anchor`, or `$id`/`id`
    `#name`). Refs are inlined. A `$ref` cycle is unrolled: one definition may appear at most
    `SchemaLimits.max_recursion` times on a path; a deeper occurrence is the empty language, so
    optional members, array items and anyOf branches that would recurse further are left out
    (and a schema whose every value needs deeper recursion is refused as empty). In drafts 3 to 7
    the siblings of `$ref` are ignored (as validators do); otherwise they are merged with the
    target as by `allOf`.
  - `allOf`, when the parts merge: `type` lists intersect, `required` unite, `properties` merge
    member by member (a member one part does not list must satisfy that part's
    `additionalProperties`, and is dropped when that is false), numeric and length bounds take
    the tighter value, `enum`/`const` intersect, anything else must be equal in both parts.
  - `anyOf`/`oneOf` next to other keywords: each branch is merged with the siblings. `oneOf` is
    compiled as `anyOf` only when no value of one branch's language can validate against another
    branch: their possible types differ, or the other branch requires a member this branch never
    writes (a member another branch requires is left out of branches that do not require it),
    or a required member has disjoint `const`/`enum` values (a discriminator), or the branches'
    `enum`/`const` sets are disjoint. Otherwise `oneOf` is refused.
  - Strings: `minLength`/`maxLength` (characters; an escape counts as one; `\\u` escapes are
    left out of length-bounded strings, which keeps the DFA small and Python's count exact;
    `maxLength` above `SchemaLimits.max_string_length` is lowered to it, a larger `minLength`
    is refused);
    `pattern` (a search, as JSON Schema says: unanchored ends get any characters; the pattern is
    read by `corral.automata.parse` and made sound inside a JSON string by removing `"`, `\\` and
    U+0000..U+001F from every byte set, so the JSON text of the string is its value; a pattern
    using `\\D`, `\\W`, `\\S` or a negated class with `\\d`, `\\w`, `\\s` is restricted to ASCII,
    where Python's Unicode classes and ours agree); `format` with a strict regex
    (`corral.automata.schema_formats.FORMATS`: date-time, date, time, uuid, email, ipv4, uri,
    uri-reference, iri, iri-reference, idn-email, json-pointer, and the non-standard url);
    other formats are refused ("pattern-less format"), except the OpenAPI number formats
    int32/int64 (integer ranges) and float/double (no constraint).
    Length bounds next to `pattern`/`format` are kept when the pattern implies them, or applied
    by a product with a character counter when `maxLength` is given; `minLength` alone next to a
    pattern that does not imply it is refused.
  - Integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (both draft-4 boolean
    and numeric forms) as an exact decimal range; `multipleOf: 1`.
  - Numbers: the same bounds when they are integers of magnitude <= 2**53, written without
    exponent (see `schema_formats.number_range` for the float-rounding margin at exclusive
    bounds); other bounds are refused.
  - `prefixItems` and array-form `items` (tuples, with `additionalItems` / `items` for the rest),
    `uniqueItems` when `maxItems` <= 1 or false, `minProperties` (the first optional members
    become required) and `maxProperties` (the last optional members are left out),
    `patternProperties` (a listed member whose name the pattern matches must also satisfy its
    schema), `dependentRequired` and array-form
    `dependencies` (the dependencies of a listed member become required).
  - `maxItems` above `SchemaLimits.max_array_length` is lowered to it; a larger `minItems` is
    refused.
- A schema without `type` takes the types its keywords imply (`properties` -> object, `items` ->
  array, `minLength` -> string, ...): a sub-language, since validators accept other types too.
  With no type-specific keyword at all (`{}`, `true`, an untyped schema, an array without
  `items`) the language is any JSON value with containers nested at most
  `SchemaLimits.any_value_depth` levels (the `json_object_regex` machinery); depth 0 refuses it.
  An object schema without `properties` is `{}` only (DESIGN.md).
- Annotations change nothing: title, description, default, examples, $schema, $id, id (draft 4),
  $comment, deprecated, readOnly, writeOnly, definitions, $defs, $anchor, $dynamicAnchor,
  $recursiveAnchor, $vocabulary, contentEncoding, contentMediaType, contentSchema (annotations
  in 2020-12). Keys that are not JSON Schema keywords in any draft (`_format`, `_uniqueItems`,
  `x-kubernetes-*`, Snowplow's `self`, OpenAPI's `nullable`, ...) are annotations too: validators
  ignore unknown keys, so the language is the same.

Limits (`SchemaLimits`, configurable): nesting depth, enum size, recursion unrolling, counted
string and array lengths, any-value depth, regex text length. Past one: `LimitError`, never a hang.
The regex limits (`corral.automata.Limits`) bound NFA and DFA sizes as for patterns.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from urllib.parse import unquote

from corral.automata import schema_formats as formats
from corral.automata.compile import deep_recursion
from corral.automata.dfa import Dfa
from corral.automata.errors import (
    ConstrainError,
    EmptyLanguageError,
    LimitError,
    PatternError,
    SchemaError,
)
from corral.automata.limits import Limits
from corral.automata.tree import EMPTY, Alt, ByteSet, Concat, Node, Repeat, literal_bytes
from corral.automata.utf8 import ranges_to_tree

__all__ = [
    "NonFiniteNumberError",
    "SchemaLimits",
    "SchemaTextError",
    "dumps",
    "json_object_regex",
    "json_schema_to_regex",
    "schema_to_dfa",
    "schema_to_tree",
]


class NonFiniteNumberError(ConstrainError):
    """`dumps` was given NaN or an infinity, which JSON cannot write."""


class SchemaTextError(ConstrainError):
    """The schema compiles to a tree but has no regex-text rendering (a pattern combined with a
    length bound, compiled by a product automaton); use `schema_to_tree`/`schema_to_dfa`."""


@dataclass(frozen=True)
class SchemaLimits:
    """Configurable limits of the schema compiler (None means `SchemaLimits()`).

    Attributes:
        max_depth: deepest nesting of subschemas (and inlined `$ref`s) on one path (default 64).
        max_enum_values: most values in one `enum` (default 10,000).
        max_recursion: times one `$ref` target may occur on a path; deeper is cut (default 3).
        any_value_depth: container nesting of the "any JSON value" language used for `{}`,
            `true` and untyped schemas (default 3; 0 refuses such schemas).
        max_string_length: `maxLength` above it is lowered to it, `minLength` above it refused
            (default 256).
        max_array_length: `maxItems` above it is lowered to it, `minItems` above it refused
            (default 64).
        max_properties: most members in one object (default 5,000).
        max_regex_length: longest regex text `json_schema_to_regex` renders (default 2,000,000
            characters).
        max_product_nodes: most nodes of a pattern x length product (default 200,000).
    """

    max_depth: int = 64
    max_enum_values: int = 10_000
    max_recursion: int = 3
    any_value_depth: int = 3
    max_string_length: int = 256
    max_array_length: int = 64
    max_properties: int = 5_000
    max_regex_length: int = 2_000_000
    max_product_nodes: int = 200_000


DEFAULT_SCHEMA_LIMITS = SchemaLimits()


# ---------------------------------------------------------------------------------------------
# JSON values


def dumps(value) -> str:
    """Compact JSON text of `value`: `json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)` (keys in insertion order, non-ASCII raw, floats as Python's repr).

    Raises:
        NonFiniteNumberError: `value` contains NaN or an infinity.
    """
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as error:
        raise NonFiniteNumberError(f"NaN and infinities are not JSON: {error}") from None


def _json_key(value):
    """A hashable key under which JSON values are equal as JSON Schema compares them
    (1 == 1.0, true != 1, objects unordered)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(_json_key(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, _json_key(v)) for k, v in value.items()))
    raise TypeError(f"not a JSON value: {value!r}")


def _json_type(value) -> str:
    """The JSON Schema type name of a Python JSON value ("integer" only for Python ints)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# ---------------------------------------------------------------------------------------------
# The intermediate expression and its two back ends


@dataclass(frozen=True, eq=False)
class _Lit:
    """Exactly `text`."""

    text: str


@dataclass(frozen=True, eq=False)
class _Regex:
    """A fragment given as regex text; `precedence` 1 = alternation, 2 = sequence, 3 = atom."""

    text: str
    precedence: int


@dataclass(frozen=True, eq=False)
class _TreeLeaf:
    """A fragment given as a regex tree (patterns, products); rendered as text on demand."""

    node: Node


@dataclass(frozen=True, eq=False)
class _Seq:
    items: tuple


@dataclass(frozen=True, eq=False)
class _Choice:
    items: tuple


@dataclass(frozen=True, eq=False)
class _Repeat:
    item: object
    min: int
    max: int | None


@dataclass(frozen=True, eq=False)
class _Object:
    """`{` members `}`: `members` are (member expression `"name":VALUE`, required) in order."""

    members: tuple


NOTHING = _Choice(())
EMPTY_IR = _Seq(())


def _seq(*items):
    if any(item is NOTHING for item in items):
        return NOTHING
    items = tuple(item for item in items if item is not EMPTY_IR)
    if not items:
        return EMPTY_IR
    return items[0] if len(items) == 1 else _Seq(items)


def _choice(items):
    items = tuple(item for item in items if item is not NOTHING)
    if not items:
        return NOTHING
    return items[0] if len(items) == 1 else _Choice(items)


def _repeat(item, lo: int, hi: int | None):
    if item is NOTHING or hi == 0:
        return EMPTY_IR if lo == 0 else NOTHING
    if lo == hi == 1:
        return item
    return _Repeat(item, lo, hi)


# Text back end ------------------------------------------------------------------------------


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


class _TextRenderer:
    """IR -> regex text, DESIGN.md's form; checks the length before building any text."""

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
            children = self._children(cur)
            missing = [c for c in children if id(c) not in self.sizes]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            total = sum(self.sizes[id(c)] + 4 for c in children) + 8
            if isinstance(cur, _Lit):
                total = 2 * len(cur.text) + 4
            elif isinstance(cur, _Regex):
                total = len(cur.text) + 4
            elif isinstance(cur, _TreeLeaf):
                total = 64
            elif isinstance(cur, _Object):
                n = len(cur.members)
                total = sum(self.sizes[id(m)] + 8 for m, _ in cur.members) * max(n, 1) + 8
            self.sizes[id(cur)] = min(total, 1 << 62)
        return self.sizes[id(node)]

    @staticmethod
    def _children(node) -> list:
        if isinstance(node, (_Seq, _Choice)):
            return list(node.items)
        if isinstance(node, _Repeat):
            return [node.item]
        if isinstance(node, _Object):
            return [m for m, _ in node.members]
        return []

    def render(self, node) -> str:
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
        if isinstance(node, _Lit):
            text = _escape(node.text)
            out = (text, 3 if len(node.text) == 1 else 2)
        elif isinstance(node, _Regex):
            out = (node.text, node.precedence)
        elif isinstance(node, _TreeLeaf):
            out = (_tree_text(node.node), 1)
        elif isinstance(node, _Seq):
            parts = [self._render(item) for item in node.items]
            out = ("".join(_wrap(t, p, 2) for t, p in parts), 2)
        elif isinstance(node, _Choice):
            if not node.items:
                out = ("[^\\x00-\\U0010ffff]", 3)  # never reached for a non-empty language
            else:
                parts = [self._render(item) for item in node.items]
                out = ("|".join(_wrap(t, p, 2) for t, p in parts), 1)
        elif isinstance(node, _Repeat):
            text, precedence = self._render(node.item)
            out = (_wrap(text, precedence, 3) + _quantifier(node.min, node.max), 2)
        elif isinstance(node, _Object):
            out = (self._object(node), 2)
        else:
            raise TypeError(f"not a schema expression: {node!r}")
        self.memo[key] = out
        return out

    def _object(self, node: _Object) -> str:
        """DESIGN.md's nested form, built from the last member back:
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


_REGEX_META = set(".^$*+?{}[]\\|()")


def _escape(text: str) -> str:
    """Regex text matching exactly `text` (as `corral.automata.escape`)."""
    out = []
    for ch in text:
        if ch in _REGEX_META:
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


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
        code = ranges[0][0]
        return _escape(chr(code))
    body = "".join(
        _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}" for lo, hi in ranges
    )
    return f"[{body}]"


def _mask_ranges(mask: int) -> list[tuple[int, int]]:
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


def _flat_byte_sets(node: Concat) -> list[ByteSet] | None:
    """The byte sets of a Concat of byte sets (nested Concats flattened), or None."""
    out = []
    for item in node.items:
        if isinstance(item, ByteSet):
            out.append(item)
        elif isinstance(item, Concat):
            inner = _flat_byte_sets(item)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out


def _char_ranges(node: Node) -> list[tuple[int, int]] | None:
    """The code point ranges of a tree that matches exactly one character (an ASCII byte set,
    a UTF-8 byte-range sequence, or an Alt of those), or None."""
    if isinstance(node, ByteSet):
        return _mask_ranges(node.mask) if node.mask < (1 << 128) and node.mask else None
    flat = _flat_byte_sets(node) if isinstance(node, Concat) else None
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
    if isinstance(node, Alt) and node.items:
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


def _tree_text(node: Node) -> str:
    """Regex text of a tree built from character sets (as `parse` makes them).

    Raises:
        SchemaTextError: a byte set that is not a whole character (a product automaton).
    """
    return _tree_text_prec(node)[0]


def _tree_text_prec(node: Node) -> tuple[str, int]:
    ranges = _char_ranges(node)
    if ranges is not None:
        return _ranges_text(ranges), 3
    if isinstance(node, ByteSet):
        if node.mask == 0:
            return "[^\\x00-\\U0010ffff]", 3
        raise SchemaTextError("this schema has no regex text; use schema_to_tree or schema_to_dfa")
    if isinstance(node, Concat):
        parts = [_tree_text_prec(item) for item in node.items]
        return "".join(_wrap(t, p, 2) for t, p in parts), 2
    if isinstance(node, Alt):
        if not node.items:
            return "[^\\x00-\\U0010ffff]", 3
        parts = [_tree_text_prec(item) for item in node.items]
        return "|".join(_wrap(t, p, 2) for t, p in parts), 1
    if isinstance(node, Repeat):
        text, precedence = _tree_text_prec(node.item)
        return _wrap(text, precedence, 3) + _quantifier(node.min, node.max), 2
    raise TypeError(f"not a regex tree node: {node!r}")


# Tree back end ------------------------------------------------------------------------------

_PARSED: dict[tuple[str, Limits | None], Node] = {}


def _parse_cached(text: str, limits: Limits | None) -> Node:
    from corral.automata.parse import parse

    key = (text, limits)
    node = _PARSED.get(key)
    if node is None:
        if len(_PARSED) > 4096:
            _PARSED.clear()
        node = _PARSED[key] = parse(text, limits)
    return node


class _TreeBuilder:
    """IR -> regex tree. Shared IR nodes give shared tree nodes; an object's members become
    `{` Alt_j(m_j after(j+1)) `}` where after(i) = Concat(o_i, ..., o_{n-1}) and o_i is `,m_i`
    or `(,m_i)?`: every Concat lists the same o nodes, so the NFA construction (memoized on node
    and continuation) builds each o_i once and the NFA stays linear in the number of members."""

    def __init__(self, limits: Limits | None):
        self.limits = limits
        self.memo: dict[int, Node] = {}

    def build(self, node) -> Node:
        key = id(node)
        out = self.memo.get(key)
        if out is not None:
            return out
        if isinstance(node, _Lit):
            out = literal_bytes(node.text.encode("utf-8"))
        elif isinstance(node, _Regex):
            out = _parse_cached(node.text, self.limits)
        elif isinstance(node, _TreeLeaf):
            out = node.node
        elif isinstance(node, _Seq):
            out = Concat(tuple(self.build(item) for item in node.items))
        elif isinstance(node, _Choice):
            out = Alt(tuple(self.build(item) for item in node.items))
        elif isinstance(node, _Repeat):
            out = Repeat(self.build(node.item), node.min, node.max)
        elif isinstance(node, _Object):
            out = self._object(node)
        else:
            raise TypeError(f"not a schema expression: {node!r}")
        self.memo[key] = out
        return out

    def _object(self, node: _Object) -> Node:
        comma = ByteSet(1 << ord(","))
        members = [(self.build(m), required) for m, required in node.members]
        tails = []
        for member, required in members:
            piece = Concat((comma, member))
            tails.append(piece if required else Repeat(piece, 0, 1))
        firsts = []
        for j, (member, required) in enumerate(members):
            firsts.append(Concat((member, *tails[j + 1 :])))
            if required:
                break
        else:
            firsts.append(EMPTY)
        body = firsts[0] if len(firsts) == 1 else Alt(tuple(firsts))
        return Concat((ByteSet(1 << ord("{")), body, ByteSet(1 << ord("}"))))


# ---------------------------------------------------------------------------------------------
# Leaf languages

_STRING = _Regex(formats.STRING, 2)
_INTEGER = _Regex(formats.INTEGER, 2)
_NUMBER = _Regex(formats.NUMBER, 2)
_BOOLEAN = _Regex(formats.BOOLEAN, 1)
_NULL = _Lit("null")
_QUOTE = _Lit('"')
# One counted character of a JSON string: raw or a short escape. `\u` escapes are left out of
# length-bounded strings (a sub-language): they cost 5 DFA states per counted position, and a
# surrogate pair would count as two characters here but as one in Python.
_COUNTED_CHAR = _Regex(r'[^"\\\x00-\x1f]|\\["\\/bfnrt]', 1)
_FORBIDDEN_IN_STRING = sum(1 << b for b in range(0x20)) | (1 << 0x22) | (1 << 0x5C)
_NON_ASCII = ((1 << 256) - 1) ^ ((1 << 128) - 1)
_RAW_CHARS = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)]
_RAW_ASCII = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F)]

_TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")


def _any_value(depth: int, cache: dict):
    """Any JSON value with containers nested at most `depth` levels (compact)."""
    if depth in cache:
        return cache[depth]
    scalars = [_STRING, _NUMBER, _Lit("true"), _Lit("false"), _NULL]
    if depth == 0:
        out = _choice(scalars)
    else:
        inner = _any_value(depth - 1, cache)
        member = _seq(_STRING, _Lit(":"), inner)
        obj = _seq(
            _Lit("{"),
            _repeat(_seq(member, _repeat(_seq(_Lit(","), member), 0, None)), 0, 1),
            _Lit("}"),
        )
        arr = _seq(
            _Lit("["),
            _repeat(_seq(inner, _repeat(_seq(_Lit(","), inner), 0, None)), 0, 1),
            _Lit("]"),
        )
        out = _choice([*scalars, obj, arr])
    cache[depth] = out
    return out


def _json_object(depth: int):
    cache: dict = {}
    inner = _any_value(depth - 1, cache)
    member = _seq(_STRING, _Lit(":"), inner)
    return _seq(
        _Lit("{"),
        _repeat(_seq(member, _repeat(_seq(_Lit(","), member), 0, None)), 0, 1),
        _Lit("}"),
    )


def json_object_regex(depth: int) -> str:
    """Regex text of any compact JSON object whose containers (objects and arrays, the outer
    object included) nest at most `depth` levels; members in any order (DESIGN.md section 3;
    depth 3 for `response_format: {"type": "json_object"}`). `depth` >= 1, else ValueError."""
    if depth < 1:
        raise ValueError("json_object_regex needs depth >= 1")
    return _TextRenderer(DEFAULT_SCHEMA_LIMITS.max_regex_length).render(_json_object(depth))


def json_object_tree(depth: int) -> Node:
    """The regex tree of `json_object_regex(depth)` (shared subtrees, built without text)."""
    if depth < 1:
        raise ValueError("json_object_tree needs depth >= 1")
    return _TreeBuilder(None).build(_json_object(depth))


# ---------------------------------------------------------------------------------------------
# Keyword tables

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$schema", "$id", "id", "$comment",
        "deprecated", "readOnly", "writeOnly", "definitions", "$defs", "$anchor",
        "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "contentEncoding",
        "contentMediaType", "contentSchema",
    }
)  # fmt: skip
"""Keys accepted and ignored (DESIGN.md's annotations, plus containers and 2020-12 annotations)."""

ALL_KEYWORDS = frozenset(
    {
        # draft 3
        "type", "properties", "patternProperties", "additionalProperties", "items",
        "additionalItems", "required", "dependencies", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minItems", "maxItems", "uniqueItems", "pattern", "minLength",
        "maxLength", "enum", "default", "title", "description", "format", "divisibleBy",
        "disallow", "extends", "id", "$ref", "$schema",
        # draft 4
        "multipleOf", "maxProperties", "minProperties", "allOf", "anyOf", "oneOf", "not",
        "definitions",
        # draft 6 and 7
        "const", "contains", "propertyNames", "examples", "$id", "if", "then", "else",
        "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$comment",
        # 2019-09 and 2020-12
        "$anchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary", "$defs",
        "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
        "maxContains", "minContains", "deprecated", "contentSchema", "prefixItems",
        "$dynamicRef", "$dynamicAnchor",
    }
)  # fmt: skip
"""Every keyword of the JSON Schema validation and core vocabularies, drafts 3 to 2020-12."""

SUPPORTED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "anyOf",
        "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
        "maxProperties", "patternProperties", "dependentRequired", "dependencies",
    }
)  # fmt: skip
"""Keywords the compiler handles (some only in the cases the module docstring lists)."""

_TYPE_OF_KEYWORD = {
    "minLength": "string", "maxLength": "string", "pattern": "string",
    "minimum": "number", "maximum": "number", "exclusiveMinimum": "number",
    "exclusiveMaximum": "number", "multipleOf": "number",
    "items": "array", "prefixItems": "array", "additionalItems": "array", "minItems": "array",
    "maxItems": "array", "uniqueItems": "array",
    "properties": "object", "required": "object", "additionalProperties": "object",
    "patternProperties": "object", "minProperties": "object", "maxProperties": "object",
    "dependentRequired": "object", "dependencies": "object",
}  # fmt: skip

_LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")


def _is_constraint(key: str) -> bool:
    return key in ALL_KEYWORDS and key not in ANNOTATIONS


def _pointer_token(key) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _child(pointer: str, *keys) -> str:
    for key in keys:
        pointer = f"{pointer}/{_pointer_token(key)}"
    return pointer


def _unsupported(pointer: str, keyword: str, detail: str = "") -> SchemaError:
    reason = f"keyword {keyword!r} is not supported"
    return SchemaError(pointer, keyword, reason + (f": {detail}" if detail else ""))


# ---------------------------------------------------------------------------------------------
# Patterns


def _split_alternatives(pattern: str) -> list[str] | None:
    """The top-level `|` branches of a pattern (escapes, classes and groups respected); None
    when brackets do not balance (the parser will name the position)."""
    branches, start, depth, i, in_class = [], 0, 0, 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if ch == "]":
                in_class = False
        elif ch == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            branches.append(pattern[start:i])
            start = i + 1
        i += 1
    branches.append(pattern[start:])
    return branches


def _needs_ascii(pattern: str) -> bool:
    """True when the pattern uses a class whose Unicode meaning (Python's `re` on str, as the
    `jsonschema` validator runs it) is narrower than our ASCII one: `\\D \\W \\S`, or `\\d \\w \\s`
    inside a negated bracket."""
    i, negated = 0, None
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            esc = pattern[i + 1]
            if esc in "DWS" or (negated and esc in "dws"):
                return True
            i += 2
            continue
        if negated is None and ch == "[":
            negated = pattern[i + 1 : i + 2] == "^"
            i += 2 if negated else 1
            if pattern[i : i + 1] == "]":
                i += 1
            continue
        if negated is not None and ch == "]":
            negated = None
        i += 1
    return False


NEVER = Alt(())  # the empty language, as one shared node


def _filter_tree(node: Node, forbidden: int, memo: dict) -> Node:
    """The tree with the `forbidden` bytes removed from every byte set (a sub-language)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, ByteSet):
        out = ByteSet(node.mask & ~forbidden) if node.mask & ~forbidden else NEVER
    elif isinstance(node, Concat):
        items = tuple(_filter_tree(i, forbidden, memo) for i in node.items)
        out = NEVER if any(i is NEVER for i in items) else Concat(items)
    elif isinstance(node, Alt):
        items = tuple(i for i in (_filter_tree(i, forbidden, memo) for i in node.items))
        items = tuple(i for i in items if i is not NEVER)
        out = Alt(items) if items else NEVER
    elif isinstance(node, Repeat):
        item = _filter_tree(node.item, forbidden, memo)
        if item is NEVER:
            out = EMPTY if node.min == 0 else NEVER
        else:
            out = Repeat(item, node.min, node.max)
    else:
        raise TypeError(f"not a regex tree node: {node!r}")
    memo[key] = out
    return out


def _pattern_tree(pattern: str, pointer: str, limits: Limits | None) -> Node:
    """The content (between the quotes) of JSON strings whose value `re.search`es `pattern`,
    written without escapes. Raises SchemaError naming 'pattern' when the regex is refused."""
    from corral.automata.parse import parse

    ascii_only = _needs_ascii(pattern)
    any_char = ranges_to_tree(_RAW_ASCII if ascii_only else _RAW_CHARS)
    any_run = Repeat(any_char, 0, None)
    branches = []
    for branch in _split_alternatives(pattern):
        anchored_start = branch.startswith("^")
        body = branch[1:] if anchored_start else branch
        trailing = len(body) - len(body.rstrip("$"))
        anchored_end = False
        if trailing:
            backslashes = len(body[: len(body) - 1]) - len(body[: len(body) - 1].rstrip("\\"))
            anchored_end = backslashes % 2 == 0
            if anchored_end:
                body = body[:-1]
        try:
            node = parse(body, limits)
        except PatternError as error:
            raise SchemaError(
                pointer,
                "pattern",
                f"keyword 'pattern' is not supported: {pattern!r} is outside the regex subset "
                f"({error.reason} at {error.position})",
            ) from None
        except LimitError as error:
            raise SchemaError(pointer, "pattern", f"pattern {pattern!r}: {error}") from None
        parts = ([] if anchored_start else [any_run]) + [node] + ([] if anchored_end else [any_run])
        branches.append(Concat(tuple(parts)))
    tree = branches[0] if len(branches) == 1 else Alt(tuple(branches))
    forbidden = _FORBIDDEN_IN_STRING | (_NON_ASCII if ascii_only else 0)
    return _filter_tree(tree, forbidden, {})  # NEVER when nothing is left


def _char_length_bounds(dfa: Dfa) -> tuple[int, float]:
    """(fewest, most) characters of the strings of a DFA over UTF-8 (most may be inf)."""
    import numpy as np

    starts = np.array([b < 0x80 or b >= 0xC0 for b in range(256)])
    n = dfa.n_states
    # fewest: 0-1 BFS over characters
    best = [math.inf] * n
    best[0] = 0
    from collections import deque

    queue = deque([0])
    while queue:
        s = queue.popleft()
        for b in np.flatnonzero(dfa.trans[s] >= 0):
            t = int(dfa.trans[s, b])
            cost = best[s] + int(starts[b])
            if cost < best[t]:
                best[t] = cost
                if starts[b]:
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
            m = max(m, most[int(dfa.trans[s, b])] + int(starts[b]))
        most[s] = m
    return fewest, most[0]


def _length_product(dfa: Dfa, min_len: int, max_len: int, limit: int) -> Node:
    """The tree of the strings of `dfa` with between min_len and max_len characters: a DAG over
    (state, characters so far), each node an Alt of `byte set -> next node` edges."""
    n = dfa.n_states
    if n * (max_len + 1) > limit:
        raise LimitError(
            "max_product_nodes", limit, "pattern with a length bound needs too many nodes"
        )
    starts = [b < 0x80 or b >= 0xC0 for b in range(256)]
    rows = dfa.trans.tolist()
    memo: dict[tuple[int, int], Node] = {}

    def node(state: int, count: int) -> Node:
        key = (state, count)
        if key in memo:
            return memo[key]
        edges: dict[tuple[int, int], int] = {}
        for b, t in enumerate(rows[state]):
            if t < 0:
                continue
            c = count + starts[b]
            if c > max_len:
                continue
            edges[(t, c)] = edges.get((t, c), 0) | (1 << b)
        items = [Concat((ByteSet(mask), node(t, c))) for (t, c), mask in edges.items()]
        if dfa.accept[state] and count >= min_len:
            items.append(EMPTY)
        out = Alt(tuple(items))
        memo[key] = out
        return out

    return node(0, 0)


# ---------------------------------------------------------------------------------------------
# The compiler


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Compiler:
    """Schema (parsed JSON) -> IR, one subschema at a time; see the module docstring."""

    def __init__(self, root, limits: Limits | None, schema_limits: SchemaLimits):
        self.root = root
        self.limits = limits
        self.slimits = schema_limits
        schema_uri = root.get("$schema", "") if isinstance(root, dict) else ""
        self.legacy = isinstance(schema_uri, str) and any(d in schema_uri for d in _LEGACY_DRAFTS)
        root_id = root.get("$id", root.get("id")) if isinstance(root, dict) else None
        self.root_id = root_id.split("#")[0] if isinstance(root_id, str) else None
        self.stack: list[str] = []
        self.cache: dict[str, object] = {}
        self.min_hit = math.inf
        self.any_cache: dict = {}
        self.nested_id_depth = 0

    # -- entry ---------------------------------------------------------------------------------

    def compile(self, schema, pointer: str, depth: int):
        if depth > self.slimits.max_depth:
            raise LimitError(
                "max_depth", self.slimits.max_depth, f"{pointer or '/'}: schema nested too deep"
            )
        if schema is True:
            return self.any_value(pointer)
        if schema is False:
            return NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(pointer, None, "a schema must be an object or a boolean")
        self.check_keywords(schema, pointer)
        nested_id = depth > 0 and self.has_own_id(schema)
        self.nested_id_depth += nested_id
        try:
            return self.compile_object_schema(schema, pointer, depth)
        finally:
            self.nested_id_depth -= nested_id

    @staticmethod
    def has_own_id(schema: dict) -> bool:
        for key in ("$id", "id"):
            value = schema.get(key)
            if isinstance(value, str) and value and not value.startswith("#"):
                return True
        return False

    def check_keywords(self, schema: dict, pointer: str) -> None:
        for key in schema:
            if key in ANNOTATIONS or key not in ALL_KEYWORDS or key in SUPPORTED:
                continue
            raise _unsupported(pointer, key)

    def compile_object_schema(self, schema: dict, pointer: str, depth: int):
        if "$ref" in schema:
            return self.compile_ref(schema, pointer, depth)
        if "allOf" in schema:
            merged = self.merge_all([schema], pointer)
            return self.compile(merged, pointer, depth + 1)
        if "anyOf" in schema:
            return self.compile_any_of(schema, pointer, depth)
        if "oneOf" in schema:
            return self.compile_one_of(schema, pointer, depth)
        if "enum" in schema or "const" in schema:
            return self.compile_enum(schema, pointer, depth)
        return self.compile_types(schema, pointer, depth)

    def any_value(self, pointer: str):
        depth = self.slimits.any_value_depth
        if depth <= 0:
            raise SchemaError(pointer, None, "a schema that admits any JSON value is not supported")
        return _any_value(depth, self.any_cache)

    # -- $ref ----------------------------------------------------------------------------------

    def resolve(self, ref, pointer: str) -> tuple[str, object]:
        """(target pointer, target schema) of a local `$ref`."""
        if not isinstance(ref, str):
            raise SchemaError(pointer, "$ref", "$ref must be a string")
        if self.nested_id_depth:
            raise _unsupported(pointer, "$ref", "a $ref under a nested $id")
        base, _, fragment = ref.partition("#")
        if base and base != self.root_id:
            raise _unsupported(pointer, "$ref", f"{ref!r} refers to another document")
        fragment = unquote(fragment)
        if fragment and not fragment.startswith("/"):
            return self.resolve_anchor(fragment, ref, pointer)
        target = self.root
        for token in fragment.split("/")[1:] if fragment else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and token in target:
                target = target[token]
            elif isinstance(target, list) and token.isdigit() and int(token) < len(target):
                target = target[int(token)]
            else:
                raise SchemaError(pointer, "$ref", f"$ref {ref!r} does not resolve")
        return fragment, target

    def resolve_anchor(self, name: str, ref: str, pointer: str) -> tuple[str, object]:
        stack = [("", self.root)]
        while stack:
            where, node = stack.pop()
            if isinstance(node, dict):
                if where and self.has_own_id(node):
                    continue  # another resource: its anchors are not this document's
                if (
                    node.get("$anchor") == name
                    or node.get("$id") == "#" + name
                    or (node.get("id") == "#" + name)
                ):
                    return where, node
                for key, value in node.items():
                    if key not in ("enum", "const", "default", "examples"):
                        stack.append((_child(where, key), value))
            elif isinstance(node, list):
                stack.extend((_child(where, i), v) for i, v in enumerate(node))
        raise SchemaError(pointer, "$ref", f"$ref {ref!r} does not resolve")

    def ref_siblings(self, schema: dict) -> dict:
        return {k: v for k, v in schema.items() if k != "$ref" and _is_constraint(k)}

    def compile_ref(self, schema: dict, pointer: str, depth: int):
        siblings = self.ref_siblings(schema)
        if siblings and not self.legacy:
            merged = self.merge_all([{"$ref": schema["$ref"]}, siblings], pointer)
            return self.compile(merged, pointer, depth + 1)
        target_pointer, target = self.resolve(schema["$ref"], pointer)
        count = self.stack.count(target_pointer)
        if count:
            self.min_hit = min(self.min_hit, self.stack.index(target_pointer))
        if count >= self.slimits.max_recursion:
            return NOTHING
        if not count and target_pointer in self.cache:
            return self.cache[target_pointer]
        position = len(self.stack)
        self.stack.append(target_pointer)
        outer_hit, self.min_hit = self.min_hit, math.inf
        try:
            out = self.compile(target, target_pointer, depth + 1)
        finally:
            self.stack.pop()
            inner_hit = self.min_hit
            self.min_hit = min(outer_hit, inner_hit)
        if not count and inner_hit >= position:
            self.cache[target_pointer] = out
        return out

    def deref(self, schema, pointer: str, seen: tuple = ()):
        """The schema with top-level `$ref`s replaced by their targets (siblings merged as
        `compile_ref` does). Raises SchemaError on a cycle of bare `$ref`s."""
        return self.deref_seen(schema, pointer, seen)[0]

    def deref_seen(self, schema, pointer: str, seen: tuple) -> tuple:
        """`deref`, also returning the ref targets passed through (with `seen`)."""
        while isinstance(schema, dict) and "$ref" in schema:
            siblings = self.ref_siblings(schema)
            target_pointer, target = self.resolve(schema["$ref"], pointer)
            if target_pointer in seen:
                raise _unsupported(pointer, "$ref", f"a $ref cycle through {target_pointer!r}")
            seen = (*seen, target_pointer)
            if siblings and not self.legacy:
                return self.merge_all([target, siblings], pointer, seen), seen
            schema = target
        return schema, seen

    # -- allOf: merging ------------------------------------------------------------------------

    def merge_all(self, parts: list, pointer: str, seen: tuple = ()) -> dict | bool:
        """One schema equivalent to the conjunction of `parts` (each may hold `allOf` and
        `$ref`), or SchemaError naming 'allOf' when the parts do not merge."""
        flat: list = []
        queue = [(part, seen) for part in parts]
        while queue:
            part, part_seen = queue.pop(0)
            part, part_seen = self.deref_seen(part, pointer, part_seen)
            if part is True:
                continue
            if part is False:
                return False
            if not isinstance(part, dict):
                raise SchemaError(pointer, "allOf", "allOf must list schemas")
            self.check_keywords(part, pointer)
            if "allOf" in part:
                branches = part["allOf"]
                if not isinstance(branches, list) or not branches:
                    raise SchemaError(pointer, "allOf", "allOf must be a non-empty array")
                rest = {k: v for k, v in part.items() if k != "allOf"}
                queue = [(rest, part_seen), *((b, part_seen) for b in branches), *queue]
                continue
            flat.append(part)
        merged: dict = {}
        for part in flat:
            merged = self.merge_two(merged, part, pointer)
        return merged

    def merge_two(self, a: dict, b: dict, pointer: str) -> dict:
        array_keys = ("items", "prefixItems", "additionalItems")
        for x, y in ((a, b), (b, a)):
            tuple_form = "prefixItems" in x or isinstance(x.get("items"), list)
            if (
                tuple_form
                and any(k in y for k in array_keys)
                and any(x.get(k) != y.get(k) for k in array_keys)
            ):
                raise _unsupported(pointer, "allOf", "tuple items in several parts")
        out = dict(a)
        for key, value in b.items():
            if not _is_constraint(key):
                continue
            if key not in out:
                out[key] = value
                continue
            old = out[key]
            if key == "type":
                t1 = {old} if isinstance(old, str) else set(old)
                t2 = {value} if isinstance(value, str) else set(value)
                both = (t1 & t2) | ({"integer"} if ("integer" in t1 and "number" in t2) else set())
                both |= {"integer"} if ("number" in t1 and "integer" in t2) else set()
                out[key] = [t for t in _TYPES if t in both]
            elif key == "required":
                out[key] = list(old) + [n for n in value if n not in old]
            elif key in ("enum", "const"):
                continue  # intersected below
            elif key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
                if _is_number(old) and _is_number(value):
                    out[key] = max(old, value)
                elif old != value:
                    raise _unsupported(pointer, "allOf", f"parts disagree on {key!r}")
            elif key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
                if _is_number(old) and _is_number(value):
                    out[key] = min(old, value)
                elif old != value:
                    raise _unsupported(pointer, "allOf", f"parts disagree on {key!r}")
            elif (
                key == "items" and isinstance(old, (dict, bool)) and isinstance(value, (dict, bool))
            ):
                out[key] = old if old == value else {"allOf": [old, value]}
            elif key in ("properties", "additionalProperties"):
                continue  # merged below
            elif key == "anyOf" and old != value:
                if not isinstance(old, list) or not isinstance(value, list):
                    raise SchemaError(pointer, "anyOf", "anyOf must be a non-empty array")
                if len(old) * len(value) > 64:
                    raise _unsupported(pointer, "allOf", "too many anyOf combinations")
                out[key] = [{"allOf": [x, y]} for x in old for y in value]
            elif old != value:
                raise _unsupported(pointer, "allOf", f"parts disagree on {key!r}")
        # enum / const
        values = None
        for part in (a, b):
            for key in ("enum", "const"):
                if key in part:
                    vals = part[key] if key == "enum" else [part[key]]
                    if not isinstance(vals, list):
                        raise SchemaError(pointer, "enum", "enum must be an array")
                    if values is None:
                        values = list(vals)
                    else:
                        keys = {_json_key(v) for v in vals}
                        values = [v for v in values if _json_key(v) in keys]
        if values is not None:
            out.pop("const", None)
            out["enum"] = values
        # properties
        if "properties" in a or "properties" in b:
            out["properties"], out["additionalProperties"] = self.merge_properties(a, b, pointer)
        if "allOf" in out:
            nested = out.pop("allOf")
            return self.merge_all([out, *nested], pointer)
        return out

    def merge_properties(self, a: dict, b: dict, pointer: str) -> tuple[dict, object]:
        pa, pb = a.get("properties", {}), b.get("properties", {})
        if not isinstance(pa, dict) or not isinstance(pb, dict):
            raise SchemaError(pointer, "properties", "properties must be an object")
        aa, ab = a.get("additionalProperties", True), b.get("additionalProperties", True)
        out = {}
        for name in list(pa) + [n for n in pb if n not in pa]:
            schemas = []
            for props, additional in ((pa, aa), (pb, ab)):
                if name in props:
                    schemas.append(props[name])
                elif additional is False:
                    schemas = None
                    break
                elif isinstance(additional, dict):
                    schemas.append(additional)
            if schemas is None:
                continue  # one part forbids the member: never write it
            out[name] = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
        additional = False if (aa is False or ab is False) else aa if ab is True else ab
        return out, additional

    # -- anyOf / oneOf -------------------------------------------------------------------------

    def branches(self, schema: dict, keyword: str, pointer: str) -> list:
        branches = schema[keyword]
        if not isinstance(branches, list) or not branches:
            raise SchemaError(pointer, keyword, f"{keyword} must be a non-empty array")
        return branches

    def compile_any_of(self, schema: dict, pointer: str, depth: int):
        branches = self.branches(schema, "anyOf", pointer)
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        out = []
        for i, branch in enumerate(branches):
            where = _child(pointer, "anyOf", i)
            if any(_is_constraint(k) for k in rest):
                out.append(self.compile(self.merge_all([rest, branch], where), where, depth + 1))
            else:
                out.append(self.compile(branch, where, depth + 1))
        return _choice(out)

    def compile_one_of(self, schema: dict, pointer: str, depth: int):
        branches = self.branches(schema, "oneOf", pointer)
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        merged = []
        for i, branch in enumerate(branches):
            where = _child(pointer, "oneOf", i)
            m = self.merge_all([rest, branch], where)
            merged.append(m)
        if len(merged) == 1:
            return self.compile(merged[0], _child(pointer, "oneOf", 0), depth + 1)
        # leave out of each branch the members other branches require and it does not
        restricted = []
        for i, m in enumerate(merged):
            if isinstance(m, dict) and isinstance(m.get("properties"), dict):
                required_i = set(m.get("required", []))
                drop = set()
                for j, other in enumerate(merged):
                    if j != i and isinstance(other, dict):
                        drop |= set(other.get("required", [])) - required_i
                if drop & set(m["properties"]):
                    m = dict(m)
                    m["properties"] = {k: v for k, v in m["properties"].items() if k not in drop}
            restricted.append(m)
        for i, mi in enumerate(restricted):
            for j, mj in enumerate(merged):
                if i != j and not self.excludes(mi, mj, pointer):
                    raise _unsupported(
                        pointer,
                        "oneOf",
                        f"branches {i} and {j} may both accept a value "
                        "(oneOf is compiled only when its branches are disjoint)",
                    )
        return _choice(
            self.compile(m, _child(pointer, "oneOf", i), depth + 1)
            for i, m in enumerate(restricted)
        )

    def possible_types(self, schema, pointer: str, depth: int = 0) -> set[str]:
        """A superset of the JSON types of the values valid against `schema` ("integer"
        folded into "number")."""
        every = {"string", "number", "boolean", "null", "array", "object"}
        if depth > 20:
            return every
        try:
            schema = self.deref(schema, pointer)
        except SchemaError:
            return every
        if schema is False:
            return set()
        if not isinstance(schema, dict):
            return every
        out = set(every)
        if "type" in schema:
            t = schema["type"]
            names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else every
            out &= {"number" if n == "integer" else n for n in names}
        for key in ("enum", "const"):
            if key in schema:
                vals = schema[key] if key == "enum" else [schema[key]]
                if isinstance(vals, list):
                    out &= {"number" if _json_type(v) == "integer" else _json_type(v) for v in vals}
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                union = set()
                for branch in schema[key]:
                    union |= self.possible_types(branch, pointer, depth + 1)
                out &= union
        if isinstance(schema.get("allOf"), list):
            for branch in schema["allOf"]:
                out &= self.possible_types(branch, pointer, depth + 1)
        return out

    def excludes(self, mi, mj, pointer: str) -> bool:
        """True when no value of branch i's language (compiled from `mi`) is valid against
        branch j (`mj`)."""
        ti, tj = self.possible_types(mi, pointer), self.possible_types(mj, pointer)
        if not ti & tj:
            return True
        if not isinstance(mi, dict) or not isinstance(mj, dict):
            return False
        vi = self.enum_keys(mi)
        vj = self.enum_keys(mj)
        if vi is not None and vj is not None and not vi & vj:
            return True
        if ti & tj != {"object"} or any(k in mi for k in ("anyOf", "oneOf", "allOf", "$ref")):
            return False
        # i writes objects only (for the shared type): members come from its properties
        props_i = mi.get("properties", {})
        required_j = mj.get("required", [])
        if isinstance(required_j, list) and any(n not in props_i for n in required_j):
            return True
        props_j = mj.get("properties", {})
        for name in mi.get("required", []):
            if name in props_i and isinstance(props_j, dict) and name in props_j:
                a = self.enum_keys(self.deref(props_i[name], pointer))
                b = self.enum_keys(self.deref(props_j[name], pointer))
                if a is not None and b is not None and not a & b:
                    return True
        return False

    @staticmethod
    def enum_keys(schema) -> set | None:
        if not isinstance(schema, dict):
            return None
        out = None
        for key in ("enum", "const"):
            if key in schema:
                vals = schema[key] if key == "enum" else [schema[key]]
                if not isinstance(vals, list):
                    return None
                keys = {_json_key(v) for v in vals}
                out = keys if out is None else out & keys
        return out

    # -- enum / const --------------------------------------------------------------------------

    def compile_enum(self, schema: dict, pointer: str, depth: int):
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list):
                raise SchemaError(pointer, "enum", "enum must be an array")
            where = "enum"
        else:
            values, where = [schema["const"]], "const"
        if "const" in schema and "enum" in schema:
            key = _json_key(schema["const"])
            values = [v for v in values if _json_key(v) == key]
        if len(values) > self.slimits.max_enum_values:
            raise LimitError(
                "max_enum_values",
                self.slimits.max_enum_values,
                f"{pointer or '/'}: enum with {len(values)} values",
            )
        texts = []
        for i, value in enumerate(values):
            try:
                texts.append((value, dumps(value)))
            except NonFiniteNumberError:
                at = _child(pointer, "enum", i) if where == "enum" else _child(pointer, "const")
                raise SchemaError(at, where, "NaN and infinities are not JSON") from None
            except TypeError:
                raise SchemaError(pointer, where, "not a JSON value") from None
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        if "type" in rest:
            allowed = rest["type"]
            allowed = {allowed} if isinstance(allowed, str) else set(allowed)
            texts = [(v, t) for v, t in texts if self.has_type(v, allowed)]
        if any(_is_constraint(k) and k != "type" for k in rest):
            from corral.automata.compile import tree_to_dfa

            node = self.compile(rest, pointer, depth + 1)
            if node is NOTHING:
                return NOTHING
            try:
                dfa = tree_to_dfa(_TreeBuilder(self.limits).build(node), self.limits)
            except EmptyLanguageError:
                return NOTHING
            texts = [(v, t) for v, t in texts if dfa.matches(t.encode("utf-8"))]
        seen, out = set(), []
        for _, text in texts:
            if text not in seen:
                seen.add(text)
                out.append(_Lit(text))
        return _choice(out)

    @staticmethod
    def has_type(value, allowed: set) -> bool:
        kind = _json_type(value)
        return kind in allowed or (kind == "integer" and "number" in allowed)

    # -- types ---------------------------------------------------------------------------------

    def types_of(self, schema: dict, pointer: str) -> list[str]:
        if "type" in schema:
            t = schema["type"]
            names = [t] if isinstance(t, str) else t
            if not isinstance(names, list) or not names:
                raise SchemaError(pointer, "type", "type must be a name or a non-empty list")
            for name in names:
                if name not in _TYPES:
                    raise SchemaError(pointer, "type", f"unknown type {name!r}")
            return [t for t in _TYPES if t in names]
        implied = {_TYPE_OF_KEYWORD[k] for k in schema if k in _TYPE_OF_KEYWORD}
        fmt = schema.get("format")
        if isinstance(fmt, str):
            implied.add(
                "integer"
                if fmt in formats.INTEGER_FORMATS
                else "number"
                if fmt in formats.NUMBER_FORMATS
                else "string"
            )
        return [t for t in _TYPES if t in implied]

    def compile_types(self, schema: dict, pointer: str, depth: int):
        types = self.types_of(schema, pointer)
        if not types:
            return self.any_value(pointer)
        if "integer" in types and "number" in types:
            types.remove("integer")
        out = []
        for t in types:
            if t == "string":
                out.append(self.compile_string(schema, pointer))
            elif t == "integer":
                out.append(self.compile_integer(schema, pointer))
            elif t == "number":
                out.append(self.compile_number(schema, pointer))
            elif t == "boolean":
                out.append(_BOOLEAN)
            elif t == "null":
                out.append(_NULL)
            elif t == "array":
                out.append(self.compile_array(schema, pointer, depth))
            else:
                out.append(self.compile_object(schema, pointer, depth))
        return _choice(out)

    def count(self, schema: dict, key: str, pointer: str) -> int | None:
        if key not in schema:
            return None
        value = schema[key]
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not _is_int(value) or value < 0:
            raise SchemaError(pointer, key, f"{key} must be a non-negative integer")
        return value

    # strings

    def compile_string(self, schema: dict, pointer: str):
        min_len = self.count(schema, "minLength", pointer) or 0
        max_len = self.count(schema, "maxLength", pointer)
        if max_len is not None and min_len > max_len:
            raise SchemaError(pointer, "maxLength", "minLength is greater than maxLength")
        cap = self.slimits.max_string_length
        if min_len > cap:
            raise LimitError(
                "max_string_length", cap, f"{pointer or '/'}: minLength {min_len} is too large"
            )
        content = None
        fmt = schema.get("format")
        if (
            fmt is not None
            and fmt not in formats.INTEGER_FORMATS
            and (fmt not in formats.NUMBER_FORMATS)
        ):
            if fmt not in formats.FORMATS:
                raise _unsupported(pointer, "format", f"pattern-less format {fmt!r}")
            content = _parse_cached(formats.FORMATS[fmt], self.limits)
            content_ir = _Regex(formats.FORMATS[fmt], 1)
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                raise SchemaError(pointer, "pattern", "pattern must be a string")
            if content is not None:
                raise _unsupported(pointer, "pattern", "pattern together with format")
            content = _pattern_tree(pattern, pointer, self.limits)
            if content is NEVER:
                return NOTHING
            content_ir = _TreeLeaf(content)
        if content is None:
            if min_len == 0 and max_len is None:
                return _STRING
            hi = None if max_len is None else min(max_len, cap)
            return _seq(_QUOTE, _repeat(_COUNTED_CHAR, min_len, hi), _QUOTE)
        if min_len == 0 and max_len is None:
            return _seq(_QUOTE, content_ir, _QUOTE)
        from corral.automata.compile import tree_to_dfa

        try:
            dfa = tree_to_dfa(content, self.limits)
        except EmptyLanguageError:
            return NOTHING
        fewest, most = _char_length_bounds(dfa)
        if fewest >= min_len and (max_len is None or most <= max_len):
            return _seq(_QUOTE, content_ir, _QUOTE)
        if max_len is None:
            raise _unsupported(pointer, "minLength", "minLength together with pattern or format")
        product = _length_product(dfa, min_len, min(max_len, cap), self.slimits.max_product_nodes)
        return _seq(_QUOTE, _TreeLeaf(product), _QUOTE)

    # numbers

    def bounds(self, schema: dict, pointer: str) -> tuple:
        """((lo, lo_open) or None, (hi, hi_open) or None) from the four bound keywords."""
        lows, highs = [], []
        for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool) and key.startswith("exclusive"):
                continue  # draft 4: a flag on minimum / maximum
            if not _is_number(value) or (isinstance(value, float) and not math.isfinite(value)):
                raise SchemaError(pointer, key, f"{key} must be a number")
            if key == "minimum":
                lows.append((value, schema.get("exclusiveMinimum") is True))
            elif key == "maximum":
                highs.append((value, schema.get("exclusiveMaximum") is True))
            elif key == "exclusiveMinimum":
                lows.append((value, True))
            else:
                highs.append((value, True))
        low = max(lows, key=lambda b: (b[0], b[1])) if lows else None
        high = min(highs, key=lambda b: (b[0], not b[1])) if highs else None
        return low, high

    def compile_integer(self, schema: dict, pointer: str):
        multiple = schema.get("multipleOf")
        if multiple is not None and multiple != 1:
            raise _unsupported(pointer, "multipleOf", f"multipleOf {multiple!r}")
        low, high = self.bounds(schema, pointer)
        lo = None if low is None else (math.floor(low[0]) + 1 if low[1] else math.ceil(low[0]))
        hi = None if high is None else (math.ceil(high[0]) - 1 if high[1] else math.floor(high[0]))
        fmt = schema.get("format")
        if fmt in formats.INTEGER_FORMATS:
            f_lo, f_hi = formats.INTEGER_FORMATS[fmt]
            lo = f_lo if lo is None else max(lo, f_lo)
            hi = f_hi if hi is None else min(hi, f_hi)
        if lo is None and hi is None:
            return _INTEGER
        text = formats.integer_range(lo, hi)
        if text is None:
            raise SchemaError(pointer, "maximum", "no integer lies between the bounds")
        return _Regex(text, 1)

    def compile_number(self, schema: dict, pointer: str):
        if "multipleOf" in schema:
            raise _unsupported(pointer, "multipleOf", "multipleOf on numbers")
        low, high = self.bounds(schema, pointer)
        if low is None and high is None:
            return _NUMBER
        for bound, key in ((low, "minimum"), (high, "maximum")):
            if bound is None:
                continue
            value = bound[0]
            if not float(value).is_integer() or abs(value) > formats.MAX_EXACT_FLOAT_BOUND:
                raise _unsupported(
                    pointer, key, f"a number bound {value!r} that is not an integer <= 2**53"
                )
        text = formats.number_range(
            None if low is None else int(low[0]),
            bool(low and low[1]),
            None if high is None else int(high[0]),
            bool(high and high[1]),
        )
        if text is None:
            raise SchemaError(pointer, "maximum", "no number lies between the bounds")
        return _Regex(text, 1)

    # arrays

    def compile_array(self, schema: dict, pointer: str, depth: int):
        min_items = self.count(schema, "minItems", pointer) or 0
        max_items = self.count(schema, "maxItems", pointer)
        if max_items is not None and min_items > max_items:
            raise SchemaError(pointer, "maxItems", "minItems is greater than maxItems")
        cap = self.slimits.max_array_length
        if min_items > cap:
            raise LimitError(
                "max_array_length", cap, f"{pointer or '/'}: minItems {min_items} is too large"
            )
        if max_items is not None:
            max_items = min(max_items, cap)
        unique = schema.get("uniqueItems", False)
        if unique is True and (max_items is None or max_items > 1):
            raise _unsupported(pointer, "uniqueItems", "uniqueItems with more than one item")
        if not isinstance(unique, bool):
            raise SchemaError(pointer, "uniqueItems", "uniqueItems must be a boolean")
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if isinstance(items, list):
            prefix, rest_schema, rest_key = (
                items,
                schema.get("additionalItems", True),
                ("additionalItems"),
            )
        else:
            rest_schema, rest_key = (True if items is None else items), "items"
        if items is None and prefix is None and self.slimits.any_value_depth <= 0:
            raise SchemaError(pointer, "items", "an array without items is not supported")
        if prefix is not None and not isinstance(prefix, list):
            raise SchemaError(pointer, "prefixItems", "prefixItems must be an array")
        prefix = prefix or []
        key = "items" if isinstance(schema.get("items"), list) else "prefixItems"
        prefix_ir = [
            self.compile(s, _child(pointer, key, i), depth + 1) for i, s in enumerate(prefix)
        ]
        rest = self.compile(rest_schema, _child(pointer, rest_key), depth + 1)
        comma = _Lit(",")
        alternatives = []
        k = len(prefix_ir)
        top = k if max_items is None else min(k, max_items)
        for n in range(min_items, top + 1):
            if n == 0:
                alternatives.append(EMPTY_IR)
                continue
            parts = [prefix_ir[0]]
            for item in prefix_ir[1:n]:
                parts += [comma, item]
            alternatives.append(_seq(*parts))
        if max_items is None or max_items > k:
            lo = max(min_items - k, 1)
            extra_hi = None if max_items is None else max_items - k
            if k == 0:
                more = None if extra_hi is None else extra_hi - 1
                body = _seq(rest, _repeat(_seq(comma, rest), lo - 1, more))
                if min_items == 0:
                    alternatives.append(_repeat(body, 0, 1))
                else:
                    alternatives.append(body)
            else:
                parts = [prefix_ir[0]]
                for item in prefix_ir[1:]:
                    parts += [comma, item]
                parts.append(_repeat(_seq(comma, rest), lo, extra_hi))
                alternatives.append(_seq(*parts))
        body = _choice(alternatives)
        if body is NOTHING:
            return NOTHING
        return _seq(_Lit("["), body, _Lit("]"))

    # objects

    def compile_object(self, schema: dict, pointer: str, depth: int):
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            raise SchemaError(pointer, "properties", "properties must be an object")
        if len(properties) > self.slimits.max_properties:
            raise LimitError(
                "max_properties", self.slimits.max_properties, f"{pointer or '/'}: too many members"
            )
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
            raise SchemaError(pointer, "required", "required must be an array of names")
        required = set(required)
        for name in schema.get("required", []):
            if name not in properties:
                raise SchemaError(
                    pointer, "required", f"required member {name!r} is not in properties"
                )
        additional = schema.get("additionalProperties", True)
        if not isinstance(additional, (bool, dict)):
            raise SchemaError(pointer, "additionalProperties", "must be a schema")
        required |= self.dependencies(schema, properties, required, pointer)
        extra = self.pattern_properties(schema, properties, pointer)
        members = []
        for name, sub in properties.items():
            where = _child(pointer, "properties", name)
            if name in extra:
                sub = {"allOf": [sub, *extra[name]]}
            value = self.compile(sub, where, depth + 1)
            if value is NOTHING:
                if name in required:
                    return NOTHING
                continue
            members.append((_seq(_Lit(dumps(name) + ":"), value), name in required))
        members = self.count_members(schema, members, pointer)
        if "propertyNames" in schema:
            raise _unsupported(pointer, "propertyNames")
        return _Object(tuple(members))

    def count_members(self, schema: dict, members: list, pointer: str) -> list:
        """Apply minProperties / maxProperties as a sub-language: the first optional members
        become required until there are minProperties, and the last optional members are left
        out until there are at most maxProperties."""
        low = self.count(schema, "minProperties", pointer)
        high = self.count(schema, "maxProperties", pointer)
        n_required = sum(1 for _, r in members if r)
        if low is not None and low > n_required:
            if low > len(members):
                raise _unsupported(pointer, "minProperties", "more than the listed members")
            promote = low - n_required
            out = []
            for member, required in members:
                if not required and promote:
                    required, promote = True, promote - 1
                out.append((member, required))
            members, n_required = out, low
        if high is not None and high < len(members):
            if high < n_required:
                raise _unsupported(pointer, "maxProperties", "fewer than the required members")
            drop = len(members) - high
            out = []
            for member, required in reversed(members):
                if not required and drop:
                    drop -= 1
                    continue
                out.append((member, required))
            members = out[::-1]
        return members

    def dependencies(self, schema: dict, properties: dict, required: set, pointer: str) -> set:
        """Names that become required: the dependencies of listed members (a sub-language)."""
        out = set()
        for key in ("dependentRequired", "dependencies"):
            deps = schema.get(key)
            if deps is None:
                continue
            if not isinstance(deps, dict):
                raise SchemaError(pointer, key, f"{key} must be an object")
            for name, needed in deps.items():
                if name not in properties:
                    continue  # never written: vacuous
                if not isinstance(needed, list):
                    raise _unsupported(pointer, key, "schema dependencies")
                for dep in needed:
                    if dep not in properties:
                        raise _unsupported(pointer, key, f"dependency {dep!r} is not listed")
                    out.add(dep)
        return out

    def pattern_properties(self, schema: dict, properties: dict, pointer: str) -> dict:
        """Listed member name -> the patternProperties schemas its name matches."""
        table = schema.get("patternProperties")
        if table is None:
            return {}
        if not isinstance(table, dict):
            raise SchemaError(pointer, "patternProperties", "patternProperties must be an object")
        out: dict = {}
        for pattern, sub in table.items():
            try:
                regex = re.compile(pattern)
            except re.error:
                raise _unsupported(
                    pointer, "patternProperties", f"pattern {pattern!r} is not a Python regex"
                ) from None
            for name in properties:
                if regex.search(name):
                    out.setdefault(name, []).append(sub)
        return out


# ---------------------------------------------------------------------------------------------
# Public API


def _compile_ir(schema, limits: Limits | None, schema_limits: SchemaLimits | None):
    if isinstance(schema, (str, bytes)):
        raise TypeError("pass the parsed schema (json.loads), not its text")
    compiler = _Compiler(schema, limits, schema_limits or DEFAULT_SCHEMA_LIMITS)
    node = compiler.compile(schema, "", 0)
    if node is NOTHING:
        raise EmptyLanguageError("the schema admits no value that corral can write")
    return node


def schema_to_tree(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> Node:
    """The regex tree (`corral.automata.tree`, a DAG with shared tails) of the compact JSON
    texts valid against `schema` (DESIGN.md section 3; the parsed schema, key order kept).
    Compose it with other trees and pass it to `tree_to_dfa`.

    Raises:
        SchemaError: a keyword outside the subset (`.pointer`, `.keyword`) or a malformed schema.
        EmptyLanguageError: no value can be written.
        LimitError: a `SchemaLimits` or regex `Limits` bound was passed.
    """
    with deep_recursion():
        return _TreeBuilder(limits).build(_compile_ir(schema, limits, schema_limits))


def schema_to_dfa(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> Dfa:
    """The canonical DFA of `schema_to_tree(schema)` (same errors, plus the NFA/DFA size limits
    of `limits`)."""
    from corral.automata.compile import tree_to_dfa

    with deep_recursion():
        return tree_to_dfa(schema_to_tree(schema, limits, schema_limits), limits)


def json_schema_to_regex(
    schema, limits: Limits | None = None, schema_limits: SchemaLimits | None = None
) -> str:
    """The regex text of the schema's language, in DESIGN.md section 3's form (members nested as
    `\\{(?:"x":INT(?:,"y":INT)?|(?:"y":INT|))\\}`), readable by `corral.automata.parse`.

    Raises the errors of `schema_to_tree`, and:
        LimitError (`max_regex_length`): the text would be longer than the limit (it grows
            quadratically with optional members; the tree does not).
        SchemaTextError: a pattern with a length bound (compiled by a product automaton).
    """
    schema_limits = schema_limits or DEFAULT_SCHEMA_LIMITS
    with deep_recursion():
        node = _compile_ir(schema, limits, schema_limits)
        return _TextRenderer(schema_limits.max_regex_length).render(node)

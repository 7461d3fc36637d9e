"""Strings of a JSON Schema (docs/design.md section 3: "string: `"`, then any scalar value >= U+0020
except `"` and `\\`, or one of the escapes ..."; beyond the subset: `minLength`, `maxLength`,
`pattern`, `format`): the lowering of a `string` subschema to the schema form.

- Lengths count characters, as Python counts the decoded text: an escape counts as one, and so
  does a `\\u` surrogate pair. `\\u` escapes are written in strings with a `maxLength` up to
  `MAX_ESCAPED_LENGTH` and left out of longer length-bounded strings (they would double the DFA
  states of each counted position). A lone surrogate escape is never written.
- `pattern` is a search, as JSON Schema says: unanchored ends get any characters. The pattern is
  read by `corral.automata.parse.parse_branches` (one rule for anchors: `^`s at the start and
  `$`s at the end of each top-level branch anchor it; anywhere else they are refused) and made
  sound inside a JSON string by removing `"`, `\\` and U+0000..U+001F from every byte set, so
  the JSON text of the string is its value. A pattern using `\\D`, `\\W`, `\\S` or a negated
  class with `\\d`, `\\w`, `\\s` is restricted to ASCII, where Python's Unicode classes and
  ours agree.
- `format` takes its strict regex from `corral.automata.schema.formats`; a format name no
  JSON Schema draft defines constrains nothing (validators ignore it).
- Length bounds next to a pattern or format are kept when the pattern implies them, or applied
  by a product with a character counter (`corral.automata.schema.lengths`) when `maxLength` is
  given, or by an intersection with the strings of at least `minLength` characters
  (`corral.automata.product`) when it is not.
"""

from __future__ import annotations

from corral.automata.compile import build_dfa
from corral.automata.errors import (
    EmptyLanguageError,
    LimitError,
    PatternError,
    SchemaError,
    excerpt,
)
from corral.automata.limits import SchemaLimits
from corral.automata.parse import parse_branches
from corral.automata.product import intersection
from corral.automata.schema.form import (
    NOTHING,
    Regex,
    Subtree,
    TreeBuilder,
    pin_fragment,
    repeat,
    seq,
)
from corral.automata.schema.formats import string_format
from corral.automata.schema.json_text import QUOTE, UNICODE_ESCAPE
from corral.automata.schema.keywords import count, unsupported, written
from corral.automata.schema.lengths import char_length_bounds, length_product
from corral.automata.tree import EMPTY, Alt, Automaton, ByteSet, Concat, Node, Repeat
from corral.automata.utf8 import ranges_to_tree

COUNTED_CHAR = Regex(r'[^"\\\x00-\x1f]|\\["\\/bfnrt]', 1)
"""One counted character of a length-bounded JSON string: raw or a short escape."""

MAX_ESCAPED_LENGTH = 16
"""Strings with a `maxLength` up to this also take `\\u` escapes, a surrogate pair counting as
one character as Python counts it; longer bounded strings leave them out (each counted position
would cost about twice the DFA states)."""

ESCAPED_CHAR = Regex(COUNTED_CHAR.text + "|" + UNICODE_ESCAPE, 1)
"""One counted character with `\\u` escapes (`corral.automata.schema.json_text.UNICODE_ESCAPE`)."""

PLAIN_STRING_FORM = Regex(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u00[01][0-9a-fA-F])*"', 2)
"""A string without length bounds, pattern or format: every string value, spelt raw (UTF-8)
except for the controls, `"` and `\\`, which take a short escape or `\\u00XX` (the spellings
`json.dumps(..., ensure_ascii=False)` writes, and the other cases of their hex digits and
short escapes). A `\\u` escape of any other character is a second spelling of a value already
written raw; leaving it out keeps every string value and costs 16 DFA states per string
value instead of 23 (about 2 in 5 of the states of a large object schema are inside strings).
Its tree is pinned (`form.pin_fragment`): the NFA builder makes each instance as a copy of one
NFA of it."""

for _form in (PLAIN_STRING_FORM, COUNTED_CHAR, ESCAPED_CHAR):
    pin_fragment(_form.text)

FORBIDDEN_IN_STRING = sum(1 << b for b in range(0x20)) | (1 << 0x22) | (1 << 0x5C)
"""Byte mask of what a string's JSON text cannot hold raw: controls, `"` and `\\`."""

_NON_ASCII = ((1 << 256) - 1) ^ ((1 << 128) - 1)
_RAW_CHARS = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x10FFFF)]
_RAW_ASCII = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7F)]

NEVER = Alt(())
"""The empty language as one shared regex-tree node (what `filter_tree` returns for it)."""


def lower_string(schema: dict, pointer: str, trees: TreeBuilder, schema_limits: SchemaLimits):
    """The form of the JSON strings `schema` allows (see the module docstring); `trees` parses
    format regexes (cached for the compile) and carries the regex `Limits`.

    Raises:
        SchemaError: a malformed length, pattern or format, or a refused combination.
        LimitError: `minLength` above `max_string_length`, or a product past
            `max_product_nodes`.
    """
    min_len = count(schema, "minLength", pointer) or 0
    max_len = count(schema, "maxLength", pointer)
    if max_len is not None and min_len > max_len:
        raise SchemaError(pointer, "maxLength", "minLength is greater than maxLength")
    cap = schema_limits.max_string_length
    if min_len > cap:
        raise LimitError(
            "max_string_length",
            cap,
            f"{pointer or '/'}: minLength {written(schema['minLength'])} is too large",
        )
    content = None
    fmt = schema.get("format")
    if fmt is not None:
        if not isinstance(fmt, str):
            raise SchemaError(pointer, "format", "format must be a string")
        try:
            text = string_format(fmt)
        except KeyError:
            raise unsupported(pointer, "format", f"pattern-less format {fmt!r}") from None
        if text is not None:
            content = trees.parse(text)
            content_form = Regex(text, 1)
    if "pattern" in schema:
        pattern = schema["pattern"]
        if not isinstance(pattern, str):
            raise SchemaError(pointer, "pattern", "pattern must be a string")
        if content is not None:
            raise unsupported(pointer, "pattern", "pattern together with format")
        content = pattern_tree(pattern, pointer, trees)
        if content is NEVER:
            return NOTHING
        content_form = Subtree(content)
    if content is None:
        if min_len == 0 and max_len is None:
            return PLAIN_STRING_FORM
        hi = None if max_len is None else min(max_len, cap)
        char = ESCAPED_CHAR if hi is not None and hi <= MAX_ESCAPED_LENGTH else COUNTED_CHAR
        return seq(QUOTE, repeat(char, min_len, hi), QUOTE)
    if min_len == 0 and max_len is None:
        return seq(QUOTE, content_form, QUOTE)
    try:
        dfa = build_dfa(content, trees.limits)
    except EmptyLanguageError:
        return NOTHING
    fewest, most = char_length_bounds(dfa)
    if fewest >= min_len and (max_len is None or most <= max_len):
        return seq(QUOTE, content_form, QUOTE)
    if max_len is None:  # at least min_len characters: an intersection, the length unbounded
        raw_char = ranges_to_tree(_RAW_CHARS)
        at_least = build_dfa(Repeat(raw_char, min_len, None), trees.limits)
        try:
            return seq(QUOTE, Subtree(Automaton(intersection(dfa, at_least, trees.limits))), QUOTE)
        except EmptyLanguageError:
            return NOTHING
    product = length_product(dfa, min_len, min(max_len, cap), schema_limits.max_product_nodes)
    return seq(QUOTE, Subtree(product), QUOTE)


def pattern_tree(pattern: str, pointer: str, trees: TreeBuilder) -> Node:
    """The content (between the quotes) of the JSON strings whose value `re.search`es
    `pattern`, written without escapes; `NEVER` when no such string can be written.

    Raises:
        SchemaError (keyword `pattern`): the regex is outside the subset or past a limit.
    """
    ascii_only = _needs_ascii(pattern)
    any_char = ranges_to_tree(_RAW_ASCII if ascii_only else _RAW_CHARS)
    any_run = Repeat(any_char, 0, None)
    try:
        parsed = parse_branches(pattern, trees.limits)
    except PatternError as error:
        raise SchemaError(
            pointer,
            "pattern",
            f"keyword 'pattern' is not supported: {excerpt(pattern)} is outside the regex subset "
            f"({error.reason} at {error.position})",
        ) from None
    except LimitError as error:
        raise SchemaError(pointer, "pattern", f"pattern {excerpt(pattern)}: {error}") from None
    branches = []
    for branch in parsed:
        head = [] if branch.anchored_start else [any_run]
        tail = [] if branch.anchored_end else [any_run]
        branches.append(Concat((*head, branch.node, *tail)))
    tree = branches[0] if len(branches) == 1 else Alt(tuple(branches))
    forbidden = FORBIDDEN_IN_STRING | (_NON_ASCII if ascii_only else 0)
    return filter_tree(tree, forbidden, {})


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


def filter_tree(node: Node, forbidden: int, memo: dict) -> Node:
    """The tree with the `forbidden` bytes (a 256-bit mask) removed from every byte set (a
    sub-language); `NEVER` when nothing is left. `memo` maps id(node) to its result."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, ByteSet):
        out = ByteSet(node.mask & ~forbidden) if node.mask & ~forbidden else NEVER
    elif isinstance(node, Concat):
        items = tuple(filter_tree(i, forbidden, memo) for i in node.items)
        out = NEVER if any(i is NEVER for i in items) else Concat(items)
    elif isinstance(node, Alt):
        items = tuple(filter_tree(i, forbidden, memo) for i in node.items)
        items = tuple(i for i in items if i is not NEVER)
        out = Alt(items) if items else NEVER
    elif isinstance(node, Repeat):
        item = filter_tree(node.item, forbidden, memo)
        if item is NEVER:
            out = EMPTY if node.min == 0 else NEVER
        else:
            out = Repeat(item, node.min, node.max)
    else:
        raise TypeError(f"not a regex tree node: {node!r}")
    memo[key] = out
    return out

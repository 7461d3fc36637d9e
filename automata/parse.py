"""Pattern text to a regex tree of byte sets (docs/design.md section 2, "Regex subset").

A recursive-descent parser over the subset: literals, escapes, `\\d \\w \\s \\D \\W \\S`, `.`,
bracket classes, groups `(...)`, `(?:...)`, `(?P<name>...)`, alternation (empty branches allowed)
and greedy quantifiers `* + ? {m} {m,} {m,n} {,n}` (and `{,}`, which Python reads as `*`).

Anchors, one rule for a whole pattern (`parse`, fullmatch) and for a JSON Schema `pattern`
(`parse_branches`, a search; `corral.automata.schema.strings`): any number of `^` at the very
start of a top-level branch and any number of `$` at its very end are accepted (`^^a$$`,
`^a|^b$`). Under fullmatch they change nothing: a top-level branch starts at the start of the
text and ends at its end, and Python's `$` before a final newline cannot end a full match. In a
search they anchor their branch. An anchor anywhere else (inside a group, between atoms, under a
quantifier) is refused with its position: there its meaning depends on what can come before or
after it, which the subset does not track.

The oracle is `re.fullmatch(pattern, s, re.ASCII)`: where Python's `re` would read a
construct differently from us, we refuse it rather than silently differ (for example a `{` that
does not start a quantifier, which Python reads as a literal; write `\\{`). Every refusal is a
`PatternError` naming the 0-based position and what is wrong there.

Characters are code points; non-ASCII literals, ranges, negated classes and `.` become UTF-8
byte-sequence alternations (`corral.automata.utf8`), so only well-formed UTF-8 ever matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from corral.automata.errors import PatternError, PatternTooLongError, RepetitionTooLargeError
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.nfa import check_tree_states
from corral.automata.tree import EMPTY, Alt, Concat, Node, Repeat
from corral.automata.utf8 import MAX_SCALAR, complement, ranges_to_tree

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A character of the pattern text that is a lone surrogate (Python's surrogateescape reads a
byte that is not UTF-8 as one, U+DC80..U+DCFF): refused, as no text holds it."""

MAX_GROUP_DEPTH = 200  # deeper nesting is refused: it would only exhaust Python's stack

DIGIT = [(0x30, 0x39)]
WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
SPACE = [(0x09, 0x0D), (0x20, 0x20)]
CLASS_ESCAPES = {
    "d": DIGIT,
    "w": WORD,
    "s": SPACE,
    "D": complement(DIGIT),
    "W": complement(WORD),
    "S": complement(SPACE),
}
CHAR_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
HEX_DIGITS = "0123456789abcdefABCDEF"
METACHARACTERS = set(".^$*+?{}[]\\|()")
ANCHOR_START = "'^' is only supported at the start of the pattern or of a top-level branch"
ANCHOR_END = "'$' is only supported at the end of the pattern or of a top-level branch"


def parse(pattern: str, limits: Limits | None = None) -> Node:
    """Parse `pattern` (docs/design.md section 2's subset) into a regex tree.

    Returns a `Node` (`corral.automata.tree`) whose language is the set of UTF-8 encodings of
    the strings `s` with `re.fullmatch(pattern, s, re.ASCII)`.

    Raises:
        TypeError: `pattern` is not a str.
        PatternTooLongError: the pattern is longer than `limits.max_pattern_length`.
        RepetitionTooLargeError: a `{m,n}` bound is above `limits.max_repetition`.
        PatternError: a character of `pattern` is a lone surrogate (U+D800..U+DFFF), not text.
        TooManyNfaStatesError: the pattern's NFA is counted past `limits.max_nfa_states`
            (`corral.automata.nfa.check_tree_states`), before anything is built.
        PatternError: a construct outside the subset or malformed; `.position` is the 0-based
            index where it starts and `.reason` says what is wrong.

    Results are memoized per (pattern, limits) for the process (`PARSE_CACHE_SIZE` entries,
    least recently used first out): a tree is immutable, so the schema compiler's repeated
    primitives (the JSON string, number and format patterns) are parsed once, not per schema.
    """
    if not isinstance(pattern, str):  # not hashable perhaps: the parser reports it
        return _alt([branch.node for branch in parse_branches(pattern, limits)])
    return _parse_cached(pattern, limits or DEFAULT_LIMITS)


PARSE_CACHE_SIZE = 512


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def _parse_cached(pattern: str, limits: Limits) -> Node:
    """`parse`, memoized (`functools.lru_cache` is thread-safe; errors are not cached)."""
    return _alt([branch.node for branch in parse_branches(pattern, limits)])


@dataclass(frozen=True)
class Branch:
    """One top-level `|` branch of a pattern: `node` is its regex tree without its anchors;
    `anchored_start` / `anchored_end` say whether it began with `^` / ended with `$`."""

    anchored_start: bool
    node: Node
    anchored_end: bool


def parse_branches(pattern: str, limits: Limits | None = None) -> list[Branch]:
    """Parse `pattern` into its top-level branches, in order (at least one; see the module
    docstring for the rule on anchors). `parse` is the alternation of their nodes; a JSON Schema
    `pattern`, a search, pads the unanchored ends with any characters.

    Raises the same errors as `parse`.
    """
    if not isinstance(pattern, str):
        raise TypeError(f"a pattern is a str, not {type(pattern).__name__}")
    limits = limits or DEFAULT_LIMITS
    if len(pattern) > limits.max_pattern_length:
        raise PatternTooLongError(
            "max_pattern_length",
            limits.max_pattern_length,
            f"pattern of {len(pattern)} characters is too long",
        )
    lone = _LONE_SURROGATE.search(pattern)
    if lone is not None:
        raise PatternError(
            pattern,
            lone.start(),
            f"the character U+{ord(lone.group()):04X} is a lone surrogate, not text (it has no "
            "UTF-8 form)",
        )
    branches = _Parser(pattern, limits).parse_branches()
    check_tree_states(_alt([branch.node for branch in branches]), limits)
    return branches


def escape(text: str) -> str:
    """The pattern matching exactly `text`: the inverse of parsing a literal, so
    `parse(escape(t))` matches exactly `t` (and so does `re.fullmatch(escape(t), t)`).
    Metacharacters get a backslash; newline, tab, CR, form feed and vertical tab become
    `\\n \\t \\r \\f \\v`; other control characters and DEL become `\\xHH`; the rest stays."""
    out = []
    for ch in text:
        if ch in METACHARACTERS:
            out.append("\\" + ch)
        elif ch in "\n\t\r\f\v":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r", "\f": "\\f", "\v": "\\v"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _concat(items: list[Node]) -> Node:
    return items[0] if len(items) == 1 else Concat(tuple(items))


def _alt(items: list[Node]) -> Node:
    return items[0] if len(items) == 1 else Alt(tuple(items))


class _Parser:
    """One pass over the pattern; `pos` is the index of the next character to read."""

    def __init__(self, pattern: str, limits: Limits):
        self.pattern = pattern
        self.limits = limits
        self.pos = 0
        self.group_names: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------
    def error(self, position: int, reason: str) -> PatternError:
        return PatternError(self.pattern, position, reason)

    def peek(self, offset: int = 0) -> str | None:
        i = self.pos + offset
        return self.pattern[i] if i < len(self.pattern) else None

    def at_end(self) -> bool:
        return self.pos >= len(self.pattern)

    # -- grammar ---------------------------------------------------------------------------
    def parse_branches(self) -> list[Branch]:
        branches = [self.top_branch()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.top_branch())
        if not self.at_end():  # only a ')' stops the top level early
            raise self.error(self.pos, "unbalanced ')': no group is open")
        return branches

    def top_branch(self) -> Branch:
        """`^*`, a sequence, `$*`; the sequence stops at a `$` (at depth 0)."""
        start = self.pos
        while self.peek() == "^":
            self.pos += 1
        anchored_start = self.pos > start
        node = self.sequence(0)
        end = self.pos
        while self.peek() == "$":
            self.pos += 1
        if not self.at_end() and self.peek() not in "|)":
            raise self.error(end, ANCHOR_END)
        return Branch(anchored_start, node, self.pos > end)

    def alternation(self, depth: int) -> Node:
        branches = [self.sequence(depth)]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence(depth))
        return _alt(branches)

    def sequence(self, depth: int) -> Node:
        items: list[Node] = []
        while not self.at_end() and self.peek() not in "|)" and (depth or self.peek() != "$"):
            items.append(self.quantified(self.atom(depth)))
        return EMPTY if not items else _concat(items)

    def quantified(self, atom: Node) -> Node:
        """Read at most one greedy quantifier after an atom; refuse a second one (nested,
        lazy or possessive)."""
        bounds = self.quantifier()
        if bounds is None:
            return atom
        follow = self.pos
        c = self.peek()
        if c == "?":
            raise self.error(follow, "lazy quantifiers are not supported")
        if c == "+":
            raise self.error(follow, "possessive quantifiers are not supported")
        if c == "*" or (c == "{" and self.brace_quantifier(peek_only=True) is not None):
            raise self.error(follow, "nested quantifier: put the repeated part in a group")
        lo, hi = bounds
        return Repeat(atom, lo, hi)

    def quantifier(self) -> tuple[int, int | None] | None:
        c = self.peek()
        if c == "*":
            self.pos += 1
            return 0, None
        if c == "+":
            self.pos += 1
            return 1, None
        if c == "?":
            self.pos += 1
            return 0, 1
        if c == "{":
            bounds = self.brace_quantifier()
            if bounds is None:
                raise self.error(self.pos, "a literal '{' must be escaped as '\\{'")
            return bounds
        return None

    def brace_quantifier(self, peek_only: bool = False) -> tuple[int, int | None] | None:
        """Read `{m}`, `{m,}`, `{,n}`, `{m,n}` or `{,}` at `pos`; None (and nothing read) when
        the text there is not one of these forms (Python would read it as a literal)."""
        p, start, i = self.pattern, self.pos, self.pos + 1
        j = i
        while j < len(p) and p[j].isdigit() and p[j].isascii():
            j += 1
        lo_text = p[i:j]
        if j < len(p) and p[j] == ",":
            k = j + 1
            while k < len(p) and p[k].isdigit() and p[k].isascii():
                k += 1
            hi_text, has_comma = p[j + 1 : k], True
        else:
            k, hi_text, has_comma = j, lo_text, False
        if k >= len(p) or p[k] != "}" or (not lo_text and not has_comma):
            return None
        if peek_only:
            return 0, None
        most = self.limits.max_repetition
        for text in (lo_text, hi_text):  # compared as text: Python reads no 4,301-digit int
            digits = text.lstrip("0")
            if len(digits) > len(str(most)) or (digits and int(digits) > most):
                shown = text if len(text) <= 20 else f"{text[:8]}... ({len(text)} digits)"
                raise RepetitionTooLargeError(
                    "max_repetition",
                    most,
                    f"position {start}: repetition bound {shown} is too large",
                )
        lo = int(lo_text) if lo_text else 0
        hi = int(hi_text) if hi_text else None
        if hi is not None and lo > hi:
            raise self.error(start, f"repetition minimum {lo} is greater than maximum {hi}")
        self.pos = k + 1
        return lo, hi

    def atom(self, depth: int) -> Node:
        start = self.pos
        c = self.pattern[start]
        if c == "(":
            return self.group(depth)
        if c == "[":
            return self.bracket()
        if c == "\\":
            return self.escape_outside()
        if c == ".":
            self.pos += 1
            return ranges_to_tree([(0, 9), (11, MAX_SCALAR)])
        if c in "*+?":
            raise self.error(start, f"nothing to repeat before '{c}'")
        if c == "{":
            if self.brace_quantifier(peek_only=True) is not None:
                raise self.error(start, "nothing to repeat before '{'")
            raise self.error(start, "a literal '{' must be escaped as '\\{'")
        if c == "^":
            raise self.error(start, ANCHOR_START)
        if c == "$":
            raise self.error(start, ANCHOR_END)
        self.pos += 1
        return ranges_to_tree([(ord(c), ord(c))])

    def group(self, depth: int) -> Node:
        start = self.pos
        if depth + 1 > MAX_GROUP_DEPTH:
            raise self.error(start, f"groups nested deeper than {MAX_GROUP_DEPTH}")
        self.pos += 1
        if self.peek() == "?":
            self.group_extension(start)
        node = self.alternation(depth + 1)
        if self.peek() != ")":
            raise self.error(start, "missing ')': this group is never closed")
        self.pos += 1
        return node

    def group_extension(self, start: int) -> None:
        """Read what follows `(?`: only `(?:` and `(?P<name>` are supported."""
        p = self.pattern
        rest = p[self.pos + 1 : self.pos + 4]
        if rest.startswith(":"):
            self.pos += 2
            return
        if rest.startswith("P<"):
            end = p.find(">", self.pos + 3)
            if end < 0:
                raise self.error(start, "missing '>' after a group name")
            name = p[self.pos + 3 : end]
            if not name.isidentifier():
                raise self.error(start, f"bad group name {name!r}")
            if name in self.group_names:
                raise self.error(start, f"group name {name!r} used twice")
            self.group_names.add(name)
            self.pos = end + 1
            return
        reasons = {
            "=": "lookahead is not supported",
            "!": "negative lookahead is not supported",
            "<=": "lookbehind is not supported",
            "<!": "negative lookbehind is not supported",
            "P=": "backreferences are not supported",
            "#": "comments are not supported",
            ">": "atomic groups are not supported",
            "(": "conditional groups are not supported",
            "<": "named groups are written (?P<name>...)",
        }
        for prefix, reason in reasons.items():
            if rest.startswith(prefix):
                raise self.error(start, reason)
        if rest[:1] and rest[:1] in "aiLmsux-":
            raise self.error(start, "inline flags are not supported")
        raise self.error(start, "unknown group extension '(?'")

    def escape_outside(self) -> Node:
        """An escape outside brackets: a character, a class, or a refused construct."""
        item = self.escape_item(in_class=False)
        if isinstance(item, list):
            return ranges_to_tree(item)
        return ranges_to_tree([(item, item)])

    def escape_item(self, in_class: bool) -> int | list[tuple[int, int]]:
        """Read an escape at `pos` (a backslash); return a code point or a list of ranges."""
        start = self.pos
        c = self.peek(1)
        if c is None:
            raise self.error(start, "trailing backslash: nothing to escape")
        self.pos += 2
        if c in CLASS_ESCAPES:
            return CLASS_ESCAPES[c]
        if c in CHAR_ESCAPES:
            return ord(CHAR_ESCAPES[c])
        if c in "xu":
            width = 2 if c == "x" else 4
            digits = self.pattern[self.pos : self.pos + width]
            if len(digits) < width or any(d not in HEX_DIGITS for d in digits):
                raise self.error(start, f"\\{c} needs exactly {width} hex digits")
            self.pos += width
            return int(digits, 16)
        if in_class and c == "b":
            return 0x08  # Python reads [\b] as backspace
        if c in "bB":
            raise self.error(start, "word boundaries (\\b, \\B) are not supported")
        if c in "AZ":
            raise self.error(start, f"anchor \\{c} is not supported; the whole pattern matches")
        if c in "0123456789":
            if c == "0" or in_class:
                raise self.error(start, "octal escapes are not supported; use \\xHH")
            raise self.error(start, "backreferences are not supported")
        if c in "pP":
            raise self.error(start, "Unicode property escapes (\\p, \\P) are not supported")
        if c.isascii() and c.isalpha():
            raise self.error(start, f"unknown escape \\{c}")
        return ord(c)  # an escaped non-alphanumeric character stands for itself

    def bracket(self) -> Node:
        """A bracket class `[...]` or `[^...]`, read the way Python's `re` reads it: a `]`
        right after `[` or `[^` is a literal; `-` first, last or after a range is a literal."""
        start = self.pos
        self.pos += 1
        negate = self.peek() == "^"
        if negate:
            self.pos += 1
        first = self.pos
        ranges: list[tuple[int, int]] = []
        while True:
            c = self.peek()
            if c is None:
                raise self.error(start, "unterminated character set: missing ']'")
            if c == "]" and self.pos != first:
                self.pos += 1
                break
            item_start = self.pos
            item = self.class_item()
            if self.peek() == "-" and self.peek(1) not in (None, "]"):
                self.pos += 1
                high = self.class_item()
                if isinstance(item, list) or isinstance(high, list):
                    raise self.error(item_start, "a class like \\d cannot end a range")
                if high < item:
                    raise self.error(item_start, "bad range: its end is before its start")
                ranges.append((item, high))
            elif isinstance(item, list):
                ranges.extend(item)
            else:
                ranges.append((item, item))
        if negate:
            ranges = complement(ranges)
        return ranges_to_tree(ranges)

    def class_item(self) -> int | list[tuple[int, int]]:
        c = self.peek()
        if c is None:
            raise self.error(self.pos, "unterminated character set: missing ']'")
        if c == "\\":
            return self.escape_item(in_class=True)
        self.pos += 1
        return ord(c)

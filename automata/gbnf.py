"""GBNF, llama.cpp's grammar format, to a `Grammar` (`corral.automata.grammar_tree`;
docs/grammars.md).

The dialect llama.cpp documents: rules `name ::= alternatives`, the start rule
`root`; string literals `"..."` and character classes `[...]`, `[^...]` with ranges, and the
escapes `\\xHH \\uHHHH \\UHHHHHHHH \\t \\r \\n \\\\ \\" \\[ \\]`; `.` (any character);
alternation `|`, groups `(...)`, repetition `* + ? {m} {m,} {m,n}`; comments `#` to the end of
the line. A rule ends at a newline unless inside parentheses or after `|`. Characters are Unicode
code points, matched as their UTF-8 encodings.

Refused, each with a `GrammarError` naming the line and column: token references (`<[id]>`,
`<text>`, `!<...>`), a rule defined twice, an undefined rule, left recursion (as llama.cpp
refuses it), and anything malformed.
"""

from __future__ import annotations

from corral.automata.errors import GrammarError, PatternTooLongError
from corral.automata.grammar_tree import (
    Choice,
    CompiledGrammar,
    Grammar,
    Leaf,
    Ref,
    Rep,
    Seq,
    compile_grammar,
    left_recursive_rule,
)
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.parse import MAX_GROUP_DEPTH
from corral.automata.tree import literal_bytes
from corral.automata.utf8 import MAX_SCALAR, complement, ranges_to_tree

ANY_CHAR = ranges_to_tree([(0, MAX_SCALAR)])
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_LENGTH = {"x": 2, "u": 4, "U": 8}


def _is_name_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c in "-_")


class _Parser:
    def __init__(self, text: str, limits: Limits):
        self.text = text
        self.pos = 0
        self.limits = limits
        self.depth = 0  # groups open

    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def error(self, reason: str, pos: int | None = None, rule: str | None = None):
        return GrammarError(*self.where(pos), reason, rule=rule)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def space(self, newlines: bool) -> None:
        """Skip blanks and comments, and newlines when `newlines`."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def name(self) -> str:
        start = self.pos
        while self.pos < len(self.text) and _is_name_char(self.text[self.pos]):
            self.pos += 1
        if self.pos == start:
            raise self.error("expected a rule name")
        return self.text[start : self.pos]

    def grammar(self) -> Grammar:
        rules: dict = {}
        where: dict = {}
        self.space(True)
        while self.pos < len(self.text):
            start = self.pos
            name = self.name()
            self.space(False)
            if not self.text.startswith("::=", self.pos):
                raise self.error("expected '::=' after the rule name")
            if name in rules:
                raise self.error(f"rule '{name}' is defined twice", start, rule=name)
            where[name] = self.where(start)
            self.pos += 3
            self.space(True)
            rules[name] = self.alternatives(nested=False)
            if self.pos < len(self.text) and self.peek() not in "\r\n":
                raise self.error(f"unexpected {self.peek()!r}")
            self.space(True)
        if "root" not in rules:
            raise GrammarError(1, 1, "the grammar has no 'root' rule")
        return Grammar(rules, "root", where)

    def alternatives(self, nested: bool):
        items = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.space(True)
            items.append(self.sequence(nested))
        return items[0] if len(items) == 1 else Choice(tuple(items))

    def sequence(self, nested: bool):
        items = []
        while True:
            c = self.peek()
            start = self.pos
            if c == '"':
                self.pos += 1
                chars = []
                while self.peek() != '"':
                    if not self.peek():
                        raise self.error("unterminated string literal", start)
                    chars.append(self.char())
                self.pos += 1
                item = Leaf(literal_bytes("".join(chars).encode("utf-8")))
            elif c == "[":
                item = Leaf(self.char_class())
            elif c == ".":
                self.pos += 1
                item = Leaf(ANY_CHAR)
            elif c == "(":
                self.depth += 1
                if self.depth > MAX_GROUP_DEPTH:
                    raise self.error(f"groups nested deeper than {MAX_GROUP_DEPTH}")
                self.pos += 1
                self.space(True)
                body = self.alternatives(nested=True)
                self.depth -= 1
                if self.peek() != ")":
                    raise self.error("expected ')'", start if not self.peek() else None)
                self.pos += 1
                item = body
            elif c in ("<", "!"):
                raise self.error(
                    "token references (<[id]>, <token>, !<...>) are not supported: corral "
                    "grammars match text, not token ids"
                )
            elif c and _is_name_char(c):
                name = self.name()
                after = self.pos
                self.space(nested)
                if self.text.startswith("::=", self.pos):  # the next rule's head: a newline
                    raise self.error(  # was needed between the rules
                        "expected a newline before the next rule", start
                    )
                self.pos = after
                item = Ref(name, *self.where(start))
            else:
                break
            self.space(nested)
            item = self.quantified(item, nested)
            items.append(item)
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def quantified(self, item, nested: bool):
        while True:
            c = self.peek()
            if c == "*":
                item = Rep(item, 0, None)
            elif c == "+":
                item = Rep(item, 1, None)
            elif c == "?":
                item = Rep(item, 0, 1)
            elif c == "{":
                start = self.pos
                self.pos += 1
                self.space(False)
                low = self.integer()
                self.space(False)
                high: int | None = low
                if self.peek() == ",":
                    self.pos += 1
                    self.space(False)
                    high = self.integer() if self.peek().isdigit() else None
                    self.space(False)
                if self.peek() != "}":
                    raise self.error("expected '}' closing the repetition")
                if high is not None and high < low:
                    raise self.error(
                        f"repetition {{{low},{high}}}: the maximum is below the minimum", start
                    )
                if max(low, high or 0) > self.limits.max_repetition:
                    raise self.error(
                        f"repetition bound above max_repetition={self.limits.max_repetition}",
                        start,
                    )
                item = Rep(item, low, high)
            else:
                return item
            self.pos += 1
            self.space(nested)

    def integer(self) -> int:
        start = self.pos
        while self.peek().isascii() and self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise self.error("expected a number in the repetition")
        return int(self.text[start : self.pos])

    def char(self) -> str:
        """One character of a literal or class, escapes decoded."""
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return c
        start = self.pos
        e = self.peek(1)
        if e in _HEX_LENGTH:
            n = _HEX_LENGTH[e]
            digits = self.text[self.pos + 2 : self.pos + 2 + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"'\\{e}' needs {n} hexadecimal digits", start)
            value = int(digits, 16)
            if value > MAX_SCALAR or 0xD800 <= value <= 0xDFFF:
                raise self.error(f"'\\{e}{digits}' is not a Unicode scalar value", start)
            self.pos += 2 + n
            return chr(value)
        if e in _ESCAPES:
            self.pos += 2
            return _ESCAPES[e]
        raise self.error(f"unknown escape '\\{e}'", start)

    def char_class(self):
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class", start)
            lo = hi = ord(self.char())
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = ord(self.char())
                if hi < lo:
                    raise self.error("character range out of order", start)
            ranges.append((lo, hi))
        self.pos += 1
        return ranges_to_tree(complement(ranges) if negated else ranges)


def parse_gbnf(text: str, limits: Limits | None = None) -> Grammar:
    """The `Grammar` of the GBNF `text` (module docstring), start rule `root`.

    Raises:
        TypeError: `text` is not a str.
        PatternTooLongError: `text` is longer than `limits.max_pattern_length` characters.
        GrammarError: a syntax error, a refused construct, an undefined rule or left recursion,
            with its 1-based line and column (and `.rule` for a rule at fault).
    """
    if not isinstance(text, str):
        raise TypeError(f"a GBNF grammar is a str, not {type(text).__name__}")
    limits = limits or DEFAULT_LIMITS
    if len(text) > limits.max_pattern_length:
        raise PatternTooLongError(
            "max_pattern_length",
            limits.max_pattern_length,
            f"the grammar has {len(text)} characters",
        )
    grammar = _Parser(text, limits).grammar()
    from corral.automata.grammar_tree import check_references

    check_references(grammar)
    ref = left_recursive_rule(grammar)
    if ref is not None:
        raise GrammarError(
            ref.line, ref.column, f"rule '{ref.name}' is left-recursive", rule=ref.name
        )
    return grammar


def compile_gbnf(
    text: str, limits: Limits | None = None, max_recursion: int | None = None
) -> CompiledGrammar:
    """The GBNF grammar `text` compiled (`compile_grammar`): its DFA, the recursion bound used
    and the rules cut. Raises what `parse_gbnf` and `compile_grammar` raise."""
    return compile_grammar(parse_gbnf(text, limits), limits, max_recursion)


def gbnf_to_dfa(text: str, limits: Limits | None = None, max_recursion: int | None = None):
    """The canonical DFA (`Dfa`) of the GBNF grammar `text`, recursion unrolled at most
    `max_recursion` deep (docs/grammars.md). Raises what `compile_gbnf` raises."""
    return compile_gbnf(text, limits, max_recursion).dfa

"""Lark grammars, as llguidance and OpenAI's custom tools write them, to a `Grammar`
(`corral.automata.grammar_tree`; docs/grammars.md).

Accepted: rules (`name: ...`, lowercase, with the modifiers `?`, `!`, `_` and a priority
`.N`, which change the parse tree, not the language) and terminals (`NAME: ...`, uppercase);
string literals `"..."` (escapes as Python's, flag `i` for case-insensitive), ranges
`"a".."z"`, regex terminals `/.../` in corral's regex subset (`corral.automata.parse`; no
flags); alternation `|` (continued on a new line that starts with `|`), groups `(...)`, optional
`[...]`, `? * +`, `~ n` and `~ n..m`; `-> alias` (ignored); comments `//`; `%import common.X`,
`%import common.X -> Y` and `%import common (X, Y)` for the terminals of `COMMON_TERMINALS`;
`%ignore` with terminals, strings or regexes. The start rule is `start`.

`%ignore` is honoured: the ignored language may occur, any number of times, before each
terminal a rule uses and at the end of the text. The language is the character-level one,
as Lark's Earley parser with `lexer="dynamic_complete"` reads it: a string is accepted when
some split into terminals derives it, where Lark's default lexers split greedily and may
reject some of these strings (docs/grammars.md).

Refused with a `GrammarError` naming the line and column: other imports, `%declare`,
`%override`, `%extend`, templates, regex flags, a rule used in a terminal, a name defined
twice, an undefined name, and anything malformed.
"""

from __future__ import annotations

import re

from corral.automata.errors import GrammarError, PatternError, PatternTooLongError
from corral.automata.grammar_tree import (
    Choice,
    CompiledGrammar,
    Grammar,
    Leaf,
    Ref,
    Rep,
    Seq,
    check_references,
    compile_grammar,
    references,
)
from corral.automata.limits import DEFAULT_LIMITS, Limits
from corral.automata.parse import MAX_GROUP_DEPTH, parse
from corral.automata.tree import literal_bytes
from corral.automata.utf8 import MAX_SCALAR, ranges_to_tree

COMMON_TERMINALS = {
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "DECIMAL": r"[0-9]+\.[0-9]*|\.[0-9]+",
    "_EXP": r"[eE][+-]?[0-9]+",
    "FLOAT": r"[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?",
    "SIGNED_FLOAT": r"[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)",
    "NUMBER": r"[0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+",
    "SIGNED_NUMBER": (
        r"[+-]?([0-9]+[eE][+-]?[0-9]+|([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?|[0-9]+)"
    ),
    "ESCAPED_STRING": r'"([^"\\\n]|\\[^\n])*"',
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "LETTER": r"[A-Za-z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "WS_INLINE": r"[ \t]+",
    "WS": r"[ \t\f\r\n]+",
    "CR": r"\r",
    "LF": r"\n",
    "NEWLINE": r"(\r?\n)+",
    "SH_COMMENT": r"#[^\n]*",
    "CPP_COMMENT": r"//[^\n]*",
    "C_COMMENT": r"/\*([^*]|\*+[^*/])*\*+/",
    "SQL_COMMENT": r"--[^\n]*",
}
"""The terminals of Lark's `common.lark` that `%import common.X` brings in, as corral regexes
(their languages as Lark's lexer matches them: `ESCAPED_STRING` is a quoted line whose
backslashes escape the next character, `C_COMMENT` ends at the first `*/`)."""

IGNORED = "%ignore"
"""The rule that holds the `%ignore`d language repeated (a name no Lark rule can have)."""
START = "%start"

_TOKEN = re.compile(
    r"""
    (?P<nl>(?:[ \t]*(?://[^\n]*)?\r?\n)+)
  | (?P<blank>[ \t]+|//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"i?)
  | (?P<regex>/(?!/)(?:[^/\\\n]|\\.)+/[a-z]*)
  | (?P<directive>%[a-z]+)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<number>[0-9]+)
  | (?P<op>->|\.\.|[:|()\[\]?!*+~,.{}])
    """,
    re.VERBOSE,
)
_STRING_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "f": "\f",
    "v": "\v",
    "a": "\a",
    "b": "\b",
    "0": "\0",
    "\\": "\\",
    '"': '"',
    "'": "'",
}
_HEX_LENGTH = {"x": 2, "u": 4, "U": 8}


def _is_terminal(name: str) -> bool:
    return name.lstrip("_")[:1].isupper()


class _Parser:
    def __init__(self, text: str, limits: Limits):
        self.text = text
        self.limits = limits
        self.tokens = self.tokenize()
        self.i = 0
        self.rules: dict = {}
        self.where: dict = {}
        self.ignored: list = []
        self.in_terminal = False
        self.depth = 0  # groups open

    def where_of(self, pos: int) -> tuple[int, int]:
        return self.text.count("\n", 0, pos) + 1, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def error(self, reason: str, pos: int | None = None, rule: str | None = None):
        if pos is None:
            pos = self.tokens[self.i][2]
        return GrammarError(*self.where_of(pos), reason, rule=rule)

    def tokenize(self) -> list[tuple[str, str, int]]:
        out = [("nl", "", 0)]
        pos = 0
        while pos < len(self.text):
            m = _TOKEN.match(self.text, pos)
            if m is None:
                raise GrammarError(*self.where_of(pos), f"unexpected {self.text[pos]!r}")
            kind = m.lastgroup
            if kind == "nl":
                if out[-1][0] != "nl":
                    out.append(("nl", "", pos))
            elif kind != "blank":
                out.append((kind, m.group(), pos))
            pos = m.end()
        out.append(("nl", "", len(self.text)))
        out.append(("end", "", len(self.text)))
        return out

    def peek(self, k: int = 0) -> tuple[str, str, int]:
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def take(self, kind: str, value: str | None = None) -> tuple[str, str, int]:
        tok = self.peek()
        if tok[0] != kind or (value is not None and tok[1] != value):
            what = value or kind
            found = tok[1] or ("end of line" if tok[0] == "nl" else "end of the grammar")
            raise self.error(f"expected {what!r}, found {found!r}")
        self.i += 1
        return tok

    def is_op(self, value: str, k: int = 0) -> bool:
        tok = self.peek(k)
        return tok[0] == "op" and tok[1] == value

    def grammar(self) -> Grammar:
        while self.peek()[0] != "end":
            if self.peek()[0] == "nl":
                self.i += 1
            elif self.peek()[0] == "directive":
                self.directive()
            else:
                self.definition()
        if "start" not in self.rules:
            raise GrammarError(1, 1, "the grammar has no 'start' rule")
        ignore = Rep(Choice(tuple(self.ignored)), 0, None) if self.ignored else Seq(())
        self.rules[IGNORED] = ignore
        self.rules[START] = Seq((Ref("start", 1, 1), Ref(IGNORED, 1, 1)))
        return Grammar(self.rules, START, self.where)

    def define(self, name: str, body, pos: int) -> None:
        if name in self.rules:
            raise self.error(f"'{name}' is defined twice", pos, rule=name)
        self.rules[name] = body
        self.where[name] = self.where_of(pos)

    def definition(self) -> None:
        pos = self.peek()[2]
        modifier = self.peek()[1] if self.is_op("?") or self.is_op("!") else ""
        self.i += bool(modifier)
        name = self.take("name")[1]
        if self.is_op("{"):
            raise self.error("templates are not supported")
        if self.is_op("."):  # a priority: changes which parse wins, not the language
            self.i += 1
            if self.peek()[0] == "op" and self.peek()[1] == "-":
                self.i += 1
            self.take("number")
        self.take("op", ":")
        self.in_terminal = _is_terminal(name)
        if self.in_terminal and modifier:
            raise self.error(f"a terminal takes no modifier: {modifier}{name}", pos)
        body = self.expansions()
        self.end_of_statement()
        self.define(name, body, pos)

    def end_of_statement(self) -> None:
        if self.peek()[0] not in ("nl", "end"):
            tok = self.peek()
            raise self.error(f"unexpected {tok[1]!r}")

    def directive(self) -> None:
        _, word, pos = self.take("directive")
        if word == "%ignore":
            self.in_terminal = True
            self.ignored.append(self.expansions())
            self.end_of_statement()
        elif word == "%import":
            self.imports(pos)
        else:
            raise self.error(f"{word} is not supported", pos)

    def imports(self, pos: int) -> None:
        _, module, mpos = self.take("name")
        if module != "common":
            raise self.error(f"only '%import common' is supported, not {module!r}", mpos)
        names: list[tuple[str, str, int]] = []
        if self.is_op("."):
            self.i += 1
            _, name, npos = self.take("name")
            alias = name
            if self.is_op("->"):
                self.i += 1
                alias = self.take("name")[1]
            names.append((name, alias, npos))
        else:
            self.take("op", "(")
            while True:
                _, name, npos = self.take("name")
                names.append((name, name, npos))
                if self.is_op(")"):
                    self.i += 1
                    break
                self.take("op", ",")
        self.end_of_statement()
        for name, alias, npos in names:
            if name not in COMMON_TERMINALS:
                raise self.error(f"common.{name} is not supported (docs/grammars.md)", npos)
            self.define(alias, Leaf(parse(COMMON_TERMINALS[name])), npos)

    def expansions(self):
        items = [self.alias()]
        while self.is_op("|") or (self.peek()[0] == "nl" and self.is_op("|", 1)):
            self.i += 2 if self.peek()[0] == "nl" else 1
            items.append(self.alias())
        return items[0] if len(items) == 1 else Choice(tuple(items))

    def skip_newlines(self, nested: bool) -> None:
        while nested and self.peek()[0] == "nl":
            self.i += 1

    def alias(self):
        items = []
        while True:
            item = self.expr()
            if item is None:
                break
            items.append(item)
        if self.is_op("->"):
            self.i += 1
            self.take("name")
        return items[0] if len(items) == 1 else Seq(tuple(items))

    def expr(self):
        atom = self.atom()
        if atom is None:
            return None
        tok = self.peek()
        if tok[0] == "op" and tok[1] in ("?", "*", "+"):
            self.i += 1
            low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}[tok[1]]
            return Rep(atom, low, high)
        if self.is_op("~"):
            pos = self.peek()[2]
            self.i += 1
            low = high = int(self.take("number")[1])
            if self.is_op(".."):
                self.i += 1
                high = int(self.take("number")[1])
            if high < low:
                raise self.error(
                    f"repetition ~ {low}..{high}: the maximum is below the minimum", pos
                )
            if high > self.limits.max_repetition:
                raise self.error(
                    f"repetition bound above max_repetition={self.limits.max_repetition}", pos
                )
            return Rep(atom, low, high)
        return atom

    def atom(self):
        kind, value, pos = self.peek()
        if kind == "op" and value in ("(", "["):
            self.depth += 1
            if self.depth > MAX_GROUP_DEPTH:
                raise self.error(f"groups nested deeper than {MAX_GROUP_DEPTH}")
            self.i += 1
            self.skip_newlines(True)
            body = self.expansions()
            self.depth -= 1
            self.skip_newlines(True)
            self.take("op", ")" if value == "(" else "]")
            return body if value == "(" else Rep(body, 0, 1)
        if kind == "string":
            self.i += 1
            if self.is_op(".."):
                self.i += 1
                _, end, epos = self.take("string")
                lo, hi = self.string(value, pos), self.string(end, epos)
                if len(lo) != 1 or len(hi) != 1 or lo > hi or value[-1] == "i" or end[-1] == "i":
                    raise self.error("a range is two one-character strings, low..high", pos)
                return self.token(Leaf(ranges_to_tree([(ord(lo), ord(hi))])))
            text = self.string(value, pos)
            if value.endswith("i"):
                node = _case_insensitive(text)
            else:
                node = literal_bytes(text.encode("utf-8"))
            return self.token(Leaf(node))
        if kind == "regex":
            self.i += 1
            return self.token(Leaf(self.regex(value, pos)))
        if kind == "name":
            if self.is_op("{", 1):
                raise self.error("templates are not supported")
            self.i += 1
            line, column = self.where_of(pos)
            if _is_terminal(value):
                return self.token(Ref(value, line, column))
            if self.in_terminal:
                raise self.error(f"a terminal cannot use the rule '{value}'", pos, rule=value)
            return Ref(value, line, column)
        return None

    def token(self, item):
        """`item`, a terminal: in a rule, after the `%ignore`d language."""
        return item if self.in_terminal else Seq((Ref(IGNORED, 0, 0), item))

    def string(self, token: str, pos: int) -> str:
        body = token[1 : token.rindex('"')]
        out = []
        k = 0
        while k < len(body):
            c = body[k]
            if c != "\\":
                out.append(c)
                k += 1
                continue
            e = body[k + 1]
            if e in _HEX_LENGTH:
                n = _HEX_LENGTH[e]
                digits = body[k + 2 : k + 2 + n]
                if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    raise self.error(f"'\\{e}' needs {n} hexadecimal digits", pos + 1 + k)
                value = int(digits, 16)
                if value > MAX_SCALAR or 0xD800 <= value <= 0xDFFF:
                    raise self.error(f"'\\{e}{digits}' is not a Unicode scalar value", pos + 1 + k)
                out.append(chr(value))
                k += 2 + n
            elif e in _STRING_ESCAPES:
                out.append(_STRING_ESCAPES[e])
                k += 2
            else:
                raise self.error(f"unknown escape '\\{e}'", pos + 1 + k)
        return "".join(out)

    def regex(self, token: str, pos: int):
        end = token.rindex("/")
        if token[end + 1 :]:
            raise self.error(f"regex flags are not supported: {token[end + 1 :]!r}", pos + end + 1)
        body, offsets = [], []  # the pattern with "\/" read as "/", and each char's offset
        k = 1
        while k < end:
            if token[k] == "\\" and token[k + 1] == "/":
                body.append("/")
                offsets.append(k + 1)
                k += 2
            elif token[k] == "\\":
                body.extend(token[k : k + 2])
                offsets.extend((k, k + 1))
                k += 2
            else:
                body.append(token[k])
                offsets.append(k)
                k += 1
        try:
            return parse("".join(body), self.limits)
        except PatternError as error:
            at = offsets[error.position] if error.position < len(offsets) else end
            raise self.error(f"in the regex: {error.reason}", pos + at) from error


def _case_insensitive(text: str):
    from corral.automata.tree import Concat

    items = []
    for c in text:
        cases = {c, c.lower(), c.upper()}
        points = sorted(ord(x) for x in cases if len(x) == 1)
        items.append(ranges_to_tree([(p, p) for p in points]))
    return Concat(tuple(items))


def parse_lark(text: str, limits: Limits | None = None) -> Grammar:
    """The `Grammar` of the Lark `text` (module docstring); its start rule wraps `start` with
    the `%ignore`d language at the end.

    Raises:
        TypeError: `text` is not a str.
        PatternTooLongError: `text` is longer than `limits.max_pattern_length` characters.
        GrammarError: a syntax error, a refused construct or an undefined name, with its
            1-based line and column (and `.rule` for a name at fault).
    """
    if not isinstance(text, str):
        raise TypeError(f"a Lark grammar is a str, not {type(text).__name__}")
    limits = limits or DEFAULT_LIMITS
    if len(text) > limits.max_pattern_length:
        raise PatternTooLongError(
            "max_pattern_length",
            limits.max_pattern_length,
            f"the grammar has {len(text)} characters",
        )
    grammar = _Parser(text, limits).grammar()
    check_references(grammar)
    for name, body in grammar.rules.items():
        if _is_terminal(name):
            for ref in references(body, []):
                if not _is_terminal(ref.name):
                    raise GrammarError(
                        ref.line, ref.column, f"terminal {name} uses the rule '{ref.name}'"
                    )
    return grammar


def compile_lark(
    text: str, limits: Limits | None = None, max_recursion: int | None = None
) -> CompiledGrammar:
    """The Lark grammar `text` compiled (`compile_grammar`): its DFA, the recursion bound used
    and the rules cut. Raises what `parse_lark` and `compile_grammar` raise."""
    return compile_grammar(parse_lark(text, limits), limits, max_recursion)


def lark_to_dfa(text: str, limits: Limits | None = None, max_recursion: int | None = None):
    """The canonical DFA (`Dfa`) of the Lark grammar `text`, recursion unrolled at most
    `max_recursion` deep (docs/grammars.md). Raises what `compile_lark` raises."""
    return compile_lark(text, limits, max_recursion).dfa

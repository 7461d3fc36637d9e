"""Grammar errors, bounds and Lark's common terminals (docs/grammars.md).

- Any text, GBNF or Lark, either compiles or raises a `ConstrainError` (a `GrammarError` with a
  line and column inside the text); never another exception.
- Syntax errors, undefined rules, left recursion (GBNF) and refused constructs name the place.
- Recursion: unrolled `max_recursion` deep and cut past it; shallower when a state limit is
  passed; refused naming the rules when no depth fits.
- `%import common.X`: corral's table against Lark's own common.lark.
"""

from __future__ import annotations

import re

import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    GrammarError,
    GrammarTooLargeError,
    Limits,
    PatternTooLongError,
    compile_grammar_text,
    grammar_to_dfa,
)
from corral.automata.lark import COMMON_TERMINALS
from grammar_oracle import LarkOracle, mutations, samples
from hypothesis import given, settings
from hypothesis import strategies as st

GBNF_PIECES = st.sampled_from(
    ["root", " ::= ", "a", "x", '"', "\\", "[", "]", "^", "-", "(", ")", "|", "*", "+", "?",
     "{", "}", ",", "2", ".", "#", "\n", " ", "<", ">", "!", "\\x4", "\\u00e9", "\u00e9"]
)  # fmt: skip
LARK_PIECES = st.sampled_from(
    ["start", ": ", "a", "A", "X", '"', "\\", "/", "[", "]", "(", ")", "|", "*", "+", "?", "~",
     "..", "2", ".", "->", "//", "\n", " ", "%import", "%ignore", " common.", "WS", "i", "{", "}"]
)  # fmt: skip


def check_error_or_compiles(text: str, syntax: str) -> None:
    try:
        compile_grammar_text(text, syntax, max_recursion=2)
    except GrammarError as error:
        lines = text.split("\n")
        assert 1 <= error.line <= len(lines), (error, text)
        assert 1 <= error.column <= len(lines[error.line - 1]) + 1, (error, text)
        assert str(error).startswith(f"line {error.line} column {error.column}: ")
    except ConstrainError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.lists(GBNF_PIECES, max_size=25).map("".join))
def test_any_gbnf_text_compiles_or_names_a_place(text):
    check_error_or_compiles(text, "gbnf")
    check_error_or_compiles("root ::= " + text, "gbnf")


@settings(max_examples=400, deadline=None)
@given(st.lists(LARK_PIECES, max_size=25).map("".join))
def test_any_lark_text_compiles_or_names_a_place(text):
    check_error_or_compiles(text, "lark")
    check_error_or_compiles("start: " + text, "lark")


@pytest.mark.parametrize(
    "syntax, text, line, column, phrase",
    [
        ("gbnf", 'root ::= "a"\nb ::= "b" (', 2, 11, "expected ')'"),
        ("gbnf", 'root ::= x\nx ::= "a" y', 2, 11, "rule 'y' is not defined"),
        ("gbnf", 'root ::= "a" | root "a"', 1, 1, "rule 'root' is left-recursive"),
        ("gbnf", "root ::= <think> .*", 1, 10, "token references"),
        ("gbnf", 'root ::= "\\q"', 1, 11, "unknown escape"),
        ("gbnf", "root ::= [b-a]", 1, 10, "out of order"),
        ("gbnf", 'root ::= "a"{3,2}', 1, 13, "below the minimum"),
        ("gbnf", 'root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
        ("gbnf", 'x ::= "a"', 1, 1, "no 'root' rule"),
        ("lark", 'start: a\na: "x" B', 2, 8, "rule 'B' is not defined"),
        ("lark", "start: /a(/", 1, 10, "in the regex"),
        ("lark", "start: /ab/i", 1, 12, "regex flags"),
        ("lark", "%import other.X\nstart: X", 1, 9, "only '%import common'"),
        ("lark", "%import common.FOO\nstart: FOO", 1, 16, "common.FOO is not supported"),
        ("lark", 'start: x{"a"}', 1, 8, "templates"),
        ("lark", 'start: "a"\n%declare B', 2, 1, "%declare is not supported"),
        ("lark", 'start: A\nA: "a" b\nb: "c"', 2, 8, "a terminal cannot use the rule 'b'"),
        ("lark", 'start: "a" ~ 3..1', 1, 12, "below the minimum"),
        ("lark", 'a: "x"', 1, 1, "no 'start' rule"),
    ],
)
def test_error_names_the_place(syntax, text, line, column, phrase):
    with pytest.raises(GrammarError, match=re.escape(phrase)) as caught:
        compile_grammar_text(text, syntax)
    assert (caught.value.line, caught.value.column) == (line, column)


def test_recursion_is_cut_at_the_bound():
    text = 'root ::= "(" root ")" | "x"'
    for depth in (1, 2, 3, 4):
        compiled = compile_grammar_text(text, max_recursion=depth)
        assert (compiled.max_recursion, compiled.cut_rules) == (depth, ("root",))
        for k in range(8):
            assert compiled.dfa.matches(b"(" * k + b"x" + b")" * k) == (k < depth)


def test_shallower_on_a_state_limit_then_refused_naming_the_rules():
    text = 'root ::= "[" (root ("," root)*)? "]"'
    deep = compile_grammar_text(text)
    assert deep.max_recursion == 5
    limits = Limits(max_dfa_states=deep.dfa.n_states // 3)
    shallow = compile_grammar_text(text, limits=limits)
    assert 1 <= shallow.max_recursion < 5 and shallow.cut_rules == ("root",)
    assert shallow.dfa.n_states <= limits.max_dfa_states
    with pytest.raises(GrammarTooLargeError, match=r"\(root\)") as caught:
        compile_grammar_text(text, limits=Limits(max_dfa_states=2))
    assert caught.value.rules == ("root",) and caught.value.limit == "max_dfa_states"


def test_no_string_within_the_bound():
    with pytest.raises(EmptyLanguageError, match="derives no string$"):
        grammar_to_dfa('root ::= "a" root')  # no derivation at all
    with pytest.raises(EmptyLanguageError, match="recursion of root cut at depth 5"):
        grammar_to_dfa('root ::= "a" root "b"')  # nor within the bound


def test_ignore_is_honoured():
    text = 'start: WORD ("," WORD)*\n%import common.WORD\n%import common.WS\n%ignore WS\n'
    dfa = grammar_to_dfa(text, "lark")
    oracle = LarkOracle(text)
    for s in ["a,b", " a , b ", "a\n,\tb\n", "a b", "a,,b", ","]:
        assert dfa.matches(s.encode()) == oracle.accepts(s), s


@pytest.mark.parametrize("name", sorted(COMMON_TERMINALS))
def test_common_terminals_match_lark(name):
    """Each `%import common.X` against Lark's own common.lark: strings drawn from corral's DFA
    and their mutations are accepted alike."""
    text = f"start: {name}\n%import common.{name}\n"
    dfa = grammar_to_dfa(text, "lark")
    oracle = LarkOracle(text)
    drawn = samples(dfa, seed=len(name), n=30)
    for s in drawn + mutations(drawn, seed=1, per_text=5, alphabet='"\\ \n\t*/#-+.eE0_a'):
        assert dfa.matches(s.encode("utf-8")) == oracle.accepts(s), (name, s)


def test_deep_or_long_grammars_are_refused_not_crashed():
    for syntax, head in (("gbnf", "root ::= "), ("lark", "start: ")):
        with pytest.raises(GrammarError, match="nested deeper than 200"):
            compile_grammar_text(head + "(" * 300 + '"a"' + ")" * 300, syntax)
    with pytest.raises(PatternTooLongError, match="max_pattern_length"):
        compile_grammar_text("root ::= " + '"a" ' * 30_000)


def test_lark_modifiers_priorities_aliases_and_comments_change_no_language():
    text = (
        "?start: x? y -> both // a comment\n"
        '!x: "a"i\n'
        '_y.2: "b" | "c".."e"\n'
        "    | /[0-9]+/ ~ 2\n"
        "y: _y\n"
    )
    dfa = grammar_to_dfa(text, "lark")
    oracle = LarkOracle(text)
    for s in ["ab", "Ab", "b", "d", "ae", "f", "a", "1212", "a12", "12", "aab", ""]:
        assert dfa.matches(s.encode()) == oracle.accepts(s), s
    with pytest.raises(GrammarError, match="a terminal takes no modifier: [?]A"):
        compile_grammar_text('start: A\n?A: "a"', "lark")

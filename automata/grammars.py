"""One entry for the grammar front ends (docs/grammars.md): GBNF (`corral.automata.gbnf`) and
Lark (`corral.automata.lark`) text to a canonical DFA, recursion unrolled to a bound
(`corral.automata.grammar_tree`)."""

from __future__ import annotations

from corral.automata.dfa import Dfa
from corral.automata.gbnf import compile_gbnf
from corral.automata.grammar_tree import CompiledGrammar
from corral.automata.lark import compile_lark
from corral.automata.limits import Limits

SYNTAXES = {"gbnf": compile_gbnf, "lark": compile_lark}


def compile_grammar_text(
    text: str, syntax: str = "gbnf", limits: Limits | None = None, max_recursion: int | None = None
) -> CompiledGrammar:
    """The grammar `text` in `syntax` ("gbnf" or "lark") compiled: a `CompiledGrammar` (the DFA,
    the recursion bound it was unrolled with, the rules cut; `.exact` when none was).

    Raises:
        ValueError: an unknown `syntax`, or `max_recursion` below 1.
        GrammarError: a syntax error (line and column), an undefined rule, a refused construct.
        EmptyLanguageError: the grammar derives no string within the bound.
        GrammarTooLargeError: a recursive grammar passes a state limit even unrolled 1 deep.
        LimitError: another limit of `limits` was passed.
    """
    if syntax not in SYNTAXES:
        raise ValueError(f"unknown grammar syntax {syntax!r}: expected 'gbnf' or 'lark'")
    return SYNTAXES[syntax](text, limits, max_recursion)


def grammar_to_dfa(
    text: str, syntax: str = "gbnf", limits: Limits | None = None, max_recursion: int | None = None
) -> Dfa:
    """The canonical DFA of the grammar `text` in `syntax` ("gbnf" or "lark"): trans int32
    `[n_states, 256]`, as `regex_to_dfa` gives. Raises what `compile_grammar_text` raises."""
    return compile_grammar_text(text, syntax, limits, max_recursion).dfa

"""corral.automata: regexes and JSON Schemas to canonical byte DFAs (docs/design.md sections 2 and
3), or to DFAs made on demand (`LazyDfa`, `lazy_regex_dfa`, `lazy_schema_dfa`); GBNF and Lark
grammars to DFAs, recursion unrolled to a bound (docs/grammars.md).

Pure Python and NumPy; nothing here imports Numba.
"""

from corral.automata.compile import regex_to_dfa, tree_to_dfa
from corral.automata.dfa import DEAD, Dfa
from corral.automata.errors import (
    ConstrainError,
    EmptyLanguageError,
    EmptySchemaError,
    GrammarError,
    GrammarTooLargeError,
    LimitError,
    NonFiniteNumberError,
    PatternError,
    PatternTooLongError,
    RepetitionTooLargeError,
    SchemaError,
    SchemaTextError,
    SubsetWorkError,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
)
from corral.automata.gbnf import gbnf_to_dfa
from corral.automata.grammar_tree import CompiledGrammar
from corral.automata.grammars import compile_grammar_text, grammar_to_dfa
from corral.automata.lark import lark_to_dfa
from corral.automata.lazy import LazyDfa, lazy_regex_dfa, lazy_schema_dfa
from corral.automata.limits import Limits, SchemaLimits
from corral.automata.parse import escape, parse
from corral.automata.schema import (
    SchemaCompile,
    compile_schema_dfa,
    dumps,
    json_object_regex,
    json_object_tree,
    json_schema_to_regex,
    schema_to_dfa,
    schema_to_tree,
)

__all__ = [
    "DEAD",
    "ConstrainError",
    "Dfa",
    "EmptyLanguageError",
    "EmptySchemaError",
    "CompiledGrammar",
    "GrammarError",
    "GrammarTooLargeError",
    "LazyDfa",
    "LimitError",
    "Limits",
    "PatternError",
    "PatternTooLongError",
    "RepetitionTooLargeError",
    "SchemaError",
    "SubsetWorkError",
    "TooManyDfaStatesError",
    "TooManyNfaStatesError",
    "NonFiniteNumberError",
    "SchemaCompile",
    "SchemaLimits",
    "SchemaTextError",
    "compile_schema_dfa",
    "dumps",
    "json_object_regex",
    "json_object_tree",
    "json_schema_to_regex",
    "lazy_regex_dfa",
    "lazy_schema_dfa",
    "schema_to_dfa",
    "schema_to_tree",
    "escape",
    "compile_grammar_text",
    "gbnf_to_dfa",
    "grammar_to_dfa",
    "lark_to_dfa",
    "parse",
    "regex_to_dfa",
    "tree_to_dfa",
]

"""The error hierarchy of corral's compilers and kernels (one hierarchy, mapped to OpenAI's
error shape in one place, `corral.tools`; docs/design.md section 5 "Errors").

Every error corral raises on bad input is a `ConstrainError`. Subclasses carry what the API layer
needs to name the culprit: a position in a pattern, a JSON pointer and keyword in a schema, or the
limit that was passed and its configured value.
"""

from __future__ import annotations


def excerpt(text: str, most: int = 80) -> str:
    """`text` quoted for an error message (`repr`), cut to its first `most` characters and its
    length when longer: an error never repeats a pattern of 100,000 characters."""
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}... ({len(text)} characters)"


class ConstrainError(ValueError):
    """Base of every error raised by corral's compilers, kernels and samplers."""


class PatternError(ConstrainError):
    """A regex outside the supported subset or malformed (docs/design.md section 2).

    Attributes:
        pattern: the pattern text.
        position: 0-based index (in characters) of the offending place in `pattern`.
        reason: what is wrong there, in a few words.
    """

    def __init__(self, pattern: str, position: int, reason: str):
        self.pattern = pattern
        self.position = position
        self.reason = reason
        super().__init__(f"position {position}: {reason}")


class EmptyLanguageError(ConstrainError):
    """The pattern or schema matches no string at all, so no output could satisfy it."""


class LimitError(ConstrainError):
    """A documented size limit was passed (see `corral.automata.Limits`).

    Attributes:
        limit: the name of the `Limits` field that was passed.
        value: its configured value.
    """

    def __init__(self, limit: str, value: int, detail: str):
        self.limit = limit
        self.value = value
        super().__init__(f"{detail} (limit {limit}={value})")


class PatternTooLongError(LimitError):
    """The pattern text is longer than `Limits.max_pattern_length` characters."""


class RepetitionTooLargeError(LimitError):
    """A counted repetition `{m,n}` has a bound above `Limits.max_repetition`."""


class TooManyNfaStatesError(LimitError):
    """The Thompson NFA would have more than `Limits.max_nfa_states` states.

    Attributes:
        pointer: for a JSON Schema, the JSON pointer of the deepest subschema whose NFA alone
            passes the limit, also at the start of the message; None for a regex, or when no
            part of the schema alone passes it.
    """

    pointer: str | None = None


class TooManyDfaStatesError(LimitError):
    """Subset construction would make more than `Limits.max_dfa_states` DFA states."""


class SubsetWorkError(LimitError):
    """Subset construction would do more than `Limits.max_subset_work` units of work (NFA
    states visited while making DFA states): a DFA whose states are large sets of NFA states,
    such as `((a?){1000}){4}`, is refused before the work grows past about a second."""


class SchemaError(ConstrainError):
    """A JSON Schema outside the supported subset or malformed (docs/design.md section 3).

    Attributes:
        pointer: JSON pointer (RFC 6901) of the offending subschema, "" for the root.
        keyword: the keyword at fault, or None when the subschema as a whole is.
        reason: what is wrong, in a few words.
    """

    def __init__(self, pointer: str, keyword: str | None, reason: str):
        self.pointer = pointer
        self.keyword = keyword
        self.reason = reason
        super().__init__(f"{pointer or '/'}: {reason}")


class EmptySchemaError(EmptyLanguageError, SchemaError):
    """The schema admits no value corral can write; `pointer` and `keyword` name the
    subschema and keyword where the language first became empty (`keyword` None for a `false`
    schema, or when only the whole schema's automaton was found empty). Both an
    `EmptyLanguageError` and a `SchemaError`."""


class SchemaTextError(ConstrainError):
    """The schema compiles to a tree but has no regex-text rendering (a pattern combined with a
    length bound, compiled by a product automaton); use `schema_to_tree` or `schema_to_dfa`
    (docs/design.md section 3)."""


class NonFiniteNumberError(ConstrainError):
    """`dumps` was given NaN or an infinity, which JSON cannot write (docs/design.md section 3:
    "NaN and infinities refused")."""


class GrammarError(ConstrainError):
    """A GBNF or Lark grammar that is malformed or outside the supported dialect
    (docs/grammars.md): a syntax error, an undefined rule, a refused construct.

    Attributes:
        line, column: 1-based position of the offending place in the grammar text.
        reason: what is wrong there, in a few words.
        rule: the rule at fault when one is (an undefined or left-recursive rule), else None.
    """

    def __init__(self, line: int, column: int, reason: str, rule: str | None = None):
        self.line = line
        self.column = column
        self.reason = reason
        self.rule = rule
        super().__init__(f"line {line} column {column}: {reason}")


class GrammarTooLargeError(LimitError):
    """A recursive grammar passes a state limit even with its recursion unrolled one level deep
    (`corral.automata.grammar_tree.compile_grammar`). `rules` names the recursive rules."""

    def __init__(self, limit: str, value: int, detail: str, rules: tuple[str, ...]):
        self.rules = rules
        super().__init__(limit, value, detail)

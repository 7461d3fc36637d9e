"""Size limits of the regex and schema compilers (docs/design.md section 2: "Limits (documented,
configurable) ... Past a limit: a clear error, never a hang or an out-of-memory").

The defaults keep a refused blow-up to about a second of CPU and a few tens of megabytes: the
pattern `(a|b)*a(a|b){24}`, whose DFA has 2**25 states, is refused by `max_dfa_states` after
building 40,000 of them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Configurable size limits; every compiler function takes `limits: Limits | None = None`
    (None means `Limits()`, the defaults below).

    Attributes:
        max_pattern_length: longest accepted pattern, in characters (default 100,000).
            Past it: `PatternTooLongError`.
        max_repetition: largest bound accepted in a counted repetition `{m}`, `{m,}`, `{m,n}`
            (default 1,000, the largest count JSON Schema string lengths commonly use).
            Past it: `RepetitionTooLargeError`.
        max_nfa_states: most states the Thompson NFA may have (default 250,000). Past it:
            `TooManyNfaStatesError`, raised while building.
        max_dfa_states: most states subset construction may create before minimization
            (default 40,000, a table of at most 40 MB; each counted character of a string
            costs about 13 states, for UTF-8 sequences and escapes). Past it:
            `TooManyDfaStatesError`, raised while building.
        max_subset_work: most work subset construction may do (default 200,000,000): NFA
            states gathered into the DFA states' sets, one unit each, and each step of its
            Python loops (an NFA state visited by a closure search or read by a kernel's loops,
            an (edge, class) pair of an atom plan), `PYTHON_STEP_UNITS` (20) each
            (`corral.automata.determinize`). It bounds what `max_dfa_states` does not: DFA
            states that are large sets of NFA states, as in `((a?){1000}){4}` (a DFA of 4,001
            states, each a set of up to 8,000 NFA states). Past it: `SubsetWorkError`, raised
            while building.

    A parsed pattern's NFA is also counted before it is built
    (`corral.automata.nfa.check_tree_states`): `(a{1000}){1000}` is refused by
    `max_nfa_states` at once. Minimization is O(transitions x log states) (Hopcroft's
    refinement after a few of Moore's rounds), bounded by `max_dfa_states`.
    """

    max_pattern_length: int = 100_000
    max_repetition: int = 1_000
    max_nfa_states: int = 250_000
    max_dfa_states: int = 40_000
    max_subset_work: int = 200_000_000


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class SchemaLimits:
    """Configurable limits of the JSON Schema compiler (docs/design.md section 3); every schema
    function takes `schema_limits: SchemaLimits | None = None` (None means `SchemaLimits()`).
    Past a limit: `LimitError` naming the field, except where a bound is lowered as said.

    Attributes:
        max_depth: deepest nesting of subschemas (and inlined `$ref`s) on one path (default 64).
        max_enum_values: most values in one `enum` (default 10,000).
        max_recursion: times one `$ref` target may occur on a path; deeper is cut (default 3).
            When a compile that unrolled a `$ref` cycle passes `Limits.max_nfa_states` or
            `max_dfa_states`, the schema is compiled again with it lowered to 2, then 1 (a
            smaller language, still sound); if every depth fails, the first error is raised.
            A depth whose NFA is counted past the limit before it is built
            (`corral.automata.schema.nfa_size`) fails at once, without building it.
        any_value_depth: container nesting of the "any JSON value" language used for `{}`,
            `true` and untyped schemas (default 3; 0 refuses such schemas).
        max_string_length: `maxLength` above it is lowered to it, `minLength` above it refused
            (default 256 characters). When a compile passes a state limit at every
            `max_recursion` depth, it is lowered with `max_array_length` along
            `NARROWER_BOUNDS` (a smaller language, still sound; reported as narrowed).
        max_array_length: `maxItems` above it is lowered to it, `minItems` above it refused
            (default 64 items).
        max_properties: most members in one object (default 5,000).
        max_regex_length: longest regex text `json_schema_to_regex` renders (default 2,000,000
            characters).
        max_product_nodes: most nodes of a pattern x length product (default 200,000).
        max_algebra_states: most DFA states the schema algebra (`not`, exact `oneOf`, `allOf`
            intersections, `if`/`then`/`else`: `corral.automata.schema.algebra`) may build in
            one compile, summed over its sub-schema automata and products (default 150,000):
            past it the schema is refused, as a blow-up, rather than compiled for many
            seconds.
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
    max_algebra_states: int = 150_000


DEFAULT_SCHEMA_LIMITS = SchemaLimits()

MAX_STITCHED_STATES = 250_000
"""Most states a stitched DFA (`corral.automata.stitch`: an envelope and a copy of each piece
per hole) may have: a table of at most 250 MB (`n_states * 256 * 4` bytes). Each piece alone
obeys `Limits.max_dfa_states`. Past it: `TooManyDfaStatesError` naming `max_stitched_states`,
raised before the table is allocated."""

NARROWER_BOUNDS = ((64, 16), (16, 4))
"""The narrowed compiles' (`max_string_length`, `max_array_length`), tried in order when a
schema passes `Limits.max_nfa_states`, `max_dfa_states` or `max_subset_work` at every unrolling
depth (`corral.automata.schema.compiler.narrower_limits`): each counted character costs about 13
DFA states, so a member whose `maxLength` is lowered from 256 to 64 characters costs about a
quarter. A step never raises a bound below what it was asked at."""

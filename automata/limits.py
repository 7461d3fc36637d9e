"""Size limits of the regex and schema compilers (DESIGN.md section 2: "Limits (documented,
configurable) ... Past a limit: a clear error, never a hang or an out-of-memory").

The defaults keep a refused blow-up to about a second of CPU and a few tens of megabytes: the
pattern `(a|b)*a(a|b){24}`, whose DFA has 2**25 states, is refused by `max_dfa_states` after
building 20,000 of them.
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
        max_nfa_states: most states the Thompson NFA may have (default 250,000, about 0.5 s of
            construction). Past it: `TooManyNfaStatesError`, raised while building.
        max_dfa_states: most states subset construction may create before minimization
            (default 20,000, about a second). Past it: `TooManyDfaStatesError`, raised while
            building.
    """

    max_pattern_length: int = 100_000
    max_repetition: int = 1_000
    max_nfa_states: int = 250_000
    max_dfa_states: int = 20_000


DEFAULT_LIMITS = Limits()

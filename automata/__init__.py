"""corral.automata: regexes and JSON Schemas to canonical byte DFAs (DESIGN.md sections 2 and 3).

Pure Python and NumPy; nothing here imports Numba.
"""

from corral.automata.dfa import DEAD, Dfa
from corral.automata.errors import (
    ConstrainError,
    EmptyLanguageError,
    LimitError,
    PatternError,
    PatternTooLongError,
    RepetitionTooLargeError,
    SchemaError,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
)

__all__ = [
    "DEAD",
    "ConstrainError",
    "Dfa",
    "EmptyLanguageError",
    "LimitError",
    "PatternError",
    "PatternTooLongError",
    "RepetitionTooLargeError",
    "SchemaError",
    "TooManyDfaStatesError",
    "TooManyNfaStatesError",
]

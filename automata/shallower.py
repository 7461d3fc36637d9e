"""The one loop of "unroll again, one level shallower, on a state limit", for every compile whose
language depends on an unrolling depth: a JSON Schema's `$ref` cycles (`schema.compiler`), a tool
grammar around schemas (`corral.tools.grammar`), a GBNF or Lark grammar's recursive rules
(`grammar_tree`). Each depth's language is a subset of the deeper one's, so a shallower retry
narrows the language and never widens it. A schema compile goes on past depth 1 with narrower
string and array bounds (`corral.automata.schema.compiler.narrower_limits`), one chain of
ever smaller languages."""

from corral.automata.errors import (
    ConstrainError,
    SubsetWorkError,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
)

STATE_LIMIT_ERRORS = (TooManyNfaStatesError, TooManyDfaStatesError, SubsetWorkError)
"""The limits after which an unrolled compile is tried again shallower."""


class StateLimit(Exception):
    """An attempt of `retry_shallower` passed a state limit (`error`, one of
    `STATE_LIMIT_ERRORS`); `recursive`: its language depended on the unrolling depth (a `$ref`
    cycle was unrolled); `depth`: the deepest `max_recursion` it used; `longest`: None, or a
    schema compile's largest (`maxLength`, `maxItems`) as compiled, which narrower bounds would
    cut (`corral.automata.schema.compiler.narrower_limits`)."""

    def __init__(
        self, error: ConstrainError, recursive: bool, depth: int, longest: tuple | None = None
    ):
        self.error, self.recursive, self.depth, self.longest = error, recursive, depth, longest


def retry_shallower(attempt, depth: int, first=None, stop=(ConstrainError,)):
    """The one loop of "a shallower `$ref` unrolling on a state limit", for a schema alone
    (`compile_schema`) or a grammar around schemas (`corral.tools.grammar.compile_dfa`).

    Calls `attempt(depth)`; while it raises `StateLimit` with `recursive` and a `depth` above
    1, calls it again at one below that depth (the depths of `shallower_recursion`). Returns
    `(attempt's result, first)`, `first` the first failed attempt's error (or the `first`
    given: a deeper unrolling the caller already skipped), its traceback dropped.

    Raises: `first` when the depths run out, or when an attempt after a failed one raises one
    of `stop` (a shallower depth's own error is not reported); an error of `stop` from an
    attempt before any failure, as it is.
    """
    while True:
        try:
            return attempt(depth), first
        except StateLimit as failed:
            if first is None:  # the failed attempt's frames are freed now
                first = failed.error.with_traceback(None)
            if not failed.recursive or failed.depth <= 1:
                break
            depth = failed.depth - 1
        except stop:
            if first is None:
                raise
            break
    raise first

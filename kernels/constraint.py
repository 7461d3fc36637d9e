"""One answer's walk through a grammar (DESIGN.md section 4).

A `Constraint` holds the DFA state reached by the tokens written so far. `mask()` says which tokens
may come next; `advance(token)` moves on and refuses a token the grammar does not allow. EOS (any
of the vocabulary's EOS ids) is allowed exactly in accepting states and makes the constraint
`done`. A grammar that is complete with no text token left to allow also ends: the constraint is
`done` at once, and the engine stops with finish_reason `stop` without sampling EOS.
"""

from __future__ import annotations

import numpy as np
from corral.kernels.errors import TokenNotAllowedError
from corral.kernels.index import TokenIndex


class Constraint:
    """The state of one answer in one grammar's `TokenIndex`.

    Attributes:
        index: the shared, read-only `TokenIndex`.
        state: the current DFA state (0 at the start).
        done: True once EOS was taken, or once the state accepts and no text token is allowed.
    """

    __slots__ = ("index", "state", "done")

    def __init__(self, index: TokenIndex, state: int = 0, done: bool = False):
        self.index = index
        self.state = int(state)
        self.done = bool(done)
        if not self.done:
            self._end_if_nothing_left()

    def mask(self, max_distance: int | None = None) -> np.ndarray:
        """The packed mask of the tokens allowed next: uint32 `[ceil(V / 32)]` (shared and
        read-only; do not write to it).

        Args:
            max_distance: when given, allow only tokens after which acceptance is at most this
                many bytes away (`TokenIndex.mask_within`), for an engine running out of tokens;
                such a mask may be all-false, and the caller falls back to `mask()`.

        Raises:
            TokenNotAllowedError: the constraint is done (nothing may follow).
        """
        if self.done:
            raise TokenNotAllowedError("the constraint is done: no token may follow")
        if max_distance is None:
            return self.index.mask(self.state)
        return self.index.mask_within(self.state, max_distance)

    @property
    def distance(self) -> int:
        """The fewest bytes from the current state to a complete answer (0 when complete)."""
        return int(self.index.distance[self.state])

    def is_allowed(self, token: int) -> bool:
        """True when `token` may come next. O(1) bit test, or a trie walk on a lazy miss."""
        if self.done or not 0 <= token < self.index.vocabulary.size:
            return False
        row = self.index.mask(self.state)
        return bool((int(row[token >> 5]) >> (token & 31)) & 1)

    def advance(self, token: int) -> None:
        """Append `token`: EOS (in an accepting state) makes the constraint done; a text token
        moves to its end state, after which the constraint is done if that state accepts and no
        text token is allowed there.

        Raises:
            TokenNotAllowedError: the constraint is done, or `token` is not allowed (dead, special,
                empty, or EOS in a state that does not accept).
        """
        if self.done:
            raise TokenNotAllowedError(f"token {token} after the end of the answer")
        index = self.index
        if not 0 <= token < index.vocabulary.size:
            raise TokenNotAllowedError(f"token {token} is outside the vocabulary")
        if index.is_eos(token):
            if not index.is_accepting(self.state):
                raise TokenNotAllowedError(f"EOS token {token} before the answer is complete")
            self.done = True
            return
        state = index.next_state(self.state, token)
        if state < 0:
            raise TokenNotAllowedError(
                f"token {token} ({index.vocabulary.tokens[token]!r}) is not allowed in state "
                f"{self.state}"
            )
        self.state = state
        self._end_if_nothing_left()

    def is_complete(self) -> bool:
        """True when the text written so far is a complete answer (the state accepts)."""
        return self.done or self.index.is_accepting(self.state)

    def copy(self) -> Constraint:
        """An independent constraint at the same place (same shared index)."""
        return Constraint(self.index, self.state, self.done)

    def _end_if_nothing_left(self) -> None:
        if self.index.is_accepting(self.state) and not self.index.can_continue(self.state):
            self.done = True

    def __repr__(self) -> str:
        return f"Constraint(state={self.state}, done={self.done})"

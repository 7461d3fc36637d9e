"""One answer's walk through a grammar, a matcher in the manner of XGrammar's `GrammarMatcher`
(docs/design.md section 4).

A `Constraint` holds the DFA state reached by the text written so far. `mask()` says which tokens
may come next; `advance(token)` moves on and refuses a token the grammar does not allow;
`advance_bytes(data)` moves on by raw bytes (text that was not sampled under the mask: the bytes
after a lazy trigger, or a respelled piece), so a caller never reaches into the index or the DFA.
EOS (any of the vocabulary's EOS ids) is allowed exactly in accepting states and makes the
constraint `done`. A grammar that is complete with no text token left to allow also ends: the
constraint is `done` at once, and the engine stops with finish_reason `stop` without sampling EOS.

The one budget rule is counted in tokens: `tokens_to_complete()` is the fewest tokens from here to
a complete answer, and `mask(tokens_left)` allows only the tokens after which a complete answer
still fits in the tokens left.

Jump-forward (SGLang's compressed FSM; XGrammar and llguidance call it jump-forward):
`forced_bytes()` is the text the grammar forces from here: the chain of states that accept nothing
and allow exactly one byte (a required key, `","`, a `const`), read from the DFA's transition
table. Every complete answer from the current state begins with it, so an engine may write it
without asking the model (`corral.model.jump_forward`).
"""

from __future__ import annotations

import weakref

import numba
import numpy as np
from corral.kernels.errors import TokenNotAllowedError
from corral.kernels.masks.index import TokenIndex

_FORCED: weakref.WeakKeyDictionary[TokenIndex, tuple[np.ndarray, np.ndarray]] = (
    weakref.WeakKeyDictionary()
)
"""(transitions int32 `[n_states, 256]`, `forced_byte_table`) of each index in use, built on the
first `forced_bytes` call."""


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

    def mask(self, tokens_left: int | None = None) -> np.ndarray:
        """The packed mask of the tokens allowed next: uint32 `[ceil(V / 32)]` (do not write to
        it: it may be shared).

        Args:
            tokens_left: the tokens the answer may still take, this one included (>= 1), or None
                for no budget. When given and some state of the grammar is more than
                `tokens_left - 1` tokens from acceptance, only the tokens after which a complete
                answer still fits in `tokens_left - 1` further tokens are allowed
                (`TokenIndex.budget_mask`, EOS included when the state accepts). Where no
                token fits (the budget was already too small, e.g. a lazy trigger fired late),
                the plain mask is returned and the answer will be cut by the budget.

        Raises:
            TokenNotAllowedError: the constraint is done (nothing may follow).
            ValueError: `tokens_left` < 1.
        """
        if self.done:
            raise TokenNotAllowedError("the constraint is done: no token may follow")
        index = self.index
        if tokens_left is None:
            return index.mask(self.state)
        if tokens_left < 1:
            raise ValueError(f"tokens_left must be >= 1, not {tokens_left}")
        if (
            index.max_token_distance_bound <= tokens_left - 1  # known without the trie walks
            or index.max_token_distance <= tokens_left - 1
        ):
            return index.mask(self.state)  # every allowed token keeps an answer within reach
        within = index.budget_mask(self.state, tokens_left - 1)
        return within if within is not None else index.mask(self.state)

    def fill_mask(self, out: np.ndarray, tokens_left: int | None = None) -> np.ndarray:
        """Write `mask(tokens_left)` into the caller's `out` (a row of its batch's bitmask) and
        return `out`: no array is made, and a mask already known costs one O(V / 32) copy
        (`TokenIndex.fill_mask`).

        Args:
            out: writable uint32 or int32 `[ceil(V / 32)]` (int32: the same bits, XGrammar's
                and llguidance's bitmask dtype).
            tokens_left: as in `mask`.

        Raises:
            TokenNotAllowedError: the constraint is done. ValueError: `tokens_left` < 1, or
                `out` is not such an array (naming its dtype and shape).
        """
        if tokens_left is None and not self.done:
            return self.index.fill_mask(self.state, out)
        row = self.mask(tokens_left)
        return self.index.fill_mask_from(row, out)

    def tokens_to_complete(self) -> int:
        """The fewest tokens (EOS not counted) from here to a complete answer: 0 when complete,
        -1 when no token sequence completes it (`TokenIndex.token_distance`)."""
        if self.done:
            return 0
        return int(self.index.token_distance[self.state])

    def completes_within(self, tokens: int | float) -> bool:
        """True when a complete answer can be reached in at most `tokens` more text tokens:
        `0 <= tokens_to_complete() <= tokens`, decided from `TokenIndex.token_distance_bound`
        (no trie walk) when that bound suffices."""
        if self.done:
            return True
        bound = int(self.index.token_distance_bound[self.state])
        if 0 <= bound <= tokens:
            return True
        needed = self.tokens_to_complete()
        return 0 <= needed <= tokens

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
        after = self.index.after(self.state, token)  # remembered per (state, token)
        if after is None:
            self._refuse(token)
        self.state, self.done = after

    def _refuse(self, token: int) -> None:
        """Raise the `TokenNotAllowedError` that says why `token` is not allowed here."""
        index = self.index
        if not 0 <= token < index.vocabulary.size:
            raise TokenNotAllowedError(f"token {token} is outside the vocabulary")
        if index.is_eos(token):
            raise TokenNotAllowedError(f"EOS token {token} before the answer is complete")
        raise TokenNotAllowedError(
            f"token {token} ({index.vocabulary.tokens[token]!r}) is not allowed in state "
            f"{self.state}"
        )

    def advance_bytes(self, data: bytes) -> None:
        """Append raw text bytes (not a token): walk them through the DFA. All or nothing: on a
        refused byte the constraint is left as it was. Afterwards the constraint is done if the
        state accepts and no text token is allowed there. O(len(data)).

        Raises:
            TokenNotAllowedError: the constraint is done, or a byte of `data` is dead.
        """
        if self.done:
            raise TokenNotAllowedError(f"bytes {data!r} after the end of the answer")
        state = self.index.step_bytes(self.state, data)
        if state < 0:
            raise TokenNotAllowedError(f"bytes {data!r} are not allowed in state {self.state}")
        self.state = state
        self._end_if_nothing_left()

    def forced_bytes(self, limit: int | None = None) -> bytes:
        """The bytes every continuation from here begins with, up to the first state that
        accepts or allows more than one byte (b"" when the constraint is done or the state is
        such a state); at most `limit` bytes (None: no limit). O(len(result)) after a first
        O(n_states * 256) table per index (`forced_byte_table`), shared by its constraints."""
        if self.done:
            return b""
        index = self.index
        tables = _FORCED.get(index)
        if tables is None:
            trans = np.ascontiguousarray(index.dfa.trans, dtype=np.int32)
            accept = np.ascontiguousarray(index.dfa.accept, dtype=np.bool_)
            tables = _FORCED[index] = (trans, forced_byte_table(trans, accept))
        trans, table = tables
        if table[self.state] < 0:
            return b""
        # a chain visits distinct states (a cycle of them could never accept), so n_states bounds it
        cap = index.n_states if limit is None else min(limit, index.n_states)
        return forced_chain(trans, table, self.state, cap).tobytes()

    def next_bytes(self) -> bytes:
        """The bytes the grammar allows next, ascending (b"" when the constraint is done): each
        begins some continuation toward a complete answer (the DFA keeps only live states).
        O(256)."""
        if self.done:
            return b""
        row = self.index.dfa.trans[self.state]
        return np.flatnonzero(row >= 0).astype(np.uint8).tobytes()

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


@numba.njit(cache=True)
def forced_byte_table(trans, accept):
    """int16 `[n_states]`: the one live byte of each state that does not accept and has exactly
    one live byte in `trans` (int32 `[n_states, 256]`, -1 dead), else -1. O(n_states * 256)."""
    n = trans.shape[0]
    table = np.full(n, -1, np.int16)
    for s in range(n):
        if accept[s]:
            continue
        only = -1
        for b in range(256):
            if trans[s, b] >= 0:
                if only >= 0:
                    only = -2
                    break
                only = b
        if only >= 0:
            table[s] = only
    return table


@numba.njit(cache=True)
def forced_chain(trans, table, state, limit):
    """uint8 `[n <= limit]`: the bytes of `table` (`forced_byte_table`) read from `state` on,
    following `trans`, until a state without a forced byte. O(n)."""
    out = np.empty(limit, np.uint8)
    n = 0
    while n < limit and table[state] >= 0:
        b = table[state]
        out[n] = b
        n += 1
        state = trans[state, b]
    return out[:n]

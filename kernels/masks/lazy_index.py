"""Masks of a DFA made on demand (`corral.automata.lazy.LazyDfa`): a grammar's first mask
without its whole DFA (docs/python.md, "Masks made on demand").

`TokenIndex` walks a finished table. A `LazyTokenIndex` keeps a table of the rows made so far,
in which an edge into a state whose row is not made yet is written -(t + 2) instead of t. The
trie walk (`masks.index.lazy_mask`) skips such an edge's subtree as if it were dead and
returns the states it met; their rows are made (`LazyDfa.row`), the edges into them rewritten
to t, and the state is walked again, until a walk meets none. A mask then costs the rows of
the states within a token's bytes of it, and a walk per round; the finished mask is kept.

Rounds add up for a state far from the rows made (one per level of states a token crosses, as
in a length-bounded string's chain; bench/results/README.md), so by default only the first mask
is walked this way: the next new one first makes the whole DFA at once (`finish`, about the
eager construction's cost for the states left), and every mask after is one walk, as
`TokenIndex`'s visit mode. The first mask comes sooner; the DFA's cost comes at the second.

The masks are those `TokenIndex` gives on the canonical DFA of the same language (a state of
the `LazyDfa` and the canonical state reached by the same bytes accept the same strings, and
every state made is live). The state numbers are the `LazyDfa`'s, not the canonical ones.
What it does not have: the budget of `TokenIndex` (`token_distance`, `mask_within_tokens`),
which needs every state; the generation engine, which checks budgets, uses `TokenIndex`.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.automata.lazy import LazyDfa
from corral.kernels.masks.index import (
    ALL_CATEGORIES,
    NO_START,
    build_table,
    check_bytes,
    check_token,
    choose_mode,
    copy_mask,
    lazy_mask,
    run_categories,
    unique_rows,
    unpack_ids,
    walk_trie,
    walk_work,
)
from corral.kernels.masks.trie import BYTE_CATEGORY, loop_categories
from corral.kernels.masks.vocabulary import Vocabulary

PENDING_SLOTS = 256
"""The states a walk reports at most per round (more are met again in the next round)."""


class LazyTokenIndex:
    """Masks and transitions of a `LazyDfa` over a vocabulary, its rows made as walks need them
    (module docstring). Not thread-safe: one reader at a time (it writes its table).

    Args:
        dfa: the grammar's `LazyDfa` (`corral.automata.lazy`).
        vocabulary: the model's `Vocabulary` (its trie is built on first use and cached).
        lazy_masks: how many masks are walked on the rows made so far; the next new one first
            makes the whole DFA (`finish`), so later masks cost one walk each (a mask of a
            state near few made rows can take many rounds). Default 1: the first mask alone
            is lazy. None: never finish.

    Raises (from any method that makes rows):
        TooManyDfaStatesError, SubsetWorkError: a row would pass the `LazyDfa`'s limits.
    """

    def __init__(self, dfa: LazyDfa, vocabulary: Vocabulary, lazy_masks: int | None = 1):
        if not isinstance(dfa, LazyDfa):
            raise TypeError(
                f"LazyTokenIndex takes a LazyDfa, not {type(dfa).__name__} (a Dfa: TokenIndex)"
            )
        if lazy_masks is not None and (not isinstance(lazy_masks, int) or lazy_masks < 0):
            raise ValueError(f"lazy_masks must be None or an int >= 0, not {lazy_masks!r}")
        self.lazy_masks = lazy_masks
        self.finished = False
        self.dfa = dfa
        self.vocabulary = vocabulary
        self._trie = t = vocabulary.trie
        self._trie_arrays = walk_trie(t)
        self._eos = np.asarray(vocabulary.eos_ids, dtype=np.int32)
        self._eos_set = frozenset(vocabulary.eos_ids)
        self._n_words = vocabulary.n_words
        self._trans = np.full((0, 256), -1, np.int32)  # rows made; -(t + 2): t not made yet
        self._loops = np.zeros(0, np.uint16)
        self._accept = np.zeros(0, np.bool_)
        self._made = np.zeros(0, np.bool_)  # per state: its row is in the table
        self._into: dict[int, list[int]] = {}  # state not made -> rows with an edge into it
        self._masks: dict[int, np.ndarray] = {}
        self._pending = np.empty(PENDING_SLOTS, np.int32)
        self._fresh = np.empty(256, np.int32)  # `_write_row`'s targets not made yet
        self.walks = 0  # trie walks so far (rounds of `mask`)

    @property
    def n_words(self) -> int:
        """`ceil(V / 32)`, the length of a mask."""
        return self._n_words

    def _grow(self, n: int) -> None:
        """Make room for states 0..n-1 in the table (doubling)."""
        size = self._trans.shape[0]
        if n <= size:
            return
        size = max(n, 2 * size, 16)
        trans = np.full((size, 256), -1, np.int32)
        trans[: self._trans.shape[0]] = self._trans
        loops = np.zeros(size, np.uint16)
        loops[: self._loops.shape[0]] = self._loops
        accept = np.zeros(size, np.bool_)
        accept[: self._accept.shape[0]] = self._accept
        made = np.zeros(size, np.bool_)
        made[: self._made.shape[0]] = self._made
        self._trans, self._loops, self._accept, self._made = trans, loops, accept, made

    def _make(self, state: int) -> None:
        """Copy `state`'s row into the table (making it in the `LazyDfa` if needed), its edges
        into states not made yet written -(t + 2), and rewrite the edges into it: one kernel
        call (`_write_row`) and a rewrite per row that points at `state`."""
        row = self.dfa.row(state)
        self._grow(self.dfa.n_states)
        self._made[state] = True
        loops, n_fresh = _write_row(self._trans, self._made, state, row, BYTE_CATEGORY, self._fresh)
        self._loops[state] = loops  # the categories `state` loops on whole
        self._accept[state] = self.dfa.accepting(state)
        into = self._into
        for t in self._fresh[:n_fresh].tolist():
            into.setdefault(t, []).append(state)
        for source in into.pop(state, ()):
            _relink(self._trans, source, state)

    def mask(self, state: int) -> np.ndarray:
        """The packed mask of `state`: uint32 `[ceil(V / 32)]`, read-only, kept; walks until no
        edge into a state not made yet is met (module docstring). O(nodes visited) per walk.

        Raises:
            IndexError: `state` has not been made (see `LazyDfa.row`).
            RuntimeError: a walk reports only states already made (an edge left unrewritten:
                a bug, reported rather than walked forever).
        """
        known = self._masks.get(state)
        if known is not None:
            return known
        self._check(state)
        if self.lazy_masks is not None and len(self._masks) >= self.lazy_masks:
            self.finish()
            known = self._masks.get(state)
            if known is not None:
                return known
        if not (state < len(self._made) and self._made[state]):
            self._make(state)
        t = self._trie
        while True:
            loops = int(self._loops[state]) & ALL_CATEGORIES
            row, n_pending = lazy_mask(
                self._trans, self._loops, self._accept, self._trie_arrays, self._eos,
                self._n_words, t.max_depth, state, self._pending,
                self.vocabulary.loop_row(loops) if loops else NO_START,
            )  # fmt: skip
            self.walks += 1
            if n_pending == 0:
                break
            met = set(self._pending[: min(n_pending, PENDING_SLOTS)].tolist())
            new = [s for s in met if not self._made[s]]
            if not new:  # every reported state made: an edge not rewritten (a bug), not a loop
                raise RuntimeError(f"lazy table of state {state}: walk reports made states")
            for s in new:
                self._make(s)
        row.setflags(write=False)
        self._masks[state] = row
        return row

    def fill_mask(self, state: int, out: np.ndarray) -> np.ndarray:
        """Write the packed mask of `state` (`mask`) into the caller's `out` and return `out`:
        an O(V / 32) copy once the mask is known.

        Args:
            out: writable uint32 or int32 `[ceil(V / 32)]`.

        Raises:
            ValueError: `out` is not such an array. IndexError: `state` has not been made.
        """
        known = self._masks.get(state)
        return copy_mask(self.mask(state) if known is None else known, out)

    def finish(self) -> None:
        """Make every state of the DFA at once (`LazyDfa.finish`) and take its whole table:
        every later mask is one walk, or a lookup when every mask is cheap to make now
        (`choose_mode` says eager: then they are all made here, as `TokenIndex` does at
        construction). O(the eager construction of the states not made yet), once.

        Raises:
            TooManyDfaStatesError: the DFA passes the `LazyDfa`'s state limit.
        """
        if self.finished:
            return
        table = self.dfa.finish()
        n = table.shape[0]
        self._grow(n)
        self._trans[:n] = table
        self._loops[:n] = loop_categories(table)
        self._accept[:n] = [self.dfa.accepting(s) for s in range(n)]
        self._made[:n] = True
        self._into.clear()
        self.finished = True
        trans, loops = self._trans[:n], self._loops[:n]
        own, run = run_categories(trans, loops, self._trie.max_depth)
        work = walk_work(trans, loops, own, run, self._trie)
        if choose_mode(n, self.vocabulary.size, self._trie.n_nodes, work) == "eager":
            table = build_table(
                self._trans[:n], self._loops[:n], self._accept[:n], self.vocabulary, False
            )
            first, inverse = unique_rows(table)
            unique = table[first]
            unique.setflags(write=False)
            for state, k in enumerate(inverse.tolist()):
                self._masks.setdefault(state, unique[k])

    def allowed(self, state: int) -> np.ndarray:
        """The allowed token ids of `state`, ascending: int64 `[n_allowed]`."""
        return unpack_ids(self.mask(state))

    def next_state(self, state: int, token: int) -> int:
        """The state after `token` from `state`: -1 when the token is not allowed as text (dead,
        special, empty or EOS). Makes the rows it crosses. O(bytes of the token).

        Raises:
            IndexError: `state` has not been made, or `token` is not a token id.
        """
        self._check(state)
        data = self.vocabulary.tokens[check_token(token, self.vocabulary.size)]
        if not data or token in self._eos_set:
            return -1
        return self.step_bytes(state, data)

    def step_bytes(self, state: int, data: bytes) -> int:
        """The state after walking `data` from `state`, -1 at the first dead byte; makes the
        rows it crosses. O(len(data)).

        Raises:
            IndexError: `state` has not been made. TypeError: `data` is not bytes.
        """
        self._check(state)
        check_bytes(data)
        for b in data:
            if not (state < len(self._made) and self._made[state]):
                self._make(state)
            state = int(self._trans[state, b])
            if state < -1:
                state = -state - 2
            elif state < 0:
                return -1
        return state

    def is_accepting(self, state: int) -> bool:
        """Whether `state` accepts (EOS is allowed there).

        Raises:
            IndexError: `state` has not been made.
        """
        self._check(state)
        return self.dfa.accepting(state)

    def _check(self, state: int) -> None:
        if not 0 <= state < self.dfa.n_states:
            raise IndexError(f"state {state} has not been made (0 to {self.dfa.n_states - 1})")

    def is_eos(self, token: int) -> bool:
        return token in self._eos_set


@numba.njit(cache=True)
def _write_row(trans, made, state, row, byte_category, fresh):  # pragma: no cover - compiled
    """Write `row` (int32 `[256]`, -1 dead) as `trans[state]`, each edge into a state t not
    `made` as -(t + 2); the distinct such t go to `fresh` (int32 `[256]`). Returns (the
    categories `state` loops on whole, as `loop_categories`; how many t were written). O(256 x
    distinct targets not made)."""
    leaves = 0
    n = 0
    for b in range(256):
        t = row[b]
        if t >= 0 and not made[t]:
            trans[state, b] = -(t + 2)
            seen = False
            for k in range(n):
                if fresh[k] == t:
                    seen = True
                    break
            if not seen:
                fresh[n] = t
                n += 1
        else:
            trans[state, b] = t
        if t != state:
            leaves |= byte_category[b]
    return np.uint16(~leaves & 0xFFFF), n


@numba.njit(cache=True)
def _relink(trans, source, state):  # pragma: no cover - compiled
    """Rewrite row `source`'s edges into `state`, written -(state + 2) while it was not made,
    to `state`. O(256)."""
    pending = -(state + 2)
    for b in range(256):
        if trans[source, b] == pending:
            trans[source, b] = state

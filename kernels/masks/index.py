"""The token index of a grammar: which tokens each DFA state allows (docs/design.md section 4).

Token t is allowed in state s when walking all of its bytes from s through `dfa.trans` stays
live; the EOS ids are allowed exactly in accepting states; special (None) and empty tokens never.
Masks are packed bitsets, `uint32[ceil(V / 32)]`, bit `t % 32` of word `t // 32` is token t (the
layout XGrammar and vLLM use).

A mask is one depth-first walk of the vocabulary's byte trie (`masks.trie`) from s: the
walk keeps a stack of DFA states by depth, reads each node's byte from its parent's state, skips a
whole subtree at the first dead state, and writes bits straight into the packed row. A subtree
whose bytes all fall in byte categories on which the current state loops to itself (the inside of
a JSON string) is allowed whole without visiting it (`corral.kernels.masks.trie`); so is, from
the walk's start, a subtree within the state's run (`run_categories`: a length-bounded string's
counter, a string's UTF-8 characters), whose tokens the walk's start row holds. The cost is
O(visited nodes + allowed tokens), not O(total bytes of the vocabulary).

Three modes:
- eager: all states' masks at once by one Numba kernel, parallel over states (prange) from
  `PARALLEL_MIN_STATES` states, on the calling thread below; identical rows are stored once
  (`TokenIndex.n_unique_masks`).
- visit: each state's mask walked on its first request and kept for the index's life, identical
  rows stored once; lookups after the first are as cheap as eager ones. The first mask of a
  fresh grammar costs one walk instead of the whole table (time to first mask), and states a
  generation never visits cost nothing.
- lazy: one state at a time on first request, cached in a bounded LRU, for DFAs whose full table
  would be large.
`"auto"` (the default, `choose_mode`) is eager when every walk together is cheap: `walk_work`,
the nodes of the subtrees under the root's children that each state's walk enters (the most it
can visit), at most `EAGER_WORK_LIMIT` (16M), so that every mask after compile is a lookup;
else visit when `n_states * ceil(V / 32) * 4` bytes fits in `EAGER_LIMIT_BYTES` (32 MiB: 5,461
states at V = 49,152), else lazy. Every mode gives the same masks.

Budget-aware ending (`Constraint.mask(tokens_left)`, used by the generation engine):
`token_distance[s]` is the fewest text tokens from s to acceptance (`masks.distance`), and
`mask_within_tokens(s, k)` allows only the tokens that end in a state at token distance <= k (plus
EOS in accepting states): the plain mask from a per-state saturation budget on, below it one row
of a per-state table that one trie walk fills for every budget at once (`masks.budget`).
"""

from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict

import numba
import numpy as np
from corral.automata.dfa import Dfa
from corral.kernels.masks.budget import BudgetMasks
from corral.kernels.masks.distance import byte_distance
from corral.kernels.masks.trie import (
    BYTE_CATEGORY,
    DECODES_UTF8,
    N_CATEGORIES,
    UTF8_CATEGORIES,
    UTF8_DECODER,
    Trie,
    loop_categories,
)
from corral.kernels.masks.vocabulary import Vocabulary

ALL_CATEGORIES = (1 << N_CATEGORIES) - 1
"""The bits of the byte categories in a `loop_categories` value."""

EAGER_LIMIT_BYTES = 32 << 20
"""All-states tables larger than this many bytes are kept in a bounded LRU (lazy) instead."""

EAGER_WORK_LIMIT = 16_000_000
"""`auto` builds every mask at construction (eager) when `walk_work`, a bound on the trie nodes
an all-states build visits, is at most this (a few ns each; a real build visits fewer, the
subtrees below depth 1 that die or loop skipped): a build of 1-40 ms over Gemma 4's trie
(docs/benchmarks.md)."""

PARALLEL_MIN_STATES = 1024
"""Eager tables of DFAs with fewer states are built on the calling thread: with subtree skipping
a state costs a few microseconds, so smaller DFAs finish before threads pay off, and on busy
cores (the model's forward pass, other processes) waking OpenMP threads costs more than the
work."""

_NO_DISTANCE = np.empty(0, np.int32)
"""The `distance` argument of a walk without a budget (`limit` -1: never read)."""

NO_START = np.empty(0, np.uint32)
NO_START.setflags(write=False)
"""The `start` row of a walk from a state with no run; read-only like every run row, so the
walk kernels see one argument type (a new type would load another compiled version on a
first visit: tens of milliseconds)."""

LAZY_CACHE_ROWS = 4096
"""The most mask rows a lazy index keeps (least recently used rows are dropped first)."""

AFTER_MEMO_LIMIT = 1 << 14
"""The most (state, token) steps `TokenIndex.after` remembers (4 MB of Python objects at most:
65,536 steps took 16.3 MB in tracemalloc); the memo is emptied when full. 32 profile-schema
answers of 64 tokens took about 800 distinct steps, eight such batches 3,500."""


def choose_mode(
    n_states: int, vocabulary_size: int, trie_nodes: int | None = None, work: int | None = None
) -> str:
    """`"eager"` when the work of building every mask, `work` trie nodes (`walk_work`; by
    default the bound `n_states * trie_nodes`), is at most `EAGER_WORK_LIMIT` (never when both
    are None), else `"visit"` when the all-states table `n_states * ceil(V / 32) * 4` bytes fits
    in `EAGER_LIMIT_BYTES`, else `"lazy"`."""
    n_words = (vocabulary_size + 31) // 32
    if n_states * n_words * 4 > EAGER_LIMIT_BYTES:
        return "lazy"
    if work is None and trie_nodes is not None:
        work = n_states * trie_nodes
    if work is not None and work <= EAGER_WORK_LIMIT:
        return "eager"
    return "visit"


def walk_work(trans: np.ndarray, loops: np.ndarray, own: np.ndarray, run: np.ndarray, trie: Trie):
    """An upper bound on the trie nodes an all-states build visits (`all_masks`), tighter than
    `n_states * n_nodes`: per state, the sizes of the subtrees under the root's children whose
    byte is live and which the walk does not skip whole at depth 1 (a byte looped on, or a
    subtree inside the state's run, `_walk`). O(n_states * children of the root).

    Args:
        trans: int32 `[n_states, 256]`; loops, own, run: `loop_categories`, `run_categories`.
    """
    work = _walk_work(
        trans, loops, own, run, trie.byte, trie.end, trie.categories, trie.deepest,
        trie.deepest_chars, trie.utf8_whole,
    )  # fmt: skip
    return int(work)


@numba.njit(cache=True)
def _walk_work(trans, loops, own, run, byte, end, categories, deepest, deepest_chars, utf8_whole):
    total = 0
    n_nodes = byte.shape[0]
    for s in range(trans.shape[0]):
        decodes = own[s] & DECODES_UTF8 != 0
        longest = deepest_chars if decodes else deepest
        outside = ~np.uint16((own[s] | UTF8_CATEGORIES) if decodes else own[s])
        c = 1
        while c < n_nodes:
            size = end[c] - c
            if trans[s, byte[c]] >= 0 and categories[c] & ~loops[s] != 0:
                inside = (
                    own[s] != 0
                    and categories[c] & outside == 0
                    and longest[c] <= run[s]
                    and (utf8_whole[c] or not decodes)
                )
                if not inside:
                    total += size
            c = end[c]
    return total


class TokenIndex:
    """Masks and transitions of one grammar's DFA over one vocabulary (docs/design.md section 4).

    Built once per (grammar, vocabulary) and shared, read-only, by every request using that
    grammar. Thread-safe for readers (storing a newly walked row takes a lock; two threads
    asking for the same new state may both walk it, and one identical row is kept).

    Args:
        dfa: the grammar's DFA (`corral.automata.Dfa`).
        vocabulary: the model's `Vocabulary` (its trie is built on first use and cached).
        mode: `"auto"` (the cost and size rule of `choose_mode`), `"eager"`, `"visit"` or `"lazy"`
            (module docstring).
        parallel: build an eager table with the parallel kernel (prange over states). None
            (default): when the DFA has at least `PARALLEL_MIN_STATES` states and Numba has more
            than one thread.

    Attributes:
        dfa, vocabulary, mode.
    """

    def __init__(
        self, dfa: Dfa, vocabulary: Vocabulary, mode: str = "auto", parallel: bool | None = None
    ):
        if mode not in ("auto", "eager", "visit", "lazy"):
            raise ValueError(f"mode must be auto, eager, visit or lazy, not {mode!r}")
        if not isinstance(dfa, Dfa):
            raise TypeError(
                f"TokenIndex takes a Dfa, not {type(dfa).__name__} (a LazyDfa: LazyTokenIndex)"
            )
        if parallel is None:
            parallel = dfa.n_states >= PARALLEL_MIN_STATES and numba.get_num_threads() > 1
        self.parallel = parallel
        self.dfa = dfa
        self.vocabulary = vocabulary
        self._trans = np.ascontiguousarray(dfa.trans, dtype=np.int32)
        self._accept = np.ascontiguousarray(dfa.accept, dtype=np.bool_)
        self._accepting: list[bool] = self._accept.tolist()
        self._eos = np.asarray(vocabulary.eos_ids, dtype=np.int32)
        self._eos_set = frozenset(vocabulary.eos_ids)
        self._n_words = vocabulary.n_words
        self._trie = t = vocabulary.trie
        self._trie_arrays = walk_trie(t)
        self._loops = loop_categories(self._trans)
        self._own, self._run = run_categories(self._trans, self._loops, t.max_depth)
        if mode == "auto":
            work = walk_work(self._trans, self._loops, self._own, self._run, t)
            mode = choose_mode(dfa.n_states, vocabulary.size, t.n_nodes, work)
        self.mode = mode
        self._lock = threading.Lock()
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._rows: list[np.ndarray | None] | None = None  # eager, visit: one per state
        self._continues: list[bool | None] | None = None
        self._unique: dict[int, list[np.ndarray]] = {}  # visit: distinct rows by `row_hash`
        self._after: dict[tuple[int, int], tuple[int, bool]] = {}  # `after`'s memo
        self.n_unique_masks = 0
        if self.mode == "eager":
            self._build_all()
        elif self.mode == "visit":
            self._rows = [None] * dfa.n_states
            self._continues = [None] * dfa.n_states

    @property
    def n_states(self) -> int:
        return self.dfa.n_states

    @property
    def n_words(self) -> int:
        """`ceil(V / 32)`, the length of a mask."""
        return self._n_words

    @property
    def mask_bytes(self) -> int:
        """Memory held by the stored mask rows, in bytes."""
        if self._rows is not None:
            return self.n_unique_masks * self._n_words * 4
        return len(self._cache) * self._n_words * 4

    def _build_all(self) -> None:
        table = build_table(self._trans, self._loops, self._accept, self.vocabulary, self.parallel)
        first, inverse = unique_rows(table)
        unique = table[first]
        unique.setflags(write=False)
        self.n_unique_masks = int(unique.shape[0])
        self._rows = [unique[i] for i in inverse.tolist()]
        for e in self._eos.tolist():
            table[:, e >> 5] &= np.uint32(~(1 << (e & 31)) & 0xFFFFFFFF)
        self._continues = table.any(axis=1).tolist()

    def mask(self, state: int) -> np.ndarray:
        """The packed mask of `state`: uint32 `[ceil(V / 32)]`, read-only, shared; O(1) when
        eager or already visited, one trie walk on a first visit or a lazy cache miss.

        Raises:
            IndexError: `state` is not a state of the DFA.
        """
        if self._rows is not None and 0 <= state < len(self._rows):
            row = self._rows[state]
            return row if row is not None else self._visit(state)
        with self._lock:
            row = self._cache.get(state)
            if row is not None:
                self._cache.move_to_end(state)
                return row
        if not 0 <= state < self.n_states:
            raise IndexError(f"state {state} out of range")
        row, _ = self._visit_walk(state)  # the visit's kernel: one kernel to load, not two
        row.setflags(write=False)
        with self._lock:
            self._cache[state] = row
            if len(self._cache) > LAZY_CACHE_ROWS:
                self._cache.popitem(last=False)
        return row

    def fill_mask(self, state: int, out: np.ndarray) -> np.ndarray:
        """Write the packed mask of `state` into the caller's `out` and return `out`: what
        `mask(state)` returns, copied into a buffer the caller owns (a row of its batch's
        bitmask), with no array made. O(V / 32) when eager or already visited; one trie walk
        on a first visit or a lazy cache miss.

        Args:
            out: writable uint32 or int32 `[ceil(V / 32)]` (int32: the same bits, XGrammar's
                and llguidance's bitmask dtype).

        Raises:
            ValueError: `out` is not such an array (naming its dtype and shape).
            IndexError: `state` is not a state of the DFA.
        """
        rows = self._rows
        row = rows[state] if rows is not None and 0 <= state < len(rows) else None
        return copy_mask(self.mask(state) if row is None else row, out)

    def fill_mask_from(self, row: np.ndarray, out: np.ndarray) -> np.ndarray:
        """Copy the packed mask `row` (one of this index's) into `out` after checking `out` as
        `fill_mask` does; return `out`.

        Raises:
            ValueError: `out` is not a writable uint32 or int32 `[ceil(V / 32)]` array.
        """
        return copy_mask(row, out)

    def _visit(self, state: int) -> np.ndarray:
        """Walk `state` (visit mode), store its row (once per distinct content), return it."""
        return self._store(state, *self._visit_walk(state))

    def _visit_walk(self, state: int) -> tuple[np.ndarray, int]:
        """`visit_mask` of `state`: (its mask, a new array; the mask's `row_hash`)."""
        return visit_mask(
            self._trans, self._loops, self._accept, self._trie_arrays, self._eos, self._n_words,
            self._trie.max_depth, state, self._start_row(state), self._own[state],
            self._run[state],
        )  # fmt: skip

    def _store(self, state: int, row: np.ndarray, key: int | None = None) -> np.ndarray:
        """Keep `row` as the visit-mode mask of `state` (once per distinct content, found by
        its `row_hash` `key` and compared whole); return the row kept."""
        row.setflags(write=False)
        if key is None:
            key = row_hash(row)
        with self._lock:
            kept = self._unique.setdefault(key, [])
            for other in kept:
                if np.array_equal(other, row):
                    row = other
                    break
            else:
                kept.append(row)
                self.n_unique_masks += 1
            self._rows[state] = row
        return row

    @functools.cached_property
    def _budget(self) -> BudgetMasks:
        """The token distances and budget masks (`masks.budget`), built on first use."""
        return BudgetMasks(
            self._trans, self._accept, self._loops, self._trie, self._eos, self._n_words
        )

    @property
    def token_distance(self) -> np.ndarray:
        """int32 `[n_states]`: the fewest text tokens from each state to acceptance (0 in
        accepting states, -1 where no token sequence reaches it), read-only. Computed on first
        use (`corral.kernels.masks.distance.token_graph`, about an all-states trie walk, and a BFS),
        then kept."""
        return self._budget.distance

    @functools.cached_property
    def max_token_distance(self) -> int:
        """The most tokens any state needs to reach acceptance (`token_distance.max()`): with
        more tokens left than that, every allowed token keeps a complete answer within reach."""
        return int(self.token_distance.max()) if self.n_states else 0

    @functools.cached_property
    def token_distance_bound(self) -> np.ndarray:
        """int32 `[n_states]`: an upper bound on `token_distance` that needs no trie walk: the
        fewest bytes to acceptance over the bytes that are text tokens of their own
        (`corral.kernels.masks.distance.byte_distance`), each byte one token; -1 where those bytes
        alone never reach acceptance (the bound says nothing there). O(n_states * 256)."""
        usable = self.vocabulary.single_byte_tokens
        bound = byte_distance(self._trans, self._accept, usable)
        bound.setflags(write=False)
        return bound

    @functools.cached_property
    def max_token_distance_bound(self) -> int | float:
        """`token_distance_bound.max()`, an upper bound on `max_token_distance`; infinity when
        some state has no bound. With at least this many tokens left every allowed token
        keeps a complete answer within reach, known without the token distances."""
        bound = self.token_distance_bound
        if self.n_states == 0:
            return 0
        return math.inf if (bound < 0).any() else int(bound.max())

    def mask_within_tokens(self, state: int, max_tokens: int) -> np.ndarray:
        """The packed mask of the tokens allowed in `state` after which an answer can be
        completed in at most `max_tokens` (>= 0) more tokens (`token_distance`), and EOS when
        `state` accepts: uint32 `[ceil(V / 32)]`, read-only, possibly shared. Never all-false
        when `token_distance[state] <= max_tokens + 1`, so an engine that keeps that invariant
        always ends with a complete answer. See `budget_mask` for the cost.

        Raises:
            ValueError: `max_tokens` is negative.
        """
        row = self.budget_mask(state, max_tokens)
        return row if row is not None else self._nothing

    def budget_mask(self, state: int, max_tokens: int) -> np.ndarray | None:
        """`mask_within_tokens(state, max_tokens)`, or None when that mask is all-false.

        The plain mask (`mask`) from the state's saturation budget on (known from the token
        graph, O(1)); below it a row of the state's budget table (`masks.budget`): one
        trie walk on the state's first budget below saturation, kept in a bounded LRU, then
        O(log distinct distances). In visit mode that walk also stores the plain mask of a
        state not yet visited when its last row is that mask.

        Raises:
            ValueError: `max_tokens` is negative.
            IndexError: `state` is not a state of the DFA.
        """
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, not {max_tokens}")
        if not 0 <= state < self.n_states:
            raise IndexError(f"state {state} out of range")
        budget = self._budget
        if budget.saturated(state, max_tokens):
            return self.mask(state) if self._accepting[state] or budget.has_ends(state) else None
        row = budget.row(state, max_tokens)
        if row is None:
            return self._eos_row if self._accepting[state] else None
        if self._rows is not None and self._rows[state] is None:
            self._keep_plain(state, budget)
        return row

    def _keep_plain(self, state: int, budget: BudgetMasks) -> None:
        """Visit mode: store the last budget row of `state` as its plain mask when it is one
        (every end state can reach acceptance): the walk `mask` would make, saved."""
        levels, rows = budget.rows(state)
        if levels and budget.saturation[state] == levels[-1]:
            self._store(state, rows[-1].copy())

    @functools.cached_property
    def _eos_row(self) -> np.ndarray:
        """The mask holding only the EOS ids (read-only)."""
        row = np.zeros(self._n_words, np.uint32)
        for e in self._eos.tolist():
            row[e >> 5] |= np.uint32(1 << (e & 31))
        row.setflags(write=False)
        return row

    @functools.cached_property
    def _nothing(self) -> np.ndarray:
        """The all-false mask (read-only)."""
        row = np.zeros(self._n_words, np.uint32)
        row.setflags(write=False)
        return row

    def _walk(self, state: int, distance: np.ndarray, limit: int) -> np.ndarray:
        """`one_mask` of `state`: uint32 `[ceil(V / 32)]`, a new array. With a `limit` >= 0 it
        is the budget mask walked for that one budget (the reference `budget_mask` is tested
        against)."""
        return one_mask(
            self._trans, self._loops, self._accept, self._trie_arrays, self._eos, self._n_words,
            self._trie.max_depth, state, distance, limit, self._start_row(state),
            self._own[state], self._run[state],
        )  # fmt: skip

    def _start_row(self, state: int) -> np.ndarray:
        """The row its walk starts from: `Vocabulary.run_row` of `state`'s run
        (`run_categories`; `loop_row` when it loops), empty when it has none."""
        own, run = int(self._own[state]), int(self._run[state])
        if not own:
            return NO_START
        if run >= self._trie.max_depth:
            return self.vocabulary.loop_row(own & ALL_CATEGORIES, bool(own & DECODES_UTF8))
        return self.vocabulary.run_row(own, run)

    def allowed(self, state: int) -> np.ndarray:
        """The allowed token ids of `state`, ascending: int64 `[n_allowed]`."""
        return unpack_ids(self.mask(state))

    def next_state(self, state: int, token: int) -> int:
        """The state after `token` from `state`: -1 when the token is not allowed as text (dead,
        special, empty or EOS). O(bytes of the token).

        Raises:
            IndexError: `state` is not a state of the DFA, or `token` not a token id.
        """
        data = self.vocabulary.tokens[check_token(token, self.vocabulary.size)]
        if not data or token in self._eos_set:
            self._check(state)
            return -1
        return self.step_bytes(state, data)

    def after(self, state: int, token: int) -> tuple[int, bool] | None:
        """Where `token` leads from `state`: (the state after it, whether the answer is then
        done: EOS taken in an accepting state, whose state stays, or a text token into an
        accepting state where no text token is allowed), or None when `token` is not allowed
        in `state` (`Constraint.advance` says why). Remembered per (state, token) in a dict
        of at most `AFTER_MEMO_LIMIT` steps, so a step a batch takes again costs one lookup
        (O(1)); a first step is O(bytes of the token), plus a mask the first time its end
        state is asked whether it can continue."""
        key = (state, token)
        known = self._after.get(key)
        if known is not None:
            return known
        if not 0 <= token < self.vocabulary.size:
            return None
        if token in self._eos_set:
            known = (state, True) if self._accepting[state] else None
        else:
            end = self.next_state(state, token)
            if end >= 0:
                known = (end, self._accepting[end] and not self.can_continue(end))
        if known is not None:
            if len(self._after) >= AFTER_MEMO_LIMIT:
                self._after.clear()
            self._after[key] = known
        return known

    def step_bytes(self, state: int, data: bytes) -> int:
        """The state after walking `data` from `state` through the DFA, -1 at the first dead
        byte. O(len(data)).

        Raises:
            IndexError: `state` is not a state of the DFA. TypeError: `data` is not bytes.
        """
        self._check(state)
        check_bytes(data)
        step = self._trans.item
        for b in data:
            state = step(state, b)
            if state < 0:
                return -1
        return state

    def is_accepting(self, state: int) -> bool:
        """Whether `state` accepts (EOS is allowed there).

        Raises:
            IndexError: `state` is not a state of the DFA.
        """
        self._check(state)
        return self._accepting[state]

    def _check(self, state: int) -> None:
        if not 0 <= state < self.n_states:
            raise IndexError(f"state {state} out of range (0 to {self.n_states - 1})")

    def is_eos(self, token: int) -> bool:
        return token in self._eos_set

    def can_continue(self, state: int) -> bool:
        """True when some text token (not EOS) is allowed in `state`."""
        if self._continues is not None:
            known = self._continues[state]
            if known is not None:
                return known
        row = self.mask(state).copy()
        for e in self._eos.tolist():
            row[e >> 5] &= np.uint32(~(1 << (e & 31)) & 0xFFFFFFFF)
        answer = bool(row.any())
        if self._continues is not None:
            self._continues[state] = answer  # one list store: safe without the lock
        return answer


_MASK_DTYPES = (np.dtype(np.uint32), np.dtype(np.int32))


def copy_mask(row: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Copy the packed mask `row` (uint32 `[n_words]`) into the caller's `out`; return `out`.

    Raises:
        ValueError: `out` is not a writable uint32 or int32 array of `row`'s shape (naming its
            dtype and shape).
    """
    if type(out) is not np.ndarray or out.dtype not in _MASK_DTYPES or out.shape != row.shape:
        raise _not_a_mask_buffer(row, out)
    try:  # a read-only `out` is refused by the copy itself (cheaper than reading its flags)
        np.copyto(out, row, casting="unsafe")
    except ValueError:
        raise _not_a_mask_buffer(row, out) from None
    return out


def _not_a_mask_buffer(row: np.ndarray, out) -> ValueError:
    """`copy_mask`'s error for an `out` it cannot write `row` into, naming what is wrong."""
    if not isinstance(out, np.ndarray):
        return ValueError(f"out must be a NumPy array, not {type(out).__name__}")
    return ValueError(
        f"out must be a writable uint32 or int32 array of shape {row.shape}, not "
        f"{out.dtype} {out.shape}{'' if out.flags.writeable else ' (read-only)'}"
    )


def check_token(token: int, size: int) -> int:
    """`token`, when it is a token id of a `size`-token vocabulary.

    Raises:
        IndexError: it is not (a negative id would read a token from the end).
    """
    if not 0 <= token < size:
        raise IndexError(f"token id {token} out of range (0 to {size - 1})")
    return token


def check_bytes(data) -> None:
    """Raises TypeError unless `data` is bytes (a str would be walked as code points)."""
    if not isinstance(data, bytes | bytearray):
        raise TypeError(f"data must be bytes, not {type(data).__name__}")


def unpack_ids(mask: np.ndarray) -> np.ndarray:
    """The set bits of a packed mask as ascending token ids (int64), O(V / 8) vectorized."""
    bits = np.unpackbits(np.ascontiguousarray(mask, dtype="<u4").view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def few_allowed_ids(mask: np.ndarray, limit: int) -> np.ndarray | None:
    """The set bits of a packed mask as ascending token ids (int32 [n]) when there are at most
    `limit` of them, else None: what the masked LM head computes (`corral.model.llama.lm_head`).
    One compiled pass counts the bits, a second lists them only when few. O(V / 32)"""
    mask = np.ascontiguousarray(mask, dtype=np.uint32)
    ids = np.empty(limit, np.int32)
    n = _few_set_bits(mask, ids)
    return ids[:n] if n >= 0 else None


# --------------------------------------------------------------------------------------------
# Numba kernels. The trie arrays are described in corral.kernels.masks.trie.


@numba.njit(cache=True)
def _few_set_bits(mask, ids):  # pragma: no cover - compiled
    """Write the set bits of packed `mask` into `ids` in ascending order and return their
    number, or return -1 (nothing written) if there are more than len(ids). O(len(mask))"""
    count = 0
    for w in range(mask.shape[0]):
        word = np.uint64(mask[w])
        while word:  # Kernighan's count: one turn per set bit
            word &= word - np.uint64(1)
            count += 1
        if count > ids.shape[0]:
            return -1
    n = 0
    for w in range(mask.shape[0]):
        word = mask[w]
        if word == 0:
            continue
        for b in range(32):
            if (word >> np.uint32(b)) & np.uint32(1):
                ids[n] = w * 32 + b
                n += 1
    return n


@numba.njit(cache=True, inline="always")
def _set_bit(row, t):
    row[t >> 5] |= np.uint32(1) << np.uint32(t & 31)


@numba.njit(cache=True, inline="always")
def _near(distance, s, limit):
    """True when the walk keeps tokens ending in `s`: always when `limit` < 0 (no budget),
    else when acceptance is at most `limit` tokens from s (`distance[s]`, -1 unreachable)."""
    return limit < 0 or 0 <= distance[s] <= limit


@numba.njit(cache=True, inline="always")
def _walk(
    trans, loops, state, trie, distance, limit, stack, row, pending, start_row, own, run, inside
):
    """Set in `row` the bit of every token whose bytes stay live from `state` (and, when
    `limit` >= 0, that ends at most `limit` tokens from acceptance, see `_near`). Returns the
    number of edges met into states not made yet (a lazy table, `corral.kernels.masks.lazy_index`,
    writes state t's incoming edges as -(t + 2)): the first `len(pending)` of those states are
    written in `pending`, and their subtrees are skipped like dead ones, so the row is complete
    only when 0 is returned (an eager table has none).

    Node i is read from its parent's state p = stack[depth - 1]. When p loops to itself on every
    byte category in i's subtree (`loops[p]` covers `categories[i]`), every token of the subtree
    ends in p: their bits are set (if p is near enough) and the subtree is skipped. Otherwise a
    dead byte skips the subtree, a live one pushes its state. O(nodes visited + tokens set in
    bulk).

    With no budget (`limit` < 0) and a non-empty start
    row (`Vocabulary.run_row(own, run)`: the tokens of at most `run` bytes all in the categories
    `own`, which `state`'s run allows, `run_categories`), that row is ORed into `row` first, and
    the walk neither sets the bit of a token whose path from the root stays in `own` within
    `run` bytes (`inside[d]`: the path to depth d does) nor visits a subtree all of whose paths
    do (its categories in `own`, its deepest node within `run`): the inside of a JSON string,
    counted or not, costs one row copy instead of a bit per token. With `DECODES_UTF8` in
    `own` (a loop that reads UTF-8 characters back to itself) a path stays inside through
    bytes >= 0x80 too while it is valid UTF-8 (`Trie.utf8_state`, `utf8_whole`).
    """
    byte, depth, end, categories, token_start, token_ids, deepest, utf8_state, utf8_whole = trie[:9]
    children = trie[9]
    decodes = own & DECODES_UTF8 != 0
    # how far a path is in the run: its bytes, or its characters when the run decodes UTF-8
    length, longest = (trie[10], trie[11]) if decodes else (depth, deepest)
    stack[0] = state
    n_pending = 0
    inside[0] = limit < 0 and start_row.shape[0] > 0
    outside = np.uint16(0xFFFF)
    if inside[0]:
        outside = ~np.uint16((own | UTF8_CATEGORIES) if decodes else own)
        for w in range(row.shape[0]):
            row[w] |= start_row[w]
    for first in range(256):  # the root's children (`Trie.children`): a dead one costs no
        i = children[first]  # read of the node arrays (a cache miss each on a big trie)
        if i < 0 or trans[state, first] == -1:
            continue
        n_pending = _walk_subtree(
            trans, loops, i, end[i], byte, depth, end, categories, token_start, token_ids,
            longest, length, utf8_state, utf8_whole, decodes, distance, limit, stack, row,
            pending, n_pending, own, run, inside, outside,
        )  # fmt: skip
    return n_pending


@numba.njit(cache=True, inline="always")
def _walk_subtree(
    trans, loops, i, stop, byte, depth, end, categories, token_start, token_ids, longest,
    length, utf8_state, utf8_whole, decodes, distance, limit, stack, row, pending, n_pending,
    own, run, inside, outside,
):  # fmt: skip
    """`_walk`'s walk of the nodes `[i, stop)` (one subtree of the root); returns `n_pending`
    plus the edges it met into states not made yet. `length`, `longest`: per node, how far its
    path goes into the run and the most of that in its subtree (`Trie.depth` and `deepest`, or
    `chars` and `deepest_chars` when the run decodes UTF-8)."""
    while i < stop:
        d = depth[i]
        if (
            inside[d - 1]
            and categories[i] & outside == 0
            and longest[i] <= run
            and (utf8_whole[i] or not decodes)
        ):
            i = end[i]  # every token of the subtree is in `start_row`
            continue
        parent = stack[d - 1]
        if categories[i] & ~loops[parent] == 0:
            if _near(distance, parent, limit):
                for k in range(token_start[i], token_start[end[i]]):
                    _set_bit(row, token_ids[k])
            i = end[i]
            continue
        s = trans[parent, byte[i]]
        if s < 0:
            if s < -1:  # a state not made yet
                if n_pending < pending.shape[0]:
                    pending[n_pending] = -s - 2
                n_pending += 1
            i = end[i]
            continue
        stack[d] = s
        inside[d] = (
            inside[d - 1]
            and BYTE_CATEGORY[byte[i]] & outside == 0
            and length[i] <= run
            and (utf8_state[i] >= 0 or not decodes)
        )
        if not inside[d] and _near(distance, s, limit):
            for k in range(token_start[i], token_start[i + 1]):
                _set_bit(row, token_ids[k])
        i += 1
    return n_pending


@numba.njit(cache=True, inline="always")
def _state_row(
    trans, loops, accept, s, trie, eos, distance, limit, stack, row, pending, start, own, run
):
    inside = np.empty(stack.shape[0], np.bool_)
    n_pending = _walk(
        trans, loops, s, trie, distance, limit, stack, row, pending, start, own, run, inside
    )
    if accept[s]:
        for t in eos:
            _set_bit(row, t)
    return n_pending


@numba.njit(cache=True, parallel=True)
def all_masks(trans, loops, accept, trie, eos, n_words, max_depth, start_rows, start_of, own, run):
    """uint32 `[n_states, n_words]`: every state's mask, one trie walk per state, states split
    among Numba's threads (prange). `trie` is `walk_trie`'s tuple; state s's walk starts from
    `start_rows[start_of[s]]`, the run row of (`own[s]`, `run[s]`) (`_walk`), none when
    `start_of[s]` < 0. O(sum over states of nodes visited) work."""
    n_states = trans.shape[0]
    table = np.zeros((n_states, n_words), np.uint32)
    no_distance = np.empty(0, np.int32)
    no_pending = np.empty(0, np.int32)
    no_start = np.empty(0, np.uint32)
    for s in numba.prange(n_states):
        stack = np.empty(max_depth + 1, np.int32)
        start = start_rows[start_of[s]] if start_of[s] >= 0 else no_start
        _state_row(
            trans, loops, accept, s, trie, eos, no_distance, -1, stack, table[s], no_pending,
            start, own[s], run[s],
        )  # fmt: skip
    return table


@numba.njit(cache=True)
def all_masks_serial(
    trans, loops, accept, trie, eos, n_words, max_depth, start_rows, start_of, own, run
):
    """`all_masks` on the calling thread only (for small DFAs, where waking threads costs more
    than it saves, and on a machine whose cores are busy). Same O(sum of nodes visited)."""
    n_states = trans.shape[0]
    table = np.zeros((n_states, n_words), np.uint32)
    no_distance = np.empty(0, np.int32)
    no_pending = np.empty(0, np.int32)
    no_start = np.empty(0, np.uint32)
    stack = np.empty(max_depth + 1, np.int32)
    for s in range(n_states):
        start = start_rows[start_of[s]] if start_of[s] >= 0 else no_start
        _state_row(
            trans, loops, accept, s, trie, eos, no_distance, -1, stack, table[s], no_pending,
            start, own[s], run[s],
        )  # fmt: skip
    return table


@numba.njit(cache=True)
def one_mask(
    trans, loops, accept, trie, eos, n_words, max_depth, s, distance, limit, start, own, run
):
    """uint32 `[n_words]`: the mask of state `s`; when `limit` >= 0, only the tokens ending at
    most `limit` tokens from acceptance (`distance`, int32 `[n_states]`), plus EOS when `s`
    accepts. `start`: `Vocabulary.run_row(own, run)` of the state's run (`run_categories`) or
    an empty array (`_walk`; only read when `limit` < 0). O(nodes visited)."""
    row = np.zeros(n_words, np.uint32)
    stack = np.empty(max_depth + 1, np.int32)
    no_pending = np.empty(0, np.int32)  # an eager table has no state not made yet
    _state_row(
        trans, loops, accept, s, trie, eos, distance, limit, stack, row, no_pending, start, own,
        run,
    )  # fmt: skip
    return row


@numba.njit(cache=True)
def visit_mask(trans, loops, accept, trie, eos, n_words, max_depth, s, start, own, run):
    """(`one_mask` of state `s` with no budget, its `row_hash`): a visit's walk and the key
    its row is kept under, in one call (hashing the row's bytes in Python cost more than the
    walk on a 262k vocabulary). O(nodes visited + n_words)."""
    row = np.zeros(n_words, np.uint32)
    stack = np.empty(max_depth + 1, np.int32)
    no_pending = np.empty(0, np.int32)
    no_distance = np.empty(0, np.int32)
    _state_row(
        trans, loops, accept, s, trie, eos, no_distance, -1, stack, row, no_pending, start, own,
        run,
    )  # fmt: skip
    return row, _row_hash(row)


def row_hash(row: np.ndarray) -> int:
    """A 64-bit hash of a packed mask (uint32 `[n_words]`), the key under which visit mode
    keeps distinct rows. O(n_words)."""
    return int(_row_hash(np.ascontiguousarray(row, dtype=np.uint32)))


@numba.njit(cache=True)
def _row_hash(row):
    """Sum over words of (word + 1) * an odd multiplier of its position (wrapping): no chain
    between words, so the loop vectorizes. O(n_words)."""
    h = np.uint64(0)
    for j in range(row.shape[0]):
        h += (np.uint64(row[j]) + np.uint64(1)) * (
            np.uint64(2 * j + 1) * np.uint64(0x9E3779B97F4A7C15)
        )
    return h


@numba.njit(cache=True)
def lazy_mask(trans, loops, accept, trie, eos, n_words, max_depth, s, pending, start):
    """(mask uint32 `[n_words]`, n_pending): `one_mask` of state `s` in a lazy table, and the
    number of edges it met into states not made yet (their first `len(pending)` states written
    in `pending`; the mask is complete when n_pending is 0). `start`:
    `Vocabulary.loop_row(loops[s] & ALL_CATEGORIES)` or an empty array. O(nodes visited)."""
    row = np.zeros(n_words, np.uint32)
    stack = np.empty(max_depth + 1, np.int32)
    no_distance = np.empty(0, np.int32)
    n_pending = _state_row(
        trans, loops, accept, s, trie, eos, no_distance, -1, stack, row, pending, start,
        loops[s] & ALL_CATEGORIES, max_depth,
    )  # fmt: skip
    return row, n_pending


def walk_trie(trie: Trie) -> tuple:
    """The trie arrays the walks read: (byte, depth, end, categories, token_start, token_ids,
    deepest, utf8_state, utf8_whole, children, chars, deepest_chars)."""
    t = trie
    return (
        t.byte, t.depth, t.end, t.categories, t.token_start, t.token_ids, t.deepest,
        t.utf8_state, t.utf8_whole, t.children, t.chars, t.deepest_chars,
    )  # fmt: skip


def run_categories(trans: np.ndarray, loops: np.ndarray, max_depth: int):
    """(own uint16 `[n_states]`, run int32 `[n_states]`): each state's run, the longest chain of
    steps on one set of byte categories that each go, whatever the byte, to one live state.

    A state that loops on some categories (`loops`, whose bits past the 13 categories are
    ignored) has those as `own` and run `max_depth` (a loop is a run of any length; no token
    is longer), with `DECODES_UTF8` when every UTF-8 character read from it leads back to it
    (`_decodes_utf8`: inside a JSON string). Otherwise `own` is the categories whose bytes all
    go to the one live state most categories go to whole, and `run` the number of steps from
    the state on which every byte of `own` goes to one live state (the next state of a
    length-bounded string's counter, up to its bound); 0 and 0 when no category goes to one
    live state whole. The tokens of at most `run` bytes all in `own` are allowed
    (`Vocabulary.run_row`). A lazy table's edges into states not made yet (-(t + 2)) count as
    not live. O(n_states * (256 + 13 * max_depth)).

    Args:
        trans: int32 `[n_states, 256]`; loops: `loop_categories(trans)`.
    """
    return _run_categories(
        np.ascontiguousarray(trans, dtype=np.int32), loops, BYTE_CATEGORY, max_depth, UTF8_DECODER
    )


@numba.njit(cache=True)
def _run_categories(trans, loops, byte_category, max_depth, decoder):
    n = trans.shape[0]
    index = np.zeros(256, np.int64)  # each byte's category number
    for b in range(256):
        c = 0
        while byte_category[b] >> np.uint16(c) != 1:
            c += 1
        index[b] = c
    target = np.full((n, 16), -3, np.int32)  # the one state a category goes to; -2: several
    for s in range(n):
        for b in range(256):
            c = index[b]
            t = trans[s, b]
            if target[s, c] == -3:
                target[s, c] = t
            elif target[s, c] != t:
                target[s, c] = -2
    own = np.zeros(n, np.uint16)
    run = np.zeros(n, np.int32)
    for s in range(n):
        if loops[s] & ALL_CATEGORIES:
            own[s] = loops[s] & ALL_CATEGORIES
            if _decodes_utf8(trans, s, decoder, s):
                own[s] |= DECODES_UTF8
            run[s] = max_depth
            continue
        best, best_count = -1, 0
        for c in range(16):
            t = target[s, c]
            if t >= 0:
                count = 0
                for k in range(16):
                    count += target[s, k] == t
                if count > best_count:
                    best, best_count = t, count
        if best < 0:
            continue
        mine = np.uint16(0)
        for c in range(16):
            if target[s, c] == best:
                mine |= np.uint16(1) << np.uint16(c)
        steps, at = 0, s
        while steps < max_depth:
            nxt = -2
            for c in range(16):
                if mine >> np.uint16(c) & 1:
                    t = target[at, c]
                    if t < 0 or (nxt != -2 and t != nxt):
                        nxt = -1
                        break
                    nxt = t
            if nxt < 0:
                break
            steps += 1
            at = nxt
        own[s] = mine
        run[s] = steps
        # a counter of characters: every UTF-8 character read from each state of the chain
        # goes to the chain's next state, as its bytes of `mine` do (`maxLength` over JSON
        # string characters); then the run counts characters, not bytes
        k, at = 0, s
        while k < steps:
            nxt = target[at, _lowest_category(mine)]
            if not _decodes_utf8(trans, at, decoder, nxt):
                break
            k += 1
            at = nxt
        if steps and k == steps:
            own[s] |= DECODES_UTF8
    return own, run


@numba.njit(cache=True, inline="always")
def _lowest_category(categories):
    c = 0
    while not categories >> np.uint16(c) & 1:
        c += 1
    return c


@numba.njit(cache=True)
def _decodes_utf8(trans, s, decoder, back):
    """True when every valid UTF-8 character read from `s` stays live and ends in `back` (`s`
    for a loop, the next state of a counter): the decoder's states map to states of `trans`
    (state 0 to `s`, a character's end to `back`) consistently on every byte >= 0x80 the
    decoder takes. O(8 * 128)."""
    image = np.full(decoder.shape[0], -2, np.int64)
    image[0] = s
    for u in range(decoder.shape[0]):  # state 0 names every other; they lead back to 0..2
        if image[u] < 0:
            return False
        for b in range(0x80, 0x100):
            v = decoder[u, b]
            if v < 0:
                continue
            x = trans[image[u], b]
            if x < 0:
                return False
            if v == 0:  # a character ends
                if x != back:
                    return False
            elif image[v] == -2:
                image[v] = x
            elif image[v] != x:
                return False
    return True


def build_table(
    trans: np.ndarray, loops: np.ndarray, accept: np.ndarray, vocabulary: Vocabulary, parallel: bool
) -> np.ndarray:
    """uint32 `[n_states, ceil(V / 32)]`: every state's mask (`all_masks`, or `all_masks_serial`
    when not `parallel`), each walk starting from its state's run row (`run_categories`,
    `Vocabulary.run_row`).

    Args:
        trans: int32 `[n_states, 256]`, C-contiguous; loops: `loop_categories(trans)`;
            accept: bool `[n_states]`.
    """
    trie = vocabulary.trie
    own, run = run_categories(trans, loops, trie.max_depth)
    keys = own.astype(np.int64) << 32 | run
    values, start_of = np.unique(keys, return_inverse=True)
    start_rows = np.zeros((len(values), vocabulary.n_words), np.uint32)
    for k, value in enumerate(values.tolist()):
        own_k, run_k = value >> 32, value & 0xFFFFFFFF
        if own_k:
            start_rows[k] = (
                vocabulary.loop_row(own_k & ALL_CATEGORIES, bool(own_k & DECODES_UTF8))
                if run_k >= trie.max_depth
                else vocabulary.run_row(own_k, run_k)
            )
    start_of = np.where(values[start_of] >> 32 != 0, start_of, -1).astype(np.int32)
    eos = np.asarray(vocabulary.eos_ids, dtype=np.int32)
    kernel = all_masks if parallel else all_masks_serial
    return kernel(
        trans, loops, accept, walk_trie(trie), eos, vocabulary.n_words, trie.max_depth,
        start_rows, start_of, own, run,
    )  # fmt: skip


def unique_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) for the distinct rows of a uint32 `[n, w]` table: `table[first]` are the
    distinct rows and `table[first][inverse]` equals `table`. Rows are grouped by a 64-bit
    multiplicative hash and then checked equal; a collision falls back to sorting the rows.
    O(n * w)."""
    hashes = _row_hashes(table, _multipliers(table.shape[1]))
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    if not _rows_match(table, first, inverse):
        keys = np.ascontiguousarray(table).view(np.dtype((np.void, table.shape[1] * 4))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        inverse = inverse.ravel()
    return first, inverse


@functools.cache
def _multipliers(n_words: int) -> np.ndarray:
    """uint64 `[n_words]`: fixed random odd multipliers for `_row_hashes`."""
    return np.random.default_rng(0x5EED).integers(1, 2**63, n_words, np.uint64) | np.uint64(1)


@numba.njit(cache=True)
def _row_hashes(table, multipliers):
    """uint64 `[n]`: sum over words of word * multiplier (wrapping). O(n * w)."""
    n, w = table.shape
    out = np.zeros(n, np.uint64)
    for i in range(n):
        h = np.uint64(0)
        for j in range(w):
            h += np.uint64(table[i, j]) * multipliers[j]
        out[i] = h
    return out


@numba.njit(cache=True)
def _rows_match(table, first, inverse):
    """True when every row equals the representative row of its group. O(n * w)."""
    n, w = table.shape
    for i in range(n):
        r = first[inverse[i]]
        if r != i:
            for j in range(w):
                if table[i, j] != table[r, j]:
                    return False
    return True

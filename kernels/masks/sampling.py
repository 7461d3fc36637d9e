"""The masked sampler: `SamplingParams`, `sample_batch` (a batch's `SampleRow`s in one Numba call,
a `BatchSample`), and its one-row forms `sample` and `top_logprobs`.

Disallowed logits become -inf before the log-softmax; a mask that allows nothing is an error; the
logprob is the log-softmax over the allowed tokens, before penalties, temperature and truncation.
Every function here calls the one kernel (`corral.kernels.masks.sample_rows`), so a row gets the
same token, logprob and top list alone or in a batch, bit for bit. A row may also ask for its
constraint diagnostics (`SampleRow.diagnose`: the probability mass its mask allowed and the
chosen token's unmasked logprob, over the same logits). The semantics and the decisions behind
them: docs/engine.md ("The sampler", "Constraint diagnostics") and docs/design.md section 4.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numba
import numpy as np
from corral.kernels.errors import NoTokenAllowedError
from corral.kernels.masks import sample_rows as kernel
from corral.kernels.masks.constraint import Constraint


@dataclass(frozen=True)
class SamplingParams:
    """How to pick a token from the allowed ones.

    Attributes:
        temperature: >= 0; 0 is greedy.
        top_k: keep the k most likely tokens; 0 keeps all.
        top_p: in (0, 1]; keep the fewest most likely tokens whose probability reaches top_p.
        min_p: in [0, 1]; drop tokens less likely than min_p times the most likely one.
        presence_penalty: subtracted once from the logit of every token already generated.
        frequency_penalty: subtracted from a token's logit once per time it was generated.
        repetition_penalty: > 0; vLLM's: a logit of a token in the prompt or the output is divided
            by it when positive, multiplied when negative; 1 is off.

    Raises:
        TypeError: a value of the wrong type (top_k an int; the others real numbers; bool is
            neither), naming the field.
        ValueError: a value out of range or not finite, naming the field.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        for name in ("temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                     "repetition_penalty", "top_k"):  # fmt: skip
            value = getattr(self, name)
            kinds = (int, np.integer) if name == "top_k" else (int, float, np.integer, np.floating)
            if isinstance(value, bool) or not isinstance(value, kinds):
                kind = "an integer" if name == "top_k" else "a number"
                raise TypeError(f"{name} must be {kind}, not {value!r}")
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, not {value}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be >= 0, not {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, not {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], not {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], not {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, not {self.repetition_penalty}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        """Whether a penalty is on (then the sampler reads prompt and output ids)."""
        return bool(
            self.repetition_penalty != 1.0 or self.presence_penalty or self.frequency_penalty
        )


GREEDY = SamplingParams(temperature=0.0)


class SampleRow(NamedTuple):
    """One row of a `sample_batch` call: where its logits are and how to pick its token.

    Attributes:
        row: the row of the call's float32 `[N, V]` logits to sample from, 0 <= row < N (rows
            of the last forward pass are sampled in place this way; rows may repeat).
        mask: packed uint32 `[ceil(V / 32)]`, bits at or beyond V clear; None for a free row.
        params: the row's `SamplingParams`.
        uniform: the draw in [0, 1) (ignored when greedy): the token is the inverse CDF at it.
            Taking it from the request's own generator keeps each row's tokens independent of
            the batch.
        prompt_ids, output_ids: token ids (ints, or an int ndarray) for the penalties, read
            only when a penalty is on.
        n_top: how many top_logprobs to list, >= 0.
        diagnose: report the row's constraint diagnostics (`BatchSample.allowed_mass` and
            `unmasked_logprobs`); off by default, when they cost nothing.
    """

    row: int
    mask: np.ndarray | None
    params: SamplingParams
    uniform: float
    prompt_ids: Sequence[int] | np.ndarray = ()
    output_ids: Sequence[int] | np.ndarray = ()
    n_top: int = 0
    diagnose: bool = False


def sample(
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator | None,
    mask: np.ndarray | None = None,
    prompt_ids: Sequence[int] | np.ndarray = (),
    output_ids: Sequence[int] | np.ndarray = (),
) -> tuple[int, float]:
    """Pick one token among those `mask` allows (all when None): `sample_batch` for one row.

    Args:
        logits: float32 `[V]`, the model's raw logits.
        params: the sampling settings.
        rng: a seeded generator (one uniform draw per sampled token; none when greedy, when it
            may be None).
        mask: packed uint32 `[ceil(V / 32)]`, or None for no constraint.
        prompt_ids, output_ids: token ids, for the penalties.

    Returns:
        (token id, logprob): the logprob is the model's log-softmax over the allowed tokens
        (before penalties, temperature and truncation), a float.

    Raises:
        NoTokenAllowedError: the mask allows no token.
        ValueError: the mask does not fit the logits.

    O(V / 32 + n_allowed), see `corral.kernels.masks.sample_rows`.
    """
    logits = np.asarray(logits, dtype=np.float32)
    uniform = 0.0 if params.greedy else rng.random()
    out = sample_batch(logits[None], [SampleRow(0, mask, params, uniform, prompt_ids, output_ids)])
    return int(out.tokens[0]), float(out.logprobs[0])


def top_logprobs(
    logits: np.ndarray, mask: np.ndarray | None, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The `n` most likely allowed tokens and their logprobs (the model's log-softmax over the
    allowed tokens, as `sample` reports), most likely first, for OpenAI's `top_logprobs`.
    A token's logprob here is bit for bit the one `sample` reports for it.

    Args:
        logits: float32 `[V]`; mask: packed uint32 `[ceil(V / 32)]` or None (all allowed).
        n: how many, >= 0.

    Returns:
        (token ids int64 `[k]`, logprobs float64 `[k]`), k = min(n, number allowed); ties in
        logit order by id.

    Raises:
        NoTokenAllowedError: the mask allows no token.

    O(V / 32 + n_allowed * (1 + inserts * k / n_allowed)).
    """
    logits = np.asarray(logits, dtype=np.float32)
    out = sample_batch(logits[None], [SampleRow(0, mask, GREEDY, 0.0, n_top=max(n, 0))])
    k = int(out.top_counts[0])
    return out.top_ids[0, :k].copy(), out.top_logprobs[0, :k].copy()


@dataclass(frozen=True)
class BatchSample:
    """What `sample_batch` picked, row by row.

    Attributes:
        tokens: int64 `[B]`, the token ids.
        logprobs: float64 `[B]`, their logprobs (the log-softmax over the row's allowed tokens).
        top_ids: int64 `[B, K]`, each row's most likely allowed tokens, best first (K the
            largest `n_top`); only the first `top_counts[b]` of row b are set.
        top_logprobs: float64 `[B, K]`, their logprobs.
        top_counts: int64 `[B]`, min(n_top[b], number allowed in row b).
        allowed_mass: float64 `[B]` or None (no row asked: `SampleRow.diagnose`): at a row that
            asked, the probability mass its mask allowed, the sum over the allowed tokens of
            the softmax of the raw logits over the whole vocabulary (the distribution
            `logprobs` are read from: temperature 1, before penalties and truncation), in
            [0, 1], 1 for a free row; NaN at a row that did not ask.
        unmasked_logprobs: float64 `[B]` or None, likewise: the chosen token's log-softmax over
            the whole vocabulary (its logprob had there been no mask; `logprobs[b]` plus
            log(allowed_mass[b]) up to rounding).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    top_counts: np.ndarray
    allowed_mass: np.ndarray | None = None
    unmasked_logprobs: np.ndarray | None = None

    def top(self, b: int) -> tuple[tuple[int, float], ...]:
        """Row b's top list as ((token id, logprob), ...), best first."""
        k = int(self.top_counts[b])
        ids, logprobs = self.top_ids[b, :k].tolist(), self.top_logprobs[b, :k].tolist()
        return tuple(zip(ids, logprobs, strict=True))


@functools.lru_cache(maxsize=256)
def _param_row(params: SamplingParams) -> tuple[float, ...]:
    """`params` as a row of the kernel's float64 params table (columns in kernel order)."""
    return (
        params.temperature,
        params.top_k,
        params.top_p,
        params.min_p,
        params.presence_penalty,
        params.frequency_penalty,
        params.repetition_penalty,
    )


_NO_IDS = np.zeros(0, np.int64)
N_COLUMNS = len(_param_row(GREEDY))
PARALLEL_MIN_ROWS = 16
"""`sample_batch` spreads batches of at least this many rows over Numba's threads (when it
has more than one) unless told otherwise: below it, waking a sleeping worker costs more than
the rows it takes (figures: bench/sample_batch.py)."""


def _contiguous(array, dtype) -> np.ndarray:
    """`np.ascontiguousarray(array, dtype)`, skipped (the same object) for an ndarray already of
    that dtype and C-contiguous: each NumPy call costs microseconds after a forward pass."""
    if type(array) is np.ndarray and array.dtype == dtype and array.flags.c_contiguous:
        return array
    return np.ascontiguousarray(array, dtype=dtype)


@functools.lru_cache(maxsize=8)
def _zeros(n: int) -> np.ndarray:
    """int64 `[n]` of zeros (kept: the kernel reads it, never writes it)."""
    return np.zeros(n, np.int64)


@functools.lru_cache(maxsize=8)
def _no_tops(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The empty top lists of n rows, int64 and float64 `[n, 0]` (kept: nothing to write)."""
    return np.empty((n, 0), np.int64), np.empty((n, 0), np.float64)


def _top_arrays(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 and float64 `[n, k]` for the kernel's top lists (written)."""
    if k == 0:
        return _no_tops(n)
    return np.empty((n, k), np.int64), np.empty((n, k), np.float64)


def _ragged(ids: Sequence[Sequence[int] | np.ndarray], rows: int, used: list[bool]):
    """Rows of ids back to back (int64) and their starts (int64 `[rows + 1]`); a row not `used`
    is left empty."""
    if not any(used):
        return _NO_IDS, _zeros(rows + 1)
    parts = [np.asarray(ids[b], dtype=np.int64) if used[b] else _NO_IDS for b in range(rows)]
    starts = np.zeros(rows + 1, np.int64)
    np.cumsum([len(part) for part in parts], out=starts[1:])
    return np.concatenate(parts), starts


def sample_batch(
    logits: np.ndarray, rows: Sequence[SampleRow], parallel: bool | None = None
) -> BatchSample:
    """Sample every row of a batch in one Numba call, each row with its own mask, settings,
    penalties and draw.

    Args:
        logits: float32 `[N, V]`, the model's raw logits (read, never written).
        rows: B `SampleRow`s; result b is `rows[b]`'s.
        parallel: spread the rows over Numba's threads (`sample_rows_parallel`: the calling
            thread starts at once, the others take rows as they wake); the same results.
            None (the default): when there are at least `PARALLEL_MIN_ROWS` rows and Numba
            has more than one thread. A parallel region ends when every thread has arrived:
            on a machine whose other cores are busy (other processes) a sleeping worker can
            take a scheduler time slice to come, as in any parallel region of the forward
            pass; False keeps the rows on the calling thread.

    Returns:
        A `BatchSample`.

    Raises:
        NoTokenAllowedError: a row's mask allows no token (the message names the row).
        TypeError: an element of `rows` is not a `SampleRow`.
        ValueError: logits not `[N, V]`, a row index outside them, a negative `n_top`, a mask
            not of `ceil(V / 32)` words or with bits beyond V.

    O(B * (V / 32 + n_allowed)) plus penalties, truncation and top lists: see
    `corral.kernels.masks.sample_rows`.
    """
    logits = _contiguous(logits, np.float32)
    if logits.ndim != 2:
        raise ValueError(f"logits must be [N, V], not of shape {logits.shape}")
    b_rows = len(rows)
    if not all(isinstance(r, SampleRow) for r in rows):
        raise TypeError("sample_batch takes a sequence of SampleRow records")
    row_index, masks, params, uniforms, prompt_ids, output_ids, n_top, diagnose = (
        zip(*rows, strict=True) if b_rows else ((),) * len(SampleRow._fields)
    )
    if b_rows and not (min(row_index) >= 0 and max(row_index) < logits.shape[0]):
        raise ValueError(f"a row index outside the {logits.shape[0]} rows of logits")
    row_ids = np.asarray(row_index, dtype=np.int64)
    k = max(n_top, default=0)
    if min(n_top, default=0) < 0:
        raise ValueError(f"n_top must be >= 0, not {min(n_top)}")
    wanted = np.asarray(n_top, dtype=np.int64) if k else _zeros(b_rows)
    mask_block, mask_rows = _stack_masks(masks, logits.shape[1])
    table, penalized = _param_table(params)
    prompt, prompt_start = _ragged(prompt_ids, b_rows, penalized)
    output, output_start = _ragged(output_ids, b_rows, penalized)
    tokens = np.empty(b_rows, np.int64)
    logprobs = np.empty(b_rows, np.float64)
    top_ids, top_logprobs = _top_arrays(b_rows, int(k))
    top_counts = np.empty(b_rows, np.int64)
    diagnosed, allowed_mass, unmasked = _diagnostics_arrays(diagnose)
    # Numba's thread count, not numba.get_num_threads(), which takes two locks (bench/
    # sample_batch.py): under a lower numba.set_num_threads the loops past the threads in use
    # take no row, as in `kernels.attention`'s counter
    threads = numba.config.NUMBA_NUM_THREADS
    if parallel is None:
        parallel = b_rows >= PARALLEL_MIN_ROWS and threads > 1
    arguments = (
        logits, row_ids, mask_block, mask_rows, table,
        np.asarray(uniforms, dtype=np.float64), prompt, prompt_start, output, output_start,
        wanted, tokens, logprobs, top_ids, top_logprobs, top_counts, diagnosed, allowed_mass,
        unmasked,
    )  # fmt: skip
    if parallel and b_rows > 1:
        empty = kernel.sample_rows_parallel(*arguments, min(threads, b_rows))
    else:
        empty = kernel.sample_rows(*arguments)
    if empty >= 0:
        raise NoTokenAllowedError(f"the mask of row {empty} allows no token")
    if not len(allowed_mass):
        return BatchSample(tokens, logprobs, top_ids, top_logprobs, top_counts)
    return BatchSample(tokens, logprobs, top_ids, top_logprobs, top_counts, allowed_mass, unmasked)


def _diagnostics_arrays(diagnose: Sequence[bool]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the kernel's `diagnose`, bool `[B]`; its outputs, float64 `[B]` of NaN, or `[0]` when no
    row asks: the kernel then writes none, and the arrays are kept, not made)."""
    if not any(diagnose):
        return _no_diagnostics(len(diagnose))
    nan = np.full(len(diagnose), np.nan)
    return np.asarray(diagnose, dtype=np.bool_), nan, nan.copy()


@functools.lru_cache(maxsize=8)
def _no_diagnostics(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_diagnostics_arrays` of n rows none of which asks (kept: the kernel reads the first,
    writes none)."""
    return np.zeros(n, np.bool_), np.empty(0, np.float64), np.empty(0, np.float64)


def _param_table(params: Sequence[SamplingParams]) -> tuple[np.ndarray, list[bool]]:
    """(the kernel's params table, float64 `[B, N_COLUMNS]`; whether each row has a penalty
    on). A batch shares a few `SamplingParams` objects: each distinct one is read once. The
    tables of the last `_TABLES_KEPT` batches of params are kept (by the objects' identities,
    the objects held so that no identity is reused): an engine passes the same objects step
    after step, and building a table takes several NumPy calls, tens of microseconds each
    with the caches a forward pass leaves (the kernel reads the table, never writes it)."""
    key = tuple(map(id, params))
    kept = _TABLES.get(key)
    if kept is not None:
        return kept[1], kept[2]
    table, penalized = _new_param_table(params)
    if len(_TABLES) >= _TABLES_KEPT:
        del _TABLES[next(iter(_TABLES))]
    _TABLES[key] = (tuple(params), table, penalized)
    return table, penalized


_TABLES: dict[tuple[int, ...], tuple[tuple, np.ndarray, list[bool]]] = {}
_TABLES_KEPT = 64


def _new_param_table(params: Sequence[SamplingParams]) -> tuple[np.ndarray, list[bool]]:
    """`_param_table`, built."""
    first: dict[int, int] = {}  # id -> its row among the distinct ones
    which = [first.setdefault(id(p), len(first)) for p in params]
    distinct = list({id(p): p for p in params}.values())  # in the order of `first`
    table = np.array([_param_row(p) for p in distinct], dtype=np.float64).reshape(-1, N_COLUMNS)
    if len(distinct) > 1:
        table = table[which]
    elif len(params) != 1:
        table = np.repeat(table, len(params), axis=0)
    penalties = [p.penalized for p in distinct]
    return table, [penalties[i] for i in which]


def _stack_masks(masks: Sequence[np.ndarray | None], v: int) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct non-None masks stacked, uint32 `[M, ceil(v / 32)]`; each row's index into
    them or -1, int64 `[B]`). Masks are told apart by identity: rows in the same state share
    their index's mask object, which is copied once."""
    words = (v + 31) // 32
    if len(masks) == 1 and masks[0] is not None:  # one row (batch 1): its mask, row 0
        given, mask_rows = [masks[0]], _zeros(1)
    else:
        given, mask_rows = _distinct(masks)
    if not given:
        return np.zeros((0, words), np.uint32), mask_rows
    for m in given:
        if (m.shape if type(m) is np.ndarray else np.shape(m)) != (words,):
            raise ValueError(
                f"a mask of shape {np.shape(m)}, not ({words},) words, does not fit {v} logits"
            )
    if len(given) == 1:  # a view, no copy
        block = _contiguous(given[0], np.uint32)[None]
    else:  # one copy into one block (np.stack's Python steps cost tens of us with cold caches)
        block = np.concatenate(given, dtype=np.uint32).reshape(len(given), words)
    if v % 32 and (block[:, -1] >> np.uint32(v % 32)).any():
        raise ValueError(f"a mask allows a token at or beyond the vocabulary's {v}")
    return block, mask_rows


def _distinct(masks: Sequence[np.ndarray | None]) -> tuple[list[np.ndarray], np.ndarray]:
    """(the distinct non-None masks of `masks`, by identity, in order of first use; each row's
    index among them or -1, int64 `[B]`)."""
    first: dict[int, int] = {}  # id -> its index among the distinct masks
    given: list[np.ndarray] = []
    mask_rows = np.empty(len(masks), np.int64)
    for b, m in enumerate(masks):
        if m is None:
            mask_rows[b] = -1
            continue
        at = first.setdefault(id(m), len(given))
        if at == len(given):
            given.append(m)
        mask_rows[b] = at
    return given, mask_rows


def apply_mask(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Logits with the disallowed tokens set to -inf (a new float32 array), for callers that
    bring their own sampler; `sample` and `sample_batch` mask without it.

    Args:
        logits: float32 `[V]` or `[B, V]`.
        mask: packed uint32 `[ceil(V / 32)]` or `[B, ceil(V / 32)]` (one row for all B, or one
            per row).

    Raises:
        NoTokenAllowedError: a row of the mask allows no token.
        ValueError: the shapes do not agree.

    O(B * V), vectorized (np.unpackbits, np.where).
    """
    logits = np.asarray(logits, dtype=np.float32)
    n = logits.shape[-1]
    mask = np.ascontiguousarray(mask, dtype="<u4")
    if mask.shape[-1] != (n + 31) // 32:
        raise ValueError(f"a mask of {mask.shape[-1]} words does not fit {n} logits")
    bits = np.unpackbits(mask.view(np.uint8), axis=-1, count=n, bitorder="little").view(np.bool_)
    if not bits.any(axis=-1).all():
        raise NoTokenAllowedError("the mask allows no token")
    return np.where(bits, logits, np.float32(-np.inf))


def constrained_sample(
    logits: np.ndarray,
    constraint: Constraint,
    params: SamplingParams,
    rng: np.random.Generator,
    prompt_ids: Sequence[int] | np.ndarray = (),
    output_ids: Sequence[int] | np.ndarray = (),
    tokens_left: int | None = None,
) -> tuple[int, float]:
    """`sample` under `constraint.mask(tokens_left)` (the budget rule: see `Constraint.mask`);
    does not advance the constraint.

    Raises:
        TokenNotAllowedError: the constraint is done.
        NoTokenAllowedError: the mask allows no token.
    """
    return sample(logits, params, rng, constraint.mask(tokens_left), prompt_ids, output_ids)


def constrained_sample_batch(
    logits: np.ndarray,
    constraints: Sequence[Constraint | None],
    params: SamplingParams | Sequence[SamplingParams],
    rngs: np.random.Generator | Sequence[np.random.Generator],
    prompt_ids: Sequence[Sequence[int]] | None = None,
    output_ids: Sequence[Sequence[int]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`constrained_sample` for each row of float32 `[B, V]` logits, in one `sample_batch` call.

    `constraints[b]` may be None (an unconstrained row). `params` and `rngs` are one for all rows
    or one per row (one shared generator draws the rows' uniforms in row order). Returns (tokens
    int64 `[B]`, logprobs float32 `[B]`).
    """
    b_rows = len(constraints)
    if logits.shape[0] != b_rows:
        raise ValueError(f"{logits.shape[0]} rows of logits for {b_rows} constraints")
    every = [params] * b_rows if isinstance(params, SamplingParams) else list(params)
    generators = [rngs] * b_rows if isinstance(rngs, np.random.Generator) else list(rngs)
    uniforms = [0.0 if p.greedy else g.random() for p, g in zip(every, generators, strict=True)]
    prompts = prompt_ids if prompt_ids is not None else [()] * b_rows
    outputs = output_ids if output_ids is not None else [()] * b_rows
    rows = [
        SampleRow(b, None if c is None else c.mask(), p, u, prompt, output)
        for b, (c, p, u, prompt, output) in enumerate(
            zip(constraints, every, uniforms, prompts, outputs, strict=True)
        )
    ]
    out = sample_batch(logits, rows)
    return out.tokens, out.logprobs.astype(np.float32)

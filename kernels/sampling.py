"""The masked sampler (DESIGN.md section 4).

Disallowed logits become -inf before the log-softmax; a mask that allows nothing is an error.

Decisions (what OpenAI, vLLM and Hugging Face users expect):
- The reported logprob is the model's log-softmax over the allowed tokens: computed from the raw
  logits restricted to the mask, before penalties, temperature, top-k, top-p and min-p (vLLM's
  default "raw" logprobs, with the grammar's mask applied since the grammar is part of the model's
  output space here). So greedy and sampled runs report the same number for the same token.
- The processing order is Hugging Face's: repetition penalty, presence and frequency penalties,
  temperature, top-k, top-p, min-p. Presence and frequency penalties count the tokens generated so
  far (`output_ids`), as in OpenAI's API and vLLM; the repetition penalty (vLLM's, multiplicative)
  looks at prompt and output tokens.
- Temperature 0 is greedy: the allowed token with the largest raw logit, the lowest id on ties;
  penalties still apply to greedy choice (as in vLLM), the logprob stays the raw one.
- Truncation keeps ties: top-k keeps every token tied with the k-th largest, top-p every token tied
  with the last one needed to reach p.

Speed: the whole batch is one Numba call per step (`sample_batch`, the kernel in
`corral.kernels.sample_rows`), over the allowed tokens only: O(V / 32 + n_allowed) per row. Each
row takes one uniform draw from its request's own generator, so a row gives the same token and
logprobs alone or in any batch; `sample` and `top_logprobs` are one-row calls of the same kernel.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from corral.kernels.constraint import Constraint
from corral.kernels.errors import NoTokenAllowedError
from corral.kernels.sample_rows import sample_rows


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
        ValueError: a value out of range.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
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


GREEDY = SamplingParams(temperature=0.0)


def apply_mask(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Logits with the disallowed tokens set to -inf (a new float32 array).

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


@dataclass(frozen=True)
class SampledRows:
    """What `sample_batch` picked, one entry per row.

    Attributes:
        tokens: int64 `[B]`, the chosen token ids.
        logprobs: float64 `[B]`, their logprobs (the model's log-softmax over the allowed tokens).
        top_ids: int64 `[B, k]`, each row's most likely allowed tokens, most likely first (ties:
            lower id first); row b's first `top_counts[b]` entries are set.
        top_logprobs: float64 `[B, k]`, their logprobs (bit for bit those of `logprobs`).
        top_counts: int64 `[B]`.
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    top_ids: np.ndarray
    top_logprobs: np.ndarray
    top_counts: np.ndarray

    def top(self, b: int) -> tuple[tuple[int, float], ...]:
        """Row b's top list as `((token id, logprob), ...)`."""
        k = int(self.top_counts[b])
        return tuple(
            zip(self.top_ids[b, :k].tolist(), self.top_logprobs[b, :k].tolist(), strict=True)
        )


@functools.cache
def full_mask(vocabulary_size: int) -> np.ndarray:
    """The packed mask allowing every token id below `vocabulary_size`: uint32
    `[ceil(V / 32)]`, read-only, shared."""
    bits = np.ones(vocabulary_size, np.bool_)
    mask = np.packbits(bits, bitorder="little")
    mask = np.pad(mask, (0, -len(mask) % 4)).view("<u4").astype(np.uint32)
    mask.setflags(write=False)
    return mask


def _params_row(p: SamplingParams) -> tuple[float, ...]:
    return (p.temperature, p.top_k, p.top_p, p.min_p, p.presence_penalty, p.frequency_penalty,
            p.repetition_penalty)  # fmt: skip


def _ragged(
    rows: Sequence[Sequence[int] | np.ndarray], b_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(int64 ids back to back, int64 `[B + 1]` starts) of `b_rows` id lists (None: all empty)."""
    if rows is None:
        return np.empty(0, np.int64), np.zeros(b_rows + 1, np.int64)
    lengths = np.fromiter((len(r) for r in rows), np.int64, b_rows)
    start = np.zeros(b_rows + 1, np.int64)
    np.cumsum(lengths, out=start[1:])
    if not start[-1]:
        return np.empty(0, np.int64), start
    return np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]), start


def sample_batch(
    logits: np.ndarray,
    masks: np.ndarray,
    params: Sequence[SamplingParams],
    uniforms: np.ndarray,
    prompt_ids: Sequence[Sequence[int]] | None = None,
    output_ids: Sequence[Sequence[int]] | None = None,
    n_top: Sequence[int] | None = None,
    rows: np.ndarray | None = None,
) -> SampledRows:
    """Pick one token per row, in one Numba call (`corral.kernels.sample_rows`); row b gives
    exactly what `sample` gives for it with the same uniform draw.

    Args:
        logits: float32 `[N, V]`, the model's raw logits.
        masks: packed uint32 `[B, ceil(V / 32)]` (`full_mask(V)` for an unconstrained row).
        params: B `SamplingParams`.
        uniforms: float64 `[B]` in [0, 1): each row's draw from its own generator (read only
            when its temperature is not 0).
        prompt_ids, output_ids: B id lists for the penalties (None: none).
        n_top: B counts of top_logprobs to report, each 0..V (None: none).
        rows: int64 `[B]`, the row of `logits` each b samples from (None: 0..B-1).

    Raises:
        NoTokenAllowedError: a row's mask allows no token.
        ValueError: the shapes do not agree.

    O(B * (V / 32 + n_allowed)) plus top-p sorts and top lists.
    """
    logits = np.asarray(logits, dtype=np.float32)
    masks = np.ascontiguousarray(masks, dtype=np.uint32)
    b_rows = masks.shape[0]
    if masks.ndim != 2 or masks.shape[1] != (logits.shape[-1] + 31) // 32:
        raise ValueError(f"masks of shape {masks.shape} do not fit logits of shape {logits.shape}")
    rows = np.arange(b_rows, dtype=np.int64) if rows is None else np.asarray(rows, np.int64)
    if len(params) != b_rows or len(uniforms) != b_rows or len(rows) != b_rows:
        raise ValueError(f"{b_rows} masks need {b_rows} params, uniforms and rows")
    if b_rows and not 0 <= rows.min() <= rows.max() < logits.shape[0]:
        raise ValueError(f"rows must lie within 0..{logits.shape[0] - 1}")
    table = np.array([_params_row(p) for p in params], dtype=np.float64).reshape(b_rows, 7)
    top = np.zeros(b_rows, np.int64) if n_top is None else np.asarray(n_top, np.int64)
    k = int(top.max()) if b_rows else 0
    prompt, prompt_start = _ragged(prompt_ids, b_rows)
    output, output_start = _ragged(output_ids, b_rows)
    out = SampledRows(
        np.empty(b_rows, np.int64), np.empty(b_rows, np.float64), np.zeros((b_rows, k), np.int64),
        np.zeros((b_rows, k), np.float64), np.zeros(b_rows, np.int64),
    )  # fmt: skip
    failed = sample_rows(
        logits.reshape(-1, logits.shape[-1]), rows, masks, table,
        np.asarray(uniforms, np.float64), prompt, prompt_start, output, output_start, top,
        out.tokens, out.logprobs, out.top_ids, out.top_logprobs, out.top_counts,
    )  # fmt: skip
    if failed >= 0:
        raise NoTokenAllowedError(f"the mask of row {failed} allows no token")
    return out


def sample(
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator | None,
    mask: np.ndarray | None = None,
    prompt_ids: Sequence[int] | np.ndarray = (),
    output_ids: Sequence[int] | np.ndarray = (),
) -> tuple[int, float]:
    """Pick one token among those `mask` allows (all when None).

    Args:
        logits: float32 `[V]`, the model's raw logits.
        params: the sampling settings.
        rng: a seeded generator (one uniform draw per sampled token; none when greedy, where it
            may be None).
        mask: packed uint32 `[ceil(V / 32)]`, or None for no constraint.
        prompt_ids, output_ids: token ids, for the penalties.

    Returns:
        (token id, logprob): the logprob is the model's log-softmax over the allowed tokens
        (before penalties, temperature and truncation), a float.

    Raises:
        NoTokenAllowedError: the mask allows no token.

    One row of `sample_batch`: O(V / 32 + n_allowed) plus a sort of the top-p candidates.
    """
    logits = np.asarray(logits, dtype=np.float32)
    mask = full_mask(logits.shape[0]) if mask is None else mask
    uniform = 0.0 if params.greedy else rng.random()
    out = sample_batch(
        logits[None],
        np.asarray(mask)[None],
        [params],
        np.array([uniform]),
        [prompt_ids],
        [output_ids],
    )
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

    One row of `sample_batch`: O(V / 32 + n_allowed * n).
    """
    logits = np.asarray(logits, dtype=np.float32)
    mask = full_mask(logits.shape[0]) if mask is None else mask
    out = sample_batch(
        logits[None], np.asarray(mask)[None], [GREEDY], np.zeros(1), n_top=[max(n, 0)]
    )
    k = int(out.top_counts[0])
    return out.top_ids[0, :k].copy(), out.top_logprobs[0, :k].copy()


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
    or one per row (a shared generator gives its draws to the sampled rows in row order).
    Returns (tokens int64 `[B]`, logprobs float32 `[B]`).
    """
    b_rows = len(constraints)
    if logits.shape[0] != b_rows:
        raise ValueError(f"{logits.shape[0]} rows of logits for {b_rows} constraints")
    every = full_mask(logits.shape[1])
    masks = np.stack([every if c is None else c.mask() for c in constraints]) if b_rows else None
    row_params = [params] * b_rows if isinstance(params, SamplingParams) else list(params)
    row_rngs = [rngs] * b_rows if isinstance(rngs, np.random.Generator) else list(rngs)
    uniforms = np.array(
        [0.0 if p.greedy else g.random() for p, g in zip(row_params, row_rngs, strict=True)]
    )
    if not b_rows:
        return np.empty(0, np.int64), np.empty(0, np.float32)
    out = sample_batch(logits, masks, row_params, uniforms, prompt_ids, output_ids)
    return out.tokens, out.logprobs.astype(np.float32)

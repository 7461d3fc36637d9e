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

Speed: the work is over the allowed tokens only. A Numba kernel gathers the allowed ids and their
logits from the packed mask in one pass over its words, O(V / 32 + n_allowed); everything after is
NumPy over those n_allowed values. Top-p sorts only a growing top slice (argpartition), not the
whole vocabulary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numba
import numpy as np
from corral.kernels.constraint import Constraint
from corral.kernels.errors import NoTokenAllowedError


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


def sample(
    logits: np.ndarray,
    params: SamplingParams,
    rng: np.random.Generator,
    mask: np.ndarray | None = None,
    prompt_ids: Sequence[int] | np.ndarray = (),
    output_ids: Sequence[int] | np.ndarray = (),
) -> tuple[int, float]:
    """Pick one token among those `mask` allows (all when None).

    Args:
        logits: float32 `[V]`, the model's raw logits.
        params: the sampling settings.
        rng: a seeded generator (one uniform draw per sampled token; none when greedy).
        mask: packed uint32 `[ceil(V / 32)]`, or None for no constraint.
        prompt_ids, output_ids: token ids, for the penalties.

    Returns:
        (token id, logprob): the logprob is the model's log-softmax over the allowed tokens
        (before penalties, temperature and truncation), a float.

    Raises:
        NoTokenAllowedError: the mask allows no token.

    O(V / 32 + n_allowed) plus a sort of the top-p slice.
    """
    logits = np.asarray(logits, dtype=np.float32)
    allowed = None
    values = logits
    if mask is not None:
        allowed = _Allowed(mask, logits)
        values = allowed.values
        if not len(values):
            raise NoTokenAllowedError("the mask allows no token")
    shifted, log_total = _log_softmax_parts(values)
    weights = np.exp(shifted)
    scores = _penalized(values, allowed, params, prompt_ids, output_ids)
    if params.greedy:
        i = int(np.argmax(scores))
    else:
        if scores is not values or params.temperature != 1.0:
            weights = np.exp((scores - scores.max()) / np.float32(params.temperature))
        i = _draw(weights, params, rng.random())
    token = i if allowed is None else allowed.token(i)
    return token, float(shifted[i]) - log_total


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

    O(V / 32 + n_allowed + k log k).
    """
    logits = np.asarray(logits, dtype=np.float32)
    if mask is None:
        ids, values = np.arange(logits.shape[0]), logits
    else:
        allowed = _Allowed(mask, logits)
        values = allowed.values
        if not len(values):
            raise NoTokenAllowedError("the mask allows no token")
        ids = None
    k = min(n, len(values))
    if k <= 0:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    shifted, log_total = _log_softmax_parts(values)
    best = np.argpartition(-values, k - 1)[:k] if k < len(values) else np.arange(len(values))
    best = best[np.lexsort((best, -values[best]))]
    tokens = best if ids is not None else np.array([allowed.token(int(i)) for i in best])
    return tokens.astype(np.int64), shifted[best].astype(np.float64) - log_total


def _log_softmax_parts(values: np.ndarray) -> tuple[np.ndarray, float]:
    """(values - max as float32, log of the sum of their exponentials): a value's logprob is
    `float(shifted[i]) - log_total`. One function, so `sample` and `top_logprobs` agree exactly."""
    shifted = values - values.max()
    return shifted, math.log(float(np.exp(shifted).sum()))


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
    """`constrained_sample` for each row of float32 `[B, V]` logits.

    `constraints[b]` may be None (an unconstrained row). `params` and `rngs` are one for all rows
    or one per row. Returns (tokens int64 `[B]`, logprobs float32 `[B]`). O(B) single-row samples.
    """
    b_rows = len(constraints)
    if logits.shape[0] != b_rows:
        raise ValueError(f"{logits.shape[0]} rows of logits for {b_rows} constraints")
    tokens = np.empty(b_rows, dtype=np.int64)
    logprobs = np.empty(b_rows, dtype=np.float32)
    for b, constraint in enumerate(constraints):
        p = params if isinstance(params, SamplingParams) else params[b]
        g = rngs if isinstance(rngs, np.random.Generator) else rngs[b]
        mask = None if constraint is None else constraint.mask()
        tokens[b], logprobs[b] = sample(
            logits[b],
            p,
            g,
            mask,
            () if prompt_ids is None else prompt_ids[b],
            () if output_ids is None else output_ids[b],
        )
    return tokens, logprobs


class _Allowed:
    """The allowed tokens of a packed mask as positions 0..n-1 (ascending ids): `values` holds
    their logits, `word_start[w]` the number of allowed tokens before word w."""

    __slots__ = ("mask", "values", "word_start")

    def __init__(self, mask: np.ndarray, logits: np.ndarray):
        self.mask = np.ascontiguousarray(mask, dtype=np.uint32)
        if self.mask.shape[0] != (logits.shape[0] + 31) // 32:
            raise ValueError(f"a mask of {self.mask.shape[0]} words for {logits.shape[0]} logits")
        values = np.empty(self.mask.shape[0] * 32, dtype=np.float32)
        self.word_start = np.empty(self.mask.shape[0] + 1, dtype=np.int64)
        n = _gather(self.mask, logits, values, self.word_start)
        self.values = values[:n]

    def token(self, position: int) -> int:
        """The token id at `position`."""
        w = int(np.searchsorted(self.word_start, position, side="right")) - 1
        word, k = int(self.mask[w]), position - int(self.word_start[w])
        for j in range(32):
            if (word >> j) & 1:
                if k == 0:
                    return w * 32 + j
                k -= 1
        raise AssertionError("position beyond the mask")

    def positions(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions of the allowed ones among `tokens`, which of `tokens` are allowed)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        inside = (tokens >= 0) & (tokens < self.mask.shape[0] * 32)
        w = np.where(inside, tokens >> 5, 0)
        bit = (tokens & 31).astype(np.uint32)
        words = self.mask[w]
        kept = inside & (((words >> bit) & np.uint32(1)) == 1)
        below = words & ((np.uint32(1) << bit) - np.uint32(1))
        pos = self.word_start[w] + np.bitwise_count(below)
        return pos[kept], kept


@numba.njit(cache=True, boundscheck=False)
def _gather(mask, logits, values, word_start):
    """Copy the logits of the set bits of `mask` into `values` (in id order) and the running
    count of set bits before each word into `word_start`; return the count. Bits at or beyond
    len(logits) must be clear. O(len(mask) + n_allowed); a full word is one 32-value copy."""
    n = 0
    for w in range(mask.shape[0]):
        word_start[w] = n
        word = mask[w]
        if word == 0:
            continue
        base = w * 32
        if word == 0xFFFFFFFF:
            source = logits[base : base + 32]
            target = values[n : n + 32]
            for j in range(32):
                target[j] = source[j]
            n += 32
            continue
        for j in range(32):
            if (word >> j) & 1:
                values[n] = logits[base + j]
                n += 1
    word_start[mask.shape[0]] = n
    return n


def _penalized(values, allowed, params, prompt_ids, output_ids) -> np.ndarray:
    """The allowed logits after the repetition, presence and frequency penalties (float32)."""
    penalize = params.presence_penalty or params.frequency_penalty
    repeat = params.repetition_penalty != 1.0
    if not ((penalize and len(output_ids)) or (repeat and (len(output_ids) or len(prompt_ids)))):
        return values
    scores = values.copy()
    if repeat:
        seen = np.unique(np.concatenate([np.asarray(prompt_ids), np.asarray(output_ids)]))
        pos, _ = _positions(allowed, seen, len(values))
        hit = scores[pos]
        penalty = np.float32(params.repetition_penalty)
        scores[pos] = np.where(hit > 0, hit / penalty, hit * penalty)
    if penalize and len(output_ids):
        tokens, counts = np.unique(np.asarray(output_ids, dtype=np.int64), return_counts=True)
        pos, kept = _positions(allowed, tokens, len(values))
        scores[pos] -= np.float32(params.frequency_penalty) * counts[kept] + np.float32(
            params.presence_penalty
        )
    return scores


def _positions(allowed, tokens, n):
    """(positions among the allowed values of the allowed `tokens`, which tokens are allowed)."""
    tokens = np.asarray(tokens, dtype=np.int64)
    if allowed is None:
        kept = (tokens >= 0) & (tokens < n)
        return tokens[kept], kept
    return allowed.positions(tokens)


def _draw(weights: np.ndarray, params: SamplingParams, uniform: float) -> int:
    """The position drawn from unnormalized probabilities `weights` (float32, max 1) after top-k,
    top-p and min-p, by the inverse CDF at `uniform` in [0, 1)."""
    n = len(weights)
    p = weights
    if 0 < params.top_k < n:
        kth = np.partition(p, n - params.top_k)[n - params.top_k]
        p = np.where(p >= kth, p, np.float32(0))
    if params.top_p < 1.0:
        p = _top_p(p, params.top_p)
    if params.min_p > 0.0:
        p = np.where(p >= np.float32(params.min_p) * p.max(), p, np.float32(0))
    return _inverse_cdf(p, uniform)


_BLOCK = 512


def _inverse_cdf(p: np.ndarray, uniform: float) -> int:
    """The first position whose cumulative weight exceeds `uniform` times the total: block sums
    first, then a cumulative sum inside one block (O(n) with a small constant; NumPy's cumsum
    over 49,152 values costs 120 us here, the block sums 11 us)."""
    n = len(p)
    n_full = n // _BLOCK * _BLOCK
    if n_full == 0:
        cumulative = np.cumsum(p, dtype=np.float64)
        return min(int(np.searchsorted(cumulative, uniform * cumulative[-1], side="right")), n - 1)
    sums = p[:n_full].reshape(-1, _BLOCK).sum(axis=1, dtype=np.float64)
    if n_full < n:
        sums = np.append(sums, p[n_full:].sum(dtype=np.float64))
    block_cumulative = np.cumsum(sums)
    target = uniform * block_cumulative[-1]
    b = min(int(np.searchsorted(block_cumulative, target, side="right")), len(sums) - 1)
    while sums[b] == 0:  # rounding at the very end: step back to a block with weight
        b -= 1
    start = b * _BLOCK
    inside = np.cumsum(p[start : start + _BLOCK], dtype=np.float64)
    rest = target - (block_cumulative[b] - sums[b])
    j = min(int(np.searchsorted(inside, rest, side="right")), len(inside) - 1)
    while p[start + j] == 0:  # never return a zero-weight position
        j -= 1
    return start + j


def _top_p(p: np.ndarray, top_p: float) -> np.ndarray:
    """Zero every weight below the smallest one of the top-p set. Only candidates above a
    threshold are sorted (the threshold drops 10^4-fold until they hold top_p of the mass, then
    to zero): O(n + k log k) for k candidates."""
    target = top_p * float(p.sum(dtype=np.float64))
    threshold = float(p.max()) * 1e-4 if len(p) > 1024 else 0.0
    while True:
        candidates = p[p >= threshold]
        if threshold == 0.0 or float(candidates.sum(dtype=np.float64)) >= target:
            break
        threshold = threshold * 1e-4 if threshold > 1e-30 else 0.0
    top = np.sort(candidates)[::-1]
    cumulative = np.cumsum(top, dtype=np.float64)
    cut = min(int(np.searchsorted(cumulative, target)), len(top) - 1)
    return np.where(p >= top[cut], p, np.float32(0))

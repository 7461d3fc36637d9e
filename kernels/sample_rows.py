"""The masked sampler's Numba kernel: every row of a batch sampled in one call (DESIGN.md
section 4; the semantics are documented in `corral.kernels.sampling`, whose `sample`,
`top_logprobs` and `sample_batch` are thin wrappers over `sample_rows`).

Per row b, with `n` the tokens its packed mask allows:
1. gather the allowed logits in id order, O(V / 32 + n);
2. logprob of a position i: `float32(values[i] - max) - log(sum(exp(values - max)))`, the sum in
   float64; the chosen token and the top_logprobs entries use this one formula, so they agree
   bit for bit;
3. penalties (repetition, then presence and frequency) on a copy, O(n + prompt + output);
4. greedy: the first largest score; else float32 weights `exp((score - max) / temperature)`
   (`exp_into`, vectorized),
   then top-k (ties kept), top-p (ties kept; only candidates above a falling threshold are
   sorted), min-p, and the inverse CDF at the row's uniform draw, O(n + k log k);
5. the `n_top[b]` best allowed positions by logit (ties: lower id first), O(n * n_top) worst.
"""

from __future__ import annotations

import math

import numba
import numpy as np

TEMPERATURE, TOP_K, TOP_P, MIN_P, PRESENCE, FREQUENCY, REPETITION = range(7)
"""Columns of the float64 `params` table."""


@numba.njit(cache=True)
def sample_rows(
    logits, rows, masks, params, uniforms, prompt_ids, prompt_start, output_ids, output_start,
    n_top, tokens, logprobs, top_ids, top_logprobs, top_counts,
):  # fmt: skip
    """Sample row b from `logits[rows[b]]` under `masks[b]`, for every b; return -1, or the
    first row whose mask allows no token (its outputs are unset).

    Args:
        logits: float32 `[N, V]`; rows: int64 `[B]`, the row of `logits` of each b.
        masks: uint32 `[B, ceil(V / 32)]`, bits at or beyond V clear.
        params: float64 `[B, 7]` (columns TEMPERATURE .. REPETITION); uniforms: float64 `[B]`
            in [0, 1), read only when the temperature is not 0.
        prompt_ids, output_ids: int64, the rows' ids back to back; row b's are
            `[start[b]:start[b + 1]]` (int64 `[B + 1]`); only read when a penalty is on.
        n_top: int64 `[B]`, how many top_logprobs per row (<= top_ids.shape[1]).
        tokens, logprobs, top_ids, top_logprobs, top_counts: outputs, int64 `[B]`, float64
            `[B]`, int64 `[B, k]`, float64 `[B, k]`, int64 `[B]`.

    O(B * (V / 32 + n_allowed)) plus the penalties, top-p sort and top list of each row.
    """
    n_words = masks.shape[1]
    values = np.empty(n_words * 32, np.float32)
    ids = np.empty(n_words * 32, np.int64)
    shifted = np.empty(n_words * 32, np.float32)
    weights = np.empty(n_words * 32, np.float32)
    scale = np.empty(n_words * 32, np.int32)
    for b in range(rows.shape[0]):
        row = logits[rows[b]]
        n = 0
        for w in range(n_words):
            word = masks[b, w]
            if word == 0:
                continue
            if word == 0xFFFFFFFF:  # a full word: one 32-value copy
                for j in range(32):
                    values[n + j] = row[w * 32 + j]
                    ids[n + j] = w * 32 + j
                n += 32
                continue
            for j in range(32):
                if (word >> np.uint32(j)) & np.uint32(1):
                    values[n] = row[w * 32 + j]
                    ids[n] = w * 32 + j
                    n += 1
        if n == 0:
            return b
        peak = values[0]
        for i in range(n):
            peak = max(peak, values[i])
        for i in range(n):
            shifted[i] = values[i] - peak
        exp_into(shifted, n, weights, scale)
        total = 0.0
        for i in range(n):
            total += weights[i]
        log_total = math.log(total)
        prompt = prompt_ids[prompt_start[b] : prompt_start[b + 1]]
        output = output_ids[output_start[b] : output_start[b + 1]]
        scores = _penalized(values, ids, n, params[b], prompt, output)
        if params[b, TEMPERATURE] == 0.0:
            chosen = 0
            for i in range(1, n):
                if scores[i] > scores[chosen]:
                    chosen = i
        else:
            temperature = np.float32(params[b, TEMPERATURE])
            if scores is not values or temperature != 1.0:  # else: weights = exp(shifted)
                top = scores[0]
                for i in range(n):
                    top = max(top, scores[i])
                for i in range(n):
                    shifted[i] = (scores[i] - top) / temperature
                exp_into(shifted, n, weights, scale)
            chosen = _draw(weights[:n], params[b], uniforms[b])
        tokens[b] = ids[chosen]
        logprobs[b] = np.float64(np.float32(values[chosen] - peak)) - log_total
        k = min(n_top[b], n)
        best = _best(values, n, k)
        for j in range(k):
            top_ids[b, j] = ids[best[j]]
            top_logprobs[b, j] = np.float64(np.float32(values[best[j]] - peak)) - log_total
        top_counts[b] = k
    return -1


@numba.njit(cache=True, inline="always")
def _find(ids, n, token):
    """The position of `token` among the ascending `ids[:n]`, -1 if absent. O(log n)."""
    at = np.searchsorted(ids[:n], token)
    return at if at < n and ids[at] == token else -1


@numba.njit(cache=True)
def _penalized(values, ids, n, p, prompt, output):
    """The allowed logits after the repetition penalty (tokens of prompt or output, each once)
    and the presence and frequency penalties (output tokens), float32 `[n]`; `values` itself
    when no penalty applies. O(n + len(prompt) + len(output)) with a binary search per id."""
    repeat = p[REPETITION] != 1.0 and (len(prompt) > 0 or len(output) > 0)
    penalize = (p[PRESENCE] != 0.0 or p[FREQUENCY] != 0.0) and len(output) > 0
    if not (repeat or penalize):
        return values
    scores = values[:n].copy()
    if repeat:
        seen = np.zeros(n, np.bool_)
        for source in (prompt, output):
            for t in source:
                at = _find(ids, n, t)
                if at >= 0:
                    seen[at] = True
        penalty = np.float32(p[REPETITION])
        for i in range(n):
            if seen[i]:
                scores[i] = scores[i] / penalty if scores[i] > 0 else scores[i] * penalty
    if penalize:
        counts = np.zeros(n, np.int64)
        for t in output:
            at = _find(ids, n, t)
            if at >= 0:
                counts[at] += 1
        presence, frequency = np.float32(p[PRESENCE]), np.float32(p[FREQUENCY])
        for i in range(n):
            if counts[i] > 0:
                scores[i] = np.float32(scores[i] - (frequency * counts[i] + presence))
    return scores


@numba.njit(cache=True, fastmath=True)
def exp_into(x, n, out, scale):
    """`out[:n] = exp(x[:n])` for float32 `x <= 0` (below -87 taken as -87, where exp is under
    float32's smallest normal): Cephes' `expf`, `2^k * p(r)` with `r = x - k ln 2` and a
    degree-6 polynomial p, relative error below 3e-7; `scale` (int32 `[>= n]`) is scratch. Two
    branch-free loops LLVM vectorizes, since Numba's scalar `math.exp` is not (about 10x slower
    here). O(n)."""
    for i in range(n):
        v = max(x[i], np.float32(-87.0))
        k = np.floor(v * np.float32(1.4426950408889634) + np.float32(0.5))
        r = v - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        out[i] = p * r * r + r + np.float32(1.0)
        scale[i] = (np.int32(k) + np.int32(127)) << 23  # the bits of the float32 2^k
    powers = scale.view(np.float32)
    for i in range(n):
        out[i] *= powers[i]


@numba.njit(cache=True)
def _draw(weights, p, uniform):
    """The position drawn from the unnormalized float32 `weights` (changed in place) after
    top-k, top-p and min-p, by the inverse CDF at `uniform`. O(n + k log k) for the k top-p
    candidates."""
    n = weights.shape[0]
    top_k = int(p[TOP_K])
    if 0 < top_k < n:
        kth = np.partition(weights, n - top_k)[n - top_k]
        for i in range(n):
            if weights[i] < kth:
                weights[i] = 0.0
    if p[TOP_P] < 1.0:
        _top_p(weights, p[TOP_P])
    if p[MIN_P] > 0.0:
        floor = p[MIN_P] * weights.max()
        for i in range(n):
            if weights[i] < floor:
                weights[i] = 0.0
    total = 0.0
    for i in range(n):
        total += weights[i]
    target = uniform * total
    cumulative = 0.0
    last = 0
    for i in range(n):
        if weights[i] > 0.0:
            last = i
            cumulative += weights[i]
            if cumulative > target:
                return i
    return last  # rounding at the very end: the last position with weight


@numba.njit(cache=True)
def _top_p(weights, top_p):
    """Zero every weight below the smallest one of the top-p set (ties kept). Only candidates
    above a threshold are sorted (it drops 10^4-fold until they hold top_p of the mass, then to
    zero): O(n + k log k) for k candidates."""
    n = weights.shape[0]
    target = top_p * weights.astype(np.float64).sum()
    threshold = weights.max() * 1e-4 if n > 1024 else 0.0
    while True:
        candidates = weights[weights >= threshold].astype(np.float64)
        if threshold == 0.0 or candidates.sum() >= target:
            break
        threshold = threshold * 1e-4 if threshold > 1e-30 else 0.0
    top = np.sort(candidates)[::-1]
    cumulative = np.cumsum(top)
    cut = min(np.searchsorted(cumulative, target), len(top) - 1)
    for i in range(n):
        if weights[i] < top[cut]:
            weights[i] = 0.0


@numba.njit(cache=True)
def _best(values, n, k):
    """The `k` positions of the largest `values[:n]`, largest first, ties by position: an
    insertion into a sorted list of k. O(n + inserts * k)."""
    best = np.empty(k, np.int64)
    count = 0
    for i in range(n):
        v = values[i]
        if count == k and not (k > 0 and v > values[best[k - 1]]):
            continue
        j = count if count < k else k - 1
        while j > 0 and values[best[j - 1]] < v:
            best[j] = best[j - 1]
            j -= 1
        best[j] = i
        count = min(count + 1, k)
    return best

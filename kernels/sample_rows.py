"""The masked sampler's Numba kernel: every row of a batch sampled in one call (DESIGN.md
section 4). The semantics are documented in `corral.kernels.sampling`, whose `sample`,
`top_logprobs` and `sample_batch` all call `sample_rows`: there is one implementation.

Per row, with `n` the tokens its mask allows (the whole vocabulary for a free row, whose logits
are read in place):
1. gather the allowed logits and ids in id order, O(V / 32 + n) (a full mask word is one
   32-value copy);
2. the peak, then float32 weights `exp(value - peak)` and their float64 sums per block of
   `BLOCK` values: `log_total` is the log of their sum; the logprob of position i is
   `float64(float32(values[i] - peak)) - log_total`, one formula for the chosen token and the
   top_logprobs list, so they agree bit for bit;
3. penalties (repetition, then presence and frequency) on a copy, O(n + len(prompt) + len(output)
   * log n);
4. greedy: the first largest score; else weights `exp((score - top) / temperature)` (the weights
   of step 2 when the temperature is 1 and no penalty applies), then top-k (ties kept), top-p
   (ties kept) and min-p zero weights; the draw is the inverse CDF at the row's uniform: the block
   sums locate the block, a float64 running sum inside it the position, O(n / BLOCK + BLOCK);
5. the `n_top[b]` best allowed positions by value (ties: lower id first).

Speed: every pass over the row is a loop LLVM vectorizes. Numba's scalar `math.exp` is not
vectorized (about 10x slower than NumPy's SIMD exp), so `_weights` evaluates Cephes' `expf`
(S. L. Moshier, Cephes Math Library, `expf.c`: `2^k * p(r)`, `r = x - k ln 2`, a degree-6
polynomial, relative error below 2e-7) in branch-free float32 arithmetic. A maximum in a loop-
carried variable is not vectorized either (Numba's functions lack LLVM's no-NaN attribute), so
`_peak` keeps `BLOCK` lanes of elementwise maxima. Top-k and top-p never sort the vocabulary:
a histogram of the scores in buckets of one temperature (one e-fold of weight) finds the few
candidates that can matter, and only those are sorted (one `np.sort`, the only generic NumPy
routine compiled here: the first call compiles the kernel, later processes load it from the
`cache=True` cache). `sample_rows` runs the
rows on one thread (the default of `sample_batch`); `sample_rows_parallel` is the same loop over
Numba's threads (`prange`), which pays only on an otherwise idle machine.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from corral.kernels.expf import LN2_HIGH, LN2_LOW, exp_reduced

TEMPERATURE, TOP_K, TOP_P, MIN_P, PRESENCE, FREQUENCY, REPETITION = range(7)
"""Columns of the float64 `params` table."""
N_PARAMS = 7
BLOCK = 64
"""Values per block of the weights, their sums and the inverse CDF."""
N_BUCKETS = 64
"""Buckets of the top-k / top-p histogram; each spans one temperature of score (an e-fold of
weight), the last one takes everything below."""

# Fast-math without nnan/ninf: reassociation lets LLVM vectorize sums, and -inf logits (a bias of
# -inf, a caller's own masking) still compare as they should.
_FAST = {"reassoc", "nsz", "arcp", "contract", "afn"}
_EXP_FLOOR = np.float32(-87.0)  # exp below this is under float32's smallest normal: weight 0


@numba.njit(cache=True, boundscheck=False)
def _first_empty(masks, mask_rows):
    """The first b whose mask row `masks[mask_rows[b]]` has no bit set, else -1. O(B * W) worst,
    one nonzero word per row usually."""
    for b in range(mask_rows.shape[0]):
        if mask_rows[b] < 0:
            continue
        empty = True
        for word in masks[mask_rows[b]]:
            if word != 0:
                empty = False
                break
        if empty:
            return b
    return -1


@numba.njit(cache=True, boundscheck=False)
def sample_rows(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts,
):  # fmt: skip
    """Sample row b from `logits[rows[b]]` under `masks[mask_rows[b]]` (all tokens when
    `mask_rows[b]` is -1), for every b, on one thread. Returns -1, or the first row whose mask
    allows no token (nothing is sampled then).

    Args:
        logits: float32 `[N, V]`, C-contiguous; rows: int64 `[B]`, the row of each b.
        masks: uint32 `[M, ceil(V / 32)]`, bits at or beyond V clear; mask_rows: int64 `[B]`.
        params: float64 `[B, N_PARAMS]` (columns TEMPERATURE .. REPETITION).
        uniforms: float64 `[B]` in [0, 1), read only when the temperature is not 0.
        prompt_ids, output_ids: int64, the rows' ids back to back; row b's are
            `[start[b]:start[b + 1]]` (int64 `[B + 1]`); read only when a penalty is on.
        n_top: int64 `[B]`, how many top_logprobs per row (<= top_ids.shape[1]).
        tokens, logprobs, top_ids, top_logprobs, top_counts: outputs: int64 `[B]`, float64
            `[B]`, int64 `[B, K]`, float64 `[B, K]`, int64 `[B]`.

    O(B * (V / 32 + n_allowed)) plus each row's penalties, truncation and top list.
    """
    empty = _first_empty(masks, mask_rows)
    if empty >= 0:
        return empty
    for b in range(rows.shape[0]):
        _sample_one(
            logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start,
            output_ids, output_start, n_top, tokens, logprobs, top_ids, top_logprobs,
            top_counts, b,
        )  # fmt: skip
    return -1


@numba.njit(cache=True, boundscheck=False, parallel=True)
def sample_rows_parallel(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts,
):  # fmt: skip
    """`sample_rows` with the rows spread over Numba's threads (`prange`); the same results."""
    empty = _first_empty(masks, mask_rows)
    if empty >= 0:
        return empty
    for b in numba.prange(rows.shape[0]):
        _sample_one(
            logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start,
            output_ids, output_start, n_top, tokens, logprobs, top_ids, top_logprobs,
            top_counts, b,
        )  # fmt: skip
    return -1


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _sample_one(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts, b,
):  # fmt: skip
    """Row b of `sample_rows` (see the module docstring for the steps)."""
    row = logits[rows[b]]
    constrained = mask_rows[b] >= 0
    if constrained:
        mask = masks[mask_rows[b]]
        values = np.empty(mask.shape[0] * 32, np.float32)
        ids = np.empty(mask.shape[0] * 32, np.int32)
        n = _gather(mask, row, values, ids)
    else:
        values = row
        ids = np.empty(0, np.int32)
        n = row.shape[0]
    p = params[b]
    weights = np.empty(n, np.float32)
    sums = np.empty((n + BLOCK - 1) // BLOCK, np.float64)
    bits = np.empty(BLOCK, np.int32)
    powers = bits.view(np.float32)
    peak, at = _peak(values, n)
    if not peak > -np.inf:  # no allowed logit is finite (-inf or NaN): all equally likely
        values = np.zeros(n, np.float32)
        peak, at = np.float32(0.0), 0
    log_total = math.log(_weights(values, n, peak, np.float32(1.0), weights, sums, bits, powers))
    prompt = prompt_ids[prompt_start[b] : prompt_start[b + 1]]
    output = output_ids[output_start[b] : output_start[b + 1]]
    penalized = _has_penalty(p, prompt, output)
    scores = _penalized(values, n, ids, constrained, p, prompt, output) if penalized else values
    if p[TEMPERATURE] == 0.0:
        chosen = _peak(scores, n)[1] if penalized else at
    else:
        temperature = np.float32(p[TEMPERATURE])
        if penalized or temperature != np.float32(1.0):
            top = _peak(scores, n)[0]
            _weights(scores, n, top, temperature, weights, sums, bits, powers)
        if _truncate(scores, n, weights, temperature, p):
            _block_sums(weights, n, sums)
        chosen = _draw(weights, n, sums, uniforms[b])
    tokens[b] = ids[chosen] if constrained else chosen
    logprobs[b] = np.float64(np.float32(values[chosen] - peak)) - log_total
    k = min(n_top[b], n)
    best = _best(values, n, k)
    for j in range(k):
        top_ids[b, j] = ids[best[j]] if constrained else best[j]
        top_logprobs[b, j] = np.float64(np.float32(values[best[j]] - peak)) - log_total
    top_counts[b] = k


@numba.njit(cache=True, boundscheck=False)
def _gather(mask, row, values, ids):
    """Copy the logits and ids of the set bits of `mask` into `values` and `ids`, in id order;
    return their number. O(len(mask) * 32) at most, O(len(mask)) for words all 0 or all 1.

    `values` and `ids` hold `len(mask) * 32` entries. A word with some bits set is copied
    without a branch per bit: every position is written at the next free place, which only
    advances past it when its bit is set (a later write overwrites a dropped one; writes stay
    below `base + 32`). A branch per bit mispredicted about half the time on the holes of a
    string state's mask (tokens with a quote, a backslash or a control byte), costing
    hundreds of microseconds a row."""
    n = 0
    for w in range(mask.shape[0]):
        word = mask[w]
        if word == 0:
            continue
        base = w * 32
        if word == 0xFFFFFFFF:
            for j in range(32):
                values[n + j] = row[base + j]
                ids[n + j] = base + j
            n += 32
            continue
        for j in range(32):
            values[n] = row[base + j]
            ids[n] = base + j
            n += np.int64((word >> np.uint32(j)) & np.uint32(1))
    return n


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _peak(x, n):
    """(the largest of `x[:n]`, its first position), n >= 1: elementwise maxima and their
    positions in BLOCK lanes (vectorized), then over the lanes. O(n)."""
    full = n // BLOCK * BLOCK
    peak, at = x[0], 0
    if full:
        lanes = x[:BLOCK].copy()
        where = np.arange(BLOCK)
        for start in range(BLOCK, full, BLOCK):
            for j in range(BLOCK):
                v = x[start + j]
                better = v > lanes[j]
                lanes[j] = v if better else lanes[j]
                where[j] = start + j if better else where[j]
        for j in range(BLOCK):
            if lanes[j] > peak or (lanes[j] == peak and where[j] < at):
                peak, at = lanes[j], where[j]
    for i in range(full, n):
        if x[i] > peak:
            peak, at = x[i], i
    return peak, at


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _weights(x, n, peak, temperature, weights, sums, bits, powers):
    """`weights[:n] = exp((x[:n] - peak) / temperature)` in float32 (0 below exp(-87)), the
    float64 sum of each BLOCK into `sums`; returns the total. `bits` (int32 `[BLOCK]`) and
    `powers` (its float32 view) are scratch. Cephes' expf, vectorized. O(n)."""
    total = 0.0
    for block in range(sums.shape[0]):
        start = block * BLOCK
        length = min(BLOCK, n - start)
        for j in range(length):
            v = (x[start + j] - peak) / temperature
            live = v >= _EXP_FLOOR
            v = v if live else _EXP_FLOOR
            k = np.int32(np.float32(0.5) - v * np.float32(1.4426950408889634))  # -round(v/ln 2)
            kf = np.float32(k)
            r = v + kf * LN2_HIGH + kf * LN2_LOW
            weights[start + j] = exp_reduced(r) if live else np.float32(0.0)
            bits[j] = (np.int32(127) - k) << 23  # the bits of the float32 2^-k
        block_sum = 0.0
        for j in range(length):
            w = weights[start + j] * powers[j]
            weights[start + j] = w
            block_sum += w
        sums[block] = block_sum
        total += block_sum
    return total


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _block_sums(weights, n, sums):
    """The float64 sum of each BLOCK of `weights[:n]` into `sums`. O(n)."""
    for block in range(sums.shape[0]):
        start = block * BLOCK
        length = min(BLOCK, n - start)
        block_sum = 0.0
        for j in range(length):
            block_sum += weights[start + j]
        sums[block] = block_sum


@numba.njit(cache=True, boundscheck=False)
def _draw(weights, n, sums, uniform):
    """The position of the inverse CDF of `weights[:n]` (block sums `sums`) at `uniform`: the
    first whose running sum exceeds `uniform` times the total, never a zero weight.
    O(n / BLOCK + BLOCK)."""
    total = 0.0
    for block in range(sums.shape[0]):
        total += sums[block]
    if not total > 0.0:  # only when every weight is 0 (the peak itself weighs 1)
        return 0
    target = uniform * total
    before = 0.0
    block = 0
    while block < sums.shape[0] - 1 and not (sums[block] > 0.0 and before + sums[block] > target):
        before += sums[block]
        block += 1
    while block > 0 and sums[block] == 0.0:  # rounding at the very end: back to a block with weight
        block -= 1
        before -= sums[block]
    last = -1
    running = before
    for i in range(block * BLOCK, min(block * BLOCK + BLOCK, n)):
        if weights[i] > 0.0:
            last = i
            running += weights[i]
            if running > target:
                return i
    return max(last, block * BLOCK)


@numba.njit(cache=True, boundscheck=False)
def _find(ids, n, token):
    """The position of `token` among the ascending `ids[:n]`, -1 if absent: a binary search,
    O(log n)."""
    low, high = 0, n
    while low < high:
        middle = (low + high) // 2
        if ids[middle] < token:
            low = middle + 1
        else:
            high = middle
    return low if low < n and ids[low] == token else -1


@numba.njit(cache=True, boundscheck=False)
def _position(ids, n, constrained, token):
    """The position of `token` among the row's allowed tokens, -1 if not allowed."""
    if constrained:
        return _find(ids, n, token)
    return token if 0 <= token < n else -1


@numba.njit(cache=True, boundscheck=False)
def _has_penalty(p, prompt, output):
    """Whether a penalty changes some score: a repetition penalty with prompt or output ids, a
    presence or frequency penalty with output ids."""
    repeat = p[REPETITION] != 1.0 and (len(prompt) > 0 or len(output) > 0)
    return repeat or ((p[PRESENCE] != 0.0 or p[FREQUENCY] != 0.0) and len(output) > 0)


@numba.njit(cache=True, boundscheck=False)
def _penalized(values, n, ids, constrained, p, prompt, output):
    """A copy of the allowed logits `values[:n]` after the repetition penalty (each token of
    prompt or output once), then the presence and frequency penalties (output tokens), float32
    `[n]`. O(n + (len(prompt) + len(output)) * log n)."""
    repeat = p[REPETITION] != 1.0 and (len(prompt) > 0 or len(output) > 0)
    penalize = (p[PRESENCE] != 0.0 or p[FREQUENCY] != 0.0) and len(output) > 0
    scores = values[:n].copy()
    if repeat:
        seen = np.zeros(n, np.bool_)
        for source in (prompt, output):
            for t in source:
                at = _position(ids, n, constrained, t)
                if at >= 0:
                    seen[at] = True
        penalty = np.float32(p[REPETITION])
        for i in range(n):
            if seen[i]:
                scores[i] = scores[i] / penalty if scores[i] > 0 else scores[i] * penalty
    if penalize:
        counts = np.zeros(n, np.int32)
        for t in output:
            at = _position(ids, n, constrained, t)
            if at >= 0:
                counts[at] += 1
        presence, frequency = np.float32(p[PRESENCE]), np.float32(p[FREQUENCY])
        for i in range(n):
            if counts[i] > 0:
                scores[i] = scores[i] - (frequency * np.float32(counts[i]) + presence)
    return scores


@numba.njit(cache=True, boundscheck=False)
def _bucket(score, top, temperature):
    """The histogram bucket of `score`: how many temperatures below `top`, at most
    N_BUCKETS - 1."""
    d = (top - score) / temperature
    return int(d) if d < N_BUCKETS - 1 else N_BUCKETS - 1


@numba.njit(cache=True, boundscheck=False)
def _truncate(scores, n, weights, temperature, p):
    """Zero the weights top-k, top-p and min-p drop (Hugging Face's order; ties kept); return
    whether any was on. Weights are `exp((score - top) / temperature)`, so the most likely
    token weighs 1. O(n) plus a sort of the candidates in the buckets down to the one where the
    count (top-k) or the mass (top-p) is reached."""
    top_k, top_p, min_p = int(p[TOP_K]), p[TOP_P], p[MIN_P]
    cut_k = 0 < top_k < n
    if not (cut_k or top_p < 1.0 or min_p > 0.0):
        return False
    top = _peak(scores, n)[0]
    if cut_k:
        counts = np.zeros(N_BUCKETS, np.int64)
        for i in range(n):
            counts[_bucket(scores[i], top, temperature)] += 1
        last, seen = 0, counts[0]
        while seen < top_k:
            last += 1
            seen += counts[last]
        candidates = np.empty(seen, np.float32)
        m = 0
        for i in range(n):
            if _bucket(scores[i], top, temperature) <= last:
                candidates[m] = scores[i]
                m += 1
        kth = np.sort(candidates)[m - top_k]
        for i in range(n):
            if scores[i] < kth:
                weights[i] = 0.0
    if top_p < 1.0:
        mass = np.zeros(N_BUCKETS, np.float64)
        total = 0.0
        for i in range(n):
            mass[_bucket(scores[i], top, temperature)] += weights[i]
            total += weights[i]
        target = top_p * total
        last, reached = 0, mass[0]
        while reached < target and last < N_BUCKETS - 1:
            last += 1
            reached += mass[last]
        m = 0
        for i in range(n):
            if weights[i] > 0.0 and _bucket(scores[i], top, temperature) <= last:
                m += 1
        candidates = np.empty(m, np.float32)
        m = 0
        for i in range(n):
            if weights[i] > 0.0 and _bucket(scores[i], top, temperature) <= last:
                candidates[m] = weights[i]
                m += 1
        ordered = np.sort(candidates)[::-1]
        running, cut = 0.0, m - 1
        for j in range(m):
            running += ordered[j]
            if running >= target:
                cut = j
                break
        floor = ordered[cut]
        for i in range(n):
            if weights[i] < floor:
                weights[i] = 0.0
    if min_p > 0.0:
        floor = np.float32(min_p)  # times the largest weight, which is 1
        for i in range(n):
            if weights[i] < floor:
                weights[i] = 0.0
    return True


@numba.njit(cache=True, boundscheck=False)
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

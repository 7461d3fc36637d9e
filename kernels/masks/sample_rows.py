"""The masked sampler's Numba kernel: every row of a batch sampled in one call (semantics:
docs/engine.md, "The sampler"). `corral.kernels.masks.sampling`'s `sample`, `top_logprobs` and
`sample_batch` all call `sample_rows`: there is one implementation.

A row's tokens are its positions 0..n-1 with one bit each in a packed uint32 mask (bit i % 32 of
word i // 32). A free row is read in place with a mask of ones; a constrained row is read in place
with its own mask when it allows at least V / `GATHER_BELOW` tokens, else its allowed logits and
ids are first gathered (in id order, O(V / 32 + n)) and read with a mask of ones. Per row, with n
positions:
1. the peak (the largest allowed logit), one pass;
2. float32 weights `exp((score - top) / temperature)`, never stored: one pass sums them per
   block of `BLOCK` positions (one mask word) in float32, the blocks in float64 (LLVM's
   vectors hold 8 float32 and only 4 float64); at temperature 1 on the raw logits
   this gives `log_total`, and the logprob of position i is
   `float64(float32(values[i] - peak)) - log_total` (one formula for the chosen token and the
   top_logprobs list, so they agree bit for bit);
3. penalties (repetition, then presence and frequency) on a copy, O(n + len(prompt) +
   len(output) * log n);
4. greedy: the first allowed position with the largest score (the words before it only);
   else truncation as two floors,
   a score floor (top-k: the k-th largest score, ties kept) and a weight floor (the larger of
   top-p's, ties kept, and min-p), a second sums pass when the temperature, a penalty or a
   floor changes the weights, and the inverse CDF at the row's uniform: the block sums locate
   the block, a float64 running sum of its recomputed weights the position,
   O(n / BLOCK + BLOCK);
5. the `n_top[b]` best allowed positions by value (ties: lower id first);
6. only for a row in `diagnose` (constraint diagnostics, off by default): the allowed mass, the
   sum over the allowed tokens of the softmax of the row's raw logits over all V tokens (at
   temperature 1, before penalties and truncation: the distribution the logprob is read from),
   as `exp(peak + log_total - peak_all - log_total_all)`, and the chosen token's unmasked
   logprob `float64(float32(logit - peak_all)) - log_total_all`, from one more peak and sums
   pass over the whole row (the allowed ones' formulas over all V tokens); a free row's mass is
   1 and its unmasked logprob its logprob, with no pass. O(V) vectorized.

The passes are loops LLVM vectorizes, and a row's first pass prefetches the next row's logits
(docs/engine.md, "The sampler"; figures: bench/sample_batch.py).

Top-k and top-p never sort the vocabulary: a histogram of the scores in buckets of one temperature
(one e-fold of weight) finds the few candidates that can matter, and only those are sorted (one
`np.sort`, the only generic NumPy routine compiled here). `sample_rows` runs the rows on one thread,
in order; `sample_rows_parallel` runs the same per-row code on several of Numba's threads, which
take the rows one at a time from an atomic counter, costliest first (`sample_batch` takes it for
batches of `PARALLEL_MIN_ROWS` rows and more). A row's result depends on its own inputs only, so
both give the same tokens, logprobs and top lists, bit for bit.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from corral.kernels.claim import claim
from corral.kernels.expf import exp_nonpositive
from corral.kernels.prefetch import prefetch
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

TEMPERATURE, TOP_K, TOP_P, MIN_P, PRESENCE, FREQUENCY, REPETITION = range(7)
"""Columns of the float64 `params` table."""
N_PARAMS = 7
BLOCK = 32
"""Positions per block of the weight sums and the inverse CDF: one mask word."""
LANE_SETS = 4
"""Independent sets of BLOCK lanes the peak is kept in, words taken in turn."""
GATHER_BELOW = 4
"""A constrained row allowing fewer than V / GATHER_BELOW tokens is gathered before sampling."""
N_BUCKETS = 64
"""Buckets of the top-k / top-p histogram; each spans one temperature of score (an e-fold of
weight), the last one takes everything below."""

# Fast-math without nnan/ninf: reassociation lets LLVM vectorize sums, and -inf logits (a bias of
# -inf, a caller's own masking) still compare as they should.
_FAST = {"reassoc", "nsz", "arcp", "contract", "afn"}
_ONE = np.uint32(1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


@numba.njit(cache=True, boundscheck=False)
def _allowed_counts(masks, mask_rows, v):
    """How many tokens each row allows: int64 `[B]`, v for a free row (`mask_rows[b]` < 0),
    else the set bits of its mask. O(B * W)."""
    counts = np.empty(mask_rows.shape[0], np.int64)
    for b in range(mask_rows.shape[0]):
        counts[b] = v if mask_rows[b] < 0 else _count(masks[mask_rows[b]])
    return counts


@numba.njit(cache=True, boundscheck=False)
def _first_empty(counts):
    """The first b whose count is 0, else -1. O(B)."""
    for b in range(counts.shape[0]):
        if counts[b] == 0:
            return b
    return -1


@numba.njit(cache=True, boundscheck=False)
def sample_rows(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts, diagnose,
    allowed_mass, unmasked_logprobs,
):  # fmt: skip
    """Sample row b from `logits[rows[b]]` under `masks[mask_rows[b]]` (all tokens when
    `mask_rows[b]` is -1), for every b, on one thread, in order. Returns -1, or the first row
    whose mask allows no token (nothing is sampled then).

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
        diagnose: bool `[B]`, the rows whose constraint diagnostics are asked for (step 6 of
            the module docstring); allowed_mass, unmasked_logprobs: outputs, float64 `[B]`,
            written at those rows only (arrays of length 0 when `diagnose` has no True).

    O(B * V) vectorized (O(B * (V / 32 + n_allowed)) for sparse masks) plus each row's
    penalties, truncation and top list, plus O(V) vectorized for each constrained row in
    `diagnose`.
    """
    counts = _allowed_counts(masks, mask_rows, logits.shape[1])
    empty = _first_empty(counts)
    if empty >= 0:
        return empty
    ones = np.full((logits.shape[1] + BLOCK - 1) // BLOCK, 0xFFFFFFFF, np.uint32)
    for b in range(rows.shape[0]):
        _sample_one(
            logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start,
            output_ids, output_start, n_top, tokens, logprobs, top_ids, top_logprobs,
            top_counts, b, b + 1 if b + 1 < rows.shape[0] else -1, ones, counts, diagnose,
            allowed_mass, unmasked_logprobs,
        )  # fmt: skip
    return -1


@numba.njit(cache=True, boundscheck=False, parallel=True)
def sample_rows_parallel(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts, diagnose,
    allowed_mass, unmasked_logprobs, threads,
):  # fmt: skip
    """`sample_rows` on `threads` of Numba's threads; the same results (each row is `_sample_one` of
    its own inputs, whichever thread takes it).

    The rows are taken by the threads one at a time from a shared counter (`kernels.claim`, an
    atomic add), the costliest first (`_by_cost`): the calling thread starts at once and takes
    rows until none is left, and a thread that wakes late (a sleeping OpenMP worker takes tens
    of microseconds) takes fewer, so no thread waits for a share fixed in advance. Each thread
    claims its next row before sampling the current one and prefetches that row's logits during
    the current row's sums (as `sample_rows` does with the row after). The region still ends
    when every thread has arrived: on a machine whose other cores are busy that can cost a
    scheduler time slice, as any parallel region of the forward pass can.

    O(B * V / threads) vectorized, as `sample_rows`, plus O(B log B) for the order.
    """
    counts = _allowed_counts(masks, mask_rows, logits.shape[1])
    empty = _first_empty(counts)
    if empty >= 0:
        return empty
    ones = np.full((logits.shape[1] + BLOCK - 1) // BLOCK, 0xFFFFFFFF, np.uint32)
    order = _by_cost(counts, logits.shape[1])
    n_rows = rows.shape[0]
    claimed = np.zeros(1, np.int64)
    for _ in numba.prange(threads):
        at = claim(claimed)
        while at < n_rows:
            after = claim(claimed)
            _sample_one(
                logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start,
                output_ids, output_start, n_top, tokens, logprobs, top_ids, top_logprobs,
                top_counts, order[at], order[after] if after < n_rows else -1, ones, counts,
                diagnose, allowed_mass, unmasked_logprobs,
            )  # fmt: skip
            at = after
    return -1


@numba.njit(cache=True, boundscheck=False)
def _by_cost(counts, v):
    """The rows, costliest first: int64 `[B]`, rows read in place (free, or allowing at least
    v / `GATHER_BELOW` tokens: a pass over all v logits each) before gathered ones, those by
    allowed count, descending; ties by row. O(B log B)."""
    cost = np.empty(counts.shape[0], np.int64)
    for b in range(counts.shape[0]):
        cost[b] = v if counts[b] * GATHER_BELOW >= v else counts[b]
    return np.argsort(-cost, kind="mergesort")


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _sample_one(
    logits, rows, masks, mask_rows, params, uniforms, prompt_ids, prompt_start, output_ids,
    output_start, n_top, tokens, logprobs, top_ids, top_logprobs, top_counts, b, after, ones,
    counts, diagnose, allowed_mass, unmasked_logprobs,
):  # fmt: skip
    """Row b of `sample_rows` (see the module docstring for the steps); `ones` is a mask of
    ones at least `ceil(V / 32)` words long, `counts` the tokens each row allows. When row
    `after` (-1: none) is read in place (free or dense), the first pass over row b's mask words
    (the gather or the sums) prefetches row `after`'s logits."""
    values = logits[rows[b]]
    n = values.shape[0]
    fetch = after >= 0 and counts[after] * GATHER_BELOW >= n
    next_values = logits[rows[after]] if fetch else values
    mask = ones
    allowed = counts[b]
    gathered = False
    ids = np.empty(0, np.int32)
    if mask_rows[b] >= 0:
        mask = masks[mask_rows[b]]
        if allowed * GATHER_BELOW < n:
            ids = np.empty(allowed, np.int32)
            values = np.empty(allowed, np.float32)
            n = _gather(mask, logits[rows[b]], values, ids, next_values, fetch)
            mask, gathered, fetch = ones, True, False
    p = params[b]
    sums = np.empty((n + BLOCK - 1) // BLOCK, np.float64)
    peak = _peak(values, mask, n)
    allowed_peak = peak  # before the fall-back below: the diagnostics' (step 6)
    if not peak > -np.inf:  # no allowed logit is finite (-inf or NaN): all equally likely
        values = np.zeros(n, np.float32)
        peak = np.float32(0.0)
    one, no_floor = np.float32(1.0), np.float32(-np.inf)
    log_total = math.log(
        _sums(values, mask, n, peak, one, no_floor, np.float32(0.0), sums, next_values, fetch)
    )
    prompt = prompt_ids[prompt_start[b] : prompt_start[b + 1]]
    output = output_ids[output_start[b] : output_start[b + 1]]
    scores, top = values, peak
    penalized = _has_penalty(p, prompt, output)
    if penalized:
        scores = _penalized(values, mask, n, ids, gathered, p, prompt, output)
        top = _peak(scores, mask, n)
    if p[TEMPERATURE] == 0.0:
        chosen = _first_at(scores, mask, n, top)
    else:
        inverse = np.float32(min(1.0 / p[TEMPERATURE], _FLOAT32_MAX))  # finite: 0 * inverse is 0
        score_floor, weight_floor = _floors(scores, mask, n, allowed, top, inverse, p)
        if penalized or inverse != one or score_floor > no_floor or weight_floor > 0:
            _sums(scores, mask, n, top, inverse, score_floor, weight_floor, sums, scores, False)
        chosen = _draw(scores, mask, n, top, inverse, score_floor, weight_floor, sums, uniforms[b])
    tokens[b] = ids[chosen] if gathered else chosen
    logprobs[b] = np.float64(np.float32(values[chosen] - peak)) - log_total
    k = min(n_top[b], allowed)
    best = _best(values, mask, n, k)
    for j in range(k):
        top_ids[b, j] = ids[best[j]] if gathered else best[j]
        top_logprobs[b, j] = np.float64(np.float32(values[best[j]] - peak)) - log_total
    top_counts[b] = k
    if diagnose[b]:
        if mask_rows[b] < 0:  # nothing masked: the whole mass, the logprob unmasked already
            allowed_mass[b], unmasked_logprobs[b] = 1.0, logprobs[b]
        else:
            row = logits[rows[b]]
            mass, unmasked = _diagnostics(row, ones, tokens[b], allowed_peak, log_total, allowed)
            allowed_mass[b], unmasked_logprobs[b] = mass, unmasked


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _diagnostics(row, ones, token, peak, log_total, allowed):
    """(allowed mass, unmasked logprob of `token`) of a constrained row (step 6 of the module
    docstring): `row` float32 `[V]` the raw logits, `ones` a mask of ones, `peak` and
    `log_total` the allowed tokens' peak and log-sum of `exp(logit - peak)` (`_sample_one`'s;
    a peak of -inf or NaN: no allowed logit is finite), `allowed` how many tokens the mask
    allows. The whole row's peak and log-total come from the same `_peak` and `_sums` passes as
    the allowed ones', so that the unmasked logprob is the allowed one's formula over all V
    tokens. A row whose logits are all -inf or NaN is uniform (as `_sample_one` makes it): the
    mass is allowed / V; a row where only the allowed ones are: the mass is 0 and the unmasked
    logprob -inf. O(V) vectorized."""
    v = row.shape[0]
    top = _peak(row, ones, v)
    if not top > -np.inf:
        return allowed / v, -math.log(v)
    if not peak > -np.inf:
        return 0.0, -np.inf
    sums = np.empty((v + BLOCK - 1) // BLOCK, np.float64)
    one, no_floor = np.float32(1.0), np.float32(-np.inf)
    log_all = math.log(_sums(row, ones, v, top, one, no_floor, np.float32(0.0), sums, row, False))
    unmasked = np.float64(np.float32(row[token] - top)) - log_all
    log_mass = (np.float64(peak) - np.float64(top)) + (log_total - log_all)
    return min(math.exp(log_mass), 1.0), unmasked


@numba.njit(cache=True, inline="always")
def _bit(mask, i):
    """Whether position i is allowed: bit i % 32 of `mask[i // 32]`, as a bool. O(1)."""
    return ((mask[i >> 5] >> np.uint32(i & 31)) & _ONE) != 0


@numba.njit(cache=True, boundscheck=False)
def _count(mask):
    """How many bits of `mask` are set (a SWAR popcount per word, vectorized). O(len(mask))."""
    total = 0
    for w in range(mask.shape[0]):
        x = np.int64(mask[w])
        x = x - ((x >> 1) & 0x55555555)
        x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
        x = (x + (x >> 4)) & 0x0F0F0F0F
        total += ((x * 0x01010101) & 0xFFFFFFFF) >> 24
    return total


@numba.njit(cache=True, boundscheck=False)
def _gather(mask, row, values, ids, ahead, fetch):
    """Copy the logits and ids of the set bits of `mask` into `values` and `ids` (at least
    n long), in id order; return their number n. When `fetch`, prefetch the row `ahead` first,
    one 64-byte line a step. O(len(mask) + n): a full word is one
    32-value copy, another one step per set bit (the lowest set bit `word & -word`, whose
    position is the exponent of its float64). Only sparse masks are gathered
    (`GATHER_BELOW`), so a word holds few set bits and the loop's exit branch is the only
    one mispredicted (a branch per bit was mispredicted about half the time on the holes of a
    string state's mask, costing hundreds of microseconds a row)."""
    if fetch:  # the next row's lines, ahead of its first pass (this row's work is short)
        for i in range(0, ahead.shape[0], 16):
            prefetch(ahead, i)
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
        while word:  # each set bit: the lowest, its position from the exponent of its float
            low = word & (np.uint32(0) - word)
            j = (np.float64(low).view(np.int64) >> 52) - 1023
            values[n] = row[base + j]
            ids[n] = base + j
            n += 1
            word ^= low
    return n


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _peak(x, mask, n):
    """The largest allowed `x[:n]` (-inf when none is above -inf), n >= 1: elementwise maxima
    in `LANE_SETS` sets of BLOCK lanes, a mask word a step into the set of its index modulo
    `LANE_SETS`, then over the lanes. The words of whole groups of `LANE_SETS` go through
    `_peak_groups` (the sets in registers), the rest through the same steps here. A maximum
    is exact, so the order the positions are taken in changes nothing (but the sign of a zero
    peak, which no result depends on). O(n)."""
    full = n // BLOCK
    peak = np.float32(-np.inf)
    if full > 0:  # a short row (a gathered one of a few tokens) needs no lanes
        lanes = np.full(LANE_SETS * BLOCK, -np.inf, np.float32)
        groups = full // LANE_SETS
        _peak_groups(x, mask, groups, lanes)
        for w in range(groups * LANE_SETS, full):
            word, base, lane = mask[w], w * BLOCK, (w % LANE_SETS) * BLOCK
            for j in range(BLOCK):
                v = x[base + j]
                keep = (((word >> np.uint32(j)) & _ONE) != 0) & (v > lanes[lane + j])
                lanes[lane + j] = v if keep else lanes[lane + j]
        for j in range(LANE_SETS * BLOCK):
            peak = lanes[j] if lanes[j] > peak else peak
    for i in range(full * BLOCK, n):
        if _bit(mask, i) and x[i] > peak:
            peak = x[i]
    return peak


_WORD_VECTOR = ir.VectorType(ir.FloatType(), BLOCK)
_WORD_BITS = ir.VectorType(ir.IntType(1), BLOCK)


@intrinsic
def _peak_groups(typingctx, x, mask, groups, lanes):  # pragma: no cover - compiled
    """For the first `groups * LANE_SETS` mask words w (`groups` >= 0): lanes of set
    `w % LANE_SETS` take `x[32 w + j]` where bit j of `mask[w]` is set and the value is larger
    (an ordered compare: NaN never taken). x: float32, mask: uint32, lanes: float32
    `[LANE_SETS * BLOCK]` (read first, written last), all C-contiguous, not bounds-checked.

    Plain LLVM vector IR: a mask word is bitcast to 32 lanes of i1 (bit j is lane j), the
    `LANE_SETS` sets are vectors held in registers across the loop (in `_peak`'s own loop the
    sets live in memory, and a masked store to a set waits to be read back four words later:
    about 5 us of a 49,152-logit row where this takes 3, cache-resident). O(groups * 128)."""
    arrays = (x, mask, lanes)
    if not all(isinstance(a, types.Array) and a.layout == "C" for a in arrays):
        return None
    if (x.dtype, mask.dtype, lanes.dtype) != (types.float32, types.uint32, types.float32):
        return None
    if not isinstance(groups, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        def data(i):
            return context.make_array(signature.args[i])(context, builder, args[i]).data

        values = builder.bitcast(data(0), _WORD_VECTOR.as_pointer())
        words, sets = data(1), builder.bitcast(data(3), _WORD_VECTOR.as_pointer())
        i64 = ir.IntType(64)
        count = context.cast(builder, args[2], signature.args[2], types.int64)
        best = []  # each set in a stack slot of its own, which LLVM keeps in a register
        for k in range(LANE_SETS):
            slot = cgutils.alloca_once(builder, _WORD_VECTOR)
            builder.store(builder.load(builder.gep(sets, [i64(k)]), align=4), slot)
            best.append(slot)
        with cgutils.for_range(builder, count) as loop:
            for k in range(LANE_SETS):
                w = builder.add(builder.mul(loop.index, i64(LANE_SETS)), i64(k))
                bits = builder.bitcast(builder.load(builder.gep(words, [w]), align=4), _WORD_BITS)
                v = builder.load(builder.gep(values, [w]), align=4)
                held = builder.load(best[k])
                keep = builder.and_(builder.fcmp_ordered(">", v, held), bits)
                builder.store(builder.select(keep, v, held), best[k])
        for k in range(LANE_SETS):
            builder.store(builder.load(best[k]), builder.gep(sets, [i64(k)]), align=4)
        return context.get_dummy_value()

    return types.void(x, mask, groups, lanes), codegen


@numba.njit(cache=True, inline="always")
def _weight(score, allowed, top, inverse, score_floor, weight_floor):
    """The float32 weight `exp((score - top) * inverse)` of an allowed position whose score is
    at least `score_floor` and weight at least `weight_floor`, else 0. Branch-free. O(1)."""
    w = exp_nonpositive((score - top) * inverse)
    keep = allowed & (score >= score_floor) & (w >= weight_floor)
    return w if keep else np.float32(0.0)


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _sums(x, mask, n, top, inverse, score_floor, weight_floor, sums, ahead, fetch):
    """The sum of the `_weight`s of each BLOCK of positions into `sums` (float64
    `[ceil(n / BLOCK)]`, each a float32 sum of at most 32 weights <= 1: relative error below
    2e-6); returns their float64 total. When `fetch`, block i also prefetches the logits
    `ahead[32 i : 32 i + 32]` (the next row's). Vectorized, nothing stored per position. O(n)."""
    total = 0.0
    full = n // BLOCK
    plain = inverse == np.float32(1.0) and score_floor == -np.inf and weight_floor == 0.0
    for block in range(full):  # a constant trip count: LLVM makes the word a vector mask
        if fetch:  # the next row's two lines under this block
            prefetch(ahead, block * BLOCK)
            prefetch(ahead, block * BLOCK + 16)
        word, base = mask[block], block * BLOCK
        block_sum = np.float32(0.0)
        if plain:  # the same weights without the scaling and floors (a quarter of the work)
            for j in range(BLOCK):
                w = exp_nonpositive(x[base + j] - top)
                block_sum += w if ((word >> np.uint32(j)) & _ONE) != 0 else np.float32(0.0)
        else:
            for j in range(BLOCK):
                bit = ((word >> np.uint32(j)) & _ONE) != 0
                block_sum += _weight(x[base + j], bit, top, inverse, score_floor, weight_floor)
        sums[block] = block_sum
        total += np.float64(block_sum)
    if full < sums.shape[0]:
        block_sum = np.float32(0.0)
        for i in range(full * BLOCK, n):
            block_sum += _weight(x[i], _bit(mask, i), top, inverse, score_floor, weight_floor)
        sums[full] = block_sum
        total += np.float64(block_sum)
    return total


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _weights(x, mask, n, top, inverse, score_floor):
    """The `_weight` of every position (no weight floor), float32 `[n]` (a new array).
    Vectorized. O(n)."""
    weights = np.empty(n, np.float32)
    no_floor = np.float32(0.0)
    for w in range(n // BLOCK):
        word, base = mask[w], w * BLOCK
        for j in range(BLOCK):
            bit = ((word >> np.uint32(j)) & _ONE) != 0
            weights[base + j] = _weight(x[base + j], bit, top, inverse, score_floor, no_floor)
    for i in range(n // BLOCK * BLOCK, n):
        weights[i] = _weight(x[i], _bit(mask, i), top, inverse, score_floor, no_floor)
    return weights


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _draw(x, mask, n, top, inverse, score_floor, weight_floor, sums, uniform):
    """The position of the inverse CDF of the `_weight`s of `x[:n]` (block sums `sums`) at
    `uniform`: the first whose running sum exceeds `uniform` times the total, never a zero
    weight (the first allowed position when every weight is 0). O(n / BLOCK + BLOCK)."""
    total = 0.0
    for block in range(sums.shape[0]):
        total += sums[block]
    if not total > 0.0:  # every weight 0: only with infinite penalties
        return _first_at(x, mask, n, np.float32(np.nan))
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
        w = _weight(x[i], _bit(mask, i), top, inverse, score_floor, weight_floor)
        if w > 0.0:
            last = i
            running += w
            if running > target:
                return i
    return last if last >= 0 else _first_at(x, mask, n, np.float32(np.nan))


@numba.njit(cache=True, boundscheck=False, fastmath=_FAST)
def _first_at(x, mask, n, top):
    """The first allowed position whose `x` equals `top`, or the first allowed position when
    none does: a mask word a step, whether any of its allowed positions matches (an or over
    BLOCK lanes, vectorized), stopping at the first word that has one. O(n) worst, O(i) for a
    first match at i."""
    full = n // BLOCK
    for w in range(full):
        word, base = mask[w], w * BLOCK
        hit = False
        for j in range(BLOCK):
            hit |= (((word >> np.uint32(j)) & _ONE) != 0) & (x[base + j] == top)
        if hit:
            for j in range(BLOCK):
                if ((word >> np.uint32(j)) & _ONE) != 0 and x[base + j] == top:
                    return base + j
    for i in range(full * BLOCK, n):
        if _bit(mask, i) and x[i] == top:
            return i
    for i in range(n):
        if _bit(mask, i):
            return i
    return 0


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
def _position(ids, mask, n, gathered, token):
    """The position of `token` among the row's positions, -1 if it is not an allowed one."""
    if gathered:
        return _find(ids, n, token)
    return token if 0 <= token < n and _bit(mask, token) else -1


@numba.njit(cache=True, boundscheck=False)
def _has_penalty(p, prompt, output):
    """Whether a penalty changes some score: a repetition penalty with prompt or output ids, a
    presence or frequency penalty with output ids."""
    repeat = p[REPETITION] != 1.0 and (len(prompt) > 0 or len(output) > 0)
    return repeat or ((p[PRESENCE] != 0.0 or p[FREQUENCY] != 0.0) and len(output) > 0)


@numba.njit(cache=True, boundscheck=False)
def _penalized(values, mask, n, ids, gathered, p, prompt, output):
    """A copy of the logits `values[:n]` after the repetition penalty (each allowed token of
    prompt or output once), then the presence and frequency penalties (allowed output tokens),
    float32 `[n]`. O(n + (len(prompt) + len(output)) * log n)."""
    repeat = p[REPETITION] != 1.0 and (len(prompt) > 0 or len(output) > 0)
    penalize = (p[PRESENCE] != 0.0 or p[FREQUENCY] != 0.0) and len(output) > 0
    scores = values[:n].copy()
    if repeat:
        seen = np.zeros(n, np.bool_)
        for source in (prompt, output):
            for t in source:
                at = _position(ids, mask, n, gathered, t)
                if at >= 0:
                    seen[at] = True
        penalty = np.float32(p[REPETITION])
        for i in range(n):
            if seen[i]:
                scores[i] = scores[i] / penalty if scores[i] > 0 else scores[i] * penalty
    if penalize:
        counts = np.zeros(n, np.int32)
        for t in output:
            at = _position(ids, mask, n, gathered, t)
            if at >= 0:
                counts[at] += 1
        presence, frequency = np.float32(p[PRESENCE]), np.float32(p[FREQUENCY])
        for i in range(n):
            if counts[i] > 0:
                scores[i] = scores[i] - (frequency * np.float32(counts[i]) + presence)
    return scores


@numba.njit(cache=True, boundscheck=False)
def _bucket(score, top, inverse):
    """The histogram bucket of `score`: how many temperatures below `top`, at most
    N_BUCKETS - 1."""
    d = (top - score) * inverse
    return int(d) if d < N_BUCKETS - 1 else N_BUCKETS - 1


@numba.njit(cache=True, boundscheck=False)
def _floors(scores, mask, n, allowed, top, inverse, p):
    """(score floor, weight floor): the allowed positions top-k, top-p and min-p keep (Hugging
    Face's order; ties kept) are those whose score is at least the first and whose weight
    `exp((score - top) * inverse)` at least the second (-inf and 0 when off). The most likely
    token weighs 1. O(n) plus a sort of the candidates in the buckets down to the one where the
    count (top-k) or the mass (top-p) is reached."""
    top_k, top_p, min_p = int(p[TOP_K]), p[TOP_P], p[MIN_P]
    score_floor, weight_floor = np.float32(-np.inf), np.float32(0.0)
    if 0 < top_k < allowed:
        counts = np.zeros(N_BUCKETS, np.int64)
        for i in range(n):  # branch-free: a mask bit is unpredictable, a bucket index is not
            counts[_bucket(scores[i], top, inverse)] += np.int64(_bit(mask, i))
        last, seen = 0, counts[0]
        while seen < top_k:
            last += 1
            seen += counts[last]
        candidates = np.empty(seen, np.float32)
        m = 0
        for i in range(n):
            if _bucket(scores[i], top, inverse) <= last and _bit(mask, i):  # rarely past the first
                candidates[m] = scores[i]
                m += 1
        score_floor = np.sort(candidates)[m - top_k]
    if top_p < 1.0:
        weights = _weights(scores, mask, n, top, inverse, score_floor)
        mass = np.zeros(N_BUCKETS, np.float64)
        total, m = 0.0, 0
        for i in range(n):
            if weights[i] > 0.0:
                mass[_bucket(scores[i], top, inverse)] += weights[i]
                total += weights[i]
        target = top_p * total
        last, reached = 0, mass[0]
        while reached < target and last < N_BUCKETS - 1:
            last += 1
            reached += mass[last]
        for i in range(n):
            m += weights[i] > 0.0 and _bucket(scores[i], top, inverse) <= last
        candidates = np.empty(m, np.float32)
        m = 0
        for i in range(n):
            if weights[i] > 0.0 and _bucket(scores[i], top, inverse) <= last:
                candidates[m] = weights[i]
                m += 1
        ordered = np.sort(candidates)[::-1]
        running, cut = 0.0, m - 1
        for j in range(m):
            running += ordered[j]
            if running >= target:
                cut = j
                break
        weight_floor = ordered[cut]
    if min_p > 0.0:  # min_p times the largest weight, which is 1
        weight_floor = max(weight_floor, np.float32(min_p))
    return score_floor, weight_floor


@numba.njit(cache=True, boundscheck=False)
def _best(values, mask, n, k):
    """The `k` allowed positions of the largest `values[:n]`, largest first, ties by position:
    an insertion into a sorted list of k. O(n + inserts * k)."""
    best = np.empty(k, np.int64)
    if k == 0:
        return best
    count = 0
    for i in range(n):
        v = values[i]
        if count == k and not v > values[best[k - 1]]:
            continue
        if not _bit(mask, i):
            continue
        j = count if count < k else k - 1
        while j > 0 and values[best[j - 1]] < v:
            best[j] = best[j - 1]
            j -= 1
        best[j] = i
        count = min(count + 1, k)
    return best

"""Matrix products y = x W^T of several rows of x (prefill, batched decode) with W in GGUF's
K-quant and 5-bit block formats (Q4_K, Q5_K, Q6_K, Q5_0, Q4_0, Q5_1), the weights decoded from
`kquant_layout`'s column tiles once for all the rows, with float32 accumulation
(docs/design.md section 6).

For each chunk of `LANES` output rows of a tile (one parallel job) and each group of
sub-blocks that share quant bytes (Q4_K / Q5_K: the two of a chunk of nibbles; Q6_K: the 8 of
a half block; a 32-weight block), a kernel decodes those rows' quants once into float32
buffers (the integers q, or q - offset for the symmetric kinds: 16 KB for Q4_K / Q5_K, 32 KB
for Q6_K, 8 KB for the others), then applies each sub-block (32 weights; 16 for Q6_K) to every
row of x, `GROUP` rows side by side: one chain of multiply-adds per output, over the
sub-block's columns in order, vectorized over the chunk's rows, then the sub-block's scale
(and minimum) in float32:

    Q4_K, Q5_K: total += (d sc) * sum_j q_j x_j + (-(dmin m)) * sum_j x_j
    Q5_1:       total += d * sum_j q_j x_j + m * sum_j x_j
    Q6_K, Q5_0, Q4_0: total += (d sc) * sum_j (q_j - offset) x_j      (sc = 1 for Q5_0, Q4_0)

d sc and dmin m are exact in float32 (an 11-bit float16 mantissa times a 6- or 8-bit integer),
the same values `gguf.quants.dequantize` multiplies by q, so the products differ from the
float32 dequantized weights' only by the order of the float32 additions. sum_j x_j is
`quant.block_sums` (left to right).

Batch invariance: each row's sums are the same operations in the same order whatever the
other rows are (the rows of x are taken in chunks of `ROWS`), and `kquant_row`'s kernels for
one row of x do the same operations in the same order too, so a row's results equal, bit for
bit, what it gets alone. Each block's quants are read from memory once per chunk of rows. No
reassociation is allowed (`fastmath` contracts only), so the per-row order above is the one
the compiled code keeps.

Every kernel: O(B n_out k) flops and O(n_out k) decodes per chunk of `ROWS` rows.
"""

from __future__ import annotations

import numba
import numpy as np

ROWS = 64
"""Rows of x one pass over a chunk of a tile's weights serves (`kquants.kquant_matmul` cuts a
larger x): their sums take 64 x 64 float32, 16 KB."""

LANES = 64
"""Output rows of one parallel job (four 512-bit vectors of float32, a cache line of a
column's quant bytes): a tile (a multiple of 64 rows, `kquant_layout.tile_shape`) is taken in
chunks of `LANES` rows, each decoded into its own buffers; every loop over a chunk's lanes has
this constant trip count."""

GROUP = 4
"""Rows of x whose sums a kernel computes side by side (`_apply`)."""

_FASTMATH = {"contract"}  # fused multiply-adds, no reassociation: the per-row order is fixed

_LOW, _FOUR = np.uint8(15), np.uint8(4)  # a nibble's mask and shift
_TWO, _THREE, _SIX = np.uint8(2), np.uint8(3), np.uint8(6)
_32, _16, _0 = np.float32(32.0), np.float32(16.0), np.float32(0.0)  # Q6_K's offset, a fifth bit


@numba.njit(cache=True, inline="always")
def scaled_add(total, partial, scale, minimum, x_sum, with_min):  # pragma: no cover - compiled
    """total += scale * partial, then += minimum * x_sum (where with_min), lane by lane: a
    sub-block's sums into an output's total, the same operations for one row of x
    (`kquant_row`) as for several.  O(lanes)"""
    for r in range(total.shape[0]):
        total[r] += scale[r] * partial[r]
    if with_min:
        for r in range(total.shape[0]):
            total[r] += minimum[r] * x_sum


@numba.njit(cache=True, inline="always")
def k_scales(d, dmin, scales, minimums, scale, minimum):  # pragma: no cover - compiled
    """A Q4_K / Q5_K sub-block's float32 scale d sc and minimum -(dmin m), lane by lane
    (exact: an 11-bit mantissa times a 6-bit integer).  O(lanes)"""
    for r in range(scale.shape[0]):
        scale[r] = d[r] * np.float32(scales[r])
    for r in range(minimum.shape[0]):
        minimum[r] = -(dmin[r] * np.float32(minimums[r]))


@numba.njit(cache=True, inline="always")
def store(totals, out, start):  # pragma: no cover - compiled
    """totals [B, lanes] into out's columns start .. start + lanes (those past n_out, padding
    rows, dropped)."""
    end = min(start + totals.shape[1], out.shape[1])
    for b in range(out.shape[0]):
        for r in range(end - start):
            out[b, start + r] = totals[b, r]


@numba.njit(cache=True, inline="always")
def _apply(decoded, n_cols, x, col0, partial, totals, scale, minimum, sums, sum_index, with_min):
    """totals[b] += scale * (decoded^T x[b, col0:col0+n_cols]) (+ minimum * sums[b, sum_index])
    for every row b of x, lane by lane.  O(B n_cols LANES)

    partial: float32 [GROUP, LANES]. The rows go `GROUP` at a time, then one at a time: a
    row's chain of multiply-adds is the same either way, the group only gives the CPU more
    independent chains (each a load, a multiply-add and a store a column, whose latency one
    row's 4 vectors would wait on)."""
    batch = x.shape[0]
    b = 0
    p0, p1, p2, p3 = partial[0], partial[1], partial[2], partial[3]
    while b + GROUP <= batch:
        partial[:] = 0.0
        for j in range(n_cols):
            row = decoded[j]
            x0, x1 = x[b, col0 + j], x[b + 1, col0 + j]
            x2, x3 = x[b + 2, col0 + j], x[b + 3, col0 + j]
            for r in range(LANES):
                w = row[r]
                p0[r] += w * x0
                p1[r] += w * x1
                p2[r] += w * x2
                p3[r] += w * x3
        for i in range(GROUP):
            scaled_add(totals[b + i], partial[i], scale, minimum, sums[b + i, sum_index], with_min)
        b += GROUP
    while b < batch:
        p0[:] = 0.0
        for j in range(n_cols):
            row = decoded[j]
            x0 = x[b, col0 + j]
            for r in range(LANES):
                p0[r] += row[r] * x0
        scaled_add(totals[b], p0, scale, minimum, sums[b, sum_index], with_min)
        b += 1


@numba.njit(cache=True, inline="always")
def _chunk(job, tile):  # pragma: no cover - compiled
    """(tile, first lane, lanes) of parallel job `job`: a tile's rows in chunks of `LANES`
    (lanes = `LANES`: a tile is a whole number of chunks)."""
    chunks = tile // LANES
    t, c = job // chunks, job % chunks
    return t, c * LANES, LANES


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_k_matmul(x, sums, d, dmin, scales, minimums, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q4_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums float32 [B, k/32] (`quant.block_sums(x)`);
    d, dmin float32 [n_tiles, k/256, tile]; scales, minimums uint8 [n_tiles, k/32, tile];
    quants uint8 [n_tiles, k/2, tile]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * (tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        low = np.empty((32, LANES), np.float32)
        high = np.empty((32, LANES), np.float32)
        partial = np.empty((GROUP, LANES), np.float32)
        scale = np.empty(LANES, np.float32)
        minimum = np.empty(LANES, np.float32)
        totals = np.zeros((x.shape[0], LANES), np.float32)
        for block in range(n_super):
            for c in range(4):  # sub-blocks 2 c (low nibbles) and 2 c + 1 (high)
                for j in range(32):
                    column = quants[t, block * 128 + 32 * c + j, lo:hi]
                    low_row, high_row = low[j], high[j]
                    for r in range(LANES):
                        low_row[r] = np.float32(np.uint8(column[r] & _LOW))
                        high_row[r] = np.float32(np.uint8(column[r] >> _FOUR))
                for half in range(2):
                    sub = block * 8 + 2 * c + half
                    k_scales(
                        d[t, block, lo:hi], dmin[t, block, lo:hi], scales[t, sub, lo:hi],
                        minimums[t, sub, lo:hi], scale, minimum,
                    )  # fmt: skip
                    decoded = high if half else low
                    _apply(
                        decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True
                    )
        store(totals, out, t * tile + lo)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_k_matmul(x, sums, d, dmin, scales, minimums, high_bits, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q5_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    As `q4_k_matmul`, with high_bits uint8 [n_tiles, k/8, tile] (bit s of column 32 i + j is
    the fifth bit of sub-block s's weight j in block i)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * (tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        low = np.empty((32, LANES), np.float32)
        high = np.empty((32, LANES), np.float32)
        partial = np.empty((GROUP, LANES), np.float32)
        scale = np.empty(LANES, np.float32)
        minimum = np.empty(LANES, np.float32)
        totals = np.zeros((x.shape[0], LANES), np.float32)
        for block in range(n_super):
            for c in range(4):  # sub-blocks 2 c (low nibbles) and 2 c + 1 (high)
                low_bit, high_bit = np.uint8(1 << (2 * c)), np.uint8(1 << (2 * c + 1))
                for j in range(32):
                    column = quants[t, block * 128 + 32 * c + j, lo:hi]
                    fifth = high_bits[t, block * 32 + j, lo:hi]
                    low_row, high_row = low[j], high[j]
                    for r in range(LANES):  # q = nibble + 16 fifth bit, exact in float32
                        bits = fifth[r]
                        low_row[r] = np.float32(np.uint8(column[r] & _LOW)) + (
                            _16 if np.uint8(bits & low_bit) else _0
                        )
                        high_row[r] = np.float32(np.uint8(column[r] >> _FOUR)) + (
                            _16 if np.uint8(bits & high_bit) else _0
                        )
                for half in range(2):
                    sub = block * 8 + 2 * c + half
                    k_scales(
                        d[t, block, lo:hi], dmin[t, block, lo:hi], scales[t, sub, lo:hi],
                        minimums[t, sub, lo:hi], scale, minimum,
                    )  # fmt: skip
                    decoded = high if half else low
                    _apply(
                        decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True
                    )
        store(totals, out, t * tile + lo)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q6_k_matmul(x, sums, d, scales, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q6_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums unread; d float32 [n_tiles, k/256, tile]; scales int8
    [n_tiles, k/16, tile]; high_bits uint8 [n_tiles, k/4, tile]; quants uint8
    [n_tiles, k/2, tile]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * (tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((128, LANES), np.float32)
        partial = np.empty((GROUP, LANES), np.float32)
        scale = np.empty(LANES, np.float32)
        totals = np.zeros((x.shape[0], LANES), np.float32)
        for block in range(n_super):
            for h in range(2):  # weights 128 h + 32 p + l, sub-block 8 h + 2 p + l // 16
                for l in range(32):
                    near = quants[t, block * 128 + 64 * h + l, lo:hi]  # p = 0 (low), 2 (high)
                    far = quants[t, block * 128 + 64 * h + 32 + l, lo:hi]  # p = 1, 3
                    top = high_bits[t, block * 64 + 32 * h + l, lo:hi]
                    w0, w1 = decoded[l], decoded[32 + l]
                    w2, w3 = decoded[64 + l], decoded[96 + l]
                    for r in range(LANES):
                        n, f, h2 = near[r], far[r], top[r]
                        q0 = (n & _LOW) | ((h2 & _THREE) << _FOUR)
                        q1 = (f & _LOW) | (((h2 >> _TWO) & _THREE) << _FOUR)
                        q2 = (n >> _FOUR) | (((h2 >> _FOUR) & _THREE) << _FOUR)
                        q3 = (f >> _FOUR) | ((h2 >> _SIX) << _FOUR)
                        w0[r] = np.float32(np.uint8(q0)) - _32
                        w1[r] = np.float32(np.uint8(q1)) - _32
                        w2[r] = np.float32(np.uint8(q2)) - _32
                        w3[r] = np.float32(np.uint8(q3)) - _32
                for s in range(8):
                    sub = block * 16 + 8 * h + s
                    for r in range(LANES):
                        scale[r] = d[t, block, lo + r] * np.float32(scales[t, sub, lo + r])
                    _apply(
                        decoded[16 * s : 16 * s + 16], 16, x, sub * 16, partial, totals, scale,
                        scale, sums, 0, False,
                    )  # fmt: skip
        store(totals, out, t * tile + lo)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def small_matmul(x, sums, d, m, high_bits, quants, offset, five, with_min, out):  # pragma: no cover
    # (the 32-weight kinds)
    """out = x W^T for W in tiled Q5_0 (offset 16, five), Q4_0 (offset 8) or Q5_1 (offset 0,
    five, with_min): w = d (q - offset) (+ m).  O(B n_out k) flops; O(n_out k) decodes.

    x float32 [B, k], B <= `ROWS`; sums float32 [B, k/32] (`quant.block_sums(x)`, read where
    with_min); d, m float32 [n_tiles, k/32, tile]; high_bits uint32 [n_tiles, k/32, tile]
    (bit j: weight j's fifth bit); quants uint8 [n_tiles, k/2, tile]; m and high_bits any
    arrays of 3 dimensions where unread; out float32 [B, n_out] (written)."""
    n_tiles, n_blocks, tile = d.shape
    shift_by = np.float32(offset)
    for job in numba.prange(n_tiles * (tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((32, LANES), np.float32)
        partial = np.empty((GROUP, LANES), np.float32)
        totals = np.zeros((x.shape[0], LANES), np.float32)
        for block in range(n_blocks):
            fifth = high_bits[t, block, lo:hi] if five else high_bits[0, 0]  # unread unless five
            for j in range(16):
                column = quants[t, block * 16 + j, lo:hi]
                low_row, high_row = decoded[j], decoded[16 + j]
                low_bit = np.uint32(np.uint32(1) << np.uint32(j))
                high_bit = np.uint32(np.uint32(1) << np.uint32(16 + j))
                for r in range(LANES):
                    low_q = np.float32(np.uint8(column[r] & _LOW))
                    high_q = np.float32(np.uint8(column[r] >> _FOUR))
                    if five:
                        low_q += _16 if np.uint32(fifth[r] & low_bit) else _0
                        high_q += _16 if np.uint32(fifth[r] & high_bit) else _0
                    low_row[r] = low_q - shift_by
                    high_row[r] = high_q - shift_by
            scale = d[t, block, lo:hi]
            minimum = m[t, block, lo:hi] if with_min else scale
            _apply(
                decoded, 32, x, block * 32, partial, totals, scale, minimum, sums, block, with_min
            )
        store(totals, out, t * tile + lo)
    return out

"""Matrix products y = x W^T of several rows of x (prefill, batched decode) with W in GGUF's
K-quant and 5-bit block formats (Q4_K, Q5_K, Q6_K, Q5_0, Q4_0, Q5_1), the weights decoded from
`kquant_layout`'s column tiles once for all the rows, with float32 accumulation
(docs/design.md section 6).

For each chunk of `LANES` output rows of a tile and each sub-block (32 weights; 16 for Q6_K),
a kernel decodes the sub-block's quants of those rows once into a small float32 buffer (the
integers q, or q - offset for the symmetric kinds: 32 x 64 floats, 8 KB, in L1), then applies
it to every row of x: one chain of multiply-adds per output, over the sub-block's columns in
order, vectorized over the tile's rows, then the sub-block's scale (and minimum) in float32:

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
"""Rows of x one pass over a chunk of a tile's weights serves: their sums (64 x 64 float32,
16 KB) and the decoded sub-block (8 KB) stay in L1."""

LANES = 64
"""Output rows of one parallel job: a tile is taken in chunks of `LANES` rows (the last
smaller), each decoded into its own buffer of 32 x 64 float32."""

_FASTMATH = {"contract"}  # fused multiply-adds, no reassociation: the per-row order is fixed


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
    for every row b of x, lane by lane.  O(B n_cols lanes)"""
    lanes = partial.shape[0]
    for b in range(x.shape[0]):
        partial[:] = 0.0
        for j in range(n_cols):
            x_j = x[b, col0 + j]
            row = decoded[j]
            for r in range(lanes):
                partial[r] += row[r] * x_j
        scaled_add(totals[b], partial, scale, minimum, sums[b, sum_index], with_min)


@numba.njit(cache=True, inline="always")
def _chunk(job, tile):  # pragma: no cover - compiled
    """(tile, first lane, lanes) of parallel job `job`: a tile's rows in chunks of `LANES`."""
    chunks = -(-tile // LANES)
    t, c = job // chunks, job % chunks
    return t, c * LANES, min(LANES, tile - c * LANES)


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_k_matmul(x, sums, d, dmin, scales, minimums, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q4_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums float32 [B, k/32] (`quant.block_sums(x)`);
    d, dmin float32 [n_tiles, k/256, tile]; scales, minimums uint8 [n_tiles, k/32, tile];
    quants uint8 [n_tiles, k/2, tile]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * -(-tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((32, lanes), np.float32)
        partial = np.empty(lanes, np.float32)
        scale = np.empty(lanes, np.float32)
        minimum = np.empty(lanes, np.float32)
        totals = np.zeros((x.shape[0], lanes), np.float32)
        for block in range(n_super):
            for s in range(8):
                shift = np.uint8(4 * (s & 1))
                base = block * 128 + 32 * (s >> 1)
                for j in range(32):
                    column, row = quants[t, base + j, lo:hi], decoded[j]
                    for r in range(lanes):
                        row[r] = np.float32(np.uint8((column[r] >> shift) & np.uint8(15)))
                sub = block * 8 + s
                k_scales(
                    d[t, block, lo:hi], dmin[t, block, lo:hi], scales[t, sub, lo:hi],
                    minimums[t, sub, lo:hi], scale, minimum,
                )  # fmt: skip
                _apply(decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True)
        store(totals, out, t * tile + lo)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_k_matmul(x, sums, d, dmin, scales, minimums, high_bits, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q5_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    As `q4_k_matmul`, with high_bits uint8 [n_tiles, k/8, tile] (bit s of column 32 i + j is
    the fifth bit of sub-block s's weight j in block i)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * -(-tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((32, lanes), np.float32)
        partial = np.empty(lanes, np.float32)
        scale = np.empty(lanes, np.float32)
        minimum = np.empty(lanes, np.float32)
        totals = np.zeros((x.shape[0], lanes), np.float32)
        for block in range(n_super):
            for s in range(8):
                shift, bit = np.uint8(4 * (s & 1)), np.uint8(s)
                base = block * 128 + 32 * (s >> 1)
                for j in range(32):
                    column, row = quants[t, base + j, lo:hi], decoded[j]
                    fifth = high_bits[t, block * 32 + j, lo:hi]
                    for r in range(lanes):
                        low = (column[r] >> shift) & np.uint8(15)
                        high = ((fifth[r] >> bit) & np.uint8(1)) << np.uint8(4)
                        row[r] = np.float32(np.uint8(low | high))
                sub = block * 8 + s
                k_scales(
                    d[t, block, lo:hi], dmin[t, block, lo:hi], scales[t, sub, lo:hi],
                    minimums[t, sub, lo:hi], scale, minimum,
                )  # fmt: skip
                _apply(decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True)
        store(totals, out, t * tile + lo)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q6_k_matmul(x, sums, d, scales, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q6_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums unread; d float32 [n_tiles, k/256, tile]; scales int8
    [n_tiles, k/16, tile]; high_bits uint8 [n_tiles, k/4, tile]; quants uint8
    [n_tiles, k/2, tile]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, tile = d.shape
    for job in numba.prange(n_tiles * -(-tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((16, lanes), np.float32)
        partial = np.empty(lanes, np.float32)
        scale = np.empty(lanes, np.float32)
        totals = np.zeros((x.shape[0], lanes), np.float32)
        for block in range(n_super):
            for s in range(16):  # weights 16 s .. 16 s + 15: e = 128 h + 32 p + l
                h, p, l0 = s >> 3, (s & 7) >> 1, 16 * (s & 1)
                low_base = block * 128 + 64 * h + 32 * (p & 1) + l0
                low_shift, high_shift = np.uint8(4 * (p >> 1)), np.uint8(2 * p)
                high_base = block * 64 + 32 * h + l0
                for j in range(16):
                    column, row = quants[t, low_base + j, lo:hi], decoded[j]
                    top = high_bits[t, high_base + j, lo:hi]
                    for r in range(lanes):
                        low = (column[r] >> low_shift) & np.uint8(15)
                        high = ((top[r] >> high_shift) & np.uint8(3)) << np.uint8(4)
                        row[r] = np.float32(np.uint8(low | high)) - np.float32(32.0)
                sub = block * 16 + s
                for r in range(lanes):
                    scale[r] = d[t, block, lo + r] * np.float32(scales[t, sub, lo + r])
                _apply(decoded, 16, x, sub * 16, partial, totals, scale, scale, sums, 0, False)
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
    for job in numba.prange(n_tiles * -(-tile // LANES)):
        t, lo, lanes = _chunk(job, tile)
        hi = lo + lanes
        decoded = np.empty((32, lanes), np.float32)
        partial = np.empty(lanes, np.float32)
        totals = np.zeros((x.shape[0], lanes), np.float32)
        for block in range(n_blocks):
            for half in range(2):
                shift = np.uint32(4 * half)
                for j in range(16):
                    column, row = quants[t, block * 16 + j, lo:hi], decoded[16 * half + j]
                    bit = np.uint32(16 * half + j)
                    if five:
                        fifth = high_bits[t, block, lo:hi]
                        for r in range(lanes):
                            q = (np.uint32(column[r]) >> shift) & np.uint32(15)
                            q |= ((fifth[r] >> bit) & np.uint32(1)) << np.uint32(4)
                            row[r] = np.float32(np.uint8(q)) - shift_by
                    else:
                        for r in range(lanes):
                            q = (np.uint32(column[r]) >> shift) & np.uint32(15)
                            row[r] = np.float32(np.uint8(q)) - shift_by
            scale = d[t, block, lo:hi]
            minimum = m[t, block, lo:hi] if with_min else scale
            _apply(
                decoded, 32, x, block * 32, partial, totals, scale, minimum, sums, block, with_min
            )
        store(totals, out, t * tile + lo)
    return out

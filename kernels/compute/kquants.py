"""Matrix products y = x W^T with W in GGUF's K-quant and 5-bit block formats (Q4_K, Q5_K,
Q6_K, Q5_0, Q4_0, Q5_1), the weights decoded in registers from `kquant_layout`'s column tiles,
with float32 accumulation (docs/design.md section 6).

For each tile of `TILE` output rows and each sub-block (32 weights; 16 for Q6_K), a kernel
decodes the sub-block's quants of the tile's rows once into a small float32 buffer (the
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

Batch invariance: one kernel serves one row of x (decode) and many (prefill): the rows of x
are taken in chunks of `ROWS` and each row's sums are the same operations in the same order
whatever the other rows are, so a row's results equal, bit for bit, what it gets alone. Each
block's quants are read once per chunk of rows (from memory for the first row, then from the
decoded buffer). No reassociation is allowed (`fastmath` contracts only), so the per-row order
above is the one the compiled code keeps.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.compute.kquant_layout import TILE, KQuantMatrix
from corral.kernels.compute.quant import block_sums

ROWS = 64
"""Rows of x one pass over a tile's weights serves: their sums (64 x 64 float32, 16 KB) and
the decoded sub-block (8 KB) stay in L1."""

_FASTMATH = {"contract"}  # fused multiply-adds, no reassociation: the per-row order is fixed


@numba.njit(cache=True, inline="always")
def _apply(decoded, n_cols, x, col0, partial, totals, scale, minimum, sums, sum_index, with_min):
    """totals[b] += scale * (decoded^T x[b, col0:col0+n_cols]) (+ minimum * sums[b, sum_index])
    for every row b of x, lane by lane over the tile's rows.  O(B n_cols TILE)"""
    for b in range(x.shape[0]):
        partial[:] = 0.0
        for j in range(n_cols):
            x_j = x[b, col0 + j]
            row = decoded[j]
            for r in range(TILE):
                partial[r] += row[r] * x_j
        total = totals[b]
        for r in range(TILE):
            total[r] += scale[r] * partial[r]
        if with_min:
            x_sum = sums[b, sum_index]
            for r in range(TILE):
                total[r] += minimum[r] * x_sum


@numba.njit(cache=True, inline="always")
def _store(totals, out, t):  # pragma: no cover - compiled
    """The tile's sums into out's columns t TILE .. (the padding rows dropped)."""
    start = t * TILE
    end = min(start + TILE, out.shape[1])
    for b in range(out.shape[0]):
        for r in range(end - start):
            out[b, start + r] = totals[b, r]


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_k_matmul(x, sums, d, dmin, scales, minimums, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q4_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums float32 [B, k/32] (`quant.block_sums(x)`);
    d, dmin float32 [n_tiles, k/256, TILE]; scales, minimums uint8 [n_tiles, k/32, TILE];
    quants uint8 [n_tiles, k/2, TILE]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((32, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        minimum = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_super):
            for s in range(8):
                shift = np.uint8(4 * (s & 1))
                base = block * 128 + 32 * (s >> 1)
                for j in range(32):
                    column, row = quants[t, base + j], decoded[j]
                    for r in range(TILE):
                        row[r] = np.float32((column[r] >> shift) & np.uint8(15))
                sub = block * 8 + s
                for r in range(TILE):
                    scale[r] = d[t, block, r] * np.float32(scales[t, sub, r])
                    minimum[r] = -(dmin[t, block, r] * np.float32(minimums[t, sub, r]))
                _apply(decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True)
        _store(totals, out, t)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_k_matmul(x, sums, d, dmin, scales, minimums, high_bits, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q5_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    As `q4_k_matmul`, with high_bits uint8 [n_tiles, k/8, TILE] (bit s of column 32 i + j is
    the fifth bit of sub-block s's weight j in block i)."""
    n_tiles, n_super, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((32, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        minimum = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_super):
            for s in range(8):
                shift = 4 * (s & 1)
                base = block * 128 + 32 * (s >> 1)
                for j in range(32):
                    for r in range(TILE):
                        low = (quants[t, base + j, r] >> shift) & 15
                        high = ((high_bits[t, block * 32 + j, r] >> s) & 1) << 4
                        decoded[j, r] = np.float32(low | high)
                sub = block * 8 + s
                for r in range(TILE):
                    scale[r] = d[t, block, r] * np.float32(scales[t, sub, r])
                    minimum[r] = -(dmin[t, block, r] * np.float32(minimums[t, sub, r]))
                _apply(decoded, 32, x, sub * 32, partial, totals, scale, minimum, sums, sub, True)
        _store(totals, out, t)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q6_k_matmul(x, sums, d, scales, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q6_K.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums unread; d float32 [n_tiles, k/256, TILE]; scales int8
    [n_tiles, k/16, TILE]; high_bits uint8 [n_tiles, k/4, TILE]; quants uint8
    [n_tiles, k/2, TILE]; out float32 [B, n_out] (written)."""
    n_tiles, n_super, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((16, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_super):
            for s in range(16):  # weights 16 s .. 16 s + 15: e = 128 h + 32 p + l
                h, p, l0 = s >> 3, (s & 7) >> 1, 16 * (s & 1)
                low_base = block * 128 + 64 * h + 32 * (p & 1) + l0
                low_shift = 4 * (p >> 1)
                high_base = block * 64 + 32 * h + l0
                for j in range(16):
                    for r in range(TILE):
                        low = (quants[t, low_base + j, r] >> low_shift) & 15
                        high = ((high_bits[t, high_base + j, r] >> (2 * p)) & 3) << 4
                        decoded[j, r] = np.float32(np.int32(low | high) - 32)
                sub = block * 16 + s
                for r in range(TILE):
                    scale[r] = d[t, block, r] * np.float32(scales[t, sub, r])
                _apply(decoded, 16, x, sub * 16, partial, totals, scale, scale, sums, 0, False)
        _store(totals, out, t)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_0_matmul(x, sums, d, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q5_0.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums unread; d float32 [n_tiles, k/32, TILE]; high_bits
    uint32 [n_tiles, k/32, TILE]; quants uint8 [n_tiles, k/2, TILE]; out float32 [B, n_out]."""
    n_tiles, n_blocks, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((32, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_blocks):
            for j in range(16):
                for r in range(TILE):
                    byte = np.uint32(quants[t, block * 16 + j, r])
                    bits = high_bits[t, block, r]
                    low = (byte & 15) | (((bits >> j) & 1) << 4)
                    high = (byte >> 4) | (((bits >> (j + 16)) & 1) << 4)
                    decoded[j, r] = np.float32(np.int32(low) - 16)
                    decoded[j + 16, r] = np.float32(np.int32(high) - 16)
            for r in range(TILE):
                scale[r] = d[t, block, r]
            _apply(decoded, 32, x, block * 32, partial, totals, scale, scale, sums, 0, False)
        _store(totals, out, t)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_0_matmul(x, sums, d, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q4_0.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums unread; d float32 [n_tiles, k/32, TILE]; quants uint8
    [n_tiles, k/2, TILE]; out float32 [B, n_out] (written)."""
    n_tiles, n_blocks, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((32, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_blocks):
            for j in range(16):
                for r in range(TILE):
                    byte = quants[t, block * 16 + j, r]
                    decoded[j, r] = np.float32(np.int32(byte & 15) - 8)
                    decoded[j + 16, r] = np.float32(np.int32(byte >> 4) - 8)
            for r in range(TILE):
                scale[r] = d[t, block, r]
            _apply(decoded, 32, x, block * 32, partial, totals, scale, scale, sums, 0, False)
        _store(totals, out, t)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_1_matmul(x, sums, d, m, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q5_1.  O(B n_out k) flops; O(n_out k) decodes per call.

    x float32 [B, k], B <= `ROWS`; sums float32 [B, k/32] (`quant.block_sums(x)`); d, m
    float32 [n_tiles, k/32, TILE]; high_bits uint32 [n_tiles, k/32, TILE]; quants uint8
    [n_tiles, k/2, TILE]; out float32 [B, n_out] (written)."""
    n_tiles, n_blocks, _ = d.shape
    for t in numba.prange(n_tiles):
        decoded = np.empty((32, TILE), np.float32)
        partial = np.empty(TILE, np.float32)
        scale = np.empty(TILE, np.float32)
        minimum = np.empty(TILE, np.float32)
        totals = np.zeros((x.shape[0], TILE), np.float32)
        for block in range(n_blocks):
            for j in range(16):
                for r in range(TILE):
                    byte = np.uint32(quants[t, block * 16 + j, r])
                    bits = high_bits[t, block, r]
                    decoded[j, r] = np.float32((byte & 15) | (((bits >> j) & 1) << 4))
                    decoded[j + 16, r] = np.float32((byte >> 4) | (((bits >> (j + 16)) & 1) << 4))
            for r in range(TILE):
                scale[r] = d[t, block, r]
                minimum[r] = m[t, block, r]
            _apply(decoded, 32, x, block * 32, partial, totals, scale, minimum, sums, block, True)
        _store(totals, out, t)
    return out


_KERNELS = {
    "Q4_K": q4_k_matmul,
    "Q5_K": q5_k_matmul,
    "Q6_K": q6_k_matmul,
    "Q5_0": q5_0_matmul,
    "Q4_0": q4_0_matmul,
    "Q5_1": q5_1_matmul,
}


def kquant_matmul(x: np.ndarray, w: KQuantMatrix, out: np.ndarray | None = None) -> np.ndarray:
    """y = x W^T for W tiled by `kquant_layout.repack`.  O(B n_out k) flops; W's bytes read
    once per `ROWS` rows of x.

    x: float32 [B, k] or [k] (one row); out: float32 [B, n_out] to write into, or None for a
    new array. Returns y float32 [B, n_out] ([n_out] for a 1-D x). A row's result does not
    depend on the other rows of x (bit for bit).

    Raises:
        ValueError: x not float32 of 1 or 2 dimensions with k columns, or out of the wrong
            shape or dtype.
    """
    x = np.asarray(x)
    one_row = x.ndim == 1
    if x.dtype != np.float32 or x.ndim not in (1, 2) or x.shape[-1] != w.k:
        raise ValueError(f"x must be float32 [B, {w.k}] or [{w.k}], got {x.dtype} {x.shape}")
    rows = np.ascontiguousarray(x.reshape(-1, w.k))
    batch = rows.shape[0]
    if out is None:
        out = np.empty((batch, w.n_out), np.float32)
    elif out.dtype != np.float32 or out.shape != (batch, w.n_out) or not out.flags.c_contiguous:
        raise ValueError(
            f"out must be C-contiguous float32 [{batch}, {w.n_out}], got {out.dtype} {out.shape}"
        )
    kernel = _KERNELS[w.kind]
    for start in range(0, batch, ROWS):
        chunk = rows[start : start + ROWS]
        kernel(chunk, block_sums(chunk), *w.arrays, out[start : start + ROWS])
    return out[0] if one_row else out

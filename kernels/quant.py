"""Matrix products with weights kept in GGUF's block-quantized layouts, dequantized in registers
with float32 accumulation (DESIGN.md section 6; the block formats are ggml's, `ggml-common.h`).

A weight matrix W [n_out, k] (Hugging Face's [out, in]) is cut along k into blocks of 32:

    Q4_1: w = scale * q + minimum, q in 0..15 (a nibble): 16 bytes of nibbles a block, the low
          nibble of byte j is element j, the high nibble element j + 16
    Q8_0: w = scale * q, q in -128..127 (a signed byte): 32 bytes a block

The kernels read the blocks in a tiled layout (`tile_rows`): the output rows are cut into
`n_tiles` tiles of `tile` rows (the last padded with zero rows), and inside a tile the quants
are stored column by column, so that the `tile` weights one input column meets are contiguous:

    quants uint8 [n_tiles, k / 2, tile] (Q4_1: byte j of a block for each row of the tile) or
    int8 [n_tiles, k, tile] (Q8_0); scales (and minimums) float32 [n_tiles, k / 32, tile]

One input value then multiplies a whole vector of rows (a broadcast and a fused multiply-add per
16 weights, no horizontal sums): for each tile and block, `tile` float32 partial sums gather
q * x over the block's 32 columns and are added in as scale * sum + minimum * (the block's sum
of x, `block_sums`). The float32 path's weights are these same dequantized values, so the two
paths differ only in the order of the float32 additions. The kernels compute y = x W^T for a few
rows of x (decode at small batches); a larger batch is a float32 GEMM's job. One row of x goes
to `q4_1_matmul` / `q8_0_matmul`; several go `GROUP` at a time to the `_grouped` kernels, which
unpack each weight once for the whole group (the unpacking, not the multiply-add, is most of a
row's cost), and Q4_1 passes of more than `GROUP` rows go `WIDE_GROUP` (8) at a time to
`q4_1_matmul_grouped8`, which amortizes its nibble unpacking over twice the rows.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.attention import prefetch

BLOCK = 32
"""Weights per quantization block (Q4_1 and Q8_0)."""

MAX_TILE = 512
"""The most output rows a tile holds: its partial sums (2 KB) stay in L1, and two tiles or more
let the parallel loop share a matrix of 576 rows or more between two threads."""

_FASTMATH = {"reassoc", "contract", "nsz"}  # reassociation lets the rows' lanes vectorize

PREFETCH_COLUMNS = 16
"""How many columns of a tile ahead the one-row kernels ask for (8 KB ahead in a tile of 512
rows of Q4_1): a decode step's weights (about 100 MB) come from memory, not from cache, and
with the hardware's prefetching alone the one-row product of a cold gate/up matrix took about
a fifth longer on one thread."""


@numba.njit(cache=True, inline="always")
def _prefetch_column(flat, column, n_columns, tile):  # pragma: no cover - compiled
    """Ask for column `column` of a tile whose quants are `flat` ([n_columns tile] bytes), one
    cache line per 64 bytes; nothing past the tile's end. O(tile / 64)"""
    if column < n_columns:
        for i in range(0, tile, 64):
            prefetch(flat, column * tile + i)


def tile_shape(n_out: int) -> tuple[int, int]:
    """(n_tiles, tile): the fewest tiles of at most `MAX_TILE` rows covering n_out rows, each a
    multiple of 16 rows (one 512-bit vector of float32).

    Raises:
        ValueError: n_out < 1.
    """
    if n_out < 1:
        raise ValueError(f"a matrix needs at least one output row, got {n_out}")
    n_tiles = -(-n_out // MAX_TILE)
    tile = -(-n_out // n_tiles)
    return n_tiles, -(-tile // 16) * 16


def tile_rows(a: np.ndarray, n_tiles: int, tile: int) -> np.ndarray:
    """Rows cut into tiles, each stored column by column, zero rows padding the last.
    [n_out, c] -> [n_tiles, c, tile] (same dtype, contiguous)"""
    padded = np.zeros((n_tiles * tile, a.shape[1]), a.dtype)
    padded[: a.shape[0]] = a
    return np.ascontiguousarray(padded.reshape(n_tiles, tile, a.shape[1]).transpose(0, 2, 1))


@numba.njit(cache=True)
def block_sums(x):  # pragma: no cover - compiled
    """The sum of each block of 32 values of each row, in float32, left to right.  O(B k).
    float32 [B, k] (C-contiguous, k a multiple of 32) -> float32 [B, k / 32]

    Compiled: a decode step takes 121 of them, where NumPy's reshaped sum cost a few
    microseconds of overhead each."""
    rows, n_blocks = x.shape[0], x.shape[1] // BLOCK
    sums = np.empty((rows, n_blocks), np.float32)
    for b in range(rows):
        for block in range(n_blocks):
            total = np.float32(0.0)
            for j in range(block * BLOCK, (block + 1) * BLOCK):
                total += x[b, j]
            sums[b, block] = total
    return sums


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_1_matmul(x, x_block_sums, scales, minimums, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q4_1 blocks.  O(B n_out k) flops; each tile's quants are read
    once from memory, from L2 for the B rows of x after the first.

    x float32 [B, k]; x_block_sums float32 [B, k/32] (`block_sums(x)`); scales, minimums
    float32 [n_tiles, k/32, tile]; quants uint8 [n_tiles, k/2, tile];
    out float32 [B, n_tiles tile] (written; rows past n_out are zero).
    """
    batch = x.shape[0]
    n_tiles, n_blocks, tile = scales.shape
    half = BLOCK // 2
    for t in numba.prange(n_tiles):
        flat = quants[t].reshape(-1)
        partial = np.empty(tile, np.float32)
        total = np.empty(tile, np.float32)
        for b in range(batch):
            total[:] = 0.0
            for block in range(n_blocks):
                partial[:] = 0.0
                for j in range(half):
                    _prefetch_column(
                        flat, block * half + j + PREFETCH_COLUMNS, n_blocks * half, tile
                    )
                    x_low = x[b, block * BLOCK + j]
                    x_high = x[b, block * BLOCK + half + j]
                    column = quants[t, block * half + j]  # [tile]
                    for r in range(tile):
                        byte = column[r]
                        low = np.float32(np.uint8(byte & np.uint8(15)))
                        high = np.float32(np.uint8(byte >> np.uint8(4)))
                        partial[r] += low * x_low + high * x_high
                scale, minimum = scales[t, block], minimums[t, block]
                x_sum = x_block_sums[b, block]
                for r in range(tile):
                    total[r] += scale[r] * partial[r] + minimum[r] * x_sum
            out[b, t * tile : (t + 1) * tile] = total
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q8_0_matmul(x, scales, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q8_0 blocks.  O(B n_out k) flops; each tile's quants are read
    once from memory, from L2 for the B rows of x after the first.

    x float32 [B, k]; scales float32 [n_tiles, k/32, tile]; quants int8 [n_tiles, k, tile];
    out float32 [B, n_tiles tile] (written; rows past n_out are zero).
    """
    batch = x.shape[0]
    n_tiles, n_blocks, tile = scales.shape
    for t in numba.prange(n_tiles):
        flat = quants[t].reshape(-1)
        partial = np.empty(tile, np.float32)
        total = np.empty(tile, np.float32)
        for b in range(batch):
            total[:] = 0.0
            for block in range(n_blocks):
                partial[:] = 0.0
                for j in range(block * BLOCK, (block + 1) * BLOCK):
                    _prefetch_column(flat, j + PREFETCH_COLUMNS, n_blocks * BLOCK, tile)
                    x_j = x[b, j]
                    column = quants[t, j]  # [tile]
                    for r in range(tile):
                        partial[r] += np.float32(column[r]) * x_j
                scale = scales[t, block]
                for r in range(tile):
                    total[r] += scale[r] * partial[r]
            out[b, t * tile : (t + 1) * tile] = total
    return out


GROUP = 4
"""Rows of x the grouped kernels take at once: each weight is unpacked once for all of them."""


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_1_matmul_grouped(x, x_block_sums, scales, minimums, quants, out):  # pragma: no cover
    """`q4_1_matmul` for x of several rows, `GROUP` at a time: each quant is unpacked once and
    multiplies the group's 4 rows.  O(B n_out k) flops, W's bytes read once per group.

    x float32 [B, k] with B a multiple of GROUP (pad with zero rows); x_block_sums float32
    [B, k/32]; scales, minimums, quants and out as `q4_1_matmul`'s.
    """
    batch = x.shape[0]
    n_tiles, n_blocks, tile = scales.shape
    half = BLOCK // 2
    for t in numba.prange(n_tiles):
        partial = np.empty((GROUP, tile), np.float32)
        total = np.empty((GROUP, tile), np.float32)
        for first in range(0, batch, GROUP):
            total[:] = 0.0
            for block in range(n_blocks):
                partial[:] = 0.0
                p0, p1, p2, p3 = partial[0], partial[1], partial[2], partial[3]
                for j in range(half):
                    low_column = block * BLOCK + j
                    xl0, xl1 = x[first, low_column], x[first + 1, low_column]
                    xl2, xl3 = x[first + 2, low_column], x[first + 3, low_column]
                    xh0, xh1 = x[first, low_column + half], x[first + 1, low_column + half]
                    xh2, xh3 = x[first + 2, low_column + half], x[first + 3, low_column + half]
                    column = quants[t, block * half + j]  # [tile]
                    for r in range(tile):
                        byte = column[r]
                        low = np.float32(np.uint8(byte & np.uint8(15)))
                        high = np.float32(np.uint8(byte >> np.uint8(4)))
                        p0[r] += low * xl0 + high * xh0
                        p1[r] += low * xl1 + high * xh1
                        p2[r] += low * xl2 + high * xh2
                        p3[r] += low * xl3 + high * xh3
                scale, minimum = scales[t, block], minimums[t, block]
                for i in range(GROUP):
                    x_sum = x_block_sums[first + i, block]
                    for r in range(tile):
                        total[i, r] += scale[r] * partial[i, r] + minimum[r] * x_sum
            out[first : first + GROUP, t * tile : (t + 1) * tile] = total
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q8_0_matmul_grouped(x, scales, quants, out):  # pragma: no cover - compiled
    """`q8_0_matmul` for x of several rows, `GROUP` at a time: each quant is converted once and
    multiplies the group's 4 rows.  O(B n_out k) flops, W's bytes read once per group.

    x float32 [B, k] with B a multiple of GROUP (pad with zero rows); scales, quants and out as
    `q8_0_matmul`'s.
    """
    batch = x.shape[0]
    n_tiles, n_blocks, tile = scales.shape
    for t in numba.prange(n_tiles):
        partial = np.empty((GROUP, tile), np.float32)
        total = np.empty((GROUP, tile), np.float32)
        for first in range(0, batch, GROUP):
            total[:] = 0.0
            for block in range(n_blocks):
                partial[:] = 0.0
                p0, p1, p2, p3 = partial[0], partial[1], partial[2], partial[3]
                for j in range(block * BLOCK, (block + 1) * BLOCK):
                    x0, x1, x2, x3 = x[first, j], x[first + 1, j], x[first + 2, j], x[first + 3, j]
                    column = quants[t, j]  # [tile]
                    for r in range(tile):
                        weight = np.float32(column[r])
                        p0[r] += weight * x0
                        p1[r] += weight * x1
                        p2[r] += weight * x2
                        p3[r] += weight * x3
                scale = scales[t, block]
                for i in range(GROUP):
                    for r in range(tile):
                        total[i, r] += scale[r] * partial[i, r]
            out[first : first + GROUP, t * tile : (t + 1) * tile] = total
    return out


WIDE_GROUP = 8
"""Rows of x `q4_1_matmul_grouped8` takes at once (for passes of more than `GROUP` rows)."""


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_1_matmul_grouped8(x, x_block_sums, scales, minimums, quants, out):  # pragma: no cover
    """`q4_1_matmul_grouped` with groups of `WIDE_GROUP` (8) rows: each nibble is unpacked once
    for 8 rows of x instead of 4.  O(B n_out k) flops, W's bytes read once per group.

    x float32 [B, k] with B a multiple of WIDE_GROUP (pad with zero rows); the other arguments
    as `q4_1_matmul`'s.
    """
    batch = x.shape[0]
    n_tiles, n_blocks, tile = scales.shape
    half = BLOCK // 2
    for t in numba.prange(n_tiles):
        partial = np.empty((WIDE_GROUP, tile), np.float32)
        total = np.empty((WIDE_GROUP, tile), np.float32)
        for first in range(0, batch, WIDE_GROUP):
            total[:] = 0.0
            for block in range(n_blocks):
                partial[:] = 0.0
                p0, p1, p2, p3 = partial[0], partial[1], partial[2], partial[3]
                p4, p5, p6, p7 = partial[4], partial[5], partial[6], partial[7]
                for j in range(half):
                    low_column = block * BLOCK + j
                    high_column = low_column + half
                    xl0, xl1 = x[first, low_column], x[first + 1, low_column]
                    xl2, xl3 = x[first + 2, low_column], x[first + 3, low_column]
                    xl4, xl5 = x[first + 4, low_column], x[first + 5, low_column]
                    xl6, xl7 = x[first + 6, low_column], x[first + 7, low_column]
                    xh0, xh1 = x[first, high_column], x[first + 1, high_column]
                    xh2, xh3 = x[first + 2, high_column], x[first + 3, high_column]
                    xh4, xh5 = x[first + 4, high_column], x[first + 5, high_column]
                    xh6, xh7 = x[first + 6, high_column], x[first + 7, high_column]
                    column = quants[t, block * half + j]  # [tile]
                    for r in range(tile):
                        byte = column[r]
                        low = np.float32(np.uint8(byte & np.uint8(15)))
                        high = np.float32(np.uint8(byte >> np.uint8(4)))
                        p0[r] += low * xl0 + high * xh0
                        p1[r] += low * xl1 + high * xh1
                        p2[r] += low * xl2 + high * xh2
                        p3[r] += low * xl3 + high * xh3
                        p4[r] += low * xl4 + high * xh4
                        p5[r] += low * xl5 + high * xh5
                        p6[r] += low * xl6 + high * xh6
                        p7[r] += low * xl7 + high * xh7
                scale, minimum = scales[t, block], minimums[t, block]
                for i in range(WIDE_GROUP):
                    x_sum = x_block_sums[first + i, block]
                    for r in range(tile):
                        total[i, r] += scale[r] * partial[i, r] + minimum[r] * x_sum
            out[first : first + WIDE_GROUP, t * tile : (t + 1) * tile] = total
    return out

"""Matrix products with weights kept in GGUF's block-quantized layouts, dequantized in registers
with float32 accumulation (docs/design.md section 6; the block formats are ggml's, `ggml-common.h`).

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
paths differ only in the order of the float32 additions. The kernels here compute y = x W^T
for one row of x (decode at batch 1), where the product streams the weights from memory;
passes of several rows go to `kernels.compute.quant_rows`, which unpacks each weight once for a
group of rows and keeps their sums in registers.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.prefetch import prefetch_l2

BLOCK = 32
"""Weights per quantization block (Q4_1 and Q8_0)."""

MAX_TILE = 512
"""The most output rows a tile holds: its partial sums (2 KB) stay in L1, and two tiles or more
let the parallel loop share a matrix of 576 rows or more between two threads."""

_FASTMATH = {"reassoc", "contract", "nsz"}  # reassociation lets the rows' lanes vectorize

PREFETCH_COLUMNS = 16
"""How many columns of a tile ahead the one-row kernels ask for (8 KB ahead in a tile of 512
rows of Q4_1): a decode step's weights (about 100 MB) come from memory, not from cache, and
the hardware's prefetching alone leaves the one-row product of a cold matrix waiting on them."""


@numba.njit(cache=True, inline="always")
def _prefetch_column(flat, column, n_columns, tile):  # pragma: no cover - compiled
    """Ask for column `column` of a tile whose quants are `flat` ([n_columns tile] bytes), one
    cache line per 64 bytes; nothing past the tile's end. O(tile / 64)"""
    if column < n_columns:
        for i in range(0, tile, 64):
            prefetch_l2(flat, column * tile + i)


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
    once from memory, from L2 for the B rows of x after the first. Each output's sums run in
    `quant_rows`' order (a fused multiply-add a weight, columns j and j + 16 in turn,
    then the scale's and the minimum's), so a row's results equal its row of
    `quant_rows.float_matmul` bit for bit, as `q8_0_matmul`'s do.

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
                    for r in range(tile):  # column j, then j + 16: `quant_rows`' order
                        byte = column[r]
                        low = np.float32(np.uint8(byte & np.uint8(15)))
                        high = np.float32(np.uint8(byte >> np.uint8(4)))
                        partial[r] += low * x_low
                        partial[r] += high * x_high
                scale, minimum = scales[t, block], minimums[t, block]
                x_sum = x_block_sums[b, block]
                for r in range(tile):
                    total[r] += scale[r] * partial[r]
                    total[r] += minimum[r] * x_sum
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


ROWS_AT_ONCE = 16
"""Output rows `q8_0_chosen_rows` computes side by side: their sums are independent chains of
multiply-adds, so the CPU overlaps them where one row's chain would wait on each add."""


@numba.njit(cache=True, fastmath={"contract"})
def q8_0_chosen_rows(x, ids, scales, quants, out):  # pragma: no cover - compiled
    """out[i] = (x W^T)[ids[i]] for chosen rows of W in row-major Q8_0 blocks, each with the
    same float32 operations in the same order as `q8_0_matmul` computes it (a fused multiply-add
    a weight, block by block), so the results equal its bit for bit.  O(len(ids) k) flops;
    only the chosen rows are read.

    The masked LM head (`corral.model.llama.lm_head`): a constrained step whose mask allows a
    few tokens needs only their logits. No reassociation is allowed (`fastmath` contracts
    only), so each row's sum keeps `q8_0_matmul`'s order; `ROWS_AT_ONCE` rows go side by side.

    x float32 [k]; ids int32 [n] (each in 0..n_out-1, unchecked); scales float32 [n_out, k/32];
    quants int8 [n_out, k]; out float32 [n] (written).
    """
    n = ids.shape[0]
    n_blocks = scales.shape[1]
    rows = np.empty(ROWS_AT_ONCE, np.int64)
    partial = np.empty(ROWS_AT_ONCE, np.float32)
    total = np.empty(ROWS_AT_ONCE, np.float32)
    for first in range(0, n, ROWS_AT_ONCE):
        for r in range(ROWS_AT_ONCE):  # past the end, repeat the last row (not written)
            rows[r] = ids[min(first + r, n - 1)]
        total[:] = 0.0
        for block in range(n_blocks):
            partial[:] = 0.0
            for j in range(block * BLOCK, (block + 1) * BLOCK):
                x_j = x[j]
                for r in range(ROWS_AT_ONCE):
                    partial[r] += np.float32(quants[rows[r], j]) * x_j
            for r in range(ROWS_AT_ONCE):
                total[r] += scales[rows[r], block] * partial[r]
        for r in range(min(ROWS_AT_ONCE, n - first)):
            out[first + r] = total[r]
    return out

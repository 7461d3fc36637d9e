"""Matrix products with weights kept in GGUF's block-quantized layouts, dequantized in registers
with float32 accumulation (DESIGN.md section 6; the block formats are ggml's, `ggml-common.h`).

A weight matrix W [n_out, k] (Hugging Face's [out, in]) is cut along k into blocks of 32:

    Q4_1: w = scale * q + minimum, q in 0..15 (a nibble): 16 bytes of nibbles a block, the low
          nibble of byte j is element j, the high nibble element j + 16
    Q8_0: w = scale * q, q in -128..127 (a signed byte): 32 bytes a block

The kernels take the blocks unpacked into plain arrays, `scales` (and `minimums`) float32
[n_out, k / 32] and the quants uint8 [n_out, k / 2] (Q4_1) or int8 [n_out, k] (Q8_0), and compute
y = x W^T for a few rows of x (they are meant for decode at small batches; a larger batch is a
float32 GEMM's job). Per output row, 32 float32 lanes accumulate scale * q * x block after block
and are summed at the end; a Q4_1 row adds sum_blocks minimum * (sum of x over the block), from
`block_sums`. The float32 path's weights are these same dequantized values, so the two paths
differ only in the order of the float32 additions.

A nibble is split in floating point (hi = floor(byte / 16), lo = byte - 16 hi): Numba widens
integer bit operations to int64, which would halve the vector width.
"""

from __future__ import annotations

import numba
import numpy as np

BLOCK = 32
"""Weights per quantization block (Q4_1 and Q8_0)."""

ROWS_PER_TASK = 32
"""Output rows one iteration of a kernel's parallel loop computes."""

_FASTMATH = {"reassoc", "contract", "nsz"}  # reassociation lets the 32 lanes vectorize


def block_sums(x: np.ndarray) -> np.ndarray:
    """The sum of each block of 32 values of each row.  float32 [B, k] -> float32 [B, k / 32]"""
    return x.reshape(x.shape[0], -1, BLOCK).sum(axis=-1, dtype=np.float32)


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_1_matmul(x, x_block_sums, scales, minimums, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in Q4_1 blocks.  O(B n_out k) flops; W's bytes are read once, each
    row's from L1 for the B rows of x after the first.

    x float32 [B, k]; x_block_sums float32 [B, k/32] (`block_sums(x)`); scales, minimums
    float32 [n_out, k/32]; quants uint8 [n_out, k/2]; out float32 [B, n_out] (written).
    """
    batch = x.shape[0]
    n_out, n_blocks = scales.shape
    half = BLOCK // 2
    for task in numba.prange((n_out + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        lanes = np.empty(BLOCK, np.float32)
        for row in range(task * ROWS_PER_TASK, min(n_out, (task + 1) * ROWS_PER_TASK)):
            for b in range(batch):
                lanes[:] = 0.0
                for block in range(n_blocks):
                    scale = scales[row, block]
                    for j in range(half):
                        byte = np.float32(quants[row, block * half + j])
                        high = np.floor(byte * np.float32(1.0 / 16.0))
                        low = byte - np.float32(16.0) * high
                        lanes[j] += scale * low * x[b, block * BLOCK + j]
                        lanes[half + j] += scale * high * x[b, block * BLOCK + half + j]
                total = np.float32(0.0)
                for j in range(BLOCK):
                    total += lanes[j]
                for block in range(n_blocks):
                    total += minimums[row, block] * x_block_sums[b, block]
                out[b, row] = total
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q8_0_matmul(x, scales, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in Q8_0 blocks.  O(B n_out k) flops; W's bytes are read once, each
    row's from L1 for the B rows of x after the first.

    x float32 [B, k]; scales float32 [n_out, k/32]; quants int8 [n_out, k];
    out float32 [B, n_out] (written).
    """
    batch = x.shape[0]
    n_out, n_blocks = scales.shape
    for task in numba.prange((n_out + ROWS_PER_TASK - 1) // ROWS_PER_TASK):
        lanes = np.empty(BLOCK, np.float32)
        for row in range(task * ROWS_PER_TASK, min(n_out, (task + 1) * ROWS_PER_TASK)):
            for b in range(batch):
                lanes[:] = 0.0
                for block in range(n_blocks):
                    scale = scales[row, block]
                    for j in range(BLOCK):
                        weight = scale * np.float32(quants[row, block * BLOCK + j])
                        lanes[j] += weight * x[b, block * BLOCK + j]
                total = np.float32(0.0)
                for j in range(BLOCK):
                    total += lanes[j]
                out[b, row] = total
    return out

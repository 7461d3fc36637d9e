"""Products y = x W^T for one row of x (decode at batch 1) with W in `kquant_layout`'s column
tiles of Q4_K, Q5_K, Q6_K, Q5_0, Q4_0 or Q5_1: the weights stream from memory and are decoded
in registers straight into the multiply-adds, with no buffer between (docs/design.md
section 6).

Each output's sums are `kquant_rows`' (the kernels of several rows): one chain of
multiply-adds per sub-block over its columns in order, each weight the same float32 integer
(q, or q - offset), then the sub-block's scale and minimum added by the same function
(`kquant_rows.scaled_add`), sub-block after sub-block. So a row's result here equals its row
of a `kquant_rows` product bit for bit (batch invariance). Where two sub-blocks share the
quant bytes (the low and high nibbles of Q4_K / Q5_K / Q6_K), their chains run side by side
from one load of the bytes; the 32-weight blocks (Q5_0, Q4_0, Q5_1) take their 16 bytes twice,
low nibbles then high (the second time from L1), to keep the columns' order.

Every kernel: x float32 [B, k] (B rows in turn; one in practice: several rows go faster in
`kquant_rows`), sums float32 [B, k/32] (`quant.block_sums(x)`, read where W has minimums),
the tiled arrays of `kquant_layout.KQuantMatrix.arrays`, out float32 [B, n_out] (written).
O(B n_out k) flops; each weight byte is read once from memory per row of x.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.compute.kquant_rows import _FASTMATH, k_scales, scaled_add, store

_LOW = np.uint8(15)  # a nibble's mask
_FOUR = np.uint8(4)  # a nibble's shift
_ONE, _TWO, _THREE, _SIX = np.uint8(1), np.uint8(2), np.uint8(3), np.uint8(6)
_32 = np.float32(32.0)  # Q6_K's offset
_16, _0 = np.float32(16.0), np.float32(0.0)  # a fifth bit's weight


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q4_k_row(x, sums, d, dmin, scales, minimums, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q4_K (module docstring)."""
    n_tiles, n_super, tile = d.shape
    for t in numba.prange(n_tiles):
        low_sum = np.empty(tile, np.float32)
        high_sum = np.empty(tile, np.float32)
        scale = np.empty(tile, np.float32)
        minimum = np.empty(tile, np.float32)
        totals = np.zeros((x.shape[0], tile), np.float32)
        for b in range(x.shape[0]):
            total = totals[b]
            for block in range(n_super):
                for c in range(4):  # sub-blocks 2 c (low nibbles) and 2 c + 1 (high)
                    low_sum[:] = 0.0
                    high_sum[:] = 0.0
                    first = block * 256 + 64 * c
                    for j in range(32):
                        column = quants[t, block * 128 + 32 * c + j]
                        x_low, x_high = x[b, first + j], x[b, first + 32 + j]
                        for r in range(tile):
                            byte = column[r]
                            low_sum[r] += np.float32(np.uint8(byte & _LOW)) * x_low
                            high_sum[r] += np.float32(np.uint8(byte >> _FOUR)) * x_high
                    for half in range(2):
                        sub = block * 8 + 2 * c + half
                        partial = high_sum if half else low_sum
                        k_scales(
                            d[t, block], dmin[t, block], scales[t, sub], minimums[t, sub],
                            scale, minimum,
                        )  # fmt: skip
                        scaled_add(total, partial, scale, minimum, sums[b, sub], True)
        store(totals, out, t * tile)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q5_k_row(x, sums, d, dmin, scales, minimums, high_bits, quants, out):  # pragma: no cover
    """out = x W^T for W in tiled Q5_K (module docstring)."""
    n_tiles, n_super, tile = d.shape
    for t in numba.prange(n_tiles):
        low_sum = np.empty(tile, np.float32)
        high_sum = np.empty(tile, np.float32)
        scale = np.empty(tile, np.float32)
        minimum = np.empty(tile, np.float32)
        totals = np.zeros((x.shape[0], tile), np.float32)
        for b in range(x.shape[0]):
            total = totals[b]
            for block in range(n_super):
                for c in range(4):
                    low_sum[:] = 0.0
                    high_sum[:] = 0.0
                    first = block * 256 + 64 * c
                    low_bit, high_bit = np.uint8(1 << (2 * c)), np.uint8(1 << (2 * c + 1))
                    for j in range(32):
                        column = quants[t, block * 128 + 32 * c + j]
                        fifth = high_bits[t, block * 32 + j]
                        x_low, x_high = x[b, first + j], x[b, first + 32 + j]
                        for r in range(tile):  # q = nibble + 16 fifth bit, exact in float32
                            byte, bits = column[r], fifth[r]
                            low = np.float32(np.uint8(byte & _LOW)) + (
                                _16 if np.uint8(bits & low_bit) else _0
                            )  # noqa: E501
                            high = np.float32(np.uint8(byte >> _FOUR)) + (
                                _16 if np.uint8(bits & high_bit) else _0
                            )
                            low_sum[r] += low * x_low
                            high_sum[r] += high * x_high
                    for half in range(2):
                        sub = block * 8 + 2 * c + half
                        partial = high_sum if half else low_sum
                        k_scales(
                            d[t, block], dmin[t, block], scales[t, sub], minimums[t, sub],
                            scale, minimum,
                        )  # fmt: skip
                        scaled_add(total, partial, scale, minimum, sums[b, sub], True)
        store(totals, out, t * tile)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def q6_k_row(x, sums, d, scales, high_bits, quants, out):  # pragma: no cover - compiled
    """out = x W^T for W in tiled Q6_K (module docstring): for each half of a block (128
    weights, 8 sub-blocks of 16) the 8 chains side by side, then their scales in order."""
    n_tiles, n_super, tile = d.shape
    for t in numba.prange(n_tiles):
        partials = np.empty((8, tile), np.float32)
        scale = np.empty(tile, np.float32)
        totals = np.zeros((x.shape[0], tile), np.float32)
        for b in range(x.shape[0]):
            total = totals[b]
            for block in range(n_super):
                for h in range(2):  # weights 128 h + 32 p + l, sub-block 8 h + 2 p + l // 16
                    partials[:] = 0.0
                    first = block * 256 + 128 * h
                    for l in range(32):
                        near = quants[t, block * 128 + 64 * h + l]  # p = 0 (low), 2 (high)
                        far = quants[t, block * 128 + 64 * h + 32 + l]  # p = 1, 3
                        top = high_bits[t, block * 64 + 32 * h + l]
                        x0, x1 = x[b, first + l], x[b, first + 32 + l]
                        x2, x3 = x[b, first + 64 + l], x[b, first + 96 + l]
                        s = l >> 4
                        p0, p1, p2, p3 = (
                            partials[s],
                            partials[2 + s],
                            partials[4 + s],
                            partials[6 + s],
                        )
                        for r in range(tile):
                            n, f, h2 = near[r], far[r], top[r]
                            q0 = (n & _LOW) | ((h2 & _THREE) << _FOUR)
                            q1 = (f & _LOW) | (((h2 >> _TWO) & _THREE) << _FOUR)
                            q2 = (n >> _FOUR) | (((h2 >> _FOUR) & _THREE) << _FOUR)
                            q3 = (f >> _FOUR) | ((h2 >> _SIX) << _FOUR)
                            p0[r] += (np.float32(np.uint8(q0)) - _32) * x0
                            p1[r] += (np.float32(np.uint8(q1)) - _32) * x1
                            p2[r] += (np.float32(np.uint8(q2)) - _32) * x2
                            p3[r] += (np.float32(np.uint8(q3)) - _32) * x3
                    for s in range(8):
                        sub = block * 16 + 8 * h + s
                        for r in range(tile):
                            scale[r] = d[t, block, r] * np.float32(scales[t, sub, r])
                        scaled_add(total, partials[s], scale, scale, np.float32(0.0), False)
        store(totals, out, t * tile)
    return out


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def small_row(x, sums, d, m, high_bits, quants, offset, five, with_min, out):  # pragma: no cover
    """out = x W^T for W in tiled Q5_0 (offset 16, five), Q4_0 (offset 8) or Q5_1 (offset 0,
    five, with_min; m its minimums): for each block, columns 0-15 from the low nibbles, then
    16-31 from the high ones, one chain, then d (and m times the block's sum of x). m and
    high_bits are any arrays of the right number of dimensions where unused."""
    n_tiles, n_blocks, tile = d.shape
    shift_by = np.float32(offset)
    for t in numba.prange(n_tiles):
        partial = np.empty(tile, np.float32)
        totals = np.zeros((x.shape[0], tile), np.float32)
        for b in range(x.shape[0]):
            total = totals[b]
            for block in range(n_blocks):
                partial[:] = 0.0
                fifth = high_bits[t, block] if five else high_bits[0, 0]  # unread unless five
                for j in range(16):  # columns 0-15: the low nibbles
                    column, x_j = quants[t, block * 16 + j], x[b, block * 32 + j]
                    bit = np.uint32(np.uint32(1) << np.uint32(j))
                    for r in range(tile):
                        q = np.float32(np.uint8(column[r] & _LOW))
                        if five:
                            q += _16 if np.uint32(fifth[r] & bit) else _0
                        partial[r] += (q - shift_by) * x_j
                for j in range(16):  # columns 16-31: the high nibbles
                    column, x_j = quants[t, block * 16 + j], x[b, block * 32 + 16 + j]
                    bit = np.uint32(np.uint32(1) << np.uint32(16 + j))
                    for r in range(tile):
                        q = np.float32(np.uint8(column[r] >> _FOUR))
                        if five:
                            q += _16 if np.uint32(fifth[r] & bit) else _0
                        partial[r] += (q - shift_by) * x_j
                minimum = m[t, block] if with_min else d[t, block]
                scaled_add(total, partial, d[t, block], minimum, sums[b, block], with_min)
        store(totals, out, t * tile)
    return out

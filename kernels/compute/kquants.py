"""The K-quant products' entry: y = x W^T for W repacked by `kquant_layout.repack` (Q4_K,
Q5_K, Q6_K, Q5_0, Q4_0, Q5_1), one row of x on `kquant_row`'s kernels (weights decoded in
registers as they stream from memory), several on `kquant_rows`' (each sub-block decoded once
for up to `kquant_rows.ROWS` rows). The two compute each output with the same float32
operations in the same order, so a row's result does not depend on the rows beside it (batch
invariance, bit for bit)."""

from __future__ import annotations

import numpy as np
from corral.kernels.compute import kquant_row, kquant_rows
from corral.kernels.compute.kquant_layout import KQuantMatrix
from corral.kernels.compute.quant import block_sums

_ROWS_KERNELS = {
    "Q4_K": kquant_rows.q4_k_matmul,
    "Q5_K": kquant_rows.q5_k_matmul,
    "Q6_K": kquant_rows.q6_k_matmul,
}

_ROW_KERNELS = {
    "Q4_K": kquant_row.q4_k_row,
    "Q5_K": kquant_row.q5_k_row,
    "Q6_K": kquant_row.q6_k_row,
}

_SMALL = {"Q5_0": (16, True, False), "Q4_0": (8, False, False), "Q5_1": (0, True, True)}
"""(offset, fifth bits, minimum) of the 32-weight kinds (`kquant_row.small_row`,
`kquant_rows.small_matmul`)."""

_NO_BITS = np.zeros((1, 1, 16), np.uint32)  # Q4_0's fifth bits and Q5_0 / Q4_0's minimums:
_NO_MINIMUMS = np.zeros((1, 1, 16), np.float32)  # unread


def _product(x: np.ndarray, sums: np.ndarray, w: KQuantMatrix, out: np.ndarray) -> None:
    """out = x W^T on the kernel of W's kind: `kquant_row`'s for one row, else `kquant_rows`'
    (x [B, k], B <= `kquant_rows.ROWS`)."""
    one = x.shape[0] == 1
    if w.kind in _SMALL:
        offset, five, with_min = _SMALL[w.kind]
        d, quants = w.arrays[0], w.arrays[-1]
        minimums = w.arrays[1] if with_min else _NO_MINIMUMS
        bits = w.arrays[-2] if five else _NO_BITS
        kernel = kquant_row.small_row if one else kquant_rows.small_matmul
        kernel(x, sums, d, minimums, bits, quants, offset, five, with_min, out)
    elif one:
        _ROW_KERNELS[w.kind](x, sums, *w.arrays, out)
    else:
        _ROWS_KERNELS[w.kind](x, sums, *w.arrays, out)


def kquant_matmul(x: np.ndarray, w: KQuantMatrix, out: np.ndarray | None = None) -> np.ndarray:
    """y = x W^T for W tiled by `kquant_layout.repack`.  O(B n_out k) flops; W's bytes read
    once for one row, once per `kquant_rows.ROWS` rows for several.

    x: float32 [B, k] or [k] (one row); out: float32 [B, n_out] (C-contiguous) to write into,
    or None for a new array. Returns y float32 [B, n_out] ([n_out] for a 1-D x), float32
    accumulation. A row's result does not depend on the other rows of x (bit for bit).

    Raises:
        ValueError: x not float32 of 1 or 2 dimensions with k columns, or out of the wrong
            shape, dtype or layout.
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
    for start in range(0, batch, kquant_rows.ROWS):
        chunk = rows[start : start + kquant_rows.ROWS]
        _product(chunk, block_sums(chunk), w, out[start : start + kquant_rows.ROWS])
    return out[0] if one_row else out

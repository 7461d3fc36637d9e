"""The small per-token layers of a Llama block, RMSNorm, RoPE and SwiGLU's gating, as Numba
kernels (docs/design.md section 6; the formulas are Hugging Face's `LlamaRMSNorm`,
`apply_rotary_pos_emb` and `LlamaMLP`).

At batch 1 a decode step calls them 120 times on vectors of a few hundred values, where NumPy's
per-operation overhead (an einsum, temporaries, broadcasting) costs more than the arithmetic;
one compiled call per use does the same work in a single pass over the data. Where a layer
follows a residual sum (`add_rms_norm`) or precedes the cache write (`rope_store` in
`corral.kernels.compute.attention`), the one call does both, with the same float32 operations as the
separate steps (so the same results, bit for bit).
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.expf import EXP_MIN, LN2_HIGH, LN2_LOW, LOG2E, exp_nonpositive, exp_reduced

_FASTMATH = {"reassoc", "contract", "nsz"}  # SwiGLU's loops vectorize; no inf or NaN is formed
_EXP_MAX = np.float32(88.0)  # exp(88) ~ 1.65e38 < float32's largest: 2^n needs n <= 127


SQUARE_LANES = 8
"""`rms_norm` sums a row's squares in this many float64 partial sums (element j into sum j mod
8, then the sums pairwise in a fixed tree): independent chains the CPU overlaps and LLVM packs
into vectors. One sum was a chain of dependent float64 additions, 4 cycles an element:
150 us for [256, 640] on one thread, 3-4% of a prefill."""


@numba.njit(cache=True, inline="always")
def _square_sum(x, i, begin, d):  # pragma: no cover - compiled
    """The sum of the squares of x[i, begin : begin + d] in float64, in `SQUARE_LANES` partial
    sums added in a fixed order: the same value for the same values whatever else the pass
    holds. O(d)"""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = begin
    end = begin + d
    while j + 8 <= end:
        v0, v1 = np.float64(x[i, j]), np.float64(x[i, j + 1])
        v2, v3 = np.float64(x[i, j + 2]), np.float64(x[i, j + 3])
        v4, v5 = np.float64(x[i, j + 4]), np.float64(x[i, j + 5])
        v6, v7 = np.float64(x[i, j + 6]), np.float64(x[i, j + 7])
        s0 += v0 * v0
        s1 += v1 * v1
        s2 += v2 * v2
        s3 += v3 * v3
        s4 += v4 * v4
        s5 += v5 * v5
        s6 += v6 * v6
        s7 += v7 * v7
        j += 8
    while j < end:
        value = np.float64(x[i, j])
        s0 += value * value
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@numba.njit(cache=True)
def rms_norm(x, weight, eps, out):  # pragma: no cover - compiled
    """out = x / sqrt(mean(x^2) + eps) * weight, row by row.  O(N d).

    x float32 [N, d]; weight float32 [d]; eps float; out float32 [N, d] (written; may not be x).
    The mean square is accumulated in float64 (`_square_sum`). Returns out.
    """
    n, d = x.shape
    for i in range(n):
        total = _square_sum(x, i, 0, d)
        factor = np.float32(1.0 / np.sqrt(total / d + eps))
        for j in range(d):
            out[i, j] = x[i, j] * factor * weight[j]
    return out


@numba.njit(cache=True)
def head_rms_norm(qkv, q_weight, k_weight, q_heads, kv_heads, eps, out):  # pragma: no cover
    """RMSNorm over each head of q and of k in a fused q/k/v projection (Qwen3's and Gemma 3's
    `q_norm`, `k_norm`), v copied as it is: `rms_norm` of each head's row, the same operations,
    in one pass with no reshaped copies.  O(N (Hq + 2 Hkv) hd)

    qkv float32 [N, (Hq + 2 Hkv) hd] (q's heads, then k's, then v's; any strides); q_weight,
    k_weight float32 [hd]; out float32 [N, (Hq + 2 Hkv) hd] (written; may not be qkv).
    Returns out.
    """
    n = qkv.shape[0]
    width = q_weight.shape[0]
    for t in range(n):
        for h in range(q_heads + kv_heads):
            weight = q_weight if h < q_heads else k_weight
            base = h * width
            total = _square_sum(qkv, t, base, width)
            factor = np.float32(1.0 / np.sqrt(total / width + eps))
            for j in range(width):
                out[t, base + j] = qkv[t, base + j] * factor * weight[j]
        for j in range((q_heads + kv_heads) * width, qkv.shape[1]):
            out[t, j] = qkv[t, j]
    return out


@numba.njit(cache=True)
def add_rms_norm(x, delta, weight, eps, out):  # pragma: no cover - compiled
    """x += delta (in place), then out = `rms_norm(x)`: a residual sum and the next layer's
    RMSNorm in one pass.  O(N d).

    x float32 [N, d] (updated); delta float32 [N, d] (any strides); weight float32 [d]; eps
    float; out float32 [N, d] (written; may not be x). Returns out. The sums are float32 as
    NumPy's `x += delta`, so x and out equal the two steps' results exactly.
    """
    n, d = x.shape
    for i in range(n):
        for j in range(d):
            x[i, j] += delta[i, j]
    return rms_norm(x, weight, eps, out)


@numba.njit(cache=True, fastmath=_FASTMATH)
def swiglu(gate, up, out):  # pragma: no cover - compiled
    """SwiGLU's gating: out = silu(gate) * up = gate * up / (1 + exp(-gate)), gate and up the
    two halves of the fused projection.  O(N F), every loop vectorizable.

    gate, up float32 [N, F] (any strides: row by row, the inner loop along the last axis, so
    pass the layout whose last axis is contiguous); out float32 [N, F] (written). Returns out.
    exp is Cephes' polynomial (`kernels.expf`, relative error ~1e-7), its argument clamped to
    [-87, 88]: past it silu(g) is g (g >= 87) or within 1e-36 of 0 (g <= -88) either way.
    """
    n, width = out.shape
    scale_bits = np.empty(width, np.int32)  # the bits of 2^k per value, viewed as float32
    scale = scale_bits.view(np.float32)
    for i in range(n):
        for j in range(width):  # out = exp(-gate) = 2^k p(r), p(r) here, 2^k's bits aside
            x = min(max(-gate[i, j], EXP_MIN), _EXP_MAX)
            k = np.floor(x * LOG2E + np.float32(0.5))
            out[i, j] = exp_reduced(x - k * LN2_HIGH - k * LN2_LOW)
            scale_bits[j] = (np.int32(k) + np.int32(127)) << np.int32(23)
        for j in range(width):
            out[i, j] = gate[i, j] * up[i, j] / (np.float32(1.0) + out[i, j] * scale[j])
    return out


@numba.njit(cache=True, fastmath=_FASTMATH)
def swiglu_halves(gate_up, out):  # pragma: no cover - compiled
    """`swiglu` of the two halves of each row of one C-contiguous array: out[i] =
    silu(gate_up[i, :F]) * gate_up[i, F:].  O(N F), every loop vectorizable.

    gate_up float32 [N, 2F] (C-contiguous: the halves of a row as slices would be arrays of
    any layout, whose loops Numba compiles with run-time strides, unvectorized); out float32
    [N, F] (written). Returns out. The same float32 operations as `swiglu`, so the same results
    bit for bit.
    """
    scale_bits = np.empty(out.shape[1], np.int32)
    for i in range(out.shape[0]):
        _swiglu_row(gate_up, out, i, scale_bits)
    return out


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _swiglu_row(gate_up, out, i, scale_bits):  # pragma: no cover - compiled
    """Row i of `swiglu_halves` (scale_bits: int32 [F] scratch). Inlined into each caller as
    the same Numba IR, so serial and parallel callers compute alike. O(F)"""
    width = out.shape[1]
    scale = scale_bits.view(np.float32)
    for j in range(width):
        x = min(max(-gate_up[i, j], EXP_MIN), _EXP_MAX)
        k = np.floor(x * LOG2E + np.float32(0.5))
        out[i, j] = exp_reduced(x - k * LN2_HIGH - k * LN2_LOW)
        scale_bits[j] = (np.int32(k) + np.int32(127)) << np.int32(23)
    for j in range(width):
        gate = gate_up[i, j]
        out[i, j] = gate * gate_up[i, width + j] / (np.float32(1.0) + out[i, j] * scale[j])


PARALLEL_ROWS = 16
"""From this many rows `swiglu_rows` spreads them over Numba's threads
(`swiglu_halves_parallel`)."""


def swiglu_rows(gate_up, out):
    """`swiglu_halves`, on Numba's threads from `PARALLEL_ROWS` rows (`swiglu_halves_parallel`,
    the same results bit for bit: each value's operations are the same, in the same order).
    Arguments and result as `swiglu_halves`'s."""
    if gate_up.shape[0] >= PARALLEL_ROWS:
        return swiglu_halves_parallel(gate_up, out)
    return swiglu_halves(gate_up, out)


@numba.njit(cache=True, fastmath=_FASTMATH, parallel=True)
def swiglu_halves_parallel(gate_up, out):  # pragma: no cover - compiled
    """`swiglu_halves` with its rows spread over Numba's threads (`prange`); the same float32
    operations a value, so the same results bit for bit.  O(N F / threads)."""
    for i in numba.prange(out.shape[0]):
        _swiglu_row(gate_up, out, i, np.empty(out.shape[1], np.int32))
    return out


_GELU_2C = np.float32(2.0 * np.sqrt(2.0 / np.pi))  # GELU's tanh form: 2 sqrt(2 / pi)
_GELU_A = np.float32(0.044715)


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _gelu_tanh(g):  # pragma: no cover - compiled
    """GELU's tanh form of one float32, 0.5 g (1 + tanh(u)) with u = sqrt(2 / pi) (g + 0.044715
    g^3), as g sigmoid(2 u) (the same function: 1 + tanh(u) = 2 sigmoid(2 u)); the sigmoid
    from e = exp(-|2 u|) (`exp_nonpositive`, branch-free, so loops of it vectorize): 1 / (1 + e)
    for u >= 0, e / (1 + e) below. O(1)"""
    z = _GELU_2C * (g + _GELU_A * g * g * g)
    e = exp_nonpositive(-abs(z))
    top = np.float32(1.0) if z >= 0 else e
    return g * (top / (np.float32(1.0) + e))


@numba.njit(cache=True, fastmath=_FASTMATH, parallel=True)
def geglu(gate, up, out):  # pragma: no cover - compiled
    """GeGLU's gating (Gemma's MLP, transformers' "gelu_pytorch_tanh"): out = gelu_tanh(gate) *
    up, the rows spread over Numba's threads; each value's operations are the same whatever
    the rows and threads. O(N F / threads), every loop vectorizable.

    gate, up float32 [N, F] (any strides: the inner loop runs along the last axis, so pass the
    layout whose last axis is contiguous: the halves of a C-order [N, 2F] or of BLAS's
    transposed [2F, N]); out float32 [N, F] (written). Returns out. Relative error against the
    formula in exact arithmetic: 1e-6 plus 4 |2 u| 2^-24 (u's few float32 roundings move
    exp(-|2 u|) by that: 6e-6 where the sigmoid is 2e-9, 2.2e-5 at most).
    """
    width = out.shape[1]
    for i in numba.prange(out.shape[0]):
        for j in range(width):
            out[i, j] = _gelu_tanh(gate[i, j]) * up[i, j]
    return out


@numba.njit(cache=True, fastmath=_FASTMATH, parallel=True)
def geglu_halves(gate_up, out):  # pragma: no cover - compiled
    """`geglu` of the two halves of each row of one C-contiguous array (the blocks' result):
    out[i] = gelu_tanh(gate_up[i, :F]) * gate_up[i, F:], the rows spread over Numba's threads.
    O(N F / threads), vectorized.

    gate_up float32 [N, 2F] (C-contiguous: its halves as slices are arrays of any layout, whose
    loops Numba compiles with run-time strides, unvectorized: `geglu` on them took 16 times as
    long, 3.4 against 0.2 ms for [256, 2 x 2048] on one thread); out float32 [N, F] (written).
    Returns out. The same float32 operations a value as `geglu`, so the same results bit for
    bit.
    """
    width = out.shape[1]
    for i in numba.prange(out.shape[0]):
        for j in range(width):
            out[i, j] = _gelu_tanh(gate_up[i, j]) * gate_up[i, width + j]
    return out


@numba.njit(cache=True)
def rope(x, cos, sin, out):  # pragma: no cover - compiled
    """Rotate each head's two halves by its token's angles (`rotate_half`).  O(N h hd).

    x float32 [N, h, hd]; cos, sin float32 [N, hd/2]; out float32 [N, h, hd] (written; may not
    be x): out[..., i] = x1 cos - x2 sin, out[..., hd/2 + i] = x2 cos + x1 sin. Returns out.
    """
    n, heads, width = x.shape
    half = width // 2
    for t in range(n):
        for h in range(heads):
            for i in range(half):
                x1, x2 = x[t, h, i], x[t, h, half + i]
                c, s = cos[t, i], sin[t, i]
                out[t, h, i] = x1 * c - x2 * s
                out[t, h, half + i] = x2 * c + x1 * s
    return out

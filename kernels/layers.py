"""The small per-token layers of a Llama block, RMSNorm, RoPE and SwiGLU's gating, as Numba
kernels (DESIGN.md section 6; the formulas are Hugging Face's `LlamaRMSNorm`,
`apply_rotary_pos_emb` and `LlamaMLP`).

At batch 1 a decode step calls them 120 times on vectors of a few hundred values, where NumPy's
per-operation overhead (an einsum, temporaries, broadcasting) costs more than the arithmetic;
one compiled call per use does the same work in a single pass over the data.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True)
def rms_norm(x, weight, eps, out):  # pragma: no cover - compiled
    """out = x / sqrt(mean(x^2) + eps) * weight, row by row.  O(N d).

    x float32 [N, d]; weight float32 [d]; eps float; out float32 [N, d] (written; may not be x).
    The mean square is accumulated in float64. Returns out.
    """
    n, d = x.shape
    for i in range(n):
        total = 0.0
        for j in range(d):
            value = np.float64(x[i, j])
            total += value * value
        factor = np.float32(1.0 / np.sqrt(total / d + eps))
        for j in range(d):
            out[i, j] = x[i, j] * factor * weight[j]
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

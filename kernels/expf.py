"""Cephes' `expf` polynomial, shared by the Numba kernels that need a vectorizable exp (the
softmax of `compute.attention` and the sampler's weights in `masks.sample_rows`):
Numba's `np.exp` on float32 is a call LLVM does not vectorize.

S. L. Moshier, Cephes Math Library, `expf.c`: exp(x) = 2^n exp(r) with n = round(x / ln 2) and
r = x - n ln 2 (ln 2 split in `LN2_HIGH` + `LN2_LOW` for exactness), |r| <= ln 2 / 2, where
exp(r) is the degree-7 polynomial `exp_reduced(r)`; 2^n is a float32 built from n's bits.
"""

from __future__ import annotations

import numba
import numpy as np

LOG2E = np.float32(1.4426950408889634)
LN2_HIGH = np.float32(0.693359375)
LN2_LOW = np.float32(-2.12194440e-4)
EXP_MIN = np.float32(-87.0)  # exp(-87) ~ 1.6e-38, still a normal float32 (2^n needs n >= -126)


@numba.njit(cache=True, inline="always")
def exp_reduced(r):  # pragma: no cover - compiled
    """exp(r) for float32 r with |r| <= ln 2 / 2, Cephes' polynomial, relative error ~1e-7. O(1)."""
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    return p * r * r + r + np.float32(1.0)


@numba.njit(cache=True, inline="always")
def exp_nonpositive(x):  # pragma: no cover - compiled
    """exp(x) for float32 x <= 0 (or NaN), as float32: 0 below `EXP_MIN` (and for -inf, NaN),
    else Cephes' `2^-k exp(r)`, relative error below 2e-7. Branch-free (selects), so a loop
    of it vectorizes; 2^-k is the float32 with exponent bits 127 - k. O(1)."""
    live = x >= EXP_MIN
    v = x if live else EXP_MIN
    k = np.int32(np.float32(0.5) - v * LOG2E)  # round(-v / ln 2), in [0, 126]
    kf = np.float32(k)
    power = np.int32((np.int32(127) - k) << np.int32(23)).view(np.float32)
    weight = exp_reduced(v + kf * LN2_HIGH + kf * LN2_LOW) * power
    return weight if live else np.float32(0.0)

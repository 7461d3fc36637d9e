"""`corral.kernels.prefetch.prefetch`, the sampler's cache hint: it compiles, reads and writes
nothing (even at addresses past the array's end, which a prefetch may name), and refuses what
it is not for."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from corral.kernels.prefetch import prefetch


@numba.njit(cache=True)
def _sum_after_prefetching(x, beyond):
    """Prefetch every line of x and `beyond` elements past its end, then sum x. O(len(x))."""
    for i in range(0, x.shape[0] + beyond, 16):
        prefetch(x, i)
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i]
    return total


def test_prefetch_changes_no_value():
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    before = x.copy()
    assert _sum_after_prefetching(x, 4096) == pytest.approx(float(before.astype(np.float64).sum()))
    assert np.array_equal(x, before)


def test_prefetch_takes_one_dimensional_contiguous_arrays_only():
    @numba.njit
    def on_a_matrix(m):
        prefetch(m, 0)

    with pytest.raises(numba.core.errors.TypingError):
        on_a_matrix(np.zeros((2, 2), np.float32))

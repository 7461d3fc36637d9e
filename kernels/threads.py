"""The process settings corral's kernels run best with, in one function (`configure`) that the
`corral` command calls first and a library user may call: importing corral sets nothing.
docs/numerics.md ("Threads and vector width") gives the measurements behind each value.

This module imports neither NumPy nor Numba, so `configure` can run before they load.
"""

from __future__ import annotations

import os

from corral.kernels.vector_width import wide_vector_features

SETTINGS = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "3000", "OPENBLAS_THREAD_TIMEOUT": "4"}
"""The thread variables `configure` sets: idle OpenMP workers (Numba's threading layer) sleep
after 3000 polls, OpenBLAS's idle threads at once."""


def configure() -> dict[str, str]:
    """Set the environment variables of `SETTINGS`, and NUMBA_CPU_FEATURES to the host's features
    with 512-bit vectors preferred where it has AVX-512F (`vector_width.wide_vector_features`),
    leaving every variable the user set (OMP_WAIT_POLICY and GOMP_SPINCOUNT as a pair: either
    one set keeps both as they are).

    Call it before NumPy and Numba are imported, as the first lines of a program: OpenBLAS reads
    OPENBLAS_THREAD_TIMEOUT when NumPy loads it, Numba reads NUMBA_CPU_FEATURES when it is
    imported (a kernel module's first `@njit` fixes it), and libgomp reads the OpenMP variables
    when Numba's first parallel kernel runs. Called later, a variable whose library has loaded
    has no effect (the function still sets it). Idempotent.

    Returns:
        The variables it set, name -> value ({} when the user had set them all).
    """
    wanted = dict(SETTINGS)
    if "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        del wanted["OMP_WAIT_POLICY"], wanted["GOMP_SPINCOUNT"]
    if "NUMBA_CPU_FEATURES" not in os.environ and (features := wide_vector_features()):
        wanted["NUMBA_CPU_FEATURES"] = features
    done = {}
    for name, value in wanted.items():
        if name not in os.environ:
            os.environ[name] = done[name] = value
    return done

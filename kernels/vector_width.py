"""The host CPU's vector width as Numba sees it: whether it has AVX-512 (`has_avx512`), and the
features that make LLVM prefer 512-bit vectors there (`wide_vector_features`, which
`corral.kernels.threads.configure` hands Numba; docs/numerics.md, "Threads and vector width").
Imports neither NumPy nor Numba.
"""

from __future__ import annotations

import functools


@functools.cache
def has_avx512() -> bool:
    """True when the host CPU has AVX-512F (32 vector registers of 512 bits; without it, x86-64
    has 16 of at most 256 bits), False otherwise or when llvmlite cannot read its features.
    Read once per process (the kernels that ask size their vectors and groups by it)."""
    return wide_vector_features() is not None


def wide_vector_features() -> str | None:
    """The host's LLVM CPU features plus "-prefer-256-bit", where they include AVX-512F; else
    None (no AVX-512, or llvmlite cannot read them)."""
    try:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        features = llvm.get_host_cpu_features().flatten()
    except Exception:  # noqa: BLE001 - any failure: leave Numba's own choice
        return None
    return features + ",-prefer-256-bit" if "+avx512f" in features.split(",") else None

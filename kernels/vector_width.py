"""Numba's loops in 512-bit vectors on AVX-512 CPUs (docs/design.md section 6: the kernels' speed).

LLVM tunes Intel's AVX-512 server cores (Skylake-SP on, Sapphire and Emerald Rapids among them)
to prefer 256-bit vectors, so Numba's vectorized loops came out in ymm registers: on one thread
the one-row block products of `corral.kernels.compute.quant` took a quarter (Q4_1) to a half (Q8_0)
longer than in zmm, with the same results. Importing this module (`corral.kernels` does, before
Numba) sets NUMBA_CPU_FEATURES to the host's features with 512-bit vectors preferred, unless the
user set it, the CPU lacks AVX-512F, or its features cannot be read. Numba reads the variable
when it is first imported: where it was imported before corral, its own choice stays.
"""

from __future__ import annotations

import functools
import os


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


if "NUMBA_CPU_FEATURES" not in os.environ and (_features := wide_vector_features()):
    os.environ["NUMBA_CPU_FEATURES"] = _features

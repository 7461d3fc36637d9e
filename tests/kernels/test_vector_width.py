"""The CPU features corral hands Numba (`corral.kernels.vector_width`): the host's own, with
512-bit vectors preferred only where the host has AVX-512F."""

from __future__ import annotations

import llvmlite.binding as llvm
from corral.kernels.vector_width import wide_vector_features


def test_wide_vector_features_are_the_host_features_plus_the_preference_or_none():
    llvm.initialize_native_target()
    host = llvm.get_host_cpu_features().flatten()
    got = wide_vector_features()
    if "+avx512f" in host.split(","):
        assert got == host + ",-prefer-256-bit"
    else:
        assert got is None

"""The CPU features corral hands Numba (`corral.kernels.vector_width`, through
`corral.kernels.threads.configure`): the host's own, with 512-bit vectors preferred only where
the host has AVX-512F; and the lanes of the plan `ComputePlan.detect` chooses follow it."""

from __future__ import annotations

import llvmlite.binding as llvm
import pytest
from corral.kernels.compute.plan import ComputePlan
from corral.kernels.vector_width import has_avx512, wide_vector_features


def test_wide_vector_features_are_the_host_features_plus_the_preference_or_none():
    llvm.initialize_native_target()
    host = llvm.get_host_cpu_features().flatten()
    got = wide_vector_features()
    if "+avx512f" in host.split(","):
        assert got == host + ",-prefer-256-bit"
    else:
        assert got is None


def test_has_avx512_agrees_with_the_kernel_flags_linux_reports():
    try:
        with open("/proc/cpuinfo", encoding="ascii") as cpuinfo:
            flags = next(line for line in cpuinfo if line.startswith("flags")).split()
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags line to compare with (not Linux)")
    assert has_avx512() == ("avx512f" in flags)
    # the plan's row kernels follow it (16 lanes and groups of 16 need AVX-512's 32 registers of
    # 512 bits; without, a Q4_1 row goes to the row kernels too)
    plan = ComputePlan.detect()
    assert plan.lanes == (16 if "avx512f" in flags else 8)
    assert plan.one_row_q4_1_in_registers == ("avx512f" not in flags)

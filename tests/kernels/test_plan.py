"""`ComputePlan` (docs/numerics.md, "The plan"): every plan is a value that can be built on any
machine, says in one line why it cannot run here, and where it runs computes a product as its
kernels do; `detect` chooses as the CPU's features and the user's options say."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from corral.kernels.compute.plan import ACTIVATIONS, KV_DTYPES, LANES, ComputePlan
from corral.model.quant import BlockMatrix
from test_block_kernels import random_blocks

AVX2 = frozenset({"avx", "avx2", "fma", "f16c"})
AVX512 = AVX2 | {"avx512f", "avx512bw"}
VNNI = AVX512 | {"avx512vnni"}
AMX = VNNI | {"amx-tile", "amx-int8"}

NAMED = {  # every plan corral ships a kernel for
    "float32, AVX-512 lanes": ComputePlan("float32", 16),
    "float32, AVX2 lanes": ComputePlan("float32", 8, one_row_q4_1_in_registers=True),
    "float32, float16 cache": ComputePlan("float32", 16, kv_dtype="float16"),
    "float32, not batch-invariant": ComputePlan("float32", 16, False, False),
    "int8 on VNNI": ComputePlan("int8-vnni", 16),
    "int8 on AMX": ComputePlan("int8-amx", 16, kv_dtype="float16"),
}


def test_every_combination_of_fields_is_a_plan_with_a_one_line_reason_or_none():
    bools = (False, True)
    for fields in itertools.product(ACTIVATIONS, LANES, bools, bools, KV_DTYPES, bools):
        plan = ComputePlan(*fields)
        assert dataclasses.replace(plan) == plan and hash(plan) == hash(ComputePlan(*fields))
        reason = plan.missing()
        assert reason is None or (isinstance(reason, str) and "\n" not in reason)
        assert plan.missing(AMX) is None or plan.lanes == 16 and plan.activations != "float32"
        assert plan.every_pass == (plan.activations == "int8-amx" or plan.batch_invariant)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.lanes = 8


@pytest.mark.parametrize(
    ("fields", "named"),
    [({"activations": "int4"}, "activations"), ({"lanes": 4}, "lanes"),
     ({"kv_dtype": "bfloat16"}, "kv_dtype"), ({"batch_invariant": 1}, "batch_invariant"),
     ({"positional_attention": None}, "positional_attention")],
)  # fmt: skip
def test_a_field_outside_its_choices_is_refused_by_name(fields, named):
    with pytest.raises(ValueError, match=f"ComputePlan.{named} must be"):
        ComputePlan(**fields)


def test_the_plans_a_cpu_lacks_name_what_it_lacks():
    assert ComputePlan("float32", 8).missing(frozenset()) is None  # plain LLVM vector code
    assert ComputePlan("float32", 16).missing(AVX2) == "the CPU lacks avx512f"
    assert "avx512vnni" in ComputePlan("int8-vnni", 16).missing(AVX512)
    assert "amx-int8" in ComputePlan("int8-amx", 16).missing(VNNI)


@pytest.mark.parametrize(
    ("features", "options", "expected"),
    [
        (AVX2, {}, ComputePlan("float32", 8, one_row_q4_1_in_registers=True)),
        (AVX512, {}, ComputePlan("float32", 16)),
        (VNNI, {}, ComputePlan("int8-vnni", 16, kv_dtype="float16")),  # faster than float32
        (VNNI, {"int8_activations": True}, ComputePlan("int8-vnni", 16, kv_dtype="float16")),
        (VNNI, {"quantized": False}, ComputePlan("int8-vnni", 16)),  # float32 weights
        (AVX512, {"int8_activations": True}, ComputePlan("float32", 16)),  # nothing to serve it
        (AMX, {}, ComputePlan("int8-amx", 16, kv_dtype="float16")),
        (AMX, {"int8_activations": False}, ComputePlan("float32", 16)),
        (AMX, {"quantized": False}, ComputePlan("int8-amx", 16)),  # float32 weights: no blocks
        (AMX, {"kv_dtype": "float32"}, ComputePlan("int8-amx", 16)),
        (VNNI, {"batch_invariant": False}, ComputePlan("int8-vnni", 16, False, False)),
        (VNNI, {"int8_activations": False}, ComputePlan("float32", 16)),
        (AMX, {"batch_invariant": False}, ComputePlan("int8-amx", 16, False, True, "float16")),
        (AVX512, {"kv_dtype": "float16"}, ComputePlan("float32", 16, kv_dtype="float16")),
    ],
)
def test_detect_chooses_by_the_features_and_the_options(features, options, expected):
    assert ComputePlan.detect(features=features, **options) == expected


@pytest.mark.parametrize("value", [0, 1, "yes", 2.5])
def test_int8_activations_other_than_none_true_false_are_refused(value):
    with pytest.raises(ValueError, match="int8_activations must be None, True or False"):
        ComputePlan.detect(int8_activations=value)


def test_the_hosts_plan_runs_here():
    assert ComputePlan.detect().missing() is None


@pytest.mark.parametrize("name", list(NAMED))
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_each_plan_computes_a_product_whose_rows_do_not_depend_on_their_pass(name, kind):
    """Built directly, on any machine whose CPU has its instructions (skipped elsewhere, with
    the one-line reason): its products are x W^T, and a row's are the same bit for bit alone
    and beside others (batch invariance)."""
    plan = NAMED[name]
    reason = plan.missing()
    if reason is not None:
        pytest.skip(f"{name}: {reason}")
    rng = np.random.default_rng(7)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, 600, 128))
    tiled = matrix.tiled(plan)
    x = rng.standard_normal((19, 128)).astype(np.float32)
    got = tiled.matmul(x)
    exact = x.astype(np.float64) @ matrix.dequantize().astype(np.float64).T
    tolerance = 1e-4 if plan.activations == "float32" else 2e-2
    np.testing.assert_allclose(got, exact, rtol=tolerance, atol=tolerance)
    if plan.activations != "int8-vnni" or plan.batch_invariant:  # VNNI pads groups with zeros
        alone = np.vstack([tiled.matmul(x[i : i + 1]) for i in (0, 5, 18)])
        np.testing.assert_array_equal(alone, got[[0, 5, 18]])

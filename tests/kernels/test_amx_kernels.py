"""The AMX int8-activation kernels (`compute.quant_amx`) against NumPy: the activation
quantization (two int8 parts on one scale) against its bound, the products against the
dequantized weights times the dequantized activations, on random shapes and batches; and the
property the forward pass relies on, that a row's result is the same bit for bit whatever rows
share its pass (the one-row VNNI kernel included). docs/design.md section 6."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels.compute import quant_amx
from corral.kernels.compute.plan import ComputePlan
from corral.model.quant import BlockMatrix
from hypothesis import given, settings
from hypothesis import strategies as st
from test_block_kernels import random_blocks

pytestmark = pytest.mark.skipif(
    not quant_amx.granted(), reason="the AMX kernels need AMX-INT8 (and Linux's permission)"
)


def test_the_kernels_pass_their_own_check_where_the_cpu_has_amx():
    # where this fails, corral would fall back to float32 activations without a word
    assert quant_amx.available()


def quantize(x: np.ndarray, kind: str):
    """`quantize_rows` into fresh arrays, for `kind`'s weights.  -> (x_q [2, B, k] (part,
    row), d [B, k/32], sums, terms)"""
    batch, k = x.shape
    groups = -(-batch // 16)
    tiles = np.zeros((groups, k // 32, 16, 2, 32), np.int8)
    d = np.zeros((batch, k // 32), np.float32)
    sums = np.zeros((batch, k // 32), np.int32)
    terms = np.zeros((batch, k // 32), np.float32)
    quant_amx.quantize_rows(
        x, tiles.reshape(groups, k // 32, 16, 64), d, sums, terms, kind == "Q4_1"
    )
    x_q = tiles.transpose(3, 0, 2, 1, 4).reshape(2, groups * 16, k)[:, :batch]
    return x_q, d, sums, terms


def ratio(kind: str) -> int:
    """The parts' ratio for `kind`'s weights, as the module docstring gives it."""
    return 16 if kind == "Q4_1" else 254


def dequantized(x_q: np.ndarray, d: np.ndarray, kind: str) -> np.ndarray:
    """d (ratio x_1 + x_2), block by block, in float64.  -> [B, k]"""
    batch, k = x_q.shape[1:]
    whole = ratio(kind) * x_q[0].astype(np.float64) + x_q[1]
    return (whole.reshape(batch, -1, 32) * d[:, :, None]).reshape(batch, k)


def product(matrix: BlockMatrix, x: np.ndarray, kernel) -> np.ndarray:
    """x W^T by `kernel` (`amx_matmul` or `row_matmul`).  float32 [B, k] -> [B, n_out]"""
    tiled = matrix.tiled()
    coefs = tiled.minimums if tiled.kind == "Q4_1" else tiled.scales
    out = np.full((x.shape[0], tiled.n_out), np.nan, np.float32)
    return kernel(x, tiled.scales, coefs, tiled.words, out)


def activations(rng, batch: int, k: int) -> np.ndarray:
    x = (rng.standard_normal((batch, k)) * rng.uniform(0.01, 100)).astype(np.float32)
    x[0, :32] = 0.0  # a block of zeros: d = 0
    return x


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    batch=st.integers(1, 5),
    blocks=st.integers(1, 8),
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
)
def test_quantize_rows_is_within_half_a_step_of_x(seed, batch, blocks, kind):
    rng = np.random.default_rng(seed)
    x = activations(rng, batch, 32 * blocks)
    x_q, d, sums, terms = quantize(x, kind)
    assert not x_q[:, 0, :32].any() and d[0, 0] == 0
    largest = np.abs(x).reshape(batch, blocks, 32).max(axis=-1)
    np.testing.assert_allclose(d, largest / 127 / ratio(kind), rtol=1e-6)
    assert np.abs(x_q[0].astype(np.int32)).max() <= 127  # the first part: x's Q8_1
    # the second part: the leftover, at most half a step of the first, in steps of d
    assert np.abs(x_q[1].astype(np.int32)).max() <= ratio(kind) // 2
    step = np.repeat(d, 32, axis=1).astype(np.float64)
    error = np.abs(dequantized(x_q, d, kind) - x)
    assert (error <= step * 0.5 * 1.02 + 1e-6 * np.repeat(largest, 32, axis=1)).all()
    whole = ratio(kind) * x_q[0].astype(np.int64) + x_q[1]
    whole = whole.reshape(batch, blocks, 32).sum(-1)
    np.testing.assert_array_equal(sums, whole)
    np.testing.assert_allclose(terms, d * whole, rtol=1e-6)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("seed", range(5))
def test_amx_matmul_equals_numpy_on_the_dequantized_weights_and_activations(kind, seed):
    rng = np.random.default_rng(seed)
    n_out, k = int(rng.integers(1, 700)), 32 * int(rng.integers(1, 30))
    batch = int(rng.integers(1, 40))  # groups of 16 rows, then one of 1, 2, 4 or 8
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = activations(rng, batch, k)
    got = product(matrix, x, quant_amx.amx_matmul)
    assert got.shape == (batch, n_out) and got.dtype == np.float32
    x_q, d, _, _ = quantize(x, kind)
    values = dequantized(x_q, d, kind)
    weights = matrix.dequantize().astype(np.float64)
    scale = np.abs(values) @ np.abs(weights).T  # the size of the terms summed
    assert (np.abs(got - values @ weights.T) <= 1e-5 * scale + 1e-6).all()
    # and x itself: each value is off by at most half a step d
    step = np.repeat(d, 32, axis=1).astype(np.float64) * 0.5 * 1.02
    bound = step @ np.abs(weights).T + 1e-5 * scale + 1e-6
    assert (np.abs(got - x.astype(np.float64) @ weights.T) <= bound).all()


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
    batch=st.integers(1, 40),
    n_out=st.integers(1, 300),
    blocks=st.integers(1, 6),
)
def test_a_row_comes_out_the_same_bit_for_bit_in_any_batch_and_alone(
    seed, kind, batch, n_out, blocks
):
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = activations(rng, batch, k)
    together = product(matrix, x, quant_amx.amx_matmul)
    row = int(rng.integers(0, batch))
    alone_amx = product(matrix, x[row : row + 1], quant_amx.amx_matmul)
    alone_vnni = product(matrix, x[row : row + 1], quant_amx.row_matmul)
    np.testing.assert_array_equal(alone_amx[0], together[row])
    np.testing.assert_array_equal(alone_vnni[0], together[row])
    first = int(rng.integers(0, batch))  # a pass of the rows from `first` on
    np.testing.assert_array_equal(
        product(matrix, x[first:], quant_amx.amx_matmul), together[first:]
    )


def test_tiled_matrix_matmul_takes_amx_by_default_and_float32_when_switched_off():
    rng = np.random.default_rng(3)
    matrix = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 70, 96))
    x = rng.standard_normal((3, 96)).astype(np.float32)
    plan = ComputePlan.detect()  # the default here
    assert plan.activations == "int8-amx" and plan.every_pass and plan.kv_dtype == "float16"
    np.testing.assert_array_equal(
        matrix.tiled(plan).matmul(x), product(matrix, x, quant_amx.amx_matmul)
    )
    one = matrix.tiled(plan).matmul(x[:1])
    np.testing.assert_array_equal(one, product(matrix, x[:1], quant_amx.row_matmul))
    off = ComputePlan.detect(int8_activations=False)
    assert off.activations == "float32" and off.every_pass == off.batch_invariant
    assert not np.array_equal(matrix.tiled(off).matmul(x), product(matrix, x, quant_amx.amx_matmul))


def test_bad_arguments_are_refused_with_the_argument_named():
    rng = np.random.default_rng(4)
    tiled = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 20, 64)).tiled()
    args = (tiled.scales, tiled.minimums, tiled.words)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    cases = [
        ((x.astype(np.float64), *args, np.empty((3, 20), np.float32)), "x must be"),
        ((x[:, :32].copy(), *args, np.empty((3, 20), np.float32)), r"x must be \[B >= 1, 64\]"),
        ((x, *args, np.empty((1, 20), np.float32)), r"out must be \[3"),
        ((x, *args, np.empty((3, 64), np.float32)), r"out must be \[3"),
        (
            (
                x,
                tiled.scales,
                tiled.minimums,
                tiled.words[:, :1].copy(),
                np.empty((3, 20), np.float32),
            ),
            "words must be",
        ),  # fmt: skip
    ]
    for arguments, message in cases:
        with pytest.raises(ValueError, match=message):
            quant_amx.amx_matmul(*arguments)
    with pytest.raises(ValueError, match=r"x must be \[1, 64\]"):
        quant_amx.row_matmul(x, *args, np.empty((3, 20), np.float32))


@pytest.mark.parametrize("kernel", ["amx_matmul", "row_matmul"])
def test_a_nan_in_x_makes_its_rows_outputs_nan(kernel):
    rng = np.random.default_rng(5)
    matrix = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 20, 64))
    x = rng.standard_normal((1, 64)).astype(np.float32)
    x[0, 40] = np.nan
    assert np.isnan(product(matrix, x, getattr(quant_amx, kernel))).all()

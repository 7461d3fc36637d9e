"""The block kernels of several rows of float32 activations (`corral.kernels.compute.quant_rows`)
against NumPy in float64 on the dequantized weights, on random shapes and odd row counts, and
each row of a pass against its product alone (docs/design.md section 6)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from corral.kernels.compute import quant, quant_rows
from corral.kernels.compute.plan import ComputePlan
from corral.model.quant import BlockMatrix
from hypothesis import given, settings
from hypothesis import strategies as st
from test_block_kernels import random_blocks


def float_product(matrix: BlockMatrix, x: np.ndarray, lanes: int = 16) -> np.ndarray:
    """`float_matmul` on the matrix's tiles in vectors of `lanes`.
    float32 [B, k] -> float32 [B, n_out]"""
    tiled = matrix.tiled()
    coefs = tiled.minimums if tiled.kind == "Q4_1" else tiled.scales
    out = np.full((x.shape[0], tiled.n_out), np.nan, np.float32)
    return quant_rows.float_matmul(x, tiled.scales, coefs, tiled.words, out, lanes)


def numpy_product(matrix: BlockMatrix, x: np.ndarray) -> np.ndarray:
    """x W^T in float64 on the dequantized weights.  [B, k] -> float64 [B, n_out]"""
    return x.astype(np.float64) @ matrix.dequantize().astype(np.float64).T


@pytest.mark.parametrize("lanes", quant_rows.WIDTHS)  # AVX-512's shape, AVX2's
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("seed", range(8))
def test_float_matmul_equals_numpy_on_random_shapes_and_row_counts(kind, seed, lanes):
    rng = np.random.default_rng(seed)
    n_out, k = int(rng.integers(1, 1200)), 32 * int(rng.integers(1, 24))
    rows = int(rng.integers(1, 70))  # groups of 16 (8), then 8, 4, 2, 1 as the count's bits say
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = rng.standard_normal((rows, k)).astype(np.float32)
    got = float_product(matrix, x, lanes)
    assert got.shape == (rows, n_out) and got.dtype == np.float32
    np.testing.assert_allclose(got, numpy_product(matrix, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64])
def test_every_group_size_and_remainder_equals_numpy(kind, rows):
    rng = np.random.default_rng(rows)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, quant.MAX_TILE + 40, 96))
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    for lanes in quant_rows.WIDTHS:
        np.testing.assert_allclose(
            float_product(matrix, x, lanes), numpy_product(matrix, x), rtol=1e-4, atol=1e-4
        )


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
    seed=st.integers(0, 2**32 - 1),
    n_out=st.integers(1, 1100),
    blocks=st.integers(1, 8),
    rows=st.integers(2, 40),
    lanes=st.sampled_from(quant_rows.WIDTHS),
)
def test_each_row_of_a_pass_equals_its_product_alone_bit_for_bit(
    kind, seed, n_out, blocks, rows, lanes
):
    # a row's sums run in one order whatever its group (16, 8, 4, 2 or 1 rows), however many
    # blocks of 16 output rows share a call and whatever the vector width (16 lanes or AVX2's
    # 8): a token's products depend neither on its pass nor on the plan's lanes
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = (rng.standard_normal((rows, k)) * rng.uniform(0.01, 100)).astype(np.float32)
    got = float_product(matrix, x, lanes)
    alone = np.vstack([float_product(matrix, x[i : i + 1], lanes) for i in range(rows)])
    assert np.array_equal(got, alone)
    inside = int(rng.integers(0, rows))  # and inside a pass of other rows, at any place
    assert np.array_equal(float_product(matrix, x[inside:], lanes)[0], alone[inside])
    other = quant_rows.WIDTHS[lanes == quant_rows.WIDTHS[0]]  # the other width: the same bits
    assert np.array_equal(float_product(matrix, x, other), got)


def test_the_tiled_matrix_sends_several_rows_to_float_matmul():
    rng = np.random.default_rng(11)
    matrix = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 70, 64))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_array_equal(matrix.tiled().matmul(x), float_product(matrix, x))


@pytest.mark.parametrize("in_registers", [False, True])
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_one_row_goes_where_one_row_q4_1_in_registers_says_and_equals_numpy(kind, in_registers):
    # both plans on every machine: a Q4_1 row goes to float_matmul when the plan says so
    # (CPUs without AVX-512), every other row to the one-row kernels of kernels.quant
    plan = ComputePlan("float32", 16, one_row_q4_1_in_registers=in_registers)
    rng = np.random.default_rng(13)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, quant.MAX_TILE + 70, 96))
    x = rng.standard_normal((1, 96)).astype(np.float32)
    got = matrix.tiled(plan).matmul(x)
    np.testing.assert_allclose(got, numpy_product(matrix, x), rtol=1e-4, atol=1e-4)
    if in_registers and kind == "Q4_1":
        np.testing.assert_array_equal(got, float_product(matrix, x))
    else:
        tiled = matrix.tiled()
        out = np.empty((1, tiled.scales.shape[0] * tiled.scales.shape[2]), np.float32)
        if kind == "Q4_1":
            sums = quant.block_sums(x)
            quant.q4_1_matmul(x, sums, tiled.scales, tiled.minimums, tiled.quants, out)
        else:
            quant.q8_0_matmul(x, tiled.scales, tiled.quants, out)
        np.testing.assert_array_equal(got, out[:, : tiled.n_out])


@settings(max_examples=30, deadline=None)
@given(
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
    seed=st.integers(0, 2**32 - 1),
    n_out=st.integers(1, 1100),
    blocks=st.integers(1, 20),
)
def test_the_one_row_kernels_give_a_row_of_float_matmul_bit_for_bit(kind, seed, n_out, blocks):
    # one row (decode at batch 1) stays with the one-row kernels, which prefetch what they
    # stream, under batch invariance too: their sums are float_matmul's in any group
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    tiled = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k)).tiled()
    x = (rng.standard_normal((5, k)) * rng.uniform(0.01, 100)).astype(np.float32)
    out = np.empty((1, tiled.scales.shape[0] * tiled.scales.shape[2]), np.float32)
    if kind == "Q4_1":
        sums = quant.block_sums(x[3:4])
        quant.q4_1_matmul(x[3:4], sums, tiled.scales, tiled.minimums, tiled.quants, out)
    else:
        quant.q8_0_matmul(x[3:4], tiled.scales, tiled.quants, out)
    coefs = tiled.minimums if kind == "Q4_1" else tiled.scales
    together = quant_rows.float_matmul(x, tiled.scales, coefs, tiled.words,
                                       np.empty((5, n_out), np.float32))  # fmt: skip
    assert np.array_equal(out[0, :n_out], together[3])


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_under_batch_invariance_one_row_gives_its_row_of_float_matmul(kind):
    rng = np.random.default_rng(14)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, quant.MAX_TILE + 70, 96))
    x = rng.standard_normal((5, 96)).astype(np.float32)
    tiled = matrix.tiled(ComputePlan("float32", 16, batch_invariant=True))
    np.testing.assert_array_equal(tiled.matmul(x[2:3]), float_product(matrix, x)[2:3])


def test_activations_not_c_contiguous_are_refused():
    rng = np.random.default_rng(12)
    tiled = BlockMatrix.from_blocks("Q8_0", random_blocks(rng, "Q8_0", 16, 64)).tiled()
    x = np.asfortranarray(rng.standard_normal((3, 64)).astype(np.float32))
    with pytest.raises(numba.core.errors.TypingError):
        quant_rows.float_matmul(
            x, tiled.scales, tiled.scales, tiled.words, np.empty((3, 16), np.float32)
        )

"""The int8-activation block kernels (`corral.kernels.compute.quant_int8`) against NumPy: the
activation quantization (ggml's Q8_1 and its residual) against its formulas, the word-tile
layout against the quants it was made from, and the products against the dequantized weights
times the dequantized activations, on random shapes and batches (docs/design.md section 6); and
`paired_matmul` (x in two int8 parts on one scale) against NumPy on the same terms, a row's result
the same bit for bit alone and in any batch."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels.compute import quant_int8, quant_rows
from corral.kernels.compute.plan import ComputePlan
from corral.model.quant import BlockMatrix
from hypothesis import given, settings
from hypothesis import strategies as st
from test_amx_kernels import activations
from test_amx_kernels import dequantized as dequantized_pairs
from test_amx_kernels import quantize as quantize_pairs
from test_block_kernels import random_blocks
from test_kquant_kernels import dequantized as kquant_dequantized
from test_kquant_kernels import random_blocks as kquant_blocks
from test_kquant_kernels import rewritten

pytestmark = pytest.mark.skipif(
    not quant_int8.available(), reason="the int8 kernels need AVX-512 BW and VNNI"
)


def quantize(x: np.ndarray, parts: int):
    """`quantize_rows` into fresh arrays.  -> (x_q, x_scales, x_sums), parts B rows each"""
    rows = x.shape[0] * parts
    n_blocks = x.shape[1] // 32
    x_q = np.zeros((rows, x.shape[1]), np.int8)
    x_scales = np.zeros((rows, n_blocks), np.float32)
    x_sums = np.zeros((rows, n_blocks), np.float32)
    quant_int8.quantize_rows(x, parts, x_q, x_scales, x_sums)
    return x_q, x_scales, x_sums


def dequantized(x_q: np.ndarray, x_scales: np.ndarray) -> np.ndarray:
    """d x_q, block by block, in float64.  [R, k] -> [R, k]"""
    blocks = x_q.astype(np.float64).reshape(x_q.shape[0], -1, 32)
    return (blocks * x_scales[:, :, None]).reshape(x_q.shape)


def numpy_q8_1(x: np.ndarray):
    """ggml's Q8_1 of each block in NumPy float32: (x_q int8, d float32 [B, k/32])."""
    blocks = x.reshape(x.shape[0], -1, 32)
    d = np.abs(blocks).max(axis=-1) / np.float32(127.0)
    inverse = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    return np.rint(blocks * inverse[:, :, None]).astype(np.int8).reshape(x.shape), d


@pytest.mark.parametrize("seed", range(4))
def test_quantize_rows_is_q8_1_and_its_sums_are_the_dequantized_block_sums(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((3, 32 * 5)) * rng.uniform(0.01, 100)).astype(np.float32)
    x[1, :32] = 0.0  # a zero block: d = 0, every x_q 0
    x_q, x_scales, x_sums = quantize(x, 1)
    expected_q, expected_d = numpy_q8_1(x)
    np.testing.assert_array_equal(x_scales, expected_d)
    assert np.abs(x_q.astype(np.int32) - expected_q).max() <= 1  # float32 rounding ties only
    assert np.abs(x_q.astype(np.int32)).max() <= 127 and not x_q[1, :32].any()
    block_sums = dequantized(x_q, x_scales).reshape(3, 5, 32).sum(-1)
    np.testing.assert_allclose(x_sums, block_sums, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_each_further_part_divides_the_error_by_254(parts, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((4, 32 * 6)) * rng.uniform(0.01, 100)).astype(np.float32)
    x_q, x_scales, _ = quantize(x, parts)
    alone, _, _ = quantize(x, 1)
    np.testing.assert_array_equal(x_q[0::parts], alone)  # the first part: x's own Q8_1
    values = dequantized(x_q, x_scales).reshape(4, parts, -1).sum(axis=1)
    error = np.abs(values - x).reshape(4, 6, 32).max(axis=-1)
    step = np.abs(x).reshape(4, 6, 32).max(axis=-1) / 127  # one Q8_1 step, d
    # a part leaves at most half its step over, so the next part's step is 254 times smaller
    bound = step / 2 / 254 ** (parts - 1)
    assert (error <= bound * 1.01 + 2e-7 * np.abs(x).reshape(4, 6, 32).max(axis=-1)).all()


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_word_tiles_hold_each_rows_bytes_four_by_four(kind):
    rng = np.random.default_rng(1)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, 40, 64))
    words = quant_int8.word_tiles(matrix.quants, kind, 2, 32)  # rows 40..63 pad
    per_block = 16 if kind == "Q4_1" else 32
    assert words.shape == (2, 2, 2, per_block // 4, 16, 4) and words.dtype == np.uint8
    raw = matrix.quants.view(np.uint8) ^ np.uint8(0 if kind == "Q4_1" else 128)
    for row, block, byte in [(0, 0, 0), (17, 1, 5), (39, 1, per_block - 1), (33, 0, 10)]:
        t, g, r = row // 32, row % 32 // 16, row % 16
        assert words[t, block, g, byte // 4, r, byte % 4] == raw[row, block * per_block + byte]
    padding = words[1, :, 1, :, 8:]  # rows 56..63
    assert (padding == (0 if kind == "Q4_1" else 128)).all()  # q = 0 in both encodings


def int8_product(matrix: BlockMatrix, x: np.ndarray, parts: int = 2) -> np.ndarray:
    """x W^T by `int8_matmul`.  float32 [B, k] -> [B, n_out]"""
    tiled = matrix.tiled()
    coefs = tiled.minimums if tiled.kind == "Q4_1" else tiled.scales
    out = np.full((x.shape[0], tiled.n_out), np.nan, np.float32)
    return quant_int8.int8_matmul(x, parts, tiled.scales, coefs, tiled.words, out)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_int8_matmul_equals_numpy_on_the_dequantized_weights_and_activations(kind, parts, seed):
    rng = np.random.default_rng(seed + 10 * parts)
    n_out, k = int(rng.integers(1, 1200)), 32 * int(rng.integers(1, 30))
    batch = int(rng.integers(1, 12))  # groups of 2, 4 and 8 rows, a padded last one
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = (rng.standard_normal((batch, k)) * rng.uniform(0.1, 10)).astype(np.float32)
    got = int8_product(matrix, x, parts)
    assert got.shape == (batch, n_out) and got.dtype == np.float32
    x_q, x_scales, _ = quantize(x, parts)
    values = dequantized(x_q, x_scales).reshape(batch, parts, k).sum(axis=1)
    weights = matrix.dequantize().astype(np.float64)
    expected = values @ weights.T
    scale = np.abs(values) @ np.abs(weights).T  # the size of the terms summed
    assert (np.abs(got - expected) <= 1e-5 * scale + 1e-6).all()
    # and x itself: each value is off by at most half the last part's step
    step = np.repeat(np.abs(x).reshape(batch, -1, 32).max(axis=-1) / 127, 32, axis=1)
    bound = (step / 2 / 254 ** (parts - 1) * 1.01) @ np.abs(weights).T + 1e-5 * scale + 1e-6
    assert (np.abs(got - x.astype(np.float64) @ weights.T) <= bound).all()


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 9])
def test_each_row_of_a_batch_equals_its_product_alone(rows):
    rng = np.random.default_rng(rows)
    matrix = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 600, 128))
    x = rng.standard_normal((rows, 128)).astype(np.float32)
    alone = np.vstack([int8_product(matrix, x[i : i + 1]) for i in range(rows)])
    np.testing.assert_allclose(int8_product(matrix, x), alone, rtol=1e-6, atol=1e-5)


def test_tiled_matrix_matmul_takes_the_kernels_of_its_plan():
    rng = np.random.default_rng(3)
    matrix = BlockMatrix.from_blocks("Q8_0", random_blocks(rng, "Q8_0", 70, 96))
    x = rng.standard_normal((3, 96)).astype(np.float32)
    vnni = matrix.tiled(ComputePlan("int8-vnni", 16))
    np.testing.assert_array_equal(vnni.matmul(x), paired_product(matrix, x))
    np.testing.assert_array_equal(vnni.matmul(x[:1]), paired_product(matrix, x[:1]))
    tiled = matrix.tiled(ComputePlan("float32", 16))
    expected = quant_rows.float_matmul(
        x, tiled.scales, tiled.scales, tiled.words, np.empty((3, 70), np.float32)
    )
    np.testing.assert_array_equal(tiled.matmul(x), expected)


def test_a_product_in_no_parts_is_refused():
    matrix = BlockMatrix.from_blocks("Q8_0", random_blocks(np.random.default_rng(0), "Q8_0", 3, 64))
    with pytest.raises(ValueError, match="parts=0"):
        matrix.tiled().matmul(np.zeros((1, 64), np.float32), parts=0)


def test_word_tiles_refuse_tiles_of_a_partial_vector():
    quants = np.zeros((20, 16), np.uint8)
    with pytest.raises(ValueError, match="tiles of 16 rows"):
        quant_int8.word_tiles(quants, "Q4_1", 1, 24)


def paired_product(matrix: BlockMatrix, x: np.ndarray) -> np.ndarray:
    """x W^T by `paired_matmul`.  float32 [B, k] -> [B, n_out]"""
    tiled = matrix.tiled()
    coefs = tiled.minimums if tiled.kind == "Q4_1" else tiled.scales
    out = np.full((x.shape[0], tiled.n_out), np.nan, np.float32)
    return quant_int8.paired_matmul(x, tiled.scales, coefs, tiled.words, out)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
    batch=st.integers(1, 40),
    n_out=st.integers(1, 1100),  # up to three tiles, the last one partly padding
    blocks=st.integers(1, 8),
)
def test_paired_matmul_equals_numpy_on_the_dequantized_weights_and_activations(
    seed, kind, batch, n_out, blocks
):
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = activations(rng, batch, k)
    got = paired_product(matrix, x)
    assert got.shape == (batch, n_out) and got.dtype == np.float32
    x_q, d, _, _ = quantize_pairs(x, kind)
    values = dequantized_pairs(x_q, d, kind)
    weights = matrix.dequantize().astype(np.float64)
    scale = np.abs(values) @ np.abs(weights).T  # the size of the terms summed
    assert (np.abs(got - values @ weights.T) <= 1e-5 * scale + 1e-6).all()
    # and x itself: each value is off by at most half a step d
    bound = np.repeat(d, 32, axis=1).astype(np.float64) * 0.5 * 1.02 @ np.abs(weights).T
    assert (np.abs(got - x.astype(np.float64) @ weights.T) <= bound + 1e-5 * scale + 1e-6).all()


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["Q4_1", "Q8_0"]),
    batch=st.integers(1, 40),
    n_out=st.integers(1, 600),
    blocks=st.integers(1, 6),
)
def test_paired_matmul_gives_a_row_the_same_bits_in_any_batch_and_alone(
    seed, kind, batch, n_out, blocks
):
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = activations(rng, batch, k)
    together = paired_product(matrix, x)
    row = int(rng.integers(0, batch))
    np.testing.assert_array_equal(paired_product(matrix, x[row : row + 1])[0], together[row])
    first = int(rng.integers(0, batch))  # a pass of the rows from `first` on
    np.testing.assert_array_equal(paired_product(matrix, x[first:]), together[first:])


@pytest.mark.parametrize("rows", [1, 2, 9])
def test_a_nan_in_x_makes_its_rows_paired_outputs_nan(rows):
    rng = np.random.default_rng(rows)
    matrix = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 20, 64))
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    x[rows - 1, 40] = np.nan
    got = paired_product(matrix, x)
    assert np.isnan(got[rows - 1]).all() and not np.isnan(got[: rows - 1]).any()


def word_form_case(rng: np.random.Generator, kind: str, n_out: int, k: int):
    """(words of a random n_out x k matrix as `TiledMatrix`, its weights float64 [n_out, k],
    the parts' kind for `quantize_pairs`: "Q4_1" where the words are nibbles, else "Q8_0").
    Q4_1 and Q8_0 from random blocks; Q4_K, Q5_0 and Q6_K from gguf's blocks rewritten
    (`kquant_layout.as_blocks`: Q4_1's nibbles, `FIVE`, `HALVES`), dequantized by gguf."""
    if kind in ("Q4_1", "Q8_0"):
        matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
        return matrix.tiled(), matrix.dequantize().astype(np.float64), kind
    raw = kquant_blocks(rng, kind, n_out, k)
    tiled = rewritten(raw, kind)
    return tiled, kquant_dequantized(raw, kind, n_out), "Q4_1" if tiled.kind == "Q4_1" else "Q8_0"


ROWS_AND_EDGES = st.one_of(st.integers(1, 64), st.sampled_from([7, 8, 9, 15, 16, 17, 33, 63, 64]))
"""1 to 64 rows of x, often at the edges of `PAIRED_GROUP` and of the groups of 16."""


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["Q4_1", "Q8_0", "Q4_K", "Q5_0", "Q6_K"]),
    batch=ROWS_AND_EDGES,
    n_out=st.one_of(st.integers(1, 1100), st.sampled_from([16, 17, 31, 512, 513, 1040])),
    blocks=st.integers(1, 3),
)
def test_paired_matmul_of_1_to_64_rows_equals_float64_in_every_word_form(
    seed, kind, batch, n_out, blocks
):
    """Every word form, 1 to 64 rows (full groups of `PAIRED_GROUP` rows and 16 output rows
    written straight into out, the rest through the kernel's scratch), n_out across tile and
    vector edges: the float64 product of gguf's (or the blocks') dequantized weights with the
    dequantized activations, to float32's rounding; a row the same bits alone."""
    rng = np.random.default_rng(seed)
    k = (256 if kind in ("Q4_K", "Q6_K") else 32) * blocks
    tiled, weights, parts_kind = word_form_case(rng, kind, n_out, k)
    x = activations(rng, batch, k)
    coefs = tiled.scales if tiled.minimums is None else tiled.minimums
    out = np.full((batch, n_out), np.nan, np.float32)
    got = quant_int8.paired_matmul(x, tiled.scales, coefs, tiled.words, out, tiled.kind == "Q8_16")
    assert got is out and got.dtype == np.float32
    x_q, d, _, _ = quantize_pairs(x, parts_kind)
    values = dequantized_pairs(x_q, d, parts_kind)
    scale = np.abs(values) @ np.abs(weights).T  # the size of the terms summed
    error = np.abs(got - values @ weights.T)
    worst = np.unravel_index(np.argmax(error - 1e-5 * scale), error.shape)
    assert (error <= 1e-5 * scale + 1e-6).all(), (worst, error[worst], scale[worst])
    row = int(rng.integers(0, batch))
    alone = np.full((1, n_out), np.nan, np.float32)
    alone = quant_int8.paired_matmul(
        x[row : row + 1], tiled.scales, coefs, tiled.words, alone, tiled.kind == "Q8_16"
    )
    np.testing.assert_array_equal(alone[0], got[row])


SUPER_RATIOS = {"Q4_K": 16, "Q6_K": 127}
"""x's parts' ratio for Q4_K and Q6_K in their own bytes (`quant_amx.NIBBLE_RATIO`,
`SIX_RATIO`)."""


def super_parts(x: np.ndarray, ratio: int) -> np.ndarray:
    """x quantized by `quant_amx.quantize_rows_by` with `ratio`, dequantized: d (ratio x_1 +
    x_2) block by block, in float64.  -> [B, k]"""
    from corral.kernels.compute import quant_amx

    batch, k = x.shape
    groups = -(-batch // 16)
    tiles = np.zeros((groups, k // 32, 16, 2, 32), np.int8)
    d = np.zeros((batch, k // 32), np.float32)
    sums = np.zeros((batch, k // 32), np.int32)
    terms = np.zeros((batch, k // 32), np.float32)
    flat = tiles.reshape(groups, k // 32, 16, 64)
    quant_amx.quantize_rows_by(x, flat, d, sums, terms, ratio)
    parts = tiles.transpose(3, 0, 2, 1, 4).reshape(2, groups * 16, k)[:, :batch]
    values = ratio * parts[0].astype(np.float64) + parts[1]
    assert np.abs(parts[1]).max(initial=0) <= (ratio + 1) // 2  # the leftover, half a step
    return (values.reshape(batch, -1, 32) * d[:, :, None]).reshape(batch, k)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    kind=st.sampled_from(["Q4_K", "Q6_K"]),
    batch=ROWS_AND_EDGES,
    n_out=st.one_of(st.integers(1, 600), st.sampled_from([16, 17, 31, 512, 513])),
    blocks=st.integers(1, 3),
)
def test_super_blocks_of_1_to_64_rows_equal_float64_of_the_dequantized_parts(
    seed, kind, batch, n_out, blocks
):
    """Q4_K and Q6_K in their own bytes (`quant.super_tiled`), 1 to 64 rows: the float64
    product of gguf's dequantized weights with x's two parts dequantized (ratio 16 for Q4_K,
    127 for Q6_K), to float32's rounding (Q6_K's halves summed exactly in int32, one float
    epilogue a sub-block of 32); a row the same bits alone (the one-row kernel) as among the
    others (the paired one)."""
    from corral.model.quant import super_tiled

    rng = np.random.default_rng(seed)
    k = 256 * blocks
    raw = kquant_blocks(rng, kind, n_out, k)
    weights = kquant_dequantized(raw, kind, n_out)
    tiled = super_tiled(raw, kind)
    x = activations(rng, batch, k)
    coefs = tiled.scales if tiled.minimums is None else tiled.minimums
    out = np.full((batch, n_out), np.nan, np.float32)
    got = quant_int8.paired_matmul(x, tiled.scales, coefs, tiled.words, out, False)
    values = super_parts(x, SUPER_RATIOS[kind])
    scale = np.abs(values) @ np.abs(weights).T  # the size of the terms summed
    error = np.abs(got - values @ weights.T)
    worst = np.unravel_index(np.argmax(error - 1e-5 * scale), error.shape)
    assert (error <= 1e-5 * scale + 1e-6).all(), (worst, error[worst], scale[worst])
    row = int(rng.integers(0, batch))
    alone = np.full((1, n_out), np.nan, np.float32)
    alone = quant_int8.paired_matmul(
        x[row : row + 1], tiled.scales, coefs, tiled.words, alone, False
    )
    np.testing.assert_array_equal(alone[0], got[row])

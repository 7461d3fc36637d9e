"""The block-quantized matrix products against NumPy on the dequantized weights, the block
unpacking against gguf's own dequantizer (ggml's Q4_1 and Q8_0 formats) (docs/design.md section 6).
Attention over ragged contexts is tested in test_attention.py, the int8-activation kernels in
test_int8_kernels.py, the kernels of several rows in test_row_kernels.py."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels.compute import quant
from corral.model.quant import BlockMatrix

gguf = pytest.importorskip("gguf")  # a dependency of corral; the oracle of the block layout


def random_blocks(rng, kind: str, n_out: int, k: int) -> np.ndarray:
    """Raw GGUF blocks of a random matrix: uint8 [n_out, bytes per row], finite float16 scales."""
    n_blocks = k // 32
    scale = rng.uniform(-0.05, 0.05, (n_out, n_blocks, 1)).astype(np.float16).view(np.uint8)
    if kind == "Q8_0":
        quants = rng.integers(0, 256, (n_out, n_blocks, 32), dtype=np.uint8)
        return np.concatenate([scale, quants], axis=-1).reshape(n_out, -1)
    minimum = rng.uniform(-0.5, 0.5, (n_out, n_blocks, 1)).astype(np.float16).view(np.uint8)
    quants = rng.integers(0, 256, (n_out, n_blocks, 16), dtype=np.uint8)
    return np.concatenate([scale, minimum, quants], axis=-1).reshape(n_out, -1)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("seed", range(3))
def test_unpacked_blocks_dequantize_as_gguf_does(kind, seed):
    rng = np.random.default_rng(seed)
    n_out, k = int(rng.integers(1, 40)), 32 * int(rng.integers(1, 9))
    raw = random_blocks(rng, kind, n_out, k)
    matrix = BlockMatrix.from_blocks(kind, raw)
    assert matrix.shape == (n_out, k)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind]).reshape(n_out, k)
    np.testing.assert_allclose(matrix.dequantize(), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("seed", range(6))
def test_block_matmul_equals_numpy_on_the_dequantized_weights(kind, seed):
    rng = np.random.default_rng(seed)
    n_out, k = int(rng.integers(1, 100)), 32 * int(rng.integers(1, 20))
    batch = int(rng.integers(1, 40))  # one row (`kernels.quant`), or several (`quant_rows`)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, k))
    x = rng.standard_normal((batch, k)).astype(np.float32)
    got = matrix.tiled().matmul(x)
    assert got.shape == (batch, n_out) and got.dtype == np.float32
    expected = x.astype(np.float64) @ matrix.dequantize().astype(np.float64).T
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@pytest.mark.parametrize("n_out", [quant.MAX_TILE - 1, quant.MAX_TILE + 1, 3 * quant.MAX_TILE])
@pytest.mark.parametrize("rows", [1, 5, 21])
def test_block_matmul_over_several_tiles_and_a_padded_last_one(kind, n_out, rows):
    rng = np.random.default_rng(n_out)
    matrix = BlockMatrix.from_blocks(kind, random_blocks(rng, kind, n_out, 64))
    x = rng.standard_normal((rows, 64)).astype(np.float32)
    expected = x.astype(np.float64) @ matrix.dequantize().astype(np.float64).T
    np.testing.assert_allclose(matrix.tiled().matmul(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n_out", [1, 15, 16, 17, 511, 512, 513, 576, 960, 3072, 49152])
def test_tiles_cover_the_rows_with_whole_vectors_of_at_most_max_tile(n_out):
    n_tiles, tile = quant.tile_shape(n_out)
    assert tile % 16 == 0 and tile <= quant.MAX_TILE
    assert n_out <= n_tiles * tile < n_out + 16 * n_tiles  # no tile wholly padding
    assert n_tiles == -(-n_out // quant.MAX_TILE)


def test_tile_rows_stores_each_tile_column_by_column():
    a = np.arange(5 * 3, dtype=np.int32).reshape(5, 3)
    tiles = quant.tile_rows(a, 2, 4)  # [2, 3, 4]: rows 0-3, then row 4 and three zero rows
    np.testing.assert_array_equal(tiles[0], a[:4].T)
    np.testing.assert_array_equal(tiles[1][:, 0], a[4])
    assert not tiles[1][:, 1:].any()


def test_a_product_with_the_wrong_width_is_refused():
    matrix = BlockMatrix.from_blocks("Q8_0", random_blocks(np.random.default_rng(0), "Q8_0", 3, 64))
    with pytest.raises(ValueError, match=r"\[B, 64\]"):
        matrix.tiled().matmul(np.zeros((1, 32), np.float32))


def test_block_sums_sum_each_block_of_32():
    x = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    np.testing.assert_array_equal(quant.block_sums(x), x.reshape(2, 2, 32).sum(-1))


def test_stacked_and_permuted_matrices_move_whole_rows():
    rng = np.random.default_rng(0)
    a = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 4, 64))
    b = BlockMatrix.from_blocks("Q4_1", random_blocks(rng, "Q4_1", 3, 64))
    stacked = BlockMatrix.stack([a, b])
    np.testing.assert_array_equal(stacked.dequantize(), np.vstack([a.dequantize(), b.dequantize()]))
    order = np.array([6, 0, 5, 1, 4, 2, 3])
    np.testing.assert_array_equal(
        stacked.permute_rows(order).dequantize(), stacked.dequantize()[order]
    )


def test_unknown_block_types_and_partial_blocks_are_refused():
    with pytest.raises(ValueError, match="Q4_K"):
        BlockMatrix.from_blocks("Q4_K", np.zeros((2, 144), np.uint8))
    with pytest.raises(ValueError, match="whole 20-byte blocks"):
        BlockMatrix.from_blocks("Q4_1", np.zeros((2, 30), np.uint8))

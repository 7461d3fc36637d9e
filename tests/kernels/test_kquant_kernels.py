"""The K-quant and 5-bit block products (`kernels.compute.kquants`, tiles from
`kernels.compute.kquant_layout`; and Q4_K, Q4_0, Q5_0, Q6_K rewritten by
`kquant_layout.as_blocks` for the register-blocked kernels of `kernels.compute.quant_rows`)
against gguf's own NumPy dequantization times a float64 product, on random blocks and odd
shapes; their batch invariance; their argument errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from corral.kernels.compute import quant_amx, quant_int8, quant_rows
from corral.kernels.compute.kquant_layout import (
    AS_BLOCKS,
    BLOCK_BYTES,
    MAX_TILE,
    as_blocks,
    as_super_blocks,
    repack,
)
from corral.kernels.compute.kquant_rows import ROWS
from corral.kernels.compute.kquants import kquant_matmul
from corral.kernels.compute.plan import ComputePlan
from corral.model import quant
from corral.model.quant import SUPER_KINDS, BlockMatrix, super_tiled
from hypothesis import given, settings
from hypothesis import strategies as st

gguf = pytest.importorskip("gguf")  # a dependency of corral; the oracle of the block formats

KINDS = ("Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q4_0", "Q5_1")

HALVES = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q5_0": (0,), "Q4_0": (0,)}
"""Each kind's float16 fields (byte offsets in a block) that random bytes would fill with
infinities and NaNs: random blocks get finite scales there."""

QUANT_BYTES = {"Q4_K": (16, 144), "Q5_K": (16, 176), "Q5_1": (4, 24)}
"""The byte range of the quants (fifth bits included) of the kinds with a minimum."""


def random_blocks(rng: np.random.Generator, kind: str, n_out: int, k: int) -> np.ndarray:
    """Raw GGUF blocks of a random n_out x k matrix: uint8 [n_out, bytes per row].

    Where gguf quantizes the kind (Q5_0, Q4_0, Q5_1), the blocks of a random float matrix,
    a few rows scaled up or down by 2^+-8 and some blocks all zero; the K-quants (which gguf
    only dequantizes) as random bytes with random finite float16 scales of either sign."""
    weights, size = BLOCK_BYTES[kind]
    if kind not in HALVES or kind in ("Q5_0", "Q4_0"):
        w = rng.standard_normal((n_out, k)).astype(np.float32)
        w *= np.exp2(rng.integers(-8, 9, (n_out, 1))).astype(np.float32)
        w.reshape(n_out, -1, 32)[rng.random((n_out, k // 32)) < 0.1] = 0.0
        return gguf.quants.quantize(w, gguf.GGMLQuantizationType[kind]).reshape(n_out, -1)
    raw = rng.integers(0, 256, (n_out, k // weights, size), dtype=np.uint8)
    for start in HALVES[kind]:
        scale = rng.uniform(-0.1, 0.1, raw.shape[:2] + (1,)) * np.exp2(rng.integers(-6, 7))
        raw[..., start : start + 2] = scale.astype(np.float16).view(np.uint8)
    return raw.reshape(n_out, -1)


def dequantized(raw: np.ndarray, kind: str, n_out: int) -> np.ndarray:
    """gguf's dequantization of the blocks, in float64: [n_out, k]."""
    w = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
    return w.reshape(n_out, -1).astype(np.float64)


def error_bound(raw: np.ndarray, kind: str, x: np.ndarray) -> np.ndarray:
    """A bound on |float32 product - exact product| for each output: float64 [B, n_out].

    A kernel sums a sub-block's n <= 32 products q_j x_j (exact in float64 is q_j x_j times
    1 + delta, |delta| <= u = 2^-24, per rounding), scales the sum, adds the minimum's term
    minimum * sum_j x_j, and adds the sub-blocks' terms one after another: every term passes
    through at most 32 + 2 k / 16 + 4 roundings, each of relative size <= u, so the error is at
    most depth u (1 + depth u) times sum_j (|scale q_j| + |minimum|) |x_j|. With W = scale q -
    minimum and W0 = -minimum (the same blocks with their quants zeroed, dequantized by gguf),
    |scale q_j| + |minimum| <= |W_j| + 2 |W0_j|."""
    n_out, k = raw.shape[0], x.shape[1]
    magnitude = np.abs(dequantized(raw, kind, n_out))
    if kind in QUANT_BYTES:
        start, end = QUANT_BYTES[kind]
        zeroed = raw.reshape(n_out, -1, BLOCK_BYTES[kind][1]).copy()
        zeroed[..., start:end] = 0
        magnitude += 2 * np.abs(dequantized(zeroed.reshape(n_out, -1), kind, n_out))
    depth = 32 + 2 * k // 16 + 4
    u = 2.0**-24
    return depth * u * (1 + depth * u) * (np.abs(x.astype(np.float64)) @ magnitude.T)


@st.composite
def products(draw, kinds=KINDS):
    """(kind, raw blocks, x): n_out from 1 to 3 tiles and a bit (tiles of 16 to `MAX_TILE`
    rows with padding rows, in parallel chunks of 64 rows and a smaller last one),
    k from one block to a few hundred weights, 1 to `ROWS` + 6 rows of x; kind one of
    `kinds`."""
    kind = draw(st.sampled_from(kinds))
    weights = BLOCK_BYTES[kind][0]
    n_out = draw(st.integers(1, 3 * MAX_TILE + 5))
    k = weights * draw(st.integers(1, 3 if weights == 256 else 24))
    batch = draw(st.one_of(st.integers(1, 9), st.integers(1, ROWS + 6)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((batch, k)).astype(np.float32)
    x *= np.exp2(rng.integers(-4, 5, (batch, 1))).astype(np.float32)
    return kind, random_blocks(rng, kind, n_out, k), x


def test_the_random_blocks_are_what_gguf_dequantizes():
    """The oracle's side: every kind's random blocks dequantize to finite weights of the
    right shape (a layout test of `random_blocks` itself)."""
    rng = np.random.default_rng(0)
    for kind in KINDS:
        raw = random_blocks(rng, kind, 3, 512)
        w = dequantized(raw, kind, 3)
        assert w.shape == (3, 512) and np.isfinite(w).all() and np.abs(w).max() > 0


@settings(max_examples=60, deadline=None)
@given(products())
def test_products_equal_gguf_dequantized_times_float64(case):
    kind, raw, x = case
    n_out = raw.shape[0]
    w = repack(raw, kind)
    assert (w.n_out, w.k) == (n_out, x.shape[1])
    got = kquant_matmul(x, w)
    assert got.shape == (x.shape[0], n_out) and got.dtype == np.float32
    expected = x.astype(np.float64) @ dequantized(raw, kind, n_out).T
    error = np.abs(got - expected)
    bound = error_bound(raw, kind, x)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), (kind, worst, error[worst], bound[worst])


@settings(max_examples=30, deadline=None)
@given(products(), st.data())
def test_a_row_gets_the_same_bits_alone_as_in_any_batch(case, data):
    """Batch invariance: row i of a product of B rows equals, bit for bit, the product of
    row i alone and of row i within another subset of the rows (other neighbours, another
    position, another chunk of `ROWS`)."""
    kind, raw, x = case
    w = repack(raw, kind)
    whole = kquant_matmul(x, w)
    i = data.draw(st.integers(0, x.shape[0] - 1))
    np.testing.assert_array_equal(kquant_matmul(x[i], w), whole[i])
    order = data.draw(st.permutations(range(x.shape[0])))
    np.testing.assert_array_equal(kquant_matmul(x[list(order)], w), whole[list(order)])


def test_out_is_written_and_returned():
    rng = np.random.default_rng(1)
    raw = random_blocks(rng, "Q4_K", 70, 256)
    w = repack(raw, "Q4_K")
    x = rng.standard_normal((3, 256)).astype(np.float32)
    out = np.full((3, 70), np.nan, np.float32)
    assert kquant_matmul(x, w, out) is out
    np.testing.assert_array_equal(out, kquant_matmul(x, w))


def test_the_tiles_hold_no_float32_copy_of_the_weights():
    """The tiled matrix is about the size of its blocks (scales widened, padding rows)."""
    rng = np.random.default_rng(2)
    for kind in KINDS:
        raw = random_blocks(rng, kind, MAX_TILE, 512)
        assert raw.nbytes < repack(raw, kind).nbytes <= 1.2 * raw.nbytes


@pytest.mark.parametrize(
    ("raw", "kind", "message"),
    [
        (np.zeros((2, 144), np.uint8), "Q3_K", "kind must be one of"),
        (np.zeros((2, 144), np.uint8), "q4_k", "kind must be one of"),
        (np.zeros((2, 145), np.uint8), "Q4_K", "whole number of 144-byte blocks, got 145"),
        (np.zeros((2, 0), np.uint8), "Q5_0", "whole number of 22-byte blocks, got 0"),
        (np.zeros((0, 22), np.uint8), "Q5_0", r"uint8 \[n_out >= 1"),
        (np.zeros(22, np.uint8), "Q5_0", r"uint8 \[n_out >= 1"),
        (np.zeros((2, 22), np.int8), "Q5_0", r"got int8 \(2, 22\)"),
    ],
)
def test_repack_names_what_is_wrong(raw, kind, message):
    with pytest.raises(ValueError, match=message):
        repack(raw, kind)


@pytest.mark.parametrize(
    ("x", "out", "message"),
    [
        (np.zeros((2, 255), np.float32), None, r"x must be float32 \[B, 256\]"),
        (np.zeros((2, 256), np.float64), None, r"got float64 \(2, 256\)"),
        (np.zeros((1, 2, 256), np.float32), None, r"x must be float32"),
        (np.zeros((2, 256), np.float32), np.zeros((2, 69), np.float32), r"out must be"),
        (np.zeros((2, 256), np.float32), np.zeros((2, 70), np.float64), r"out must be"),
    ],
)
def test_matmul_names_what_is_wrong(x, out, message):
    w = repack(random_blocks(np.random.default_rng(3), "Q4_K", 70, 256), "Q4_K")
    with pytest.raises(ValueError, match=message):
        kquant_matmul(x, w, out)


# ----------------------------------------------------------------------------------------------
# The kinds rewritten as Q4_1 / Q8_0 words (`as_blocks`) on `quant_rows`' kernels


def rewritten(raw: np.ndarray, kind: str, lanes: int = 16):
    """The blocks as the model holds them: `as_blocks`, then word tiles alone."""
    blocks = BlockMatrix(*as_blocks(raw, kind))
    return blocks.tiled(ComputePlan(lanes=lanes), words_only=True)


@settings(max_examples=40, deadline=None)
@given(products(tuple(AS_BLOCKS)))
def test_as_blocks_keeps_every_weight_gguf_dequantizes(case):
    """The rewritten blocks hold the very float32 weights gguf dequantizes (no rounding)."""
    kind, raw, _ = case
    blocks = BlockMatrix(*as_blocks(raw, kind))
    assert blocks.kind == AS_BLOCKS[kind]
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[kind])
    np.testing.assert_array_equal(blocks.dequantize(), expected.reshape(raw.shape[0], -1))


@settings(max_examples=40, deadline=None)
@given(products(tuple(AS_BLOCKS)), st.sampled_from(quant_rows.WIDTHS))
def test_rewritten_products_equal_gguf_dequantized_times_float64(case, lanes):
    kind, raw, x = case
    w = rewritten(raw, kind, lanes)
    got = w.matmul(x)
    assert got.shape == (x.shape[0], raw.shape[0]) and got.dtype == np.float32
    expected = x.astype(np.float64) @ dequantized(raw, kind, raw.shape[0]).T
    error = np.abs(got - expected)
    bound = error_bound(raw, kind, x)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), (kind, worst, error[worst], bound[worst])


@settings(max_examples=25, deadline=None)
@given(products(tuple(AS_BLOCKS)), st.data())
def test_a_rewritten_row_gets_the_same_bits_alone_in_any_batch_and_width(case, data):
    """Batch invariance on `quant_rows`: a row's products are the same bits alone, among other
    rows in another order, and in vectors of 8 lanes as of 16."""
    kind, raw, x = case
    whole = rewritten(raw, kind).matmul(x)
    i = data.draw(st.integers(0, x.shape[0] - 1))
    np.testing.assert_array_equal(rewritten(raw, kind).matmul(x[i : i + 1])[0], whole[i])
    order = list(data.draw(st.permutations(range(x.shape[0]))))
    np.testing.assert_array_equal(rewritten(raw, kind).matmul(x[order]), whole[order])
    np.testing.assert_array_equal(rewritten(raw, kind, 8).matmul(x), whole)


def test_rewritten_blocks_are_no_float32_copy():
    """Words, scales and minimums: at most 40 bytes per 32 weights (Q6_K's; a float32 copy
    takes 128)."""
    rng = np.random.default_rng(4)
    for kind in AS_BLOCKS:
        raw = random_blocks(rng, kind, 64, 512)
        assert rewritten(raw, kind).nbytes <= 40 * 64 * 512 // 32


@pytest.mark.parametrize(
    ("raw", "kind", "message"),
    [
        (np.zeros((2, 176), np.uint8), "Q5_K", "kind must be one of"),
        (np.zeros((2, 145), np.uint8), "Q4_K", "whole number of 144-byte blocks, got 145"),
        (np.zeros((2, 211), np.uint8), "Q6_K", "whole number of 210-byte blocks, got 211"),
        (np.zeros((0, 22), np.uint8), "Q5_0", r"uint8 \[n_out >= 1"),
        (np.zeros((2, 18), np.int8), "Q4_0", r"got int8 \(2, 18\)"),
    ],
)
def test_as_blocks_names_what_is_wrong(raw, kind, message):
    with pytest.raises(ValueError, match=message):
        as_blocks(raw, kind)


@settings(max_examples=20, deadline=None)
@given(products(tuple(AS_BLOCKS)), st.integers(1, 700))
def test_a_part_rewritten_in_pieces_equals_it_rewritten_whole(case, piece_rows):
    """`gguf_model._rewritten` (the load's pieces of whole tiles, which bound its memory) builds
    the same arrays as the whole matrix rewritten at once."""
    from corral.model import gguf_model

    kind, raw, _ = case
    whole = rewritten(raw, kind)
    saved, gguf_model.REWRITE_ROWS = gguf_model.REWRITE_ROWS, piece_rows
    try:
        pieces = gguf_model._rewritten(kind, raw)
    finally:
        gguf_model.REWRITE_ROWS = saved
    assert (pieces.kind, pieces.n_out, pieces.k, pieces.quants) == (
        whole.kind, whole.n_out, whole.k, None
    )  # fmt: skip
    for name in ("scales", "minimums", "words"):
        a, b = getattr(pieces, name), getattr(whole, name)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------------------------
# The rewritten kinds on the int8-activation VNNI kernels (`quant_int8.paired_matmul`)

needs_vnni = pytest.mark.skipif(
    not quant_int8.available(), reason="the int8 kernels need AVX-512 BW and VNNI"
)


def int8_product(w, x: np.ndarray) -> np.ndarray:
    """x W^T by `quant_int8.paired_matmul` on a rewritten matrix's words (one row: the one-row
    kernel; several: the paired one).  -> float32 [B, n_out]"""
    coefs = w.scales if w.minimums is None else w.minimums
    out = np.full((x.shape[0], w.n_out), np.nan, np.float32)
    return quant_int8.paired_matmul(x, w.scales, coefs, w.words, out, w.kind == "Q8_16")


def activation_bound(raw: np.ndarray, kind: str, x: np.ndarray, ratio: int = 0) -> np.ndarray:
    """A bound on what quantizing x moves the products by: each value of a block of 32 is
    within half a step d = max |x| / (127 R) of its two int8 parts (R = `ratio`, by default 16
    where the words are Q4_1's nibbles, 254 otherwise: docs/numerics.md, "int8 activations on
    VNNI"), so |sum_j W_j dx_j| <= sum_j |W_j| d / 2 (2% slack for float32's d).  -> float64
    [B, n_out]"""
    ratio = ratio or (16 if AS_BLOCKS[kind] == "Q4_1" else 254)
    batch, k = x.shape
    d = np.abs(x.astype(np.float64)).reshape(batch, -1, 32).max(axis=2) / (127 * ratio)
    steps = np.repeat(d, 32, axis=1) * 0.5 * 1.02
    return steps @ np.abs(dequantized(raw, kind, raw.shape[0])).T


@needs_vnni
@settings(max_examples=40, deadline=None)
@given(products(tuple(AS_BLOCKS)))
def test_rewritten_int8_products_equal_gguf_dequantized_times_float64(case):
    """Every rewritten kind (Q4_1's nibbles, Q5_0's five words, Q6_K's Q8_0 bytes with a scale
    per half block) on VNNI, one row and several: within the activations' quantization bound
    and the float32 bound of the same sums of the product of gguf's dequantized weights."""
    kind, raw, x = case
    w = rewritten(raw, kind)
    expected = x.astype(np.float64) @ dequantized(raw, kind, raw.shape[0]).T
    bound = 1.01 * error_bound(raw, kind, x) + activation_bound(raw, kind, x)
    for rows in (x[:1], x):  # the one-row kernel, then the several-row one
        got = int8_product(w, rows)
        assert got.shape == (rows.shape[0], raw.shape[0]) and got.dtype == np.float32
        error = np.abs(got - expected[: len(rows)])
        worst = np.unravel_index(np.argmax(error - bound[: len(rows)]), error.shape)
        assert (error <= bound[: len(rows)]).all(), (kind, worst, error[worst], bound[worst])


@needs_vnni
@settings(max_examples=25, deadline=None)
@given(products(tuple(AS_BLOCKS)), st.data())
def test_a_rewritten_row_gets_the_same_int8_bits_alone_and_in_any_batch(case, data):
    """Batch invariance on VNNI: a row's products are the same bits alone (the one-row kernel)
    and among other rows in another order (the several-row kernel, other groups)."""
    kind, raw, x = case
    w = rewritten(raw, kind)
    whole = int8_product(w, x)
    i = data.draw(st.integers(0, x.shape[0] - 1))
    np.testing.assert_array_equal(int8_product(w, x[i : i + 1])[0], whole[i])
    order = list(data.draw(st.permutations(range(x.shape[0]))))
    np.testing.assert_array_equal(int8_product(w, x[order]), whole[order])


@needs_vnni
@pytest.mark.parametrize("kind", sorted(AS_BLOCKS))
@pytest.mark.parametrize("planned", ["int8-vnni", "int8-amx", "float32"])
def test_a_rewritten_matrix_computes_on_its_plans_activations(kind, planned):
    """`TiledMatrix.matmul` of the words alone takes the plan's kernels: VNNI's under
    "int8-vnni" (and under "int8-amx" for the formats AMX lacks), quant_rows' float32 ones
    under "float32"."""
    rng = np.random.default_rng(5)
    raw = random_blocks(rng, kind, 70, 512)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    plan = ComputePlan(planned, 16)
    w = BlockMatrix(*as_blocks(raw, kind)).tiled(plan, words_only=True)
    if planned == "int8-amx" and AS_BLOCKS[kind] == "Q4_1":
        assert w.activations == "int8-amx"  # AMX's own kernels take Q4_1's nibbles
        return
    expected = {"float32": "float32"}.get(planned, "int8-vnni")
    assert w.activations == expected
    for rows in (x[:1], x):
        got = w.matmul(rows)
        if expected == "float32":
            want = quant_rows.HALVES_MATMUL if w.kind == "Q8_16" else quant_rows.FLOAT_MATMUL
            coefs = w.scales if w.minimums is None else w.minimums
            out = np.empty((rows.shape[0], w.n_out), np.float32)
            np.testing.assert_array_equal(got, want[16](rows, w.scales, coefs, w.words, out))
        else:
            np.testing.assert_array_equal(got, int8_product(w, rows))


# ----------------------------------------------------------------------------------------------
# Q4_K and Q6_K in their own bytes (`quant.super_tiled`) on VNNI, and expanded for float32


def super_matrix(raw: np.ndarray, kind: str, planned: str = "int8-vnni", lanes: int = 16):
    """The blocks in the super-block word tiles, computing on `planned` activations."""
    return dataclasses.replace(super_tiled(raw, kind), plan=ComputePlan(planned, lanes))


SUPER_RATIOS = {"Q4_K": 16, "Q6_K": 127}
"""x's parts' ratio for each super-block form (`quant_amx.NIBBLE_RATIO`, `SIX_RATIO`)."""


@needs_vnni
@settings(max_examples=40, deadline=None)
@given(products(SUPER_KINDS), st.data())
def test_super_blocks_are_within_gguf_bound_and_a_row_the_same_bits_in_any_batch(case, data):
    """The super-block form (d and the 6-bit sc and m as bytes for Q4_K; 4 + 2 bit planes and
    int8 scales for Q6_K), one row and several (groups of 1 to 8 rows past the first 16), is
    within the float32 and activation bounds of gguf's dequantized weights (x's ratio 127 for
    Q6_K); a row's bits are the same alone (the one-row kernel) and in any batch (the paired
    one). Q4_K also gives the very bits of `as_blocks`' float32 scales on the same sums."""
    kind, raw, x = case
    w = super_matrix(raw, kind)
    assert w.activations == "int8-vnni"
    expected = x.astype(np.float64) @ dequantized(raw, kind, raw.shape[0]).T
    bound = 1.01 * error_bound(raw, kind, x) + activation_bound(raw, kind, x, SUPER_RATIOS[kind])
    got = w.matmul(x)
    error = np.abs(got - expected)
    worst = np.unravel_index(np.argmax(error - bound), error.shape)
    assert (error <= bound).all(), (kind, worst, error[worst], bound[worst])
    i = data.draw(st.integers(0, x.shape[0] - 1))
    np.testing.assert_array_equal(w.matmul(x[i : i + 1])[0], got[i])
    order = list(data.draw(st.permutations(range(x.shape[0]))))
    np.testing.assert_array_equal(w.matmul(x[order]), got[order])
    if kind == "Q4_K":
        np.testing.assert_array_equal(got, int8_product(rewritten(raw, kind), x))


@needs_vnni
@pytest.mark.parametrize("quant", [0, 63])
@pytest.mark.parametrize("rows", [1, 3, 9])
def test_q6_k_sub_blocks_at_the_int32_bound_sum_exactly(quant, rows):
    """Q6_K's two halves of a sub-block are summed in int32 before the one float epilogue:
    at the bound (every quant 0 or 63, so q - 32 = -32 or 31, every scale -128, every x the
    block's largest, so every 127 x_1 + x_2 = 16,129) the sum is 2^31 - 33,423,360 (quants 0)
    and must not wrap: the products equal the float64 ones to float32's rounding."""
    n_out, k = 20, 512
    raw = np.zeros((n_out, k // 256, 210), np.uint8)
    raw[..., :128] = quant & 15 | (quant & 15) << 4  # the low nibbles
    raw[..., 128:192] = (quant >> 4) * 0x55  # the 2 high bits of 4 quants a byte
    raw[..., 192:208] = 0x80  # the scales, -128
    raw[..., 208:210] = np.array([2.0**-10], np.float16).view(np.uint8)
    raw = raw.reshape(n_out, -1)
    x = np.ones((rows, k), np.float32)
    x[-1, 256:] = -2.0
    expected = x.astype(np.float64) @ dequantized(raw, "Q6_K", n_out).T
    got = super_matrix(raw, "Q6_K").matmul(x)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(0, 2**32 - 1))
def test_x_as_one_int16_holds_127_x1_plus_x2_in_the_pairs_order(rows, blocks, seed):
    """`quant_amx._quantized_wide` (x for Q6_K's several-row kernel) holds, in each row's block
    of 64 bytes, one int16 a column, 127 x_1 + x_2 of the parts `_quantized` makes for Q6_K,
    columns 4 i + (0, 2, 1, 3) at int16 4 i + (0, 1, 2, 3), with the same scales and terms:
    checked against NumPy on x with zero, huge and tiny blocks."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, 32 * blocks)).astype(np.float32)
    x *= np.exp2(rng.integers(-20, 21, (rows, blocks))).repeat(32, axis=1).astype(np.float32)
    x[:, :32][rng.random(rows) < 0.2] = 0.0
    groups, padded = -(-rows // 16), 16 * -(-rows // 16)
    parts, scales, terms, _ = quant_amx._quantized(x, groups, padded, quant_amx.SUPER6)
    wide, wide_scales, wide_terms, _ = quant_amx._quantized_wide(x, groups, padded)
    want = 127 * parts[..., :32].astype(np.int32) + parts[..., 32:]
    want = want.reshape(-1, 8, 4)[:, :, [0, 2, 1, 3]].reshape(parts.shape[:3] + (32,))
    np.testing.assert_array_equal(wide.view(np.int16), want.astype(np.int16))
    np.testing.assert_array_equal(wide_scales, scales)
    np.testing.assert_array_equal(wide_terms, terms)


@needs_vnni
@pytest.mark.parametrize("batch", [2, 3, 4, 7, 8, 9, 17, 33])
def test_q6_k_rows_in_int16_are_within_gguf_bound_and_the_one_row_bits(batch):
    """Several rows of x times Q6_K's super blocks (`vpdpwssd` on x as one int16 against the
    weights widened to (q - 32) sc: groups of 2, 4 and 8 rows, a last group padded) are within
    the float32 and activation bounds of gguf's dequantized weights, and each row is the same
    bits as the one-row kernel's (`vpdpbusd` on the two parts: the same integers)."""
    rng = np.random.default_rng(batch)
    raw = random_blocks(rng, "Q6_K", 3 * MAX_TILE + 5, 768)
    x = rng.standard_normal((batch, 768)).astype(np.float32)
    x *= np.exp2(rng.integers(-4, 5, (batch, 1))).astype(np.float32)
    w = super_matrix(raw, "Q6_K")
    expected = x.astype(np.float64) @ dequantized(raw, "Q6_K", raw.shape[0]).T
    bound = 1.01 * error_bound(raw, "Q6_K", x) + activation_bound(raw, "Q6_K", x, 127)
    got = w.matmul(x)
    assert (np.abs(got - expected) <= bound).all()
    for i in range(batch):
        np.testing.assert_array_equal(w.matmul(x[i : i + 1])[0], got[i])


@settings(max_examples=30, deadline=None)
@given(products(SUPER_KINDS), st.sampled_from(quant_rows.WIDTHS), st.integers(16, 700))
def test_super_blocks_on_float32_give_the_rewritten_words_bits(case, lanes, expand_rows):
    """On float32 activations (a plan without int8, any host) the super blocks, expanded into
    `as_blocks`' form a few tiles at a time, give that form's bits."""
    kind, raw, x = case
    w = super_matrix(raw, kind, "float32", lanes)
    assert w.activations == "float32"
    saved, quant.EXPAND_ROWS = quant.EXPAND_ROWS, expand_rows
    try:
        got = w.matmul(x)
    finally:
        quant.EXPAND_ROWS = saved
    np.testing.assert_array_equal(got, rewritten(raw, kind, lanes).matmul(x))


@settings(max_examples=20, deadline=None)
@given(products(SUPER_KINDS), st.integers(1, 700))
def test_super_blocks_built_in_pieces_equal_them_built_whole(case, piece_rows):
    kind, raw, _ = case
    whole, pieces = super_tiled(raw, kind), super_tiled(raw, kind, piece_rows)
    assert (pieces.kind, pieces.n_out, pieces.k) == (kind, raw.shape[0], whole.k)
    for name in ("scales", "minimums", "words"):
        a, b = getattr(pieces, name), getattr(whole, name)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_super_blocks_take_about_the_files_bytes():
    """Per 256 weights of a row: Q4_K 152 bytes (the file's 144, d and dmin widened), Q6_K 212
    (210); `as_blocks`' form takes 192 and 320."""
    rng = np.random.default_rng(6)
    for kind, size in (("Q4_K", 152), ("Q6_K", 212)):
        raw = random_blocks(rng, kind, 64, 1024)
        assert super_tiled(raw, kind).nbytes == size * 64 * 4
        assert rewritten(raw, kind).nbytes >= 192 * 64 * 4


@pytest.mark.parametrize(
    ("raw", "kind", "message"),
    [
        (np.zeros((2, 22), np.uint8), "Q5_0", "kind must be one of"),
        (np.zeros((2, 145), np.uint8), "Q4_K", "whole number of 144-byte blocks, got 145"),
        (np.zeros((0, 210), np.uint8), "Q6_K", r"uint8 \[n_out >= 1"),
    ],
)
def test_as_super_blocks_names_what_is_wrong(raw, kind, message):
    with pytest.raises(ValueError, match=message):
        as_super_blocks(raw, kind)


@needs_vnni
@pytest.mark.parametrize("kind", SUPER_KINDS)
@pytest.mark.parametrize("planned", ["int8-vnni", "int8-amx"])
def test_super_blocks_compute_on_vnni_under_an_int8_plan(kind, planned):
    """AMX's kernels do not read the super blocks: "int8-amx" sends them to VNNI's."""
    rng = np.random.default_rng(7)
    raw = random_blocks(rng, kind, 70, 512)
    x = rng.standard_normal((3, 512)).astype(np.float32)
    w = super_matrix(raw, kind, planned)
    assert w.activations == "int8-vnni"
    np.testing.assert_array_equal(w.matmul(x), int8_product(w, x))


@needs_vnni
@pytest.mark.parametrize("kind", SUPER_KINDS)
def test_a_vnni_host_loads_q4_k_and_q6_k_as_super_blocks(kind):
    """`gguf_model._part` (the load) keeps Q4_K and Q6_K in their own bytes where VNNI runs
    (Q4_K not where AMX does)."""
    from corral.kernels.compute import quant_amx
    from corral.model import gguf_model

    raw = random_blocks(np.random.default_rng(8), kind, 40, 256)
    part = gguf_model._part(kind, raw)
    super_form = kind == "Q6_K" or not quant_amx.available()
    assert (part.kind == kind) == super_form
    assert part.kind == (kind if super_form else AS_BLOCKS[kind])

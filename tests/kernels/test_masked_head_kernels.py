"""The kernels of the masked LM head (docs/design.md section 4: the mask comes before the
log-softmax, so a constrained row needs only its allowed tokens' logits): the chosen rows of a
Q8_0 product equal the one-row product's bit for bit (`kernels.quant.q8_0_chosen_rows` against
`q8_0_matmul`), and `few_allowed_ids` lists a packed mask's bits as `unpack_ids` does, or says
there are too many."""

from __future__ import annotations

import numpy as np
from corral.kernels import few_allowed_ids, unpack_ids
from corral.kernels.compute import quant
from corral.model.quant import BlockMatrix
from hypothesis import given, settings
from hypothesis import strategies as st
from test_block_kernels import random_blocks
from test_sample_batch import pack


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_out=st.integers(1, 600), blocks=st.integers(1, 20))
def test_chosen_rows_equal_the_one_row_product_bit_for_bit(seed, n_out, blocks):
    rng = np.random.default_rng(seed)
    k = 32 * blocks
    matrix = BlockMatrix.from_blocks("Q8_0", random_blocks(rng, "Q8_0", n_out, k))
    x = (rng.standard_normal((1, k)) * rng.uniform(0.01, 100)).astype(np.float32)
    whole = matrix.tiled().matmul(x)[0]  # one row: `q8_0_matmul`
    n = int(rng.integers(1, n_out + 1))  # past 16 and not a multiple of it too
    ids = np.sort(rng.choice(n_out, n, replace=False)).astype(np.int32)
    chosen = np.full(n, np.nan, np.float32)
    quant.q8_0_chosen_rows(x[0], ids, matrix.scales, matrix.quants, chosen)
    assert np.array_equal(chosen, whole[ids])  # bitwise: the same operations in the same order


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    v=st.integers(1, 3000),
    density=st.sampled_from([0.0, 0.001, 0.01, 0.1, 0.5, 1.0]),
    limit=st.integers(0, 400),
)
def test_few_allowed_ids_lists_the_bits_or_says_there_are_too_many(seed, v, density, limit):
    allowed = np.random.default_rng(seed).random(v) < density
    mask = pack(allowed)
    got = few_allowed_ids(mask, limit)
    if allowed.sum() > limit:
        assert got is None
    else:
        assert got.dtype == np.int32
        assert np.array_equal(got, unpack_ids(mask))

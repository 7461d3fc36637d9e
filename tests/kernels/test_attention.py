"""The ragged attention kernel against the textbook softmax(q k^T) v, one query row and head at a
time in float64 (DESIGN.md section 6): random ragged shapes (rows of one slot at consecutive
lengths, as a prefill segment, mixed with single decode rows), grouped heads, skipped rows, and
no read past a row's own context."""

from __future__ import annotations

import numpy as np
from corral.kernels import attention
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_attention(q, keys, values, slots, lengths):
    """softmax(q k^T) v one query row and head at a time, in float64 (rows of length 0: NaN)."""
    n_rows, n_heads, _ = q.shape
    group = n_heads // keys.shape[1]
    out = np.full(q.shape, np.nan)
    for r in range(n_rows):
        for h in range(n_heads):
            if lengths[r] == 0:
                continue
            k = keys[slots[r], h // group, : lengths[r]].astype(np.float64)
            v = values[slots[r], h // group, : lengths[r]].astype(np.float64)
            scores = k @ q[r, h]
            weights = np.exp(scores - scores.max())
            out[r, h] = weights / weights.sum() @ v
    return out


@st.composite
def ragged_passes(draw):
    """(q, keys, values, slots, lengths): segments of 1..6 rows at consecutive lengths in distinct
    slots, some rows skipped (length 0); scores spread wide enough that softmax is not flat."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kv_heads, group = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    width = draw(st.sampled_from([4, 16, 64]))
    max_len = draw(st.integers(1, 70))
    n_slots = draw(st.integers(1, 5))
    slots, lengths = [], []
    for slot in draw(st.permutations(range(n_slots))):
        n = draw(st.integers(1, min(6, max_len)))
        start = draw(st.integers(0, max_len - n))
        slots += [slot] * n
        lengths += list(range(start + 1, start + n + 1))
    lengths = np.array(lengths, np.int64)
    skipped = draw(st.lists(st.booleans(), min_size=len(lengths), max_size=len(lengths)))
    lengths[np.array(skipped)] = 0
    shape = (n_slots, kv_heads, max_len, width)
    keys = rng.standard_normal(shape).astype(np.float32)
    values = rng.standard_normal(shape).astype(np.float32)
    spread = draw(st.sampled_from([0.1, 1.0, 4.0]))
    q = (spread * rng.standard_normal((len(slots), kv_heads * group, width))).astype(np.float32)
    return q, keys, values, np.array(slots, np.int64), lengths


@settings(max_examples=150, deadline=None)
@given(ragged_passes())
def test_ragged_attention_equals_the_textbook_formula_row_by_row(case):
    q, keys, values, slots, lengths = case
    out = np.full(q.shape, np.nan, np.float32)
    attention.ragged_attention(q, keys, values, slots, lengths, out)
    expected = reference_attention(q, keys, values, slots, lengths)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)  # NaN where skipped


def test_ragged_attention_over_long_contexts_equals_numpy():
    """SmolLM2's shapes (9 query heads over 3 key/value heads of width 64) at decode contexts of
    a few hundred positions, where the prefetch runs ahead of the keys and values read."""
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((4, 3, 520, 64)).astype(np.float32)
    values = rng.standard_normal((4, 3, 520, 64)).astype(np.float32)
    slots, lengths = np.array([2, 0, 3]), np.array([520, 257, 17])
    q = (0.3 * rng.standard_normal((3, 9, 64))).astype(np.float32)
    out = attention.ragged_attention(q, keys, values, slots, lengths, np.empty_like(q))
    expected = reference_attention(q, keys, values, slots, lengths)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_ragged_attention_reads_nothing_past_a_context():
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((2, 1, 40, 16)).astype(np.float32)
    values = rng.standard_normal((2, 1, 40, 16)).astype(np.float32)
    q = rng.standard_normal((2, 2, 16)).astype(np.float32)
    slots, lengths = np.array([1, 0]), np.array([3, 21])
    before = attention.ragged_attention(q, keys, values, slots, lengths, np.empty_like(q)).copy()
    keys[1, :, 3:], values[1, :, 3:] = np.nan, np.nan
    keys[0, :, 21:], values[0, :, 21:] = np.nan, np.nan
    after = attention.ragged_attention(q, keys, values, slots, lengths, np.empty_like(q))
    np.testing.assert_array_equal(before, after)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-200, 50, width=32), min_size=1, max_size=300))
def test_softmax_with_the_polynomial_exponential_equals_numpy(scores):
    scores = np.array(scores, np.float32)
    expected = np.exp(scores.astype(np.float64) - scores.max())
    expected /= expected.sum()
    got = scores.copy()
    attention._softmax_(got, np.empty(len(got), np.int32))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-12)

"""Sliding-window attention (Mistral's and Gemma 3's sliding layers, docs/models.md) against the
textbook formula in float64: a row at position p sees positions p - w + 1..p (transformers'
`sliding_window_overlay`), in the ragged kernel (random ragged passes, head widths 4, 16 and
64, windows shorter and longer than the contexts), in `llama.attend_prompt`'s GEMMs around
`causal_softmax_`, and in `causal_softmax_` itself."""

from __future__ import annotations

import numpy as np
from corral.kernels.compute import attention
from corral.model import llama
from hypothesis import given, settings
from hypothesis import strategies as st
from test_attention import ragged_passes, rounding_bound


def windowed_attention(q, keys, values, segments, window):
    """softmax(q k^T) v over each row's last `window` positions, one query row and head at a
    time, in float64 (rows of no segment: NaN)."""
    group = q.shape[1] // keys.shape[1]
    out = np.full(q.shape, np.nan)
    for slot, start, first, n in segments:
        for j in range(n):
            low = max(0, start + j - window + 1)
            for h in range(q.shape[1]):
                k = keys[slot, h // group, low : start + j + 1].astype(np.float64)
                v = values[slot, h // group, low : start + j + 1].astype(np.float64)
                scores = k @ q[first + j, h]
                weights = np.exp(scores - scores.max())
                out[first + j, h] = weights / weights.sum() @ v
    return out


@settings(max_examples=150, deadline=None)
@given(ragged_passes(most_rows=20), st.integers(1, 40))
def test_ragged_attention_with_a_window_equals_the_textbook_formula(case, window):
    q, keys, values, segments = case
    out = np.full(q.shape, np.nan, np.float32)
    attention.ragged_attention(q, keys, values, segments, out, window)
    expected = windowed_attention(q, keys, values, segments, window)
    tolerance = 1e-5 * (1 + np.abs(expected)) + rounding_bound(q, keys, values, segments)
    written = ~np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(out), ~written)
    assert (np.abs(out[written] - expected[written]) <= tolerance[written]).all()


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([16, 64]),
    st.integers(1, 150),
    st.integers(0, 40),
    st.integers(1, 80),
)
def test_attend_prompt_with_a_window_equals_the_textbook_formula(seed, width, n, start, window):
    """A prompt's n rows after `start` cached positions, in blocks of `llama.PROMPT_BLOCK`
    queries whose products begin at the block's first visible key."""
    rng = np.random.default_rng(seed)
    kv_heads, group = 2, 2
    keys = rng.standard_normal((1, kv_heads, start + n, width)).astype(np.float32)
    values = rng.standard_normal((1, kv_heads, start + n, width)).astype(np.float32)
    q = (0.5 * rng.standard_normal((n, kv_heads * group, width))).astype(np.float32)
    out = llama.attend_prompt(q, keys[0], values[0], start, window)
    segments = np.array([[0, start, 0, n]], np.int64)
    expected = windowed_attention(q, keys, values, segments, window)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(0, 30), st.integers(1, 40))
def test_causal_softmax_with_a_window_zeroes_what_the_row_does_not_see(seed, n, first, window):
    rng = np.random.default_rng(seed)
    group = 2
    scores = rng.standard_normal((1, group * n, first + n)).astype(np.float32)
    position = first + np.arange(group * n) % n  # [G n]
    column = np.arange(first + n)[None, :]
    unseen = (column > position[:, None]) | (column <= position[:, None] - window)
    scores[:, unseen] = np.nan  # never read
    expected = np.where(unseen, -np.inf, scores[0].astype(np.float64))
    expected = np.exp(expected - expected.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    attention.causal_softmax_(scores, first, n, window)
    np.testing.assert_allclose(scores[0], expected, rtol=1e-5, atol=1e-7)
    assert (scores[:, unseen] == 0).all()

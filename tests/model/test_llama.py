"""The forward pass's pieces against their textbook formulas (DESIGN.md section 6): attention of
grouped queries is softmax(q k^T + mask) v per query head with its key/value head repeated, and
the causal bias hides exactly the future."""

from __future__ import annotations

import numpy as np
from corral.model import llama


def test_causal_bias_hides_exactly_the_future_of_each_query():
    bias = llama.causal_bias(start=2, n=3, group=2)  # queries at positions 2, 3, 4
    assert bias.shape == (6, 5) and bias.dtype == np.float32
    seen = bias == 0
    expected = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    np.testing.assert_array_equal(seen, np.vstack([expected, expected]))


def test_grouped_attention_equals_one_head_at_a_time():
    rng = np.random.default_rng(0)
    kv_heads, group, n, total, hd = 2, 3, 4, 6, 8
    q = rng.standard_normal((kv_heads, group * n, hd)).astype(np.float32)
    keys = rng.standard_normal((kv_heads, total, hd)).astype(np.float32)
    values = rng.standard_normal((kv_heads, total, hd)).astype(np.float32)
    bias = llama.causal_bias(total - n, n, group)
    out = llama.attention(q.copy(), keys, values, bias)
    assert out.shape == (kv_heads, group * n, hd)
    for h in range(kv_heads):
        scores = q[h].astype(np.float64) @ keys[h].T + bias  # [G n, T]
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(out[h], weights @ values[h], rtol=1e-5, atol=1e-5)

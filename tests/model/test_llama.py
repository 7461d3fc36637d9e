"""The forward pass's pieces against their textbook formulas (docs/design.md section 6): a prefill
pass's attention of grouped queries is softmax(q k^T) v per query head over its key/value head's
positions up to its own, whichever route a segment takes."""

from __future__ import annotations

import numpy as np
import pytest
from corral.model import llama


def test_plan_prefill_places_each_token_and_splits_short_from_long_segments(monkeypatch):
    monkeypatch.setattr(llama, "SHORT_SEGMENT", 3)
    plan = llama.plan_prefill([(4, 0, 2), (1, 5, 4), (0, 7, 1)], positional=False)
    assert plan.slots.tolist() == [4, 4, 1, 1, 1, 1, 0]
    assert plan.positions.tolist() == [0, 1, 5, 6, 7, 8, 7]
    assert plan.short.tolist() == [[4, 0, 0, 2], [0, 7, 6, 1]]  # (slot, start, first, n)
    (long,) = plan.long
    assert (long.slot, long.start, long.rows) == (1, 5, slice(2, 6))


def test_positional_plan_cuts_every_segment_into_short_pieces(monkeypatch):
    monkeypatch.setattr(llama, "SHORT_SEGMENT", 3)
    plan = llama.plan_prefill([(4, 0, 2), (1, 5, 4), (0, 7, 7)], positional=True)
    assert plan.positions.tolist() == [0, 1, 5, 6, 7, 8, *range(7, 14)]
    assert plan.long == ()
    pieces = [[4, 0, 0, 2], [1, 5, 2, 3], [1, 8, 5, 1], [0, 7, 6, 3], [0, 10, 9, 3], [0, 13, 12, 1]]
    assert plan.short.tolist() == pieces  # (slot, start, first, n)


@pytest.mark.parametrize(
    ("short_segment", "prompt_block", "positional"),
    [(0, 64, False), (0, 3, False), (0, 1, False), (3, 2, False), (1000, 64, False)]
    # all long (one block, blocks), mixed, all short; then every segment in short pieces
    + [(1, 64, True), (3, 64, True), (32, 64, True)],
)
def test_prefill_attention_of_ragged_segments_equals_the_textbook_formula(
    monkeypatch, short_segment, prompt_block, positional
):
    """Each new token sees its slot's earlier cache and the segment's tokens up to itself, by
    either route (one ragged kernel call, or blocks of queries of a segment, each over the keys
    up to its own last position), or with every segment cut into short pieces."""
    monkeypatch.setattr(llama, "SHORT_SEGMENT", short_segment)
    monkeypatch.setattr(llama, "PROMPT_BLOCK", prompt_block)
    rng = np.random.default_rng(short_segment + prompt_block)
    kv_heads, group, hd, n_slots, max_len = 2, 3, 16, 4, 30
    segments = [(2, 5, 4), (0, 0, 7), (3, 12, 1), (1, 20, 2)]  # (slot, start, n)
    n_tokens = sum(n for *_, n in segments)
    layer_keys = rng.standard_normal((n_slots, kv_heads, max_len, hd)).astype(np.float32)
    layer_values = rng.standard_normal((n_slots, kv_heads, max_len, hd)).astype(np.float32)
    old_keys, old_values = layer_keys.copy(), layer_values.copy()
    q = rng.standard_normal((n_tokens, kv_heads * group, hd)).astype(np.float32)
    k = rng.standard_normal((n_tokens, kv_heads, hd)).astype(np.float32)
    v = rng.standard_normal((n_tokens, kv_heads, hd)).astype(np.float32)
    plan = llama.plan_prefill(segments, positional)
    out = llama.attention_prefill(q, k, v, layer_keys, layer_values, plan)
    assert out.shape == (n_tokens, kv_heads * group * hd)
    row = 0
    for slot, start, n in segments:
        keys, values = old_keys[slot].astype(np.float64), old_values[slot].astype(np.float64)
        keys[:, start : start + n] = k[row : row + n].transpose(1, 0, 2)
        values[:, start : start + n] = v[row : row + n].transpose(1, 0, 2)
        np.testing.assert_array_equal(layer_keys[slot, :, : start + n], keys[:, : start + n])
        for i in range(n):
            for h in range(kv_heads * group):
                seen = start + i + 1
                scores = keys[h // group, :seen] @ q[row + i, h] / np.sqrt(hd)
                weights = np.exp(scores - scores.max())
                expected = weights / weights.sum() @ values[h // group, :seen]
                got = out[row + i, h * hd : (h + 1) * hd]
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        row += n

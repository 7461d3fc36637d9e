"""Decode-step attention over a KV cache of ragged contexts, in one Numba kernel (DESIGN.md
section 6; scaled dot-product attention with grouped queries, as Hugging Face's Llama).

One decode step has one query token per sequence; sequence b sits in cache slot slots[b] and
sees its first lengths[b] positions. The cache layout is `[S, Hkv, T, hd]` for one layer, so the
keys a (sequence, key/value head) pair reads are one contiguous `[lengths[b], hd]` run: each
parallel task takes one pair, scores its G = Hq / Hkv query heads against the run, applies the
softmax and sums the values, with no padding to the longest context and no Python loop.
"""

from __future__ import annotations

import numba
import numpy as np

_FASTMATH = {"reassoc", "contract", "nsz"}  # no -inf is ever formed: lengths bound the loops


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def decode_attention(q, keys, values, slots, lengths, out):  # pragma: no cover - compiled
    """out[b, h] = softmax(q[b, h] . keys[slots[b], h // G, :lengths[b]]) values[...]
    for every sequence b and query head h.  O(B Hq max(lengths) hd).

    q float32 [B, Hq, hd] (already scaled by hd^-1/2); keys, values float32 [S, Hkv, T, hd]
    (one layer's cache); slots int64 [B]; lengths int64 [B], each in 1..T;
    out float32 [B, Hq, hd] (written). Returns out.
    """
    batch, n_heads, width = q.shape
    kv_heads = keys.shape[1]
    group = n_heads // kv_heads
    for task in numba.prange(batch * kv_heads):
        b, head = task // kv_heads, task % kv_heads
        slot, length = slots[b], lengths[b]
        first = head * group
        queries = q[b, first : first + group]  # [G, hd]
        scores = np.empty((group, length), np.float32)
        for t in range(length):  # each key read once for the G query heads
            key = keys[slot, head, t]
            for g in range(group):
                total = np.float32(0.0)
                for i in range(width):
                    total += queries[g, i] * key[i]
                scores[g, t] = total
        for g in range(group):
            top = scores[g].max()
            norm = np.float32(0.0)
            for t in range(length):
                scores[g, t] = np.exp(scores[g, t] - top)
                norm += scores[g, t]
            scores[g] /= norm
        attended = np.zeros((group, width), np.float32)  # local: no aliasing with `values`
        for t in range(length):  # each value read once for the G query heads
            value = values[slot, head, t]
            for g in range(group):
                weight = scores[g, t]
                for i in range(width):
                    attended[g, i] += weight * value[i]
        out[b, first : first + group] = attended
    return out

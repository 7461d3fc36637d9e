"""Attention of query rows over a KV cache of ragged contexts, in one Numba kernel (DESIGN.md
section 6; scaled dot-product attention with grouped queries, as Hugging Face's Llama).

A query row is one new token of one sequence: row r sits in cache slot slots[r] and sees the
first lengths[r] positions of it. A decode step has one row per sequence (lengths = positions
+ 1); a prefill or jump-forward pass has n rows per sequence, at lengths start + 1 .. start + n,
which is causal attention within the new tokens and full attention over the slot's earlier
cache, with no mask, no padding to the longest context and no Python loop over sequences.

The cache layout is `[S, Hkv, T, hd]` for one layer, so the keys that a (row, key/value head)
pair reads are one contiguous `[lengths[r], hd]` run. Each parallel task takes one pair and
streams the run once for the G = Hq / Hkv query heads it serves: scores, softmax, weighted sum
of the values. Decode attention reads far more cache than it computes on (G multiply-adds per
byte loaded), so the kernel is bound by memory; it asks for the keys and values a few rows ahead
(`prefetch`) so that the loads overlap the arithmetic, and takes its exponentials from a
vectorizable polynomial (`_softmax_`) rather than one libm call per score.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_FASTMATH = {"reassoc", "contract", "nsz"}  # no -inf or NaN is ever formed: lengths bound loops
_PREFETCH_ROWS = 16  # keys/values fetched this many rows ahead (16 x 64 floats = 4 KB)

# Cephes' expf: exp(x) = 2^n exp(r), n = round(x / ln 2), |r| <= ln 2 / 2, exp(r) by a degree-7
# polynomial (relative error about 1e-7 in float32); ln 2 split in two for an exact n ln 2.
_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693359375)
_LN2_LOW = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.0)  # exp(-87) ~ 1.6e-38 is still a normal float32: 2^n needs n >= -126


@intrinsic
def prefetch(typingctx, array, index):  # pragma: no cover - compiled
    """Hint the CPU to load the cache line of array[index] (a 1-D contiguous array) for reading:
    LLVM's `llvm.prefetch` (read, high locality, data cache). No effect on results; an index
    past the end is harmless for the hardware, but callers keep it in bounds."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_pointer = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
            "llvm.prefetch.p0i8",
        )
        address = builder.bitcast(builder.gep(data, [args[1]]), byte_pointer)
        builder.call(
            function, [address, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        )
        return context.get_dummy_value()

    return types.void(array, index), codegen


@numba.njit(cache=True, fastmath=_FASTMATH)
def _softmax_(scores, scale_bits):  # pragma: no cover - compiled
    """scores[:] = softmax(scores), in place.  O(n), every loop vectorizable.

    scores float32 [n], n >= 1; scale_bits int32 [>= n] (scratch: the bits of 2^n per score).
    """
    n_scores = scores.shape[0]
    top = scores[0]
    for t in range(n_scores):
        top = max(top, scores[t])
    scale = scale_bits.view(np.float32)
    for t in range(n_scores):  # exp(x) = 2^n p(r), as Cephes' expf
        x = max(scores[t] - top, _EXP_MIN)
        n = np.floor(x * _LOG2E + np.float32(0.5))
        r = x - n * _LN2_HIGH - n * _LN2_LOW
        p = np.float32(1.9875691500e-4)
        p = p * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        scores[t] = p * r * r + r + np.float32(1.0)
        scale_bits[t] = (np.int32(n) + np.int32(127)) << np.int32(23)  # the float32 2^n
    norm = np.float32(0.0)
    for t in range(n_scores):
        weight = scores[t] * scale[t]
        scores[t] = weight
        norm += weight
    inverse = np.float32(1.0) / norm
    for t in range(n_scores):
        scores[t] *= inverse


@numba.njit(cache=True, fastmath=_FASTMATH)
def _attend(q, keys, values, row, slot, head, length, out):  # pragma: no cover - compiled
    """One task of `ragged_attention`: row `row`'s G query heads of key/value head `head` over
    positions 0..length-1 of slot `slot`.  O(G length hd)"""
    group = q.shape[1] // keys.shape[1]
    width = q.shape[2]
    first = head * group
    key_run = keys[slot, head].reshape(-1)  # [T hd], the slot's keys for this head, in place
    value_run = values[slot, head].reshape(-1)
    end = length * width
    scores = np.empty((group, length), np.float32)
    for t in range(length):  # each key read once for the G query heads
        ahead = (t + _PREFETCH_ROWS) * width
        if ahead < end:
            for i in range(0, width, 16):  # one 64-byte cache line per 16 floats
                prefetch(key_run, ahead + i)
        at = t * width
        for g in range(group):
            total = np.float32(0.0)
            for i in range(width):
                total += q[row, first + g, i] * key_run[at + i]
            scores[g, t] = total
    scale_bits = np.empty(length, np.int32)
    for g in range(group):
        _softmax_(scores[g], scale_bits)
    attended = np.zeros((group, width), np.float32)  # local: no aliasing with `values`
    for t in range(length):  # each value read once for the G query heads
        ahead = (t + _PREFETCH_ROWS) * width
        if ahead < end:
            for i in range(0, width, 16):
                prefetch(value_run, ahead + i)
        at = t * width
        for g in range(group):
            weight = scores[g, t]
            for i in range(width):
                attended[g, i] += weight * value_run[at + i]
    out[row, first : first + group] = attended


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def ragged_attention(q, keys, values, slots, lengths, out):  # pragma: no cover - compiled
    """out[r, h] = softmax(q[r, h] . keys[slots[r], h // G, :lengths[r]]) values[same]
    for every query row r with lengths[r] > 0 and every query head h; rows with lengths[r] = 0
    are skipped (out[r] is left as it was).  O(Hq hd sum(lengths)), parallel over the
    (row, key/value head) pairs.

    q float32 [N, Hq, hd] (already scaled by hd^-1/2); keys, values float32 [S, Hkv, T, hd]
    (one layer's cache, C-contiguous; Hq a multiple of Hkv); slots int64 [N], each in 0..S-1;
    lengths int64 [N], each in 0..T; out float32 [N, Hq, hd] (written). Returns out.
    Indices are not checked here: the callers (`llama.attention_decode`,
    `llama.attention_prefill`) derive them from a checked cache.
    """
    kv_heads = keys.shape[1]
    for task in numba.prange(q.shape[0] * kv_heads):
        row, head = task // kv_heads, task % kv_heads
        if lengths[row] > 0:
            _attend(q, keys, values, row, slots[row], head, lengths[row], out)
    return out

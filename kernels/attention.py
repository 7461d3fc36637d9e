"""Attention of query rows over a KV cache of ragged contexts, in one Numba kernel (DESIGN.md
section 6; scaled dot-product attention with grouped queries, as Hugging Face's Llama).

A segment is the new tokens of one sequence: n query rows at positions start..start+n-1 of
its cache slot, each seeing the slot's positions up to its own (causal attention within the new
tokens, full attention over the slot's earlier cache). A decode step is B segments of one row;
a jump-forward step mixes them with segments of a few rows. One call covers them all, with no
mask, no padding to the longest context and no Python loop over sequences.

The cache layout is `[S, Hkv, T, hd]` for one layer, so the keys that a (segment, key/value
head) pair reads are one contiguous `[start + n, hd]` run. Each parallel task takes one pair and
streams the run once for the n G query rows it serves (G = Hq / Hkv): scores, softmax,
weighted sum of the values. Decode attention does few multiply-adds per float it loads (G),
so the kernel is bound by memory: it asks for the keys and values a few rows ahead (`prefetch`)
so that the loads overlap the arithmetic, and takes its exponentials from a vectorizable
polynomial (`_softmax_`) rather than one libm call per score.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.expf import EXP_MIN, LN2_HIGH, LN2_LOW, LOG2E, exp_reduced
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_FASTMATH = {"reassoc", "contract", "nsz"}  # no -inf or NaN is ever formed: lengths bound loops
_PREFETCH_ROWS = 16  # keys/values fetched this many rows ahead (16 x 64 floats = 4 KB)


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
        x = max(scores[t] - top, EXP_MIN)
        n = np.floor(x * LOG2E + np.float32(0.5))
        scores[t] = exp_reduced(x - n * LN2_HIGH - n * LN2_LOW)
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
def _attend(q, keys, values, slot, start, first, n, head, out):  # pragma: no cover - compiled
    """One task of `ragged_attention`: the G query heads of key/value head `head` of the n rows
    first..first+n-1, row first + j over positions 0..start+j of slot `slot`.
    O(G n (start + n) hd)"""
    group = q.shape[1] // keys.shape[1]
    width = q.shape[2]
    first_head = head * group
    length = start + n
    key_run = keys[slot, head].reshape(-1)  # [T hd], the slot's keys for this head, in place
    value_run = values[slot, head].reshape(-1)
    end = length * width
    scores = np.empty((n * group, length), np.float32)  # row j G + g: query head g of row j
    for t in range(length):  # each key read once, for every row that sees it
        ahead = (t + _PREFETCH_ROWS) * width
        if ahead < end:
            for i in range(0, width, 16):  # one 64-byte cache line per 16 floats
                prefetch(key_run, ahead + i)
        at = t * width
        for j in range(max(0, t - start), n):  # the rows at positions >= t
            for g in range(group):
                total = np.float32(0.0)
                for i in range(width):
                    total += q[first + j, first_head + g, i] * key_run[at + i]
                scores[j * group + g, t] = total
    scale_bits = np.empty(length, np.int32)
    for j in range(n):
        for g in range(group):
            _softmax_(scores[j * group + g, : start + j + 1], scale_bits)
    attended = np.zeros((n * group, width), np.float32)  # local: no aliasing with `values`
    for t in range(length):  # each value read once, for every row that sees it
        ahead = (t + _PREFETCH_ROWS) * width
        if ahead < end:
            for i in range(0, width, 16):
                prefetch(value_run, ahead + i)
        at = t * width
        for j in range(max(0, t - start), n):
            for g in range(group):
                weight = scores[j * group + g, t]
                for i in range(width):
                    attended[j * group + g, i] += weight * value_run[at + i]
    for j in range(n):
        out[first + j, first_head : first_head + group] = attended[j * group : (j + 1) * group]


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def ragged_attention(q, keys, values, segments, out):  # pragma: no cover - compiled
    """Causal attention of the query rows of ragged segments, each over its own cache slot.

    Segment (slot, start, first, n) is n rows, first..first+n-1, of one sequence whose tokens
    sit at positions start..start+n-1 of slot `slot`: for each such row r = first + j and query
    head h, out[r, h] = softmax(q[r, h] . keys[slot, h // G, :start+j+1]) values[same].
    Rows of no segment are left as they were. A decode step is B segments of n = 1.
    O(Hq hd sum of n (start + n)), parallel over the (segment, key/value head) pairs; each
    pair reads its keys and values once.

    q float32 [N, Hq, hd] (already scaled by hd^-1/2); keys, values float32 [S, Hkv, T, hd]
    (one layer's cache, C-contiguous; Hq a multiple of Hkv);
    segments int64 [M, 4] rows (slot, start, first, n), n >= 1, start + n <= T, slots in
    0..S-1 and row ranges within 0..N-1 (not checked here: the callers,
    `llama.attention_decode` and `llama.attention_prefill`, derive them from a checked cache);
    out float32 [N, Hq, hd] (written). Returns out.
    """
    kv_heads = keys.shape[1]
    for task in numba.prange(segments.shape[0] * kv_heads):
        segment, head = task // kv_heads, task % kv_heads
        slot, start, first, n = segments[segment]
        _attend(q, keys, values, slot, start, first, n, head, out)
    return out

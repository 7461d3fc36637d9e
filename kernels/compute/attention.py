"""Attention of query rows over a KV cache of ragged contexts, in one Numba kernel
(`ragged_attention`; scaled dot-product attention with grouped queries, as Hugging Face's Llama),
and the compiled causal softmax of `llama.attend_prompt` (`causal_softmax_`).

A segment is the new tokens of one sequence: n query rows at positions start..start+n-1 of its
cache slot, each seeing the slot's positions up to its own. One layer's cache is `[S, Hkv, T,
hd]`, float32 or float16 (taken as its uint16 bits, `cache_bits`; `float16_supported` tells
whether this target converts float16 in registers). With a head width of `POSITIONAL_WIDTHS`
(64, 128, 256) a row's scores and weighted sum depend on its position alone (positional
order), so a row attends alike, bit for bit, in a prompt prefilled whole, in pieces or token by
token, in any batch. docs/numerics.md
("Attention") gives the kernel's design and figures.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from corral.kernels.claim import claim
from corral.kernels.expf import exp_nonpositive
from corral.kernels.prefetch import prefetch_l2
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_FASTMATH = {"reassoc", "contract", "nsz"}  # no -inf or NaN is ever formed: lengths bound loops
_PREFETCH_ROWS = 32  # the four-key path fetches keys/values this many rows ahead

PARALLEL_ROWS = 16  # from this many tokens `rope_store` spreads them over Numba's threads

_LANES = 16  # the running maxima of `_softmax_` (one vector register of float32)


@numba.njit(cache=True, fastmath=_FASTMATH)
def _softmax_(scores, lanes):  # pragma: no cover - compiled
    """scores[:] = softmax(scores), in place.  O(n), three passes, each vectorized: the maximum
    as `_LANES` running maxima (a single running maximum is a chain of dependent compares, a
    few cycles a score), the exponentials from `expf.exp_nonpositive` (branch-free), the
    normalization.

    scores float32 [n], n >= 1, finite; lanes float32 [_LANES] (scratch).
    """
    n = scores.shape[0]
    lanes[:] = scores[0]
    t = 0
    while t + _LANES <= n:
        for lane in range(_LANES):
            lanes[lane] = max(lanes[lane], scores[t + lane])
        t += _LANES
    top = scores[0]
    for lane in range(_LANES):
        top = max(top, lanes[lane])
    for u in range(t, n):
        top = max(top, scores[u])
    norm = np.float32(0.0)
    for t in range(n):
        weight = exp_nonpositive(scores[t] - top)
        scores[t] = weight
        norm += weight
    inverse = np.float32(1.0) / norm
    for t in range(n):
        scores[t] *= inverse


_SOFTMAX_ROWS = 16  # rows of `causal_softmax_` per parallel task


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def causal_softmax_(scores, first, n, window=0):  # pragma: no cover - compiled
    """The causal softmax of a prompt block's scores, in place: row r of each head is query
    i = r % n, at position first + i, which sees positions 0..first + i (with a sliding
    `window` w > 0, only the last w of them: first + i - w + 1..first + i); its scores there
    become their softmax (`_softmax_`'s polynomial exp), the others 0. What the textbook writes
    as `softmax(scores + causal bias)`, without forming the bias or any exp of -inf.
    O(H R T), parallel over tasks of `_SOFTMAX_ROWS` rows.

    scores float32 [H, R, T], C-contiguous, R a multiple of n (the G query heads of a key/value
    head, n queries each, head-major: row g n + i), first + n <= T (not checked here: the
    caller, `llama.attend_prompt`, sizes T to the block's last position).
    """
    heads, n_rows, width = scores.shape
    flat = scores.reshape(heads * n_rows, width)
    n_tasks = (heads * n_rows + _SOFTMAX_ROWS - 1) // _SOFTMAX_ROWS
    for task in numba.prange(n_tasks):
        lanes = np.empty(_LANES, np.float32)
        for row in range(task * _SOFTMAX_ROWS, min((task + 1) * _SOFTMAX_ROWS, heads * n_rows)):
            seen = first + row % n_rows % n + 1
            low = max(0, seen - window) if window > 0 else 0
            _softmax_(flat[row, low:seen], lanes)
            flat[row, :low] = 0.0
            flat[row, seen:] = 0.0


_BLOCK = 16  # keys or values of one `_scores16` / `_weighted16` call: one vector of float32
_F32 = ir.FloatType()
_F16 = ir.HalfType()
_VECTOR = ir.VectorType(_F32, _BLOCK)


_HALF_LIBCALLS = ("__extendhfsf2", "__truncsfhf2", "__gnu_h2f_ieee", "__gnu_f2h_ieee")
_HALF_PROBE = """
define <16 x float> @widen(<16 x half>* %p) {
  %v = load <16 x half>, <16 x half>* %p, align 2
  %f = fpext <16 x half> %v to <16 x float>
  ret <16 x float> %f
}
define i16 @narrow(float %x) {
  %h = fptrunc float %x to half
  %b = bitcast half %h to i16
  ret i16 %b
}
"""


@functools.cache
def float16_supported() -> bool:
    """Whether the kernels can take a float16 cache here: the machine code LLVM makes of the
    conversions between half and float, for the CPU and features Numba compiles for (its
    NUMBA_CPU_NAME and NUMBA_CPU_FEATURES, else the host's), calls no runtime library function
    (on x86 it is F16C's `vcvtph2ps` / `vcvtps2ph`, on AArch64 `fcvt`). A target without them
    (an x86 CPU without F16C, NUMBA_CPU_NAME=generic) has LLVM call compiler-rt's
    `__extendhfsf2` and `__truncsfhf2`, which Numba's JIT does not link: the first kernel call
    on a float16 cache would abort the process ("LLVM ERROR: Symbol not found"). False too
    when the probe itself fails. O(1), once per process (a few milliseconds)."""
    try:
        import llvmlite.binding as llvm
        from numba.core.registry import cpu_target

        machine = cpu_target.target_context.codegen()._tm  # the target Numba compiles for
        module = llvm.parse_assembly(_HALF_PROBE)
        module.triple, module.data_layout = machine.triple, str(machine.target_data)
        code = machine.emit_assembly(module)
    except Exception:  # noqa: BLE001 - any failure: no float16 cache, never an abort
        return False
    return not any(name in code for name in _HALF_LIBCALLS)


def cache_bits(cache: np.ndarray) -> np.ndarray:
    """A KV cache array as the compiled kernels take it: float32 as it is, float16 as a uint16
    view of its bits (no copy). Numba has no float16 type on the CPU, so the kernels read such a
    cache as integers and convert each element with `_widen` (LLVM's `fpext` from half: F16C's
    `vcvtph2ps`) and write it with `_narrow` (`fptrunc`, round to nearest even, as NumPy's
    `astype(np.float16)`). Any other dtype is returned as it is (the kernels then refuse it).

    Raises:
        ValueError: a float16 cache where `float16_supported()` is False (names the remedy).
    """
    if cache.dtype != np.float16:
        return cache
    if not float16_supported():
        raise ValueError(
            "a float16 KV cache needs float16 conversions in registers (x86: F16C), which "
            "Numba's target CPU lacks here; use a float32 cache (dtype=np.float32)"
        )
    return cache.view(np.uint16)


def _is_bits(numba_type) -> bool:
    """Whether a Numba scalar or array type holds float16 bits (uint16: see `cache_bits`)."""
    dtype = numba_type.dtype if isinstance(numba_type, types.Array) else numba_type
    return dtype == types.uint16


@intrinsic
def _widen(typingctx, x):  # pragma: no cover - compiled
    """One cache element as float32: a float32 as it is, uint16 bits as the float16 they hold
    (exact: every float16 is a float32). O(1)"""
    if x not in (types.float32, types.uint16):
        return None

    def codegen(context, builder, signature, args):
        if not _is_bits(signature.args[0]):
            return args[0]
        return builder.fpext(builder.bitcast(args[0], _F16), _F32)

    return types.float32(x), codegen


@intrinsic
def _narrow(typingctx, cache, x):  # pragma: no cover - compiled
    """The float x as an element of array `cache`: float32 for a float32 cache, the bits of the
    nearest float16 (ties to even) for a uint16 one (see `cache_bits`). O(1)"""
    if not isinstance(cache, types.Array) or cache.dtype not in (types.float32, types.uint16):
        return None
    if not isinstance(x, types.Float):
        return None

    def codegen(context, builder, signature, args):
        value = context.cast(builder, args[1], signature.args[1], types.float32)
        if not _is_bits(signature.args[0]):
            return value
        return builder.bitcast(builder.fptrunc(value, _F16), ir.IntType(16))

    return cache.dtype(cache, x), codegen


def _vector_codegen_helpers(context, builder, signature, args):
    """The pieces `_scores16` and `_weighted16` build their IR from: a pointer to the data of
    array argument i (float, or half for uint16 bits), vector loads at a flat offset (half
    vectors widened to float32 in registers: `fpext`, F16C's `vcvtph2ps`), scalar addresses,
    the fma of LLVM."""
    i64 = ir.IntType(64)

    def pointer(index):
        array = context.make_array(signature.args[index])(context, builder, args[index])
        element = _F16 if _is_bits(signature.args[index]) else _F32
        return builder.bitcast(array.data, element.as_pointer())

    def address(base, offset, extra=0):
        return builder.gep(base, [builder.add(offset, ir.Constant(i64, extra))])

    def load_vector(base, offset, extra=0):
        element = base.type.pointee
        kind = ir.VectorType(element, _BLOCK)
        where = builder.bitcast(address(base, offset, extra), kind.as_pointer())
        vector = builder.load(where, align=2 if element == _F16 else 4)
        return vector if element == _F32 else builder.fpext(vector, _VECTOR)

    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_VECTOR, [_VECTOR] * 3), "llvm.fma.v16f32"
    )
    return pointer, address, load_vector, fma


def _float_arrays(*arrays, cache) -> bool:
    """Whether every Numba type given is a C-contiguous float32 array, and `cache` (the keys or
    values) one of float32 or of float16 bits (uint16): the intrinsics' typing."""
    return all(
        isinstance(a, types.Array) and a.dtype == types.float32 and a.layout == "C" for a in arrays
    ) and (
        isinstance(cache, types.Array)
        and cache.dtype in (types.float32, types.uint16)
        and cache.layout == "C"
    )


POSITIONAL_WIDTHS = (64, 128, 256)
"""The head widths whose rows attend in positional order (the module docstring): blocks of 16
keys by `_scores16` / `_weighted16`, compiled for each width (SmolLM2 and Llama 3.2 64, Qwen3 and
Mistral 128, Gemma 3 256). Other widths take the general path."""


def _literals(rows, width) -> tuple[int, int] | None:
    """The literal row count and head width an intrinsic is compiled for, or None (not literal,
    or not a supported pair: 1 or 2 rows, a width of `POSITIONAL_WIDTHS`)."""
    if not isinstance(rows, types.IntegerLiteral) or not isinstance(width, types.IntegerLiteral):
        return None
    if rows.literal_value not in (1, 2) or width.literal_value not in POSITIONAL_WIDTHS:
        return None
    return rows.literal_value, width.literal_value


@intrinsic
def _scores16(
    typingctx, queries, q_start, keys, k_start, scores, s_start, s_stride, rows, width
):  # pragma: no cover
    """scores[s_start + i s_stride + l] = queries[q_start + i width: +width] .
    keys[k_start + width l: +width] for l < 16 and each of `rows` consecutive query rows i:
    16 keys of width `width` (both literals: `_literals`) against 1 or 2 query rows (flat
    offsets into C-contiguous float32 arrays, not bounds-checked). Each key's products go into
    one vector of 16 partial sums (width / 16 fmas in order); the 16 vectors are then summed
    across their lanes together, a tree of 15 pairwise steps (two shuffles and an add each)
    that leaves key l's sum in lane l: half the shuffles of one horizontal sum per key; each
    pair is summed as soon as both halves exist, so at most 5 vectors a row wait. Each key
    chunk is loaded once for the rows, and each row's operations are the same, in the same order
    (no fast-math flags: LLVM keeps them), whether it goes alone or with another: its scores
    are the same bit for bit. Plain LLVM vector IR. O(rows 16 width)

    keys may be float16 bits (uint16, `cache_bits`): each 16-element chunk is loaded as half
    and widened to float32 in registers."""
    literal = _literals(rows, width)
    if literal is None or not _float_arrays(queries, scores, cache=keys):
        return None
    n_rows, size = literal
    chunks = size // 16

    def codegen(context, builder, signature, args):
        pointer, _, load_vector, fma = _vector_codegen_helpers(context, builder, signature, args)
        q_p, k_p, s_p = pointer(0), pointer(2), pointer(4)
        q = [
            [load_vector(q_p, args[1], size * i + 16 * c) for c in range(chunks)]
            for i in range(n_rows)
        ]
        even = ir.Constant(ir.VectorType(ir.IntType(32), _BLOCK), list(range(0, 32, 2)))
        odd = ir.Constant(ir.VectorType(ir.IntType(32), _BLOCK), list(range(1, 32, 2)))
        stacks: list[list[tuple[int, ir.Value]]] = [[] for _ in range(n_rows)]  # (level, vector)
        for key in range(_BLOCK):
            keyed = [load_vector(k_p, args[3], size * key + 16 * c) for c in range(chunks)]
            for i in range(n_rows):
                total = builder.fmul(q[i][0], keyed[0])
                for c in range(1, chunks):
                    total = builder.call(fma, [q[i][c], keyed[c], total])
                level, stack = 0, stacks[i]
                while stack and stack[-1][0] == level:  # lanes 0..7: pairs of a's, 8..15: b's
                    _, a = stack.pop()
                    even_lanes = builder.shuffle_vector(a, total, even)
                    total = builder.fadd(even_lanes, builder.shuffle_vector(a, total, odd))
                    level += 1
                stack.append((level, total))
        offset = args[5]
        for i in range(n_rows):
            ((_, sums),) = stacks[i]
            where = builder.bitcast(builder.gep(s_p, [offset]), _VECTOR.as_pointer())
            builder.store(sums, where, align=4)
            offset = builder.add(offset, args[6])
        return context.get_dummy_value()

    signature = types.void(queries, q_start, keys, k_start, scores, s_start, s_stride, rows, width)
    return signature, codegen


@intrinsic
def _weighted16(
    typingctx, out, o_start, weights, w_start, values, v_start, w_stride, rows, width
):  # pragma: no cover
    """out[o_start + i width: +width] += sum over l < 16 of weights[w_start + i w_stride + l]
    values[v_start + width l: +width], for each of `rows` consecutive output rows i (rows,
    width literals: `_literals`): 16 value rows weighted into each output row held in registers
    (two sets of accumulators, so that no fma waits on the one before), loaded and stored once
    (flat offsets into C-contiguous float32 arrays, not bounds-checked; values may be float16
    bits, uint16, widened in registers as in `_scores16`). Each value chunk is loaded once for
    the rows, and each row's operations are the same in the same order whether it goes alone
    or with another. Plain LLVM vector IR. O(rows 16 width)"""
    literal = _literals(rows, width)
    if literal is None or not _float_arrays(out, weights, cache=values):
        return None
    n_rows, size = literal
    chunks = size // 16

    def codegen(context, builder, signature, args):
        pointer, address, load_vector, fma = _vector_codegen_helpers(
            context, builder, signature, args
        )
        o_p, w_p, v_p = pointer(0), pointer(2), pointer(4)
        w_starts = [args[3]]
        for _ in range(n_rows - 1):
            w_starts.append(builder.add(w_starts[-1], args[6]))
        zero = ir.Constant(_VECTOR, [0.0] * _BLOCK)
        sums = [
            [[load_vector(o_p, args[1], size * i + 16 * c) for c in range(chunks)], [zero] * chunks]
            for i in range(n_rows)
        ]
        lane0 = ir.Constant(ir.VectorType(ir.IntType(32), _BLOCK), [0] * _BLOCK)
        for row in range(_BLOCK):
            valued = [load_vector(v_p, args[5], size * row + 16 * c) for c in range(chunks)]
            for i in range(n_rows):
                weight = builder.load(address(w_p, w_starts[i], row), align=4)
                single = builder.insert_element(
                    ir.Constant(_VECTOR, None), weight, ir.Constant(ir.IntType(32), 0)
                )
                splat = builder.shuffle_vector(single, ir.Constant(_VECTOR, None), lane0)
                part = sums[i][row % 2]
                for c in range(chunks):
                    part[c] = builder.call(fma, [splat, valued[c], part[c]])
        for i in range(n_rows):
            for c in range(chunks):
                where = address(o_p, args[1], size * i + 16 * c)
                where = builder.bitcast(where, _VECTOR.as_pointer())
                builder.store(builder.fadd(sums[i][0][c], sums[i][1][c]), where, align=4)
        return context.get_dummy_value()

    signature = types.void(out, o_start, weights, w_start, values, v_start, w_stride, rows, width)
    return signature, codegen


@numba.njit(cache=True, inline="always")
def _prefetch_row(key_run, value_run, row, length, width):  # pragma: no cover - compiled
    """Prefetch row `row` of the task's stream: keys 0..length-1, then values 0..length-1
    (key_run, value_run: the flat `[T hd]` runs). Rows past both runs are skipped. O(hd)"""
    if row < length:
        for i in range(0, width, 16):  # one 64-byte cache line per 16 floats
            prefetch_l2(key_run, row * width + i)
    elif row < 2 * length:
        for i in range(0, width, 16):
            prefetch_l2(value_run, (row - length) * width + i)


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _dot4(queries, r, rows, t, width):  # pragma: no cover - compiled
    """(queries[r] . rows[t], ..., queries[r] . rows[t + 3]) over the first `width` floats
    (float32 [., >= width] each): four independent chains of FMAs and horizontal sums, which
    the CPU overlaps. Indexed in place, with no row views: a view made in the loop costs an
    atomic reference count increment and decrement, per key. Inlined: called with the literal
    64, LLVM unrolls the loop whole (no remainder, no loop set-up per key), as it does not for
    a width known only at run time. O(width)"""
    a0 = a1 = a2 = a3 = np.float32(0.0)
    for i in range(width):
        x = queries[r, i]
        a0 += x * _widen(rows[t, i])
        a1 += x * _widen(rows[t + 1, i])
        a2 += x * _widen(rows[t + 2, i])
        a3 += x * _widen(rows[t + 3, i])
    return a0, a1, a2, a3


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _axpy4(acc, r, rows, t, w0, w1, w2, w3, width):  # pragma: no cover - compiled
    """acc[r] += w0 rows[t] + w1 rows[t + 1] + w2 rows[t + 2] + w3 rows[t + 3] over the first
    `width` floats (float32 [., >= width]): one load and store of acc[r] for four FMAs per
    float, in place as `_dot4`. O(width)"""
    for i in range(width):
        acc[r, i] += (
            w0 * _widen(rows[t, i])
            + w1 * _widen(rows[t + 1, i])
            + w2 * _widen(rows[t + 2, i])
            + w3 * _widen(rows[t + 3, i])
        )


@numba.njit(cache=True, inline="always")
def _prefetch_block(run, t, length, width):  # pragma: no cover - compiled
    """Fetch into L2 the rows of the next block of 16 `_PREFETCH_ROWS` ahead of row t in a
    flat `[T hd]` run (keys or values), those below `length`. O(16 hd / 16)"""
    for u in range(t + _PREFETCH_ROWS, min(t + _PREFETCH_ROWS + _BLOCK, length)):
        for i in range(0, width, 16):
            prefetch_l2(run, u * width + i)


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _positional_scores(
    queries, key_run, key_rows, scores, start, group, origin, width
):  # pragma: no cover - compiled
    """The scores of `_attend`'s rows in positional order, for a head width of
    `POSITIONAL_WIDTHS` (a literal here, inlined into `_attend` under its test): each block of
    16 keys from `origin` on for every row that sees it whole (`_scores16`, two rows a call
    where the task holds several tokens: half the key loads, the same sums; a decode task's
    rows go one at a time, which read a stream from memory faster), then each row's own last
    0..15 keys four at a time (`_dot4`), then one at a time. Returns the task's length (no key
    left for the general path). O(rows (start + n) width)"""
    n_rows = queries.shape[0]
    length = start + n_rows // group
    paired = n_rows > group and width <= 128  # 256: two rows' queries would fill the registers
    t = origin
    while t + _BLOCK <= length:  # keys t..t+15, for every row that sees all 16
        if width > 128:  # rows of 512 bytes (float16) and more: fetched _PREFETCH_ROWS ahead
            _prefetch_block(key_run, t, length, width)
        r = max(0, t + _BLOCK - 1 - start) * group
        if paired:
            while r + 2 <= n_rows:
                _scores16(queries, r * width, key_run, t * width, scores, r * length + t,
                          length, 2, width)  # fmt: skip
                r += 2
        while r < n_rows:
            _scores16(queries, r * width, key_run, t * width, scores, r * length + t, length, 1,
                      width)  # fmt: skip
            r += 1
        t += _BLOCK
    for r in range(n_rows):  # each row's last seen % 16 keys: 4 at a time, then 1
        seen = start + r // group + 1
        u = seen // _BLOCK * _BLOCK
        while u + 4 <= seen:
            a0, a1, a2, a3 = _dot4(queries, r, key_rows, u, width)
            base = r * length + u
            scores[base], scores[base + 1] = a0, a1
            scores[base + 2], scores[base + 3] = a2, a3
            u += 4
        while u < seen:
            total = np.float32(0.0)
            for i in range(width):
                total += queries[r, i] * _widen(key_rows[u, i])
            scores[r * length + u] = total
            u += 1
    return length


@numba.njit(cache=True, fastmath=_FASTMATH, inline="always")
def _positional_values(
    scores, value_run, value_rows, attended, start, group, origin, width
):  # pragma: no cover - compiled
    """The weighted sums of `_attend`'s rows in positional order, as `_positional_scores`
    makes the scores: blocks of 16 values each row sees whole (`_weighted16`), then its own
    last 0..15 four at a time (`_axpy4`), then one at a time. Returns the task's length.
    O(rows (start + n) width)"""
    n_rows = attended.shape[0]
    length = start + n_rows // group
    paired = n_rows > group and width <= 128
    t = origin
    while t + _BLOCK <= length:
        if width > 128:
            _prefetch_block(value_run, t, length, width)
        r = max(0, t + _BLOCK - 1 - start) * group
        if paired:
            while r + 2 <= n_rows:
                _weighted16(attended, r * width, scores, r * length + t, value_run, t * width,
                            length, 2, width)  # fmt: skip
                r += 2
        while r < n_rows:
            _weighted16(attended, r * width, scores, r * length + t, value_run, t * width,
                        length, 1, width)  # fmt: skip
            r += 1
        t += _BLOCK
    for r in range(n_rows):
        seen = start + r // group + 1
        u = seen // _BLOCK * _BLOCK
        while u + 4 <= seen:
            base = r * length + u
            w0, w1, w2, w3 = scores[base], scores[base + 1], scores[base + 2], scores[base + 3]
            _axpy4(attended, r, value_rows, u, w0, w1, w2, w3, width)
            u += 4
        while u < seen:
            weight = scores[r * length + u]
            for i in range(width):
                attended[r, i] += weight * _widen(value_rows[u, i])
            u += 1
    return length


@numba.njit(cache=True, fastmath=_FASTMATH)
def _attend(q, keys, values, slot, start, first, n, head, heads, out, window):  # pragma: no cover
    """One task of `ragged_attention`: query heads `heads` = (g0, g1) of the G that share
    key/value head `head` (query heads head G + g0 .. head G + g1 - 1; (0, G): all of them), of
    the n rows first..first+n-1, row first + j over positions 0..start+j of slot `slot` (the
    last `window` of them when window > 0).
    O((g1 - g0) n (start + n) hd)

    Each query row's sums run in the same order whichever heads share its task. The task's
    R = (g1 - g0) n query rows are copied into one `[R, hd]` block; row r = j G + g is query
    head g of row j. With hd in `POSITIONAL_WIDTHS`, scores take 16 keys at a time
    (`_scores16`), the weighted sum 16 values at a time (`_weighted16`), each block read once
    for all the rows that see it whole (from L1 after the first); each row's own last 0..15 keys
    go four at a time (`_dot4`, `_axpy4`), then one at a time (positional order, the module
    docstring; `_positional_scores`, `_positional_values`). Every key of other widths goes four
    at a time for all the rows that see it, then one at a time, the stream fetched
    `_PREFETCH_ROWS` rows ahead. The rows that see none of the keys at hand are skipped, and
    scores past a row's own position are zeroed after the softmax, so a row's output depends
    on no key past its position (the values there, the segment's own new tokens, are
    multiplied by zero). The sums run in the same order whatever the other tasks of the call:
    a row's output does not depend on how its batch is made up. With a sliding window the
    loops over keys and values start at the block of 16 holding the first row's first key
    (the blocks before it would add exact zeros), and a row's scores before its window are
    zeroed with those past its position.
    """
    group = heads[1] - heads[0]  # the task's query heads
    width = q.shape[2]
    first_head = head * (q.shape[1] // keys.shape[1]) + heads[0]
    length = start + n
    n_rows = n * group
    queries = np.empty((n_rows, width), np.float32)
    for j in range(n):
        for g in range(group):
            for i in range(width):
                queries[j * group + g, i] = q[first + j, first_head + g, i]
    key_rows = keys[slot, head]  # [T, hd], in place
    value_rows = values[slot, head]
    key_run = key_rows.reshape(-1)  # [T hd], for the prefetches
    value_run = value_rows.reshape(-1)
    scores = np.empty(n_rows * length, np.float32)  # row r's at r length ..
    origin = max(0, start - window + 1) // _BLOCK * _BLOCK if window > 0 else 0
    if width == 64:  # each score made as the row's own position alone decides
        t = _positional_scores(queries, key_run, key_rows, scores, start, group, origin, 64)
    elif width == 128:
        t = _positional_scores(queries, key_run, key_rows, scores, start, group, origin, 128)
    elif width == 256:
        t = _positional_scores(queries, key_run, key_rows, scores, start, group, origin, 256)
    else:
        t = origin
    while t + 4 <= length:  # keys t..t+3, each read once for every row that sees t
        for u in range(t, t + 4):
            _prefetch_row(key_run, value_run, u + _PREFETCH_ROWS, length, width)
        for r in range(max(0, t - start) * group, n_rows):  # rows j >= t - start see t
            a0, a1, a2, a3 = _dot4(queries, r, key_rows, t, width)
            base = r * length + t
            scores[base] = a0  # t + 1.. may lie past row r's position: zeroed below
            scores[base + 1] = a1
            scores[base + 2] = a2
            scores[base + 3] = a3
        t += 4
    for u in range(t, length):  # the last 0..3 keys (in cache already: fetched ahead)
        for r in range(max(0, u - start) * group, n_rows):
            total = np.float32(0.0)
            for i in range(width):
                total += queries[r, i] * _widen(key_rows[u, i])
            scores[r * length + u] = total
    lanes = np.empty(_LANES, np.float32)
    for r in range(n_rows):
        seen = start + r // group + 1
        low = max(0, seen - window) if window > 0 else 0
        row = scores[r * length : (r + 1) * length]
        _softmax_(row[low:seen], lanes)
        row[:low] = 0.0
        row[seen:] = 0.0
    attended = np.zeros((n_rows, width), np.float32)  # local: no aliasing with `values`
    end = length * width
    if width == 64:  # as the scores: blocks of 16 a row sees whole, then its own last ones
        t = _positional_values(scores, value_run, value_rows, attended, start, group, origin, 64)
    elif width == 128:
        t = _positional_values(scores, value_run, value_rows, attended, start, group, origin, 128)
    elif width == 256:
        t = _positional_values(scores, value_run, value_rows, attended, start, group, origin, 256)
    else:
        t = origin
    while t + 4 <= length:  # values t..t+3, each read once for every row that sees t
        ahead = (t + _PREFETCH_ROWS) * width
        if ahead + 4 * width <= end:
            for i in range(0, 4 * width, 16):
                prefetch_l2(value_run, ahead + i)
        for r in range(max(0, t - start) * group, n_rows):
            base = r * length + t
            w0, w1, w2, w3 = scores[base], scores[base + 1], scores[base + 2], scores[base + 3]
            _axpy4(attended, r, value_rows, t, w0, w1, w2, w3, width)
        t += 4
    for u in range(t, length):
        for r in range(max(0, u - start) * group, n_rows):
            weight = scores[r * length + u]
            for i in range(width):
                attended[r, i] += weight * _widen(value_rows[u, i])
    for j in range(n):
        for g in range(group):
            for i in range(width):
                out[first + j, first_head + g, i] = attended[j * group + g, i]


def store_rows(k, v, keys, values, slots, positions) -> None:
    """Write the keys and values of N new tokens into one layer's cache: token i's go to slot
    slots[i] at position positions[i], for every key/value head: NumPy's
    `keys[slots, :, positions] = k`, without the cost of its advanced indexing, which a
    decode step pays twice per layer. O(N Hkv hd)

    k, v float32 [N, Hkv, hd] (any strides); keys, values float32 or float16 [S, Hkv, T, hd]
    (written; float16 rounds to nearest even, as NumPy's `astype`); slots, positions int64 [N]
    within 0..S-1 and 0..T-1 (not checked here: the callers derive them from a checked cache).
    """
    _store_rows(k, v, cache_bits(keys), cache_bits(values), slots, positions)


@numba.njit(cache=True)
def _store_rows(k, v, keys, values, slots, positions):  # pragma: no cover - compiled
    """`store_rows` on a cache of float32 or of float16 bits (`cache_bits`)."""
    for i in range(k.shape[0]):
        slot, position = slots[i], positions[i]
        for head in range(k.shape[1]):
            for d in range(k.shape[2]):
                keys[slot, head, position, d] = _narrow(keys, k[i, head, d])
                values[slot, head, position, d] = _narrow(values, v[i, head, d])


def rope_store(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out):
    """From the fused q/k/v projection of N new tokens: RoPE on the queries and keys
    (`kernels.compute.layers.rope`'s rotation), the queries scaled for attention, the keys and
    values written into one layer's cache (as `store_rows`), in one pass. O(N (Hq + Hkv) hd)

    qkv float32 [N, (Hq + 2 Hkv) hd] (any strides: q's heads, then k's, then v's); cos, sin
    float32 [P, hd/2], the angle tables (row positions[i] is token i's); q_heads Hq; scale the
    queries' factor (hd^-1/2, as float32); keys, values float32 or float16 [S, Hkv, T, hd]
    (written at slot slots[i], position positions[i], as `store_rows`); slots, positions int64
    [N] (not checked here: the callers derive them from a checked cache); q_out float32
    [N, Hq, hd] (written).
    Returns q_out. The arithmetic is the separate steps' (`rope`, then q times scale), in the
    same float32 operations, so the results are theirs bit for bit.
    """
    store = _rope_store_parallel if qkv.shape[0] >= PARALLEL_ROWS else _rope_store
    return store(
        qkv, cos, sin, q_heads, scale, cache_bits(keys), cache_bits(values), slots, positions, q_out
    )


@numba.njit(cache=True)
def _rope_store(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out):
    """`rope_store` on a cache of float32 or of float16 bits (`cache_bits`)."""
    for t in range(qkv.shape[0]):
        _rope_store_token(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out, t)
    return q_out


@numba.njit(cache=True, parallel=True)
def _rope_store_parallel(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out):
    """`_rope_store` with the tokens spread over Numba's threads (`prange`; no two tokens share
    a slot and position, so none write the same cache row): the same operations a token."""
    for t in numba.prange(qkv.shape[0]):
        _rope_store_token(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out, t)
    return q_out


@numba.njit(cache=True, inline="always")
def _rope_store_token(
    qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q_out, t
):  # pragma: no cover - compiled
    """Token t of `rope_store`. Inlined into each caller as the same Numba IR. O((Hq + Hkv) hd)"""
    kv_heads, width = keys.shape[1], keys.shape[3]
    half = width // 2
    scale = np.float32(scale)
    slot, position = slots[t], positions[t]
    for h in range(q_heads + kv_heads):
        base = h * width
        for i in range(half):
            x1, x2 = qkv[t, base + i], qkv[t, base + half + i]
            c, s = cos[position, i], sin[position, i]
            first, second = x1 * c - x2 * s, x2 * c + x1 * s
            if h < q_heads:
                q_out[t, h, i] = first * scale
                q_out[t, h, half + i] = second * scale
            else:
                keys[slot, h - q_heads, position, i] = _narrow(keys, first)
                keys[slot, h - q_heads, position, half + i] = _narrow(keys, second)
    base = (q_heads + kv_heads) * width
    for h in range(kv_heads):
        for d in range(width):
            values[slot, h, position, d] = _narrow(values, qkv[t, base + h * width + d])


def ragged_attention(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    segments: np.ndarray,
    out: np.ndarray,
    window: int = 0,
    split: int | None = None,
) -> np.ndarray:
    """Causal attention of the query rows of ragged segments, each over its own cache slot.

    Segment (slot, start, first, n) is n rows, first..first+n-1, of one sequence whose tokens
    sit at positions start..start+n-1 of slot `slot`: for each such row r = first + j and query
    head h, out[r, h] = softmax(q[r, h] . keys[slot, h // G, :start+j+1]) values[same].
    With a sliding `window` w > 0 a row sees only its last w positions, start+j-w+1..start+j
    (Mistral's and Gemma's sliding-window layers; 0, the default, changes nothing).
    Rows of no segment are left as they were. A decode step is B segments of n = 1.
    O(Hq hd sum of n (start + n)), parallel over the (segment, key/value head) pairs, taken by
    Numba's threads one at a time as they free up (a thread that shares its core with another
    process takes fewer); each pair reads its keys and values once. When the pairs are fewer
    than the threads (batch 1 of Gemma 3 270M, one key/value head, on two threads), each
    pair's G query heads are cut into `split` tasks (`query_splits`), each reading the pair's
    keys and values: the threads share the work, and every row's output is the same bit for
    bit (its sums do not depend on which heads share its task).

    q float32 [N, Hq, hd] (already scaled by hd^-1/2); keys, values float32 or float16
    [S, Hkv, T, hd] (one layer's cache, C-contiguous; Hq a multiple of Hkv; float16 is read
    widened to float32 in registers, and the arithmetic is float32 either way);
    segments int64 [M, 4] rows (slot, start, first, n), n >= 1, start + n <= T, slots in
    0..S-1 and row ranges within 0..N-1 (not checked here: the callers,
    `llama.attention_decode` and `llama.attention_prefill`, derive them from a checked cache);
    the values at positions start..start+n-1 finite (a segment's own new tokens: a row weighs
    those past its position by zero); out float32 [N, Hq, hd] (written); split: the tasks a
    pair's query heads are cut into, 1..G (None: `query_splits`). Returns out.
    """
    keys, values = cache_bits(keys), cache_bits(values)
    claimed = np.zeros(1, np.int64)  # the first task not taken yet
    workers = numba.config.NUMBA_NUM_THREADS
    group = q.shape[1] // keys.shape[1]
    if split is None:
        split = query_splits(len(segments) * keys.shape[1], group, workers)
    elif not 1 <= split <= group:
        raise ValueError(f"split must be within 1..{group} (the query heads a key head has)")
    return _ragged_attention(
        q, keys, values, segments, out, claimed, workers, int(window), int(split)
    )


def query_splits(pairs: int, group: int, workers: int) -> int:
    """How many tasks each (segment, key/value head) pair's `group` query heads are cut into:
    1 when the pairs are at least the `workers`, else a task a worker, at most `group` (one
    query head a task). Measured alone on 2 threads (Zen 4, session 19): Gemma 3 270M's one
    pair (4 heads of 256) at batch 1 over 256 / 2048 positions takes 27.6 / 179 us whole,
    18.1 / 115 us in 2 tasks, 22.1 / 158 in 4; SmolLM2's 3 pairs 11.0 / 65.9 us whole,
    11.5 / 72.3 in 6 tasks (each task reads the pair's keys again)."""
    if pairs >= workers:
        return 1
    return max(1, min(group, workers // max(pairs, 1)))


@numba.njit(cache=True, parallel=True, fastmath=_FASTMATH)
def _ragged_attention(
    q, keys, values, segments, out, claimed, workers, window, split
):  # pragma: no cover
    """`ragged_attention`'s parallel loop over the (segment, key/value head, part of the query
    heads) tasks, taken one at a time from the counter `claimed` (int64 [1], 0:
    `kernels.claim`) by `workers` loops (Numba's thread count at most: loops beyond the threads
    in use find nothing left; asking Numba how many are in use takes its locks)."""
    kv_heads = keys.shape[1]
    group = q.shape[1] // kv_heads
    n_tasks = segments.shape[0] * kv_heads * split
    for _ in numba.prange(workers):
        task = claim(claimed)
        while task < n_tasks:
            pair, part = task // split, task % split
            segment, head = pair // kv_heads, pair % kv_heads
            slot, start, first, n = segments[segment]
            heads = (part * group // split, (part + 1) * group // split)
            _attend(q, keys, values, slot, start, first, n, head, heads, out, window)
            task = claim(claimed)
    return out

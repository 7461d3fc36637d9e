"""Matrix products of block-quantized weights with int8-quantized activations, in integer SIMD
(docs/design.md section 6; the activation blocks are ggml's Q8_1, `quantize_row_q8_1` in
`ggml-quants.c`, and the integer dot products llama.cpp's `ggml_vec_dot_q4_1_q8_1`).

Each row of x is cut into blocks of 32 and each block stored as int8 with a float32 scale
(`quantize_rows`): x_q = round(x / d), d = max |x| / 127. A weight block (Q4_1: w = s q + m,
q in 0..15; Q8_0: w = s q, q in -128..127) then meets an activation block as one integer dot
product sum(q x_q) and one float multiply-add:

    Q4_1: s d sum(q x_q) + m d sum(x_q)            Q8_0: s d sum(q x_q)

so the products equal the float32 products of the dequantized weights with the dequantized
activations (d x_q), up to float32 rounding. One such part (llama.cpp's choice) rounds each
value by up to half a step d; x can be quantized in several parts, each the Q8_1 of what the
parts before leave over, whose products are added: each part divides the error by 254 at the
cost of one more row of integer work (`int8_matmul`'s `parts`).

The integer dot products are AVX-512 VNNI's `vpdpbusd` (64 unsigned-by-signed byte products
summed into 16 int32 lanes by one instruction), called as LLVM's intrinsic from Numba
(`_block_product`), so that the instruction is there whatever LLVM's vectorizer would
make of a loop. Its left operand is unsigned: the Q4_1 nibbles are, and the Q8_0 weights are
stored offset by 128 (q + 128, a flip of the sign bit), 128 d sum(x_q) being taken off per
block (a negative `x_terms` with the scales as coefficients).

The weights are laid out in "word tiles" (`word_tiles`): output rows in tiles of `tile` rows
(a multiple of 16), and for each tile, block and group of 16 rows the 16 rows' bytes four at a
time, so that one 64-byte load holds 4 bytes (4 consecutive k) of each of 16 rows, one int32
lane of `vpdpbusd` each:

    uint8 [n_tiles, k/32, tile/16, W, 16, 4]   (W = 4 words of nibbles for Q4_1: byte j holds
                                                elements j and j + 16; W = 8 for Q8_0)

`paired_matmul`, the kernel of the "int8-vnni" plan, takes x quantized otherwise: in two int8
parts on one scale, as `quant_amx` does (x = d (R x_1 + x_2)), the parts combined in int32 before
one float epilogue per block, and 8 rows of x a weight load with their totals in registers over
all of k: per token, block and 16 output rows, 16 `vpdpbusd` and some 7 other instructions where
`int8_matmul` in two Q8_1 parts took some 23 others (docs/numerics.md, "int8 activations on
VNNI"). `int8_matmul` stays for its `parts` (one part is llama.cpp's choice).

`paired_matmul` also takes the word forms of GGUF's K-quants rewritten (`word_tiles.FIVE`:
Q5_0's nibbles and fifth bits, each put in bit 4 of its byte; `HALVES`: Q6_K's Q8_0 bytes with
a scale per half block, each half summed and offset apart; Q4_K and Q4_0 are Q4_1's nibbles),
x quantized with the ratio 254 for all but Q4_1 (docs/numerics.md, "K-quants on the same
kernels").

`available()` tells whether the kernels run here (avx512bw and avx512vnni, and a product that
compiles and checks); where they do not, the callers use the float32-activation kernels of
`kernels.compute.quant`.
"""

from __future__ import annotations

import functools

import llvmlite.binding as llvm
import numba
import numpy as np
from corral.kernels.compute.quant_amx import (
    ROWS,
    SUPER6,
    SUPER_FORMS,
    WORDS,
    X_ROW,
    _quantized,
    _quantized_wide,
    _row_halves_matmul,
    _row_matmul,
    _times_ratio,
    emit_paired_super,
    form_of,
    form_operands,
    ratio_of,
)
from corral.kernels.compute.word_tiles import (
    BLOCK,
    BYTES,
    FIVE,
    HALVES,
    LANES,
    NIBBLES,
    word_tiles,
)
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@functools.cache
def available() -> bool:
    """Whether the kernels run here: the host CPU has AVX-512 BW and VNNI, and a small product
    compiles and comes out right (False, say, under an llvmlite whose IR builder lacks what the
    intrinsics use). The first call compiles `int8_matmul` unless Numba's cache holds it."""
    features = llvm.get_host_cpu_features()
    if not (features.get("avx512vnni") and features.get("avx512bw")):
        return False
    quants = (np.arange(16 * BLOCK) % 255 - 127).astype(np.int8).reshape(16, BLOCK)
    scales = np.ones((1, 1, 16), np.float32)
    x = np.ones((1, BLOCK), np.float32)  # quantized exactly: x_q = 127, d = 1/127
    try:
        words = word_tiles(quants, "Q8_0", 1, 16)
        out = int8_matmul(x, 1, scales, scales, words, np.zeros((1, 16), np.float32))
    except Exception:  # any failure to compile or run: the float32-activation kernels serve
        return False
    return bool(np.allclose(out[0], quants.sum(axis=1, dtype=np.int64), rtol=1e-5, atol=1e-3))


@numba.njit(cache=True)
def _quantize_block(values, x_q, left):  # pragma: no cover - compiled
    """One block (ggml's Q8_1): values float32 [32] -> x_q int8 [32] (written), left float32
    [32] (written: values - d x_q); returns (d, d sum(x_q))."""
    largest = np.float32(0.0)
    for j in range(BLOCK):
        largest = max(largest, abs(values[j]))
    d = largest / np.float32(127.0)
    inverse = np.float32(1.0) / d if d > 0 else np.float32(0.0)
    total = 0
    for j in range(BLOCK):
        q = np.int32(np.rint(values[j] * inverse))
        x_q[j] = q
        left[j] = values[j] - d * np.float32(q)
        total += q
    return d, d * np.float32(total)


@numba.njit(cache=True)
def quantize_rows(x, parts, x_q, x_scales, x_sums):  # pragma: no cover - compiled
    """Quantize each row of x by blocks of 32 to int8 (ggml's Q8_1), in `parts` parts: the
    first is x's Q8_1, each next one the Q8_1 of what the parts before leave over, so that
    x = d_1 x_q1 + d_2 x_q2 + ... to about 254^-(parts - 1) / 2 of each block's Q8_1 step
    (the leftover of a part is at most half its step, and the next part's step 127 times
    smaller than that).  O(parts B k).

    x float32 [B, k]; parts >= 1; x_q int8 [R, k], x_scales float32 [R, k/32] and x_sums
    float32 [R, k/32], R >= parts B, are written in rows parts b + p for part p of row b:
    d = max |v| / 127 over the block of the values v quantized, x_q = round(v / d) (0 where
    d = 0), x_sums = d sum(x_q), the sum of the block's dequantized values (Q8_1's s).
    """
    batch, k = x.shape
    values = np.empty(BLOCK, np.float32)
    left = np.empty(BLOCK, np.float32)
    for b in range(batch):
        for block in range(k // BLOCK):
            columns = slice(block * BLOCK, (block + 1) * BLOCK)
            values[:] = x[b, columns]
            for part in range(parts):
                row = parts * b + part
                d, total = _quantize_block(values, x_q[row, columns], left)
                x_scales[row, block], x_sums[row, block] = d, total
                values[:] = left


GROUPS = (1, 2, 4, 8)
"""The rows of x (parts) one intrinsic call takes."""

PRODUCTS = tuple((nibbles, group) for nibbles in (True, False) for group in GROUPS)
"""`_block_product`'s dispatch table: (Q4_1 `nibbles`, rows of x `group`)."""


def _emit_block_product(context, builder, arg_types, args, nibbles, group):
    """Emit, at the builder's position, one block of 16 weight rows times `group` rows of x
    added to float totals (`_block_product`'s contract; `args` and `arg_types` its arguments
    after the two keys); `nibbles`: Q4_1's 4 words of nibbles a block, else Q8_0's 8 words."""
    words_per_block = 4 if nibbles else 8
    i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, fvec = ir.VectorType(i32, LANES), ir.VectorType(f32, LANES)
    splits = max(1, 8 // group)  # independent accumulators a row: vpdpbusd's latency is 5

    def pointer(index, element):  # the data of array argument `index`
        array = context.make_array(arg_types[index])(context, builder, args[index])
        return builder.bitcast(array.data, element.as_pointer())

    def load(base, offset, element):  # element (a scalar or vector) at base[offset]
        address = builder.bitcast(builder.gep(base, [offset]), element.as_pointer())
        return builder.load(address, align=1, typ=element)

    def offset(start, stride, i, extra=0):  # start + stride i + extra
        step = builder.mul(stride, ir.Constant(i64, i))
        return builder.add(builder.add(start, step), ir.Constant(i64, extra))

    def splat(value, vector):  # value in every lane
        single = builder.insert_element(ir.Constant(vector, None), value, i32(0))
        return builder.shuffle_vector(single, ir.Constant(vector, None), vec([0] * LANES))

    words_p, x_p = pointer(0, i8), pointer(2, i8)
    x_scales_p, x_terms_p = pointer(5, f32), pointer(6, f32)
    scales_p, coefs_p, total_p = pointer(9, f32), pointer(10, f32), pointer(12, f32)
    w_start, x_start, x_stride, xs_start, xs_stride = (args[i] for i in (1, 3, 4, 7, 8))
    sc_start, total_start, total_stride = args[11], args[13], args[14]
    dpbusd = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(vec, [vec, vec, vec]),
        "llvm.x86.avx512.vpdpbusd.512",
    )
    accs = [[vec([0] * LANES)] * splits for _ in range(group)]
    step = 0
    for index in range(words_per_block):
        w = load(words_p, builder.add(w_start, i64(64 * index)), vec)
        parts = [(w, 4 * index)]
        if nibbles:  # low nibbles: elements j; high nibbles: elements j + 16
            low = builder.and_(w, vec([0x0F0F0F0F] * LANES))
            high = builder.and_(builder.lshr(w, vec([4] * LANES)), vec([0x0F0F0F0F] * LANES))
            parts = [(low, 4 * index), (high, BLOCK // 2 + 4 * index)]
        for operand, column in parts:
            for i in range(group):
                x_word = splat(load(x_p, offset(x_start, x_stride, i, column), i32), vec)
                slot = step % splits
                accs[i][slot] = builder.call(dpbusd, [accs[i][slot], operand, x_word])
            step += 1
    scale = load(scales_p, sc_start, fvec)
    coef = load(coefs_p, sc_start, fvec)
    for i in range(group):
        acc = accs[i][0]
        for other in accs[i][1:]:
            acc = builder.add(acc, other)
        where = offset(xs_start, xs_stride, i)
        d = splat(load(x_scales_p, where, f32), fvec)
        term = splat(load(x_terms_p, where, f32), fvec)
        address = builder.gep(total_p, [offset(total_start, total_stride, i)])
        address = builder.bitcast(address, fvec.as_pointer())
        value = builder.load(address, align=4, typ=fvec)
        product = builder.fmul(builder.fmul(builder.sitofp(acc, fvec), d), scale)
        value = builder.fadd(builder.fadd(value, product), builder.fmul(coef, term))
        builder.store(value, address, align=4)


@intrinsic
def _block_product(
    typingctx,
    nibbles,
    group,
    words,
    w_start,
    x_q,
    x_start,
    x_stride,
    x_scales,
    x_terms,
    xs_start,
    xs_stride,
    scales,
    coefs,
    sc_start,
    total,
    total_start,
    total_stride,
):  # pragma: no cover - compiled
    """One block of 16 weight rows times `group` rows of x added to float totals, the variant
    chosen by a switch over the table `PRODUCTS` (another (nibbles, group) adds nothing):

        _block_product(nibbles, group, words, w_start, x_q, x_start, x_stride, x_scales,
                       x_terms, xs_start, xs_stride, scales, coefs, sc_start, total,
                       total_start, total_stride)

    adds, for row i < group of x and lane r < 16,

        total[total_start + i total_stride + r] += scales[sc_start + r] d_i sum(q[r] x_q[i])
                                                   + coefs[sc_start + r] term_i

    where the sum runs over the block (`vpdpbusd`, exact in int32), the 16 rows' quants start
    at byte w_start of words (word tiles: Q4_1 (`nibbles`) 4 words, each byte elements j and
    j + 16; Q8_0 8 words), row i's block of x_q at byte x_start + i x_stride, and d_i, term_i
    = x_scales, x_terms [xs_start + i xs_stride]. Flat offsets into C-contiguous arrays;
    nothing is bounds-checked (the caller's loops stay in range).
    """
    arrays = (words, x_q, x_scales, x_terms, scales, coefs, total)
    wanted = (types.uint8, types.int8) + (types.float32,) * 5
    if any(
        not isinstance(a, types.Array) or a.dtype != d for a, d in zip(arrays, wanted, strict=True)
    ):
        return None  # a typing error: these dtypes only
    rest = (words, w_start, x_q, x_start, x_stride, x_scales, x_terms, xs_start, xs_stride)
    sig = types.void(nibbles, group, *rest, scales, coefs, sc_start, total, total_start,
                     total_stride)  # fmt: skip

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        flag = builder.zext(args[0], i64) if args[0].type != i64 else args[0]
        rows = context.cast(builder, args[1], signature.args[1], types.int64)
        done = builder.append_basic_block("product_done")
        switch = builder.switch(builder.or_(builder.shl(flag, i64(8)), rows), done)
        for nibbles_, group_ in PRODUCTS:
            case = builder.append_basic_block(f"product_{int(nibbles_)}_{group_}")
            switch.add_case(i64((int(nibbles_) << 8) | group_), case)
            builder.position_at_end(case)
            _emit_block_product(context, builder, signature.args[2:], args[2:], nibbles_, group_)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True)
def _tile_products(
    x_q, x_scales, x_terms, scales, coefs, words, t, first, total
):  # pragma: no cover
    """total [G, tile] = rows first..first+G-1 of x times tile t of W (`int8_matmul`'s
    arguments), G = total.shape[0] in `GROUPS`.  O(G tile k)."""
    k = x_q.shape[1]
    _, n_blocks, tile = scales.shape
    group = total.shape[0]
    lane_groups = tile // LANES
    chunk = words.shape[3] * LANES * 4  # bytes of one block of 16 rows
    nibbles = words.shape[3] == 4
    total[:] = 0.0
    for block in range(n_blocks):
        x_start, xs_start = first * k + block * BLOCK, first * n_blocks + block
        for g in range(lane_groups):
            start = ((t * n_blocks + block) * lane_groups + g) * chunk
            at = (t * n_blocks + block) * tile + g * LANES
            _block_product(nibbles, group, words, start, x_q, x_start, k, x_scales, x_terms,
                           xs_start, n_blocks, scales, coefs, at, total, g * LANES,
                           tile)  # fmt: skip


@numba.njit(cache=True, parallel=True)
def int8_matmul(x, parts, scales, coefs, words, out):  # pragma: no cover - compiled
    """out = x W^T for W in word tiles, x quantized in `parts` int8 parts (`quantize_rows`)
    whose products are added.  O(parts B n_out k) integer multiply-adds, O(parts B n_out k
    / 32) float ones; W is read once per group of 2, 4 or 8 rows of parts.

    x float32 [B, k]; parts >= 1; scales float32 [n_tiles, k/32, tile]; coefs: the minimums
    (Q4_1, float32 [n_tiles, k/32, tile]) or the scales again (Q8_0, whose stored quants are
    q + 128: 128 d sum(x_q) is taken off each block); words uint8 [n_tiles, k/32, tile/16, W,
    16, 4] (W = 4: Q4_1 nibbles; W = 8: Q8_0 bytes); out float32 [B, n_out] (written, n_out
    <= n_tiles tile).
    """
    batch, k = x.shape
    n_out = out.shape[1]
    n_tiles, n_blocks, tile = scales.shape
    used = parts * batch
    group = 8 if used > 4 else (4 if used > 2 else (2 if used > 1 else 1))
    rows = used + (-used) % group  # zero rows pad the last group
    x_q = np.zeros((rows, k), np.int8)
    x_scales = np.zeros((rows, n_blocks), np.float32)
    x_terms = np.zeros((rows, n_blocks), np.float32)
    quantize_rows(x, parts, x_q, x_scales, x_terms)
    if words.shape[3] != 4:
        x_terms *= np.float32(-128.0)
    for t in numba.prange(n_tiles):
        total = np.empty((group, tile), np.float32)
        start, end = t * tile, min((t + 1) * tile, n_out)
        out[:, start:end] = 0.0
        for first in range(0, rows, group):
            _tile_products(x_q, x_scales, x_terms, scales, coefs, words, t, first, total)
            for i in range(min(group, used - first)):
                token = (first + i) // parts
                for r in range(end - start):
                    out[token, start + r] += total[i, r]
    return out


PAIRED_GROUP = 8
"""The most rows of x one `_paired_product` call takes: each keeps a vector of sums a row for
the block (two for Q8_0, one a part) and the row's total over all blocks in registers, 24 of
AVX-512's 32 for Q8_0 at 8 rows (more rows spill them to memory)."""


def _emit_paired_product(context, builder, arg_types, args, form, group):
    """Emit, at the builder's position, `group` rows of x (two int8 parts on one scale) times 16
    output rows over every block of k in word format `form`, the totals kept in vector
    registers and stored at the end (`_paired_product`'s contract; `args` and `arg_types` its
    arguments after the keys)."""
    i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, fvec = ir.VectorType(i32, LANES), ir.VectorType(f32, LANES)
    nibbles = form == NIBBLES
    terms_float = form in (NIBBLES, FIVE)
    words_per_block = WORDS[form]

    def pointer(index, element):  # the data of array argument `index`
        array = context.make_array(arg_types[index])(context, builder, args[index])
        return builder.bitcast(array.data, element.as_pointer())

    def load(base, offset, element, align=1):  # element (a scalar or vector) at base[offset]
        address = builder.bitcast(builder.gep(base, [offset]), element.as_pointer())
        return builder.load(address, align=align, typ=element)

    def splat(value, vector):  # value in every lane
        single = builder.insert_element(ir.Constant(vector, None), value, i32(0))
        return builder.shuffle_vector(single, ir.Constant(vector, None), vec([0] * LANES))

    words_p, x_p = pointer(0, i8), pointer(3, i8)
    x_scales_p, x_terms_p = pointer(5, f32), pointer(6, f32 if terms_float else i32)
    scales_p, coefs_p, total_p = pointer(9, f32), pointer(10, f32), pointer(13, f32)
    w_start, step, x_start, xs_start = args[1], args[2], args[4], args[7]
    n_blocks, sc_start, sc_step = args[8], args[11], args[12]
    dpbusd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vec, [vec, vec, vec]), "llvm.x86.avx512.vpdpbusd.512"
    )
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(fvec, [fvec] * 3), "llvm.fma.v16f32"
    )
    chains = 1 if nibbles else 2  # Q4_1: 16 S_1 + S_2 in one sum; else S_1 and S_2 apart
    splits = max(1, 8 // (group * chains))  # independent sums in flight: vpdpbusd's latency
    entry = builder.block
    loop = builder.append_basic_block("blocks")
    done = builder.append_basic_block("blocks_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    block = builder.phi(i64)
    block.add_incoming(i64(0), entry)
    totals = [builder.phi(fvec) for _ in range(group)]
    for phi in totals:
        phi.add_incoming(ir.Constant(fvec, [0.0] * LANES), entry)
    w_at = builder.add(w_start, builder.mul(block, step))
    x_at = builder.add(x_start, builder.mul(block, i64(LANES * X_ROW)))
    sc_at = builder.add(sc_start, builder.mul(block, sc_step))
    # block j of the next 16 output rows (its words, scales, coefs) into L1, as `quant_amx`'s
    # group product does: a call reads 16 rows' blocks a step apart, as many streams as the
    # tile has blocks of 16 rows, more than the hardware prefetchers follow from memory
    prefetch = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i32, i32, i32]),
        "llvm.prefetch.p0",
    )
    for line in range(0, 64 * words_per_block, 64):
        ahead = builder.add(w_at, i64(64 * words_per_block + line))
        builder.call(prefetch, [builder.gep(words_p, [ahead]), i32(0), i32(3), i32(1)])
    for base in (scales_p, coefs_p):
        address = builder.gep(base, [builder.add(sc_at, i64(LANES))])
        builder.call(prefetch, [builder.bitcast(address, i8.as_pointer()), i32(0), i32(3), i32(1)])
    fifth = load(words_p, builder.add(w_at, i64(64 * 4)), vec) if form == FIVE else None
    where = [builder.add(builder.add(xs_start, builder.mul(n_blocks, i64(i))), block)
             for i in range(group)]  # fmt: skip
    following = list(totals)
    # HALVES: words 0-3 (columns 0-15) by the scales, then 4-7 (16-31) by the coefs
    sections = [(range(4 if terms_float else 8), scales_p)]
    if form == HALVES:
        sections = [(range(4), scales_p), (range(4, 8), coefs_p)]
    for h, (indices, scale_p) in enumerate(sections):
        sums = [[[vec([0] * LANES)] * splits for _ in range(chains)] for _ in range(group)]
        turn = 0
        for index in indices:
            word = load(words_p, builder.add(w_at, i64(64 * index)), vec)
            column = 4 * index
            if nibbles:  # 16 q against x_1 and q against x_2: 16 S_1 + S_2 (16 q a byte)
                low, high = vec([0x0F0F0F0F] * LANES), vec([-0x0F0F0F10] * LANES)  # 0xF0F0F0F0
                right = builder.lshr(word, vec([4] * LANES))
                operands = [
                    (builder.and_(builder.shl(word, vec([4] * LANES)), high), column, 0),
                    (builder.and_(word, low), column, 1),
                    (builder.and_(word, high), BLOCK // 2 + column, 0),
                    (builder.and_(right, low), BLOCK // 2 + column, 1),
                ]
            else:  # each operand against both parts, apart
                operands = [(operand, at, part)
                            for operand, at in form_operands(builder, form, word, index, fifth)
                            for part in (0, 1)]  # fmt: skip
            for operand, at, part in operands:
                chain = 0 if nibbles else part
                slot = turn % splits
                for i in range(group):
                    offset = builder.add(x_at, i64(X_ROW * i + BLOCK * part + at))
                    x_word = splat(load(x_p, offset, i32), vec)
                    sums[i][chain][slot] = builder.call(
                        dpbusd, [sums[i][chain][slot], operand, x_word]
                    )
                turn += 1
        s = load(scale_p, sc_at, fvec, 4)
        for i in range(group):
            parts = []
            for chain in sums[i]:
                total = chain[0]
                for other in chain[1:]:
                    total = builder.add(total, other)
                parts.append(total)
            if nibbles:
                combined = parts[0]
            else:  # 254 S_1 + S_2 (Q8_0: less 128 sum(254 x_1 + x_2) for the stored q + 128)
                combined = builder.add(_times_ratio(builder, parts[0], ratio_of(False)), parts[1])
            if not terms_float:
                at = where[i]
                if form == HALVES:
                    at = builder.add(builder.mul(at, i64(2)), i64(h))
                combined = builder.sub(combined, splat(load(x_terms_p, at, i32, 4), vec))
            d = load(x_scales_p, where[i], f32, 4)
            ds = builder.fmul(splat(d, fvec), s)
            following[i] = builder.call(fma, [builder.sitofp(combined, fvec), ds, following[i]])
    if terms_float:  # Q4_1, FIVE: the minimums times the block's sum of x
        c = load(coefs_p, sc_at, fvec, 4)
        for i in range(group):
            term = load(x_terms_p, where[i], f32, 4)
            following[i] = builder.call(fma, [c, splat(term, fvec), following[i]])
    next_block = builder.add(block, i64(1))
    block.add_incoming(next_block, builder.block)
    for phi, value in zip(totals, following, strict=True):
        phi.add_incoming(value, builder.block)
    builder.cbranch(builder.icmp_signed("<", next_block, n_blocks), loop, done)
    builder.position_at_end(done)
    total_start, total_stride = args[14], args[15]
    for i, value in enumerate(following):
        at = builder.add(total_start, builder.mul(total_stride, i64(i)))
        address = builder.bitcast(builder.gep(total_p, [at]), fvec.as_pointer())
        builder.store(value, address, align=4)


PAIRED = tuple((form, group) for form in (NIBBLES, BYTES, HALVES, FIVE, *SUPER_FORMS)
               for group in (1, 2, 4, PAIRED_GROUP))  # fmt: skip
"""`_paired_product`'s dispatch table: (word format `form`, rows of x `group`)."""


@intrinsic
def _paired_product(
    typingctx,
    form,
    group,
    words,
    w_start,
    step,
    x_q,
    x_start,
    x_scales,
    x_terms,
    x_offsets,
    xs_start,
    n_blocks,
    scales,
    coefs,
    sc_start,
    sc_step,
    total,
    total_start,
    total_stride,
):  # pragma: no cover - compiled
    """`group` (1, 2, 4 or `PAIRED_GROUP`) rows of x in two int8 parts on one scale
    (`quant_amx.quantize_rows`) times 16 output rows in word format `form`
    (`word_tiles.NIBBLES`, `BYTES`, `HALVES`, `FIVE`), over all n_blocks blocks of k, the
    variant chosen by a switch over the table `PAIRED` (another (form, group) writes nothing):

        _paired_product(form, group, words, w_start, step, x_q, x_start, x_scales, x_terms,
                        x_offsets, xs_start, n_blocks, scales, coefs, sc_start, sc_step, total,
                        total_start, total_stride)

    writes total[total_start + i total_stride + r], for row i < group and lane r < 16, as
    `quant_amx`'s one-row VNNI product of the same form sums it (the same integer sums, the
    same float operations in the same order, so the same value bit for bit): for each block j
    in order,

        NIBBLES, FIVE: total = fma(c_r, term, fma(float(S), d s_r, total))
        BYTES:         total = fma(float(S - offset), d s_r, total)
        HALVES:        total = fma(float(S_h - offset_h), d c'_r, total), h = 0 then 1 (c' = s, c)

    S = 16 S_1 + S_2 (NIBBLES) or 254 S_1 + S_2 (the others; HALVES S_h over half h's 16
    columns), from `vpdpbusd`. Block j's 16 rows' quants start at byte w_start + j step of
    words (`quant_amx.WORDS[form]` words); row i's block j of x_q (64 bytes: x_1, then x_2) at
    byte x_start + 64 i + 1024 j; d, term and offset at x_scales, x_terms (float32: d
    sum(ratio x_1 + x_2)), x_offsets (int32: 128 sum(254 x_1 + x_2), the stored quants'
    offset) [xs_start + n_blocks i + j] (HALVES: offset_h at x_offsets[2 (xs_start + n_blocks
    i + j) + h]); s_r, c_r at scales, coefs[sc_start + j sc_step + r]. Flat offsets into
    C-contiguous arrays; nothing is bounds-checked (the caller's loops stay in range).
    """
    arrays = (words, x_q, x_scales, x_terms, x_offsets, scales, coefs, total)
    wanted = (types.uint8, types.int8, types.float32, types.float32, types.int32)
    wanted += (types.float32,) * 3
    if any(
        not isinstance(a, types.Array) or a.dtype != d for a, d in zip(arrays, wanted, strict=True)
    ):
        return None  # a typing error: these dtypes only
    sig = types.void(form, group, words, w_start, step, x_q, x_start, x_scales, x_terms,
                     x_offsets, xs_start, n_blocks, scales, coefs, sc_start, sc_step, total,
                     total_start, total_stride)  # fmt: skip

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        form_, rows = (context.cast(builder, args[i], signature.args[i], types.int64)
                       for i in (0, 1))  # fmt: skip
        done = builder.append_basic_block("paired_done")
        switch = builder.switch(builder.or_(builder.shl(form_, i64(8)), rows), done)
        for form_key, group_ in PAIRED:
            case = builder.append_basic_block(f"paired_{form_key}_{group_}")
            switch.add_case(i64((form_key << 8) | group_), case)
            builder.position_at_end(case)
            if form_key in SUPER_FORMS:  # quant_amx's super-block K-quants
                emit_paired_super(context, builder, signature.args[2:], args[2:], form_key,
                                  group_)  # fmt: skip
                builder.branch(done)
                continue
            terms = 8 if form_key in (NIBBLES, FIVE) else 9  # x_terms or x_offsets
            chosen = [i for i in range(2, 19) if i not in (8, 9) or i == terms]
            inner = [signature.args[i] for i in chosen]
            _emit_paired_product(context, builder, inner, [args[i] for i in chosen], form_key,
                                 group_)  # fmt: skip
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, parallel=True)
def _paired_kernel(x, scales, coefs, words, out, halves):  # pragma: no cover - compiled
    """`paired_matmul` for x of two rows or more, words in format `form_of(words, halves)`."""
    batch, k = x.shape
    n_tiles, n_blocks, tile = scales.shape
    n_out = out.shape[1]
    lane_groups = tile // LANES
    rows = batch + (-batch) % ROWS  # zero rows pad x's last group of 16
    form = form_of(words, halves)
    if form == SUPER6:  # x as one int16 a column (`quant_amx.six_wide`)
        x_q, x_scales, x_terms, x_offsets = _quantized_wide(x, rows // ROWS, rows)
    else:
        x_q, x_scales, x_terms, x_offsets = _quantized(x, rows // ROWS, rows, form)
    flat_words, flat_x = words.reshape(-1), x_q.reshape(-1)
    flat_xs, flat_terms, flat_offsets = (
        x_scales.reshape(-1),
        x_terms.reshape(-1),
        x_offsets.reshape(-1),
    )
    flat_scales, flat_coefs = scales.reshape(-1), coefs.reshape(-1)
    chunk = LANES * 4 * words.shape[3]  # bytes of one block of 16 output rows
    step = lane_groups * chunk  # bytes of one block of the whole tile
    group = PAIRED_GROUP
    while group // 2 >= batch:
        group //= 2
    flat_out = out.reshape(-1)
    for t in numba.prange(n_tiles):
        totals = np.empty(group * LANES, np.float32)
        groups = min(lane_groups, -(-(n_out - t * tile) // LANES))  # those with output rows
        for first in range(0, batch, group):
            x_start = ((first // ROWS) * (k // BLOCK) * ROWS + first % ROWS) * X_ROW
            for g in range(groups):
                w_start = (t * n_blocks * lane_groups + g) * chunk
                sc_start = t * n_blocks * tile + g * LANES
                w_args = (flat_words, w_start, step, flat_x, x_start, flat_xs)
                s_args = (first * n_blocks, n_blocks, flat_scales, flat_coefs, sc_start, tile)
                column = t * tile + g * LANES
                if first + group <= batch and column + LANES <= n_out:  # straight into out
                    _paired_product(form, group, *w_args, flat_terms, flat_offsets, *s_args,
                                    flat_out, first * n_out + column, n_out)  # fmt: skip
                    continue
                _paired_product(form, group, *w_args, flat_terms, flat_offsets, *s_args, totals,
                                0, LANES)  # fmt: skip
                for i in range(min(group, batch - first)):  # no views: each one costs
                    for r in range(min(LANES, n_out - column)):  # two atomic reference-count
                        out[first + i, column + r] = totals[i * LANES + r]  # updates
    return out


@numba.njit(cache=True)
def _paired_matmul(x, scales, coefs, words, out):  # pragma: no cover - compiled
    """`paired_matmul` for x of two rows or more (words not `HALVES`)."""
    return _paired_kernel(x, scales, coefs, words, out, False)


@numba.njit(cache=True)
def _paired_halves_matmul(x, scales, coefs, words, out):  # pragma: no cover - compiled
    """`paired_matmul` for x of two rows or more, words `HALVES`."""
    return _paired_kernel(x, scales, coefs, words, out, True)


def paired_matmul(x, scales, coefs, words, out, halves: bool = False):
    """out = x W^T for W in word tiles, x quantized by blocks in two int8 parts on one scale
    (`quant_amx.quantize_rows`: d = max |v| / (127 R), x_1 = round(v / (R d)), x_2 the
    leftover's round(. / d), R = 16 for Q4_1 weights and Q4_K's super blocks, 127 for Q6_K's
    (`quant_amx.SIX_RATIO`), 254 for the other formats), the integer
    sums in AVX-512 VNNI: one row by `quant_amx`'s one-row kernel, several by
    `_paired_product`, up to `PAIRED_GROUP` rows of x a load of the weights with each row's
    totals in registers over k, with the same integer sums and float operations, so a row's
    result is the same bit for bit whatever rows share its call (and, for Q4_1 and Q8_0, the
    same as on AMX, `quant_amx.amx_matmul`). O(B n_out k) multiply-adds in `vpdpbusd` (two a
    weight and row: one a part), O(B n_out k / 32) float ones; W read once per group of rows
    (from cache after the first).

    x float32 [B, k] (C-contiguous, k a multiple of 32); scales float32 [n_tiles, k/32, tile];
    coefs float32 [n_tiles, k/32, tile]: the minimums (Q4_1, Q5_0), the scales again (Q8_0,
    stored q + 128) or the second halves' scales (`halves`); words uint8 [n_tiles, k/32,
    tile/16, W, 16, 4] (`word_tiles`' formats: W = 4: Q4_1 nibbles; W = 5: `FIVE`, Q4_1's
    nibbles and a word of fifth bits; W = 8: Q8_0 bytes, `HALVES` where `halves`, scales the
    first halves'); out float32 [B, n_out] (C-contiguous; written, n_out <= n_tiles tile).
    Unchecked (a caller's arrays are right by construction, `corral.model.quant.TiledMatrix`);
    needs `available()`. Returns out.
    """
    if x.shape[0] == 1:
        kernel = _row_halves_matmul if halves else _row_matmul
        return kernel(x, scales, coefs, words, out)
    if halves:
        return _paired_halves_matmul(x, scales, coefs, words, out)
    return _paired_matmul(x, scales, coefs, words, out)


KERNELS = (_paired_matmul, _row_matmul)
"""The compiled kernels behind `paired_matmul` (for `corral.kernels.jit_cache`)."""

HALVES_KERNELS = (_paired_halves_matmul, _row_halves_matmul)
"""The compiled kernels behind `paired_matmul(..., halves=True)` (Q6_K rewritten)."""

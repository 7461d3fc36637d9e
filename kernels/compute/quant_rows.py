"""Matrix products of block-quantized weights (Q4_1, Q8_0 in `quant_int8.word_tiles`) with
several rows of float32 activations: each weight is unpacked once in registers for a group of
up to 16 rows of x whose sums stay in registers, as a GEMM micro-kernel (docs/numerics.md,
"Products of several rows"). A row's products are the same bit for bit whatever rows share its
pass and whatever the vector width (`WIDTHS`): per block, one chain of fused multiply-adds over
its 32 columns, then

    Q4_1: total += scale * sum_j q_j x_j + minimum * sum_j x_j
    Q8_0: total += scale * sum_j q_j x_j

with `kernels.compute.quant`'s float32 formulas; and Q8_0's words with a scale per 16 columns
(`HALVES`: GGUF's Q6_K rewritten, `kquant_layout.as_blocks`), two chains a block, each of 16
columns: total += scale * sum_{j<16} q_j x_j, then total += scale' * sum_{j>=16} q_j x_j.
"""

from __future__ import annotations

import numba
import numpy as np
from corral.kernels.compute.quant import block_sums
from corral.kernels.compute.word_tiles import BYTES, FIVE, HALVES, NIBBLES
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

BLOCK = 32
"""Weights per quantization block (Q4_1 and Q8_0)."""

WORDS_PER_TURN = 2
"""The 64-byte words of quants one turn of an intrinsic's loop unpacks (Q4_1 has 4 a block, Q8_0
8): a longer turn computes faster, but a fully unrolled block of 16 rows (512 multiply-adds)
takes LLVM far longer to compile."""

LANES = 16
"""Output rows of one block of word tiles (16 float32 lanes of a 512-bit vector)."""

GROUPS = (1, 2, 4, 8, 16)
"""The rows of x one intrinsic call takes (each a power of 2, the last the largest): 16 sums
and 2 unpacked columns fill 18 of the 32 vector registers of AVX-512."""

CHAINS = 8
"""Independent sums an intrinsic call keeps in flight (an fma's latency is 4 cycles, two issue
a cycle): a group of G rows of x takes `CHAINS / G` blocks of 16 output rows side by side
(`spans`), each row and output row one sum, so that a row's sums are the same whatever group it
is in."""

WIDTHS = (16, 8)
"""The vector widths (lanes) the kernels come in: 16, for AVX-512's 32 registers of 512 bits; 8,
for AVX2's 16 registers of 256 bits, where a 16-lane vector takes two registers and a group's
sums spill to memory at every multiply-add, so the 16 output rows of a block are taken in two
passes of 8 lanes (the same operations in each lane, so the same results bit for bit). Which
one a model uses is its `corral.kernels.compute.plan.ComputePlan`'s `lanes`."""


def largest_group(lanes: int) -> int:
    """The most rows of x one intrinsic call takes in vectors of `lanes`: 16 with 16 lanes, 8
    with 8, whose sums (8 vectors of 8 lanes) fit AVX2's 16 registers (docs/numerics.md)."""
    return 16 if lanes == LANES else 8


def spans(group: int) -> tuple[int, ...]:
    """The numbers of blocks of 16 output rows an intrinsic call for `group` rows of x takes
    side by side, largest first (powers of 2 down to 1, the largest `CHAINS / group`)."""
    largest = max(1, CHAINS // group)
    return tuple(1 << i for i in reversed(range(largest.bit_length())))


PRODUCTS = {
    width: tuple(
        (form, group, span)
        for form in (NIBBLES, BYTES, HALVES, FIVE)
        for group in GROUPS
        if group <= largest_group(width)
        for span in spans(group)
    )
    for width in WIDTHS
}
"""`_block_product`'s dispatch table, by vector width: (word format `NIBBLES`, `BYTES` or
`HALVES`, rows of x `group`, blocks of 16 output rows side by side `span`), every combination
`_tile_products` asks for."""


def _emit_block_product(context, builder, arg_types, args, width, form, group, span):
    """Emit, at the builder's position, one block of `span` x 16 weight rows times `group` rows of
    x added to float totals in vectors of `width` lanes (`_block_product`'s contract; `args` and
    `arg_types` its arguments after the four keys).

    For row i < group of x and lane r < 16 span it adds

        total[total_start + i total_stride + r] += scales[sc_start + r] sum_j(q[r, j] x[i, j])
                                                   + minimums[sc_start + r] x_sums[i]

    (the second term for Q4_1 only, `nibbles`), the sum running over the block's 32 columns in
    float32 in one order whatever `group`, `span` and `width` (a chain of fused multiply-adds
    from 0, the columns as the words hold them: Q4_1's word w gives columns 4w, 4w + 16, 4w + 1,
    ..., Q8_0's 4w .. 4w + 3), then added to the total by fused multiply-adds (the scale's, then
    the minimum's): a row's results depend on that row of x alone, and a Q8_0 row's are
    `kernels.compute.quant.q8_0_chosen_rows`'s (the masked LM head). `form` is the words'
    format (`NIBBLES` for Q4_1, `BYTES` for Q8_0, `HALVES`: Q8_0's bytes in two chains of 16
    columns, each added to the total by its own scale, the first half's from `scales`, the
    second's from `minimums`, no minimum term).
    """
    nibbles, halves, five = form in (NIBBLES, FIVE), form == HALVES, form == FIVE
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, fvec = ir.VectorType(i32, width), ir.VectorType(f32, width)
    n_words = BLOCK // 8 if nibbles else BLOCK // 4
    per_block = LANES // width  # vectors of one block of 16 output rows
    vectors = span * per_block
    per_pass = max(1, min(vectors, CHAINS // group))  # vectors one loop over the words takes

    def pointer(index, element):  # the data of array argument `index`
        array = context.make_array(arg_types[index])(context, builder, args[index])
        return builder.bitcast(array.data, element.as_pointer())

    def load(base, offset, element, align):  # element (scalar or vector) at base[offset]
        address = builder.bitcast(builder.gep(base, [offset]), element.as_pointer())
        return builder.load(address, align=align, typ=element)

    def offset(start, stride, i, extra=0):  # start + stride i + extra
        step = builder.mul(stride, ir.Constant(i64, i))
        return builder.add(builder.add(start, step), ir.Constant(i64, extra))

    def splat(value):  # a float in every lane
        single = builder.insert_element(ir.Constant(fvec, None), value, i32(0))
        return builder.shuffle_vector(single, ir.Constant(fvec, None), vec([0] * width))

    def lanes(value):  # an int32 constant in every lane
        return vec([value] * width)

    words_p, x_p, x_sums_p = pointer(0, ir.IntType(8)), pointer(3, f32), pointer(6, f32)
    scales_p, minimums_p, total_p = pointer(9, f32), pointer(10, f32), pointer(12, f32)
    w_start, chunk, x_start, x_stride = args[1], args[2], args[4], args[5]
    xs_start, xs_stride, sc_start = args[7], args[8], args[11]
    total_start, total_stride = args[13], args[14]
    x_rows = [
        builder.gep(x_p, [offset(x_start, x_stride, i)]) for i in range(group)
    ]  # row i's block of x
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(fvec, [fvec] * 3), f"llvm.fma.v{width}f32"
    )

    def vector_start(v):  # the byte of vector v's first word: its block, then its lanes
        block = builder.mul(chunk, i64(v // per_block))
        return builder.add(builder.add(w_start, block), i64(4 * width * (v % per_block)))

    def fifth_bit(fifth, word_index, column):  # (bit 4 w + column of fifth) << 4, lane by lane
        shift = builder.trunc(builder.add(builder.mul(word_index, i64(4)), i64(column)), i32)
        shifts = builder.insert_element(ir.Constant(vec, None), shift, i32(0))
        shifts = builder.shuffle_vector(shifts, ir.Constant(vec, None), vec([0] * width))
        return builder.and_(builder.shl(builder.lshr(fifth, shifts), lanes(4)), lanes(16))

    def unpack(word, fifth=None, word_index=None):  # int32 vectors of a word's columns' quants,
        # in `columns`' order (FIVE: each with its fifth bit from `fifth`)
        quants = []
        if nibbles:  # byte b: low nibble column 4 word + b, high nibble 16 more
            for b in range(4):
                low = builder.lshr(word, lanes(8 * b)) if b else word
                low = builder.and_(low, lanes(15))
                high = builder.lshr(word, lanes(8 * b + 4))
                high = builder.and_(high, lanes(15)) if b < 3 else high
                if five:
                    low = builder.or_(low, fifth_bit(fifth, word_index, b))
                    high = builder.or_(high, fifth_bit(fifth, word_index, b + BLOCK // 2))
                quants += [low, high]
        else:  # byte b holds q + 128: flip the sign bit back, then sign-extend
            signed = builder.xor(word, lanes(-0x7F7F7F80))  # 0x80808080
            for b in range(4):
                shifted = builder.shl(signed, lanes(24 - 8 * b)) if b < 3 else signed
                quants.append(builder.ashr(shifted, lanes(24)))
        return quants

    def columns(word_index):  # the block's columns word `word_index` holds, in order
        first = builder.mul(word_index, i64(4))
        out = []
        for b in range(4):
            out.append(builder.add(first, i64(b)))
            if nibbles:
                out.append(builder.add(first, i64(b + BLOCK // 2)))
        return out

    def block_pass(first_vector, count, first_turn, turns, scale_p):
        # vectors first_vector .. + count - 1, words of turns first_turn .. + turns - 1, the
        # chains' sums added to the totals by the scales at scale_p
        # one loop turn a word (a real loop, not unrolled: LLVM's time to compile a block
        # of 512 multiply-adds grew past a minute), the sums carried in phi nodes
        starts = [vector_start(first_vector + v) for v in range(count)]
        fifths = [load(words_p, builder.add(s, i64(4 * 64)), vec, 1) if five else None
                  for s in starts]  # fmt: skip
        entry = builder.block
        loop = builder.append_basic_block("words")
        done = builder.append_basic_block("words_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        index = builder.phi(i64)
        index.add_incoming(i64(0), entry)
        zero = ir.Constant(fvec, [0.0] * width)
        phis = [[builder.phi(fvec) for _ in range(count)] for _ in range(group)]
        for row in phis:
            for phi in row:
                phi.add_incoming(zero, entry)
        accs = [list(row) for row in phis]
        turn = builder.add(index, i64(first_turn))
        first_word = builder.mul(turn, i64(WORDS_PER_TURN))
        for turn_word in range(WORDS_PER_TURN):
            word_index = builder.add(first_word, i64(turn_word))
            at = builder.mul(word_index, i64(64))
            unpacked = [
                unpack(load(words_p, builder.add(s, at), vec, 1), fifth, word_index)
                for s, fifth in zip(starts, fifths, strict=True)
            ]
            for c, column in enumerate(columns(word_index)):
                x_values = [splat(load(x_rows[i], column, f32, 4)) for i in range(group)]
                for v in range(count):
                    weights = builder.sitofp(unpacked[v][c], fvec)
                    for i in range(group):
                        accs[i][v] = builder.call(fma, [weights, x_values[i], accs[i][v]])
        following = builder.add(index, i64(1))
        index.add_incoming(following, builder.block)
        for row, values in zip(phis, accs, strict=True):
            for phi, value in zip(row, values, strict=True):
                phi.add_incoming(value, builder.block)
        builder.cbranch(builder.icmp_unsigned("<", following, i64(turns)), loop, done)
        builder.position_at_end(done)
        for v in range(count):
            lane = builder.add(sc_start, i64(width * (first_vector + v)))
            scale = load(scale_p, lane, fvec, 4)
            minimum = load(minimums_p, lane, fvec, 4) if nibbles else None
            for i in range(group):
                at = offset(total_start, total_stride, i, width * (first_vector + v))
                address = builder.gep(total_p, [at])
                address = builder.bitcast(address, fvec.as_pointer())
                value = builder.load(address, align=4, typ=fvec)
                value = builder.call(fma, [scale, accs[i][v], value])
                if nibbles:
                    where = offset(xs_start, xs_stride, i)
                    x_sum = splat(load(x_sums_p, where, f32, 4))
                    value = builder.call(fma, [minimum, x_sum, value])
                builder.store(value, address, align=4)

    turns = n_words // WORDS_PER_TURN
    for first in range(0, vectors, per_pass):
        count = min(per_pass, vectors - first)
        if halves:  # columns 0-15 (words 0-3), then 16-31, each half its own scales
            block_pass(first, count, 0, turns // 2, scales_p)
            block_pass(first, count, turns // 2, turns // 2, minimums_p)
        else:
            block_pass(first, count, 0, turns, scales_p)


def _product_key(form: int, group: int, span: int) -> int:
    """The switch key of a `PRODUCTS` entry (`_block_product` computes it in IR alike)."""
    return (int(form) << 16) | (group << 8) | span


@intrinsic
def _block_product(
    typingctx,
    lanes,
    nibbles,
    group,
    span,
    words,
    w_start,
    chunk,
    x,
    x_start,
    x_stride,
    x_sums,
    xs_start,
    xs_stride,
    scales,
    minimums,
    sc_start,
    total,
    total_start,
    total_stride,
):  # pragma: no cover - compiled
    """One block of `span` x 16 weight rows times `group` rows of x added to float totals
    (`_emit_block_product`), the variant chosen by a switch over the table `PRODUCTS`:

        _block_product(lanes, form, group, span, words, w_start, chunk, x, x_start, x_stride,
                       x_sums, xs_start, xs_stride, scales, minimums, sc_start, total,
                       total_start, total_stride)

    `lanes`, a literal 16 or 8, is the vectors' width; (form, group, span) one of
    `PRODUCTS[lanes]` (another adds nothing). Output rows 16 s .. 16 s + 15 have their quants
    at byte w_start + s chunk of words (4 words of nibbles for Q4_1, 8 of bytes stored as
    q + 128 for Q8_0), row i's block of x is at x[x_start + i x_stride], its block sum at
    x_sums[xs_start + i xs_stride]. Flat offsets into C-contiguous arrays; nothing is
    bounds-checked (the caller's loops stay in range).
    """
    if not isinstance(lanes, types.IntegerLiteral) or lanes.literal_value not in WIDTHS:
        return None  # a typing error: the width is a literal, one of WIDTHS
    arrays = (words, x, x_sums, scales, minimums, total)
    wanted = (types.uint8,) + (types.float32,) * 5
    if any(
        not isinstance(a, types.Array) or a.dtype != d or a.layout != "C"
        for a, d in zip(arrays, wanted, strict=True)
    ):
        return None  # a typing error: C-contiguous arrays of these dtypes only
    width = lanes.literal_value
    rest = (words, w_start, chunk, x, x_start, x_stride, x_sums, xs_start, xs_stride, scales)
    sig = types.void(lanes, nibbles, group, span, *rest, minimums, sc_start, total, total_start,
                     total_stride)  # fmt: skip

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        flag = builder.zext(args[1], i64) if args[1].type != i64 else args[1]
        group_, span_ = (context.cast(builder, args[i], signature.args[i], types.int64)
                         for i in (2, 3))  # fmt: skip
        key = builder.or_(builder.shl(flag, i64(16)), builder.shl(group_, i64(8)))
        done = builder.append_basic_block("product_done")
        switch = builder.switch(builder.or_(key, span_), done)
        for entry in PRODUCTS[width]:
            case = builder.append_basic_block("product_{}_{}_{}".format(*entry))
            switch.add_case(i64(_product_key(*entry)), case)
            builder.position_at_end(case)
            _emit_block_product(context, builder, signature.args[4:], args[4:], width, *entry)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True)
def _tile_products(
    x, x_sums, scales, minimums, words, t, first, total, lanes, halves
):  # pragma: no cover
    """total [G, tile] = rows first..first+G-1 of x times tile t of W (`float_matmul`'s
    arguments), G = total.shape[0] in `GROUPS`, the tile's blocks of 16 output rows taken
    `CHAINS / G` at a time (`spans`, the rest in fewer), in vectors of `lanes` (a literal);
    Q8_0's words in the `HALVES` format where `halves`. O(G tile k)."""
    k = x.shape[1]
    _, n_blocks, tile = scales.shape
    group = total.shape[0]
    lane_groups = tile // LANES
    chunk = words.shape[3] * LANES * 4  # bytes of one block of 16 rows
    form = NIBBLES if words.shape[3] == 4 else (FIVE if words.shape[3] == 5 else BYTES)
    if halves:
        form = HALVES
    largest = max(1, CHAINS // group)
    total[:] = 0.0
    for block in range(n_blocks):  # the words in memory order
        x_start, xs_start = first * k + block * BLOCK, first * n_blocks + block
        g = 0
        while g < lane_groups:
            span = largest
            while span > lane_groups - g:
                span //= 2
            start = ((t * n_blocks + block) * lane_groups + g) * chunk
            at = (t * n_blocks + block) * tile + g * LANES
            _block_product(lanes, form, group, span, words, start, chunk, x, x_start, k,
                           x_sums, xs_start, n_blocks, scales, minimums, at, total, g * LANES,
                           tile)  # fmt: skip
            g += span


@numba.njit(cache=True, parallel=True)
def _float_matmul(x, scales, minimums, words, out, lanes, halves):  # pragma: no cover - compiled
    """`float_matmul` in vectors of `lanes` (a literal: `WIDTHS`), in the `HALVES` format
    where `halves`."""
    batch = x.shape[0]
    n_out = out.shape[1]
    n_tiles, _, tile = scales.shape
    largest = 16 if lanes == LANES else 8  # largest_group(lanes)
    sums = block_sums(x)
    for t in numba.prange(n_tiles):
        totals = np.empty((largest, tile), np.float32)
        start, end = t * tile, min((t + 1) * tile, n_out)
        first = 0
        while first < batch:
            group = largest
            while group > batch - first:
                group //= 2
            total = totals[:group]
            _tile_products(x, sums, scales, minimums, words, t, first, total, lanes, halves)
            for i in range(group):
                out[first + i, start:end] = total[i, : end - start]
            first += group
    return out


@numba.njit(cache=True)
def _float_matmul_16(x, scales, minimums, words, out):  # pragma: no cover - compiled
    return _float_matmul(x, scales, minimums, words, out, 16, False)


@numba.njit(cache=True)
def _float_matmul_8(x, scales, minimums, words, out):  # pragma: no cover - compiled
    return _float_matmul(x, scales, minimums, words, out, 8, False)


@numba.njit(cache=True)
def _halves_matmul_16(x, scales, minimums, words, out):  # pragma: no cover - compiled
    return _float_matmul(x, scales, minimums, words, out, 16, True)


@numba.njit(cache=True)
def _halves_matmul_8(x, scales, minimums, words, out):  # pragma: no cover - compiled
    return _float_matmul(x, scales, minimums, words, out, 8, True)


FLOAT_MATMUL = {16: _float_matmul_16, 8: _float_matmul_8}
"""The compiled `float_matmul` by vector width (`WIDTHS`), for callers that pick it once."""

HALVES_MATMUL = {16: _halves_matmul_16, 8: _halves_matmul_8}
"""The compiled `float_matmul` of Q8_0 words with a scale per half block (`HALVES`: scales
float32 [n_tiles, k/32, tile] the first halves', minimums the second halves'), by width."""


def float_matmul(x, scales, minimums, words, out, lanes: int = LANES):
    """out = x W^T for W in word tiles and x in float32.  O(B n_out k) float multiply-adds;
    W's bytes read once per group of rows of x (from cache after the first).

    x float32 [B, k] (C-contiguous, k a multiple of 32); scales float32 [n_tiles, k/32, tile];
    minimums float32 [n_tiles, k/32, tile] (Q4_1; for Q8_0 any array of that shape, unread);
    words uint8 [n_tiles, k/32, tile/16, W, 16, 4] (`quant_int8.word_tiles`: W = 4 for Q4_1,
    8 for Q8_0); out float32 [B, n_out] (written, n_out <= n_tiles tile); lanes, the vector
    width (`WIDTHS`: the results are the same bit for bit in either). Returns out.

    The rows go in groups of `largest_group(lanes)`, the rest in one group each of 8, 4, 2 and
    1 where its bits say (13 rows: 8 + 4 + 1), so no row is computed for nothing.

    Raises:
        KeyError: `lanes` is not one of `WIDTHS`.
    """
    return FLOAT_MATMUL[lanes](x, scales, minimums, words, out)

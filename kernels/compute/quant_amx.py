"""Matrix products of block-quantized weights with int8-quantized activations on Intel AMX
tiles (docs/design.md section 6; Intel's Architecture Instruction Set Extensions Programming
Reference, chapter 3, "Intel AMX"; the weight blocks are ggml's, as in `quant_int8`).

AMX adds eight tile registers of up to 16 rows of 64 bytes and `tdpbsud`, which adds to each
int32 element of a 16 x 16 tile C the dot products of a row of A (signed bytes) with a column of
B (unsigned bytes, four consecutive k per 32-bit element), 8,192 multiply-adds in one
instruction:

    C[i][r] += sum_k A[i][k] B[k / 4][4 r + k % 4]

**Activations** (`quantize_rows`). Each block of 32 values v of a row of x is stored as two int8
parts on one scale: d_1 = max |v| / 127, x_1 = round(v / d_1) (ggml's Q8_1), and
x_2 = round((v - d_1 x_1) / d), d = d_1 / R, so that v = d (R x_1 + x_2) to half a step d. The
ratio R is the weights' (`ratio_of`): 254 for Q8_0 (`PART_RATIO`: the leftover is at most d_1 / 2
= 127 d, so x_2 lies in -127..127; the error of `quant_int8`'s two parts, with one scale per
block), 16 for Q4_1 (`NIBBLE_RATIO`: x_2 lies in -8..8), 127 for Q6_K's super blocks
(`SIX_RATIO`, `quantize_rows_by`). A row's block is 64 bytes, x_1 then
x_2, and a tile of 16 rows of a block 1 KB.

**Weights.** The word tiles of `quant_int8.word_tiles` hold, per block and group of 16 output
rows, 4 consecutive bytes of each of the 16 rows in every 64-byte word: a Q8_0 block's 8 words
(stored q + 128, unsigned) are B as they lie, against each part in turn; a Q4_1 block's 4 words
of nibbles become B's 16 rows in L1 just before their tiles load (`_emit_unpack`): 16 q
against x_1 (16 q <= 240 is still a byte) and q against x_2, so that one product over a row's 64
bytes sums both parts.

**One block of 16 rows of x by 16 output rows** (`_group_product`): the tile products give the
exact integer sum S = R sum(q x_1) + sum(q x_2) (Q8_0: two products, S_1 and S_2, combined as
254 S_1 + S_2 in vector registers; Q4_1: one product, 16 S_1 + S_2 in the tile), exact in int32,
and one float multiply-add per row adds the block to its sum kept in a vector register over all
the blocks of k:

    total += float(S) (d s) + c term      (Q4_1: c = m, term = d sum(16 x_1 + x_2);
                                           Q8_0: c = s, term = -128 d sum(254 x_1 + x_2),
                                           which takes off the stored quants' offset)

A row's result depends on that row alone, whatever rows share its tiles: a token's logits are
the same in any pass (prefill whole or in pieces, any batch).

The one-row VNNI kernel (`_row_matmul`, `_row_halves_matmul`) takes, besides Q4_1 and Q8_0,
the word forms of the K-quants rewritten that AMX's kernels do not (`word_tiles.FIVE`,
`HALVES`: `_row_product`), for `quant_int8.paired_matmul`.

The tiles need Linux's grant (`granted()`); each parallel task loads the tile configuration
(`ldtilecfg`, per-thread state) itself and releases the tiles at its end.
"""

from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
import numba
import numpy as np
from corral.kernels.compute.word_tiles import BYTES, FIVE, HALVES, NIBBLES
from corral.kernels.prefetch import prefetch_l2
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

BLOCK = 32
"""Values per activation and weight block."""

ROWS = 16
"""Rows of x (and output rows) one tile product serves."""

PART_RATIO = 254
"""The ratio of a block's first-part scale to its second's (d_1 = 254 d) for Q8_0 weights: the
leftover of the first part, at most half its step, is at most 127 steps of the second."""

NIBBLE_RATIO = 16
"""The same ratio for Q4_1 weights (d_1 = 16 d, the leftover at most 8 steps of the second
part): B holds 16 q (at most 240, still a byte) against the first part and q against the second,
so that one tile product over 64 bytes of a row of A (both parts of one block) sums
16 S_1 + S_2 in one C tile. On SmolLM2 this moved the logits by at most 0.06 from the float32
path's, greedy tokens and the fixed text's log-likelihood as the bar asks (simulated in float64,
`tests/model/test_int8_activations.py` on the kernels); 254 moved them by at most 0.005."""


SIX_RATIO = 127
"""The ratio for Q6_K in its own bytes (`SUPER6`): the leftover at most 64 steps of the second
part, |127 x_1 + x_2| <= 127 * 127 = 16,129, so that a sub-block of 32's two scaled halves sum
exactly in int32 (|sum_h sc_h sum_j (q_j - 32)(127 x_1 + x_2)_j| <= 2 * 128 * 16 * 32 * 16,129
= 2,114,060,288 < 2^31; with 254 the bound is twice that). One bit of x less than 254's: x
within max |x| / 32,258 of its parts, 2^-15 of the block's largest."""


def ratio_of(nibbles: bool) -> int:
    """The parts' ratio for Q4_1 (`nibbles`) or Q8_0 weights."""
    return NIBBLE_RATIO if nibbles else PART_RATIO


PREFETCH_BYTES = 4096
"""How far ahead in the word tiles `row_matmul` asks for the weights (into L2): one row of x
streams the weights from memory, and the hardware prefetchers lose the stream when other
processes share the caches (the float32-activation kernels prefetch likewise,
`kernels.compute.quant.PREFETCH_COLUMNS`). At least `PREFETCH_CHUNKS` blocks of 16 rows ahead."""

PREFETCH_CHUNKS = 4
"""The least distance of `row_matmul`'s prefetch in blocks of 16 output rows: a super block of
16 rows (`SUPER4` 2,304 bytes, `SUPER6` 3,328) is most of `PREFETCH_BYTES`, which left the
stream about one block ahead (docs/numerics.md, "Q6_K's halves in int32")."""

_ARCH_REQ_XCOMP_PERM = 0x1023  # arch/x86/include/uapi/asm/prctl.h
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86-64

_A1, _A2, _B = 4, 5, 6  # tile registers: two activation parts, the weights (C: 0..3)
SCRATCH = (2 * 2048 + 2 * 1024) // 4
"""int32 elements of `_group_product`'s scratch: two slots of two 16 x 16 int32 sums, then
(Q4_1) two slots of one block of B unpacked."""

X_ROW = 2 * BLOCK
"""Bytes of one row's block of x in the tiles: its first part, then its second."""


def _declare(builder, name: str, arguments: list) -> ir.Function:
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), arguments), name
    )


def _splat(builder, value, vector: ir.VectorType):
    """`value` (a scalar of vector's element type) in every lane of a `ROWS`-lane vector."""
    lanes = ir.VectorType(ir.IntType(32), ROWS)
    single = builder.insert_element(ir.Constant(vector, None), value, ir.IntType(32)(0))
    return builder.shuffle_vector(single, ir.Constant(vector, None), lanes([0] * ROWS))


def _times_ratio(builder, value, ratio: int):
    """`ratio` (`PART_RATIO`, `NIBBLE_RATIO` or `SIX_RATIO`) times an int32 vector of `ROWS`
    lanes: 254 v = 256 v - 2 v (two shifts), 127 v = 128 v - v, 16 v one shift."""
    lanes = ir.VectorType(ir.IntType(32), ROWS)
    if ratio == NIBBLE_RATIO:
        return builder.shl(value, lanes([4] * ROWS))
    if ratio == SIX_RATIO:  # 128 v - v
        return builder.sub(builder.shl(value, lanes([7] * ROWS)), value)
    times_256 = builder.shl(value, lanes([8] * ROWS))
    return builder.sub(times_256, builder.shl(value, lanes([1] * ROWS)))


def _data(context, builder, signature, args, index, element=None):
    """The data pointer of array argument `index` (as bytes, or as `element`s)."""
    array = context.make_array(signature.args[index])(context, builder, args[index])
    return builder.bitcast(array.data, (element or ir.IntType(8)).as_pointer())


@intrinsic
def _load_config(typingctx, config):  # pragma: no cover - compiled
    """`ldtilecfg` from a uint8 [64] array."""

    def codegen(context, builder, signature, args):
        load = _declare(builder, "llvm.x86.ldtilecfg", [ir.IntType(8).as_pointer()])
        builder.call(load, [_data(context, builder, signature, args, 0)])
        return context.get_dummy_value()

    return types.void(config), codegen


@intrinsic
def _release(typingctx):  # pragma: no cover - compiled
    """`tilerelease`: the tiles back to their initial state."""

    def codegen(context, builder, signature, args):
        builder.call(_declare(builder, "llvm.x86.tilerelease", []), [])
        return context.get_dummy_value()

    return types.void(), codegen


@numba.njit(cache=True)
def _config(rows, nibbles):  # pragma: no cover - compiled
    """The 64-byte tile configuration (palette 1) of `_group_product` for `rows` rows of x
    (1..16). Q8_0 (not `nibbles`): tiles 0..3 (two sets of the two parts' sums) `rows` rows of
    16 int32; 4, 5 (A1, A2) `rows` rows of one part of a block of x (32 bytes); 6 (B) 8 rows of
    16 x 4 bytes. Q4_1: tiles 0, 1 (two sets of sums) `rows` rows of 16 int32; 4 (A) `rows` rows
    of both parts of a block (64 bytes); 6 (B) 16 rows of 16 x 4 bytes.  -> uint8 [64]"""
    config = np.zeros(64, np.uint8)
    config[0] = 1
    for tile in range(7):  # bytes a row (a uint16, < 256 here), rows
        if tile < 4:  # sums
            if nibbles and tile > 1:
                continue
            config[16 + 2 * tile], config[48 + tile] = 64, rows
        elif tile < 6:  # activations
            if nibbles and tile > 4:
                continue
            config[16 + 2 * tile], config[48 + tile] = X_ROW if nibbles else BLOCK, rows
        else:  # weights
            config[16 + 2 * tile], config[48 + tile] = 64, X_ROW // 4 if nibbles else BLOCK // 4
    return config


B_BYTES = X_ROW // 4 * 64
"""Bytes of one Q4_1 block of 16 output rows unpacked as B (`_emit_unpack`): 16 rows of 64."""


def _emit_unpack(builder, words_p, b_p) -> None:
    """IR that unpacks one Q4_1 block of 16 output rows as B's 16 rows: the 4 words of nibbles
    at words_p (i8*) -> `B_BYTES` bytes at b_p: rows 0..3 16 times the low nibbles (k 0..15 of
    the first part), rows 4..7 16 times the high ones (k 16..31), rows 8..15 the low and the
    high nibbles themselves (the second part), in 64-byte vectors."""
    i32, i64 = ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(i32, ROWS)
    nibble, upper = vec([0x0F0F0F0F] * ROWS), vec([0xF0F0F0F0 - 2**32] * ROWS)
    for w in range(4):
        address = builder.bitcast(builder.gep(words_p, [i64(64 * w)]), vec.as_pointer())
        word = builder.load(address, align=1)
        low = builder.and_(word, nibble)
        high16 = builder.and_(word, upper)  # 16 times the high nibbles
        values = (
            (w, builder.shl(low, vec([4] * ROWS))),  # 16 times the low nibbles
            (4 + w, high16),
            (8 + w, low),
            (12 + w, builder.lshr(high16, vec([4] * ROWS))),
        )
        for row, value in values:
            address = builder.bitcast(builder.gep(b_p, [i64(64 * row)]), vec.as_pointer())
            builder.store(value, address, align=1)


_GROUP_ROWS = (1, 2, 4, 8, 16)
"""`_group_product`'s dispatch table: the rows of x a call serves (a pass's rows go in groups of
16, the rest in one group of the next power of 2, zero rows padding it); the kind of weights
comes from x_terms' dtype (float32 terms for Q4_1, int32 offsets for Q8_0)."""


@intrinsic
def _group_product(
    typingctx,
    rows,
    x_q,
    a_start,
    a_stride,
    part_offset,
    b,
    b_start,
    b_step,
    n_blocks,
    x_scales,
    x_terms,
    xs_start,
    xs_stride,
    scales,
    coefs,
    sc_start,
    sc_step,
    sums,
    totals,
):  # pragma: no cover - compiled
    """totals = `rows` rows of x times 16 output rows of W over n_blocks blocks, the variant for
    `rows` (one of the table `_GROUP_ROWS`) chosen by a switch:

        _group_product(rows, x_q, a_start, a_stride, part_offset, b, b_start, b_step, n_blocks,
                       x_scales, x_terms, xs_start, xs_stride, scales, coefs, sc_start,
                       sc_step, scratch, totals)

    For block j < n_blocks, the rows' blocks of x start at x_q[a_start + 16 j X_ROW + i
    a_stride] (`quantize_rows`'s layout: the first part's 32 bytes, then the second's
    part_offset bytes on), and b holds the word tiles, block j's at b[b_start + j b_step].
    Q8_0: A1 and A2 are the two parts, B those 512 bytes as they lie, and two `tdpbsud`
    give S_1 = A1 B and S_2 = A2 B; Q4_1: A is both parts (64 bytes a row), B the block's
    256 bytes of nibbles unpacked to `B_BYTES` in scratch (16 q against the first part, q
    against the second, `_emit_unpack`; block j + 1's while block j's tiles compute, so
    that its stores are done when they load) and one `tdpbsud` gives S = 16 S_1 + S_2. The
    sums go to scratch (int32 [`SCRATCH`]) in two alternating slots, so that block j's
    tiles compute while block j - 1's sums are scaled; then for row i and lane r, with S =
    ratio S_1 + S_2 (int32, `ratio_of(nibbles)`),

        Q4_1 (x_terms float32): total[i][r] = fma(c_r, term_i, fma(float(S), d_i s_r, total))
        Q8_0 (x_terms int32):   total[i][r] = fma(float(S - term_i), d_i s_r, total)

    with d_i, term_i = x_scales, x_terms[xs_start + i xs_stride + j] and s_r, c_r =
    scales, coefs[sc_start + j sc_step + r]; the totals start at 0, stay in vector
    registers and are written to totals float32 [16, 16] (rows 0..rows-1) at the end. The
    tile configuration must be `_config(rows, nibbles)`'s. Flat offsets into C-contiguous
    arrays; nothing is bounds-checked.

    Each block also asks for the same block of the next 16 output rows (its words, scales
    and coefs) into L1 (docs/numerics.md, "Block products").
    """
    rest = (
        x_scales,
        x_terms,
        xs_start,
        xs_stride,
        scales,
        coefs,
        sc_start,
        sc_step,
        sums,
        totals,
    )
    arrays = (x_q, b, x_scales, x_terms, scales, coefs, sums, totals)
    offsets = isinstance(x_terms, types.Array) and x_terms.dtype == types.int32  # Q8_0
    nibbles = not offsets  # Q4_1
    term_type = types.int32 if offsets else types.float32
    wanted = (types.int8, types.uint8, types.float32, term_type) + (types.float32,) * 2
    wanted += (types.int32, types.float32)
    if any(
        not isinstance(a, types.Array) or a.dtype != d for a, d in zip(arrays, wanted, strict=True)
    ):
        return None
    sig = types.void(rows, x_q, a_start, a_stride, part_offset, b, b_start, b_step, n_blocks, *rest)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        key = context.cast(builder, args[0], signature.args[0], types.int64)
        done = builder.append_basic_block("group_done")
        switch = builder.switch(key, done)
        inner = types.void(*signature.args[1:])
        for count in _GROUP_ROWS:
            case = builder.append_basic_block(f"group_{count}")
            switch.add_case(i64(count), case)
            builder.position_at_end(case)
            emit(context, builder, inner, args[1:], count)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    def emit(context, builder, signature, args, rows):  # the variant for `rows` rows of x
        i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
        vec, fvec = ir.VectorType(i32, ROWS), ir.VectorType(f32, ROWS)
        pointer = i8.as_pointer()
        zero = _declare(builder, "llvm.x86.tilezero", [i8])
        load = _declare(builder, "llvm.x86.tileloadd64", [i8, pointer, i64])
        product = _declare(builder, "llvm.x86.tdpbsud", [i8, i8, i8])
        store = _declare(builder, "llvm.x86.tilestored64", [i8, pointer, i64])
        prefetch = _declare(builder, "llvm.prefetch.p0", [pointer, i32, i32, i32])
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(fvec, [fvec] * 3), "llvm.fma.v16f32"
        )
        a_start, a_stride, part_offset, b_start, b_step, n_blocks = (
            args[i] for i in (1, 2, 3, 5, 6, 7)
        )
        xs_start, xs_stride, sc_start, sc_step = (args[i] for i in (10, 11, 14, 15))
        x_q_p = _data(context, builder, signature, args, 0)
        b_p = _data(context, builder, signature, args, 4)
        x_scales_p = _data(context, builder, signature, args, 8, f32)
        x_terms_p = _data(context, builder, signature, args, 9, i32 if offsets else f32)
        scales_p = _data(context, builder, signature, args, 12, f32)
        coefs_p = _data(context, builder, signature, args, 13, f32)
        scratch_p = _data(context, builder, signature, args, 16)
        totals_v = builder.bitcast(_data(context, builder, signature, args, 17), fvec.as_pointer())

        def ratio(value):
            return _times_ratio(builder, value, PART_RATIO)

        def splat(value, vector=fvec):
            return _splat(builder, value, vector)

        def scalar(base, offset):
            return builder.load(builder.gep(base, [offset]), align=4)

        def vector(base, offset, kind=fvec):
            address = builder.bitcast(builder.gep(base, [offset]), kind.as_pointer())
            return builder.load(address, align=4)

        def unpack(j, slot):  # Q4_1: block j's B from the word tiles into L1 (`slot`)
            words = builder.gep(b_p, [builder.add(b_start, builder.mul(j, b_step))])
            _emit_unpack(builder, words, builder.gep(scratch_p, [i64(4096 + B_BYTES * slot)]))

        def fetch_next(j):  # block j of the next 16 output rows (weights, scales, coefs)
            words = 4 * 64 if nibbles else 8 * 64  # bytes of a block of 16 rows
            ahead = builder.add(builder.add(b_start, builder.mul(j, b_step)), i64(words))
            for line in range(0, words, 64):
                address = builder.gep(b_p, [builder.add(ahead, i64(line))])
                builder.call(prefetch, [address, i32(0), i32(3), i32(1)])
            at = builder.add(builder.add(sc_start, builder.mul(j, sc_step)), i64(ROWS))
            for base in (scales_p, coefs_p):
                address = builder.bitcast(builder.gep(base, [at]), i8.as_pointer())
                builder.call(prefetch, [address, i32(0), i32(3), i32(1)])

        def issue(j, slot):  # block j's tile products, stored to the sums of `slot` (0 or 1)
            fetch_next(j)
            a1 = builder.gep(x_q_p, [builder.add(a_start, builder.mul(j, i64(ROWS * X_ROW)))])
            b_here = builder.gep(b_p, [builder.add(b_start, builder.mul(j, b_step))])
            sums = builder.gep(scratch_p, [i64(2048 * slot)])  # rows of 64 bytes
            if nibbles:  # both parts in one product: S = 16 S_1 + S_2
                # block j + 1's B (the last block's again at the end) into the other slot,
                # so that its stores are done when its tiles load
                following = builder.select(
                    builder.icmp_signed("<", builder.add(j, i64(1)), n_blocks),
                    builder.add(j, i64(1)),
                    j,
                )
                unpack(following, 1 - slot)
                unpacked = builder.gep(scratch_p, [i64(4096 + B_BYTES * slot)])
                builder.call(zero, [i8(slot)])
                builder.call(load, [i8(_A1), a1, a_stride])
                builder.call(load, [i8(_B), unpacked, i64(64)])
                builder.call(product, [i8(slot), i8(_A1), i8(_B)])
                builder.call(store, [i8(slot), sums, i64(64)])
                return
            c1, c2 = 2 * slot, 2 * slot + 1
            builder.call(zero, [i8(c1)])
            builder.call(zero, [i8(c2)])
            builder.call(load, [i8(_A1), a1, a_stride])
            builder.call(load, [i8(_A2), builder.gep(a1, [part_offset]), a_stride])
            builder.call(load, [i8(_B), b_here, i64(64)])
            builder.call(product, [i8(c1), i8(_A1), i8(_B)])
            builder.call(product, [i8(c2), i8(_A2), i8(_B)])
            builder.call(store, [i8(c1), sums, i64(64)])
            builder.call(store, [i8(c2), builder.gep(sums, [i64(1024)]), i64(64)])

        def post(j, totals):  # block j's sums (stored by `issue`) into the totals
            sums = builder.gep(scratch_p, [builder.mul(builder.and_(j, i64(1)), i64(2048))])
            at = builder.add(sc_start, builder.mul(j, sc_step))
            s, c = vector(scales_p, at), vector(coefs_p, at)
            following = []
            for i, total in enumerate(totals[:rows]):
                combined = vector(sums, i64(64 * i), vec)
                if not nibbles:
                    second = vector(sums, i64(1024 + 64 * i), vec)
                    combined = builder.add(ratio(combined), second)
                where = builder.add(builder.add(xs_start, builder.mul(xs_stride, i64(i))), j)
                if offsets:  # Q8_0: take off 128 sum(254 x_1 + x_2), in int32
                    combined = builder.sub(combined, splat(scalar(x_terms_p, where), vec))
                ds = builder.fmul(splat(scalar(x_scales_p, where)), s)
                total = builder.call(fma, [builder.sitofp(combined, fvec), ds, total])
                if not offsets:  # Q4_1: the minimums times the block's sum of x
                    total = builder.call(fma, [c, splat(scalar(x_terms_p, where)), total])
                following.append(total)
            return following + totals[rows:]

        # block j's tile products go out before block j - 1's sums are scaled (two sets of C
        # tiles, alternating), so that the tiles compute while the vector units scale
        entry = builder.block
        loop = builder.append_basic_block("blocks")
        odd = builder.append_basic_block("issue_odd")
        even = builder.append_basic_block("issue_even")
        scale = builder.append_basic_block("scale")
        done = builder.append_basic_block("blocks_done")
        if nibbles:
            unpack(i64(0), 0)
        issue(i64(0), 0)
        builder.branch(loop)
        builder.position_at_end(loop)
        j = builder.phi(i64)  # the block to issue; j - 1 is scaled
        j.add_incoming(i64(1), entry)
        phis = [builder.phi(fvec) for _ in range(ROWS)]
        for phi in phis:
            phi.add_incoming(ir.Constant(fvec, [0.0] * ROWS), entry)
        more = builder.icmp_signed("<", j, n_blocks)
        dispatch = builder.append_basic_block("issue")
        builder.cbranch(more, dispatch, scale)
        builder.position_at_end(dispatch)
        builder.cbranch(builder.icmp_unsigned("!=", builder.and_(j, i64(1)), i64(0)), odd, even)
        for block, slot in ((odd, 1), (even, 0)):
            builder.position_at_end(block)
            issue(j, slot)
            builder.branch(scale)
        builder.position_at_end(scale)
        following = post(builder.sub(j, i64(1)), phis)
        j_next = builder.add(j, i64(1))
        j.add_incoming(j_next, builder.block)
        for phi, total in zip(phis, following, strict=True):
            phi.add_incoming(total, builder.block)
        builder.cbranch(builder.icmp_signed("<=", j_next, n_blocks), loop, done)
        builder.position_at_end(done)
        for i, value in enumerate(following[:rows]):
            builder.store(value, builder.gep(totals_v, [i32(i)]), align=4)

    return sig, codegen


def spread_fifth_bits(builder, bits):
    """IR: the 4 fifth bits in the low bits of each int32 lane of `bits` (bit b: the column of
    byte b) moved to bit 4 of byte b, the rest zero (`FIVE`'s quants are nibble + 16 fifth
    bit): ((bits & 15) * 0x02040810) & 0x10101010, the product's bits all apart (b + 7 c + 4
    for bits b, c in 0..3: no carry, and only b = c lands on a bit 8 b + 4)."""
    lanes = ir.VectorType(ir.IntType(32), ROWS)
    low = builder.and_(bits, lanes([15] * ROWS))
    return builder.and_(builder.mul(low, lanes([0x02040810] * ROWS)), lanes([0x10101010] * ROWS))


def form_operands(builder, form, word, index, fifth=None):
    """IR: the `vpdpbusd` left operands (unsigned bytes) of word `index` of a block of 16 rows'
    word tiles in format `form` (`word_tiles`), with the block's column of each operand's byte
    0: [(operand, column)]. Q8_0's bytes (`BYTES`, `HALVES`) as they lie, q + 128; Q4_1's
    (`NIBBLES`) low nibbles (columns 4 index + b) and high ones (16 more); `FIVE`'s the same
    with each fifth bit (from `fifth`, the block's fifth word) in bit 4 of its byte."""
    lanes = ir.VectorType(ir.IntType(32), ROWS)
    if form in (BYTES, HALVES):
        return [(word, 4 * index)]
    nibble = lanes([0x0F0F0F0F] * ROWS)
    low = builder.and_(word, nibble)
    high = builder.and_(builder.lshr(word, lanes([4] * ROWS)), nibble)
    if form == FIVE:
        for shift, operand in ((4 * index, "low"), (BLOCK // 2 + 4 * index, "high")):
            bits = builder.lshr(fifth, lanes([shift] * ROWS)) if shift else fifth
            if operand == "low":
                low = builder.or_(low, spread_fifth_bits(builder, bits))
            else:
                high = builder.or_(high, spread_fifth_bits(builder, bits))
    return [(low, 4 * index), (high, BLOCK // 2 + 4 * index)]


SUPER4, SUPER6 = 4, 5
"""The super-block word formats of GGUF's Q4_K and Q6_K in their own bytes
(`kquant_layout.as_super_blocks`): a "block" of the kernels is a super-block of 256 weights
(8 sub-blocks of 32), its 16 rows' words [W, 16, 4] holding each row's bytes of the
super-block 4 to a word (`_emit_super_blocks`); the scales array holds d, the coefs -dmin
(`SUPER4`), both float32 per super-block."""

SUPER_FORMS = (SUPER4, SUPER6)

SUB_BLOCKS = 8
"""Sub-blocks of 32 in a super-block."""

WORDS = {NIBBLES: 4, BYTES: 8, HALVES: 8, FIVE: 5, SUPER4: 36, SUPER6: 52}
"""64-byte words a block of 16 rows takes in the word tiles, by format (`word_tiles`; the
super-block formats per super-block)."""


def _emit_super_blocks(builder, form, group, words_p, w_at, x_p, x_at, x_scales_p, terms_p,
                       where, d, c, totals, wide=False):  # fmt: skip
    """IR: the 8 sub-blocks of one super-block of 16 output rows (`SUPER4`, `SUPER6`) times
    `group` rows of x (two int8 parts on one scale), added to `totals` (float32 vectors, one a
    row), in a loop over the sub-blocks. Returns the new totals.

    words_p: the words (i8*), this super-block's 16 rows at byte w_at; x_p: x_q (i8*), row i's
    sub-block 0 at byte x_at[i] (its 32 bytes of x_1, then x_2; sub-block b 1024 b on);
    x_scales_p (float*) and terms_p (float* x_terms for `SUPER4`, i32* x_offsets for `SUPER6`)
    at row i's sub-block 0 index where[i]; d, c: the 16 rows' d and -dmin (float vectors).
    Per sub-block b (SUPER4 as `NIBBLES` computes it on the float32 scales
    `kquant_layout.as_blocks` stores, the same float operations in the same order, so the same
    results bit for bit; SUPER6 with one float epilogue a sub-block of 32):

        SUPER4: s = d sc_b, c' = (-dmin) m_b (exact);  total = fma(c', term, fma(float(S),
                d_x s, total)), S = 16 sum(q x_1) + sum(q x_2) over the nibbles
        SUPER6: T = sc_{2b} S_0 + sc_{2b+1} S_1 in int32 (exact: x's ratio `SIX_RATIO`);
                total = fma(float(T), d_x d, total), S_h = 127 sum(u x_1) + sum(u x_2) -
                offset_h over half h's 16 columns of u = q (0..63: the nibble and its 2 high
                bits put in bits 4-5), offset_h = 32 sum(127 x_1 + x_2) over those columns
                (x_offsets[2 (where + b) + h]), so S_h = sum((q - 32)(127 x_1 + x_2))

    `wide` (`SUPER6` only): x_q holds x as one int16 a column (`_quantized_wide`), and T is
    summed by `_six_wide_sums`: the same integer, so the same totals bit for bit.

    The code is the same for every `group`, one row's operations apart from the others', so a
    row's totals are the same bits whatever rows share the call.
    """
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, fvec = ir.VectorType(i32, ROWS), ir.VectorType(f32, ROWS)
    dpbusd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vec, [vec, vec, vec]), "llvm.x86.avx512.vpdpbusd.512"
    )
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(fvec, [fvec] * 3), "llvm.fma.v16f32"
    )

    def load(base, offset, element, align=1):
        address = builder.bitcast(builder.gep(base, [offset]), element.as_pointer())
        return builder.load(address, align=align, typ=element)

    def splat(value, vector):
        return _splat(builder, value, vector)

    def const(value):
        return vec([value] * ROWS)

    def scale_bytes(word_index, byte, signed, as_float=True):  # byte `byte` of each lane
        word = load(words_p, builder.add(w_at, builder.mul(word_index, i64(64))), vec)
        shift = splat(builder.trunc(builder.mul(builder.sub(i64(3), byte), i64(8)), i32), vec)
        top = builder.shl(word, shift)  # the byte in bits 24-31
        if signed:
            value = builder.ashr(top, const(24))
            return builder.sitofp(value, fvec) if as_float else value
        return builder.uitofp(builder.lshr(top, const(24)), fvec)

    entry = builder.block
    loop = builder.append_basic_block("sub_blocks")
    done = builder.append_basic_block("sub_blocks_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    b = builder.phi(i64)
    b.add_incoming(i64(0), entry)
    phis = [builder.phi(fvec) for _ in totals]
    for phi, total in zip(phis, totals, strict=True):
        phi.add_incoming(total, entry)
    following = list(phis)
    sub_at = builder.add(w_at, builder.mul(b, i64(64 * (4 if form == SUPER4 else 6))))
    x_b = [builder.add(at, builder.mul(b, i64(ROWS * X_ROW))) for at in x_at]
    where_b = [builder.add(at, b) for at in where]
    low, high = const(0x0F0F0F0F), const(-0x0F0F0F10)  # 0xF0F0F0F0

    def x_word(i, part, column):
        offset = builder.add(x_b[i], i64(BLOCK * part + column))
        return splat(load(x_p, offset, i32), vec)

    def row_nibble_sum():  # one row: the nibbles as they lie against each part, summed
        sums = [[const(0)] * 4 for _ in range(2)]  # apart, then 16 S_1 + S_2 (3 unpacking
        for index in range(4):  # operations a word where the 16 q operands take 6)
            word = load(words_p, builder.add(sub_at, i64(64 * index)), vec)
            nibbles = (builder.and_(word, low), builder.and_(builder.lshr(word, const(4)), low))
            for h, operand in enumerate(nibbles):
                for part in range(2):
                    slot, column = (2 * index + h) % 4, BLOCK // 2 * h + 4 * index
                    sums[part][slot] = builder.call(
                        dpbusd, [sums[part][slot], operand, x_word(0, part, column)]
                    )
        first, second = (
            builder.add(builder.add(c[0], c[1]), builder.add(c[2], c[3])) for c in sums
        )
        return [builder.add(_times_ratio(builder, first, NIBBLE_RATIO), second)]

    def rows_nibble_sums():  # 16 q against x_1 and q against x_2 in one sum: 16 S_1 + S_2
        splits = max(1, 8 // group)
        sums = [[const(0)] * splits for _ in range(group)]
        turn = 0
        for index in range(4):
            word = load(words_p, builder.add(sub_at, i64(64 * index)), vec)
            column, right = 4 * index, builder.lshr(word, const(4))
            operands = [
                (builder.and_(builder.shl(word, const(4)), high), column, 0),
                (builder.and_(word, low), column, 1),
                (builder.and_(word, high), BLOCK // 2 + column, 0),
                (builder.and_(right, low), BLOCK // 2 + column, 1),
            ]
            for operand, column_, part in operands:
                slot = turn % splits
                for i in range(group):
                    sums[i][slot] = builder.call(
                        dpbusd, [sums[i][slot], operand, x_word(i, part, column_)]
                    )
                turn += 1
        totals = []
        for row in sums:
            total = row[0]
            for other in row[1:]:
                total = builder.add(total, other)
            totals.append(total)
        return totals

    if form == SUPER4:
        sums = row_nibble_sum() if group == 1 else rows_nibble_sums()  # the same integers
        quarter, byte = builder.udiv(b, i64(4)), builder.urem(b, i64(4))
        s = builder.fmul(scale_bytes(builder.add(quarter, i64(32)), byte, False), d)
        m = builder.fmul(scale_bytes(builder.add(quarter, i64(34)), byte, False), c)
        for i in range(group):
            d_x = load(x_scales_p, where_b[i], f32, 4)
            ds = builder.fmul(splat(d_x, fvec), s)
            following[i] = builder.call(fma, [builder.sitofp(sums[i], fvec), ds, following[i]])
            term = load(terms_p, where_b[i], f32, 4)
            following[i] = builder.call(fma, [m, splat(term, fvec), following[i]])
    elif wide:  # SUPER6 on x as one int16: (q - 32) sc in int16 pairs against it
        scaled = _six_wide_sums(builder, group, words_p, sub_at, x_p, x_b, b, load, const,
                                scale_bytes)  # fmt: skip
        for i in range(group):  # one float epilogue a sub-block of 32, as below
            d_x = load(x_scales_p, where_b[i], f32, 4)
            dd = builder.fmul(splat(d_x, fvec), d)
            following[i] = builder.call(fma, [builder.sitofp(scaled[i], fvec), dd, following[i]])
    else:
        splits = max(1, 4 // group)
        tops = [load(words_p, builder.add(sub_at, i64(64 * (4 + h))), vec) for h in range(2)]
        scaled = [None] * group  # sc_0 S_0 + sc_1 S_1, int32
        for h in range(2):
            sums = [[[const(0)] * splits for _ in range(2)] for _ in range(group)]
            for index in range(4):
                word = load(words_p, builder.add(sub_at, i64(64 * index)), vec)
                nibble = builder.and_(builder.lshr(word, const(4)) if h else word, low)
                top = tops[h]  # column 4 index + j's high bits at bits 2 index of byte j
                if index < 2:
                    top = builder.shl(top, const(4 - 2 * index))
                elif index == 3:
                    top = builder.lshr(top, const(2))
                operand = builder.or_(nibble, builder.and_(top, const(0x30303030)))
                slot = index % splits
                for part in range(2):
                    for i in range(group):
                        sums[i][part][slot] = builder.call(
                            dpbusd,
                            [sums[i][part][slot], operand, x_word(i, part, 16 * h + 4 * index)],
                        )
            sub = builder.add(builder.mul(b, i64(2)), i64(h))  # the sub-block of 16
            sc = scale_bytes(builder.add(builder.udiv(sub, i64(4)), i64(48)),
                             builder.urem(sub, i64(4)), True, False)  # fmt: skip
            for i in range(group):
                parts = []
                for chain in sums[i]:
                    total = chain[0]
                    for other in chain[1:]:
                        total = builder.add(total, other)
                    parts.append(total)
                combined = builder.add(_times_ratio(builder, parts[0], SIX_RATIO), parts[1])
                at = builder.add(builder.mul(where_b[i], i64(2)), i64(h))
                combined = builder.sub(combined, splat(load(terms_p, at, i32, 4), vec))
                combined = builder.mul(combined, sc)
                scaled[i] = combined if h == 0 else builder.add(scaled[i], combined)
        for i in range(group):  # one float epilogue a sub-block of 32
            d_x = load(x_scales_p, where_b[i], f32, 4)
            dd = builder.fmul(splat(d_x, fvec), d)
            following[i] = builder.call(fma, [builder.sitofp(scaled[i], fvec), dd, following[i]])
    next_b = builder.add(b, i64(1))
    b.add_incoming(next_b, builder.block)
    for phi, value in zip(phis, following, strict=True):
        phi.add_incoming(value, builder.block)
    builder.cbranch(builder.icmp_signed("<", next_b, i64(SUB_BLOCKS)), loop, done)
    builder.position_at_end(done)
    return following


SIX_WIDE_ORDER = (0, 2, 1, 3)
"""Where `_quantized_wide` puts column 4 i + j of a block among its 4 int16 at 4 i (its own
inverse): x's pairs for `vpdpwssd` are columns (4 i, 4 i + 2) and (4 i + 1, 4 i + 3), as
`vpmaddubsw` pairs a word's bytes 0, 2 and 1, 3 (`_six_wide_sums`)."""


@numba.njit(cache=True)
def _quantized_wide(x, groups, rows):  # pragma: no cover - compiled
    """`_quantized(x, groups, rows, SUPER6)` with each row's block of x_q (64 bytes) holding
    one int16 a column, 127 x_1 + x_2 (|.| <= 16,129) of the same parts, column 4 i + j at
    int16 4 i + `SIX_WIDE_ORDER`[j] (for `_six_wide_sums`, which needs no offsets: x_offsets
    an empty [rows, 0]).  O(B k)."""
    n_blocks = x.shape[1] // BLOCK
    x_q = np.zeros((groups, n_blocks, ROWS, X_ROW), np.int8)
    x_scales = np.zeros((rows, n_blocks), np.float32)
    x_sums = np.zeros((rows, n_blocks), np.int32)
    x_terms = np.zeros((rows, n_blocks), np.float32)
    flat_x, tiles = x.reshape(-1), x_q.reshape(-1)
    scales, sums, terms = x_scales.reshape(-1), x_sums.reshape(-1), x_terms.reshape(-1)
    k = x.shape[1]
    for row in range(x.shape[0]):  # as `quantize_rows_by`
        group, lane = row // ROWS, row % ROWS
        for block in range(n_blocks):
            at = ((group * n_blocks + block) * ROWS + lane) * X_ROW
            where = row * n_blocks + block
            _quantize_wide(flat_x, row * k + block * BLOCK, tiles, at, scales, sums, terms, where)
    return x_q, x_scales, x_terms, np.zeros((rows, 0), np.int32)


def _six_wide_sums(builder, group, words_p, sub_at, x_p, x_b, b, load, const, scale_bytes):
    """IR: T = sum((q - 32) sc (127 x_1 + x_2)) over sub-block b of 32 of `SUPER6`'s 16 output
    rows, for `group` rows of x held as one int16 a column (`_quantized_wide`), int32 vectors, one a
    row. The weights are widened once for the rows: a word's bytes u = q (0..63: the nibble and
    its 2 high bits, as `_emit_super_blocks`) times the half's int8 scale by `vpmaddubsw`
    against (sc, 0, sc, 0) and (0, sc, 0, sc), less 32 sc (`vpsubw`): int16 pairs (q - 32) sc
    (|.| <= 4,096) of columns (4 i, 4 i + 2) and (4 i + 1, 4 i + 3), then one `vpdpwssd` a pair
    vector and row: 16 a row and sub-block, against the previous 16 `vpdpbusd` and the parts'
    combination, offset and `vpmulld` a half. The same integer T (exact in int32, the bound of
    `SIX_RATIO`), so the same bits."""
    i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
    vec, wvec = ir.VectorType(i32, ROWS), ir.VectorType(i16, 2 * ROWS)
    bvec = ir.VectorType(i8, 4 * ROWS)
    dpwssd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vec, [vec, wvec, wvec]), "llvm.x86.avx512.vpdpwssd.512"
    )
    maddubs = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(wvec, [bvec, bvec]), "llvm.x86.avx512.pmaddubs.w.512"
    )
    low = const(0x0F0F0F0F)
    splits = max(1, 8 // group)
    sums = [[const(0)] * splits for _ in range(group)]
    turn = 0
    for h in range(2):
        sub = builder.add(builder.mul(b, i64(2)), i64(h))  # the sub-block of 16
        sc = scale_bytes(builder.add(builder.udiv(sub, i64(4)), i64(48)),
                         builder.urem(sub, i64(4)), True, False)  # fmt: skip
        sc16 = builder.shuffle_vector(  # sc (int16) in both halves of each lane
            builder.bitcast(sc, wvec), ir.Constant(wvec, None),
            ir.Constant(ir.VectorType(i32, 2 * ROWS), [2 * (k // 2) for k in range(2 * ROWS)]),
        )  # fmt: skip
        even = builder.and_(sc16, wvec([0xFF] * (2 * ROWS)))  # bytes (sc, 0, sc, 0)
        odd = builder.shl(even, wvec([8] * (2 * ROWS)))  # bytes (0, sc, 0, sc)
        offset = builder.shl(sc16, wvec([5] * (2 * ROWS)))  # 32 sc
        top_word = load(words_p, builder.add(sub_at, i64(64 * (4 + h))), vec)
        for index in range(4):
            word = load(words_p, builder.add(sub_at, i64(64 * index)), vec)
            nibble = builder.and_(builder.lshr(word, const(4)) if h else word, low)
            top = top_word  # column 4 index + j's high bits at bits 2 index of byte j
            if index < 2:
                top = builder.shl(top, const(4 - 2 * index))
            elif index == 3:
                top = builder.lshr(top, const(2))
            u = builder.bitcast(builder.or_(nibble, builder.and_(top, const(0x30303030))), bvec)
            for pair, scale in enumerate((even, odd)):
                product = builder.call(maddubs, [u, builder.bitcast(scale, bvec)])
                weights = builder.sub(product, offset)  # (q - 32) sc
                column = 16 * h + 4 * index  # x's int16 pair at 2 column + 4 pair bytes
                slot = turn % splits
                for i in range(group):
                    at = builder.add(x_b[i], i64(2 * column + 4 * pair))
                    x_pair = builder.bitcast(_splat(builder, load(x_p, at, i32), vec), wvec)
                    sums[i][slot] = builder.call(dpwssd, [sums[i][slot], weights, x_pair])
                turn += 1
    totals = []
    for row in sums:
        total = row[0]
        for other in row[1:]:
            total = builder.add(total, other)
        totals.append(total)
    return totals


def emit_paired_super(context, builder, arg_types, args, form, group):
    """Emit `quant_int8._paired_product`'s variant for a super-block format (`SUPER4`,
    `SUPER6`): `group` rows of x times 16 output rows over every super-block (n_blocks of
    them), the totals in vector registers, stored at the end. `args` and `arg_types`: its
    arguments after the two keys (words, w_start, step, x_q, x_start, x_scales, x_terms,
    x_offsets, xs_start, n_blocks, scales, coefs, sc_start, sc_step, total, total_start,
    total_stride: row i's 16 totals at total[total_start + i total_stride]), with x_start
    row 0's byte in x_q, xs_start its index in x_scales counted in super-blocks (row r, super-
    block j: sub-block 8 j + i at 8 (xs_start + n_blocks r + j) + i), d and -dmin at
    scales, coefs[sc_start + j sc_step + r]."""
    i8, i32, i64, f32 = ir.IntType(8), ir.IntType(32), ir.IntType(64), ir.FloatType()
    fvec = ir.VectorType(f32, ROWS)

    def pointer(index, element):
        array = context.make_array(arg_types[index])(context, builder, args[index])
        return builder.bitcast(array.data, element.as_pointer())

    words_p, x_p, x_scales_p = pointer(0, i8), pointer(3, i8), pointer(5, f32)
    terms_p = pointer(6, f32) if form == SUPER4 else pointer(7, i32)
    scales_p, coefs_p, total_p = pointer(10, f32), pointer(11, f32), pointer(14, f32)
    w_start, step, x_start, xs_start, n_blocks = (args[i] for i in (1, 2, 4, 8, 9))
    sc_start, sc_step = args[12], args[13]
    prefetch = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i32, i32, i32]),
        "llvm.prefetch.p0",
    )
    entry = builder.block
    loop = builder.append_basic_block("supers")
    done = builder.append_basic_block("supers_done")
    builder.branch(loop)
    builder.position_at_end(loop)
    j = builder.phi(i64)
    j.add_incoming(i64(0), entry)
    totals = [builder.phi(fvec) for _ in range(group)]
    for phi in totals:
        phi.add_incoming(ir.Constant(fvec, [0.0] * ROWS), entry)
    w_at = builder.add(w_start, builder.mul(j, step))
    sc_at = builder.add(sc_start, builder.mul(j, sc_step))
    chunk = 64 * WORDS[form]  # the same super-block of the next 16 output rows into L1
    for line in range(0, chunk, 64):
        ahead = builder.add(w_at, i64(chunk + line))
        builder.call(prefetch, [builder.gep(words_p, [ahead]), i32(0), i32(3), i32(1)])
    for base in (scales_p, coefs_p):
        address = builder.gep(base, [builder.add(sc_at, i64(ROWS))])
        builder.call(prefetch, [builder.bitcast(address, i8.as_pointer()), i32(0), i32(3), i32(1)])

    def vector_at(base, offset):
        address = builder.bitcast(builder.gep(base, [offset]), fvec.as_pointer())
        return builder.load(address, align=4, typ=fvec)

    d, c = vector_at(scales_p, sc_at), vector_at(coefs_p, sc_at)
    first = builder.add(x_start, builder.mul(j, i64(SUB_BLOCKS * ROWS * X_ROW)))
    x_at = [builder.add(first, i64(X_ROW * i)) for i in range(group)]
    where = [
        builder.mul(builder.add(builder.add(xs_start, builder.mul(n_blocks, i64(i))), j),
                    i64(SUB_BLOCKS))
        for i in range(group)
    ]  # fmt: skip
    following = _emit_super_blocks(builder, form, group, words_p, w_at, x_p, x_at, x_scales_p,
                                   terms_p, where, d, c, totals, form == SUPER6)  # fmt: skip
    next_j = builder.add(j, i64(1))
    j.add_incoming(next_j, builder.block)
    for phi, value in zip(totals, following, strict=True):
        phi.add_incoming(value, builder.block)
    builder.cbranch(builder.icmp_signed("<", next_j, n_blocks), loop, done)
    builder.position_at_end(done)
    total_start, total_stride = args[15], args[16]
    for i, value in enumerate(following):
        at = builder.add(total_start, builder.mul(total_stride, i64(i)))
        address = builder.bitcast(builder.gep(total_p, [at]), fvec.as_pointer())
        builder.store(value, address, align=4)


def _emit_row_super(context, builder, signature, args, form):
    """Emit `_row_product`'s block for a super-block format (`SUPER4`, `SUPER6`; its arguments
    after the key, both x_terms and x_offsets): one super-block j of 16 output rows added to
    total[total_start..] (`_emit_super_blocks`); x_start is 1024 j (`_row_kernel`'s byte of
    block j, so sub-block 0 of super-block j is at 8 x_start) and xs_at j (its sub-blocks at
    8 j + i)."""
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    fvec = ir.VectorType(f32, ROWS)
    words_p = _data(context, builder, signature, args, 0)
    x_p = _data(context, builder, signature, args, 2)
    x_scales_p = _data(context, builder, signature, args, 5, f32)
    terms_p = _data(context, builder, signature, args, 6 if form == SUPER4 else 7,
                    f32 if form == SUPER4 else i32)  # fmt: skip
    scales_p = _data(context, builder, signature, args, 9, f32)
    coefs_p = _data(context, builder, signature, args, 10, f32)
    total_p = _data(context, builder, signature, args, 12, f32)
    w_start, x_start, xs_at, sc_start, total_start = (args[i] for i in (1, 3, 8, 11, 13))

    def vector_at(base, offset):
        address = builder.bitcast(builder.gep(base, [offset]), fvec.as_pointer())
        return builder.load(address, align=1, typ=fvec)

    address = builder.bitcast(builder.gep(total_p, [total_start]), fvec.as_pointer())
    value = builder.load(address, align=4)
    d, c = vector_at(scales_p, sc_start), vector_at(coefs_p, sc_start)
    eight = i64(SUB_BLOCKS)
    (value,) = _emit_super_blocks(builder, form, 1, words_p, w_start, x_p,
                                  [builder.mul(x_start, eight)], x_scales_p, terms_p,
                                  [builder.mul(xs_at, eight)], d, c, [value])  # fmt: skip
    builder.store(value, address, align=4)


ROW_FORMS = (NIBBLES, BYTES, HALVES, FIVE, SUPER4, SUPER6)
"""`_row_product`'s dispatch table: the word formats (`word_tiles`)."""


def _emit_row_product(context, builder, signature, args, form):
    """Emit, at the builder's position, `_row_product`'s block for word format `form` (its
    arguments after the key, x_terms or x_offsets in the place of the terms, by `form`)."""
    terms_float = form in (NIBBLES, FIVE)
    i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
    vec, fvec = ir.VectorType(i32, ROWS), ir.VectorType(f32, ROWS)
    w_start, x_start, part_offset, xs_at, sc_start, total_start = (
        args[i] for i in (1, 3, 4, 7, 10, 12)
    )
    words_p = _data(context, builder, signature, args, 0)
    x_p = _data(context, builder, signature, args, 2)
    x_scales_p = _data(context, builder, signature, args, 5, f32)
    x_terms_p = _data(context, builder, signature, args, 6, f32 if terms_float else i32)
    scales_p = _data(context, builder, signature, args, 8, f32)
    coefs_p = _data(context, builder, signature, args, 9, f32)
    total_p = _data(context, builder, signature, args, 11, f32)
    dpbusd = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(vec, [vec, vec, vec]),
        "llvm.x86.avx512.vpdpbusd.512",
    )
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(fvec, [fvec] * 3), "llvm.fma.v16f32"
    )

    def load(base, offset, kind):
        address = builder.bitcast(builder.gep(base, [offset]), kind.as_pointer())
        return builder.load(address, align=1)

    def splat(value, vector):
        return _splat(builder, value, vector)

    fifth = None
    if form == FIVE:
        fifth = load(words_p, builder.add(w_start, i64(64 * 4)), vec)
    d = builder.load(builder.gep(x_scales_p, [xs_at]), align=4)
    address = builder.bitcast(builder.gep(total_p, [total_start]), fvec.as_pointer())
    value = builder.load(address, align=4)
    # HALVES: words 0-3 (columns 0-15) by the scales, 4-7 (16-31) by the coefs
    sections = [(range(4 if form in (NIBBLES, FIVE) else 8), scales_p)]
    if form == HALVES:
        sections = [(range(4), scales_p), (range(4, 8), coefs_p)]
    for h, (indices, scale_p) in enumerate(sections):
        splits = 4  # independent sums a part: vpdpbusd's latency is 5 cycles
        sums = [[vec([0] * ROWS)] * splits for _ in range(2)]
        step = 0
        for index in indices:
            word = load(words_p, builder.add(w_start, i64(64 * index)), vec)
            for operand, column in form_operands(builder, form, word, index, fifth):
                for part in range(2):
                    at = builder.add(x_start, i64(column))
                    if part:
                        at = builder.add(at, part_offset)
                    x_word = splat(load(x_p, at, i32), vec)
                    slot = step % splits
                    sums[part][slot] = builder.call(dpbusd, [sums[part][slot], operand, x_word])
                step += 1
        first, second = sums[0][0], sums[1][0]
        for slot in range(1, splits):
            first = builder.add(first, sums[0][slot])
            second = builder.add(second, sums[1][slot])
        ratio = ratio_of(form == NIBBLES)
        combined = builder.add(_times_ratio(builder, first, ratio), second)
        where = xs_at
        if form == HALVES:
            where = builder.add(builder.mul(xs_at, i64(2)), i64(h))
        term = builder.load(builder.gep(x_terms_p, [where]), align=4)
        if not terms_float:  # Q8_0: take off 128 sum(254 x_1 + x_2), in int32
            combined = builder.sub(combined, splat(term, vec))
        s = load(scale_p, sc_start, fvec)
        ds = builder.fmul(splat(d, fvec), s)
        value = builder.call(fma, [builder.sitofp(combined, fvec), ds, value])
    if terms_float:  # Q4_1, FIVE: the minimums times the block's sum of x
        value = builder.call(fma, [load(coefs_p, sc_start, fvec), splat(term, fvec), value])
    builder.store(value, address, align=4)


@intrinsic
def _row_product(
    typingctx,
    form,
    words,
    w_start,
    x_q,
    x_start,
    part_offset,
    x_scales,
    x_terms,
    x_offsets,
    xs_at,
    scales,
    coefs,
    sc_start,
    total,
    total_start,
):  # pragma: no cover - compiled
    """Add one block of 16 output rows times one row of x (its two parts) to float totals, in
    AVX-512 VNNI, for the word format `form` (`word_tiles.NIBBLES`, `BYTES`, `HALVES` or
    `FIVE`; a switch over `ROW_FORMS`, another adds nothing), with `_group_product`'s integer
    sums and float formula:

        _row_product(form, words, w_start, x_q, x_start, part_offset, x_scales, x_terms,
                     x_offsets, xs_at, scales, coefs, sc_start, total, total_start)

    The 16 rows' quants start at byte w_start of words (`WORDS[form]` words), the row's block
    of x_1 at byte x_start of x_q and of x_2 part_offset bytes on; `vpdpbusd` gives S_1, S_2
    exactly (over the block; `HALVES`: over each half apart), then with S = ratio S_1 + S_2,
    ratio = `ratio_of(form == NIBBLES)`, d = x_scales[xs_at], s_r, c_r = scales, coefs[sc_start
    + r]:

        NIBBLES, FIVE: total = fma(c_r, x_terms[xs_at], fma(float(S), d s_r, total))
                       (`FIVE`'s quants 0..31, the fifth bits put in)
        BYTES:         total = fma(float(S - x_offsets[xs_at]), d s_r, total)
        HALVES:        total = fma(float(S_h - x_offsets[2 xs_at + h]), d c'_r, total) for
                       h = 0 then 1, c' = s then c

    (x_terms float32: d sum(ratio x_1 + x_2); x_offsets int32: 128 sum(ratio x_1 + x_2), the
    stored Q8_0 quants' offset, `HALVES` a half block's each). Flat offsets; nothing is
    bounds-checked.
    """
    arrays = (words, x_q, x_scales, x_terms, x_offsets, scales, coefs, total)
    wanted = (types.uint8, types.int8, types.float32, types.float32, types.int32)
    wanted += (types.float32,) * 3
    if any(
        not isinstance(a, types.Array) or a.dtype != d for a, d in zip(arrays, wanted, strict=True)
    ):
        return None
    sig = types.void(form, words, w_start, x_q, x_start, part_offset, x_scales, x_terms,
                     x_offsets, xs_at, scales, coefs, sc_start, total, total_start)  # fmt: skip

    literal = form.literal_value if isinstance(form, types.IntegerLiteral) else None

    def codegen(context, builder, signature, args):
        key = context.cast(builder, args[0], signature.args[0], types.int64)
        done = builder.append_basic_block("row_done")
        switch = builder.switch(key, done)
        for form_ in ROW_FORMS if literal is None else (literal,):
            case = builder.append_basic_block(f"row_{form_}")
            switch.add_case(ir.IntType(64)(form_), case)
            builder.position_at_end(case)
            if form_ in SUPER_FORMS:
                inner = types.void(*signature.args[1:])
                _emit_row_super(context, builder, inner, args[1:], form_)
                builder.branch(done)
                continue
            terms = 7 if form_ in (NIBBLES, FIVE) else 8  # x_terms or x_offsets
            chosen = [i for i in range(1, 15) if i not in (7, 8) or i == terms]
            inner = types.void(*(signature.args[i] for i in chosen))
            _emit_row_product(context, builder, inner, [args[i] for i in chosen], form_)
            builder.branch(done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return sig, codegen


@functools.cache
def granted() -> bool:
    """Whether this process may use AMX: the host CPU has AMX-TILE and AMX-INT8 (and AVX-512
    for the vector code) and Linux grants the tile data state, which it hands to a process
    only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, Linux's
    Documentation/arch/x86/xstate.rst). The request is made here, once per process, before
    any tile instruction runs (`available()` calls this); every thread of the process may then
    use the tiles."""
    features = llvm.get_host_cpu_features()
    if not (features.get("amx-int8") and features.get("amx-tile") and features.get("avx512f")):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def available() -> bool:
    """Whether the kernels run here: `granted()`, and a small product comes out equal to the
    same product in NumPy (False, say, under an llvmlite whose LLVM lacks the intrinsics). The
    first call compiles `amx_matmul` unless Numba's cache holds it."""
    if not granted():
        return False
    # x = 1 quantizes exactly (x_1 = 127, x_2 = 0); W's quants 0..15 (Q4_1, scale 1, minimum 0)
    quants = (np.arange(ROWS * BLOCK // 2) % 256).astype(np.uint8).reshape(ROWS, BLOCK // 2)
    weights = np.concatenate([quants & 15, quants >> 4], axis=1).astype(np.float64)
    scales, minimums = np.ones((1, 1, ROWS), np.float32), np.zeros((1, 1, ROWS), np.float32)
    from corral.kernels.compute.word_tiles import word_tiles  # the weights' layout

    try:
        words = word_tiles(quants, "Q4_1", 1, ROWS)
        x = np.ones((3, BLOCK), np.float32)
        out = _amx_matmul(x, scales, minimums, words, np.empty((3, ROWS), np.float32))
    except Exception:  # any failure to compile or run: the other kernels serve
        return False
    return bool(np.allclose(out, weights.sum(axis=1)[None, :], rtol=1e-6))


def _make_quantize_block(ratio: int, wide: bool = False):
    """`_quantize_block` for the parts' `ratio` (`PART_RATIO` or `NIBBLE_RATIO`)."""

    @intrinsic
    def quantize_block(
        typingctx, x, x_at, tiles, t_at, x_scales, x_sums, x_terms, s_at
    ):  # pragma: no cover - compiled
        """One block of 32 values of x (float32, from x[x_at]) as its two int8 parts, in
        vector registers: d = max |v| / (127 ratio), d_1 = ratio d; part 0 = round(v / d_1)
        (half away from zero, C's roundf, as ggml's quantizers) to tiles[t_at:t_at + 32], part
        1 = round((v - d_1 part 0) / d) clipped to -127..127 to tiles[t_at + 32:t_at + 64];
        x_scales[s_at] = d, x_sums[s_at] = sum(ratio part 0 + part 1) (int32, exact),
        x_terms[s_at] = d x_sums. Flat offsets; not bounds-checked."""
        return _quantize_signature(x, x_at, tiles, t_at, x_scales, x_sums, x_terms, s_at, ratio,
                                   wide)  # fmt: skip

    return quantize_block


def _quantize_signature(x, x_at, tiles, t_at, x_scales, x_sums, x_terms, s_at, ratio, wide):
    """The signature and code generator of `_make_quantize_block(ratio, wide)`'s intrinsic
    (`wide`: the block's 64 bytes hold ratio x_1 + x_2 as int16 in `SIX_WIDE_ORDER`, not the
    parts)."""
    arrays = (x, tiles, x_scales, x_sums, x_terms)
    wanted = (types.float32, types.int8, types.float32, types.int32, types.float32)
    if any(
        not isinstance(a, types.Array) or a.dtype != d for a, d in zip(arrays, wanted, strict=True)
    ):
        return None

    def codegen(context, builder, signature, args):
        i8, i32, f32 = ir.IntType(8), ir.IntType(32), ir.FloatType()
        fvec, ivec, bvec = (ir.VectorType(t, ROWS) for t in (f32, i32, i8))

        def function(name, result, arguments):
            kind = ir.FunctionType(result, arguments)
            return cgutils.get_or_insert_function(builder.module, kind, name)

        def splat(value):
            return _splat(builder, value, fvec)

        def store(value, base, offset, element):
            address = builder.gep(_data(context, builder, signature, args, base, element), [offset])
            builder.store(value, address, align=4)

        fabs = function("llvm.fabs.v16f32", fvec, [fvec])
        maximum = function("llvm.maxnum.v16f32", fvec, [fvec, fvec])
        minimum = function("llvm.minnum.v16f32", fvec, [fvec, fvec])
        reduce_max = function("llvm.vector.reduce.fmax.v16f32", f32, [fvec])
        reduce_add = function("llvm.vector.reduce.add.v16i32", i32, [ivec])
        round_half_away = function("llvm.round.v16f32", fvec, [fvec])
        x_p = builder.gep(_data(context, builder, signature, args, 0, f32), [args[1]])
        tiles_p = builder.gep(_data(context, builder, signature, args, 2), [args[3]])
        halves = []
        for h in range(2):
            address = builder.bitcast(builder.gep(x_p, [i32(ROWS * h)]), fvec.as_pointer())
            halves.append(builder.load(address, align=4))
        magnitudes = builder.call(maximum, [builder.call(fabs, [v]) for v in halves])
        largest = builder.call(reduce_max, [magnitudes], fastmath=("nnan",))  # NaN: below
        d = builder.fdiv(largest, f32(127.0 * ratio))
        # maxnum passes over NaN: a block that holds one gets d = NaN, so its products are NaN
        nan = builder.or_(*(builder.fcmp_unordered("uno", v, v) for v in halves))
        reduce_or = function("llvm.vector.reduce.or.v16i1", ir.IntType(1), [nan.type])
        d = builder.select(builder.call(reduce_or, [nan]), f32(float("nan")), d)
        d1 = builder.fmul(d, f32(ratio))
        positive = builder.fcmp_ordered(">", d, f32(0.0))
        inverse1 = builder.select(positive, builder.fdiv(f32(1.0), d1), f32(0.0))
        inverse = builder.select(positive, builder.fdiv(f32(1.0), d), f32(0.0))
        low, high = splat(f32(-127.0)), splat(f32(127.0))
        total = ivec([0] * ROWS)
        for h, values in enumerate(halves):
            q1 = builder.call(round_half_away, [builder.fmul(values, splat(inverse1))])
            left = builder.fsub(values, builder.fmul(splat(d1), q1))
            q2 = builder.call(round_half_away, [builder.fmul(left, splat(inverse))])
            q2 = builder.call(minimum, [builder.call(maximum, [q2, low]), high])
            for part, q in enumerate(() if wide else (q1, q2)):
                at = builder.gep(tiles_p, [i32(BLOCK * part + ROWS * h)])
                at = builder.bitcast(at, bvec.as_pointer())
                builder.store(builder.fptosi(q, bvec), at, align=1)
            first = builder.mul(builder.fptosi(q1, ivec), ivec([ratio] * ROWS))
            combined = builder.add(first, builder.fptosi(q2, ivec))
            total = builder.add(total, combined)
            if wide:  # columns 16 h.. as int16, each 4 in SIX_WIDE_ORDER
                hvec = ir.VectorType(ir.IntType(16), ROWS)
                order = [4 * (p // 4) + SIX_WIDE_ORDER[p % 4] for p in range(ROWS)]
                value = builder.shuffle_vector(builder.trunc(combined, hvec), ir.Constant(
                    hvec, None), ir.Constant(ir.VectorType(i32, ROWS), order))  # fmt: skip
                at = builder.bitcast(builder.gep(tiles_p, [i32(2 * ROWS * h)]), hvec.as_pointer())
                builder.store(value, at, align=1)
        total = builder.call(reduce_add, [total])
        store(d, 4, args[7], f32)
        store(total, 5, args[7], i32)
        store(builder.fmul(d, builder.sitofp(total, f32)), 6, args[7], f32)
        return context.get_dummy_value()

    return types.void(x, x_at, tiles, t_at, x_scales, x_sums, x_terms, s_at), codegen


_quantize_254, _quantize_16 = _make_quantize_block(PART_RATIO), _make_quantize_block(NIBBLE_RATIO)
_quantize_127 = _make_quantize_block(SIX_RATIO)
_quantize_wide = _make_quantize_block(SIX_RATIO, True)


@numba.njit(cache=True)
def quantize_rows(x, x_q, x_scales, x_sums, x_terms, nibbles):  # pragma: no cover - compiled
    """`quantize_rows_by` with the parts' ratio of Q4_1 weights (`nibbles`, `NIBBLE_RATIO`) or
    of Q8_0 ones (`PART_RATIO`)."""
    ratio = NIBBLE_RATIO if nibbles else PART_RATIO
    quantize_rows_by(x, x_q, x_scales, x_sums, x_terms, ratio)


@numba.njit(cache=True)
def quantize_rows_by(x, x_q, x_scales, x_sums, x_terms, ratio):  # pragma: no cover - compiled
    """Quantize each row of x by blocks of 32 in two int8 parts on one scale (the module
    docstring; `_make_quantize_block`), laid out for the tile loads, the parts' ratio `ratio`
    (`NIBBLE_RATIO`, `SIX_RATIO`, else `PART_RATIO`).  O(B k).

    x float32 [B, k] (C-contiguous); x_q int8 [G, k/32, 16, 64] (group of 16 rows, block, row
    in the group, the first part's 32 bytes then the second's: a tile of 16 rows of a block is
    1 KB of contiguous bytes, and a group's blocks follow one another); x_scales float32 [R,
    k/32], x_sums int32 [R, k/32] and x_terms float32 [R, k/32], R >= B, G >= B / 16, are
    written for rows b < B: d = max |v| / (127 ratio) (0 for a block of zeros), part 0
    round(v / d_1), d_1 = ratio d (rounding half away from zero), part 1 the leftover's
    round(. / d) clipped to -127..127, x_sums = sum(ratio x_1 + x_2) and x_terms = d x_sums.
    """
    batch, k = x.shape
    n_blocks = k // BLOCK
    flat_x, tiles = x.reshape(-1), x_q.reshape(-1)
    scales, sums, terms = x_scales.reshape(-1), x_sums.reshape(-1), x_terms.reshape(-1)
    for row in range(batch):
        group, lane = row // ROWS, row % ROWS
        for block in range(n_blocks):
            at = ((group * n_blocks + block) * ROWS + lane) * X_ROW  # part 0's 32 bytes
            where = row * x_scales.shape[1] + block
            x_at = row * k + block * BLOCK
            if ratio == NIBBLE_RATIO:
                _quantize_16(flat_x, x_at, tiles, at, scales, sums, terms, where)
            elif ratio == SIX_RATIO:
                _quantize_127(flat_x, x_at, tiles, at, scales, sums, terms, where)
            else:
                _quantize_254(flat_x, x_at, tiles, at, scales, sums, terms, where)


@numba.njit(cache=True)
def form_of(words, halves):
    """The word format (`word_tiles.NIBBLES`, `BYTES`, `HALVES`, `FIVE`) of word tiles uint8
    [n_tiles, k/32, tile/16, W, 16, 4]: by W (4, 8, 5), Q8_0's bytes `HALVES` where `halves`."""
    wide = words.shape[3]
    if wide == 4:
        return NIBBLES
    if wide == 5:
        return FIVE
    if wide == 36:  # WORDS[SUPER4] (a dict Numba does not read)
        return SUPER4
    if wide == 52:  # WORDS[SUPER6]
        return SUPER6
    return HALVES if halves else BYTES


@numba.njit(cache=True)
def _quantized(x, groups, rows, form):  # pragma: no cover - compiled
    """x's two int8 parts in fresh arrays (`quantize_rows_by`, the parts' ratio R 16 for Q4_1
    weights (`form` `NIBBLES`, `SUPER4`), 127 for `SUPER6`, else 254) for `groups` groups of 16
    rows and `rows` rows of scales, zero past x's rows; with Q8_0's offsets 128 x_sums
    (`HALVES`: 128 times each half block's sum(254 x_1 + x_2), [rows, 2 k/32], half h of block
    j at 2 j + h; `SUPER6` the same with 32 and R = 127).  -> (x_q,
    x_scales, x_terms, x_offsets). Compiled apart from the parallel kernels: there each
    np.zeros and array expression would be a parallel region of its own, waking the other
    threads (a dozen more wake-ups a product, which at batch 1 cost more than the product)."""
    n_blocks = x.shape[1] // BLOCK
    x_q = np.zeros((groups, n_blocks, ROWS, X_ROW), np.int8)
    x_scales = np.zeros((rows, n_blocks), np.float32)
    x_sums = np.zeros((rows, n_blocks), np.int32)
    x_terms = np.zeros((rows, n_blocks), np.float32)
    ratio = PART_RATIO
    if form in (NIBBLES, SUPER4):
        ratio = NIBBLE_RATIO
    elif form == SUPER6:
        ratio = SIX_RATIO
    quantize_rows_by(x, x_q, x_scales, x_sums, x_terms, ratio)
    if form in (HALVES, SUPER6):
        offset = 128 if form == HALVES else 32
        x_offsets = np.zeros((rows, 2 * n_blocks), np.int32)
        for row in range(min(rows, x.shape[0])):
            for block in range(n_blocks):
                for h in range(2):
                    total = 0
                    for j in range(h * ROWS, (h + 1) * ROWS):
                        first = np.int32(x_q[row // ROWS, block, row % ROWS, j])
                        total += ratio * first + x_q[row // ROWS, block, row % ROWS, BLOCK + j]
                    x_offsets[row, 2 * block + h] = total * offset
        return x_q, x_scales, x_terms, x_offsets
    x_offsets = np.empty_like(x_sums)
    for row in range(rows):
        for block in range(n_blocks):
            x_offsets[row, block] = x_sums[row, block] * np.int32(128)
    return x_q, x_scales, x_terms, x_offsets


@numba.njit(cache=True, parallel=True)
def _amx_matmul(x, scales, coefs, words, out):  # pragma: no cover - compiled
    """x W^T for W in word tiles, x quantized in two int8 parts (`quantize_rows`), the
    integer sums made by AMX tile products (`_group_product`).  O(B n_out k) multiply-adds in
    tile products (Q4_1: one 16 x 16 x 64 a block, both parts; Q8_0: two 16 x 16 x 32, one a
    part; x's rows padded to a multiple of 16), O(B n_out k / 32) float ones; W is read once
    per call.

    x float32 [B, k] (k a multiple of 32); scales float32 [n_tiles, k/32, tile]; coefs: the
    minimums (Q4_1, float32 [n_tiles, k/32, tile]) or the scales again (Q8_0, stored q + 128);
    words uint8 [n_tiles, k/32, tile/16, W, 16, 4] (W = 4: Q4_1 nibbles; W = 8: Q8_0 bytes);
    out float32 [B, n_out] (written, n_out <= n_tiles tile). Returns out. Needs `available()`.
    """
    batch, k = x.shape
    n_tiles, n_blocks, tile = scales.shape
    lane_groups = tile // ROWS
    rows = batch + (-batch) % ROWS  # zero rows pad the last group of x
    nibbles = words.shape[3] == 4
    x_q, x_scales, x_terms, x_offsets = _quantized(x, rows // ROWS, rows, form_of(words, False))
    n_out = out.shape[1]
    flat_words = words.reshape(-1)
    chunk = ROWS * 4 * words.shape[3]  # bytes of one block of 16 output rows
    step = lane_groups * chunk  # bytes of one block of the whole tile
    group = ROWS  # rows of x a tile product serves: 16, or for fewer rows the next power of 2
    while group // 2 >= batch:
        group //= 2
    for t in numba.prange(n_tiles):
        scratch = np.empty(SCRATCH, np.int32)
        totals = np.empty((ROWS, ROWS), np.float32)
        sc_start = t * n_blocks * tile
        groups = min(lane_groups, -(-(n_out - t * tile) // ROWS))  # those with output rows
        _load_config(_config(group, nibbles))
        for first in range(0, batch, group):  # a group of rows of x (in L1) against the tile
            for g in range(groups):  # 16 output rows at a time
                b_start = (t * n_blocks * lane_groups + g) * chunk
                a_start = first * n_blocks * X_ROW  # group first // 16
                a_args = (x_q, a_start, X_ROW, BLOCK, flat_words, b_start, step, n_blocks, x_scales)
                w_args = (first * n_blocks, n_blocks, scales, coefs, sc_start + g * ROWS, tile)
                if nibbles:  # the terms' dtype (float32, int32) is the weights' kind
                    _group_product(group, *a_args, x_terms, *w_args, scratch, totals)
                else:
                    _group_product(group, *a_args, x_offsets, *w_args, scratch, totals)
                column = t * tile + g * ROWS
                for i in range(min(group, batch - first)):  # no views: each one costs
                    for r in range(min(ROWS, n_out - column)):  # two atomic reference-count
                        out[first + i, column + r] = totals[i, r]  # updates
        _release()
    return out


@numba.njit(cache=True, parallel=True)
def _row_kernel(x, scales, coefs, words, out, form):  # pragma: no cover - compiled
    """`_row_matmul` for the word format `form`, compiled for each (a literal: `_row_product`
    emits that format's code alone)."""
    numba.literally(form)
    n_tiles, n_blocks, tile = scales.shape
    lane_groups = tile // ROWS
    n_out = out.shape[1]
    x_q, x_scales, x_terms, x_offsets = _quantized(x, 1, 1, form)  # row 0 of a group
    flat_words, flat_x = words.reshape(-1), x_q.reshape(-1)
    flat_terms, flat_offsets = x_terms.reshape(-1), x_offsets.reshape(-1)
    last_word = flat_words.shape[0]
    chunk = ROWS * 4 * words.shape[3]  # bytes of one block of 16 output rows
    distance = max(PREFETCH_BYTES, PREFETCH_CHUNKS * chunk)
    for t in numba.prange(n_tiles):
        total = np.zeros(tile, np.float32)
        for block in range(n_blocks):
            for g in range(lane_groups):
                w_start = ((t * n_blocks + block) * lane_groups + g) * chunk
                ahead = w_start + distance  # the stream, in memory order, fetched ahead
                if ahead + chunk <= last_word:
                    for line in range(0, chunk, 64):
                        prefetch_l2(flat_words, ahead + line)
                sc_start = (t * n_blocks + block) * tile + g * ROWS
                x_args = (flat_x, block * ROWS * X_ROW, BLOCK, x_scales, flat_terms)
                w_args = (flat_offsets, block, scales, coefs, sc_start, total, g * ROWS)
                _row_product(form, flat_words, w_start, *x_args, *w_args)
        start, end = t * tile, min((t + 1) * tile, n_out)
        if end > start:  # a tile of padding rows alone (a padded even count) writes none
            out[0, start:end] = total[: end - start]
    return out


@numba.njit(cache=True)
def _row_matmul(x, scales, coefs, words, out):  # pragma: no cover - compiled
    """`amx_matmul` for x of one row, in AVX-512 VNNI (`_make_row_product`): the same
    quantization, integer sums and float operations in the same order, so the same results
    bit for bit, without AMX's 16-row tiles (15 of whose rows one row would waste).
    O(n_out k) integer multiply-adds; W read once. Arguments as `amx_matmul`'s (x [1, k]), and
    words may also be `FIVE`'s (W = 5: coefs the minimums)."""
    if words.shape[3] == 4:
        return _row_kernel(x, scales, coefs, words, out, NIBBLES)
    if words.shape[3] == 5:
        return _row_kernel(x, scales, coefs, words, out, FIVE)
    if words.shape[3] == 36:  # WORDS[SUPER4]: a literal here
        return _row_kernel(x, scales, coefs, words, out, SUPER4)
    if words.shape[3] == 52:  # WORDS[SUPER6]
        return _row_kernel(x, scales, coefs, words, out, SUPER6)
    return _row_kernel(x, scales, coefs, words, out, BYTES)


@numba.njit(cache=True)
def _row_halves_matmul(x, scales, coefs, words, out):  # pragma: no cover - compiled
    """`_row_matmul` of Q8_0's words with a scale per half block (`HALVES`: scales the first
    halves', coefs the second halves')."""
    return _row_kernel(x, scales, coefs, words, out, HALVES)


def _check(x, scales, coefs, words, out, one_row: bool) -> None:
    """The arguments of `amx_matmul` / `row_matmul` as their kernels need them, which index
    without bounds checks and run tile instructions: else an error naming what is wrong.

    Raises:
        RuntimeError: AMX is not there or Linux refused it (`granted()`).
        ValueError: an argument of the wrong dtype, layout or shape.
    """
    if not granted():
        raise RuntimeError("the AMX kernels need a CPU with AMX-INT8 and Linux's permission")
    arrays = {"x": x, "scales": scales, "coefs": coefs, "words": words, "out": out}
    for name, array in arrays.items():
        dtype = np.uint8 if name == "words" else np.float32
        if not (
            isinstance(array, np.ndarray) and array.dtype == dtype and array.flags.c_contiguous
        ):
            raise ValueError(f"{name} must be a C-contiguous {np.dtype(dtype)} array")
    if scales.ndim != 3 or scales.shape[2] % ROWS or coefs.shape != scales.shape:
        raise ValueError(
            f"scales and coefs must be [n_tiles, k/32, tile], tile a multiple of {ROWS}"
        )
    n_tiles, n_blocks, tile = scales.shape
    if words.shape not in [(n_tiles, n_blocks, tile // ROWS, w, ROWS, 4) for w in (4, 8)]:
        raise ValueError(f"words must be [{n_tiles}, {n_blocks}, {tile // ROWS}, 4 or 8, 16, 4]")
    if x.ndim != 2 or x.shape[1] != n_blocks * BLOCK or x.shape[0] < 1 or (one_row and len(x) != 1):
        rows = "1" if one_row else "B >= 1"
        raise ValueError(f"x must be [{rows}, {n_blocks * BLOCK}], got shape {x.shape}")
    if out.ndim != 2 or out.shape[0] != x.shape[0] or not 1 <= out.shape[1] <= n_tiles * tile:
        raise ValueError(f"out must be [{x.shape[0]}, n_out <= {n_tiles * tile}], got {out.shape}")


def amx_matmul(x, scales, coefs, words, out):
    """x W^T on AMX tiles (`_amx_matmul`), after checking the arguments (`_check`).

    x float32 [B, k] (C-contiguous, k a multiple of 32); scales float32 [n_tiles, k/32, tile];
    coefs: the minimums (Q4_1) or the scales again (Q8_0, stored q + 128); words uint8
    [n_tiles, k/32, tile/16, W, 16, 4] (W = 4: Q4_1 nibbles; W = 8: Q8_0 bytes); out float32
    [B, n_out], n_out <= n_tiles tile (written). Returns out. A NaN in a block of x makes its
    row's outputs NaN.

    Raises:
        RuntimeError, ValueError: see `_check`.
    """
    _check(x, scales, coefs, words, out, one_row=False)
    return _amx_matmul(x, scales, coefs, words, out)


def row_matmul(x, scales, coefs, words, out):
    """`amx_matmul` for x of one row, in AVX-512 VNNI (`_row_matmul`): the same results bit for
    bit. Arguments as `amx_matmul`'s, x [1, k].

    Raises:
        RuntimeError, ValueError: see `_check`.
    """
    _check(x, scales, coefs, words, out, one_row=True)
    return _row_matmul(x, scales, coefs, words, out)


def unchecked_matmul(x, scales, coefs, words, out):
    """`amx_matmul` (one row: `row_matmul`) without the argument checks, for a caller whose
    arguments are right by construction (`corral.model.quant.TiledMatrix` lays the weights out
    itself and checks x; the checks are a noticeable share of a batch-1 decode step). Wrong
    arguments crash the process, where `amx_matmul` raises. Arguments as `amx_matmul`'s; needs
    `available()`. Returns out."""
    if x.shape[0] == 1:
        return _row_matmul(x, scales, coefs, words, out)
    return _amx_matmul(x, scales, coefs, words, out)


KERNELS = (_amx_matmul, _row_matmul)
"""The compiled kernels behind `amx_matmul` and `row_matmul` (for `corral.kernels.jit_cache`)."""

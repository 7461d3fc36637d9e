"""Weights kept in a GGUF's own quantization blocks (Q4_1, Q8_0), read as they are and laid out
for the block kernels (`TiledMatrix`), whose `matmul` computes x W^T the way the model's
`ComputePlan` says (docs/numerics.md, "Block products"):

    {"layers": [L x {"w_qkv", "w_o", "w_gate_up", "w_down": TiledMatrix}], "lm_head": TiledMatrix}

The weights are the float32 path's own (its weights are these blocks dequantized), so on float32
activations the two differ only in rounding order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from corral.kernels.compute import kquant_layout, quant, quant_amx, quant_int8, quant_rows
from corral.kernels.compute.plan import ComputePlan
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError

QUANTIZED_MAX_ROWS = 64
"""The most rows of x (tokens in a pass) computed from the blocks, the LM head's included, unless
the plan's `every_pass`; more go to float32 BLAS GEMMs (docs/numerics.md)."""

ACTIVATION_PARTS = 2
"""The int8 parts x is quantized in on VNNI for the layers' matrices (docs/numerics.md)."""

HEAD_ACTIVATION_PARTS = 3
"""The parts for the LM head, whose products are the logits themselves (docs/numerics.md)."""

SUPPORTED = ("Q4_1", "Q8_0")
"""The GGUF block types the kernels compute on."""


@dataclass(frozen=True, eq=False)
class BlockMatrix:
    """A weight matrix W [n_out, k] in Q4_1 or Q8_0 blocks of 32 along k (or "Q8_16": Q8_0's
    quants with a scale per 16 weights, GGUF's Q6_K rewritten by `kquant_layout.as_blocks`;
    "Q5_0": Q4_1's with a fifth bit, GGUF's Q5_0 rewritten, minimum -16 scale).

    Attributes:
        kind: "Q4_1", "Q8_0", "Q8_16" or "Q5_0".
        scales: float32 [n_out, k/32], each block's scale (ggml's float16, widened exactly;
            Q8_16: the scale of the block's first 16 weights).
        minimums: float32 [n_out, k/32] for Q4_1 and Q5_0 (w = scale q + minimum); None for
            Q8_0; for Q8_16 the scale of the block's last 16 weights.
        quants: uint8 [n_out, k/2] (Q4_1: low nibble of byte j is element j of its block, high
            nibble element j + 16) or int8 [n_out, k] (Q8_0, Q8_16); Q5_0: uint8 [n_out,
            k 20/32], a block's 16 bytes as Q4_1's then 4 of fifth bits (bit j: element j's).
    """

    kind: str
    scales: np.ndarray
    minimums: np.ndarray | None
    quants: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """(n_out, k)."""
        return self.scales.shape[0], self.scales.shape[1] * quant.BLOCK

    @property
    def nbytes(self) -> int:
        """Bytes a product reads: quants, scales and minimums."""
        extra = 0 if self.minimums is None else self.minimums.nbytes
        return self.quants.nbytes + self.scales.nbytes + extra

    def tiled(
        self,
        plan: ComputePlan = ComputePlan(),  # noqa: B008 - frozen
        words_only: bool = False,
    ) -> TiledMatrix:
        """The same blocks in the kernels' tiled layout (`kernels.quant.tile_rows`), computed on
        as `plan` says; with `words_only`, the word tiles alone (`TiledMatrix.quants` None: one
        copy of the quants, every float32 pass on `quant_rows`)."""
        n_out, k = self.shape
        n_tiles, tile = words_tile_shape(n_out) if words_only else quant.tile_shape(n_out)
        minimums = None
        if self.minimums is not None:
            minimums = quant.tile_rows(self.minimums, n_tiles, tile)
        words = word_tiles(self.quants, self.kind, n_tiles, tile)
        return TiledMatrix(
            self.kind,
            n_out,
            k,
            quant.tile_rows(self.scales, n_tiles, tile),
            minimums,
            None if words_only else quant.tile_rows(self.quants, n_tiles, tile),
            words,
            plan,
        )

    def dequantize(self) -> np.ndarray:
        """W in float32.  -> float32 [n_out, k] (scale q + minimum, ggml's formula)."""
        n_out, k = self.shape
        if self.kind == "Q8_0":
            q = self.quants.astype(np.float32).reshape(n_out, -1, quant.BLOCK)
            return (q * self.scales[:, :, None]).reshape(n_out, k)
        if self.kind == "Q5_0":
            blocks = self.quants.reshape(n_out, -1, 20)
            bits = np.ascontiguousarray(blocks[..., 16:]).view("<u4")
            fifth = ((bits >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8) << 4
            nibbles = blocks[..., :16]
            q = (np.concatenate([nibbles & 15, nibbles >> 4], axis=-1) | fifth).astype(np.float32)
            return (q * self.scales[:, :, None] + self.minimums[:, :, None]).reshape(n_out, k)
        if self.kind == "Q8_16":
            q = self.quants.astype(np.float32).reshape(n_out, -1, 2, quant.BLOCK // 2)
            halves = np.stack([self.scales, self.minimums], axis=-1)[..., None]
            return (q * halves).reshape(n_out, k)
        blocks = self.quants.reshape(n_out, -1, quant.BLOCK // 2)
        q = np.concatenate([blocks & 15, blocks >> 4], axis=-1).astype(np.float32)
        return (q * self.scales[:, :, None] + self.minimums[:, :, None]).reshape(n_out, k)

    @staticmethod
    def from_blocks(kind: str, raw: np.ndarray) -> BlockMatrix:
        """Unpack a GGUF tensor's raw blocks.  uint8 [n_out, bytes per row] -> BlockMatrix

        Raises:
            ValueError: a kind other than Q4_1 / Q8_0, or rows that are not whole blocks.
        """
        size = {"Q4_1": 20, "Q8_0": 34}.get(kind)
        if size is None:
            raise ValueError(f"block type {kind} is not one of {', '.join(SUPPORTED)}")
        if raw.ndim != 2 or raw.shape[1] % size:
            raise ValueError(f"a {kind} tensor's rows must be whole {size}-byte blocks")
        blocks = np.ascontiguousarray(raw).reshape(raw.shape[0], -1, size)

        def half(start: int) -> np.ndarray:  # a float16 field of every block, widened
            field = np.ascontiguousarray(blocks[:, :, start : start + 2]).view(np.float16)
            return field[:, :, 0].astype(np.float32)

        if kind == "Q8_0":
            quants = np.ascontiguousarray(blocks[:, :, 2:]).view(np.int8)
            return BlockMatrix(kind, half(0), None, quants.reshape(raw.shape[0], -1))
        quants = np.ascontiguousarray(blocks[:, :, 4:]).reshape(raw.shape[0], -1)
        return BlockMatrix(kind, half(0), half(2), quants)

    @staticmethod
    def stack(matrices: list[BlockMatrix]) -> BlockMatrix:
        """The matrices' rows one after another (same kind and k)."""
        minimums = None
        if matrices[0].minimums is not None:
            minimums = np.concatenate([m.minimums for m in matrices])
        return BlockMatrix(
            matrices[0].kind,
            np.concatenate([m.scales for m in matrices]),
            minimums,
            np.concatenate([m.quants for m in matrices]),
        )

    def permute_rows(self, order: np.ndarray) -> BlockMatrix:
        """The matrix with rows taken in `order` (int [n_out])."""
        minimums = None if self.minimums is None else self.minimums[order]
        return BlockMatrix(self.kind, self.scales[order], minimums, self.quants[order])


def words_tile_shape(n_out: int) -> tuple[int, int]:
    """(n_tiles, tile) of a matrix kept as word tiles alone (`BlockMatrix.tiled`'s
    `words_only`): `kernels.compute.quant.tile_shape`'s tiles of at most `quant.MAX_TILE` rows,
    but at least two where n_out > 64 and an even number where more than one, so that two
    threads share every product evenly (one row of x: a product streams the matrix, and one
    tile in three left to one thread took a third longer).

    Raises:
        ValueError: n_out < 1.
    """
    if n_out < 1:
        raise ValueError(f"a matrix needs at least one output row, got {n_out}")
    n_tiles = max(-(-n_out // quant.MAX_TILE), 2 if n_out > 64 else 1)
    n_tiles += n_tiles % 2 if n_tiles > 1 else 0
    rows = -(-n_out // n_tiles)  # a tile's rows, then rounded up to a multiple of 16
    return n_tiles, -(-rows // 16) * 16


def word_tiles(quants: np.ndarray, kind: str, n_tiles: int, tile: int) -> np.ndarray:
    """`BlockMatrix.quants` in `quant_int8.word_tiles`' layout: uint8 [n_tiles, k/32, tile/16,
    W, 16, 4], W = 4 (Q4_1), 8 (Q8_0, Q8_16) or 5 (Q5_0: Q4_1's 4 words, then the fifth bits;
    zero rows pad)."""
    if kind != "Q5_0":
        return quant_int8.word_tiles(quants, "Q4_1" if kind == "Q4_1" else "Q8_0", n_tiles, tile)
    n_blocks = quants.shape[1] // 20
    padded = np.zeros((n_tiles * tile, quants.shape[1]), np.uint8)
    padded[: quants.shape[0]] = quants
    words = padded.reshape(n_tiles, tile // 16, 16, n_blocks, 5, 4)
    return np.ascontiguousarray(words.transpose(0, 3, 1, 4, 2, 5))


SUPER_KINDS = ("Q4_K", "Q6_K")
"""The K-quants kept in their own bytes on VNNI (`super_tiled`)."""


@functools.cache
def keeps_super_blocks(kind: str) -> bool:
    """Whether a GGUF's `kind` (Q4_K, Q6_K) is loaded in its own bytes (`super_tiled`) on this
    host: where the VNNI kernels run (`quant_int8.available()`), which alone read that form,
    but for Q4_K not where AMX's kernels run (`quant_amx.available()`), whose tiles take the
    Q4_1 words of `kquant_layout.as_blocks`. Elsewhere the float32 kernels read `as_blocks`'
    form; a plan of float32 activations on a VNNI host expands the super blocks a few tiles
    at a time (`expanded`)."""
    if kind not in SUPER_KINDS or not quant_int8.available():
        return False
    return kind == "Q6_K" or not quant_amx.available()


def place_tiles(arrays: list, pieces: tuple, n_tiles: int, first: int) -> list:
    """Copy a piece of tiles into the matrix's arrays from tile `first` on, allocating the
    arrays (`n_tiles` tiles each, the pieces' other dimensions and dtypes) at the first piece.
    pieces: arrays [count, ...] or None (a field the kind lacks). -> the arrays"""
    if not arrays:
        arrays = [None if a is None else np.empty((n_tiles, *a.shape[1:]), a.dtype)
                  for a in pieces]  # fmt: skip
    for whole, part in zip(arrays, pieces, strict=True):
        if part is not None:
            whole[first : first + len(part)] = part
    return arrays


def super_tiled(raw: np.ndarray, kind: str, piece_rows: int = 8192) -> TiledMatrix:
    """A Q4_K / Q6_K matrix in the super-block word tiles of the VNNI kernels
    (`kquant_layout.as_super_blocks`, `quant_amx.SUPER4` / `SUPER6`): about the file's own
    bytes (Q4_K 4.75 bits a weight, Q6_K 6.6), where `kquant_layout.as_blocks` takes 6 and 10.
    Converted about `piece_rows` rows (whole tiles) at a time, which bounds the temporary
    memory.  uint8 [n_out, bytes per row] -> TiledMatrix of `kind`: scales d, minimums -dmin
    (Q4_K) or None, float32 [n_tiles, k/256, tile]; words uint8 [n_tiles, k/256, tile/16, W,
    16, 4] (`kquant_layout.SUPER_WORDS`), zero rows padding.

    Raises:
        ValueError: as `kquant_layout.as_super_blocks`.
    """
    n_out = raw.shape[0]
    n_tiles, tile = words_tile_shape(max(n_out, 1))
    step = max(1, piece_rows // tile)
    arrays: list = []
    for first in range(0, n_tiles, step):
        count = min(step, n_tiles - first)
        d, coefs, rows = kquant_layout.as_super_blocks(raw[first * tile : (first + count) * tile],
                                                       kind)  # fmt: skip
        n_super, row_bytes = rows.shape[1:]
        padded = np.zeros((count * tile, n_super, row_bytes), np.uint8)
        padded[: rows.shape[0]] = rows
        words = padded.reshape(count, tile // 16, 16, n_super, row_bytes // 4, 4)
        pieces = (
            quant.tile_rows(d, count, tile),
            None if coefs is None else quant.tile_rows(coefs, count, tile),
            words.transpose(0, 3, 1, 4, 2, 5),
        )
        arrays = place_tiles(arrays, pieces, n_tiles, first)
    k = arrays[0].shape[1] * 256
    return TiledMatrix(kind, n_out, k, arrays[0], arrays[1], None, arrays[2])


def expanded(matrix: TiledMatrix, first: int, end: int) -> tuple:
    """Tiles first..end-1 of a super-block matrix (`super_tiled`) in the form of
    `kquant_layout.as_blocks` (Q4_K as Q4_1's words, Q6_K as `HALVES`), for the float32
    kernels of `quant_rows`: the same float32 weights.  -> (scales, coefs, words) of
    `quant_rows.float_matmul`'s arguments, [end - first] tiles."""
    words = matrix.words[first:end]
    n_tiles, n_super, groups = words.shape[:3]
    d = matrix.scales[first:end][:, :, None, :]
    tile = groups * 16

    def bytes_of(start: int, stop: int) -> np.ndarray:  # lane bytes of words start..stop-1
        lanes = words[:, :, :, start:stop].transpose(0, 1, 3, 5, 2, 4)  # [t, b, w, j, g, r]
        return lanes.reshape(n_tiles, n_super, -1, tile).astype(np.float32)

    if matrix.kind == "Q4_K":
        scales = (bytes_of(32, 34) * d).reshape(n_tiles, -1, tile)
        coefs = bytes_of(34, 36) * matrix.minimums[first:end][:, :, None, :]
        nibbles = words[:, :, :, :32].reshape(n_tiles, n_super, groups, 8, 4, 16, 4)
        plain = nibbles.transpose(0, 1, 3, 2, 4, 5, 6).reshape(n_tiles, -1, groups, 4, 16, 4)
        return scales, coefs.reshape(n_tiles, -1, tile), np.ascontiguousarray(plain)
    sc = bytes_of(48, 52).astype(np.uint8).view(np.int8).astype(np.float32) * d
    sc = sc.reshape(n_tiles, n_super, 8, 2, tile)
    sub = words[:, :, :, :48].reshape(n_tiles, n_super, groups, 8, 6, 16, 4)
    low, high = sub[:, :, :, :, :4], sub[:, :, :, :, 4:]  # [t, b, g, i, w or half, r, j]
    shifts = (2 * np.arange(4, dtype=np.uint8))[:, None, None]
    halves = []
    for h in range(2):
        nibble = (low >> (4 * h)) & 15
        top = (high[:, :, :, :, h : h + 1] >> shifts) & 3
        halves.append(nibble | (top << 4))
    u = np.concatenate(halves, axis=4) + np.uint8(96)  # q + 128, q = u - 32
    plain = u.transpose(0, 1, 3, 2, 4, 5, 6).reshape(n_tiles, -1, groups, 8, 16, 4)
    scales = np.ascontiguousarray(sc[:, :, :, 0].reshape(n_tiles, -1, tile))
    coefs = np.ascontiguousarray(sc[:, :, :, 1].reshape(n_tiles, -1, tile))
    return scales, coefs, np.ascontiguousarray(plain)


@dataclass(frozen=True, eq=False)
class TiledMatrix:
    """A weight matrix W [n_out, k] in Q4_1 or Q8_0 blocks, laid out for the kernels: output
    rows in `n_tiles` tiles of `tile` rows (zero rows pad the last), each tile column by column
    (`kernels.quant`'s module docstring).

    Attributes:
        kind: "Q4_1", "Q8_0", "Q8_16" or "Q5_0" (`BlockMatrix`; the last two only without
            `quants`), or "Q4_K" / "Q6_K" in super blocks (`super_tiled`: scales and minimums
            [n_tiles, k/256, tile], d and -dmin; words alone).
        n_out, k: W's shape.
        scales: float32 [n_tiles, k/32, tile].
        minimums: float32 [n_tiles, k/32, tile] for Q4_1; None for Q8_0.
        quants: uint8 [n_tiles, k/2, tile] (Q4_1) or int8 [n_tiles, k, tile] (Q8_0) for the
            one-row streaming kernels of `kernels.compute.quant`; None where the words alone
            are kept (`BlockMatrix.tiled`'s `words_only`: one row goes to `quant_rows` too).
        words: the same quants in `kernels.quant_int8`'s word tiles (uint8 [n_tiles, k/32,
            tile/16, W, 16, 4]) for the kernels of passes of several rows (`kernels.quant_rows`)
            and the int8-activation kernels.
        plan: the `ComputePlan` whose kernels `matmul` calls.
    """

    kind: str
    n_out: int
    k: int
    scales: np.ndarray
    minimums: np.ndarray | None
    quants: np.ndarray | None
    words: np.ndarray
    plan: ComputePlan = ComputePlan()  # noqa: RUF009 - frozen

    @property
    def shape(self) -> tuple[int, int]:
        """(n_out, k)."""
        return self.n_out, self.k

    def takes(self, rows: int) -> bool:
        """Whether a pass of `rows` rows of x reads these blocks (`llama.linear`,
        `llama.lm_head`), not the float32 GEMM: at most `QUANTIZED_MAX_ROWS`, or any number
        under the plan's `every_pass`."""
        return rows <= QUANTIZED_MAX_ROWS or self.plan.every_pass

    @property
    def nbytes(self) -> int:
        """Bytes a product reads: quants (or words), scales and minimums (padding rows
        included)."""
        extra = 0 if self.minimums is None else self.minimums.nbytes
        quants = self.words if self.quants is None else self.quants
        return quants.nbytes + self.scales.nbytes + extra

    def matmul(self, x: np.ndarray, parts: int = ACTIVATION_PARTS) -> np.ndarray:
        """x W^T.  float32 [B, k] -> float32 [B, n_out] (float32 accumulation), by the kernel
        of the plan's `activations` (`MATMULS`): "int8-amx", x quantized by blocks in two int8
        parts on one scale, on AMX tiles (one row: the same sums in VNNI; `parts` unused);
        "int8-vnni", x quantized the same way, on AVX-512 VNNI (`quant_int8.paired_matmul`;
        `parts` unused); "float32", several rows through `quant_rows` (each weight unpacked once
        for a group of up to 16 rows), one row through the one-row streaming kernels of
        `kernels.compute.quant` (a Q4_1 matrix's to `quant_rows` where the plan's
        `one_row_q4_1_in_registers`: the same sums bit for bit). A matrix without `quants`
        (`BlockMatrix.tiled`'s `words_only`: K-quants rewritten) computes likewise, its
        float32 passes through `quant_rows` for every number of rows; "int8-vnni" takes every
        word format (Q4_1, Q8_0, Q5_0, Q8_16, Q4_K and Q6_K's super blocks), and on "int8-amx"
        the formats AMX's kernels lack (Q5_0, Q8_16, the super blocks) go to VNNI's (to
        float32 where VNNI does not run). On float32 the super blocks are expanded a few
        tiles at a time (`expanded`).

        Raises:
            ValueError: x is not two-dimensional with k columns, or parts < 1.
        """
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.k:
            raise ValueError(f"x must be [B, {self.k}], got shape {x.shape}")
        if parts < 1:
            raise ValueError(f"x is quantized in at least one part, got parts={parts}")
        return MATMULS[self.activations](self, x, parts)

    @property
    def activations(self) -> str:
        """The activations `matmul` computes on (a key of `MATMULS`): the plan's, but Q5_0 and
        Q8_16 under "int8-amx" on "int8-vnni" (or "float32" where VNNI does not run)."""
        return _activations(self.kind, self.plan.activations)


@functools.cache
def _activations(kind: str, planned: str) -> str:
    """The activations a matrix of `kind` computes on under a plan's `planned` ones: those,
    but the formats AMX's kernels lack (Q5_0, Q8_16) on VNNI under "int8-amx" (float32 where
    VNNI does not run either)."""
    if planned == "int8-amx" and kind in ("Q5_0", "Q8_16", *SUPER_KINDS):
        return "int8-vnni" if quant_int8.available() else "float32"
    return planned


def _amx_matmul(matrix: TiledMatrix, x: np.ndarray, parts: int) -> np.ndarray:
    """`TiledMatrix.matmul` on AMX tiles (`quant_amx.unchecked_matmul`: the layout is right by
    construction)."""
    coefs = matrix.minimums if matrix.kind == "Q4_1" else matrix.scales
    out = np.empty((x.shape[0], matrix.n_out), np.float32)
    return quant_amx.unchecked_matmul(x, matrix.scales, coefs, matrix.words, out)


def _vnni_matmul(matrix: TiledMatrix, x: np.ndarray, parts: int) -> np.ndarray:
    """`TiledMatrix.matmul` on AVX-512 VNNI (`quant_int8.paired_matmul`, every word format;
    `parts` unused)."""
    coefs = matrix.scales if matrix.minimums is None else matrix.minimums
    out = np.empty((x.shape[0], matrix.n_out), np.float32)
    halves = matrix.kind == "Q8_16"
    return quant_int8.paired_matmul(x, matrix.scales, coefs, matrix.words, out, halves)


def _float_matmul(matrix: TiledMatrix, x: np.ndarray, parts: int) -> np.ndarray:
    """`TiledMatrix.matmul` on float32 activations (`parts` unused)."""
    rows, plan = x.shape[0], matrix.plan
    if matrix.kind in SUPER_KINDS:  # as_blocks' form a few tiles at a time
        out = np.empty((rows, matrix.n_out), np.float32)
        n_tiles, _, tile = matrix.scales.shape
        kernels = quant_rows.HALVES_MATMUL if matrix.kind == "Q6_K" else quant_rows.FLOAT_MATMUL
        step = max(1, EXPAND_ROWS // tile)
        for first in range(0, n_tiles, step):
            end = min(first + step, n_tiles)
            columns = slice(first * tile, min(end * tile, matrix.n_out))
            part = np.empty((rows, columns.stop - columns.start), np.float32)
            out[:, columns] = kernels[plan.lanes](x, *expanded(matrix, first, end), part)
        return out
    in_registers = plan.one_row_q4_1_in_registers and matrix.kind == "Q4_1"
    if rows > 1 or in_registers or matrix.quants is None or matrix.kind in ("Q8_16", "Q5_0"):
        coefs = matrix.scales if matrix.minimums is None else matrix.minimums
        out = np.empty((rows, matrix.n_out), np.float32)
        kernels = quant_rows.HALVES_MATMUL if matrix.kind == "Q8_16" else quant_rows.FLOAT_MATMUL
        kernel = kernels[plan.lanes]
        return kernel(x, matrix.scales, coefs, matrix.words, out)
    n_tiles, _, tile = matrix.scales.shape
    out = np.empty((rows, n_tiles * tile), np.float32)
    if matrix.kind == "Q4_1":
        sums = quant.block_sums(x)
        quant.q4_1_matmul(x, sums, matrix.scales, matrix.minimums, matrix.quants, out)
    else:
        quant.q8_0_matmul(x, matrix.scales, matrix.quants, out)
    return np.ascontiguousarray(out[:, : matrix.n_out])


EXPAND_ROWS = 1024
"""About the most output rows of a super-block matrix (`super_tiled`) that a float32 product
expands at once into `as_blocks`' form (`expanded`): the float32 kernels of `quant_rows` do not
read the super-block words, so that form is built on the fly, a few tiles at a time."""

MATMULS = {"int8-amx": _amx_matmul, "int8-vnni": _vnni_matmul, "float32": _float_matmul}
"""`TiledMatrix.matmul`'s kernels by the plan's `activations`: (matrix, x float32 [B, k] C-order,
parts) -> float32 [B, n_out]."""


def packed(matrices: list[TiledMatrix]) -> list[TiledMatrix]:
    """The same matrices with their arrays copied into one allocation, each 64-byte aligned (one
    allocation of 4 MB or more gets transparent huge pages: fewer TLB misses; docs/numerics.md,
    "Block products").  -> [TiledMatrix]"""
    fields = ("scales", "minimums", "quants", "words")
    arrays = [getattr(m, f) for m in matrices for f in fields if getattr(m, f) is not None]
    arena = np.empty(sum(-(-a.nbytes // 64) * 64 for a in arrays) + 64, np.uint8)
    at = -arena.ctypes.data % 64  # the first 64-byte boundary
    copies = {}
    for array in arrays:
        view = arena[at : at + array.nbytes].view(array.dtype).reshape(array.shape)
        view[...] = array
        copies[id(array)] = view
        at += -(-array.nbytes // 64) * 64
    return [
        replace(m, **{f: copies[id(getattr(m, f))] for f in fields if getattr(m, f) is not None})
        for m in matrices
    ]


def unpermute_order(n_rows: int, n_heads: int) -> np.ndarray:
    """The row order that undoes llama.cpp's q/k permutation (as `weights.unpermute_rows`):
    row i of the result is row order[i] of the GGUF tensor.  -> int64 [n_rows]"""
    return np.arange(n_rows).reshape(n_heads, n_rows // n_heads // 2, 2).swapaxes(1, 2).ravel()


def quantized_layers(
    gguf_path: str | Path,
    config: LlamaConfig,
    plan: ComputePlan = ComputePlan(),  # noqa: B008 - frozen
) -> dict | None:
    """The block-quantized matrices of a Llama GGUF, laid out as the forward pass uses them and
    computed on as `plan` says; None when a matrix is in a block type the kernels lack (the
    float32 path then serves).

    Returns:
        {"layers": [L x {"w_qkv": [(Hq + 2 Hkv) hd, d], "w_o": [d, Hq hd],
        "w_gate_up": [2F, d], "w_down": [d, F]}], "lm_head": [V, d]}, each a `TiledMatrix`
        (shapes [n_out, k]); q/k/v and gate/up stacked in the float32 path's order. When the
        head is Q8_0, also "lm_head_rows": the head's `BlockMatrix` in rows (the masked LM
        head's chosen rows, `kernels.quant.q8_0_chosen_rows`; 32 MB for SmolLM2's 49,152 rows).

    Raises:
        ModelLoadError: naming the file, if it is unreadable or lacks a tensor.
    """
    import gguf  # deferred: only quantized loading reads GGUF tensors

    gguf_path = Path(gguf_path)
    try:
        reader = gguf.GGUFReader(gguf_path)
    except Exception as error:
        raise ModelLoadError(gguf_path, f"not a readable GGUF file: {error}") from error
    tensors = {tensor.name: tensor for tensor in reader.tensors}

    def matrix(name: str, heads: int | None = None) -> BlockMatrix | None:
        tensor = tensors.get(name)
        if tensor is None:
            raise ModelLoadError(gguf_path, f"tensor {name!r} is missing")
        kind = tensor.tensor_type.name
        if kind not in SUPPORTED:
            return None
        block = BlockMatrix.from_blocks(kind, np.asarray(tensor.data))
        if heads is None:
            return block
        return block.permute_rows(unpermute_order(block.shape[0], heads))

    def stacked(*parts: BlockMatrix | None) -> BlockMatrix | None:
        if any(part is None for part in parts) or len({part.kind for part in parts}) != 1:
            return None
        return BlockMatrix.stack(list(parts))

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"blk.{i}."
        layer = {
            "w_qkv": stacked(
                matrix(p + "attn_q.weight", config.num_attention_heads),
                matrix(p + "attn_k.weight", config.num_key_value_heads),
                matrix(p + "attn_v.weight"),
            ),
            "w_o": matrix(p + "attn_output.weight"),
            "w_gate_up": stacked(matrix(p + "ffn_gate.weight"), matrix(p + "ffn_up.weight")),
            "w_down": matrix(p + "ffn_down.weight"),
        }
        if any(value is None for value in layer.values()):
            return None
        layers.append({name: value.tiled(plan) for name, value in layer.items()})
    head = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    lm_head = matrix(head)
    if lm_head is None:
        return None
    names = list(layers[0])
    every = packed([layer[name] for layer in layers for name in names] + [lm_head.tiled(plan)])
    layers = [dict(zip(names, every[i * len(names) : (i + 1) * len(names)], strict=True))
              for i in range(len(layers))]  # fmt: skip
    out = {"layers": layers, "lm_head": every[-1]}
    if lm_head.kind == "Q8_0":
        out["lm_head_rows"] = lm_head
    return out

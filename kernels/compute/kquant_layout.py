"""GGUF's K-quant and 5-bit block formats repacked once, at load, into column tiles that the
products of `kernels.compute.kquants` read (the formats are ggml's; `gguf.quants` dequantizes
each in NumPy and is the tests' oracle).

A weight matrix W [n_out, k] comes from a GGUF file as raw blocks, uint8 [n_out, bytes per
row] (what `gguf.GGUFReader` gives for a quantized tensor), each row cut along k into blocks:

    Q4_K  256 weights in 144 bytes: d, dmin (float16), 12 bytes packing a 6-bit scale and a
          6-bit minimum for each of 8 sub-blocks of 32, 128 bytes of nibbles; weight
          w = d sc q - dmin m, q in 0..15. Byte l of chunk c (32 bytes, c in 0..3) holds weight
          64 c + l in its low nibble (sub-block 2 c) and 64 c + 32 + l in its high one.
    Q5_K  256 weights in 176 bytes: as Q4_K, with 32 bytes of fifth bits before the nibbles:
          bit i of byte l is the fifth bit of weight 32 i + l; q in 0..31.
    Q6_K  256 weights in 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit high parts,
          16 int8 scales (one per sub-block of 16), d (float16); w = d sc (q - 32), q in 0..63.
          For weight e = 128 h + 32 p + l (h in 0..1, p in 0..3, l in 0..31) the low nibble is
          byte 64 h + 32 (p mod 2) + l shifted by 4 (p div 2), the high part byte 32 h + l of
          the 64 shifted by 2 p.
    Q5_0  32 weights in 22 bytes: d (float16), 32 fifth bits (uint32, bit j for weight j),
          16 bytes of nibbles (byte j: weight j low, j + 16 high); w = d (q - 16).
    Q4_0  32 weights in 18 bytes: d, 16 bytes of nibbles; w = d (q - 8).
    Q5_1  32 weights in 24 bytes: d, m (float16), fifth bits, nibbles; w = d q + m.

`repack` keeps every quant byte as stored and only moves it: the output rows are cut into
`n_tiles` tiles of `tile` rows (`tile_shape`; the last padded with zero rows), and inside a
tile every field is stored column by column (`[n_tiles, columns, tile]`), so the `tile` bytes
one column of a block holds for the tile's rows are contiguous and one x value multiplies a
vector of rows. The float16
scales are widened to float32 and the packed 6-bit scales and minimums of Q4_K / Q5_K unpacked
to one byte each, so a tiled matrix is a little larger than its blocks (Q4_K 152 bytes per 256
weights against 144, Q5_K 184 against 176, Q6_K 212 against 210, Q5_0 24 against 22, Q4_0 20
against 18, Q5_1 28 against 24), never a float32 copy of the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from corral.kernels.compute.quant import tile_rows

MAX_TILE = 256
"""The most output rows a tile holds. The one-row kernels (`kquant_row`) keep a tile's sums in
memory and run over a column's rows in one vector loop, so a longer tile gives more
independent sums per column."""


def tile_shape(n_out: int) -> tuple[int, int]:
    """(n_tiles, tile): the fewest tiles of at most `MAX_TILE` rows covering n_out rows, each
    a multiple of 64 rows (`kquant_rows.LANES`, four 512-bit vectors of float32), at least two
    where n_out > 64 so that two threads share the product.

    Raises:
        ValueError: n_out < 1.
    """
    if n_out < 1:
        raise ValueError(f"a matrix needs at least one output row, got {n_out}")
    n_tiles = max(-(-n_out // MAX_TILE), 2 if n_out > 64 else 1)
    tile = -(-n_out // n_tiles)
    return n_tiles, -(-tile // 64) * 64


BLOCK_BYTES = {
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
    "Q5_0": (32, 22),
    "Q4_0": (32, 18),
    "Q5_1": (32, 24),
}
"""Each kind's (weights, bytes) per block, as ggml stores them."""

FIELDS = {
    "Q4_K": ("d", "dmin", "scales", "minimums", "quants"),
    "Q5_K": ("d", "dmin", "scales", "minimums", "high_bits", "quants"),
    "Q6_K": ("d", "scales", "high_bits", "quants"),
    "Q5_0": ("d", "high_bits", "quants"),
    "Q4_0": ("d", "quants"),
    "Q5_1": ("d", "m", "high_bits", "quants"),
}
"""The tiled arrays of each kind, in the order of `KQuantMatrix.arrays` (and of the kernels'
arguments)."""


@dataclass(frozen=True)
class KQuantMatrix:
    """A weight matrix W [n_out, k] in column tiles (`repack`).

    kind: a key of `BLOCK_BYTES`; n_out, k: W's shape; arrays: the tiled fields named by
    `FIELDS[kind]`, each C-contiguous [n_tiles, columns, tile] (`tile_shape(n_out)`):
    d, dmin, m float32 (a column per block); scales, minimums uint8 (a column per sub-block of
    32; Q6_K's scales int8, one per sub-block of 16); high_bits uint8 (Q5_K: a column per byte
    of fifth bits) or uint32 (Q5_0, Q5_1: a column per block); quants uint8 (a column per
    byte: Q4_K, Q5_K, Q5_0, Q4_0, Q5_1 k/2 columns of nibbles, Q6_K k/2 of low nibbles and
    high_bits k/4 columns of 2-bit parts)."""

    kind: str
    n_out: int
    k: int
    arrays: tuple[np.ndarray, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the tiled arrays."""
        return sum(a.nbytes for a in self.arrays)


def _half(blocks: np.ndarray, start: int) -> np.ndarray:
    """The float16 at byte `start` of every block, widened: uint8 [n, b, size] -> float32 [n, b]."""
    return (
        np.ascontiguousarray(blocks[..., start : start + 2])
        .view(np.float16)[..., 0]
        .astype(np.float32)
    )


def _scale_minimums(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K / Q5_K's 12 bytes of 6-bit scales and minimums unpacked: uint8 [n, b, 12] ->
    (scales, minimums) uint8 [n, b * 8], sub-block j of block i at column 8 i + j. Bytes 0-3
    hold scales 0-3 in their low 6 bits, bytes 4-7 minimums 0-3; scales and minimums 4-7 have
    their low 4 bits in the low and high nibbles of bytes 8-11 and their top 2 bits in the top
    bits of bytes 0-3 and 4-7."""
    low, high, mixed = packed[..., 0:4], packed[..., 4:8], packed[..., 8:12]
    scales = np.concatenate([low & 63, (mixed & 15) | ((low >> 2) & 48)], axis=-1)
    minimums = np.concatenate([high & 63, (mixed >> 4) | ((high >> 2) & 48)], axis=-1)
    n = packed.shape[0]
    return scales.reshape(n, -1), minimums.reshape(n, -1)


def repack(raw: np.ndarray, kind: str) -> KQuantMatrix:
    """W's raw GGUF blocks in column tiles.  O(n_out k) byte moves, done once at load.

    raw: uint8 [n_out, bytes per row] (a row of W's blocks as the GGUF file stores them);
    kind: "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q4_0" or "Q5_1" (a `gguf.GGMLQuantizationType`'s
    name). Rows can be reordered or stacked on `raw` before (rows are independent).

    Raises:
        ValueError: an unknown kind, raw not a 2-D uint8 array with at least one row, or a row
            length that is not a whole number of the kind's blocks.
    """
    if kind not in BLOCK_BYTES:
        raise ValueError(f"kind must be one of {sorted(BLOCK_BYTES)}, got {kind!r}")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8 or raw.ndim != 2 or raw.shape[0] < 1:
        raise ValueError(
            f"raw must be uint8 [n_out >= 1, bytes per row], got {raw.dtype} {raw.shape}"
        )
    weights, size = BLOCK_BYTES[kind]
    n_out, row_bytes = raw.shape
    if row_bytes == 0 or row_bytes % size:
        raise ValueError(
            f"a {kind} row is a whole number of {size}-byte blocks, got {row_bytes} bytes"
        )
    n_blocks = row_bytes // size
    blocks = raw.reshape(n_out, n_blocks, size)
    fields: dict[str, np.ndarray] = {}

    def nibbles(start: int, count: int) -> np.ndarray:  # bytes start..start+count of each block
        return blocks[..., start : start + count].reshape(n_out, -1)

    if kind in ("Q4_K", "Q5_K"):
        fields["d"], fields["dmin"] = _half(blocks, 0), _half(blocks, 2)
        fields["scales"], fields["minimums"] = _scale_minimums(blocks[..., 4:16])
        if kind == "Q5_K":
            fields["high_bits"] = nibbles(16, 32)
        fields["quants"] = nibbles(size - 128, 128)
    elif kind == "Q6_K":
        fields["d"] = _half(blocks, 208)
        fields["scales"] = nibbles(192, 16).view(np.int8)
        fields["high_bits"] = nibbles(128, 64)
        fields["quants"] = nibbles(0, 128)
    else:
        fields["d"] = _half(blocks, 0)
        if kind == "Q5_1":
            fields["m"] = _half(blocks, 2)
        if kind != "Q4_0":
            start = 4 if kind == "Q5_1" else 2
            bits = np.ascontiguousarray(blocks[..., start : start + 4]).view("<u4")[..., 0]
            fields["high_bits"] = bits.astype(np.uint32)
        fields["quants"] = nibbles(size - 16, 16)
    n_tiles, tile = tile_shape(n_out)
    arrays = tuple(tile_rows(fields[name], n_tiles, tile) for name in FIELDS[kind])
    return KQuantMatrix(kind, n_out, n_blocks * weights, arrays)


AS_BLOCKS = {"Q4_K": "Q4_1", "Q4_0": "Q4_1", "Q5_0": "Q5_0", "Q6_K": "Q8_16"}
"""The kinds `as_blocks` rewrites exactly into the blocks of 32 of the register-blocked kernels
(`kernels.compute.quant_rows`), and the kind each becomes."""


def as_blocks(raw: np.ndarray, kind: str) -> tuple[str, np.ndarray, np.ndarray | None, np.ndarray]:
    """W's raw GGUF blocks rewritten, without changing a weight, as blocks of 32 of float32
    scale s, float32 minimum m (Q4_1 only) and quant q, w = s q + m (Q4_1) or w = s q (Q8_0;
    Q8_16: Q8_0 with a scale for each half of a block, the second half's in place of m; Q5_0:
    Q4_1 with a fifth bit, w = s (nibble + 16 bit) + m):

        Q4_K  sub-block j of 32: s = d sc_j, m = -(dmin m_j) (exact in float32: an 11-bit
              mantissa times a 6-bit integer), q the nibble       -> Q4_1
        Q4_0  s = d, m = -8 d (exact), q the nibble                -> Q4_1
        Q5_0  s = d, m = -16 d (exact), q = nibble + 16 fifth bit  -> Q5_0
        Q6_K  sub-block j of 16: s = d sc_j (exact: 11 bits times 8), q in -32..31 -> Q8_16

    so w is the float32 weight `gguf.quants.dequantize` gives. O(n_out k) byte moves, at load.

    raw: uint8 [n_out, bytes per row] (as `repack` takes it); kind: a key of `AS_BLOCKS`.
    Returns (kind, scales float32 [n_out, k/32], minimums float32 [n_out, k/32] or None (Q8_0),
    quants): `model.quant.BlockMatrix`'s fields, quants uint8 [n_out, k/2] for Q4_1 (byte j of
    a block: element j in its low nibble, j + 16 in its high one), uint8 [n_out, k 20/32] for
    Q5_0 (a block's 16 bytes of nibbles as Q4_1's, then its fifth bits, a little-endian
    uint32, bit j for element j) or int8 [n_out, k] for Q8_0 and Q8_16. Per 32 weights, Q4_K's
    blocks take 24 bytes against its own 18, Q4_0's 24 against 18, Q5_0's 28 against 22,
    Q6_K's 40 against 26.25.

    Raises:
        ValueError: a kind not in `AS_BLOCKS`, or raw as `repack` refuses it.
    """
    if kind not in AS_BLOCKS:
        raise ValueError(f"kind must be one of {sorted(AS_BLOCKS)}, got {kind!r}")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8 or raw.ndim != 2 or raw.shape[0] < 1:
        raise ValueError(
            f"raw must be uint8 [n_out >= 1, bytes per row], got {raw.dtype} {raw.shape}"
        )
    size = BLOCK_BYTES[kind][1]
    n_out, row_bytes = raw.shape
    if row_bytes == 0 or row_bytes % size:
        raise ValueError(
            f"a {kind} row is a whole number of {size}-byte blocks, got {row_bytes} bytes"
        )
    blocks = raw.reshape(n_out, row_bytes // size, size)
    if kind == "Q6_K":
        q = _q6_k_values(blocks).astype(np.int16) - 32
        s = _half(blocks, 208)[..., None] * blocks[..., 192:208].view(np.int8).astype(np.float32)
        s = s.reshape(n_out, -1)  # [n, k/16]
        quants = q.astype(np.int8).reshape(n_out, -1)
        return "Q8_16", np.ascontiguousarray(s[:, 0::2]), np.ascontiguousarray(s[:, 1::2]), quants
    d = _half(blocks, 0)
    if kind == "Q4_K":
        scales, minimums = _scale_minimums(blocks[..., 4:16])
        n_super = blocks.shape[1]
        s = (d[..., None] * scales.reshape(n_out, n_super, 8).astype(np.float32)).reshape(n_out, -1)
        dmin = _half(blocks, 2)[..., None]
        m = -(dmin * minimums.reshape(n_out, n_super, 8).astype(np.float32)).reshape(n_out, -1)
        return "Q4_1", s, m, np.ascontiguousarray(_q4_k_nibbles(blocks).reshape(n_out, -1))
    if kind == "Q4_0":
        quants = np.ascontiguousarray(blocks[..., 2:]).reshape(n_out, -1)
        return "Q4_1", d, d * np.float32(-8.0), quants
    quants = np.concatenate([blocks[..., 6:], blocks[..., 2:6]], axis=-1)  # nibbles, bits
    return "Q5_0", d, d * np.float32(-16.0), np.ascontiguousarray(quants.reshape(n_out, -1))


def _q4_k_nibbles(blocks: np.ndarray) -> np.ndarray:
    """Q4_K's quants in Q4_1's byte order: uint8 [n, b, 144] -> uint8 [n, b, 8, 16], byte j of
    sub-block i holding its column j in the low nibble and j + 16 in the high one (chunk c's 32
    bytes: low nibbles are sub-block 2 c, high ones 2 c + 1)."""
    n_out, n_super = blocks.shape[:2]
    q = blocks[..., 16:].reshape(n_out, n_super, 4, 1, 32)
    values = np.concatenate([q & 15, q >> 4], axis=3).reshape(n_out, n_super, 8, 32)
    return values[..., :16] | (values[..., 16:] << 4)


def _q6_k_values(blocks: np.ndarray) -> np.ndarray:
    """Q6_K's quants q in 0..63 (w = d sc (q - 32)) in column order: uint8 [n, b, 210] ->
    uint8 [n, b, 256]; weight 128 h + 32 p + l (see the module docstring)."""
    n_out, n_super = blocks.shape[:2]
    low = blocks[..., :128].reshape(n_out, n_super, 2, 2, 32)  # [h, p mod 2, l]
    low = np.concatenate([low & 15, low >> 4], axis=3)  # [h, p, l]
    top = blocks[..., 128:192].reshape(n_out, n_super, 2, 1, 32)
    top = (top >> (2 * np.arange(4, dtype=np.uint8))[:, None]) & 3  # [h, p, l]
    return (low | (top << 4)).reshape(n_out, n_super, 256)


SUPER_WORDS = {"Q4_K": 36, "Q6_K": 52}
"""The 64-byte words of `as_super_blocks`' form per super-block of 256 weights and 16 rows
(bytes per row and super-block: a quarter of it)."""


def as_super_blocks(raw: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """W's raw Q4_K / Q6_K blocks in the super-block form of the VNNI kernels
    (`quant_amx.SUPER4`, `SUPER6`; docs/numerics.md, "K-quants in their own bytes"): a row's
    super-block of 256 weights keeps its float16 d (and Q4_K's dmin) widened to float32, its
    scales as bytes and its quants at their own width, so that the kernels compute d sc (and
    dmin m) per sub-block, exactly the float32 scales `as_blocks` stores:

        Q4_K  per sub-block i of 32 (i in 0..7), bytes 16 i .. 16 i + 15: Q4_1's nibbles
              (byte j: column j low, j + 16 high); bytes 128 + i: sc_i, 136 + i: m_i (the
              6-bit fields unpacked). 144 bytes; w = d sc q + (-dmin) m.
        Q6_K  per sub-block i of 32, bytes 24 i .. 24 i + 23: 16 bytes of the low nibbles of
              q (Q4_1's order), then 4 bytes whose byte j holds the high 2 bits of column
              4 w + j at bits 2 w (w in 0..3), then 4 bytes the same for columns 16 + 4 w + j;
              bytes 192 + s: sc_s (int8, sub-block s of 16). 208 bytes; w = d sc (q - 32).

    The bytes of a row's super-block go to the word tiles as `4 SUPER_WORDS[kind]` bytes,
    word w's 4 bytes the row's lane (`model.quant.super_tiled`). O(n_out k) byte moves, at
    load.

    raw: uint8 [n_out, bytes per row] (as `repack` takes it); kind "Q4_K" or "Q6_K".
    Returns (d float32 [n_out, k/256], coefs float32 [n_out, k/256] (Q4_K: -dmin) or None,
    row bytes uint8 [n_out, k/256, 4 SUPER_WORDS[kind]]).

    Raises:
        ValueError: another kind, or raw as `repack` refuses it.
    """
    if kind not in SUPER_WORDS:
        raise ValueError(f"kind must be one of {sorted(SUPER_WORDS)}, got {kind!r}")
    raw = np.asarray(raw)
    if raw.dtype != np.uint8 or raw.ndim != 2 or raw.shape[0] < 1:
        raise ValueError(
            f"raw must be uint8 [n_out >= 1, bytes per row], got {raw.dtype} {raw.shape}"
        )
    size = BLOCK_BYTES[kind][1]
    n_out, row_bytes = raw.shape
    if row_bytes == 0 or row_bytes % size:
        raise ValueError(
            f"a {kind} row is a whole number of {size}-byte blocks, got {row_bytes} bytes"
        )
    blocks = raw.reshape(n_out, row_bytes // size, size)
    n_super = blocks.shape[1]
    if kind == "Q4_K":
        scales, minimums = _scale_minimums(blocks[..., 4:16])
        row = np.concatenate(
            [
                _q4_k_nibbles(blocks).reshape(n_out, n_super, 128),
                scales.reshape(n_out, n_super, 8),
                minimums.reshape(n_out, n_super, 8),
            ],
            axis=-1,
        )
        return _half(blocks, 0), -_half(blocks, 2), np.ascontiguousarray(row)
    q = _q6_k_values(blocks).reshape(n_out, n_super, 8, 32)
    low = q & 15
    nibbles = low[..., :16] | (low[..., 16:] << 4)  # [n, b, 8, 16]
    top = (q >> 4).reshape(n_out, n_super, 8, 2, 4, 4)  # [half, w, j]
    shifts = (2 * np.arange(4, dtype=np.uint8))[:, None]
    high = np.bitwise_or.reduce(top << shifts, axis=4)  # [n, b, 8, half, j]
    sub = np.concatenate([nibbles, high.reshape(n_out, n_super, 8, 8)], axis=-1)
    row = np.concatenate([sub.reshape(n_out, n_super, 192), blocks[..., 192:208]], axis=-1)
    return _half(blocks, 208), None, np.ascontiguousarray(row)

"""The word-tile layout of block-quantized weights that the int8-activation kernels read
(`corral.kernels.compute.quant_int8`, `quant_amx`; described in `quant_int8`'s docstring): output
rows in tiles of `tile` rows (a multiple of 16), and for each tile, block and group of 16 rows the
16 rows' bytes four at a time, so that one 64-byte load holds 4 bytes (4 consecutive k) of each of
16 rows, one int32 lane of `vpdpbusd` each."""

from __future__ import annotations

import numpy as np

BLOCK = 32
"""Values per activation and weight block."""

LANES = 16
"""Output rows one `vpdpbusd` serves (16 int32 lanes of a 512-bit vector)."""

NIBBLES, BYTES, HALVES, FIVE = 1, 0, 2, 3
"""The word formats, the kernels' `form` keys: Q4_1's nibbles (W = 4 words a block: byte j of
word w holds column 4 w + j in its low nibble, 4 w + j + 16 in its high one); Q8_0's bytes
(W = 8, q + 128: word w holds columns 4 w .. 4 w + 3); `HALVES`, Q8_0's bytes with a scale for
each half of a block (words 0-3 hold columns 0-15, words 4-7 columns 16-31; GGUF's Q6_K
rewritten, `kquant_layout.as_blocks`), the second half's scales in the `minimums` array;
`FIVE`, Q4_1's nibbles and a fifth word of fifth bits (each row's little-endian uint32, bit j:
column j's q += 16; GGUF's Q5_0 rewritten, its minimum -16 d)."""


def word_tiles(quants: np.ndarray, kind: str, n_tiles: int, tile: int) -> np.ndarray:
    """A matrix's quants in the word-tile layout of the module docstring.

    quants uint8 [n_out, k/2] (Q4_1, ggml's byte order) or int8 [n_out, k] (Q8_0) ->
    uint8 [n_tiles, k/32, tile/16, W, 16, 4] (Q8_0 stored as q + 128; zero rows pad)

    Raises:
        ValueError: kind is not Q4_1 or Q8_0, or tile is not a multiple of 16.
    """
    if kind not in ("Q4_1", "Q8_0") or tile % LANES:
        raise ValueError(f"word tiles take Q4_1 or Q8_0 in tiles of 16 rows, got {kind}, {tile}")
    n_out = quants.shape[0]
    raw = quants.view(np.uint8)
    if kind == "Q8_0":
        raw = raw ^ np.uint8(128)
    per_block = BLOCK // 2 if kind == "Q4_1" else BLOCK  # bytes of a block's quants
    n_blocks = raw.shape[1] // per_block
    padded = np.full((n_tiles * tile, raw.shape[1]), 0 if kind == "Q4_1" else 128, np.uint8)
    padded[:n_out] = raw  # padding rows: q = 0
    words = padded.reshape(n_tiles, tile // LANES, LANES, n_blocks, per_block // 4, 4)
    # [tile, lane row, block, word, byte] -> [tile, block, lane group, word, lane row, byte]
    return np.ascontiguousarray(words.transpose(0, 3, 1, 4, 2, 5))

"""Weights kept in a GGUF's own quantization blocks, for decoding at small batches (docs/design.md
section 6; the block formats are ggml's, computed on by `corral.kernels.compute.quant` and
`corral.kernels.compute.quant_rows`).

A Llama GGUF stores most matrices as Q4_1 or Q8_0 blocks of 32 weights along the input axis.
`quantized_layers` reads them as they are (no re-quantization), undoes llama.cpp's q/k row
permutation (whole rows move, so blocks stay intact), stacks q/k/v and gate/up as the float32
path does (all on `BlockMatrix`, each block unpacked into a float32 scale (and minimum) and its
quants, row by row), and finally lays each matrix out in the kernels' tiles (`TiledMatrix`):

    {"layers": [L x {"w_qkv", "w_o", "w_gate_up", "w_down": TiledMatrix}], "lm_head": TiledMatrix}

`TiledMatrix.matmul` computes x W^T with the kernels: where the CPU has AMX, on x quantized by
blocks to int8 on AMX tiles for passes of every size (the default, `INT8_ACTIVATIONS`,
`every_pass`, `kernels.quant_amx`); elsewhere on x in float32 (or int8 on AVX-512 VNNI when
asked), for passes of at most `QUANTIZED_MAX_ROWS` rows, where reading 4 to 7 times fewer bytes
than float32 wins, larger passes going to float32 BLAS GEMMs. The
weights are the float32 path's own (its weights are these blocks dequantized), so on float32
activations the two differ only in rounding order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from corral.kernels import vector_width
from corral.kernels.compute import quant, quant_amx, quant_int8, quant_rows
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError

QUANTIZED_MAX_ROWS = 64
"""The most rows of x (tokens in a pass) computed from the blocks, the LM head's included;
more go to float32 BLAS GEMMs. Passes of several rows unpack each weight once for up to 16
rows and keep the sums in registers (`kernels.quant_rows`), which on one thread multiplied at
about the rate of OpenBLAS's float32 GEMM on weights in cache from 32 to 64 rows, and ahead of
it below 32 (where the GEMM is bound by reading its 4 to 7 times larger weights); a decode step
at batch 16 to 64 and jump-forward chunks of 9 to 64 tokens were as fast or faster from the
blocks. Past 64 rows the GEMM's rate keeps growing (prefill), so it takes them. bench/model.py
prints decode with the blocks forced on and off at batch 1 to 64 to place this switch."""

INT8_ACTIVATIONS: bool | None = None
"""Whether `TiledMatrix.matmul` quantizes x by blocks to int8 and takes integer dot products
rather than computing on x in float32 (`kernels.quant` and `kernels.quant_rows`):

- None (the default): int8 on AMX tiles where the CPU has them (`kernels.quant_amx.available()`,
  Intel Xeon from Sapphire Rapids on), for passes of every size, the prompts' included
  (`every_pass`); float32 elsewhere.
- True: the same, and where there is no AMX int8 on AVX-512 VNNI (`kernels.quant_int8`, where
  `available()`) for passes of at most `QUANTIZED_MAX_ROWS` rows, of every size under
  `BATCH_INVARIANT` (the default).
- False: float32 activations, the path whose logits are within 1e-3 of the float32 weights'
  (tests/model/test_reference.py).

Both int8 kernels meet the accuracy bar of quantizing activations (greedy tokens and a text's
mean log-likelihood against the float32 path, tests/model/test_int8_activations.py). On AMX a
row's products are the same bit for bit whatever rows share its pass (`kernels.quant_amx`) and
attention sums in an order its positions alone fix (`llama.POSITIONAL_ATTENTION`), so a
token's logits are the same bit for bit however its passes are made up: a prompt prefilled
whole or after a prefix-cache hit, alone or in a batch, a jump-forward chunk or token by token
(tests/model/test_compositions.py). So they are under `BATCH_INVARIANT` on float32
activations and on VNNI (whose integer sums are exact, and whose float operations on them are a
row's own). Without it, passes of different sizes agree to about 3e-5 on float32 activations,
and int8 would magnify that: rounding to int8 moves where float32 rounding crosses a
quantization step, to about 2e-3, enough to change sampled tokens. The VNNI kernel stays
opt-in: quantized activations are a further approximation of the float32 path."""


def int8_kernel() -> str | None:
    """The int8-activation kernel `TiledMatrix.matmul` uses under `INT8_ACTIVATIONS`: "amx",
    "vnni", or None (float32 activations).

    Raises:
        ValueError: `INT8_ACTIVATIONS` is not None, True or False (0 would read as "on")."""
    if INT8_ACTIVATIONS is not None and not isinstance(INT8_ACTIVATIONS, bool):
        raise ValueError(
            f"corral.model.quant.INT8_ACTIVATIONS must be None, True or False, "
            f"got {INT8_ACTIVATIONS!r}"
        )
    if INT8_ACTIVATIONS is False:
        return None
    if quant_amx.available():
        return "amx"
    if INT8_ACTIVATIONS and quant_int8.available():
        return "vnni"
    return None


BATCH_INVARIANT = True
"""Whether a token's logits are the same bit for bit however its passes are made up on every
CPU, not only with AMX's products: passes of every size take the blocks (`every_pass`), whose
kernels sum a row in one order whatever rows share its pass (`kernels.quant_rows`, and the
one-row kernels of `kernels.quant` in the same order), and attention sums in an order a token's
position alone fixes (`llama.POSITIONAL_ATTENTION`). A seeded request then samples the same
tokens alone or in any batch, after a prefix-cache hit or a `--resume` or not, with
jump-forward chunks or token by token (tests/model/test_compositions.py). False: prompts of
more than `QUANTIZED_MAX_ROWS` tokens go to float32 BLAS GEMMs and `llama.attend_prompt`, and a
token's logits differ by float32 rounding (about 3e-5) between passes of different sizes, which
can change a sampled token on a near-tie. The cost is in bench/model.py (the float32-activation
rows with it on and off). Without blocks (`load_model(weights="float32")`) every product is a
BLAS GEMM whatever this says."""


def every_pass() -> bool:
    """Whether passes of every size take the blocks (`llama.linear`, `llama.lm_head`), not only
    those of at most `QUANTIZED_MAX_ROWS` rows: when the AMX kernel serves (`int8_kernel`) or
    under `BATCH_INVARIANT`."""
    return int8_kernel() == "amx" or BATCH_INVARIANT


ONE_ROW_Q4_1_IN_REGISTERS = not vector_width.has_avx512()
"""Where True (CPUs without AVX-512), one row of x times a Q4_1 matrix (a layer's) goes to
`kernels.quant_rows` as a group of one (its sums in registers) rather than to the one-row
kernels of `kernels.quant`, which keep a tile's partial sums in L1 and load and store them for
every 8 weights in AVX2's 256-bit vectors: on a 2-core Zen 3 a batch-1 decode step (256-token
context) took 11.9-12.3 ms against 14.8-17.0 (medians of 60 steps, three runs each, taking
turns). The LM head (Q8_0, 32 MB read from memory) stays with the one-row kernel and its
prefetches: sent to `quant_rows` as well, the step was slower in three runs of three. With
AVX-512 the one-row kernels store half as often and stream at the memory's rate."""

ACTIVATION_PARTS = 2
"""The int8 parts x is quantized in for the layers' matrices: one part (Q8_1 alone, as
llama.cpp) moved SmolLM2's logits by up to 1 and changed greedy tokens on two of the four
reference prompts; two parts (an error of a 508th of a Q8_1 step) kept them, at about twice
one part's integer work."""

HEAD_ACTIVATION_PARTS = 3
"""The parts for the LM head, whose products are the logits themselves: three keep them
within 1e-4 of the float32 path's (two parts: about 1.3e-3)."""

SUPPORTED = ("Q4_1", "Q8_0")
"""The GGUF block types the kernels compute on."""


@dataclass(frozen=True, eq=False)
class BlockMatrix:
    """A weight matrix W [n_out, k] in Q4_1 or Q8_0 blocks of 32 along k.

    Attributes:
        kind: "Q4_1" or "Q8_0".
        scales: float32 [n_out, k/32], each block's scale (ggml's float16, widened exactly).
        minimums: float32 [n_out, k/32] for Q4_1 (w = scale q + minimum); None for Q8_0.
        quants: uint8 [n_out, k/2] (Q4_1: low nibble of byte j is element j of its block, high
            nibble element j + 16) or int8 [n_out, k] (Q8_0).
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

    def tiled(self) -> TiledMatrix:
        """The same blocks in the kernels' tiled layout (`kernels.quant.tile_rows`)."""
        n_out, k = self.shape
        n_tiles, tile = quant.tile_shape(n_out)
        minimums = None
        if self.minimums is not None:
            minimums = quant.tile_rows(self.minimums, n_tiles, tile)
        words = quant_int8.word_tiles(self.quants, self.kind, n_tiles, tile)
        return TiledMatrix(
            self.kind,
            n_out,
            k,
            quant.tile_rows(self.scales, n_tiles, tile),
            minimums,
            quant.tile_rows(self.quants, n_tiles, tile),
            words,
        )

    def dequantize(self) -> np.ndarray:
        """W in float32.  -> float32 [n_out, k] (scale q + minimum, ggml's formula)."""
        n_out, k = self.shape
        if self.kind == "Q8_0":
            q = self.quants.astype(np.float32).reshape(n_out, -1, quant.BLOCK)
            return (q * self.scales[:, :, None]).reshape(n_out, k)
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


@dataclass(frozen=True, eq=False)
class TiledMatrix:
    """A weight matrix W [n_out, k] in Q4_1 or Q8_0 blocks, laid out for the kernels: output
    rows in `n_tiles` tiles of `tile` rows (zero rows pad the last), each tile column by column
    (`kernels.quant`'s module docstring).

    Attributes:
        kind: "Q4_1" or "Q8_0".
        n_out, k: W's shape.
        scales: float32 [n_tiles, k/32, tile].
        minimums: float32 [n_tiles, k/32, tile] for Q4_1; None for Q8_0.
        quants: uint8 [n_tiles, k/2, tile] (Q4_1) or int8 [n_tiles, k, tile] (Q8_0).
        words: the same quants in `kernels.quant_int8`'s word tiles (uint8 [n_tiles, k/32,
            tile/16, W, 16, 4]) for the kernels of passes of several rows (`kernels.quant_rows`)
            and the int8-activation kernels.
    """

    kind: str
    n_out: int
    k: int
    scales: np.ndarray
    minimums: np.ndarray | None
    quants: np.ndarray
    words: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """(n_out, k)."""
        return self.n_out, self.k

    @property
    def nbytes(self) -> int:
        """Bytes a product reads: quants, scales and minimums (padding rows included)."""
        extra = 0 if self.minimums is None else self.minimums.nbytes
        return self.quants.nbytes + self.scales.nbytes + extra

    def matmul(self, x: np.ndarray, parts: int = ACTIVATION_PARTS) -> np.ndarray:
        """x W^T.  float32 [B, k] -> float32 [B, n_out] (float32 accumulation).

        Under `INT8_ACTIVATIONS` (`int8_kernel()`), each row of x is quantized by blocks of 32
        to two int8 parts and multiplies the weights in integer arithmetic: on AMX tiles
        (`kernels.quant_amx._trusted_matmul`: `amx_matmul`, one row `row_matmul`, without
        their argument checks, which this class's layout meets; the two parts on one scale,
        `parts` unused) or in
        AVX-512 VNNI (`kernels.quant_int8.int8_matmul`: ggml's Q8_1, then the Q8_1 of what it
        leaves over, `parts` parts). Otherwise x stays float32: one row goes to the one-row
        kernels (`kernels.quant`, which stream the weights from memory; a Q4_1 matrix's row
        to `quant_rows` where `ONE_ROW_Q4_1_IN_REGISTERS`: the sums are the same bit for bit
        in either), several rows to
        `kernels.quant_rows.float_matmul` (each weight unpacked once for a group of up to 16
        rows).

        Raises:
            ValueError: x is not two-dimensional with k columns, or parts < 1.
        """
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.k:
            raise ValueError(f"x must be [B, {self.k}], got shape {x.shape}")
        if parts < 1:
            raise ValueError(f"x is quantized in at least one part, got parts={parts}")
        rows = x.shape[0]
        coefs = self.minimums if self.kind == "Q4_1" else self.scales
        kernel = int8_kernel()
        if kernel == "amx":  # one row: the same sums in VNNI, without 16-row tiles
            out = np.empty((rows, self.n_out), np.float32)  # the layout is right by construction
            return quant_amx._trusted_matmul(x, self.scales, coefs, self.words, out)
        if kernel == "vnni":
            out = np.empty((rows, self.n_out), np.float32)
            return quant_int8.int8_matmul(x, parts, self.scales, coefs, self.words, out)
        if rows > 1 or (ONE_ROW_Q4_1_IN_REGISTERS and self.kind == "Q4_1"):
            out = np.empty((rows, self.n_out), np.float32)
            return quant_rows.float_matmul(x, self.scales, coefs, self.words, out)
        n_tiles, _, tile = self.scales.shape
        out = np.empty((rows, n_tiles * tile), np.float32)
        if self.kind == "Q4_1":
            sums = quant.block_sums(x)
            quant.q4_1_matmul(x, sums, self.scales, self.minimums, self.quants, out)
        else:
            quant.q8_0_matmul(x, self.scales, self.quants, out)
        return np.ascontiguousarray(out[:, : self.n_out])


def packed(matrices: list[TiledMatrix]) -> list[TiledMatrix]:
    """The same matrices with their arrays copied into one allocation, each 64-byte aligned.

    A decode step streams some 120 matrices of 0.3 to 2 MB, each its own allocation of 4 KB
    pages, and the kernels read each matrix at strides of kilobytes: a TLB miss every block or
    so. NumPy asks Linux for transparent huge pages for allocations of 4 MB and more
    (`madvise`), which one allocation of all of them is: one thread, the default model's 121
    products (the LM head's included) from memory took 10.3 instead of 11.5 ms at batch 1 and
    63.2 instead of 67.6 ms at batch 32 (scratch A/B, alone).  -> [TiledMatrix]"""
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


def quantized_layers(gguf_path: str | Path, config: LlamaConfig) -> dict | None:
    """The block-quantized matrices of a Llama GGUF, laid out as the forward pass uses them;
    None when a matrix is in a block type the kernels lack (the float32 path then serves).

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
        layers.append({name: value.tiled() for name, value in layer.items()})
    head = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    lm_head = matrix(head)
    if lm_head is None:
        return None
    names = list(layers[0])
    every = packed([layer[name] for layer in layers for name in names] + [lm_head.tiled()])
    layers = [dict(zip(names, every[i * len(names) : (i + 1) * len(names)], strict=True))
              for i in range(len(layers))]  # fmt: skip
    out = {"layers": layers, "lm_head": every[-1]}
    if lm_head.kind == "Q8_0":
        out["lm_head_rows"] = lm_head
    return out

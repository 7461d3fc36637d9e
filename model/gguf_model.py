"""A model loaded straight from a GGUF file, its matrices kept in their quantization blocks
(docs/models.md, "GGUF files").

`load_gguf_model(path)` reads llama.cpp's architectures `llama` (Llama 1-3, SmolLM2, Mistral),
`qwen2`, `qwen3` and `gemma3` (text): `config_from_gguf` turns the metadata into the
`LlamaConfig` the forward pass (`corral.model.llama`) reads, as llama.cpp interprets it;
`gguf_params` lays the tensors out as `llama.build_params` does, every matrix kept in the
file's own blocks:

- Q4_1 and Q8_0 as `quant.TiledMatrix` (the kernels of `corral.kernels.compute.quant`, packed in
  one allocation as `quant.quantized_layers` does);
- Q4_K and Q6_K, where the VNNI kernels run, in their own bytes as super-block word tiles
  (`quant.super_tiled`; Q4_K not where AMX's kernels run, which take Q4_1's words);
- Q4_K, Q4_0, Q5_0 and Q6_K otherwise rewritten, weight for weight, as Q4_1 / Q8_0 word tiles
  (`kquant_layout.as_blocks`, `quant.BlockMatrix.tiled(words_only=True)`), on the activations
  the `ComputePlan` says (`quant.TiledMatrix.activations`: the int8 kernels of
  `quant_int8` / `quant_amx`, or on float32 the register-blocked kernels of `quant_rows`);
  Q5_K and Q5_1 as `kquant_layout.KQuantMatrix` (`kquants.kquant_matmul`), on float32
  activations whatever the plan says;
- F32, F16 and BF16 as float32 arrays (a BLAS GEMM).

q/k/v and gate/up are stacked as one matrix each when they share a block type, else kept as
consecutive parts of a `GGUFMatrix` (a Q4_K_M file holds q and k in one type and v in another).
No float32 copy of a quantized matrix is made: the token embedding stays memory-mapped in its
blocks and the rows of a pass's tokens are dequantized as they are looked up
(`QuantizedRows`); a tied LM head computes on the embedding's blocks through the product
kernels. Norms and biases (F32 in llama.cpp's files) are float32 arrays.

The conventions of llama.cpp's converter are undone here: the q and k rows (and biases) of a
`llama` file are permuted for its RoPE on adjacent pairs (`quant.unpermute_order` puts whole
rows back, so blocks stay intact); Gemma's norm weights are stored as 1 + w, the factor the
norm applies. `load_gguf_model(path, quantized=False)` dequantizes every matrix instead, into
the Hugging Face tensors `llama.build_params` takes (the float32 reference path).

Anything else is refused with a `ModelLoadError` naming the file and what is not supported:
another `general.architecture`, a tensor type the kernels lack (Q2_K, Q3_K, IQ*, ...), RoPE
scaling other than linear and Llama 3's (YaRN), partial rotary embeddings, per-layer head
counts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from corral.kernels.compute import (
    kquant_layout,
    kquant_row,
    kquant_rows,
    kquants,
    quant_int8,
    quant_rows,
)
from corral.kernels.compute import quant as quant_kernels
from corral.model import llama, quant
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError
from corral.model.gguf_file import FLOAT_TYPES, GGUFFile, dequantize_rows, read_gguf_file
from corral.model.weights import expected_shapes

ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "gemma3": "gemma3_text"}
"""llama.cpp's `general.architecture` -> the `LlamaConfig.model_type` it is run as (a `llama`
file may hold Llama 1-3, SmolLM2 or Mistral)."""

BLOCK_TYPES = ("Q4_1", "Q8_0", *kquant_layout.BLOCK_BYTES)
"""The GGUF block types kept as blocks (beside `gguf_file.FLOAT_TYPES`)."""

GEMMA3_LOCAL_ROPE_THETA = 10000.0
"""The RoPE base of Gemma 3's sliding-window layers, which llama.cpp fixes (not stored)."""

GEMMA3_SLIDING_PATTERN = 6
"""llama.cpp's Gemma 3 layer pattern when the file states none: every 6th layer attends to the
whole context, the others through the sliding window."""

LLAMA3_ORIGINAL_CONTEXT = 8192
"""The original context length llama.cpp's converter assumes for Llama 3's `rope_freqs`
(only the ratios of the scaling's parameters matter: `_llama3_scaling`)."""

# GGUF layer tensor (without "blk.{i}." and ".weight") -> Hugging Face name (after
# "model.layers.{i}."); Gemma 3's ffn_norm is the norm before the MLP.
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_norm": "post_attention_layernorm",
}
_GEMMA_LAYER_NAMES = _LAYER_NAMES | {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}


# ----------------------------------------------------------------------------------------------
# Metadata -> LlamaConfig


def config_from_gguf(gguf: GGUFFile) -> LlamaConfig:
    """The `LlamaConfig` of a GGUF file's metadata (`{arch}.*` keys), as llama.cpp reads it:
    head width `attention.key_length` (else d / Hq); RoPE base `rope.freq_base` (else 10,000),
    `rope.scaling.type` linear with its `rope.scaling.factor`, a `llama` file's `rope_freqs`
    tensor as Llama 3's scaling; the vocabulary the embedding's rows; tied embeddings when
    there is no `output.weight`; EOS ids `tokenizer.ggml.eos_token_id`, `eot_token_id` and
    `eom_token_id`. Gemma 3: sliding window `attention.sliding_window` on all layers but every
    6th (`GEMMA3_SLIDING_PATTERN`, or `attention.sliding_window_pattern`), their RoPE base
    10,000, attention scale key_length^-1/2 (d / Hq for the 62-layer 27B, as llama.cpp),
    `final_logit_softcapping` when stored, embeddings times sqrt(d), GELU-tanh gating.

    Raises:
        ModelLoadError: naming the file, for an architecture not in `ARCHITECTURES` (naming
            it), a missing or ill-typed key, per-layer head counts or widths, a value length
            other than the key length, partial rotary embeddings, RoPE scaling other than
            linear (e.g. YaRN), a `rope_freqs` tensor that is not Llama 3's scaling.
    """
    fields, path = gguf.fields, gguf.path
    arch = fields.get("general.architecture")
    if arch not in ARCHITECTURES:
        supported = ", ".join(ARCHITECTURES)
        raise ModelLoadError(
            path, f"architecture {arch!r} is not supported: corral runs GGUF files of {supported}"
        )

    def key(name: str, kind: type = int, default=None):
        value = fields.get(f"{arch}.{name}", default)
        if value is None:
            raise ModelLoadError(path, f"metadata {arch}.{name} is missing")
        if isinstance(value, list):
            raise ModelLoadError(
                path, f"metadata {arch}.{name} varies by layer ({value[:4]}...): not supported"
            )
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ModelLoadError(path, f"metadata {arch}.{name} must be {kind.__name__}")
        return value

    hidden, heads = key("embedding_length"), key("attention.head_count")
    kv_heads = key("attention.head_count_kv", int, heads)
    n_layers = key("block_count")
    if hidden <= 0 or heads <= 0 or kv_heads <= 0 or heads % kv_heads or n_layers <= 0:
        raise ModelLoadError(
            path, f"{heads} query heads cannot share {kv_heads} key/value heads"
        )  # fmt: skip
    head_dim = key("attention.key_length", int, hidden // heads)
    if key("attention.value_length", int, head_dim) != head_dim:
        raise ModelLoadError(path, "a value width other than the key width is not supported")
    if head_dim <= 0 or head_dim % 2:
        raise ModelLoadError(path, f"head width {head_dim} must be even for RoPE")
    if key("rope.dimension_count", int, head_dim) != head_dim:
        raise ModelLoadError(path, "partial rotary embeddings (rope.dimension_count) unsupported")
    theta = key("rope.freq_base", float, 10000.0)
    context = key("context_length")
    scaling = _rope_scaling(gguf, arch, key, theta, head_dim)
    tensors = gguf.tensors
    vocab = gguf.info("token_embd.weight").shape[0]
    eos = [fields.get(f"tokenizer.ggml.{name}_token_id") for name in ("eos", "eot", "eom")]
    eos_ids = tuple(dict.fromkeys(int(e) for e in eos if isinstance(e, int) and 0 <= e < vocab))
    bos = fields.get("tokenizer.ggml.bos_token_id")
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=key("feed_forward_length"),
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=key("attention.layer_norm_rms_epsilon", float),
        rope_theta=theta,
        max_position_embeddings=context,
        tie_word_embeddings="output.weight" not in tensors,
        bos_token_id=bos if isinstance(bos, int) else None,
        eos_token_ids=eos_ids,
        model_type=ARCHITECTURES[arch],
        rope_scaling=scaling,
        attention_bias="blk.0.attn_q.bias" in tensors or arch == "qwen2",
        attention_out_bias="blk.0.attn_output.bias" in tensors,
        qk_norm=arch in ("qwen3", "gemma3"),
    )
    if arch != "gemma3":
        return config
    window = key("attention.sliding_window")
    pattern = fields.get("gemma3.attention.sliding_window_pattern", GEMMA3_SLIDING_PATTERN)
    if isinstance(pattern, list):  # one flag a layer: true where the layer slides
        if len(pattern) != n_layers:
            raise ModelLoadError(path, "gemma3.attention.sliding_window_pattern: not one a layer")
        sliding = [bool(flag) for flag in pattern]
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        sliding = [(i + 1) % pattern != 0 for i in range(n_layers)]
    else:
        raise ModelLoadError(path, f"gemma3.attention.sliding_window_pattern {pattern!r}")
    softcap = fields.get("gemma3.final_logit_softcapping")
    return dataclasses.replace(
        config,
        rope_local_theta=GEMMA3_LOCAL_ROPE_THETA,
        sliding_window=window,
        layer_types=tuple("sliding_attention" if s else "full_attention" for s in sliding),
        norm_offset=1.0,
        post_norms=True,
        hidden_act="gelu_pytorch_tanh",
        embed_scale=hidden**0.5,
        query_pre_attn_scalar=float(hidden // heads if n_layers == 62 else head_dim),
        final_logit_softcapping=float(softcap) if softcap else None,
    )


def _rope_scaling(gguf: GGUFFile, arch: str, key, theta: float, head_dim: int) -> dict | None:
    """`LlamaConfig.rope_scaling` from `{arch}.rope.scaling.type` / `.factor` (or the older
    `rope.scale_linear`) and a `rope_freqs` tensor (Llama 3's, `_llama3_scaling`)."""
    kind = key("rope.scaling.type", str, "none")
    linear = gguf.fields.get(f"{arch}.rope.scale_linear")
    if kind == "linear" or (kind == "none" and linear not in (None, 1, 1.0)):
        factor = key("rope.scaling.factor", float, linear)
        if not factor > 0:
            raise ModelLoadError(gguf.path, f"RoPE scaling factor must be positive: {factor}")
        scaling = None if factor == 1.0 else {"rope_type": "linear", "factor": factor}
    elif kind == "none":
        scaling = None
    else:
        raise ModelLoadError(gguf.path, f"RoPE scaling {kind!r} is not supported")
    if "rope_freqs.weight" not in gguf.tensors:
        return scaling
    if arch != "llama" or scaling is not None:
        raise ModelLoadError(gguf.path, "a rope_freqs tensor is only supported as Llama 3's")
    original = key("rope.scaling.original_context_length", int, LLAMA3_ORIGINAL_CONTEXT)
    return _llama3_scaling(gguf.floats("rope_freqs.weight"), theta, head_dim, original, gguf)


def _llama3_scaling(factors, theta: float, head_dim: int, original: int, gguf) -> dict | None:
    """Llama 3's RoPE scaling from llama.cpp's `rope_freqs` tensor, the factor f_i each inverse
    frequency is divided by: 1 for short wavelengths, `factor` for long ones, 1 / ((1 - s) /
    factor + s) between, s = (original / wavelength - low) / (high - low) linear in the
    frequency. `factor` is the largest f_i and a line through the s of the factors between
    gives low and high for `original` (the frequencies depend on the three's ratios alone); the
    scaling found must reproduce every f_i (relative 1e-5, float32 storage), else the tensor is
    refused.

    Raises:
        ModelLoadError: naming the file, for factors that are not Llama 3's scaling.
    """
    factors = np.asarray(factors, np.float64).reshape(-1)
    inv_freq = llama.rope_frequencies(theta, head_dim)
    if factors.shape != inv_freq.shape or not np.all(factors >= 1 - 1e-6):
        raise ModelLoadError(gguf.path, f"rope_freqs has {factors.shape} factors, not Llama 3's")
    if np.allclose(factors, 1.0, rtol=0, atol=1e-6):
        return None
    factor = float(factors.max())
    between = (factors > 1 + 1e-6) & (factors < factor * (1 - 1e-6))
    low, high = 1.0, 4.0  # llama.cpp's converter's defaults
    if between.sum() >= 2:
        s = (1 / factors[between] - 1 / factor) / (1 - 1 / factor)
        slope, intercept = np.polyfit(inv_freq[between], s, 1)
        span = original / (2 * math.pi * slope)
        low = -intercept * span
        high = low + span
    scaling = {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": float(low),
        "high_freq_factor": float(high),
        "original_max_position_embeddings": original,
    }
    if not (high > low > 0) or not np.allclose(
        llama.rope_frequencies(theta, head_dim, scaling), inv_freq / factors, rtol=1e-5, atol=0
    ):
        raise ModelLoadError(gguf.path, "rope_freqs is not a Llama 3 RoPE scaling corral knows")
    return scaling


# ----------------------------------------------------------------------------------------------
# Tensors


@dataclass(frozen=True, eq=False)
class GGUFMatrix:
    """A weight matrix W [n_out, k] as consecutive groups of rows, each in one format: a
    `quant.TiledMatrix` (Q4_1, Q8_0; and Q4_K, Q4_0, Q5_0, Q6_K rewritten as their words,
    `_rewritten`), a `kquant_layout.KQuantMatrix` (Q5_K, Q5_1) or a float32 array [n, k]. It
    stands where `llama` takes a matrix's blocks (`linear`'s layer["blocks"][name], `lm_head`'s
    params["lm_head_blocks"]) and where it takes the float32 matrix (`W @ x^T`): every product
    goes through the parts' kernels.

    Attributes:
        parts: the groups of rows, top to bottom.
        plan: a compute plan the `TiledMatrix` parts are given (`dataclasses.replace`), or None.
    """

    parts: tuple
    plan: object = None

    def __post_init__(self):
        if self.plan is not None:  # the plan reaches the block parts that read one
            parts = tuple(
                dataclasses.replace(p, plan=self.plan) if isinstance(p, quant.TiledMatrix) else p
                for p in self.parts
            )
            object.__setattr__(self, "parts", parts)

    @property
    def shape(self) -> tuple[int, int]:
        """(n_out, k)."""
        return sum(_rows(p) for p in self.parts), _columns(self.parts[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the parts' arrays."""
        return sum(p.nbytes for p in self.parts)

    def takes(self, rows: int) -> bool:
        """Every pass reads these parts (there is no float32 copy to fall back on)."""
        return True

    def matmul(self, x: np.ndarray, parts: int = quant.ACTIVATION_PARTS) -> np.ndarray:
        """x W^T.  float32 [B, k] -> float32 [B, n_out], C order (float32 accumulation);
        `parts` goes to the `TiledMatrix` parts (their int8 activation parts).

        Raises:
            ValueError: x is not [B, k].
        """
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.shape[1]:
            raise ValueError(f"x must be [B, {self.shape[1]}], got shape {x.shape}")
        outs = [_product(p, x, parts) for p in self.parts]
        return outs[0] if len(outs) == 1 else np.concatenate(outs, axis=1)

    __array_ufunc__ = None  # `array @ matrix` calls __rmatmul__

    def __matmul__(self, x_t: np.ndarray) -> np.ndarray:
        """W x^T for llama's float path: [k, B] (or [k]) -> [n_out, B] (or [n_out])."""
        x_t = np.asarray(x_t, np.float32)
        if x_t.ndim == 1:
            return self.matmul(x_t[None, :])[0]
        return self.matmul(x_t.T).T


def _rows(part) -> int:
    return part.shape[0] if isinstance(part, np.ndarray) else part.n_out


def _columns(part) -> int:
    return part.shape[1] if isinstance(part, np.ndarray) else part.k


def _product(part, x: np.ndarray, parts: int) -> np.ndarray:
    """x P^T for one part.  [B, k] -> [B, rows of P], C order."""
    if isinstance(part, np.ndarray):
        return np.ascontiguousarray((part @ x.T).T)
    if isinstance(part, quant.TiledMatrix):
        return part.matmul(x, parts)
    return kquants.kquant_matmul(x, part)


@dataclass(frozen=True, eq=False)
class QuantizedRows:
    """A table [V, d] kept in its GGUF blocks, memory-mapped (the token embedding, an LM head):
    `table[ids]` dequantizes the rows asked for (`gguf.quants.dequantize`, ggml's arithmetic),
    `table @ h` is the product through `head` (one row's logits).

    Attributes:
        kind: the block type.
        raw: uint8 [V, bytes per row], a view of the mapped file.
        shape: (V, d).
        head: the same matrix for the product kernels (`GGUFMatrix`), or None.
    """

    kind: str
    raw: np.ndarray
    shape: tuple[int, int]
    head: GGUFMatrix | None = None

    def __getitem__(self, ids) -> np.ndarray:
        """int [...] -> float32 [..., d], a new array."""
        ids = np.asarray(ids)
        rows = dequantize_rows(self.raw[ids.reshape(-1)], self.kind)
        return rows.reshape(*ids.shape, self.shape[1])

    __array_ufunc__ = None

    def __matmul__(self, hidden: np.ndarray) -> np.ndarray:
        """[d] -> [V] (through `head`, else the dequantized rows in chunks)."""
        hidden = np.asarray(hidden, np.float32)
        if self.head is not None:
            return self.head.matmul(hidden[None, :])[0]
        step = 4096
        return np.concatenate(
            [self[np.arange(i, min(i + step, self.shape[0]))] @ hidden
             for i in range(0, self.shape[0], step)]
        )  # fmt: skip


@dataclass(frozen=True, eq=False)
class HeadColumns:
    """The LM head as llama's batched float path reads it, [d, V] (`hidden @ lm_head`): the
    product through the head's `GGUFMatrix`."""

    head: GGUFMatrix

    @property
    def shape(self) -> tuple[int, int]:
        """(d, V)."""
        return self.head.shape[::-1]

    __array_ufunc__ = None

    def __rmatmul__(self, hidden: np.ndarray) -> np.ndarray:
        """[N, d] -> [N, V]."""
        return self.head.matmul(hidden)


def _unpermute(gguf: GGUFFile, config: LlamaConfig, name: str) -> np.ndarray | None:
    """The row order undoing llama.cpp's q/k permutation for a `llama` file's `name`, or None."""
    if config.model_type != "llama":
        return None
    for part, heads in (("attn_q.", config.num_attention_heads),
                        ("attn_k.", config.num_key_value_heads)):  # fmt: skip
        if f".{part}" in name:
            return quant.unpermute_order(gguf.info(name).shape[0], heads)
    return None


def _checked(gguf: GGUFFile, name: str, shape: tuple[int, ...]) -> str:
    """The tensor's type, after checking its shape and that it is one corral reads.

    Raises:
        ModelLoadError: naming the file and the tensor: missing, of another shape, or of a type
            neither in `BLOCK_TYPES` nor `gguf_file.FLOAT_TYPES`.
    """
    info = gguf.info(name)
    if info.shape != shape:
        raise ModelLoadError(
            gguf.path, f"tensor {name!r} has shape {info.shape}, the metadata implies {shape}"
        )
    if info.kind not in BLOCK_TYPES and info.kind not in FLOAT_TYPES:
        kinds = ", ".join((*FLOAT_TYPES, *BLOCK_TYPES))
        raise ModelLoadError(
            gguf.path, f"tensor {name!r} is {info.kind}: corral computes on {kinds}"
        )  # fmt: skip
    return info.kind


def _matrix_parts(gguf: GGUFFile, config: LlamaConfig, names: list[str], shapes) -> list:
    """The rows of `names` stacked, grouped by type: [(kind, uint8 raw rows | float32 rows)]."""
    groups: list[tuple[str, list]] = []
    for name, shape in zip(names, shapes, strict=True):
        kind = _checked(gguf, name, shape)
        order = _unpermute(gguf, config, name)
        rows = gguf.floats(name) if kind in FLOAT_TYPES else gguf.raw(name)
        if order is not None:
            rows = rows[order]
        kind = "float" if kind in FLOAT_TYPES else kind
        if groups and groups[-1][0] == kind:
            groups[-1][1].append(rows)
        else:
            groups.append((kind, [rows]))
    return [(kind, np.concatenate(rows) if len(rows) > 1 else rows[0]) for kind, rows in groups]


def _part(kind: str, rows: np.ndarray):
    """One group of rows in its kernels' layout (`GGUFMatrix.parts`)."""
    if kind == "float":
        return np.ascontiguousarray(rows, dtype=np.float32)
    if kind in quant.SUPPORTED:
        return quant.BlockMatrix.from_blocks(kind, np.asarray(rows)).tiled()
    if kind in quant.SUPER_KINDS and quant.keeps_super_blocks(kind):
        return quant.super_tiled(rows, kind, REWRITE_ROWS)
    if kind in kquant_layout.AS_BLOCKS:
        return _rewritten(kind, rows)
    return kquant_layout.repack(np.ascontiguousarray(rows), kind)


REWRITE_ROWS = 8192
"""About the most rows `_rewritten` converts at once (whole tiles): its temporary arrays, a few
times a piece's blocks, bound the memory a load takes beside the weights (a 151,936-row LM head
at once would take about 1 GB of them)."""


def _rewritten(kind: str, rows: np.ndarray) -> quant.TiledMatrix:
    """A K-quant part as word tiles alone (`kquant_layout.as_blocks`, then the tiles
    `quant.BlockMatrix.tiled(words_only=True)` builds), converted a piece of whole tiles at a
    time straight into the final arrays.  uint8 [n_out, bytes per row] -> TiledMatrix"""
    n_out = rows.shape[0]
    n_tiles, tile = quant.words_tile_shape(n_out)
    step = max(1, REWRITE_ROWS // tile)  # tiles a piece
    arrays: list = []
    for first in range(0, n_tiles, step):
        count = min(step, n_tiles - first)
        piece = np.ascontiguousarray(rows[first * tile : (first + count) * tile])
        block_kind, scales, minimums, quants = kquant_layout.as_blocks(piece, kind)
        pieces = (
            quant_kernels.tile_rows(scales, count, tile),
            None if minimums is None else quant_kernels.tile_rows(minimums, count, tile),
            quant.word_tiles(quants, block_kind, count, tile),
        )
        arrays = quant.place_tiles(arrays, pieces, n_tiles, first)
    k = arrays[0].shape[1] * quant_kernels.BLOCK
    return quant.TiledMatrix(block_kind, n_out, k, arrays[0], arrays[1], None, arrays[2])


def gguf_params(gguf: GGUFFile, config: LlamaConfig) -> dict:
    """The forward pass's weights (`llama.build_params`' layout) with every matrix a
    `GGUFMatrix` in the file's blocks (also under each layer's "blocks" and as
    "lm_head_blocks"), the embedding a `QuantizedRows` when it is quantized (else float32),
    norms as the factors they apply (Gemma's stored 1 + w as it is), biases float32.

    Raises:
        ModelLoadError: naming the file, for a missing tensor, one of the wrong shape or of a
            type corral does not compute on.
    """
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    gemma = config.model_type == "gemma3_text"
    shift = 0.0 if gemma else config.norm_offset  # Gemma's files store 1 + w

    def vector(name: str, size: int, norm: bool = False) -> np.ndarray:
        if _checked(gguf, name, (size,)) not in FLOAT_TYPES:
            raise ModelLoadError(gguf.path, f"tensor {name!r} must be F32, F16 or BF16")
        value = np.array(gguf.floats(name), dtype=np.float32)
        return value + np.float32(shift) if norm and shift else value

    specs = {  # name -> ([GGUF tensors], [shapes])
        "w_qkv": (("attn_q", "attn_k", "attn_v"), ((q, d), (kv, d), (kv, d))),
        "w_o": (("attn_output",), ((d, q),)),
        "w_gate_up": (("ffn_gate", "ffn_up"), ((f, d), (f, d))),
        "w_down": (("ffn_down",), ((d, f),)),
    }
    # every part in its layout, a layer at a time, the file's pages dropped after each (the
    # memory a load takes: a layer's blocks beside the layouts built); the layers' Q4_1 / Q8_0
    # tiles packed in one allocation (quant.packed: fewer TLB misses), the rewritten K-quants'
    # and the head's arrays large allocations of their own
    built = []
    for i in range(config.num_hidden_layers):
        for tensors, shapes in specs.values():
            parts = _matrix_parts(gguf, config, [f"blk.{i}.{t}.weight" for t in tensors], shapes)
            built.append([_part(kind, rows) for kind, rows in parts])
        gguf.release()
    head_name = "token_embd.weight" if config.tie_word_embeddings else "output.weight"
    head_parts = _matrix_parts(gguf, config, [head_name], [(config.vocab_size, d)])
    tiled = [p for parts in built for p in parts
             if isinstance(p, quant.TiledMatrix) and p.quants is not None]  # fmt: skip
    packed = dict(zip(map(id, tiled), quant.packed(tiled), strict=True)) if tiled else {}
    matrices = [GGUFMatrix(tuple(packed.get(id(p), p) for p in parts)) for parts in built]
    head = GGUFMatrix(tuple(_part(kind, rows) for kind, rows in head_parts))
    del head_parts
    gguf.release()

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"blk.{i}."
        blocks = dict(zip(specs, matrices[i * len(specs) : (i + 1) * len(specs)], strict=True))
        layer = {
            "attn_norm": vector(p + "attn_norm.weight", d, norm=True),
            **blocks,
            "mlp_norm": vector(p + "ffn_norm.weight", d, norm=True),
            "window": config.window(i),
            "rope": int(config.local_rope(i)),
            "blocks": blocks,
        }
        if config.attention_bias:
            widths = {"q": q, "k": kv, "v": kv}
            biases = [vector(p + f"attn_{x}.bias", n) for x, n in widths.items()]
            for j, x in enumerate("qk"):
                order = _unpermute(gguf, config, p + f"attn_{x}.bias")
                if order is not None:
                    biases[j] = biases[j][order]
            layer["b_qkv"] = np.concatenate(biases)
        if config.attention_out_bias:
            layer["b_o"] = vector(p + "attn_output.bias", d)
        if config.qk_norm:
            layer["q_norm"] = vector(p + "attn_q_norm.weight", hd, norm=True)
            layer["k_norm"] = vector(p + "attn_k_norm.weight", hd, norm=True)
        if config.post_norms:
            layer["attn_out_norm"] = vector(p + "post_attention_norm.weight", d, norm=True)
            layer["mlp_out_norm"] = vector(p + "post_ffw_norm.weight", d, norm=True)
        layers.append(layer)

    embed_kind = _checked(gguf, "token_embd.weight", (config.vocab_size, d))
    if embed_kind in FLOAT_TYPES:
        embed = np.ascontiguousarray(gguf.floats("token_embd.weight"), dtype=np.float32)
    else:
        embed = QuantizedRows(embed_kind, gguf.raw("token_embd.weight"), (config.vocab_size, d))
    head_kind = gguf.info(head_name).kind
    if head_kind in FLOAT_TYPES:
        rows = embed if head_name == "token_embd.weight" else gguf.floats(head_name)
    else:
        rows = QuantizedRows(head_kind, gguf.raw(head_name), (config.vocab_size, d), head)
    params = {
        "embed": embed,
        "lm_head": HeadColumns(head),
        "lm_head_rows": rows,
        "norm": vector("output_norm.weight", d, norm=True),
        "logit_softcap": config.final_logit_softcapping,
        "layers": layers,
        "lm_head_blocks": head,
    }
    return params


def hf_tensors(gguf: GGUFFile, config: LlamaConfig) -> dict[str, np.ndarray]:
    """Every tensor dequantized to float32 under its Hugging Face name (the q/k rows put back,
    Gemma's norms as w: the stored 1 + w minus 1, as transformers' GGUF loader reads them), for
    `llama.build_params`: the float32 reference path.

    Raises:
        ModelLoadError: naming the file, for a missing tensor, one of the wrong shape or of a
            type gguf cannot dequantize.
    """
    gemma = config.model_type == "gemma3_text"
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
             "output_norm.weight", "lm_head.weight": "output.weight"}  # fmt: skip
    layer_names = _GEMMA_LAYER_NAMES if gemma else _LAYER_NAMES
    for i in range(config.num_hidden_layers):
        for gguf_name, hf_name in layer_names.items():
            for suffix in ("weight", "bias"):
                names[f"model.layers.{i}.{hf_name}.{suffix}"] = f"blk.{i}.{gguf_name}.{suffix}"
    tensors = {}
    for hf_name, shape in expected_shapes(config).items():
        name = names[hf_name]
        _checked(gguf, name, shape)
        tensor = gguf.floats(name).astype(np.float32)
        order = _unpermute(gguf, config, name)
        if order is not None:
            tensor = tensor[order]
        if gemma and name.endswith("norm.weight"):
            tensor = tensor - np.float32(1.0)
        tensors[hf_name] = np.ascontiguousarray(tensor)
    return tensors


_KQUANT_KERNELS = {
    "Q4_K": (kquant_row.q4_k_row, kquant_rows.q4_k_matmul),
    "Q5_K": (kquant_row.q5_k_row, kquant_rows.q5_k_matmul),
    "Q6_K": (kquant_row.q6_k_row, kquant_rows.q6_k_matmul),
}


def kquant_kernels(params: dict) -> list:
    """The compiled K-quant kernels the model's products call (one row and several: Numba
    compiles each on a machine's first use; the rewritten kinds' `quant_rows` products at the
    parts' widths where they compute on float32 activations, VNNI's where an "int8-amx" plan
    sends them there and Q6_K's `HALVES` ones on VNNI, `quant.TiledMatrix.activations`), for
    `loading.kernels_cached`."""
    matrices = [m for layer in params["layers"] for m in layer.get("blocks", {}).values()]
    parts = [p for m in [*matrices, params.get("lm_head_blocks")] for p in getattr(m, "parts", ())]
    kinds = {part.kind for part in parts if isinstance(part, kquant_layout.KQuantMatrix)}
    small = (kquant_row.small_row, kquant_rows.small_matmul)
    kernels = [kernel for kind in sorted(kinds) for kernel in _KQUANT_KERNELS.get(kind, small)]
    rewritten = [p for p in parts if isinstance(p, quant.TiledMatrix) and p.quants is None]
    words = {(p.kind in ("Q8_16", "Q6_K"), p.plan.lanes)
             for p in rewritten if p.activations == "float32"}  # fmt: skip
    tables = (quant_rows.FLOAT_MATMUL, quant_rows.HALVES_MATMUL)
    kernels += [tables[halves][lanes] for halves, lanes in sorted(words)]
    vnni = [p for p in rewritten if p.activations == "int8-vnni"]
    if any(p.activations != p.plan.activations == "int8-amx" or p.kind in quant.SUPER_KINDS
           for p in vnni):  # fmt: skip
        kernels += list(quant_int8.KERNELS)
    if any(p.kind == "Q8_16" and p.activations == "int8-vnni" for p in rewritten):
        kernels += list(quant_int8.HALVES_KERNELS)
    return kernels


def is_quantized(gguf: GGUFFile) -> bool:
    """Whether any tensor of the file is in a block type (not F32, F16 or BF16)."""
    return any(info.kind not in FLOAT_TYPES for info in gguf.tensors.values())


def load_gguf_model(path, quantized: bool = True):
    """Load a GGUF file: `config_from_gguf`, the weights (`gguf_params` when `quantized` and
    the file holds block types, else `hf_tensors` through `llama.build_params`: float32), the
    tokenizer, vocabulary, chat template and special tokens from its metadata
    (`gguf_tokenizer.load_gguf_tokenizer`).  -> `Model` (its `path` the file)

    Raises:
        ModelLoadError: naming the file (see `read_gguf_file`, `config_from_gguf`,
            `gguf_params`, `load_gguf_tokenizer`).
    """
    from corral.kernels import Vocabulary
    from corral.model.gguf_tokenizer import load_gguf_tokenizer
    from corral.model.model import Model

    gguf = read_gguf_file(path)
    config = config_from_gguf(gguf)
    tokenizer = load_gguf_tokenizer(gguf.path, config.vocab_size)
    if quantized and is_quantized(gguf):
        params = gguf_params(gguf, config)
    else:
        params = llama.build_params(config, hf_tensors(gguf, config))
    gguf.release()  # the blocks are copied into their layouts; the embedding maps back
    model = Model(
        config,
        params,
        tokenizer.tokenizer,
        tokenizer.chat_template,
        tokenizer.special_tokens,
        gguf.path,
    )
    model.vocabulary = Vocabulary(tokenizer.vocabulary.tokens, model.eos_ids)
    model.add_bos_token = tokenizer.add_bos_token
    return model

"""Synthetic GGUF models: the real dimensions and vocabulary of a model people use, random
weights, written with `gguf`'s writer so that llama.cpp, transformers and corral read the same
file (issue 38: speed and memory on models that are not downloaded).

    .venv/bin/python bench/synthetic.py qwen3-0.6b Q4_K_M    # writes it (once), prints the path

`SPECS` holds the shapes (each model's published `config.json`), `QUANTS` the file types, typed
tensor by tensor as llama.cpp's `llama-quantize` types a dense model (`tensor_type`):

- Q8_0: every matrix Q8_0, the embedding too.
- Q6_K: every matrix Q6_K, the embedding too.
- Q4_K_M: Q4_K, except the embedding (tied: it is also the LM head, typed as the output) Q6_K,
  and attn_v and ffn_down Q6_K in the layers of `use_more_bits` (the first and last eighth of
  the layers and every third between): 14 of 28 layers, 8 of 16.
- A matrix whose rows are not a multiple of 256 weights falls back as llama.cpp's does (Q4_K to
  Q5_0, Q6_K to Q8_0); none of the models here has one.

Norms are F32 ones (the `1 + w` factor they apply is 1), Qwen2's q/k/v biases F32 zeros,
Llama 3's `rope_freqs` the factors llama.cpp's converter writes for its `llama3` RoPE scaling.
Each quantized matrix is random valid blocks (`random_blocks`): random quant bytes, every
float16 scale of the matrix set to one value so that its weights have mean 0 and standard
deviation (row length)^-1/2, the scale of a variance-preserving initialization: normed
activations stay about 1, logits about 1, the float16 KV cache of llama.cpp far from overflow.
The weights are noise, so the tokens they generate are meaningless; what is measured is speed
and memory.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from engine_workers import VOCAB_DIR


@dataclass(frozen=True)
class Spec:
    """One model's shape as its GGUF metadata states it.

    Attributes:
        arch: llama.cpp's `general.architecture` ("llama", "qwen2", "qwen3").
        layers, hidden, heads, kv_heads, head_dim, ffn: the transformer's dimensions.
        vocab_file: llama.cpp's vocabulary-only GGUF (in `VOCAB_DIR`, or a path) whose
            `tokenizer.*` metadata the file takes; it must hold `vocab` tokens.
        vocab: the embedding's rows.
        rope_theta, rms_eps, context: `rope.freq_base`, `layer_norm_rms_epsilon`,
            `context_length`.
        llama3_rope: Llama 3's RoPE scaling (factor, low_freq_factor, high_freq_factor,
            original_max_position_embeddings), written as the `rope_freqs` tensor; or None.
    """

    arch: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab_file: str
    vocab: int
    rope_theta: float
    rms_eps: float
    context: int
    llama3_rope: tuple | None = field(default=None)


SPECS = {
    "qwen3-0.6b": Spec("qwen3", 28, 1024, 16, 8, 128, 3072, "ggml-vocab-qwen2.gguf", 151936,
                       1e6, 1e-6, 40960),
    "llama3.2-1b": Spec("llama", 16, 2048, 32, 8, 64, 8192, "ggml-vocab-llama-bpe.gguf", 128256,
                        5e5, 1e-5, 131072, (32.0, 1.0, 4.0, 8192)),
    "qwen2.5-1.5b": Spec("qwen2", 28, 1536, 12, 2, 128, 8960, "ggml-vocab-qwen2.gguf", 151936,
                         1e6, 1e-6, 32768),
}  # fmt: skip
"""Qwen3-0.6B, Llama-3.2-1B and Qwen2.5-1.5B (all with tied embeddings; Qwen3 with q/k norms
and head_dim 128 != hidden / heads; Qwen2.5 with q/k/v biases; Llama 3.2 with its RoPE
scaling). Qwen3 shares Qwen2's tokenizer; the vocabularies are llama.cpp's test files."""

QUANTS = {"Q4_K_M": 15, "Q6_K": 18, "Q8_0": 7}
"""The file types written -> llama.cpp's `general.file_type` (LLAMA_FTYPE_MOSTLY_*)."""

SCALE_FIELDS = {
    "Q4_K": {0: 1.0, 2: 7.5},  # d, dmin = 7.5 d: w = d (sc q - 7.5 m), mean 0
    "Q5_K": {0: 1.0, 2: 15.5},
    "Q6_K": {208: 1.0},  # d; the int8 sub-block scales are random, of either sign
    "Q8_0": {0: 1.0},
    "Q5_0": {0: 1.0},  # w = d (q - 16)
}
"""Each block type's float16 scales: byte offset in the block -> ratio to the matrix's one
scale value."""

FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}
"""llama.cpp's type for a matrix whose rows do not split into 256-weight blocks."""


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the layers whose attn_v and ffn_down Q4_K_M writes in Q6_K."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def tensor_type(quant: str, name: str, row: int, layer: int, layers: int) -> str:
    """The type llama.cpp's `llama_tensor_get_type` gives matrix `name` (a GGUF tensor name
    without "blk.N."/".weight": "token_embd", "attn_v", ...) of layer `layer` of `layers`, rows
    of `row` weights, in a file of type `quant` (`QUANTS`; a dense model, tied embeddings)."""
    if quant == "Q8_0":
        return "Q8_0"
    kind = "Q6_K"
    if quant == "Q4_K_M" and name != "token_embd":
        kind = "Q6_K" if name in ("attn_v", "ffn_down") and use_more_bits(layer, layers) else "Q4_K"
    return kind if row % 256 == 0 else FALLBACK[kind]


def random_blocks(rng: np.random.Generator, kind: str, n_out: int, k: int) -> np.ndarray:
    """Random valid blocks of `kind` (a key of `SCALE_FIELDS`) for a [n_out, k] matrix: random
    quant bytes, the float16 scales one value set so that the weights (as gguf's NumPy
    dequantization reads them, measured on the first rows) have standard deviation k^-1/2.
    -> uint8 [n_out, bytes per row]"""
    import gguf

    kind_id = gguf.GGMLQuantizationType[kind]
    weights, size = gguf.GGML_QUANT_SIZES[kind_id]
    raw = rng.integers(0, 256, (n_out, k // weights, size), dtype=np.uint8)

    def set_scale(value: float) -> None:
        for start, ratio in SCALE_FIELDS[kind].items():
            half = np.full(raw.shape[:2] + (1,), value * ratio, np.float16)
            raw[..., start : start + 2] = half.view(np.uint8)

    set_scale(1.0)
    sample = gguf.quants.dequantize(raw[:32].reshape(min(n_out, 32), -1), kind_id)
    set_scale(1.0 / (float(sample.std()) * math.sqrt(k)))
    return raw.reshape(n_out, -1)


def llama3_rope_factors(spec: Spec) -> np.ndarray:
    """The `rope_freqs` llama.cpp's converter writes for Llama 3's RoPE scaling: the factor
    each inverse frequency is divided by.  -> float32 [head_dim / 2]"""
    factor, low, high, original = spec.llama3_rope
    freqs = spec.rope_theta ** -(np.arange(0, spec.head_dim, 2) / spec.head_dim)
    wavelength = 2 * math.pi / freqs
    smooth = (original / wavelength - low) / (high - low)
    between = 1 / ((1 - smooth) / factor + smooth)
    factors = np.where(wavelength < original / high, 1.0, between)
    return np.where(wavelength > original / low, factor, factors).astype(np.float32)


def tensors(spec: Spec, quant: str):
    """The file's tensors in order: (name, shape as [n_out, k] or [n], type or "F32", fill)
    with fill a float for a vector ("F32", every element that value) and None for a random
    matrix."""
    d, f, hd = spec.hidden, spec.ffn, spec.head_dim
    q, kv = spec.heads * hd, spec.kv_heads * hd
    yield "token_embd.weight", (spec.vocab, d), tensor_type(quant, "token_embd", d, 0, 1), None
    yield "output_norm.weight", (d,), "F32", 1.0
    if spec.llama3_rope:
        yield "rope_freqs.weight", (hd // 2,), "F32", llama3_rope_factors(spec)
    matrices = {
        "attn_q": (q, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, q),
        "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f),
    }  # fmt: skip
    for i in range(spec.layers):
        p = f"blk.{i}."
        yield p + "attn_norm.weight", (d,), "F32", 1.0
        yield p + "ffn_norm.weight", (d,), "F32", 1.0
        if spec.arch == "qwen3":
            yield p + "attn_q_norm.weight", (hd,), "F32", 1.0
            yield p + "attn_k_norm.weight", (hd,), "F32", 1.0
        if spec.arch == "qwen2":
            for name, size in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
                yield p + name + ".bias", (size,), "F32", 0.0
        for name, shape in matrices.items():
            kind = tensor_type(quant, name, shape[1], i, spec.layers)
            yield p + name + ".weight", shape, kind, None


def write_model(path: Path, spec: Spec, quant: str, seed: int = 0) -> None:
    """Write the synthetic model `spec` as a `quant` GGUF file (`QUANTS`) at `path` (through
    a `.partial` file renamed at the end, so a stopped write leaves no file at `path`), one
    tensor at a time (the writer holds one matrix in memory).

    Raises:
        ValueError: `quant` is not in `QUANTS`, or the vocabulary file does not hold
            `spec.vocab` tokens.
    """
    import gguf
    from corral.model.gguf_metadata import read_gguf_metadata

    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
    vocab_path = VOCAB_DIR / spec.vocab_file
    vocab = read_gguf_metadata(vocab_path)
    tokens = list(vocab["tokenizer.ggml.tokens"])
    if len(tokens) != spec.vocab:
        raise ValueError(f"{vocab_path} holds {len(tokens)} tokens, not {spec.vocab}")
    partial = path.with_name(path.name + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(partial), spec.arch)
    writer.add_name(f"synthetic {spec.arch} ({path.stem})")
    writer.add_file_type(QUANTS[quant])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_block_count(spec.layers)
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.hidden)
    writer.add_feed_forward_length(spec.ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_key_length(spec.head_dim)
    writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_dim)
    writer.add_layer_norm_rms_eps(spec.rms_eps)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_vocab_size(spec.vocab)
    writer.add_tokenizer_model(vocab["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
    writer.add_token_list(tokens)
    writer.add_token_types(vocab["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.merges" in vocab:
        writer.add_token_merges(vocab["tokenizer.ggml.merges"])
    writer.add_eos_token_id(vocab["tokenizer.ggml.eos_token_id"])
    if "tokenizer.ggml.bos_token_id" in vocab:
        writer.add_bos_token_id(vocab["tokenizer.ggml.bos_token_id"])
    if "tokenizer.chat_template" in vocab:
        writer.add_chat_template(vocab["tokenizer.chat_template"])
    plan = list(tensors(spec, quant))
    for name, shape, kind, _ in plan:
        if kind == "F32":
            writer.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
        else:
            kind_id = gguf.GGMLQuantizationType[kind]
            weights, size = gguf.GGML_QUANT_SIZES[kind_id]
            nbytes = shape[0] * shape[1] // weights * size
            row = (shape[0], shape[1] // weights * size)
            writer.add_tensor_info(name, row, np.dtype(np.uint8), nbytes, raw_dtype=kind_id)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _, shape, kind, fill in plan:
        if kind == "F32":
            writer.write_tensor_data(np.broadcast_to(np.float32(fill), shape).astype(np.float32))
        else:
            writer.write_tensor_data(random_blocks(rng, kind, *shape))
    writer.close()
    os.replace(partial, path)


def cached_model(name: str, quant: str) -> Path:
    """The synthetic model `name` (`SPECS`) in `quant` (`QUANTS`), written on first use into
    corral's cache dir (`corral.model.weights.cache_dir()`/synthetic/, e.g.
    ~/.cache/corral/synthetic/qwen3-0.6b-Q4_K_M.gguf) and reused after.

    Raises:
        ValueError: an unknown name or quant.
    """
    from corral.model.weights import cache_dir

    if name not in SPECS:
        raise ValueError(f"the synthetic model must be one of {', '.join(SPECS)}, got {name!r}")
    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {', '.join(QUANTS)}, got {quant!r}")
    path = cache_dir() / "synthetic" / f"{name}-{quant}.gguf"
    if not path.exists():
        print(f"writing {path}", file=sys.stderr)
        write_model(path, SPECS[name], quant)
    return path


if __name__ == "__main__":
    print(cached_model(*sys.argv[1:3]))

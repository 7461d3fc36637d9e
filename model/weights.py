"""Model tensors on disk: safetensors in, GGUF -> Hugging Face folder conversion out, and where
conversions are cached (docs/design.md section 6).

`read_safetensors` memory-maps a `.safetensors` file (float32 zero-copy, float16 and bfloat16
widened) and `load_folder_tensors` checks a folder's tensors against the shapes its config.json
implies. `convert_gguf` dequantizes every tensor of a Llama GGUF with `gguf`, undoes llama.cpp's
row permutation of the q and k projections, and writes a Hugging Face folder once
(`config.json`, `model.safetensors` in float32, `tokenizer.json`, `tokenizer_config.json` with the
chat template) under `cache_dir()` (`$CORRAL_HOME`, else the platform's user cache dir for
"corral"); later loads memory-map the safetensors. `corral.model.loading` drives all of this.

Every problem with a file raises `ModelLoadError` naming the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path

import numpy as np
import platformdirs
from corral.model.config import LlamaConfig
from corral.model.errors import ModelLoadError
from corral.model.gguf_tokenizer import tokenizer_json_from_gguf

# GGUF tensor names -> Hugging Face names ("{i}" is the layer index).
_GGUF_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_LAYER_NAMES = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}


def cache_dir() -> Path:
    """Where corral keeps downloads and converted models: `$CORRAL_HOME` if set, else the
    platform's user cache dir for "corral"."""
    home = os.environ.get("CORRAL_HOME")
    if home:
        return Path(home)
    return Path(platformdirs.user_cache_dir("corral"))


# ----------------------------------------------------------------------------------------------
# Hugging Face folders


def expected_shapes(config: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a checkpoint of the Llama family must hold, by Hugging Face name -> shape
    ([out, in]): Llama's, plus the q/k/v biases (`attention_bias`), the output projection's
    (`attention_out_bias`), the per-head q/k norms (`qk_norm`) and Gemma 3's norms before and
    after the MLP (`post_norms`; its `post_attention_layernorm` then follows the attention)."""
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim
    q, kv = config.num_attention_heads * hd, config.num_key_value_heads * hd
    shapes = {"model.embed_tokens.weight": (config.vocab_size, d), "model.norm.weight": (d,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d),
            p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d),
            p + "self_attn.o_proj.weight": (d, q),
            p + "post_attention_layernorm.weight": (d,),
            p + "mlp.gate_proj.weight": (f, d),
            p + "mlp.up_proj.weight": (f, d),
            p + "mlp.down_proj.weight": (d, f),
        }
        if config.attention_bias:
            biases = {"q": q, "k": kv, "v": kv}
            shapes |= {p + f"self_attn.{x}_proj.bias": (n,) for x, n in biases.items()}
        if config.attention_out_bias:
            shapes[p + "self_attn.o_proj.bias"] = (d,)
        if config.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)}
        if config.post_norms:
            shapes |= {
                p + "pre_feedforward_layernorm.weight": (d,),
                p + "post_feedforward_layernorm.weight": (d,),
            }
    return shapes


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """Memory-map a `.safetensors` file: name -> array (F32 zero-copy; F16/BF16 -> float32).

    Raises:
        ModelLoadError: naming `path`, if it is missing, truncated, or its header is malformed.
    """
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(path, "file not found")
    size = path.stat().st_size
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise ModelLoadError(path, "malformed safetensors header: the file is too short")
        (header_size,) = struct.unpack("<Q", prefix)
        if header_size > size - 8:
            raise ModelLoadError(path, "malformed safetensors header: longer than the file")
        try:
            header = json.loads(file.read(header_size))
        except (ValueError, UnicodeDecodeError) as error:
            raise ModelLoadError(path, f"malformed safetensors header: {error}") from error
    if not isinstance(header, dict):
        raise ModelLoadError(path, "malformed safetensors header: expected a JSON object")
    data = (
        np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
        if size > (8 + header_size)
        else np.zeros(0, np.uint8)
    )
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            shape, dtype = tuple(info["shape"]), info["dtype"]
        except (KeyError, TypeError, ValueError) as error:
            raise ModelLoadError(path, f"malformed entry for tensor {name!r}") from error
        raw = data[start:end]
        width = {"F32": 4, "F16": 2, "BF16": 2}.get(dtype)
        if width is None:
            raise ModelLoadError(path, f"tensor {name!r} has unsupported dtype {dtype}")
        if end - start != width * int(np.prod(shape)) or end > data.size:
            raise ModelLoadError(path, f"tensor {name!r}: data size does not match its shape")
        if dtype == "F32":
            array = raw.view("<f4")
        elif dtype == "F16":
            array = raw.view("<f2").astype(np.float32)
        else:
            array = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array.reshape(shape)
    return tensors


def load_folder_tensors(folder: Path, config: LlamaConfig) -> dict[str, np.ndarray]:
    """Read and check every `*.safetensors` file of a Hugging Face folder.

    Returns: Hugging Face name -> float32 array of the shape `expected_shapes` gives.

    Raises:
        ModelLoadError: no safetensors file; a tensor missing (naming the folder's files) or of
            the wrong shape (naming the file that holds it).
    """
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(folder / "model.safetensors", "file not found")
    tensors, origin = {}, {}
    for file in files:
        for name, array in read_safetensors(file).items():
            tensors[name], origin[name] = array, file
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            where = files[0] if len(files) == 1 else folder
            raise ModelLoadError(where, f"tensor {name!r} is missing")
        if tuple(tensors[name].shape) != shape:
            raise ModelLoadError(
                origin[name],
                f"tensor {name!r} has shape {tuple(tensors[name].shape)}, "
                f"config.json implies {shape}",
            )
    return tensors


# ----------------------------------------------------------------------------------------------
# GGUF conversion


def unpermute_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation.  [n_heads*head_dim, in] -> [n_heads*head_dim, in]

    llama.cpp's converter interleaves each head's two rotary halves (rows j and j + head_dim/2
    become rows 2j and 2j + 1) so that its RoPE rotates adjacent pairs; Hugging Face's Llama
    rotates the halves (`rotate_half`). This puts the rows back.
    """
    rows, columns = weight.shape
    return (
        weight.reshape(n_heads, rows // n_heads // 2, 2, columns)
        .swapaxes(1, 2)
        .reshape(rows, columns)
    )


def _gguf_fields(reader) -> dict:
    fields = {}
    for key, field in reader.fields.items():
        try:
            fields[key] = field.contents()
        except Exception:  # a field type gguf cannot decode: not one corral reads
            continue
    return fields


def convert_gguf(gguf_path: str | Path, target: str | Path, progress: bool = True) -> Path:
    """Convert a Llama GGUF file into a Hugging Face folder at `target` (float32 safetensors).

    The folder is written under a temporary name and renamed into place when complete, so an
    interrupted conversion leaves nothing behind that a later load would trust.

    Raises:
        ModelLoadError: naming the GGUF file, if it is missing, unreadable, not a Llama model,
            or lacks a tensor or tokenizer field.
    """
    import gguf  # deferred: only a conversion needs these (about 0.3 s of imports)
    from safetensors.numpy import save_file
    from tqdm import tqdm

    gguf_path, target = Path(gguf_path), Path(target)
    if not gguf_path.is_file():
        raise ModelLoadError(gguf_path, "file not found")
    try:
        reader = gguf.GGUFReader(gguf_path)
    except Exception as error:
        raise ModelLoadError(gguf_path, f"not a readable GGUF file: {error}") from error
    fields = _gguf_fields(reader)
    arch = fields.get("general.architecture")
    if arch != "llama":
        raise ModelLoadError(
            gguf_path, f"architecture {arch!r} is not supported: corral runs Llama models only"
        )
    tokens = fields.get("tokenizer.ggml.tokens") or []
    names = {tensor.name for tensor in reader.tensors}

    def meta(key: str, default=None):
        value = fields.get(f"llama.{key}", default)
        if value is None:
            raise ModelLoadError(gguf_path, f"metadata llama.{key} is missing")
        return value

    heads, kv_heads = int(meta("attention.head_count")), int(meta("attention.head_count_kv"))
    hidden = int(meta("embedding_length"))
    eos = fields.get("tokenizer.ggml.eos_token_id")
    config = LlamaConfig(
        vocab_size=int(fields.get("llama.vocab_size", len(tokens))),
        hidden_size=hidden,
        intermediate_size=int(meta("feed_forward_length")),
        num_hidden_layers=int(meta("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=int(fields.get("llama.attention.key_length", hidden // heads)),
        rms_norm_eps=float(meta("attention.layer_norm_rms_epsilon")),
        rope_theta=float(fields.get("llama.rope.freq_base", 10000.0)),
        max_position_embeddings=int(meta("context_length")),
        tie_word_embeddings="output.weight" not in names,
        bos_token_id=fields.get("tokenizer.ggml.bos_token_id"),
        eos_token_ids=() if eos is None else (int(eos),),
    )
    tokenizer_json = tokenizer_json_from_gguf(fields, gguf_path)

    tensors = {}
    for tensor in tqdm(
        reader.tensors, desc=f"converting {gguf_path.name}", unit="tensor", disable=not progress
    ):
        name = _GGUF_NAMES.get(tensor.name)
        if name is None and tensor.name.startswith("blk."):
            _, layer, rest = tensor.name.split(".", 2)
            if rest in _GGUF_LAYER_NAMES:
                name = f"model.layers.{layer}.{_GGUF_LAYER_NAMES[rest]}"
        if name is None:
            continue  # e.g. rope_freqs: not a weight of the Hugging Face model
        try:
            weight = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        except (NotImplementedError, ValueError) as error:
            raise ModelLoadError(
                gguf_path, f"tensor {tensor.name!r} cannot be dequantized: {error}"
            ) from error
        weight = weight.reshape([int(n) for n in reversed(tensor.shape)])
        if name.endswith("q_proj.weight"):
            weight = unpermute_rows(weight, heads)
        elif name.endswith("k_proj.weight"):
            weight = unpermute_rows(weight, kv_heads)
        tensors[name] = np.ascontiguousarray(weight)
    for name, shape in expected_shapes(config).items():
        if name not in tensors:
            raise ModelLoadError(gguf_path, f"tensor for {name!r} is missing")
        if tensors[name].shape != shape:
            raise ModelLoadError(
                gguf_path, f"tensor {name!r} has shape {tensors[name].shape}, expected {shape}"
            )

    def token(index):
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": token(config.bos_token_id),
        "eos_token": token(eos),
        "unk_token": token(fields.get("tokenizer.ggml.unknown_token_id")),
        "pad_token": token(fields.get("tokenizer.ggml.padding_token_id")),
        "add_bos_token": bool(fields.get("tokenizer.ggml.add_bos_token", False)),
        "clean_up_tokenization_spaces": False,
        "model_max_length": config.max_position_embeddings,
        "chat_template": fields.get("tokenizer.chat_template"),
    }

    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=target.name + ".partial-", dir=target.parent))
    try:
        save_file(tensors, str(partial / "model.safetensors"), metadata={"format": "pt"})
        (partial / "tokenizer.json").write_text(
            json.dumps(tokenizer_json, ensure_ascii=False), encoding="utf-8"
        )
        (partial / "tokenizer_config.json").write_text(
            json.dumps(tokenizer_config, ensure_ascii=False, indent=2), encoding="utf-8"
        )
        (partial / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
        try:
            partial.rename(target)
        except OSError as error:
            if not (target / "config.json").is_file():  # not another process's finished copy
                reason = f"cannot move the converted model into place: {error}"
                raise ModelLoadError(target, reason) from error
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def gguf_cache_folder(gguf_path: str | Path) -> Path:
    """Where the conversion of a given GGUF file is cached: `cache_dir()/models/<stem>-<key>`,
    the key a hash of the file's resolved path, size and mtime.

    Raises:
        ModelLoadError: naming the file, if it does not exist.
    """
    gguf_path = Path(gguf_path).resolve()
    if not gguf_path.is_file():
        raise ModelLoadError(gguf_path, "file not found")
    stat = gguf_path.stat()
    key = hashlib.sha256(f"{gguf_path}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    return cache_dir() / "models" / f"{gguf_path.stem}-{key[:12]}"

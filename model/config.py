"""The Llama hyperparameters corral's forward pass needs, read from a Hugging Face `config.json`
(docs/design.md section 6).

Only the Llama architecture is accepted (SmolLM2-135M/360M/1.7B are Llama). RoPE theta is read
from `rope_theta` or, as newer transformers write it, from `rope_parameters["rope_theta"]`. RoPE
scaling variants (linear, dynamic, llama3, yarn, ...) are refused rather than silently ignored.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from corral.model.errors import ModelLoadError


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes and constants of a Llama decoder.

    Attributes:
        vocab_size: V, rows of the embedding table.
        hidden_size: d, the residual width.
        intermediate_size: F, the SwiGLU width.
        num_hidden_layers: L.
        num_attention_heads: query heads Hq.
        num_key_value_heads: key/value heads Hkv (Hq is a multiple of it: grouped-query attention).
        head_dim: per-head width (d / Hq unless the config says otherwise).
        rms_norm_eps: epsilon inside RMSNorm.
        rope_theta: RoPE base frequency.
        max_position_embeddings: the longest context the model was trained for.
        tie_word_embeddings: the LM head is the embedding table (no `lm_head.weight`).
        bos_token_id: beginning-of-sequence id, or None.
        eos_token_ids: the ids that end generation (config.json's eos_token_id, int or list).
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_ids: tuple[int, ...]

    @classmethod
    def from_dict(cls, raw: dict, path: str | Path = "config.json") -> LlamaConfig:
        """Read a Hugging Face config dict.

        Raises:
            ModelLoadError: naming `path`, for another architecture, a missing or ill-typed key,
                inconsistent head counts, or a RoPE scaling variant corral does not implement.
        """
        if not isinstance(raw, dict):
            raise ModelLoadError(path, "expected a JSON object")
        model_type = raw.get("model_type")
        architectures = raw.get("architectures") or []
        if model_type != "llama" and "LlamaForCausalLM" not in architectures:
            found = model_type or (architectures[0] if architectures else "unknown")
            raise ModelLoadError(
                path, f"architecture {found!r} is not supported: corral runs Llama models only"
            )

        def need(key: str, kind: type = int, source: dict = raw):
            if key not in source or source[key] is None:
                raise ModelLoadError(path, f"missing key {key!r}")
            value = source[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
                raise ModelLoadError(path, f"{key!r} must be {kind.__name__}, got {value!r}")
            return value

        def optional(key: str, default, kind: type = int):
            return default if raw.get(key) is None else need(key, kind)

        rope_parameters = raw.get("rope_parameters") or {}
        rope_scaling = raw.get("rope_scaling") or {}
        for key, value in (("rope_parameters", rope_parameters), ("rope_scaling", rope_scaling)):
            if not isinstance(value, dict):
                raise ModelLoadError(path, f"{key!r} must be an object, got {value!r}")
        rope_type = rope_parameters.get("rope_type") or rope_scaling.get("rope_type")
        rope_type = rope_type or rope_scaling.get("type") or "default"
        if rope_type != "default":
            raise ModelLoadError(path, f"RoPE scaling {rope_type!r} is not supported")
        if "rope_theta" in raw:
            rope_theta = need("rope_theta", float)
        elif "rope_theta" in rope_parameters:
            rope_theta = need("rope_theta", float, rope_parameters)
        else:
            rope_theta = 10000.0  # transformers' LlamaConfig default

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kv_heads = optional("num_key_value_heads", heads)
        head_dim = optional("head_dim", hidden // max(heads, 1))
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
            raise ModelLoadError(
                path, f"{heads} query heads cannot share {kv_heads} key/value heads"
            )
        if head_dim % 2:
            raise ModelLoadError(path, f"head_dim {head_dim} must be even for RoPE")
        eos = raw.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            intermediate_size=need("intermediate_size"),
            num_hidden_layers=need("num_hidden_layers"),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=optional("rms_norm_eps", 1e-6, float),
            rope_theta=rope_theta,
            max_position_embeddings=optional("max_position_embeddings", 2048),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> LlamaConfig:
        """Read `config.json`. Raises `ModelLoadError` naming the file if missing or malformed."""
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(path, "file not found")
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ModelLoadError(path, f"malformed JSON: {error}") from error
        return cls.from_dict(raw, path)

    def to_dict(self) -> dict:
        """The Hugging Face `config.json` form (transformers' LlamaConfig keys)."""
        raw = asdict(self)
        eos = raw.pop("eos_token_ids")
        raw["eos_token_id"] = eos[0] if len(eos) == 1 else list(eos)
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_act": "silu",
            "attention_bias": False,
            "mlp_bias": False,
            "rope_scaling": None,
            "torch_dtype": "float32",
            **raw,
        }

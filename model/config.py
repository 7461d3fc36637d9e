"""The hyperparameters corral's forward pass needs, read from a Hugging Face `config.json`
(docs/design.md section 6, docs/models.md).

One config type describes the Llama family and its relatives: Llama (SmolLM2, Llama 3.x),
Mistral and Ministral, Qwen2/2.5, Qwen3 and Gemma 3 text (`ARCHITECTURES`). Each field that one
of them changes has Llama's value as its default, and the forward pass (`corral.model.llama`)
switches on the fields, not on the family. Anything else is refused with a `ModelLoadError`
naming the architecture, and so is every setting that would change the arithmetic in a way
corral does not implement (RoPE scaling other than linear and llama3, MLP biases, another
activation, partial rotary embeddings, bidirectional attention): never a silently different
model. A key a config leaves out takes transformers' default for its family (Mistral's
sliding window of 4,096, Qwen3's head width of 128, Gemma 3's tied embeddings, ...).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from corral.model.errors import ModelLoadError

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "ministral": "MinistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}
"""The architectures corral runs: config.json's `model_type` -> its transformers class (the
config's `architectures`)."""

ROPE_TYPES = ("default", "linear", "llama3")
"""The RoPE variants implemented (`rope_scaling` / `rope_parameters` `rope_type`)."""

LAYER_TYPES = ("full_attention", "sliding_attention")

# transformers' defaults for keys a family's config.json may leave out
_DEFAULTS = {
    "llama": {"max_position_embeddings": 2048},
    "mistral": {"max_position_embeddings": 131072, "sliding_window": 4096},
    "ministral": {"max_position_embeddings": 131072, "sliding_window": 4096},
    "qwen2": {"max_position_embeddings": 32768, "sliding_window": 4096},
    "qwen3": {"max_position_embeddings": 32768, "sliding_window": 4096, "head_dim": 128},
    "gemma3_text": {
        "max_position_embeddings": 131072,
        "sliding_window": 4096,
        "head_dim": 256,
        "rope_theta": 1_000_000.0,
        "tie_word_embeddings": True,
    },
}


@dataclass(frozen=True)
class LlamaConfig:
    """Shapes and constants of a decoder of the Llama family (`ARCHITECTURES`).

    The fields after `eos_token_ids` say how a relative differs from Llama; their defaults are
    Llama's (a SmolLM2 or Llama 3 config sets none of them but `rope_scaling`).

    Attributes:
        vocab_size: V, rows of the embedding table.
        hidden_size: d, the residual width.
        intermediate_size: F, the gated MLP's width.
        num_hidden_layers: L.
        num_attention_heads: query heads Hq.
        num_key_value_heads: key/value heads Hkv (Hq is a multiple of it: grouped-query attention).
        head_dim: per-head width hd (d / Hq unless the config says otherwise: Qwen3, Gemma 3).
        rms_norm_eps: epsilon inside RMSNorm.
        rope_theta: RoPE base frequency (of the full-attention layers, for Gemma 3).
        max_position_embeddings: the longest context the model was trained for.
        tie_word_embeddings: the LM head is the embedding table (no `lm_head.weight`).
        bos_token_id: beginning-of-sequence id, or None.
        eos_token_ids: the ids that end generation (config.json's eos_token_id, int or list).
        model_type: config.json's `model_type`, a key of `ARCHITECTURES`.
        rope_scaling: None (plain RoPE) or the scaling of the frequencies, as transformers
            writes it: {"rope_type": "linear", "factor": f} or {"rope_type": "llama3",
            "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}.
        rope_local_theta: the RoPE base of the sliding-window layers, when it is their own
            (Gemma 3's `rope_local_base_freq`; plain RoPE, no scaling); None: every layer's
            RoPE is the same.
        sliding_window: w, the keys a sliding-window layer sees (its own token and the w - 1
            before it), or None.
        layer_types: one of `LAYER_TYPES` per layer, or () for every layer full attention.
        attention_bias: the q, k and v projections have biases (Qwen2; `attention_bias` of
            Llama, Qwen3, Gemma 3).
        attention_out_bias: the output projection has a bias (`attention_bias` of Llama, Qwen3,
            Gemma 3; not Qwen2's).
        qk_norm: an RMSNorm over each head of q and of k, before RoPE (Qwen3, Gemma 3).
        norm_offset: every RMSNorm scales by norm_offset + weight (Gemma's 1: `1 + weight`).
        post_norms: RMSNorms also on the attention's and the MLP's outputs, before each
            residual sum (Gemma 3's four norms a layer).
        hidden_act: the MLP's gate activation, "silu" (SwiGLU) or "gelu_pytorch_tanh" (GeGLU).
        embed_scale: the embeddings are multiplied by this (float32; Gemma's sqrt(d)), or None.
        query_pre_attn_scalar: attention scores are scaled by its inverse square root (Gemma
            3), or None for hd^-1/2.
        final_logit_softcapping: c, logits become c tanh(z / c) (Gemma), or None. (Gemma 3's
            `attn_logit_softcapping` is read by neither transformers' Gemma 3 nor llama.cpp's,
            and not by corral: docs/models.md.)
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
    model_type: str = "llama"
    rope_scaling: dict | None = None
    rope_local_theta: float | None = None
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    attention_bias: bool = False
    attention_out_bias: bool = False
    qk_norm: bool = False
    norm_offset: float = 0.0
    post_norms: bool = False
    hidden_act: str = "silu"
    embed_scale: float | None = None
    query_pre_attn_scalar: float | None = None
    final_logit_softcapping: float | None = None

    @property
    def attention_scale(self) -> float:
        """The factor of the attention scores: query_pre_attn_scalar^-1/2, else hd^-1/2."""
        return (self.query_pre_attn_scalar or self.head_dim) ** -0.5

    def sliding(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) is a "sliding_attention" layer."""
        return bool(self.layer_types) and self.layer_types[layer] == "sliding_attention"

    def window(self, layer: int) -> int:
        """The sliding window w of layer `layer`, or 0 when it attends to the whole context."""
        return self.sliding_window if self.sliding(layer) and self.sliding_window else 0

    def local_rope(self, layer: int) -> bool:
        """Whether layer `layer` takes the sliding layers' own RoPE base (`rope_local_theta`):
        a sliding layer of Gemma 3, even when `sliding_window` is None."""
        return self.rope_local_theta is not None and self.sliding(layer)

    @classmethod
    def from_dict(cls, raw: dict, path: str | Path = "config.json") -> LlamaConfig:
        """Read a Hugging Face config dict.

        Raises:
            ModelLoadError: naming `path`, for an architecture not in `ARCHITECTURES` (the
                message names its `model_type` and `architectures`), a missing or ill-typed
                key, inconsistent head counts, or a setting corral does not implement (a RoPE
                scaling variant, an MLP bias, another activation, ...).
        """
        if not isinstance(raw, dict):
            raise ModelLoadError(path, "expected a JSON object")
        family = _family(raw, path)
        defaults = _DEFAULTS[family]

        def need(key: str, kind: type = int, source: dict = raw):
            if key not in source or source[key] is None:
                raise ModelLoadError(path, f"missing key {key!r}")
            value = source[key]
            if kind is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
                raise ModelLoadError(path, f"{key!r} must be {kind.__name__}, got {value!r}")
            return value

        def optional(key: str, default, kind: type = int, source: dict = raw):
            return default if source.get(key) is None else need(key, kind, source)

        def refuse_unless(key: str, allowed, default):
            value = raw.get(key, default)
            if value not in allowed:
                raise ModelLoadError(path, f"{key!r} {value!r} is not supported for {family}")

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        kv_heads = optional("num_key_value_heads", heads)
        head_dim = optional("head_dim", defaults.get("head_dim", hidden // max(heads, 1)))
        if heads <= 0 or kv_heads <= 0 or heads % kv_heads:
            raise ModelLoadError(
                path, f"{heads} query heads cannot share {kv_heads} key/value heads"
            )
        if head_dim <= 0 or head_dim % 2:
            raise ModelLoadError(path, f"head_dim {head_dim} must be even for RoPE")
        n_layers = need("num_hidden_layers")
        max_positions = optional("max_position_embeddings", defaults["max_position_embeddings"])
        rope_theta, rope_scaling, rope_local_theta = _rope(raw, family, max_positions, path)
        sliding_window, layer_types = _windows(raw, family, n_layers, path)
        gemma = family == "gemma3_text"
        if gemma:
            refuse_unless("hidden_activation", ("gelu_pytorch_tanh",), "gelu_pytorch_tanh")
            refuse_unless("use_bidirectional_attention", (False, None), False)
        else:
            refuse_unless("hidden_act", ("silu",), "silu")
        refuse_unless("mlp_bias", (False, None), False)
        refuse_unless("partial_rotary_factor", (1, 1.0, None), None)
        bias = bool(raw.get("attention_bias", False))
        for key in ("query_pre_attn_scalar", "final_logit_softcapping"):
            if gemma and raw.get(key) is not None and optional(key, None, float) <= 0:
                raise ModelLoadError(path, f"{key!r} must be positive, got {raw[key]!r}")
        eos = raw.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        return cls(
            vocab_size=need("vocab_size"),
            hidden_size=hidden,
            intermediate_size=need("intermediate_size"),
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=head_dim,
            rms_norm_eps=optional("rms_norm_eps", 1e-6, float),
            rope_theta=rope_theta,
            max_position_embeddings=max_positions,
            tie_word_embeddings=bool(
                raw.get("tie_word_embeddings", defaults.get("tie_word_embeddings", False))
            ),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=eos_ids,
            model_type=family,
            rope_scaling=rope_scaling,
            rope_local_theta=rope_local_theta,
            sliding_window=sliding_window,
            layer_types=layer_types,
            attention_bias=family == "qwen2"
            or bias
            and family in ("llama", "qwen3", "gemma3_text"),
            attention_out_bias=bias and family in ("llama", "qwen3", "gemma3_text"),
            qk_norm=family in ("qwen3", "gemma3_text"),
            norm_offset=1.0 if gemma else 0.0,
            post_norms=gemma,
            hidden_act="gelu_pytorch_tanh" if gemma else "silu",
            embed_scale=hidden**0.5 if gemma else None,
            query_pre_attn_scalar=optional("query_pre_attn_scalar", 256.0, float)
            if gemma
            else None,
            final_logit_softcapping=(
                optional("final_logit_softcapping", None, float) if gemma else None
            ),
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
        """The Hugging Face `config.json` form, in the keys of transformers' config class of
        `model_type` (what `from_dict` reads back as this config)."""
        family, eos = self.model_type, self.eos_token_ids
        raw = {
            "architectures": [ARCHITECTURES[family]],
            "model_type": family,
            **{
                key: value
                for key, value in asdict(self).items()
                if key in _CORE_KEYS or key == "rope_scaling"
            },
            "eos_token_id": eos[0] if len(eos) == 1 else list(eos),
            "torch_dtype": "float32",
        }
        if family == "gemma3_text":
            raw |= {
                "hidden_activation": self.hidden_act,
                "rope_local_base_freq": self.rope_local_theta,
                "query_pre_attn_scalar": self.query_pre_attn_scalar,
                "final_logit_softcapping": self.final_logit_softcapping,
            }
        else:
            raw |= {"hidden_act": self.hidden_act, "mlp_bias": False}
        if family in ("llama", "qwen3", "gemma3_text"):
            raw["attention_bias"] = self.attention_out_bias
        if family != "llama":
            raw["sliding_window"] = self.sliding_window
        if family in ("qwen2", "qwen3"):
            raw["use_sliding_window"] = self.sliding_window is not None
        if family not in ("llama", "mistral") and self.layer_types:
            raw["layer_types"] = list(self.layer_types)
        return raw


_CORE_KEYS = (
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta", "max_position_embeddings",
    "tie_word_embeddings", "bos_token_id",
)  # fmt: skip


def _family(raw: dict, path) -> str:
    """config.json's architecture as a key of `ARCHITECTURES`: its `model_type`, else the
    family of its `architectures`' class.

    Raises:
        ModelLoadError: naming `path`, `model_type` and `architectures`, for another
            architecture, or a class that is not the family's causal LM.
    """
    model_type = raw.get("model_type")
    architectures = raw.get("architectures") or []
    if not isinstance(architectures, list):
        raise ModelLoadError(path, f"'architectures' must be a list, got {architectures!r}")
    if model_type is None:
        by_class = {name: family for family, name in ARCHITECTURES.items()}
        found = [by_class[a] for a in architectures if isinstance(a, str) and a in by_class]
        model_type = found[0] if found else None
    expected = ARCHITECTURES.get(model_type) if isinstance(model_type, str) else None
    if expected is None or (architectures and expected not in architectures):
        found = model_type or (architectures[0] if architectures else "unknown")
        classes = f" (architectures: {', '.join(map(str, architectures))})" if architectures else ""
        supported = ", ".join(f"{family} ({name})" for family, name in ARCHITECTURES.items())
        raise ModelLoadError(
            path, f"architecture {found!r} is not supported{classes}; corral runs {supported}"
        )
    return model_type


def _number(value, key: str, path) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ModelLoadError(path, f"{key!r} must be a finite number, got {value!r}")
    return float(value)


def _rope_of(rope: dict, max_positions: int, where: str, path) -> tuple[float, dict | None]:
    """(theta, scaling) of one RoPE parameter dict (transformers' `rope_parameters` form, its
    `rope_theta` filled in). Raises `ModelLoadError` for a variant not in `ROPE_TYPES`."""
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind not in ROPE_TYPES:
        raise ModelLoadError(path, f"RoPE scaling {kind!r}{where} is not supported")
    if rope.get("partial_rotary_factor") not in (None, 1, 1.0):
        raise ModelLoadError(path, "'partial_rotary_factor' other than 1 is not supported")
    theta = _number(rope["rope_theta"], "rope_theta", path)
    if kind == "default":
        return theta, None
    factor = _number(rope.get("factor"), "factor", path)
    if factor <= 0:
        raise ModelLoadError(path, f"RoPE scaling factor must be positive, got {factor}")
    if kind == "linear":
        return theta, {"rope_type": "linear", "factor": factor}
    low = _number(rope.get("low_freq_factor"), "low_freq_factor", path)
    high = _number(rope.get("high_freq_factor"), "high_freq_factor", path)
    original = rope.get("original_max_position_embeddings") or max_positions
    if not high > low > 0 or not isinstance(original, int) or original <= 0:
        raise ModelLoadError(
            path,
            "llama3 RoPE scaling needs high_freq_factor > low_freq_factor > 0 and a positive "
            f"original_max_position_embeddings, got {rope}",
        )
    return theta, {
        "rope_type": "llama3",
        "factor": factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }


def _rope(raw: dict, family: str, max_positions: int, path):
    """(rope_theta, rope_scaling, rope_local_theta) of a config, as transformers reads them:
    `rope_scaling` (the older key) else `rope_parameters`, whose `rope_theta` comes first, then
    the top-level `rope_theta`, then the family's default. Gemma 3's are per layer type
    (`rope_parameters` {"full_attention": .., "sliding_attention": ..}, or `rope_theta`,
    `rope_scaling` for the full layers and `rope_local_base_freq` for the sliding ones)."""
    dicts = {}
    for key in ("rope_parameters", "rope_scaling"):
        value = raw.get(key) or {}
        if not isinstance(value, dict):
            raise ModelLoadError(path, f"{key!r} must be an object, got {value!r}")
        dicts[key] = value
    top_theta = raw.get("rope_theta")
    if top_theta is None:
        top_theta = _DEFAULTS[family].get("rope_theta", 10000.0)
    if family != "gemma3_text":
        rope = dict(dicts["rope_scaling"] or dicts["rope_parameters"])
        rope.setdefault("rope_theta", top_theta)
        return (*_rope_of(rope, max_positions, "", path), None)
    params = dicts["rope_parameters"]
    if not {"full_attention", "sliding_attention"} & params.keys():
        params = {"full_attention": params}
    full = dict(params.get("full_attention") or {}) | dicts["rope_scaling"]
    full.setdefault("rope_theta", top_theta)
    local = dict(params.get("sliding_attention") or {})
    local_theta = raw.get("rope_local_base_freq")
    local.setdefault("rope_theta", 10000.0 if local_theta is None else local_theta)
    theta, scaling = _rope_of(full, max_positions, "", path)
    local_theta, local_scaling = _rope_of(local, max_positions, " on sliding layers", path)
    if local_scaling is not None:
        raise ModelLoadError(path, "RoPE scaling on sliding layers is not supported")
    return theta, scaling, local_theta


def _windows(raw: dict, family: str, n_layers: int, path) -> tuple[int | None, tuple[str, ...]]:
    """(sliding_window, layer_types) as transformers' config class of `family` derives them:
    Mistral windows every layer when `sliding_window` is set (4,096 when the key is absent);
    Ministral, Qwen2/3 and Gemma 3 by `layer_types`, else Ministral every layer, Qwen the
    layers from `max_window_layers` on when `use_sliding_window`, Gemma 3 all but every
    `sliding_window_pattern`-th (6th)."""
    if family == "llama":
        return None, ()
    window = raw.get("sliding_window", _DEFAULTS[family]["sliding_window"])
    if window is not None and (
        isinstance(window, bool) or not isinstance(window, int) or window < 1
    ):
        raise ModelLoadError(path, f"'sliding_window' must be a positive int, got {window!r}")
    if family in ("qwen2", "qwen3") and not raw.get("use_sliding_window", False):
        window = None
    given = raw.get("layer_types")
    if family == "mistral":  # MistralAttention windows every layer, whatever layer_types say
        types = ["sliding_attention" if window else "full_attention"] * n_layers
    elif given is not None:
        if (
            not isinstance(given, list)
            or len(given) != n_layers
            or not all(kind in LAYER_TYPES for kind in given)
        ):
            raise ModelLoadError(
                path, f"'layer_types' must give one of {LAYER_TYPES} per layer ({n_layers})"
            )
        types = given
    elif family == "ministral":
        types = ["sliding_attention" if window else "full_attention"] * n_layers
    elif family in ("qwen2", "qwen3"):
        first = raw.get("max_window_layers", 28)
        types = [
            "sliding_attention" if window is not None and i >= first else "full_attention"
            for i in range(n_layers)
        ]
    else:  # gemma3_text
        pattern = raw.get("sliding_window_pattern", 6)
        if isinstance(pattern, bool) or not isinstance(pattern, int) or pattern < 1:
            raise ModelLoadError(
                path, f"'sliding_window_pattern' must be a positive int, got {pattern!r}"
            )
        types = [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layers)
        ]
    return window, tuple(types)

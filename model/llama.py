"""The Llama forward pass in NumPy, float32, with a KV cache and batched decode (DESIGN.md
section 6).

Pure functions of NumPy arrays, each signed with the shapes it maps, in the manner of picoGPT's
gpt2.py. Notation: n tokens of one sequence (prefill) or B sequences (decode), d = hidden size,
Hq query heads and Hkv key/value heads of width hd (each key/value head serves G = Hq / Hkv query
heads: grouped-query attention), F = MLP width, V = vocabulary, L layers, S cache slots, T cache
length. Weights are a plain dict (`build_params`), stored input-major (`x @ w`) so that every
projection is one contiguous BLAS GEMM, with q/k/v merged into one matrix and gate/up into another.

Attention reads the KV cache `[L, S, Hkv, T, hd]` in place: one slot's keys for a layer are a
contiguous `[Hkv, T, hd]` block, so scores are a batched matmul with no Python loop over heads or
tokens; a decode step over slots at different positions masks each slot's row by its own length.
"""

from __future__ import annotations

import numpy as np
from corral.model.config import LlamaConfig

# ----------------------------------------------------------------------------------------------
# Weights


def build_params(config: LlamaConfig, tensors: dict[str, np.ndarray]) -> dict:
    """Hugging Face tensors ([out, in]) -> the forward pass's weights (float32, input-major).

    Returns:
        {"embed": [V, d], "lm_head": [d, V], "lm_head_rows": [V, d], "norm": [d], "layers": [L x {
            "attn_norm": [d], "w_qkv": [d, (Hq + 2 Hkv) hd], "w_o": [Hq hd, d],
            "mlp_norm": [d], "w_gate_up": [d, 2F], "w_down": [F, d]}]}
        The LM head is kept both ways: [d, V] for batched GEMMs, [V, d] (the embedding table
        itself when tied, possibly still memory-mapped) for one row's matrix-vector product.
    """

    def get(name: str) -> np.ndarray:
        return np.asarray(tensors[name], dtype=np.float32)

    def input_major(*names: str) -> np.ndarray:  # [out_1 + out_2 + ..., in] -> [in, out]
        return np.ascontiguousarray(np.concatenate([get(name) for name in names], axis=0).T)

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        layers.append(
            {
                "attn_norm": np.array(get(p + "input_layernorm.weight")),
                "w_qkv": input_major(*(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
                "w_o": input_major(p + "self_attn.o_proj.weight"),
                "mlp_norm": np.array(get(p + "post_attention_layernorm.weight")),
                "w_gate_up": input_major(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
                "w_down": input_major(p + "mlp.down_proj.weight"),
            }
        )
    embed = np.ascontiguousarray(get("model.embed_tokens.weight"))
    head = embed if config.tie_word_embeddings else get("lm_head.weight")
    return {
        "embed": embed,
        "lm_head": np.ascontiguousarray(head.T),
        "lm_head_rows": head if head is embed else np.ascontiguousarray(head),
        "norm": np.array(get("model.norm.weight")),
        "layers": layers,
    }


def rope_tables(theta: float, head_dim: int, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """RoPE's cos and sin for positions 0..n_positions-1.  -> [n_positions, hd/2] x 2 (float32)

    Frequencies theta^(-2i/hd), i < hd/2, as Hugging Face's Llama (default rope type).
    """
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Layers


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """[n, d], [d] -> [n, d]"""
    mean_square = np.einsum("ij,ij->i", x, x)[:, None] / np.float32(x.shape[-1])
    return x * (1.0 / np.sqrt(mean_square + np.float32(eps))) * weight


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate each head's two halves by its position's angles.  [n, h, hd], [n, 1, hd/2] x 2 ->
    [n, h, hd] (a new array)"""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out = np.empty(x.shape, np.float32)
    np.multiply(x1, cos, out=out[..., :half])
    out[..., :half] -= x2 * sin
    np.multiply(x2, cos, out=out[..., half:])
    out[..., half:] += x1 * sin
    return out


def softmax_(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place.  [..., T] -> [..., T]"""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def mlp(x: np.ndarray, w_gate_up: np.ndarray, w_down: np.ndarray) -> np.ndarray:
    """SwiGLU: down(silu(gate(x)) * up(x)).  [n, d] -> [n, d]"""
    gate_up = x @ w_gate_up  # [n, 2F]
    width = w_down.shape[0]
    gate, up = gate_up[:, :width], gate_up[:, width:]
    hidden = np.multiply(gate, 0.5, dtype=np.float32)  # silu(g) = g/2 (1 + tanh(g/2))
    np.tanh(hidden, out=hidden)
    hidden += 1.0
    hidden *= gate
    hidden *= 0.5
    hidden *= up
    return hidden @ w_down


def causal_bias(start: int, n: int) -> np.ndarray:
    """Additive mask of n queries at positions start..start+n-1 over keys 0..start+n-1.
    -> float32 [n, start + n]: 0 where the key is not in the query's future, else -inf"""
    future = np.arange(start + n)[None, :] > (start + np.arange(n))[:, None]
    return np.where(future, -np.inf, 0.0).astype(np.float32)


def attention_prefill(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """Causal attention of n new queries over a slot's cache (positions start..start+n-1).

    [Hkv, G, n, hd] (pre-scaled), [Hkv, T, hd], [Hkv, T, hd], [n, T] (`causal_bias`)
    -> [Hkv, G, n, hd], T = start + n
    """
    kv_heads, group, n, head_dim = q.shape
    total = keys.shape[1]
    scores = q.reshape(kv_heads, group * n, head_dim) @ keys.swapaxes(-1, -2)  # [Hkv, G n, T]
    scores = scores.reshape(kv_heads, group, n, total)
    scores += bias
    softmax_(scores)
    return (scores.reshape(kv_heads, group * n, total) @ values).reshape(q.shape)


def attention_decode(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, bias: np.ndarray
) -> np.ndarray:
    """One new query per sequence over its own cache rows, masked by each sequence's length.

    [B, Hkv, G, hd] (pre-scaled), [B, Hkv, T, hd], [B, Hkv, T, hd], [B, 1, 1, T] (0 or -inf)
    -> [B, Hkv, G, hd]
    """
    scores = q @ keys.swapaxes(-1, -2)  # [B, Hkv, G, T]
    scores += bias
    return softmax_(scores) @ values


def transformer_block(x: np.ndarray, layer: dict, config: LlamaConfig, cos, sin, attend):
    """Pre-norm attention then SwiGLU MLP, both residual, updating x in place.

    x [n, d]; cos, sin [n, 1, hd/2]; `attend(q [n, Hq, hd], k [n, Hkv, hd], v [n, Hkv, hd]) ->
    [n, Hq hd]` stores k, v in the KV cache and attends over it. -> x [n, d]
    """
    n = x.shape[0]
    hq, hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = rms_norm(x, layer["attn_norm"], config.rms_norm_eps) @ layer["w_qkv"]
    qk = rope(qkv[:, : (hq + hkv) * hd].reshape(n, hq + hkv, hd), cos, sin)
    v = qkv[:, (hq + hkv) * hd :].reshape(n, hkv, hd)
    x += attend(qk[:, :hq], qk[:, hq:], v) @ layer["w_o"]
    x += mlp(
        rms_norm(x, layer["mlp_norm"], config.rms_norm_eps), layer["w_gate_up"], layer["w_down"]
    )
    return x


# ----------------------------------------------------------------------------------------------
# Whole passes over the cache


def prefill(
    params: dict,
    config: LlamaConfig,
    keys: np.ndarray,
    values: np.ndarray,
    segments: list[tuple[int, int, int]],
    tokens: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
) -> np.ndarray:
    """Run the tokens of one or more sequences through the model in one pass, writing their keys
    and values into the cache.

    segments: (slot, start, n) per sequence, in the order of `tokens`: its n tokens go to cache
    slot `slot` at positions start..start+n-1 (slots distinct). keys, values [L, S, Hkv, T, hd]
    (updated); tokens int [N], N = sum of the n; cos, sin [> every start + n, hd/2]
    -> final hidden states [N, d] (after the last RMSNorm)

    The projections and the MLP are one GEMM over all N tokens; attention runs per sequence
    (each a batched matmul over heads), so short prompts share one read of the weights.
    """
    hkv, hd = config.num_key_value_heads, config.head_dim
    group = config.num_attention_heads // hkv
    scale = np.float32(hd**-0.5)
    positions = np.concatenate([np.arange(start, start + n) for _, start, n in segments])
    offsets = np.cumsum([0] + [n for _, _, n in segments])
    x = params["embed"][tokens]  # [N, d]
    cos_n, sin_n = cos[positions, None, :], sin[positions, None, :]  # [N, 1, hd/2]
    biases = [causal_bias(start, n) for _, start, n in segments]

    for index, layer in enumerate(params["layers"]):

        def attend(q, k, v, index=index):  # [N, Hq, hd], [N, Hkv, hd] x 2 -> [N, Hq hd]
            out = np.empty((q.shape[0], q.shape[1] * hd), np.float32)
            for (slot, start, n), first, bias in zip(segments, offsets, biases, strict=False):
                end, rows = start + n, slice(first, first + n)
                keys[index, slot, :, start:end] = k[rows].transpose(1, 0, 2)
                values[index, slot, :, start:end] = v[rows].transpose(1, 0, 2)
                q_seq = q[rows].reshape(n, hkv, group, hd).transpose(1, 2, 0, 3) * scale
                attended = attention_prefill(  # [Hkv, G, n, hd]
                    q_seq, keys[index, slot, :, :end], values[index, slot, :, :end], bias
                )
                out[rows] = attended.transpose(2, 0, 1, 3).reshape(n, -1)
            return out

        transformer_block(x, layer, config, cos_n, sin_n, attend)
    return rms_norm(x, params["norm"], config.rms_norm_eps)


def decode(
    params: dict,
    config: LlamaConfig,
    keys: np.ndarray,
    values: np.ndarray,
    slots: np.ndarray,
    positions: np.ndarray,
    tokens: np.ndarray,
    cos: np.ndarray,
    sin: np.ndarray,
) -> np.ndarray:
    """One decode step: token b goes to cache slot slots[b] at position positions[b].

    keys, values [L, S, Hkv, T, hd] (updated); slots, positions, tokens int [B] (slots
    distinct); cos, sin [> max(positions), hd/2] -> final hidden states [B, d]

    Keys and values are read in place (no copy) from the span of slots min(slots)..max(slots)
    when that span is at most twice B: the queries are scattered to their rows of the span, rows
    of unused slots compute harmless values that are dropped. Slots spread wider are gathered
    (one copy per layer). Only positions below max(positions) + 1 are read.
    """
    batch = len(tokens)
    hq, hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    scale = np.float32(hd**-0.5)
    total = int(positions.max()) + 1
    first, span = int(slots.min()), int(slots.max()) + 1 - int(slots.min())
    if span <= 2 * batch:  # attend over the span's rows in place
        rows, width, at = slice(first, first + span), span, slots - first
    else:  # gather the slots' rows
        rows, width, at = slots, batch, np.arange(batch)
    in_order = width == batch and bool(np.all(at == np.arange(batch)))
    length = np.full(width, total, np.int64)  # unused rows attend to everything: never all -inf
    length[at] = positions + 1
    bias = np.where(np.arange(total)[None, :] < length[:, None], 0.0, -np.inf)
    bias = bias.astype(np.float32)[:, None, None, :]  # [width, 1, 1, T]
    x = params["embed"][tokens]  # [B, d]
    cos_b, sin_b = cos[positions, None, :], sin[positions, None, :]  # [B, 1, hd/2]

    for index, layer in enumerate(params["layers"]):

        def attend(q, k, v, index=index):  # [B, Hq, hd], [B, Hkv, hd] x 2 -> [B, Hq hd]
            keys[index, slots, :, positions] = k
            values[index, slots, :, positions] = v
            q = q.reshape(batch, hkv, hq // hkv, hd) * scale
            if not in_order:  # [B, ...] -> [width, ...], query b at row at[b]
                scattered = np.zeros((width, *q.shape[1:]), np.float32)
                scattered[at] = q
                q = scattered
            layer_keys = keys[index, rows, :, :total]  # [width, Hkv, T, hd]
            layer_values = values[index, rows, :, :total]
            out = attention_decode(q, layer_keys, layer_values, bias)  # [width, Hkv, G, hd]
            return (out if in_order else out[at]).reshape(batch, -1)

        transformer_block(x, layer, config, cos_b, sin_b, attend)
    return rms_norm(x, params["norm"], config.rms_norm_eps)


def lm_head(params: dict, hidden: np.ndarray) -> np.ndarray:
    """Logits of the tied (or separate) LM head.  [n, d] -> [n, V] float32

    One row uses the [V, d] table as a matrix-vector product; more rows one [n, d] x [d, V] GEMM.
    """
    if hidden.shape[0] == 1:
        return (params["lm_head_rows"] @ hidden[0])[None, :]
    return hidden @ params["lm_head"]

"""The Llama forward pass in NumPy, float32, over a KV cache, with batched prefill and decode
(docs/design.md section 6), for Llama and the relatives `config.LlamaConfig` describes (Mistral,
Qwen2/3, Gemma 3: docs/models.md), each difference switched on by a config field.

Pure functions of NumPy arrays in the manner of picoGPT's gpt2.py, each signed with the shapes it
maps. Notation: N new tokens in a pass (the tokens of one or more sequences in prefill, one token
of each of B sequences in decode), d hidden size, Hq query heads and Hkv key/value heads of width
hd (each key/value head serves G = Hq / Hkv query heads: grouped-query attention), F MLP width,
V vocabulary, L layers; the KV cache holds S slots of T positions, `[L, S, Hkv, T, hd]`.

Weights are a plain dict (`build_params`), stored output-major as Hugging Face stores them
([out, in]), with q/k/v merged into one matrix and gate/up into another: every projection is one
BLAS GEMM `W @ x^T`, whose large operand (the weights) comes first and whose result `[out, N]` is
read through its transpose `[N, out]` (a view, no copy). A model loaded from a GGUF also keeps
each matrix in its quantization blocks, which `linear` and `lm_head` read for passes of up to
`quant.QUANTIZED_MAX_ROWS` rows (decode, jump-forward chunks), passes of every size where the
plan says (`ComputePlan.every_pass`). A pass is the textbook loop,
one layer at a time:

    x = embed[tokens] (* embed_scale)                           # [N] -> [N, d]
    for layer, layer_keys, layer_values in zip(layers, keys, values):
        q, k, v = project_qkv(x, layer, config, cos, sin)       # [N, d] -> [N, Hq|Hkv, hd]
        x += project_out(attention_*(q, k, v, layer_keys, layer_values, ...), layer, config)
        x += mlp(rms_norm(x, ...), layer, config)               # [N, d] -> [N, d]
    rms_norm(x, norm)                                           # [N, d] -> [N, d]

The relatives' differences, by config field: biases on the q/k/v (and output) projections,
RMSNorm of each q and k head before RoPE (`qkv_extras`); Gemma 3's `1 + weight` norms (folded
into the weights by `build_params`), its norms of the attention's and the MLP's outputs
(`project_out`, `mlp`), GELU-tanh gating, embeddings scaled by sqrt(d), its own attention scale
and final logit softcapping; sliding-window layers (`config.window`), with their own RoPE table
for Gemma 3 (`rope_tables`: one per kind, `layer["rope"]` picks it).

`attention_prefill` (and `decode`, through `kernels.compute.attention.rope_store`) writes the new
keys and values into one layer's cache and attends over it; one slot's keys for a layer are a
contiguous `[Hkv, T, hd]` block. Decode,
and the short segments of a prefill pass (jump-forward chunks), run one Numba kernel over every
query row's own context (`kernels.compute.attention.ragged_attention`); a long prompt is attended in
blocks of queries, each as two batched GEMMs over its heads and tokens around a compiled causal
softmax (`attend_prompt`): the GEMMs reuse each key many times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from corral.kernels.compute import attention as attention_kernels
from corral.kernels.compute import layers as layer_kernels
from corral.kernels.compute import quant as quant_kernels
from corral.model.config import LlamaConfig
from corral.model.quant import HEAD_ACTIVATION_PARTS

# ----------------------------------------------------------------------------------------------
# Weights


def build_params(
    config: LlamaConfig, tensors: dict[str, np.ndarray], blocks: dict | None = None
) -> dict:
    """Hugging Face tensors ([out, in]) -> the forward pass's weights (float32, output-major, C
    order: `linear` computes W x^T), with the same matrices in quantization blocks when `blocks`
    (`quant.quantized_layers`'s result) is given.

    Returns:
        {"embed": [V, d], "lm_head": [d, V], "lm_head_rows": [V, d], "norm": [d],
         "logit_softcap": config.final_logit_softcapping, "layers": [L x {
            "attn_norm": [d], "w_qkv": [(Hq + 2 Hkv) hd, d], "w_o": [d, Hq hd],
            "mlp_norm": [d], "w_gate_up": [2F, d], "w_down": [d, F],
            "window": int (`config.window`, 0: the whole context), "rope": int (0, or 1 for a
            layer of Gemma 3's local RoPE: the index into `rope_tables`),
            and as the config has them "b_qkv": [(Hq + 2 Hkv) hd], "b_o": [d], "q_norm": [hd],
            "k_norm": [hd], "attn_out_norm": [d], "mlp_out_norm": [d]}]}
        Norm weights are stored as the factors they apply: `config.norm_offset` + weight (in
        float32, as transformers' Gemma computes `1.0 + weight`). `mlp_norm` is the norm before
        the MLP: Llama's `post_attention_layernorm`, Gemma 3's `pre_feedforward_layernorm`
        (whose `post_attention_layernorm` is "attn_out_norm").
        The LM head is kept both ways: [d, V] for batched GEMMs, [V, d] (the embedding table
        itself when tied, possibly still memory-mapped) for one row's matrix-vector product.
        With `blocks`, each layer also holds "blocks" ({"w_qkv", "w_o", "w_gate_up", "w_down":
        `quant.TiledMatrix`}) and the params "lm_head_blocks": what `linear` and `lm_head`
        use for passes of at most `QUANTIZED_MAX_ROWS` rows; and, when the head is Q8_0,
        "lm_head_block_rows" (`quant.BlockMatrix`), the rows of the masked head (`lm_head`).
    """

    def get(name: str) -> np.ndarray:
        return np.asarray(tensors[name], dtype=np.float32)

    def stacked(*names: str) -> np.ndarray:  # [out_1, in], [out_2, in], ... -> [out, in]
        return np.ascontiguousarray(np.concatenate([get(name) for name in names], axis=0))

    def norm(name: str) -> np.ndarray:  # the factor the norm applies: offset + weight
        if config.norm_offset:
            return get(name) + np.float32(config.norm_offset)
        return np.array(get(name))

    layers = []
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        pre_mlp = "pre_feedforward_layernorm" if config.post_norms else "post_attention_layernorm"
        layer = {
            "attn_norm": norm(p + "input_layernorm.weight"),
            "w_qkv": stacked(*(p + f"self_attn.{x}_proj.weight" for x in "qkv")),
            "w_o": stacked(p + "self_attn.o_proj.weight"),
            "mlp_norm": norm(p + pre_mlp + ".weight"),
            "w_gate_up": stacked(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"),
            "w_down": stacked(p + "mlp.down_proj.weight"),
            "window": config.window(i),
            "rope": int(config.local_rope(i)),
        }
        if config.attention_bias:
            layer["b_qkv"] = stacked(*(p + f"self_attn.{x}_proj.bias" for x in "qkv"))
        if config.attention_out_bias:
            layer["b_o"] = stacked(p + "self_attn.o_proj.bias")
        if config.qk_norm:
            layer["q_norm"] = norm(p + "self_attn.q_norm.weight")
            layer["k_norm"] = norm(p + "self_attn.k_norm.weight")
        if config.post_norms:
            layer["attn_out_norm"] = norm(p + "post_attention_layernorm.weight")
            layer["mlp_out_norm"] = norm(p + "post_feedforward_layernorm.weight")
        layers.append(layer)
    embed = np.ascontiguousarray(get("model.embed_tokens.weight"))
    head = embed if config.tie_word_embeddings else get("lm_head.weight")
    params = {
        "embed": embed,
        "lm_head": np.ascontiguousarray(head.T),
        "lm_head_rows": head if head is embed else np.ascontiguousarray(head),
        "norm": norm("model.norm.weight"),
        "logit_softcap": config.final_logit_softcapping,
        "layers": layers,
    }
    if blocks is not None:
        for layer, layer_blocks in zip(layers, blocks["layers"], strict=True):
            layer["blocks"] = layer_blocks
        params["lm_head_blocks"] = blocks["lm_head"]
        if "lm_head_rows" in blocks:
            params["lm_head_block_rows"] = blocks["lm_head_rows"]
    return params


def rope_frequencies(theta: float, head_dim: int, scaling: dict | None = None) -> np.ndarray:
    """RoPE's inverse frequencies.  -> float64 [hd/2]

    theta^(-2i/hd), i < hd/2, as Hugging Face's Llama (default rope type); with `scaling`
    (`LlamaConfig.rope_scaling`) "linear", divided by its factor; "llama3", transformers'
    `_compute_llama3_parameters`: wavelengths 2 pi / f longer than original / low_freq_factor
    divided by the factor, shorter than original / high_freq_factor kept, those between
    interpolated.
    """
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv_freq
    factor = scaling["factor"]
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelength = 2 * np.pi / inv_freq
    scaled = np.where(wavelength > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= original / high) & (wavelength <= original / low)
    return np.where(medium, smoothed, scaled)


def rope_tables(config: LlamaConfig, n_positions: int) -> tuple[np.ndarray, np.ndarray]:
    """RoPE's cos and sin for positions 0..n_positions-1, for each kind of layer: the model's
    (`rope_theta`, `rope_scaling`), then Gemma 3's sliding layers' own (`rope_local_theta`)
    when it has one.  -> [K, n_positions, hd/2] x 2 (float32), K = 1 or 2; layer["rope"] (see
    `build_params`) is its kind's index.
    """
    kinds = [rope_frequencies(config.rope_theta, config.head_dim, config.rope_scaling)]
    if config.rope_local_theta is not None:
        kinds.append(rope_frequencies(config.rope_local_theta, config.head_dim))
    positions = np.arange(n_positions, dtype=np.float64)
    angles = np.stack([positions[:, None] * inv_freq[None, :] for inv_freq in kinds])
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Layers


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm (`kernels.compute.layers.rms_norm`).  [N, d], [d] -> [N, d] (a new array)"""
    x = np.ascontiguousarray(x, dtype=np.float32)
    return layer_kernels.rms_norm(x, weight, eps, np.empty(x.shape, np.float32))


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate each head's two halves by its position's angles (Hugging Face's `rotate_half`;
    `kernels.compute.layers.rope`).

    [N, h, hd], [N, 1, hd/2], [N, 1, hd/2] -> [N, h, hd] (a new array)
    """
    n = x.shape[0]
    out = np.empty(x.shape, np.float32)
    return layer_kernels.rope(x, cos.reshape(n, -1), sin.reshape(n, -1), out)


def linear(x: np.ndarray, layer: dict, name: str) -> np.ndarray:
    """x W^T for the layer's matrix `name` ("w_qkv", "w_o", "w_gate_up", "w_down", W [out, in]).
    [N, in] -> [N, out] float32 (C order from the blocks; from BLAS the transpose of a C-order
    [out, N] result, i.e. Fortran order: callers treat it as any [N, out] array)

    A pass of at most `QUANTIZED_MAX_ROWS` rows, or of any size under the plan's `every_pass`
    (`quant.TiledMatrix.takes`),
    reads the matrix's quantization blocks when the layer has them
    (`quant.TiledMatrix.matmul`); otherwise one float32 BLAS GEMM W x^T, the
    weights as the left operand (x^T is a view: for x in Fortran order, as `linear` returns, it
    is C-contiguous).
    """
    blocks = layer.get("blocks")
    if blocks is not None and blocks[name].takes(x.shape[0]):
        return blocks[name].matmul(x)
    return (layer[name] @ x.T).T  # [out, in] x [in, N] -> [out, N] -> [N, out]


def mlp(x: np.ndarray, layer: dict, config: LlamaConfig | None = None) -> np.ndarray:
    """SwiGLU: down(silu(gate(x)) * up(x)).  [N, d], layer weights ([2F, d], [d, F]) -> [N, d]

    With `config.hidden_act` "gelu_pytorch_tanh" the gating is GELU's tanh form instead
    (`kernels.compute.layers.geglu`, `geglu_halves`: Gemma's GeGLU), and with
    `config.post_norms` the result goes through the layer's "mlp_out_norm" (Gemma 3's
    `post_feedforward_layernorm`).

    The gating is one compiled pass (`kernels.compute.layers.swiglu`, a vectorized exp), for every
    pass alike. It runs along the contiguous axis: BLAS's [N, 2F] result is the transpose of a
    C-order [2F, N] one, so there the gating computes [F, N] from its two halves and w_down
    reads that as its x^T, no copy (row by row over the [N, 2F] view, every read would be a
    cache line of its own).
    """
    gate_up = linear(x, layer, "w_gate_up")  # [N, d] -> [N, 2F]
    n, width = x.shape[0], layer["w_down"].shape[1]
    if config is not None and config.hidden_act != "silu":  # GeGLU
        if gate_up.flags.c_contiguous:  # the blocks' result: each row its two halves
            hidden = layer_kernels.geglu_halves(gate_up, np.empty((n, width), np.float32))
        else:  # BLAS's: the halves of C-order [2F, N], out [F, N] read as its transpose
            gate_up_t, out = gate_up.T, np.empty((width, n), np.float32)
            hidden = layer_kernels.geglu(gate_up_t[:width], gate_up_t[width:], out).T
    elif gate_up.flags.c_contiguous:  # the blocks' result: each row its two halves
        hidden = layer_kernels.swiglu_rows(gate_up, np.empty((n, width), np.float32))  # [N, F]
    else:  # BLAS's: gate_up.T is C-order [2F, N]
        gate_up_t = gate_up.T
        out = np.empty((width, n), np.float32)
        hidden = layer_kernels.swiglu(gate_up_t[:width], gate_up_t[width:], out).T  # [N, F]
    out = linear(hidden, layer, "w_down")  # [N, F] -> [N, d]
    if config is not None and config.post_norms:
        return rms_norm(out, layer["mlp_out_norm"], config.rms_norm_eps)
    return out


def qkv_extras(qkv: np.ndarray, layer: dict, config: LlamaConfig) -> np.ndarray:
    """The steps between the fused q/k/v projection and RoPE that some relatives of Llama take:
    the projections' biases ("b_qkv": Qwen2, `attention_bias`), then an RMSNorm over each head
    of q and of k ("q_norm", "k_norm": Qwen3, Gemma 3). Llama's qkv is returned as it is.

    [N, (Hq + 2 Hkv) hd] -> [N, (Hq + 2 Hkv) hd]
    """
    if "b_qkv" in layer:
        qkv = qkv + layer["b_qkv"]
    if "q_norm" not in layer:
        return qkv
    hq, hkv = config.num_attention_heads, config.num_key_value_heads
    out = np.empty(qkv.shape, np.float32)
    return layer_kernels.head_rms_norm(
        qkv, layer["q_norm"], layer["k_norm"], hq, hkv, config.rms_norm_eps, out
    )  # each head of q and k through its RMSNorm, v as it is


def project_out(attended: np.ndarray, layer: dict, config: LlamaConfig) -> np.ndarray:
    """The attention's output projection, with its bias ("b_o") and Gemma 3's norm of it
    ("attn_out_norm", its `post_attention_layernorm`) when the layer has them.
    [N, Hq hd] -> [N, d]"""
    out = linear(attended, layer, "w_o")
    if "b_o" in layer:
        out = out + layer["b_o"]
    if config.post_norms:
        out = rms_norm(out, layer["attn_out_norm"], config.rms_norm_eps)
    return out


def project_qkv(
    x: np.ndarray, layer: dict, config: LlamaConfig, cos: np.ndarray, sin: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """RMSNorm, then the q/k/v projections (and `qkv_extras`), with RoPE on q and k.

    [N, d], layer weights, config, [N, 1, hd/2] x 2 -> q [N, Hq, hd], k [N, Hkv, hd], v [N, Hkv, hd]
    """
    n = x.shape[0]
    hq, hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    qkv = linear(rms_norm(x, layer["attn_norm"], config.rms_norm_eps), layer, "w_qkv")
    qkv = qkv_extras(qkv, layer, config)  # [N, d] -> [N, (Hq + 2 Hkv) hd]
    qk = rope(qkv[:, : (hq + hkv) * hd].reshape(n, hq + hkv, hd), cos, sin)  # [N, Hq + Hkv, hd]
    v = qkv[:, (hq + hkv) * hd :].reshape(n, hkv, hd)  # [N, Hkv, hd]
    return qk[:, :hq], qk[:, hq:], v


# ----------------------------------------------------------------------------------------------
# Attention over one layer's cache


SHORT_SEGMENT = 32
"""Segments of a prefill pass with at most this many new tokens (a decode step's token, a
jump-forward chunk) are attended by the ragged kernel, all of them in one call per layer;
longer ones (prompts) one at a time by `attend_prompt`, whose GEMMs reuse each key for many
queries."""


@dataclass(frozen=True, eq=False)
class Segment:
    """One sequence's new tokens in a prefill pass, when there are more than `SHORT_SEGMENT`.

    Attributes:
        slot: its cache slot.
        start: the position of its first new token (the tokens the slot already holds).
        rows: slice of the pass's N tokens that are this sequence's n new tokens.
    """

    slot: int
    start: int
    rows: slice


@dataclass(frozen=True, eq=False)
class PrefillPlan:
    """Where the N new tokens of a prefill pass go in the cache and how their attention runs.

    Attributes:
        slots, positions: int64 [N], token i goes to slot slots[i] at position positions[i].
        short: int64 [M, 4], the segments of at most `SHORT_SEGMENT` tokens as rows (slot,
            start, first token, n): `kernels.compute.attention.ragged_attention`'s segments.
        long: the other segments, attended one by one (`Segment`).
    """

    slots: np.ndarray
    positions: np.ndarray
    short: np.ndarray
    long: tuple[Segment, ...]


def plan_prefill(segments: list[tuple[int, int, int]], positional: bool = True) -> PrefillPlan:
    """Plan a prefill pass.  segments [(slot, start, n)] in token order -> `PrefillPlan`

    With `positional` (the plan's `positional_attention`) every segment is cut into
    pieces of at most `SHORT_SEGMENT` tokens (each a valid segment: its rows see the cache up to
    their own positions, written before attention), all for the ragged kernel, which then has many
    tasks for its threads."""
    table = np.array(segments, np.int64).reshape(-1, 3)  # [M, 3]: slot, start, n
    sizes = table[:, 2]
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    slots = np.repeat(table[:, 0], sizes)
    positions = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(table[:, 1] - first, sizes)
    rows = np.column_stack([table[:, :2], first, sizes])  # [M, 4]: slot, start, first, n
    if positional:  # every segment cut into short pieces, all for the ragged kernel
        pieces = [
            (slot, start + i, row + i, min(SHORT_SEGMENT, n - i))
            for slot, start, row, n in rows.tolist()
            for i in range(0, n, SHORT_SEGMENT)
        ]
        return PrefillPlan(slots, positions, np.array(pieces, np.int64).reshape(-1, 4), ())
    is_short = sizes <= SHORT_SEGMENT
    long = tuple(
        Segment(slot, start, slice(row, row + n))
        for slot, start, row, n in rows[~is_short].tolist()
    )
    return PrefillPlan(slots, positions, np.ascontiguousarray(rows[is_short]), long)


def attention_prefill(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    layer_keys: np.ndarray,
    layer_values: np.ndarray,
    plan: PrefillPlan,
    window: int = 0,
    scale: float | None = None,
) -> np.ndarray:
    """Causal self-attention of the new tokens of one or more sequences, each over its own slot
    of one layer's cache, after writing their keys and values into it: token i sees positions
    0..plan.positions[i] of slot plan.slots[i] (the last `window` of them when window > 0).
    Scores are q.k times `scale` (hd^-1/2 when None).

    The tokens of short segments go through one ragged kernel call
    (`kernels.compute.attention.ragged_attention`); each long segment is attended by
    `attend_prompt`.

    q [N, Hq, hd], k [N, Hkv, hd], v [N, Hkv, hd]; layer_keys, layer_values [S, Hkv, T, hd]
    (updated); plan from `plan_prefill` -> [N, Hq hd]
    """
    n_tokens, hkv, hd = k.shape
    attention_kernels.store_rows(k, v, layer_keys, layer_values, plan.slots, plan.positions)
    scaled = q * np.float32(hd**-0.5 if scale is None else scale)  # [N, Hq, hd]
    out = np.empty(q.shape, np.float32)  # [N, Hq, hd]
    if len(plan.short):
        attention_kernels.ragged_attention(
            scaled, layer_keys, layer_values, plan.short, out, window
        )
    for segment in plan.long:
        slot, rows = segment.slot, segment.rows
        out[rows] = attend_prompt(
            scaled[rows], layer_keys[slot], layer_values[slot], segment.start, window
        )  # [n, Hq, hd]
    return out.reshape(n_tokens, -1)  # [N, Hq hd]


PROMPT_BLOCK = 64
"""`attend_prompt` takes a long segment's queries this many tokens at a time, each block over
the keys up to its own last position: the GEMMs skip most of the causal mask's future half
(5/8 of the full products for 256 tokens), and each block's scores stay small."""


def attend_prompt(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    start: int,
    window: int = 0,
) -> np.ndarray:
    """Causal attention of one sequence's n new tokens at positions start..start+n-1 over its
    cache slot (written up to start + n): token i sees positions 0..start+i (with `window`
    w > 0, start+i-w+1..start+i: a block's products then begin at its first row's first key).

    For each block of `PROMPT_BLOCK` queries, the query heads of a key/value head stacked:
    scores one batched GEMM over the key/value heads, the causal softmax one compiled pass
    (`kernels.compute.attention.causal_softmax_`, the masked entries set to 0), the values
    another GEMM.

    q [n, Hq, hd] (already scaled by hd^-1/2); keys, values float32 or float16
    [Hkv, >= start + n, hd] (float16 is converted to float32 once, for the GEMMs)
    -> [n, Hq, hd] (a new array)
    """
    n, hq, hd = q.shape
    hkv = keys.shape[0]
    if keys.dtype != np.float32:  # a float16 cache: its first start + n positions, in float32
        keys = keys[:, : start + n].astype(np.float32)
        values = values[:, : start + n].astype(np.float32)
    group = hq // hkv
    out = np.empty(q.shape, np.float32)
    for first in range(0, n, PROMPT_BLOCK):
        m = min(PROMPT_BLOCK, n - first)
        end = start + first + m
        begin = max(0, start + first - window + 1) if window > 0 else 0
        block = q[first : first + m].reshape(m, hkv, group, hd).transpose(1, 2, 0, 3)
        # [m, Hq, hd] -> [Hkv, G, m, hd]
        scores = block.reshape(hkv, group * m, hd) @ keys[:, begin:end].swapaxes(-1, -2)
        # [Hkv, G m, hd] x [Hkv, hd, end - begin] -> [Hkv, G m, end - begin]
        attention_kernels.causal_softmax_(scores, start + first - begin, m, window)
        attended = scores @ values[:, begin:end]
        # [Hkv, G m, end - begin] x [Hkv, end - begin, hd] -> [Hkv, G m, hd]
        out[first : first + m] = (
            attended.reshape(hkv, group, m, hd).transpose(2, 0, 1, 3).reshape(m, hq, hd)
        )  # [Hkv, G, m, hd] -> [m, Hq, hd]
    return out


def decode_segments(slots: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """A decode step's rows as `kernels.compute.attention.ragged_attention`'s segments: row b is one
    token of slot slots[b] at position positions[b].

    slots, positions int64 [B] -> int64 [B, 4], rows (slot, start = position, first = b, n = 1)
    """
    batch = slots.shape[0]
    return np.column_stack([slots, positions, np.arange(batch), np.ones(batch, np.int64)])


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

    params: `build_params`' weights with "plan", the model's `ComputePlan` (`Model` sets it).
    segments: (slot, start, n) per sequence, in the order of `tokens`: its n tokens go to cache
    slot `slot` at positions start..start+n-1 (slots distinct). keys, values [L, S, Hkv, T, hd]
    (updated); tokens int [N], N = sum of the n; cos, sin [K, > every start + n, hd/2]
    (`rope_tables`) -> final hidden states [N, d] (after the last RMSNorm)

    The projections and the MLP are one GEMM over all N tokens, so short prompts share one
    read of the weights; attention is one ragged kernel call per layer over the short segments
    (decode-like steps, jump-forward chunks) and a batched matmul per long one
    (`attention_prefill`).
    """
    plan = plan_prefill(segments, params["plan"].positional_attention)
    x = embed(params, config, tokens)  # [N] -> [N, d]
    cos, sin = cos[:, plan.positions, None, :], sin[:, plan.positions, None, :]  # [K, N, 1, hd/2]
    for layer, layer_keys, layer_values in zip(params["layers"], keys, values, strict=True):
        kind = layer["rope"]
        q, k, v = project_qkv(x, layer, config, cos[kind], sin[kind])  # [N, d] -> [N, Hq|Hkv, hd]
        attended = attention_prefill(
            q, k, v, layer_keys, layer_values, plan, layer["window"], config.attention_scale
        )  # [N, Hq hd]
        x += project_out(attended, layer, config)  # [N, Hq hd] -> [N, d]
        h = rms_norm(x, layer["mlp_norm"], config.rms_norm_eps)  # [N, d] -> [N, d]
        x += mlp(h, layer, config)  # [N, d] -> [N, d]
    return rms_norm(x, params["norm"], config.rms_norm_eps)  # [N, d] -> [N, d]


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
    distinct); cos, sin [K, > max(positions), hd/2] (`rope_tables`) -> final hidden states
    [B, d]

    Each slot's positions up to its own are read, nothing else. The steps are `prefill`'s
    with the small ones fused, for the few rows of decode, where each call's overhead is
    comparable to its arithmetic: RoPE, the query scaling and the cache write are one call
    (`kernels.compute.attention.rope_store`, the same float32 operations as `project_qkv` then the
    cache write and scaling of `attention_prefill`), each residual sum goes with the RMSNorm
    after it
    (`kernels.compute.layers.add_rms_norm`); the results are the unfused steps' bit for bit.
    """
    slots = np.asarray(slots, dtype=np.int64)
    positions = np.asarray(positions, dtype=np.int64)
    segments = decode_segments(slots, positions)  # [B, 4]
    hq, hd, eps = config.num_attention_heads, config.head_dim, config.rms_norm_eps
    scale = np.float32(config.attention_scale)
    x = embed(params, config, tokens)  # [B] -> [B, d]
    h = rms_norm(x, params["layers"][0]["attn_norm"], eps)  # [B, d] -> [B, d]
    norms = [layer["attn_norm"] for layer in params["layers"][1:]] + [params["norm"]]
    for layer, layer_keys, layer_values, next_norm in zip(
        params["layers"], keys, values, norms, strict=True
    ):
        qkv = linear(h, layer, "w_qkv")  # [B, d] -> [B, (Hq + 2 Hkv) hd]
        qkv = qkv_extras(qkv, layer, config)
        q = np.empty((len(slots), hq, hd), np.float32)  # RoPE'd, scaled; k, v into the cache
        kind = layer["rope"]
        attention_kernels.rope_store(
            qkv, cos[kind], sin[kind], hq, scale, layer_keys, layer_values, slots, positions, q
        )
        attended = np.empty(q.shape, np.float32)
        attention_kernels.ragged_attention(
            q, layer_keys, layer_values, segments, attended, layer["window"]
        )
        o = project_out(attended.reshape(len(slots), -1), layer, config)  # [B, Hq hd] -> [B, d]
        h = layer_kernels.add_rms_norm(x, o, layer["mlp_norm"], eps, np.empty_like(x))
        h = layer_kernels.add_rms_norm(x, mlp(h, layer, config), next_norm, eps, np.empty_like(x))
    return h  # x after the last layer, through the final RMSNorm: [B, d]


def embed(params: dict, config: LlamaConfig, tokens: np.ndarray) -> np.ndarray:
    """The tokens' embeddings, times `config.embed_scale` (as float32, Gemma's sqrt(d), as
    transformers' `Gemma3TextScaledWordEmbedding`) when it is set.  int [N] -> [N, d] (a new
    array)"""
    x = params["embed"][tokens]  # [N] -> [N, d]
    if config.embed_scale is not None:
        x *= np.float32(config.embed_scale)
    return x


MASKED_HEAD_MAX = 256
"""The most tokens a row's mask may allow for the masked LM head to compute only theirs
(`lm_head`'s `allowed`; the engine asks for it, `corral.model.generate.Generator`). Its kernel
(`kernels.compute.quant.q8_0_chosen_rows`) costs O(allowed x d) against the whole head's O(V x d);
constrained masks are mostly tiny or nearly the whole vocabulary."""


def lm_head(params: dict, hidden: np.ndarray, allowed=None) -> np.ndarray:
    """Logits of the tied (or separate) LM head.  [N, d] -> [N, V] float32

    At most `QUANTIZED_MAX_ROWS` rows (any number under the plan's `every_pass`) read the head's
    quantization blocks when there are any;
    else one row uses the [V, d] table as a matrix-vector product, more rows one [N, d] x
    [d, V] GEMM. With int8 activations the head quantizes its input in
    `HEAD_ACTIVATION_PARTS` parts (the logits are the output).

    `allowed` (None, or one entry a row: None or int token ids) asks for the masked LM head:
    row i with ids computes the logits of those tokens only, and holds -inf at every other
    (a constrained step needs only the logits its mask allows; the mask is applied before the
    log-softmax, docs/design.md section 4). From Q8_0 blocks (`params["lm_head_block_rows"]`) a
    chosen logit is the one-row product's bit for bit (`kernels.compute.quant.q8_0_chosen_rows`; the
    same as a whole row's at batch 1 on float32 activations, within the usual rounding of
    passes of other sizes); otherwise it is the float32 rows' dot product.

    With `params["logit_softcap"]` c set (Gemma's `final_logit_softcapping`), every logit z
    computed becomes c tanh(z / c) (the -inf of a masked head stay -inf).

    Raises:
        ValueError: `allowed` has not one entry a row, or an id outside 0..V-1.
    """
    if allowed is None or all(ids is None for ids in allowed):
        return _whole_head(params, hidden)
    if len(allowed) != hidden.shape[0]:
        raise ValueError(f"allowed needs one entry a row: {len(allowed)} for {hidden.shape[0]}")
    rows = params["lm_head_rows"]
    v = rows.shape[0]
    allowed = [None if ids is None else np.asarray(ids, dtype=np.int64) for ids in allowed]
    for i, ids in enumerate(allowed):
        if ids is not None and len(ids) and (ids.min() < 0 or ids.max() >= v):
            raise ValueError(f"allowed[{i}] holds a token id outside 0..{v - 1}")
    whole = [i for i, ids in enumerate(allowed) if ids is None]
    out = np.empty((hidden.shape[0], v), np.float32)
    if whole:
        out[whole] = _whole_head(params, hidden[whole])
    blocks = params.get("lm_head_block_rows")
    for i, ids in enumerate(allowed):
        if ids is None:
            continue
        ids = ids.astype(np.int32)
        out[i] = -np.inf
        if blocks is not None:
            chosen = np.empty(len(ids), np.float32)
            quant_kernels.q8_0_chosen_rows(hidden[i], ids, blocks.scales, blocks.quants, chosen)
        else:
            chosen = rows[ids] @ hidden[i]  # [n, d] x [d] -> [n]
        out[i, ids] = softcap(chosen, params.get("logit_softcap"))
    return out


def softcap(logits: np.ndarray, cap: float | None) -> np.ndarray:
    """cap tanh(logits / cap) in float32 (Gemma's softcapping), or `logits` itself when cap is
    None.  [...] -> [...]"""
    if cap is None:
        return logits
    cap = np.float32(cap)
    return np.tanh(logits / cap) * cap


def _whole_head(params: dict, hidden: np.ndarray) -> np.ndarray:
    """Every logit of each row (`lm_head` without `allowed`).  [N, d] -> [N, V] float32"""
    blocks = params.get("lm_head_blocks")
    if blocks is not None and blocks.takes(hidden.shape[0]):
        logits = blocks.matmul(hidden, HEAD_ACTIVATION_PARTS)
    elif hidden.shape[0] == 1:
        logits = (params["lm_head_rows"] @ hidden[0])[None, :]  # [V, d] x [d] -> [1, V]
    else:
        logits = hidden @ params["lm_head"]  # [N, d] -> [N, V]
    return softcap(logits, params.get("logit_softcap"))

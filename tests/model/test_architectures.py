"""Llama 3, Mistral, Ministral, Qwen2, Qwen3 and Gemma 3 text against transformers (docs/models.md):
for each, a tiny model with random weights built by transformers from a config (no download),
saved with `save_pretrained` in float32 and in bfloat16, loaded by corral; its logits within
1e-3 of transformers' (float32, eager attention, the saved weights widened to float32) at
several prompt lengths, in a ragged batch, in a prompt prefilled in two pieces, and over 20
greedy decode steps over the KV cache, whose tokens transformers' greedy choice repeats. The
sliding windows (8) are shorter than the prompts; the prompts and decode steps cross the
attention kernel's blocks of 16 keys; Gemma 3's 6 layers hold both kinds, each with its RoPE.
Also: every architecture's config.json as transformers' config class reads it (keys left out
take the family's defaults), and what is refused and how it says so."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from corral.kernels.compute.plan import ComputePlan
from corral.model import LlamaConfig, ModelLoadError, load_model

# The repository's root leaves sys.path, as in tests/integrations/conftest.py: its `kernels/`
# folder would shadow the Hugging Face `kernels` package transformers imports.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:] = [p for p in sys.path if Path(p or os.getcwd()).resolve() != ROOT]
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

LOGIT_TOLERANCE = 1e-3
VOCAB = 384
PROMPT_LENGTHS = (1, 5, 20, 40)  # 40 > llama.SHORT_SEGMENT: a long segment
DECODE_STEPS = 20
WINDOW = 8

COMMON = {"vocab_size": VOCAB, "max_position_embeddings": 256, "rms_norm_eps": 1e-5}
ARCHITECTURES = {
    # Llama 3.x: llama3 RoPE scaling, untied head, head width 64 (the kernel's 16-key blocks)
    "llama3": ("LlamaConfig", {
        "hidden_size": 128, "intermediate_size": 160, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64},
    }),
    # Llama with linear RoPE scaling, tied embeddings and attention biases (q, k, v and o)
    "llama_linear": ("LlamaConfig", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
        "attention_bias": True,
        "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    }),
    "qwen2": ("Qwen2Config", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": True,
    }),
    # Qwen3: q/k norms, head_dim 32 while hidden / heads = 16
    "qwen3": ("Qwen3Config", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "tie_word_embeddings": True,
    }),
    # Mistral: every layer a sliding window of 8, head width 64
    "mistral": ("MistralConfig", {
        "hidden_size": 128, "intermediate_size": 160, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "sliding_window": WINDOW,
    }),
    # Ministral: sliding and full layers by layer_types, head width 16
    "ministral": ("MinistralConfig", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "sliding_window": WINDOW,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    }),
    # Gemma 3 as the released models: 5 sliding layers then a full one, head width 64 (not
    # hidden / heads), query_pre_attn_scalar, local RoPE base, linear scaling on full layers
    "gemma3": ("Gemma3TextConfig", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 7,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
        "query_pre_attn_scalar": 48, "sliding_window": WINDOW, "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }),
    # Gemma 3 with final logit softcapping, its own layer_types and head width 32; its
    # attn_logit_softcapping is read neither by transformers' Gemma 3 nor by corral
    "gemma3_softcap": ("Gemma3TextConfig", {
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "query_pre_attn_scalar": 32, "sliding_window": WINDOW,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "final_logit_softcapping": 5.0, "attn_logit_softcapping": 2.0,
    }),
}  # fmt: skip


def randomize_(model, gemma: bool, seed: int) -> None:
    """Weights of unit scale (transformers initializes norms to 1 and biases to 0, which would
    leave them untested): matrices N(0, 1/in), norms 1 + N(0, 0.1^2) (N(0, 0.1^2) for Gemma's
    1 + weight), biases N(0, 0.3^2), embeddings N(0, 1)."""
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


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tiny):
    """name -> {"float32": folder, "bfloat16": folder}, written once: transformers'
    `save_pretrained` beside the tiny tokenizer's files (tests/model/conftest.py)."""
    root = tmp_path_factory.mktemp("architectures")
    folders = {}
    for seed, (name, (config_class, fields)) in enumerate(ARCHITECTURES.items()):
        config = getattr(transformers, config_class)(**COMMON, **fields)
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation="eager", dtype=torch.float32
        )
        randomize_(model, "gemma" in name, seed)
        folders[name] = {}
        for dtype in ("float32", "bfloat16"):
            folder = tiny.write(root / f"{name}-{dtype}")  # the tokenizer's files
            model.to(getattr(torch, dtype)).save_pretrained(folder)
            folders[name][dtype] = folder
    return folders


def reference_logits(folder, sequences: list[list[int]]) -> list[np.ndarray]:
    """transformers' logits at every position of each sequence: the folder loaded in float32
    with eager attention, one sequence at a time.  -> [n_i, V] each"""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        return [model(torch.tensor([ids])).logits[0].numpy() for ids in sequences]


def prompts(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, VOCAB, n).tolist() for n in PROMPT_LENGTHS]


def corral_run(model, sequences: list[list[int]]):
    """corral's logits for a ragged batch prefilled together then decoded greedily together:
    (prefill logits [B, V], the greedy tokens [B, steps], the decode logits [steps, B, V])."""
    cache = model.new_cache(len(sequences), max(map(len, sequences)) + DECODE_STEPS + 1)
    slots = list(range(len(sequences)))
    first = model.prefill_batch(cache, slots, sequences)
    tokens, steps = [first.argmax(-1)], []
    for _ in range(DECODE_STEPS - 1):
        steps.append(model.decode(cache, slots, tokens[-1]))
        tokens.append(steps[-1].argmax(-1))
    return first, np.stack(tokens, axis=1), steps


def compare(name: str, dtype: str, folder, positional: bool | None) -> dict:
    """Run corral and transformers on one checkpoint; assert they agree; return the figures
    {"error": max |logit difference|, "greedy": whether every greedy token matched}.
    `positional`: the plan's prompt-attention path (None: the plan's default)."""
    plan = ComputePlan.detect(int8_activations=False, kv_dtype="float32", quantized=False)
    if positional is not None:
        plan = dataclasses.replace(plan, positional_attention=positional)
    model = load_model(folder, progress=False, plan=plan)
    sequences = prompts(len(name))
    first, tokens, steps = corral_run(model, sequences)
    full = [ids + row.tolist() for ids, row in zip(sequences, tokens, strict=True)]
    expected = reference_logits(folder, full)
    errors = []
    for b, (ids, reference) in enumerate(zip(sequences, expected, strict=True)):
        n = len(ids)
        errors.append(np.abs(first[b] - reference[n - 1]).max())
        for step, logits in enumerate(steps):  # after token n + step of the full sequence
            errors.append(np.abs(logits[b] - reference[n + step]).max())
        # transformers' greedy choice after each prefix of corral's sequence is corral's token
        greedy = reference[n - 1 : n - 1 + DECODE_STEPS].argmax(-1)
        np.testing.assert_array_equal(tokens[b], greedy, err_msg=f"{name} {dtype} row {b}")
    # every position of one sequence, and the longest prompt prefilled in two pieces
    longest = sequences[-1]
    errors.append(np.abs(model.logits(longest) - expected[-1][: len(longest)]).max())
    cache = model.new_cache(1, len(longest))
    model.prefill(cache, 0, longest[:23])
    pieces = model.prefill(cache, 0, longest[23:])  # 17 rows after 23: windows start mid-slot
    errors.append(np.abs(pieces - expected[-1][len(longest) - 1]).max())
    # jump-forward's chunks: a few tokens of every sequence in one pass, as decode rows
    # (`Model._decode_rows`), with the logits after each of them (`last`)
    cache = model.new_cache(len(full), max(map(len, full)))
    slots = list(range(len(full)))
    model.prefill_batch(cache, slots, sequences)
    done = [len(ids) for ids in sequences]
    for sizes in ((3, 1, 8, 2), (1, 5, 1, 7)):
        chunks = [ids[n : n + k] for ids, n, k in zip(full, done, sizes, strict=True)]
        rows = model.prefill_batch(cache, slots, chunks, last=list(sizes))
        ends = np.cumsum(sizes)
        for b, (n, k) in enumerate(zip(done, sizes, strict=True)):
            errors.append(np.abs(rows[ends[b] - k : ends[b]] - expected[b][n : n + k]).max())
        done = [n + k for n, k in zip(done, sizes, strict=True)]
    error = float(max(errors))
    assert error <= LOGIT_TOLERANCE, f"{name} {dtype}: max logit error {error}"
    return {"error": error, "greedy": True}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_logits_and_greedy_tokens_match_transformers(checkpoints, name, dtype):
    compare(name, dtype, checkpoints[name][dtype], None)


@pytest.mark.parametrize("name", ["llama3", "mistral", "gemma3", "gemma3_softcap"])
@pytest.mark.parametrize("positional", [True, False])
def test_both_prompt_attention_paths_match_transformers(checkpoints, name, positional):
    """Prompts longer than `llama.SHORT_SEGMENT` go to the ragged kernel in pieces
    (the plan's `positional_attention`) or to `attend_prompt`'s GEMMs: each honours the windows."""
    compare(name, "float32", checkpoints[name]["float32"], positional)


MINIMAL = {
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 8,
    "num_attention_heads": 4,
}
"""The keys corral needs; every other key takes its family's default."""

CONFIG_CASES = [
    ("llama", {}),
    # original_max_position_embeddings left out:
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0}}),
    ("mistral", {}),  # a window of 4,096 when the key is absent
    ("mistral", {"sliding_window": None}),
    ("ministral", {"head_dim": 16}),
    ("qwen2", {}),  # sliding_window without use_sliding_window: no window
    ("qwen2", {"use_sliding_window": True, "sliding_window": 32, "max_window_layers": 3}),
    ("qwen3", {}),  # head_dim 128 when absent
    ("qwen3", {"use_sliding_window": True,
               "layer_types": ["full_attention"] * 7 + ["sliding_attention"]}),
    ("gemma3_text", {}),  # every 6th layer full, RoPE bases 1e6 and 1e4, tied, head_dim 256
    ("gemma3_text", {"sliding_window": None}),  # no window, the local RoPE base all the same
    ("gemma3_text", {"sliding_window_pattern": 3, "rope_theta": 5e5, "rope_local_base_freq": 2e4,
                     "rope_scaling": {"rope_type": "linear", "factor": 8.0}}),
]  # fmt: skip


@pytest.mark.parametrize("family, fields", CONFIG_CASES)
def test_a_config_reads_as_transformers_reads_it(family, fields):
    """corral's reading of config.json against transformers' config class of the family, for
    configs leaving out what users' configs leave out: head width, tied embeddings, each
    layer's sliding window, RoPE bases and scaling."""
    raw = {"model_type": family, **MINIMAL, **fields}
    ours = LlamaConfig.from_dict(raw)
    theirs = transformers.AutoConfig.for_model(family, **json.loads(json.dumps(fields | MINIMAL)))
    d, heads = MINIMAL["hidden_size"], MINIMAL["num_attention_heads"]
    assert ours.head_dim == (getattr(theirs, "head_dim", None) or d // heads)
    assert ours.tie_word_embeddings == theirs.tie_word_embeddings
    assert ours.max_position_embeddings == theirs.max_position_embeddings
    for layer in range(MINIMAL["num_hidden_layers"]):
        if family == "llama":
            window = None
        elif family == "mistral":  # MistralAttention windows every layer
            window = theirs.sliding_window
        else:
            sliding = theirs.layer_types[layer] == "sliding_attention"
            window = theirs.sliding_window if sliding else None
        assert ours.window(layer) == (window or 0), layer
        if family == "gemma3_text":  # Gemma3RotaryEmbedding: by layer type
            assert ours.local_rope(layer) == (theirs.layer_types[layer] == "sliding_attention")
    rope = theirs.rope_parameters
    if family == "gemma3_text":
        assert ours.rope_local_theta == rope["sliding_attention"]["rope_theta"]
        assert ours.query_pre_attn_scalar == theirs.query_pre_attn_scalar
        rope = rope["full_attention"]
    assert ours.rope_theta == rope["rope_theta"]
    if ours.rope_scaling is None:
        assert rope["rope_type"] == "default"
    else:
        assert {key: rope[key] for key in ours.rope_scaling} == ours.rope_scaling


@pytest.mark.parametrize("family, fields", CONFIG_CASES)
def test_to_dict_reads_back_as_the_same_config(family, fields):
    config = LlamaConfig.from_dict({"model_type": family, **MINIMAL, **fields})
    assert LlamaConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]}, "gemma3"),
        ({"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}, "phi3"),
        ({"model_type": "qwen2_moe"}, "qwen2_moe"),
        ({"model_type": None, "architectures": ["GPT2LMHeadModel"]}, "GPT2LMHeadModel"),
        ({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]}, "llama"),
        ({"model_type": None, "architectures": [42]}, "42"),
    ],
)
def test_another_architecture_is_refused_by_name(tmp_path, tiny, fields, named):
    config = {**tiny.config(), **fields}
    (tiny.write(tmp_path / "model") / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match=f"architecture '?{named}'? is not supported") as error:
        load_model(tmp_path / "model", progress=False)
    message = str(error.value)
    assert all(str(name) in message for name in config.get("architectures") or [])
    assert "qwen3 (Qwen3ForCausalLM)" in message  # what is supported
    assert error.value.path.name == "config.json"


@pytest.mark.parametrize(
    "family, fields, message",
    [
        ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "RoPE scaling 'yarn'"),
        ("qwen2", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "RoPE scaling 'dynamic'"),
        ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
        ("llama", {"mlp_bias": True}, "'mlp_bias' True is not supported"),
        ("mistral", {"hidden_act": "gelu"}, "'hidden_act' 'gelu' is not supported"),
        ("gemma3_text", {"hidden_activation": "silu"}, "'hidden_activation' 'silu'"),
        ("llama", {"partial_rotary_factor": 0.5}, "'partial_rotary_factor' 0.5"),
        ("gemma3_text", {"use_bidirectional_attention": True}, "'use_bidirectional_attention'"),
        ("gemma3_text", {"rope_parameters": {"sliding_attention": {"rope_type": "linear",
                         "factor": 2.0}}}, "RoPE scaling on sliding layers"),
        ("mistral", {"sliding_window": 0}, "'sliding_window' must be a positive int"),
        ("qwen3", {"layer_types": ["full_attention"]}, "'layer_types' must give one"),
        ("gemma3_text", {"query_pre_attn_scalar": 0}, "'query_pre_attn_scalar' must be positive"),
        ("gemma3_text", {"final_logit_softcapping": -1.0}, "'final_logit_softcapping' must be"),
    ],
)  # fmt: skip
def test_a_setting_corral_does_not_implement_is_refused(family, fields, message):
    with pytest.raises(ModelLoadError, match=message):
        LlamaConfig.from_dict({"model_type": family, **MINIMAL, **fields})


def test_the_masked_head_softcaps_the_allowed_logits_and_keeps_the_rest_at_minus_inf(checkpoints):
    """Gemma's final logit softcapping on the masked LM head (`llama.lm_head`'s `allowed`): the
    allowed logits are the whole head's, the others -inf (not -c, tanh's limit)."""
    model = load_model(checkpoints["gemma3_softcap"]["float32"], progress=False)
    ids, allowed = list(range(10, 30)), [3, 50, 200]
    whole = model.prefill(model.new_cache(1, 32), 0, ids)
    masked = model.prefill_batch(model.new_cache(1, 32), [0], [ids], allowed=[allowed])[0]
    assert np.abs(whole).max() <= 5.0  # final_logit_softcapping 5
    np.testing.assert_allclose(masked[allowed], whole[allowed], rtol=0, atol=1e-5)
    assert np.isneginf(np.delete(masked, allowed)).all()


@pytest.mark.parametrize("name", ["qwen3", "mistral", "gemma3"])
def test_the_engine_writes_valid_constrained_answers_with_each_family(checkpoints, name):
    """The generation engine (continuous batching, masks, jump-forward, the masked head) on a
    family's model: every answer of a JSON Schema constraint validates."""
    from corral.automata import schema_to_dfa
    from corral.kernels import Constraint, SamplingParams, TokenIndex
    from corral.model.generate import GenerationRequest, generate

    jsonschema = pytest.importorskip("jsonschema")
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    model = load_model(checkpoints[name]["float32"], progress=False)
    index = TokenIndex(schema_to_dfa(schema), model.vocabulary)
    requests = [
        GenerationRequest(prompt, 60, SamplingParams(), seed, (), Constraint(index))
        for seed, prompt in enumerate(prompts(3))
    ]
    for result in generate(model, requests, batch_size=3):
        assert result.finish_reason == "stop", result
        jsonschema.validate(json.loads(result.text), schema)

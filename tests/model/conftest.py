"""Fixtures of tests/model: the real default model (downloaded and converted once into corral's
cache dir, `$CORRAL_HOME` or the user cache dir), the transformers reference fixture, and tiny
random Llama checkpoints written as Hugging Face folders for fast tests."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from corral.kernels.compute.plan import ComputePlan
from corral.model import LlamaConfig, load_model
from corral.model.tokenizer import tokenizer_json_from_gguf
from corral.model.vocabulary import bytes_to_unicode
from corral.model.weights import expected_shapes
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["h e", "l l", "he ll"]  # tokens "he", "ll", "hell" after the 256 bytes
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="session")
def model():
    """The default SmolLM2-135M-Instruct (converted once per cache dir)."""
    return load_model(progress=False)


@pytest.fixture(scope="session")
def float32_plan() -> ComputePlan:
    """The host's plan on float32 activations over a float32 KV cache, for tests of float32
    arithmetic: the reference comparison with transformers at 1e-3, the weights' paths against
    each other, pass compositions at float32 rounding. The float16 cache and int8 activations,
    the default on AMX, are further quantizations, held to their own bar
    (test_float16_cache.py, test_int8_activations.py)."""
    return ComputePlan.detect(int8_activations=False, kv_dtype="float32")


@pytest.fixture(scope="session")
def reference() -> dict:
    """tests/model/reference.json plus the logits of reference_logits.npz under "logits"."""
    data = json.loads((HERE / "reference.json").read_text(encoding="utf-8"))
    with np.load(HERE / "reference_logits.npz") as logits:
        data["logits"] = {name: logits[name] for name in logits.files}
    return data


def tiny_config(**overrides) -> dict:
    """A small random Llama's config.json: 2 layers, d=32, 4 query heads on 2 KV heads of 8."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": len(SPECIALS) + 256 + len(MERGES),
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 256,
        "tie_word_embeddings": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(overrides)
    return config


def tiny_tensors(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights of the shapes `config` implies (Hugging Face names)."""
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(LlamaConfig.from_dict(config))
    return {
        name: (
            1.0 + 0.1 * rng.standard_normal(shape)
            if len(shape) == 1
            else rng.standard_normal(shape) / np.sqrt(shape[-1])
        ).astype(np.float32)
        for name, shape in shapes.items()
    }


def tiny_tokens() -> list[str]:
    """The tiny tokenizer's tokens: 3 special, the 256 bytes (GPT-2's alphabet), 3 merges."""
    alphabet = bytes_to_unicode()
    return SPECIALS + [alphabet[b] for b in range(256)] + [m.replace(" ", "") for m in MERGES]


def write_tiny_folder(folder: Path, config: dict | None = None, seed: int = 0) -> Path:
    """Write a loadable Hugging Face folder: config.json, model.safetensors, tokenizer.json
    (byte-level BPE over the 256 bytes, 3 merges, 3 special tokens), tokenizer_config.json."""
    config = config or tiny_config()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file(tiny_tensors(config, seed), str(folder / "model.safetensors"))
    fields = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tiny_tokens(),
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.token_type": [3] * len(SPECIALS) + [1] * (256 + len(MERGES)),
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer_json_from_gguf(fields, "tiny")))
    tokenizer_config = {"chat_template": CHATML, "eos_token": "<|im_end|>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny random Llama loaded from a synthetic Hugging Face folder."""
    return load_model(write_tiny_folder(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="session")
def tiny():
    """The synthetic-checkpoint helpers, for tests that write their own (broken) folders."""
    return SimpleNamespace(
        config=tiny_config,
        tensors=tiny_tensors,
        write=write_tiny_folder,
        chat_template=CHATML,
        specials=SPECIALS,
        tokens=tiny_tokens,
        merges=MERGES,
    )

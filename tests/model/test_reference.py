"""The real SmolLM2-135M-Instruct against Hugging Face transformers on the same GGUF weights
(tests/model/reference.json, written by make_reference.py): logits, greedy continuations,
tokenizer encodings and decodings, chat-template renderings (docs/design.md section 6). The forward
pass is the reference path's, over a float32 KV cache (`load_model(..., kv_dtype=np.float32)`):
the float16 default is a further quantization, held to its own bar in test_float16_cache.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

HERE_REFERENCE = json.loads((Path(__file__).parent / "reference.json").read_text("utf-8"))
PROMPTS = [prompt["name"] for prompt in HERE_REFERENCE["prompts"]]
TEXTS = range(len(HERE_REFERENCE["tokenizer"]))
CHATS = range(len(HERE_REFERENCE["chat"]))
LOGIT_TOLERANCE = 1e-3  # docs/design.md section 6: float32 NumPy vs torch agree to about 2e-5


@pytest.fixture(scope="module")
def model(model, float32_plan):
    """The default model on float32 activations over a float32 KV cache (`float32_plan`)."""
    return model.with_plan(float32_plan)


def prompt(reference, name) -> dict:
    return next(p for p in reference["prompts"] if p["name"] == name)


def test_reference_covers_a_chat_question_plain_text_and_a_json_prefix(reference):
    names = {p["name"] for p in reference["prompts"]}
    assert {"chat_question", "plain_text", "json_prefix"} <= names


@pytest.mark.parametrize("name", PROMPTS)
def test_prompt_text_encodes_to_the_reference_ids(model, reference, name):
    p = prompt(reference, name)
    assert model.tokenizer.encode(p["text"]) == p["ids"]


@pytest.mark.parametrize("name", PROMPTS)
def test_last_position_logits_match_transformers(model, reference, name):
    p = prompt(reference, name)
    expected = reference["logits"][name]
    cache = model.new_cache(1, len(p["ids"]))
    logits = model.prefill(cache, 0, p["ids"])
    assert logits.dtype == np.float32 and logits.shape == (model.vocab_size,)
    np.testing.assert_allclose(logits, expected, rtol=0, atol=LOGIT_TOLERANCE)


def test_logits_of_every_position_end_with_the_reference_row(model, reference):
    p = prompt(reference, "plain_text")
    logits = model.logits(p["ids"])
    assert logits.shape == (len(p["ids"]), model.vocab_size) and logits.dtype == np.float32
    np.testing.assert_allclose(logits[-1], reference["logits"]["plain_text"], atol=LOGIT_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("name", PROMPTS)
def test_greedy_continuation_matches_transformers(model, reference, name):
    p = prompt(reference, name)
    # every step's top two logits are far apart in the reference, so argmax is not a coin toss
    assert min(p["margins"]) > 10 * LOGIT_TOLERANCE
    cache = model.new_cache(1, len(p["ids"]) + len(p["greedy"]))
    logits = model.prefill(cache, 0, p["ids"])
    greedy = []
    for _ in p["greedy"]:
        greedy.append(int(np.argmax(logits)))
        logits = model.decode(cache, [0], [greedy[-1]])[0]
    assert greedy == p["greedy"]


@pytest.mark.parametrize("index", TEXTS)
def test_tokenizer_encodes_like_the_reference(model, reference, index):
    case = reference["tokenizer"][index]
    assert model.tokenizer.encode(case["text"]) == case["ids"]


@pytest.mark.parametrize("index", TEXTS)
def test_tokenizer_decodes_like_the_reference(model, reference, index):
    case = reference["tokenizer"][index]
    assert model.tokenizer.decode(case["ids"]) == case["decoded"]


def test_digits_are_split_one_by_one_as_smollm2_was_trained(model):
    assert model.tokenizer.encode("2026") == [model.tokenizer.encode(d)[0] for d in "2026"]


@pytest.mark.parametrize("index", CHATS)
def test_chat_template_renders_like_the_reference(model, reference, index):
    case = reference["chat"][index]
    rendered = model.render_chat(case["messages"], case["add_generation_prompt"])
    assert rendered == case["rendered"]


def test_vocabulary_gives_raw_bytes_and_none_for_special_tokens(model):
    vocabulary = model.vocabulary.tokens
    assert len(vocabulary) == model.vocab_size
    assert vocabulary[2] is None  # <|im_end|>
    for text in ["Hello", " world", "é", "\n\n", '{"']:
        ids = model.tokenizer.encode(text)
        assert b"".join(vocabulary[i] for i in ids) == text.encode("utf-8")


def test_default_model_facts(model):
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.intermediate_size) == (30, 576, 1536)
    assert (c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (9, 3, 64)
    assert (c.vocab_size, c.rope_theta, c.tie_word_embeddings) == (49152, 100000.0, True)
    assert model.eos_ids == (2,)
    assert model.tokenizer.decode([2]) == "<|im_end|>"

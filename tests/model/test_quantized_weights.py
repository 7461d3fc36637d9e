"""Decoding from a GGUF's own quantization blocks against the float32 path on the same weights
(docs/design.md section 6): logits within 1e-3 and identical greedy tokens on the reference prompts,
the q/k row order, and the choice of weights at load time. The KV caches are float32: the
float16 default's rounding is held to its own bar (test_float16_cache.py)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.model import ModelLoadError, load_model
from corral.model.quant import QUANTIZED_MAX_ROWS, unpermute_order
from corral.model.weights import unpermute_rows
from test_loading import write_tiny_gguf

LOGIT_TOLERANCE = 1e-3  # the two paths compute with the same weights, in another order


@pytest.fixture(scope="module")
def model(model, float32_plan):
    """The default model on float32 activations over a float32 KV cache (`float32_plan`)."""
    return model.with_plan(float32_plan)


@pytest.fixture(scope="session")
def float32_model():
    """The default model on its float32 weights alone (the reference path)."""
    return load_model(progress=False, weights="float32")


def test_the_default_model_decodes_from_its_quantization_blocks(model, float32_model):
    assert model.weights == "quantized" and float32_model.weights == "float32"
    blocks = model.params["layers"][0]["blocks"]
    assert blocks["w_qkv"].kind == "Q4_1" and model.params["lm_head_blocks"].kind == "Q8_0"


def decode_last(model, ids, steps: int):
    """Prefill all but the last id, decode the last one and then `steps` greedy tokens.
    -> (logits after the prompt [V], the greedy tokens)"""
    cache = model.new_cache(1, len(ids) + steps + 1)
    model.prefill(cache, 0, ids[:-1])
    logits = first = model.decode(cache, [0], [ids[-1]])[0]
    tokens = []
    for _ in range(steps):
        tokens.append(int(np.argmax(logits)))
        logits = model.decode(cache, [0], [tokens[-1]])[0]
    return first, tokens


@pytest.mark.parametrize("index", range(3))
def test_quantized_decode_logits_match_float32_and_the_reference(
    model, float32_model, reference, index
):
    p = reference["prompts"][index]
    quantized, _ = decode_last(model, p["ids"], 0)
    float32, _ = decode_last(float32_model, p["ids"], 0)
    np.testing.assert_allclose(quantized, float32, rtol=0, atol=LOGIT_TOLERANCE)
    np.testing.assert_allclose(quantized, reference["logits"][p["name"]], atol=LOGIT_TOLERANCE)


@pytest.mark.parametrize("rows", [2, 9, 17])
def test_a_batch_of_at_most_max_rows_decodes_from_the_blocks_like_float32(
    model, float32_model, rows
):
    # row groups of 2, 8 + 1 and 16 + 1 (`kernels.quant_rows`), all within the blocks' bound
    assert 2 <= rows <= QUANTIZED_MAX_ROWS  # else this test checks nothing the others do not
    rng = np.random.default_rng(0)
    prompts = [rng.integers(100, 40000, int(n)).tolist() for n in rng.integers(2, rows + 1, rows)]
    logits = []
    for m in (model, float32_model):
        cache = m.new_cache(rows, rows + 2)
        for slot, ids in enumerate(prompts):
            m.prefill(cache, slot, ids)  # at most `rows` tokens: a blocks pass for `model`
        logits.append(m.decode(cache, list(range(rows)), [p[0] for p in prompts]))
    np.testing.assert_allclose(logits[0], logits[1], rtol=0, atol=LOGIT_TOLERANCE)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(3))
def test_quantized_greedy_tokens_equal_float32_for_20_tokens(
    model, float32_model, reference, index
):
    ids = reference["prompts"][index]["ids"]
    assert decode_last(model, ids, 20)[1] == decode_last(float32_model, ids, 20)[1]


def test_unpermute_order_moves_rows_as_unpermute_rows_does():
    weight = np.random.default_rng(0).standard_normal((6 * 8, 3)).astype(np.float32)
    np.testing.assert_array_equal(weight[unpermute_order(48, 6)], unpermute_rows(weight, 6))


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_a_quantized_gguf_decodes_like_its_float32_conversion(
    tmp_path, monkeypatch, tiny, kind, float32_plan
):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    config = tiny.config(intermediate_size=64)  # every matrix's input a whole number of blocks
    write_tiny_gguf(tmp_path / "tiny.gguf", tiny, config, tiny.tensors(config), kind=kind)
    quantized = load_model(tmp_path / "tiny.gguf", progress=False, plan=float32_plan)
    float32 = load_model(tmp_path / "tiny.gguf", progress=False, weights="float32")
    assert (quantized.weights, float32.weights) == ("quantized", "float32")
    ids = quantized.tokenizer.encode("<|im_start|>user\nhello 123<|im_end|>")
    got, tokens = decode_last(quantized, ids, 8)
    expected, expected_tokens = decode_last(float32, ids, 8)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert tokens == expected_tokens


def test_a_float32_gguf_loads_float32_unless_blocks_are_required(tmp_path, monkeypatch, tiny):
    monkeypatch.setenv("CORRAL_HOME", str(tmp_path / "home"))
    config = tiny.config()
    write_tiny_gguf(tmp_path / "tiny.gguf", tiny, config, tiny.tensors(config))
    assert load_model(tmp_path / "tiny.gguf", progress=False).weights == "float32"
    with pytest.raises(ModelLoadError, match="block types") as error:
        load_model(tmp_path / "tiny.gguf", progress=False, weights="quantized")
    assert error.value.path == tmp_path / "tiny.gguf"


def test_a_folder_is_float32_and_a_bad_choice_is_named(tmp_path, tiny):
    folder = tiny.write(tmp_path / "folder")
    assert load_model(folder).weights == "float32"
    with pytest.raises(ModelLoadError, match="need a GGUF"):
        load_model(folder, weights="quantized")
    with pytest.raises(ValueError, match="'int3'"):
        load_model(folder, weights="int3")

"""The float16 KV cache (`KVCache(..., dtype=np.float16)`, `Model.kv_dtype`) against the float32
one on the real SmolLM2-135M-Instruct: the bar of corral's issue 15 for storing the cache in
fewer bits, the same greedy tokens on the reference prompts and a mean log-likelihood within 1%,
through the prompt path (`llama.attend_prompt`) and the decode path (the ragged kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.model.kv_cache import KVCache
from corral.model.llama import SHORT_SEGMENT

STEPS = 20  # greedy tokens compared per prompt
LIKELIHOOD_TOLERANCE = 0.01  # relative, of the mean log-likelihood (issue 15)


def greedy_batch(model, prompts, dtype) -> list[list[int]]:
    """STEPS greedy tokens of every prompt, decoded together in one cache of `dtype`."""
    cache = KVCache(model.config, len(prompts), max(map(len, prompts)) + STEPS, dtype)
    slots = list(range(len(prompts)))
    logits = model.prefill_batch(cache, slots, prompts)  # [B, V]
    tokens = []
    for _ in range(STEPS):
        tokens.append(np.argmax(logits, axis=1))
        logits = model.decode(cache, slots, tokens[-1])
    return np.array(tokens).T.tolist()


def log_likelihoods_by_decode(model, ids, dtype) -> np.ndarray:
    """log p(ids[i + 1] | ids[..i]) for every i, one decode step per token (teacher forcing)."""
    cache = KVCache(model.config, 1, len(ids), dtype)
    logits = model.prefill(cache, 0, ids[:1])[None, :]
    rows = [logits]
    for token in ids[1:-1]:
        rows.append(model.decode(cache, [0], [token]))
    return log_softmax_of(np.concatenate(rows), ids[1:])


def log_softmax_of(logits, targets) -> np.ndarray:
    """log softmax(logits[i])[targets[i]] in float64.  [n, V], [n] -> [n]"""
    logits = logits.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    norms = np.log(np.exp(logits - top).sum(axis=1)) + top[:, 0]
    return logits[np.arange(len(targets)), targets] - norms


@pytest.fixture(scope="module")
def text_ids(reference) -> list[int]:
    """A fixed text: the reference prompts one after another (221 tokens)."""
    return [token for p in reference["prompts"] for token in p["ids"]]


@pytest.mark.slow
def test_greedy_tokens_of_the_reference_prompts_are_the_float32_caches(model, reference):
    prompts = [p["ids"] for p in reference["prompts"]]
    float32 = greedy_batch(model, prompts, np.float32)
    assert greedy_batch(model, prompts, np.float16) == float32
    for p, tokens in zip(reference["prompts"], float32, strict=True):  # and transformers'
        assert tokens[: len(p["greedy"])] == p["greedy"][:STEPS]


@pytest.mark.slow
def test_mean_log_likelihood_by_decode_is_the_float32_caches_within_1_percent(model, text_ids):
    float32 = log_likelihoods_by_decode(model, text_ids, np.float32).mean()
    float16 = log_likelihoods_by_decode(model, text_ids, np.float16).mean()
    print(f"mean log-likelihood by decode: float32 {float32:.6f}, float16 {float16:.6f}")
    assert abs(float16 - float32) <= LIKELIHOOD_TOLERANCE * abs(float32)


def test_mean_log_likelihood_of_a_prompt_is_the_float32_caches_within_1_percent(
    model, text_ids, monkeypatch
):
    """`Model.logits` prefills the whole text in one pass (`attend_prompt` over a float16 slot)."""
    float32 = log_softmax_of(model.logits(text_ids)[:-1], text_ids[1:]).mean()
    monkeypatch.setattr(model, "kv_dtype", np.float16)
    float16 = log_softmax_of(model.logits(text_ids)[:-1], text_ids[1:]).mean()
    print(f"mean log-likelihood by prefill: float32 {float32:.6f}, float16 {float16:.6f}")
    assert abs(float16 - float32) <= LIKELIHOOD_TOLERANCE * abs(float32)


def test_a_float16_cache_takes_half_the_bytes_and_copies_a_prefix_in_float16(tiny_model):
    """The prefix cache's copy keeps the dtype and the numbers: decoding on from a copied
    prefix gives the logits of decoding on from the slot it was copied from."""
    config = tiny_model.config
    assert KVCache.bytes_needed(config, 3, 10, np.float16) * 2 == KVCache.bytes_needed(
        config, 3, 10
    )
    cache = KVCache(config, 3, 2 * SHORT_SEGMENT, np.float16)
    assert cache.keys.dtype == cache.values.dtype == np.float16
    ids = np.random.default_rng(0).integers(3, tiny_model.vocab_size, SHORT_SEGMENT + 5).tolist()
    head, tail = ids[:-3], ids[-3:]
    tiny_model.prefill(cache, 0, head)  # a long segment: attend_prompt over a float16 slot
    cache.copy_prefix(0, 2, len(head))
    np.testing.assert_array_equal(
        cache.keys[:, 2, :, : len(head)], cache.keys[:, 0, :, : len(head)]
    )
    tails = tiny_model.prefill_batch(cache, [0, 2], [tail, tail])  # short: the ragged kernel
    np.testing.assert_array_equal(tails[0], tails[1])
    step = tiny_model.decode(cache, [0, 2], [7, 7])
    np.testing.assert_array_equal(step[0], step[1])


def test_a_cache_of_another_dtype_is_refused(tiny_model):
    with pytest.raises(ValueError, match="float32 or float16, not float64"):
        KVCache(tiny_model.config, 1, 4, np.float64)

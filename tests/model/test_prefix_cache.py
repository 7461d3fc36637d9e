"""The prefix cache (corral.model.generate's module docstring): keys and values of a shared prompt
prefix copied between slots (`KVCache.copy_prefix`) give the logits of a full prefill, and the
engine with the cache gives the outputs of the engine without it, while reusing what it says."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from corral.kernels import Constraint, SamplingParams
from corral.model import CacheError
from corral.model.generate import (
    MIN_SHARED,
    GenerationRequest,
    GenerationStats,
    Generator,
    generate,
)
from fake_model import FakeModel, index_of
from hypothesis import given, settings
from hypothesis import strategies as st

ATOL = 2e-5  # tests/model/test_kv_cache.py's tolerance
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


def one_prefill(model, ids):
    """Last-position logits of `ids` from one prefill in a fresh cache.  -> [V]"""
    return model.prefill(model.new_cache(1, len(ids)), 0, ids)


def test_copied_prefix_then_the_rest_equals_one_prefill(tiny_model):
    rng = np.random.default_rng(0)
    shared = rng.integers(3, tiny_model.vocab_size, 40).tolist()
    first = shared + rng.integers(3, tiny_model.vocab_size, 9).tolist()
    second = shared + rng.integers(3, tiny_model.vocab_size, 5).tolist()
    cache = tiny_model.new_cache(3, 64)
    tiny_model.prefill(cache, 0, first)
    cache.copy_prefix(0, 2, len(shared))
    assert cache.lengths.tolist() == [len(first), 0, len(shared)]
    np.testing.assert_allclose(
        tiny_model.prefill(cache, 2, second[len(shared) :]), one_prefill(tiny_model, second),
        atol=ATOL,
    )  # fmt: skip
    cache.copy_prefix(0, 0, 30)  # in place: the slot keeps its first 30 tokens
    np.testing.assert_allclose(
        tiny_model.prefill(cache, 0, second[30:]), one_prefill(tiny_model, second), atol=ATOL
    )
    with pytest.raises(CacheError, match="holds"):
        cache.copy_prefix(1, 2, 1)
    with pytest.raises(CacheError, match="does not exist"):
        cache.copy_prefix(0, 3, 1)


def shared_requests(n_requests: int, seed: int, constrained: bool) -> list[GenerationRequest]:
    """Prompts drawn from a few, some identical, some sharing a long head, some unrelated."""
    rng = np.random.default_rng(seed)
    head = rng.integers(0, 256, 30).tolist()
    prompts = [
        head + [1, 2, 3],
        head + [1, 2, 3],
        head[:20] + [9, 9],
        rng.integers(0, 256, 25).tolist(),
        head,
    ]
    index = index_of(CITY) if constrained else None
    return [
        GenerationRequest(
            prompts[int(rng.integers(len(prompts)))],
            int(rng.integers(1, 20)) + (10 if constrained else 0),
            SamplingParams(temperature=1.0),
            seed=i,
            constraint=Constraint(index) if constrained else None,
        )
        for i in range(n_requests)
    ]


@settings(max_examples=20, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_requests=st.integers(1, 12),
    batch_size=st.sampled_from([1, 2, 3, 16]),
    constrained=st.booleans(),
)
def test_outputs_equal_those_without_the_prefix_cache(seed, n_requests, batch_size, constrained):
    """The stand-in's logits hash each slot's whole history, so a prefix copied from the wrong
    slot or of the wrong length changes every later token."""
    requests = shared_requests(n_requests, seed, constrained)
    stats = GenerationStats()
    with_cache = generate(FakeModel(), requests, batch_size, stats)
    without = generate(FakeModel(), requests, batch_size, prefix_cache=False)
    assert with_cache == without
    assert stats.prompt_tokens == sum(len(r.prompt_ids) for r in requests)
    assert stats.prefix_tokens <= stats.prompt_tokens - stats.prefix_hits


def test_hits_and_tokens_saved():
    """Three identical prompts in one admission: the first is prefilled whole, the others copy
    all its tokens but the last in a second pass; then a fourth request reuses a finished slot
    in place, and an unrelated prompt or a too short shared head reuses nothing."""
    prompt = list(range(40, 70))
    request = GenerationRequest(prompt, 3, SamplingParams(temperature=0), seed=0)
    model, stats = FakeModel(), GenerationStats()
    generator = Generator(model, 3, stats=stats)
    for _ in range(3):
        generator.submit(request)
    generator.step()
    assert (stats.prefix_hits, stats.prefix_tokens) == (2, 2 * 29)
    while generator.has_work:
        generator.step()
    generator.submit(dataclasses.replace(request, prompt_ids=prompt[:20] + [1, 2]))
    generator.submit(dataclasses.replace(request, prompt_ids=prompt[: MIN_SHARED - 1] + [5, 5]))
    generator.submit(dataclasses.replace(request, prompt_ids=[7] * 30))
    while generator.has_work:
        generator.step()
    assert (stats.prefix_hits, stats.prefix_tokens) == (3, 2 * 29 + 20)
    assert stats.prompt_tokens == 3 * 30 + 22 + MIN_SHARED + 1 + 30


def test_off_switch_and_caches_without_copy_prefix_reuse_nothing():
    requests = shared_requests(6, 0, constrained=False)
    for model, switch in ((FakeModel(), False), (_NoCopy(), True)):
        stats = GenerationStats()
        generate(model, requests, 2, stats, prefix_cache=switch)
        assert stats.prefix_hits == stats.prefix_tokens == 0


class _NoCopy(FakeModel):
    """A stand-in whose cache cannot copy a prefix."""

    def new_cache(self, n_slots, max_len):
        cache = super().new_cache(n_slots, max_len)
        return SimpleNamespace(
            n_slots=n_slots, max_len=max_len, history=cache.history, reset=cache.reset
        )


def test_tiny_model_greedy_outputs_equal_those_without_the_prefix_cache(tiny_model):
    rng = np.random.default_rng(1)
    head = rng.integers(3, tiny_model.vocab_size, 50).tolist()
    prompts = [head + [5], head + [6, 7], head + [5], head[:25]]
    requests = [
        GenerationRequest(p, 8, SamplingParams(temperature=0), seed=0, jump_forward=False)
        for p in prompts
    ]
    stats = GenerationStats()
    with_cache = generate(tiny_model, requests, 2, stats)
    without = generate(tiny_model, requests, 2, prefix_cache=False)
    assert [r.token_ids for r in with_cache] == [r.token_ids for r in without]
    for a, b in zip(with_cache, without, strict=True):
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
    assert stats.prefix_hits >= 3


def test_prompts_of_one_admission_chain_their_prefixes():
    """A, then B sharing A's head, then B again: B copies the head from A after A's pass, the
    second B copies all but its last token from the first B after B's pass."""
    head, a_tail, b_tail = list(range(100, 130)), [1, 2, 3], [4, 5, 6, 7]
    prompts = [head + a_tail, head + b_tail, head + b_tail]
    requests = [GenerationRequest(p, 4, SamplingParams(), seed=i) for i, p in enumerate(prompts)]
    stats = GenerationStats()
    assert generate(FakeModel(), requests, 3, stats) == generate(
        FakeModel(), requests, 3, prefix_cache=False
    )
    assert (stats.prefix_hits, stats.prefix_tokens) == (2, len(head) + len(head + b_tail) - 1)

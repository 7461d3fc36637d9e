"""The engine samples every row of a step in one `sample_batch` call (docs/design.md section 4):
mixed rows (free, constrained, greedy, penalized, with top_logprobs) give what they give alone,
and the KV cache receives the tokens the answer records."""

from __future__ import annotations

import corral.model.generate as generate_module
from corral.kernels import Constraint, SamplingParams, sample_batch
from corral.model.generate import GenerationRequest, generate
from fake_model import PIECES, FakeModel, ScriptedModel, index_of, tokens

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def mixed_requests():
    index = index_of(CITY)
    return [
        GenerationRequest([5, 1], 30, SamplingParams(), seed=1, constraint=Constraint(index)),
        GenerationRequest([5, 2], 20, SamplingParams(temperature=0.0), seed=2),
        GenerationRequest([5, 3], 20, SamplingParams(top_p=0.8, presence_penalty=1.0), seed=3),
        GenerationRequest(
            [5, 4],
            25,
            SamplingParams(top_k=5),
            seed=4,
            constraint=Constraint(index),
            top_logprobs=3,
        ),  # fmt: skip
    ]


def test_one_sample_batch_call_per_step_and_rows_as_alone(monkeypatch):
    calls = []

    def counting(logits, rows, **kwargs):
        calls.append(len(rows))
        return sample_batch(logits, rows, **kwargs)

    alone = [generate(FakeModel(), [r])[0] for r in mixed_requests()]
    monkeypatch.setattr(generate_module, "sample_batch", counting)
    model = FakeModel()
    together = generate(model, mixed_requests(), batch_size=4)
    assert together == alone
    decodes = len(model.decode_batches)
    assert decodes <= len(calls) <= decodes + 1  # the last step may sample and not decode
    assert calls[0] == 4 and max(calls) == 4


def test_the_kv_cache_gets_the_respelled_token_after_a_trigger():
    """`>{"` completes the trigger `<tool_call>` but the grammar wants `[`: the answer records
    `>` instead, and so must the cache (the next logits depend on it)."""
    script = tokens(b"<tool", b"_", b"c", b"a", b"l", b"l", b'>{"')
    model = ScriptedModel(1, script)
    caches = []
    new_cache = model.new_cache

    def keep(n_slots, max_len):
        caches.append(new_cache(n_slots, max_len))
        return caches[-1]

    model.new_cache = keep
    request = GenerationRequest(
        [3], 30, SamplingParams(), 0, (), Constraint(index_of(pattern=r"\[1\]")), "<tool_call>"
    )
    (result,) = generate(model, [request])
    assert result.text == "<tool_call>[1]"
    history = caches[0].history[0]
    assert history[1 : 1 + 7] == list(result.token_ids[:7])
    assert history[7] == PIECES.index(b">")


def test_generation_is_the_same_with_the_parallel_sampler_on_and_off(monkeypatch):
    """A batch past `PARALLEL_MIN_ROWS` (the engine's default `sample_batch` takes the parallel
    kernel there) gives the same answers, tokens, logprobs and top lists with every step's rows
    sampled in parallel as with them all on the calling thread."""
    from corral.kernels.masks import sampling

    requests = [r for _ in range(4) for r in mixed_requests()]
    assert len(requests) >= sampling.PARALLEL_MIN_ROWS
    results = {}
    for parallel in (False, True):
        calls: list[int] = []

        def forced(*args, _parallel=parallel, _calls=calls, **kwargs):
            _calls.append(len(args[1]))
            return sample_batch(*args, **{**kwargs, "parallel": _parallel})

        monkeypatch.setattr(generate_module, "sample_batch", forced)
        results[parallel] = generate(FakeModel(), requests, batch_size=len(requests))
        assert max(calls) == len(requests)
    assert results[True] == results[False]
    assert all(r.completion_tokens > 0 for r in results[True])

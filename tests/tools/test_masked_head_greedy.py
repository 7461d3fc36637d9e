"""Greedy answers of the real SmolLM2 with the masked LM head on and off (`Generator`'s
`masked_head`), on BFCL forced calls and JSONSchemaBench schemas: at batch 1 the chosen logits
are the whole head's bit for bit, so the answers are the same token for token; at a larger
batch every answer still validates (docs/design.md section 4: the mask is applied before the
log-softmax, so the logits it removes are never read)."""

from __future__ import annotations

import dataclasses

import pytest
from corral.kernels import SamplingParams
from corral.model.generate import GenerationStats, generate
from corral.tools.completions import Completions
from test_jump_forward_greedy import bench_bodies, bfcl_bodies, cases, check_valid

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def found(smollm2, sample_data):
    engine = Completions(smollm2)
    found = cases(engine, bfcl_bodies(sample_data)) + cases(engine, bench_bodies(sample_data))
    assert len(found) >= 9
    return found


def test_at_batch_1_greedy_answers_are_the_same_with_the_head_masked(smollm2, found):
    if smollm2.plan.activations != "float32":
        pytest.skip("int8 activations: the whole head rounds otherwise than the chosen rows")
    requests = [choice for _, choice in found]
    masked, whole = GenerationStats(), GenerationStats()
    on = generate(smollm2, requests, batch_size=1, stats=masked)
    off = generate(smollm2, requests, batch_size=1, stats=whole, masked_head=False)
    assert masked.masked_rows > 0 and whole.masked_rows == 0
    for (request, _), a, b in zip(found, on, off, strict=True):
        check_valid(request, a)
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


def test_in_a_batch_every_answer_with_the_head_masked_validates(smollm2, found):
    stats = GenerationStats()
    results = generate(smollm2, [choice for _, choice in found], len(found), stats)
    assert stats.masked_rows > 0
    for (request, _), result in zip(found, results, strict=True):
        check_valid(request, result)


def test_logprob_settings_read_the_same_logits_with_the_head_masked(smollm2, found):
    """top_logprobs, a logit_bias and penalties read a masked row at allowed ids only, so at
    batch 1 (greedy) the tokens, logprobs and top lists are the same with the head masked or
    whole, and the masked head serves those rows too."""
    if smollm2.plan.activations != "float32":
        pytest.skip("int8 activations: the whole head rounds otherwise than the chosen rows")
    params = SamplingParams(temperature=0.0, presence_penalty=0.5, repetition_penalty=1.2)
    requests = [
        dataclasses.replace(choice, top_logprobs=3, logit_bias={15: 2.0}, params=params)
        for _, choice in found[:4]
    ]
    masked, whole = GenerationStats(), GenerationStats()
    on = generate(smollm2, requests, batch_size=1, stats=masked)
    off = generate(smollm2, requests, batch_size=1, stats=whole, masked_head=False)
    assert masked.masked_rows > 0 and whole.masked_rows == 0
    for a, b in zip(on, off, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
        assert a.top_logprobs == b.top_logprobs

"""Constraint diagnostics on the real SmolLM2 (`allowed_mass`): the rows of a request asking for
them are never the masked LM head's, and each token's allowed mass and unmasked logprob equal a
float64 NumPy computation from the model's own whole logits (a prefill of the answer) and the
mask the request's constraint gives at that token, sampled or written by jump-forward."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from corral.model.generate import GenerationStats, generate
from corral.tools.completions import Completions
from corral.tools.request import parse_tool_request

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "none"]},
    },
    "required": ["name", "age", "pet"],
}


def test_real_model_diagnostics_equal_numpy_and_skip_the_masked_head(smollm2):
    body = {
        "messages": [{"role": "user", "content": "Describe a person as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}},
        "max_tokens": 40,
        "temperature": 0,
    }
    request = Completions(smollm2).requests(parse_tool_request(body))[0]
    asked = dataclasses.replace(request, allowed_mass=True)
    plain_stats, asked_stats = GenerationStats(), GenerationStats()
    (plain,) = generate(smollm2, [request], batch_size=1, stats=plain_stats)
    (result,) = generate(smollm2, [asked], batch_size=1, stats=asked_stats)
    assert plain_stats.masked_rows > 0 and asked_stats.masked_rows == 0
    assert result.token_ids == plain.token_ids  # greedy: asking changes no answer
    assert plain.allowed_mass is None and len(result.allowed_mass) == len(result.token_ids)
    # the whole logits before each token, from one prefill of the prompt and the answer
    tokens = list(result.token_ids)
    sequence = np.asarray(list(request.prompt_ids) + tokens[:-1], np.int64)
    cache = smollm2.new_cache(1, len(sequence) + 1)
    logits = smollm2.prefill_batch(cache, [0], [sequence], last=[len(tokens)])
    constraint = request.constraint.copy()
    for j, token in enumerate(tokens):
        x = logits[j].astype(np.float64)
        log_all = x.max() + np.log(np.exp(x - x.max()).sum())
        words = constraint.mask(request.max_tokens - j)
        allowed = np.unpackbits(words.view(np.uint8), bitorder="little")[: len(x)].astype(bool)
        mass = np.exp(x - log_all)[allowed].sum()
        np.testing.assert_allclose(result.allowed_mass[j], mass, rtol=2e-3)
        np.testing.assert_allclose(result.unmasked_logprobs[j], x[token] - log_all, atol=2e-3)
        constraint.advance(token)
    assert min(result.allowed_mass) < 0.999  # the grammar pushed somewhere

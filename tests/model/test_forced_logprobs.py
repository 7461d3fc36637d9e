"""Asking for logprobs changes no answer (issue 33, item 8): jump-forward stays on, and the
tokens it forces take their logprobs from the forward pass that writes them (`Model.prefill_batch`
with `last`: the logits at each forced position), over the whole vocabulary as every forced
token's. `completion_tokens` counts the tokens the answer lists, as `logprobs.content` does.

On the tiny random checkpoint (`tiny_model`: a real forward pass and byte-level BPE tokenizer)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import schema_to_dfa
from corral.kernels import Constraint, SamplingParams, TokenIndex
from corral.model.generate import GenerationRequest, GenerationStats, generate
from corral.model.jump_forward import ForcedTokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "country": {"enum": ["JP", "US", "IN"]},
            "hello": {"const": "hello, well"},
        },
        "required": ["city", "country", "hello"],
    },
    {
        "type": "object",
        "properties": {"days": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["days", "ok"],
    },
    {"type": "array", "items": {"enum": ["hello", "hell", "help"]}, "minItems": 2, "maxItems": 4},
    {"enum": ["hello, well", "hello, hello", "well"]},
]


@pytest.fixture(scope="module")
def indexes(tiny_model):
    return [TokenIndex(schema_to_dfa(s), tiny_model.vocabulary) for s in SCHEMAS]


def run(model, requests, batch_size):
    stats = GenerationStats()
    return generate(model, requests, batch_size, stats), stats


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


def forced_positions(tiny_model, index, result, max_tokens: int) -> set[int]:
    """The positions of `result.token_ids` jump-forward wrote, replayed: a jump at the start and
    after every sampled token (`ForcedTokenizer.jump`, as `LiveSequence.jump_forward` takes it)."""
    jump = ForcedTokenizer(tiny_model.tokenizer, tiny_model.vocabulary)
    ids, forced = list(result.token_ids), set()
    constraint, at = Constraint(index), 0
    while True:
        written, constraint = jump.jump(constraint, max_tokens - at, True)
        assert ids[at : at + len(written)] == written
        forced.update(range(at, at + len(written)))
        at += len(written)
        if at == len(ids):
            return forced
        constraint.advance(ids[at])
        at += 1


@settings(max_examples=20, deadline=None)
@given(
    seeds=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=3),
    schemas=st.lists(st.integers(0, len(SCHEMAS) - 1), min_size=1, max_size=3),
    top=st.sampled_from([0, 3, 20]),
    temperature=st.sampled_from([0.0, 1.0]),
    max_tokens=st.sampled_from([None, 90]),
    batch_size=st.integers(1, 3),
)
def test_asking_for_logprobs_changes_no_answer(
    tiny_model, indexes, seeds, schemas, top, temperature, max_tokens, batch_size
):
    """Greedy or seeded, alone or in a batch: the same tokens, text, finish and forced tokens
    with top_logprobs as without; every logprob is the model's, from the pass that wrote the
    token (whole-vocabulary log-softmax for a forced token, over the mask for a sampled one).
    The prompts are longer than the prefix cache's `MIN_SHARED`: a repeated (seed, schema)
    reuses a prompt and the text forced at its start, never the positions whose logits the
    forced tokens' logprobs need."""
    params = SamplingParams(temperature=temperature)
    jobs = [(seed, k) for seed in seeds for k in schemas]

    def requests(**extra):
        return [
            GenerationRequest(
                tiny_model.tokenizer.encode(f"Answer in JSON, number {seed % 97}:"),
                max_tokens,
                params,
                seed,
                (),
                Constraint(indexes[k]),
                **extra,
            )
            for seed, k in jobs
        ]

    plain, plain_stats = run(tiny_model, requests(), batch_size)
    asked, asked_stats = run(tiny_model, requests(top_logprobs=top), batch_size)
    assert [(r.token_ids, r.text, r.finish_reason) for r in asked] == [
        (r.token_ids, r.text, r.finish_reason) for r in plain
    ]
    assert asked_stats.forced_tokens == plain_stats.forced_tokens > 0
    for request, (_, k), result in zip(requests(), jobs, asked, strict=True):
        assert result.completion_tokens == len(result.token_ids) == len(result.logprobs)
        assert len(result.top_logprobs) == len(result.token_ids)
        limit = request.max_tokens or tiny_model.context_length - len(request.prompt_ids)
        forced = forced_positions(tiny_model, indexes[k], result, limit)
        history = list(request.prompt_ids) + list(result.token_ids)
        logits = tiny_model.logits(history)[len(request.prompt_ids) - 1 : -1]
        replay = Constraint(indexes[k])
        for j, (token, logprob) in enumerate(zip(result.token_ids, result.logprobs, strict=True)):
            row = log_softmax(logits[j])
            top_j = result.top_logprobs[j]
            if j in forced:  # over the whole vocabulary, as every forced token
                assert len(top_j) == min(top, len(row))
                assert logprob == pytest.approx(row[token], abs=2e-3)
                if top:
                    best = np.argsort(-row, kind="stable")[:top]
                    assert [lp for _, lp in top_j] == pytest.approx(row[best], abs=2e-3)
            else:  # over the tokens the mask allowed
                mask = replay.mask(limit - j)
                allowed = np.unpackbits(
                    mask.view(np.uint8), bitorder="little", count=len(row)
                ).astype(bool)
                assert len(top_j) == min(top, allowed.sum())
                assert logprob == pytest.approx(log_softmax(logits[j][allowed])[
                    np.flatnonzero(allowed).tolist().index(token)
                ], abs=2e-3)  # fmt: skip
            if top:
                assert dict(top_j).get(token, logprob) == logprob
            replay.advance(token)


@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    picks=st.data(),
    chunk=st.sampled_from([3, 7, 1024]),
)
def test_prefill_gives_the_logits_at_each_of_the_last_positions(tiny_model, lengths, picks, chunk):
    """`prefill_batch(..., last=k)`: each sequence's rows are the logits after each of its last
    k tokens (as `Model.logits` gives them, within rounding), whatever the chunks the pass is
    cut into; the last row is the one without `last`, bit for bit."""
    rng = np.random.default_rng(sum(lengths))
    sequences = [rng.integers(0, tiny_model.vocab_size, n) for n in lengths]
    last = [picks.draw(st.integers(1, n)) for n in lengths]
    tiny_model.prefill_chunk, saved = chunk, tiny_model.prefill_chunk
    try:
        cache = tiny_model.new_cache(len(lengths), 64)
        plain = tiny_model.prefill_batch(cache, list(range(len(lengths))), sequences)
        cache = tiny_model.new_cache(len(lengths), 64)
        rows = tiny_model.prefill_batch(cache, list(range(len(lengths))), sequences, last=last)
    finally:
        tiny_model.prefill_chunk = saved
    assert rows.shape == (sum(last), plain.shape[1])
    at = 0
    for i, (ids, k) in enumerate(zip(sequences, last, strict=True)):
        whole = tiny_model.logits(ids)
        np.testing.assert_allclose(rows[at : at + k], whole[-k:], atol=2e-3)
        np.testing.assert_array_equal(rows[at + k - 1], plain[i])
        at += k
    with pytest.raises(ValueError, match="last"):
        tiny_model.prefill_batch(tiny_model.new_cache(1, 64), [0], [sequences[0]], last=[0])

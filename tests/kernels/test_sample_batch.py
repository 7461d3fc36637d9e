"""The batched sampler (DESIGN.md section 4): one `sample_batch` call over B rows, each with its
own mask, parameters, penalties and uniform draw, equals B one-row `sample` / `top_logprobs`
calls, bit for bit (same tokens, same logprobs, same top lists)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels import NoTokenAllowedError, SamplingParams, sample, top_logprobs
from corral.kernels.sampling import full_mask, sample_batch
from hypothesis import given, settings
from hypothesis import strategies as st


def pack(allowed: np.ndarray) -> np.ndarray:
    v = allowed.shape[-1]
    padded = np.zeros(allowed.shape[:-1] + ((v + 31) // 32 * 32,), dtype=bool)
    padded[..., :v] = allowed
    return np.packbits(padded, axis=-1, bitorder="little").view("<u4")


params_strategy = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.7]),
    top_k=st.sampled_from([0, 1, 3, 50]),
    top_p=st.sampled_from([1.0, 0.9, 0.3]),
    min_p=st.sampled_from([0.0, 0.05]),
    presence_penalty=st.sampled_from([0.0, 0.8]),
    frequency_penalty=st.sampled_from([0.0, 0.4]),
    repetition_penalty=st.sampled_from([1.0, 1.3]),
)


@settings(max_examples=60, deadline=None)
@given(
    v=st.integers(1, 2000),
    params=st.lists(params_strategy, min_size=1, max_size=6),
    density=st.sampled_from([0.002, 0.1, 0.6, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_batch_equals_one_row_sampler(v, params, density, seed):
    rng = np.random.default_rng(seed)
    b_rows = len(params)
    logits = (rng.standard_normal((b_rows + 2, v)) * 3).astype(np.float32)
    rows = rng.integers(0, b_rows + 2, b_rows)  # rows of a larger block, possibly repeated
    allowed = rng.random((b_rows, v)) < density
    allowed[np.arange(b_rows), rng.integers(0, v, b_rows)] = True
    masks = pack(allowed)
    free = rng.random(b_rows) < 0.3  # some rows unconstrained
    masks[free] = full_mask(v)
    prompts = [rng.integers(0, v, rng.integers(0, 5)).tolist() for _ in range(b_rows)]
    outputs = [rng.integers(0, v, rng.integers(0, 8)).tolist() for _ in range(b_rows)]
    n_top = rng.integers(0, 21, b_rows).tolist()
    seeds = rng.integers(0, 2**31, b_rows)
    generators = [np.random.default_rng(s) for s in seeds]
    uniforms = np.array(
        [0.0 if p.greedy else g.random() for p, g in zip(params, generators, strict=True)]
    )
    out = sample_batch(logits, masks, params, uniforms, prompts, outputs, n_top, rows)
    for b in range(b_rows):
        mask = None if free[b] else masks[b]
        row = logits[rows[b]]
        token, logprob = sample(
            row, params[b], np.random.default_rng(seeds[b]), mask, prompts[b], outputs[b]
        )
        assert (int(out.tokens[b]), float(out.logprobs[b])) == (token, logprob)
        ids, logprobs = top_logprobs(row, mask, n_top[b])
        assert out.top(b) == tuple(zip(ids.tolist(), logprobs.tolist(), strict=True))
        allowed_b = np.ones(v, bool) if free[b] else allowed[b]
        assert allowed_b[token]
        assert len(ids) == min(n_top[b], allowed_b.sum())


def test_rows_are_independent_of_their_neighbours():
    """A row's token depends on its own inputs only: moving it within the batch, or changing
    the other rows, changes nothing."""
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((3, 500)).astype(np.float32)
    masks = np.stack([full_mask(500)] * 3)
    params = [SamplingParams(temperature=1.0, top_p=0.9)] * 3
    uniforms = np.array([0.1, 0.5, 0.9])
    first = sample_batch(logits, masks, params, uniforms)
    swapped = sample_batch(logits[::-1], masks, params, uniforms[::-1])
    assert first.tokens.tolist() == swapped.tokens[::-1].tolist()
    assert first.logprobs.tolist() == swapped.logprobs[::-1].tolist()


def test_a_row_that_allows_nothing_is_named():
    logits = np.zeros((2, 40), np.float32)
    masks = np.stack([full_mask(40), np.zeros(2, np.uint32)])
    with pytest.raises(NoTokenAllowedError, match="row 1"):
        sample_batch(logits, masks, [SamplingParams()] * 2, np.zeros(2))
    with pytest.raises(ValueError):
        sample_batch(logits, masks[:, :1], [SamplingParams()] * 2, np.zeros(2))
    with pytest.raises(ValueError):
        sample_batch(logits, masks, [SamplingParams()], np.zeros(2))


def test_full_mask_allows_exactly_the_vocabulary():
    for v in (1, 31, 32, 33, 49152):
        bits = np.unpackbits(full_mask(v).view(np.uint8), bitorder="little")
        assert bits[:v].all() and not bits[v:].any() and len(full_mask(v)) == (v + 31) // 32


def test_exp_into_agrees_with_numpy_over_the_sampler_range():
    from corral.kernels.sample_rows import exp_into

    x = np.concatenate([np.linspace(-120, 0, 200_001), [0.0, -1e-30, -87.0, -86.9]])
    x = x.astype(np.float32)
    out = np.empty_like(x)
    exp_into(x, len(x), out, np.empty(len(x), np.int32))
    expected = np.exp(np.maximum(x, -87).astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=5e-7, atol=0)
    assert out[-4] == 1.0

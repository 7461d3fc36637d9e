"""Constraint diagnostics of the sampler (`SampleRow.diagnose`, `BatchSample.allowed_mass` and
`unmasked_logprobs`): the probability mass a row's mask allowed, and the chosen token's logprob
without the mask, against an independent float64 NumPy computation from the same logits and
mask, whatever the sampling settings (the diagnostics are read, as the logprob is, from the raw
logits at temperature 1), alone or in a batch, on one thread or several."""

from __future__ import annotations

import numpy as np
from corral.kernels import GREEDY, SampleRow, SamplingParams, sample_batch
from hypothesis import given, settings
from hypothesis import strategies as st


def pack(allowed: np.ndarray) -> np.ndarray:
    """bool `[V]` -> packed uint32 `[ceil(V / 32)]`, bit t % 32 of word t // 32."""
    v = allowed.shape[-1]
    padded = np.zeros((v + 31) // 32 * 32, dtype=bool)
    padded[:v] = allowed
    return np.packbits(padded, bitorder="little").view("<u4")


def reference(row: np.ndarray, allowed: np.ndarray | None, token: int) -> tuple[float, float]:
    """(allowed mass, unmasked logprob of `token`) in float64 NumPy: the softmax of the raw
    logits over the whole vocabulary, summed over the allowed tokens."""
    x = row.astype(np.float64)
    log_all = x.max() + np.log(np.exp(x - x.max()).sum())
    p = np.exp(x - log_all)
    mass = 1.0 if allowed is None else float(p[allowed].sum())
    return mass, float(x[token] - log_all)


params_strategy = st.builds(
    SamplingParams,
    temperature=st.sampled_from([0.0, 0.3, 1.0, 1.9]),
    top_k=st.sampled_from([0, 1, 20]),
    top_p=st.sampled_from([1.0, 0.8]),
    min_p=st.sampled_from([0.0, 0.1]),
    presence_penalty=st.sampled_from([0.0, 1.0]),
    repetition_penalty=st.sampled_from([1.0, 1.4]),
)


@settings(max_examples=80, deadline=None)
@given(
    v=st.integers(1, 1500),
    params=st.lists(params_strategy, min_size=1, max_size=5),
    density=st.sampled_from([0.001, 0.05, 0.3, 0.9, 1.0]),
    scale=st.sampled_from([0.5, 3.0, 12.0]),
    seed=st.integers(0, 2**31),
)
def test_allowed_mass_equals_numpy(v, params, density, scale, seed):
    """Random logits, masks (sparse ones are gathered, dense ones read in place, some rows
    free) and settings: each asking row's allowed mass and unmasked logprob equal the NumPy
    reference's; its token, logprob and top list are those of the same row not asking; a row
    not asking reads NaN."""
    rng = np.random.default_rng(seed)
    b_rows = len(params)
    logits = (rng.standard_normal((b_rows, v)) * scale).astype(np.float32)
    allowed = rng.random((b_rows, v)) < density
    allowed[np.arange(b_rows), rng.integers(0, v, b_rows)] = True
    free = rng.random(b_rows) < 0.2
    ask = rng.random(b_rows) < 0.8
    ask[0] = True
    masks = [None if free[b] else pack(allowed[b]) for b in range(b_rows)]
    uniforms = rng.random(b_rows)
    outputs = [rng.integers(0, v, 4) for _ in range(b_rows)]

    def rows(diagnose):
        return [
            SampleRow(b, masks[b], params[b], float(uniforms[b]), (), outputs[b], 3, d)
            for b, d in enumerate(diagnose)
        ]

    out = sample_batch(logits, rows(ask))
    plain = sample_batch(logits, rows([False] * b_rows))
    assert plain.allowed_mass is None and plain.unmasked_logprobs is None
    np.testing.assert_array_equal(out.tokens, plain.tokens)
    np.testing.assert_array_equal(out.logprobs, plain.logprobs)
    assert [out.top(b) for b in range(b_rows)] == [plain.top(b) for b in range(b_rows)]
    for b in range(b_rows):
        if not ask[b]:
            assert np.isnan(out.allowed_mass[b]) and np.isnan(out.unmasked_logprobs[b])
            continue
        mass, unmasked = reference(logits[b], None if free[b] else allowed[b], out.tokens[b])
        assert 0.0 <= out.allowed_mass[b] <= 1.0
        np.testing.assert_allclose(out.allowed_mass[b], mass, rtol=2e-5, atol=1e-300)
        np.testing.assert_allclose(out.unmasked_logprobs[b], unmasked, rtol=0, atol=2e-5)
        # the identity the two fields share with the logprob: log mass = unmasked - logprob
        if mass > 1e-300:
            np.testing.assert_allclose(
                np.log(out.allowed_mass[b]), out.unmasked_logprobs[b] - out.logprobs[b], atol=5e-5
            )


@settings(max_examples=30, deadline=None)
@given(
    v=st.integers(33, 3000),
    density=st.sampled_from([0.01, 0.5]),
    seed=st.integers(0, 2**31),
)
def test_diagnostics_do_not_depend_on_settings_batch_or_threads(v, density, seed):
    """One row's diagnostics are the same bits greedy or sampled at any temperature, alone or
    among other rows, on one thread or spread over Numba's threads."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((20, v)) * 4).astype(np.float32)
    allowed = rng.random(v) < density
    allowed[rng.integers(0, v)] = True
    mask = pack(allowed)
    settings_ = [GREEDY, SamplingParams(temperature=0.2), SamplingParams(temperature=1.8)]
    alone = [sample_batch(logits, [SampleRow(0, mask, p, 0.5, diagnose=True)]) for p in settings_]
    token = alone[0].tokens[0]
    for out in alone:  # a draw may pick another token: the mass is the mask's, whatever it is
        assert out.allowed_mass[0] == alone[0].allowed_mass[0]
    rows = [SampleRow(b, mask if b % 3 else None, GREEDY, 0.0, diagnose=True) for b in range(20)]
    rows[0] = SampleRow(0, mask, GREEDY, 0.0, diagnose=True)
    serial = sample_batch(logits, rows, parallel=False)
    spread = sample_batch(logits, rows, parallel=True)
    assert serial.tokens[0] == token
    assert serial.allowed_mass[0] == alone[0].allowed_mass[0]
    assert serial.unmasked_logprobs[0] == alone[0].unmasked_logprobs[0]
    np.testing.assert_array_equal(serial.allowed_mass, spread.allowed_mass)
    np.testing.assert_array_equal(serial.unmasked_logprobs, spread.unmasked_logprobs)


def test_a_free_row_has_the_whole_mass_and_its_logprob_unmasked():
    logits = np.array([[0.5, -1.0, 2.0, 0.0]], np.float32)
    out = sample_batch(logits, [SampleRow(0, None, GREEDY, 0.0, diagnose=True)])
    assert out.allowed_mass[0] == 1.0
    assert out.unmasked_logprobs[0] == out.logprobs[0]


def test_logits_that_are_not_finite():
    """Allowed logits all -inf among finite ones: mass 0 and an unmasked logprob of -inf; a row
    all -inf is uniform, as the sampler makes it: the mass is the allowed share."""
    row = np.array([[1.0, -np.inf, -np.inf, 0.0]], np.float32)
    mask = pack(np.array([False, True, True, False]))
    out = sample_batch(row, [SampleRow(0, mask, GREEDY, 0.0, diagnose=True)])
    assert out.allowed_mass[0] == 0.0 and out.unmasked_logprobs[0] == -np.inf
    row = np.full((1, 4), -np.inf, np.float32)
    out = sample_batch(row, [SampleRow(0, mask, GREEDY, 0.0, diagnose=True)])
    assert out.allowed_mass[0] == 0.5
    np.testing.assert_allclose(out.unmasked_logprobs[0], -np.log(4))

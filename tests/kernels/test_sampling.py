"""The sampler's contract (docs/design.md section 4): masking before log-softmax,
the reported logprob, greedy, temperature, top-k, top-p, min-p, penalties, batches."""

from __future__ import annotations

import math

import numpy as np
import pytest
from corral.automata import regex_to_dfa
from corral.kernels import (
    GREEDY,
    Constraint,
    NoTokenAllowedError,
    SamplingParams,
    TokenIndex,
    Vocabulary,
    apply_mask,
    constrained_sample,
    constrained_sample_batch,
    sample,
    top_logprobs,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def pack(allowed: np.ndarray) -> np.ndarray:
    """bool `[..., V]` -> packed uint32 `[..., ceil(V / 32)]`, bit t % 32 of word t // 32."""
    v = allowed.shape[-1]
    padded = np.zeros(allowed.shape[:-1] + ((v + 31) // 32 * 32,), dtype=bool)
    padded[..., :v] = allowed
    return np.packbits(padded, axis=-1, bitorder="little").view("<u4")


def log_softmax_over(logits: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    x = np.where(allowed, logits.astype(np.float64), -np.inf)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


@pytest.fixture
def ab_constraint():
    vocabulary = Vocabulary.from_list([b"a", b"b", b"c", None], eos_ids=[3])
    return Constraint(TokenIndex(regex_to_dfa("ab?"), vocabulary))


def test_constrained_sample_hand_example(ab_constraint):
    """docs/design.md section 4: `ab?`, vocabulary [a, b, c, EOS], logits [0, 1, 5, 2]."""
    logits = np.array([0, 1, 5, 2], dtype=np.float32)
    rng = np.random.default_rng(0)
    token, logprob = constrained_sample(logits, ab_constraint, GREEDY, rng)
    assert (token, logprob) == (0, 0.0)
    ab_constraint.advance(token)
    np.testing.assert_array_equal(
        apply_mask(logits, ab_constraint.mask()), [-np.inf, 1, -np.inf, 2]
    )
    token, logprob = constrained_sample(logits, ab_constraint, GREEDY, rng)
    assert token == 3
    assert logprob == pytest.approx(2 - math.log(math.e**1 + math.e**2), abs=1e-6)
    ab_constraint.advance(token)
    assert ab_constraint.done


def test_all_false_mask_raises():
    logits = np.zeros(40, dtype=np.float32)
    empty = np.zeros(2, dtype=np.uint32)
    with pytest.raises(NoTokenAllowedError):
        apply_mask(logits, empty)
    with pytest.raises(NoTokenAllowedError):
        sample(logits, GREEDY, np.random.default_rng(0), empty)
    masks = np.stack([pack(np.arange(40) == 3), empty])
    with pytest.raises(NoTokenAllowedError):
        apply_mask(np.zeros((2, 40), dtype=np.float32), masks)


def test_all_false_constraint_raises():
    # The grammar needs "x", which no token spells.
    vocabulary = Vocabulary.from_list([b"a", None], eos_ids=[1])
    constraint = Constraint(TokenIndex(regex_to_dfa("x"), vocabulary))
    with pytest.raises(NoTokenAllowedError):
        constrained_sample(np.zeros(2, np.float32), constraint, GREEDY, np.random.default_rng(0))


def test_apply_mask_shapes():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((3, 70)).astype(np.float32)
    allowed = rng.random((3, 70)) < 0.5
    masked = apply_mask(logits, pack(allowed))
    assert masked.dtype == np.float32 and masked.shape == (3, 70)
    np.testing.assert_array_equal(masked, np.where(allowed, logits, -np.inf))
    shared = apply_mask(logits, pack(allowed[0]))
    np.testing.assert_array_equal(shared, np.where(allowed[0], logits, -np.inf))
    with pytest.raises(ValueError):
        apply_mask(logits, np.ones(2, dtype=np.uint32))


@settings(max_examples=60, deadline=None)
@given(
    v=st.integers(1, 1500),
    density=st.sampled_from([0.001, 0.1, 0.5, 0.97, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_greedy_and_logprob_match_numpy_reference(v, density, seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(v) * 4).astype(np.float32)
    allowed = rng.random(v) < density
    allowed[rng.integers(v)] = True
    reference = log_softmax_over(logits, allowed)
    token, logprob = sample(logits, GREEDY, rng, pack(allowed))
    assert token == int(np.argmax(np.where(allowed, logits, -np.inf)))
    assert logprob == pytest.approx(reference[token], abs=1e-4)
    token, logprob = sample(logits, SamplingParams(temperature=0.7, top_p=0.8), rng, pack(allowed))
    assert allowed[token]
    assert logprob == pytest.approx(reference[token], abs=1e-4)


def test_greedy_ties_take_the_lowest_id():
    logits = np.array([1, 3, 3, 3], dtype=np.float32)
    assert sample(logits, GREEDY, None, pack(np.array([1, 0, 1, 1], bool)))[0] == 2


def frequencies(logits, allowed, params, n=20000, seed=0):
    rng = np.random.default_rng(seed)
    mask = pack(allowed)
    counts = np.zeros(len(logits))
    for _ in range(n):
        counts[sample(logits, params, rng, mask)[0]] += 1
    return counts / n


@pytest.mark.parametrize("v", [6, 1200])
def test_temperature_sampling_follows_softmax_of_allowed(v):
    rng = np.random.default_rng(3)
    logits = np.zeros(v, dtype=np.float32)
    logits[:6] = [0, 1, 2, 3, 0.5, 9]
    allowed = np.zeros(v, bool)
    allowed[[0, 1, 2, 3, 4]] = True
    if v > 6:
        allowed[v - 1] = True  # a last block of its own
        logits[v - 1] = 2.5
    for temperature in (1.0, 2.0):
        expected = np.exp(log_softmax_over(logits / temperature, allowed))
        got = frequencies(logits, allowed, SamplingParams(temperature=temperature))
        np.testing.assert_allclose(got, expected, atol=0.015)
    del rng


def test_top_k_top_p_min_p_truncate():
    logits = np.log(np.array([0.05, 0.1, 0.15, 0.3, 0.4], dtype=np.float32))
    allowed = np.ones(5, bool)
    got = frequencies(logits, allowed, SamplingParams(top_k=2), n=5000)
    np.testing.assert_allclose(got, [0, 0, 0, 3 / 7, 4 / 7], atol=0.03)
    got = frequencies(logits, allowed, SamplingParams(top_p=0.75), n=5000)
    np.testing.assert_allclose(got, [0, 0, 0.15 / 0.85, 0.3 / 0.85, 0.4 / 0.85], atol=0.03)
    got = frequencies(logits, allowed, SamplingParams(top_p=0.69), n=5000)
    np.testing.assert_allclose(got, [0, 0, 0, 3 / 7, 4 / 7], atol=0.03)
    got = frequencies(logits, allowed, SamplingParams(min_p=0.5), n=5000)
    np.testing.assert_allclose(got, [0, 0, 0, 3 / 7, 4 / 7], atol=0.03)


def test_reported_logprob_ignores_temperature_truncation_and_penalties():
    logits = np.array([0, 1, 2, 3], dtype=np.float32)
    allowed = np.array([1, 1, 1, 0], bool)
    reference = log_softmax_over(logits, allowed)
    params = SamplingParams(temperature=0.3, top_k=1, presence_penalty=1.5)
    token, logprob = sample(logits, params, np.random.default_rng(0), pack(allowed), (), [2, 2])
    assert token == 2 or token == 1
    assert logprob == pytest.approx(reference[token], abs=1e-6)


def test_penalties():
    logits = np.array([0, 2.0, 2.5], dtype=np.float32)
    allowed = np.ones(3, bool)
    rng = np.random.default_rng(0)
    greedy = SamplingParams(temperature=0)
    assert sample(logits, greedy, rng, pack(allowed), (), [2])[0] == 2  # no penalty
    presence = SamplingParams(temperature=0, presence_penalty=1.0)
    assert sample(logits, presence, rng, pack(allowed), (), [2])[0] == 1
    frequency = SamplingParams(temperature=0, frequency_penalty=0.3)
    assert sample(logits, frequency, rng, pack(allowed), (), [2])[0] == 2
    assert sample(logits, frequency, rng, pack(allowed), (), [2, 2])[0] == 1
    repetition = SamplingParams(temperature=0, repetition_penalty=1.5)
    assert sample(logits, repetition, rng, pack(allowed), [2], [])[0] == 1  # 2.5 / 1.5 < 2
    assert sample(logits, repetition, rng, None, [2], [])[0] == 1  # unconstrained too
    # A penalized token that the mask forbids changes nothing.
    only = np.array([0, 0, 1], bool)
    assert sample(logits, presence, rng, pack(only), (), [1, 0])[0] == 2


def test_seeded_runs_repeat():
    logits = np.random.default_rng(0).standard_normal(3000).astype(np.float32)
    params = SamplingParams(temperature=1.2, top_p=0.9, top_k=500)
    runs = [
        [sample(logits, params, rng)[0] for _ in range(20)]
        for rng in (np.random.default_rng(7), np.random.default_rng(7))
    ]
    assert runs[0] == runs[1]


def test_invalid_params_raise():
    for bad in (
        {"temperature": -1},
        {"top_k": -1},
        {"top_p": 0},
        {"top_p": 1.5},
        {"min_p": 2},
        {"repetition_penalty": 0},
    ):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_batch_matches_single_rows(ab_constraint):
    logits = np.array([[0, 1, 5, 2], [3, 0, 0, 1], [0, 9, 1, 1]], dtype=np.float32)
    after_a = ab_constraint.copy()
    after_a.advance(0)
    constraints = [ab_constraint, after_a, None]
    tokens, logprobs = constrained_sample_batch(
        logits, constraints, GREEDY, np.random.default_rng(0)
    )
    assert tokens.tolist() == [0, 3, 1]
    assert logprobs.dtype == np.float32
    for b, constraint in enumerate(constraints):
        mask = None if constraint is None else constraint.mask()
        token, logprob = sample(logits[b], GREEDY, None, mask)
        assert (tokens[b], logprobs[b]) == (token, pytest.approx(logprob, abs=1e-6))
    rngs = [np.random.default_rng(s) for s in range(3)]
    params = [SamplingParams(), SamplingParams(temperature=0.5), GREEDY]
    tokens, _ = constrained_sample_batch(
        logits, constraints, params, rngs, [[], [], []], [[], [], []]
    )
    assert tokens[0] == 0 and tokens[1] in (1, 3) and tokens[2] == 1


def test_top_logprobs_are_the_best_allowed_with_sample_logprobs():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal(300).astype(np.float32)
    logits[7] = logits[9] = 5.0  # a tie: lower id first
    allowed = rng.random(300) < 0.4
    allowed[[7, 9]] = True
    reference = log_softmax_over(logits, allowed)
    tokens, logprobs = top_logprobs(logits, pack(allowed), 5)
    expected = sorted(np.flatnonzero(allowed), key=lambda t: (-logits[t], t))[:5]
    assert tokens.tolist() == expected and tokens[:2].tolist() == [7, 9]
    np.testing.assert_allclose(logprobs, reference[expected], atol=1e-5)
    token, logprob = sample(logits, GREEDY, None, pack(allowed))
    assert (token, logprob) == (tokens[0], pytest.approx(logprobs[0], abs=1e-6))
    few = np.zeros(300, bool)
    few[[3, 4]] = True
    assert sorted(top_logprobs(logits, pack(few), 10)[0].tolist()) == [3, 4]
    assert len(top_logprobs(logits, None, 3)[0]) == 3
    with pytest.raises(NoTokenAllowedError):
        top_logprobs(logits, pack(np.zeros(300, bool)), 3)


@settings(max_examples=60, deadline=None)
@given(
    v=st.integers(1, 1500),
    density=st.sampled_from([0.001, 0.05, 0.5, 1.0]),
    n=st.integers(0, 20),
    seed=st.integers(0, 2**31),
)
def test_top_logprobs_agree_with_sample_and_sum_to_one_within_the_mask(v, density, n, seed):
    """The chosen token's logprob is bit for bit its entry in the top list (when in the top n),
    and with n at least the number allowed the list is every allowed token, of total
    probability 1."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(v) * 4).astype(np.float32)
    allowed = rng.random(v) < density
    allowed[rng.integers(v)] = True
    for mask in (pack(allowed), None):
        token, logprob = sample(logits, SamplingParams(temperature=1.3), rng, mask)
        tokens, logprobs = top_logprobs(logits, mask, n)
        assert logprobs.dtype == np.float64 and len(tokens) == min(
            n, allowed.sum() if mask is not None else v
        )
        entries = dict(zip(tokens.tolist(), logprobs.tolist(), strict=True))
        if token in entries:
            assert entries[token] == logprob
    if allowed.sum() <= 20:
        tokens, logprobs = top_logprobs(logits, pack(allowed), 20)
        assert sorted(tokens.tolist()) == np.flatnonzero(allowed).tolist()
        assert float(np.exp(logprobs).sum()) == pytest.approx(1.0, abs=1e-5)


FIELDS = ("temperature", "top_k", "top_p", "min_p", "presence_penalty", "frequency_penalty",
          "repetition_penalty")  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(FIELDS),
    st.one_of(
        st.text(max_size=3), st.none(), st.booleans(), st.lists(st.integers(), max_size=2),
        st.sampled_from([math.nan, math.inf, -math.inf, 1.5]),
    ),
)  # fmt: skip
def test_a_sampling_parameter_of_the_wrong_type_or_not_finite_is_refused_by_name(name, value):
    """Every field, any value of the wrong type (a string, None, a bool, a list; a fraction for
    top_k) or not finite: a TypeError or ValueError whose message starts with the field's name,
    never an error from a comparison inside."""
    if name != "top_k" and value == 1.5:
        value = "1.5"  # a fraction is a valid number for the other fields
    with pytest.raises((TypeError, ValueError)) as caught:
        SamplingParams(**{name: value})
    assert str(caught.value).startswith(f"{name} must be"), caught.value

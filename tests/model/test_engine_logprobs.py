"""logprobs, top_logprobs and logit_bias in the generation engine (docs/design.md section 4): the
logprob of a token is the one the sampler used (over the allowed tokens for a constrained step),
the top alternatives are over the same distribution, and a bias is added before the mask."""

from __future__ import annotations

import re

import numpy as np
import pytest
from corral.kernels import Constraint, SamplingParams
from corral.model.generate import GenerationRequest, generate
from fake_model import EOS, PIECES, TOKENS, FakeModel, ScriptedModel, index_of, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

GREEDY = SamplingParams(temperature=0)
SMALL = "[a-e]{2,6}"  # at most 6 tokens allowed at a step: a-e and EOS


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return x - (x.max() + np.log(np.exp(x - x.max()).sum()))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), temperature=st.sampled_from([0.0, 0.7, 1.5]))
def test_constrained_logprobs_are_over_the_allowed_tokens(seed, temperature):
    """With top_logprobs=20 (more than the tokens allowed) the alternatives are exactly the
    allowed tokens: their probabilities sum to 1, and the chosen token's logprob is its entry."""
    constraint = Constraint(index_of(pattern=SMALL))
    params = SamplingParams(temperature=temperature)
    request = GenerationRequest([1, 2], 10, params, seed, (), constraint, top_logprobs=20)
    (result,) = generate(FakeModel(), [request])
    assert re.fullmatch(SMALL, result.text)
    assert len(result.top_logprobs) == len(result.token_ids) >= 2
    replay = constraint.copy()
    for token, logprob, top in zip(
        result.token_ids, result.logprobs, result.top_logprobs, strict=True
    ):
        allowed = set(np.flatnonzero(np.unpackbits(
            replay.mask().view(np.uint8), bitorder="little", count=len(TOKENS)
        )).tolist())  # fmt: skip
        assert {t for t, _ in top} == allowed
        assert sum(np.exp(lp) for _, lp in top) == pytest.approx(1.0, abs=1e-5)
        assert dict(top)[token] == logprob
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        replay.advance(token)


def test_free_text_logprobs_are_the_models_log_softmax():
    model = FakeModel(bias={EOS: -100.0})
    request = GenerationRequest([4, 5], 6, SamplingParams(), 3, top_logprobs=3)
    (result,) = generate(model, [request])
    history = [4, 5]
    for token, logprob, top in zip(
        result.token_ids, result.logprobs, result.top_logprobs, strict=True
    ):
        reference = log_softmax(model._logits(history))
        assert logprob == pytest.approx(reference[token], abs=1e-5)
        best = sorted(range(len(TOKENS)), key=lambda t: (-reference[t], t))[:3]
        assert [t for t, _ in top] == best
        np.testing.assert_allclose([lp for _, lp in top], reference[best], atol=1e-5)
        if token in dict(top):
            assert dict(top)[token] == logprob
        history.append(token)


def test_no_top_logprobs_when_none_or_zero_asked():
    model = FakeModel(bias={EOS: -100.0})
    none, zero = generate(
        model,
        [GenerationRequest([1], 3, GREEDY), GenerationRequest([1], 3, GREEDY, top_logprobs=0)],
    )
    assert none.top_logprobs is None and zero.top_logprobs == ((), (), ())
    assert none.token_ids == zero.token_ids and none.logprobs == zero.logprobs


def test_respelled_tokens_keep_logprobs_aligned():
    """The trigger's respelling takes a token back and forces others: every generated token still
    has exactly one logprob and one list of alternatives."""
    script = tokens(b"<tool", b"_", b"c", b"a", b"l", b"l", b'>{"')
    constraint = Constraint(index_of(pattern=r"\[1\]"))
    request = GenerationRequest(
        [3], 30, SamplingParams(), 0, (), constraint, "<tool_call>", top_logprobs=2
    )
    (result,) = generate(ScriptedModel(1, script), [request])
    assert result.text == "<tool_call>[1]"
    assert len(result.token_ids) == len(result.logprobs) == len(result.top_logprobs)
    assert all(1 <= len(top) <= 2 for top in result.top_logprobs)  # fewer when fewer allowed


def test_a_bias_of_minus_100_on_the_greedy_token_changes_the_choice():
    model = FakeModel(bias={EOS: -100.0})
    (plain,) = generate(model, [GenerationRequest([9], 1, GREEDY)])
    first = plain.token_ids[0]
    (biased,) = generate(model, [GenerationRequest([9], 1, GREEDY, logit_bias={first: -100})])
    assert biased.token_ids[0] != first
    favoured = PIECES.index(b"Paris")
    (pushed,) = generate(model, [GenerationRequest([9], 1, GREEDY, logit_bias={favoured: 100})])
    assert pushed.token_ids == (favoured,)
    assert pushed.logprobs[0] == pytest.approx(0.0, abs=1e-6)  # the biased distribution


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    pushed=st.lists(st.integers(0, len(TOKENS) - 1), min_size=1, max_size=40, unique=True),
)
def test_a_bias_never_lets_a_masked_token_through(seed, pushed):
    """+100 on any tokens (most of them outside the grammar), -100 on the grammar's letters:
    the answer still matches, since the bias is added before the mask."""
    bias = {t: 100.0 for t in pushed} | {PIECES.index(b): -100.0 for b in (b"a", b"b", b"c")}
    for params in (GREEDY, SamplingParams(temperature=1.0)):
        request = GenerationRequest(
            [1], 10, params, seed, (), Constraint(index_of(pattern=SMALL)), logit_bias=bias
        )
        (result,) = generate(FakeModel(), [request])
        assert re.fullmatch(SMALL, result.text), result.text

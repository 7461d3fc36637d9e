"""One request never takes the batch down (docs/design.md section 7): the context length, a
max_tokens of None, the KV cache sized from what admitted requests can use and from the memory
available, and every check on what a request carries made at `Generator.submit`."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from corral.automata import ConstrainError
from corral.kernels import Constraint, SamplingParams
from corral.model import kv_cache
from corral.model.errors import CacheError, ContextLengthError, RequestError
from corral.model.generate import CacheWarning, GenerationRequest, Generator, generate
from fake_model import EOS, SMOLLM2_CACHE, TOKENS, FakeModel, index_of
from hypothesis import given, settings
from hypothesis import strategies as st

GREEDY = SamplingParams(temperature=0)


def per_token(dtype) -> int:
    """Bytes a token of SmolLM2-135M's KV cache takes in `dtype`: layers x KV heads x head_dim x
    (K, V) x the dtype's size (23,040 in float16, 46,080 in float32)."""
    return 30 * 3 * 64 * 2 * np.dtype(dtype).itemsize


def test_context_length_error_names_the_figures():
    engine = Generator(FakeModel(context_length=8192), batch_size=1)
    with pytest.raises(ContextLengthError) as refused:
        engine.submit(GenerationRequest([1] * 12031, 512))
    error = refused.value
    assert str(error) == (
        "this model's maximum context length is 8192 tokens; the prompt has 12031 tokens and "
        "max_tokens asks for 512 more"
    )
    assert (error.code, error.param) == ("context_length_exceeded", "messages")
    assert isinstance(error, ConstrainError)
    assert not engine.has_work


@settings(max_examples=80, deadline=None)
@given(
    context=st.integers(8, 400),
    prompt=st.integers(1, 600),
    max_tokens=st.one_of(st.none(), st.integers(1, 10**12)),
    data=st.data(),
)
def test_an_overflow_names_the_limit_the_engine_enforces(context, prompt, max_tokens, data):
    """A request past an engine's `max_len` smaller than the model's context names that
    max_len and its figure, however far past the context it also goes (the context is no
    limit this engine reaches); without a smaller max_len it names the context. `param` is
    `max_tokens` when it was set and the prompt alone leaves room under that limit, else
    `messages`. A request within both runs (oracle: the limit is the smaller of the two)."""
    max_len = data.draw(st.one_of(st.none(), st.integers(2, context + 50)), label="max_len")
    limit = context if max_len is None else min(max_len, context)
    engine = Generator(FakeModel(context_length=context), batch_size=1, max_len=max_len)
    try:
        engine.submit(GenerationRequest([1] * prompt, max_tokens))
    except RequestError as error:
        assert prompt + (max_tokens or 1) > limit
        assert error.code == "context_length_exceeded"
        named = re.findall(r"(?:context length is|holds at most) (\d+) tokens", str(error))
        assert named == [str(limit)], str(error)
        figures = {int(f) for f in re.findall(r"\d+", str(error))}
        assert figures <= {limit, prompt, max_tokens}, str(error)  # no other limit's figure
        room = max_tokens is not None and prompt < limit
        assert error.param == ("max_tokens" if room else "messages"), str(error)
    else:
        assert prompt + (max_tokens or 1) <= limit


def test_a_huge_max_tokens_is_refused_before_any_allocation():
    """max_tokens=10**9 is refused by the context check; the cache is sized from the context,
    never from the raw value, and the other requests still run on a fresh engine."""
    model = FakeModel(context_length=4096)
    with pytest.raises(ContextLengthError, match="max_tokens asks for 1000000000 more"):
        generate(model, [GenerationRequest([1, 2], 10**9), GenerationRequest([3], 5)])
    assert all(max_len <= 4096 for _, max_len in model.caches)
    engine = Generator(FakeModel(context_length=4096), batch_size=2)
    with pytest.raises(ContextLengthError):
        engine.submit(GenerationRequest([1, 2], 10**9))
    kept = engine.submit(GenerationRequest([3], 5, GREEDY))
    finished = []
    while engine.has_work:
        finished += engine.step()
    assert [handle for handle, _ in finished] == [kept]


def test_the_cache_is_sized_from_the_requests():
    model = FakeModel(context_length=4096)
    generate(model, [GenerationRequest([1] * 10, 20, GREEDY, i) for i in range(3)])
    assert model.caches == [(3, 30)]


def test_absent_max_tokens_takes_what_the_context_leaves():
    model = FakeModel(bias={EOS: -100.0}, context_length=64)
    (result,) = generate(model, [GenerationRequest([1] * 10, None, GREEDY)])
    assert (result.completion_tokens, result.finish_reason) == (54, "length")
    with pytest.raises(ContextLengthError, match="64 tokens; the prompt has 64 tokens and leaves"):
        generate(model, [GenerationRequest([1] * 64, None)])


@pytest.mark.parametrize(("dtype", "fit"), [(np.float16, 43), (np.float32, 21)])
def test_the_batch_is_lowered_to_the_slots_that_fit(monkeypatch, dtype, fit):
    """`-n 5000 --batch-size 5000` with 1 GiB available: it runs with the slots that fit in
    half of it, said once with a CacheWarning (nothing is allocated: the model is a stand-in),
    for a model whose cache is float16 (the default on AMX) or float32 (elsewhere)."""
    monkeypatch.setattr(kv_cache, "available_memory", lambda: 2**30)
    model = FakeModel(bias={EOS: 100.0}, context_length=8192, config=SMOLLM2_CACHE)
    model.kv_dtype = dtype
    with pytest.warns(CacheWarning, match=f"running {fit} sequences at a time"):
        engine = Generator(model, batch_size=5000, max_len=530)
    assert engine.batch_size == 2**29 // (per_token(dtype) * 530) == fit
    assert model.caches == [(fit, 530)]
    requests = [GenerationRequest([i % 200 + 1] * 10, 520, GREEDY) for i in range(50)]
    with pytest.warns(CacheWarning, match=f"running {fit} sequences at a time"):
        results = generate(model, requests, batch_size=5000)  # 50 slots of 530 tokens asked
    assert model.caches[-1] == (fit, 530)
    assert [r.finish_reason for r in results] == ["stop"] * 50


@pytest.mark.parametrize(("dtype", "needs"), [(np.float16, "180.0"), (np.float32, "360.0")])
def test_when_no_slot_fits_the_engine_is_refused_with_the_figures(monkeypatch, dtype, needs):
    monkeypatch.setattr(kv_cache, "available_memory", lambda: 10 * 2**20)
    model = FakeModel(context_length=8192, config=SMOLLM2_CACHE)
    model.kv_dtype = dtype
    with pytest.raises(CacheError) as refused:
        Generator(model, batch_size=4)
    message = str(refused.value)
    assert f"8192 tokens needs {needs} MiB" in message and "10.0 MiB available" in message
    assert f"at most {5 * 2**20 // per_token(dtype)} tokens" in message
    assert model.caches == []


def test_unknown_memory_keeps_the_batch(monkeypatch):
    monkeypatch.setattr(kv_cache, "available_memory", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine = Generator(FakeModel(config=SMOLLM2_CACHE), batch_size=64)
    assert engine.batch_size == 64


def test_available_memory_reads_a_positive_figure():
    available = kv_cache.available_memory()
    assert available is None or (isinstance(available, int) and available > 0)


def test_a_cache_too_large_to_allocate_is_a_cache_error():
    """np.zeros of 23 PB fails at once (nothing is committed); the MemoryError becomes a
    CacheError naming the size."""
    with pytest.raises(CacheError, match=r"needs .* GiB, more than this machine can allocate"):
        kv_cache.KVCache(SMOLLM2_CACHE, 10**6, 10**6)
    default = per_token(kv_cache.DEFAULT_DTYPE)
    assert kv_cache.KVCache.bytes_needed(SMOLLM2_CACHE, 5000, 530) == default * 5000 * 530
    for dtype in (np.float16, np.float32):
        needed = kv_cache.KVCache.bytes_needed(SMOLLM2_CACHE, 5000, 530, dtype)
        assert needed == per_token(dtype) * 5000 * 530


CONTEXT = 48
V = len(TOKENS)
PATTERN = "[a-z]{3,8}"  # a budget below its shortest answer (in tokens) is refused
PARAMS = {"messages", "max_tokens", "logit_bias", "top_logprobs"}


@st.composite
def requests(draw):
    """Requests with anything in every field: prompts of 0 to 60 tokens with ids possibly out of
    range, any max_tokens (None, negative, huge, not an int), any logit_bias and top_logprobs."""
    n = draw(st.integers(1, 40) | st.integers(0, 60))
    ids = draw(st.lists(st.integers(0, V - 1) | st.integers(-2, V + 2), min_size=n, max_size=n))
    max_tokens = draw(
        st.none() | st.integers(1, 30) | st.integers(-3, 70) | st.sampled_from([10**9, 2.5, True])
    )
    valid_bias = st.dictionaries(st.integers(0, V - 1), st.floats(-100, 100), max_size=4)
    wild_bias = st.dictionaries(
        st.integers(-2, V + 2) | st.just("7"),
        st.floats(allow_nan=True) | st.just("x"),
        max_size=4,
    )
    bias = draw(st.none() | valid_bias | wild_bias)
    top = draw(st.none() | st.integers(0, 20) | st.sampled_from([-1, 21, 1.0]))
    constrained = draw(st.booleans())
    return GenerationRequest(
        ids,
        max_tokens,
        SamplingParams(),
        draw(st.integers(0, 100)),
        constraint=Constraint(index_of(pattern=PATTERN)) if constrained else None,
        logit_bias=bias,
        top_logprobs=top,
    )


def admissible(request: GenerationRequest) -> bool:
    """The oracle: what `submit` must accept."""

    def is_int(x):
        return isinstance(x, int) and not isinstance(x, bool)

    ids, max_tokens = list(request.prompt_ids), request.max_tokens
    if not ids or min(ids) < 0 or max(ids) >= V:
        return False
    if max_tokens is None:
        max_tokens = CONTEXT - len(ids)
    elif not is_int(max_tokens):
        return False
    if max_tokens < 1 or len(ids) + max_tokens > CONTEXT:
        return False
    if request.constraint is not None and request.constraint.tokens_to_complete() > max_tokens:
        return False  # "city" is one token: the shortest answer is shorter than 3 letters
    top = request.top_logprobs
    if top is not None and not (is_int(top) and 0 <= top <= 20):
        return False
    for token, bias in (request.logit_bias or {}).items():
        if not (is_int(token) and 0 <= token < V):
            return False
        if isinstance(bias, str) or not -100 <= bias <= 100:
            return False
    return True


@settings(max_examples=150, deadline=None)
@given(batch=st.lists(requests(), min_size=1, max_size=6))
def test_submit_refuses_exactly_the_bad_requests_and_the_rest_run(batch):
    """The kind: whatever a request carries, `submit` either refuses it with a `RequestError`
    naming the parameter, or accepts it and then it runs to the end within the context; a step
    never raises because of a request."""
    engine = Generator(FakeModel(context_length=CONTEXT), batch_size=3)
    accepted = {}
    for request in batch:
        try:
            accepted[engine.submit(request)] = request
        except RequestError as error:
            assert not admissible(request), error
            assert error.param in PARAMS
        else:
            assert admissible(request)
    finished = {}
    while engine.has_work:
        finished.update(engine.step())
    assert finished.keys() == accepted.keys()
    for handle, result in finished.items():
        request = accepted[handle]
        limit = request.max_tokens if request.max_tokens is not None else CONTEXT
        assert result.completion_tokens <= limit
        assert result.prompt_tokens + result.completion_tokens <= CONTEXT
        if request.constraint is not None:
            assert re.fullmatch(PATTERN, result.text), result.text
        if request.top_logprobs is None:
            assert result.top_logprobs is None
        else:
            assert len(result.top_logprobs) == len(result.token_ids)
            k = request.top_logprobs  # fewer when fewer tokens are allowed
            assert all(min(k, 1) <= len(top) <= k for top in result.top_logprobs)
    assert np.all(np.isfinite([lp for r in finished.values() for lp in r.logprobs]))

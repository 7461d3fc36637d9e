"""The batched sampler (docs/design.md section 4): one `sample_batch` call over B rows, each with
its own mask, settings, penalties and draw, equals B one-row `sample` / `top_logprobs` calls bit for
bit, and agrees with an independent float64 NumPy reference of the semantics (the log-softmax
over the allowed tokens, penalties, temperature, top-k, top-p, min-p, the inverse CDF)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from corral.kernels import (
    NoTokenAllowedError,
    SampleRow,
    SamplingParams,
    sample,
    sample_batch,
    top_logprobs,
)
from corral.kernels.expf import exp_nonpositive
from corral.kernels.masks import sample_rows as kernel
from hypothesis import assume, given, settings
from hypothesis import strategies as st


def pack(allowed: np.ndarray) -> np.ndarray:
    """bool `[..., V]` -> packed uint32 `[..., ceil(V / 32)]`, bit t % 32 of word t // 32."""
    v = allowed.shape[-1]
    padded = np.zeros(allowed.shape[:-1] + ((v + 31) // 32 * 32,), dtype=bool)
    padded[..., :v] = allowed
    return np.packbits(padded, axis=-1, bitorder="little").view("<u4")


def rows_of(masks, params, uniforms, prompts=None, outputs=None, n_top=None, rows=None):
    """`SampleRow`s of B rows from per-field lists (None: the field's default; rows 0..B-1)."""
    b_rows = len(masks)
    prompts = [()] * b_rows if prompts is None else prompts
    outputs = [()] * b_rows if outputs is None else outputs
    n_top = [0] * b_rows if n_top is None else n_top
    rows = range(b_rows) if rows is None else rows
    fields = zip(rows, masks, params, uniforms, prompts, outputs, n_top, strict=True)
    return [SampleRow(int(r), m, p, float(u), a, o, int(k)) for r, m, p, u, a, o, k in fields]


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
    free = rng.random(b_rows) < 0.3  # some rows unconstrained
    masks = [None if free[b] else pack(allowed[b]) for b in range(b_rows)]
    prompts = [rng.integers(0, v, rng.integers(0, 5)).tolist() for _ in range(b_rows)]
    outputs = [rng.integers(0, v, rng.integers(0, 8)).tolist() for _ in range(b_rows)]
    n_top = rng.integers(0, 21, b_rows).tolist()
    seeds = rng.integers(0, 2**31, b_rows)
    generators = [np.random.default_rng(s) for s in seeds]
    uniforms = [0.0 if p.greedy else g.random() for p, g in zip(params, generators, strict=True)]
    out = sample_batch(logits, rows_of(masks, params, uniforms, prompts, outputs, n_top, rows))
    for b in range(b_rows):
        row = logits[rows[b]]
        token, logprob = sample(
            row, params[b], np.random.default_rng(seeds[b]), masks[b], prompts[b], outputs[b]
        )
        assert (int(out.tokens[b]), float(out.logprobs[b])) == (token, logprob)
        ids, logprobs = top_logprobs(row, masks[b], n_top[b])
        assert out.top(b) == tuple(zip(ids.tolist(), logprobs.tolist(), strict=True))
        allowed_b = np.ones(v, bool) if free[b] else allowed[b]
        assert allowed_b[token]
        assert len(ids) == min(n_top[b], allowed_b.sum())


def reference_scores(logits, allowed, params, prompt, output):
    """float64 scores of the allowed tokens (-inf elsewhere) after the penalties."""
    scores = logits.astype(np.float64)
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([prompt, output]).astype(np.int64))
        hit = scores[seen]
        scores[seen] = np.where(
            hit > 0, hit / params.repetition_penalty, hit * params.repetition_penalty
        )
    counts = np.bincount(np.asarray(output, np.int64), minlength=len(logits))
    scores -= params.frequency_penalty * counts + params.presence_penalty * (counts > 0)
    return np.where(allowed, scores, -np.inf)


def reference_draw(scores, params, uniform):
    """The token of Hugging Face's order (temperature, top-k, top-p, min-p) and the inverse CDF
    at `uniform`, in float64; None when a rounding margin makes the answer uncertain."""
    margin = 1e-5
    if params.greedy:
        return int(np.argmax(scores))  # the first largest: the lowest id on ties
    weights = np.exp((scores - scores.max()) / params.temperature)
    if 0 < params.top_k < np.isfinite(scores).sum():
        kth = np.sort(scores[np.isfinite(scores)])[::-1][params.top_k - 1]
        weights[scores < kth] = 0.0
    if params.top_p < 1.0:
        order = np.sort(weights[weights > 0])[::-1]
        cumulative = np.cumsum(order) / order.sum()
        if np.abs(cumulative - params.top_p).min() < margin:
            return None
        floor = order[min(np.searchsorted(cumulative, params.top_p), len(order) - 1)]
        weights[weights < floor] = 0.0
    if params.min_p > 0.0:
        if np.abs(weights[weights > 0] - params.min_p).min() < margin:
            return None
        weights[weights < params.min_p] = 0.0
    cumulative = np.cumsum(weights) / weights.sum()
    if np.abs(cumulative - uniform).min() < margin:
        return None
    return int(np.searchsorted(cumulative, uniform, side="right"))


@settings(max_examples=80, deadline=None)
@given(
    v=st.integers(2, 3000),
    params=params_strategy,
    density=st.sampled_from([0.01, 0.3, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_agrees_with_a_float64_numpy_reference(v, params, density, seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(v) * 3).astype(np.float32)
    allowed = rng.random(v) < density
    allowed[rng.integers(v)] = True
    prompt = rng.integers(0, v, rng.integers(0, 5))
    output = rng.integers(0, v, rng.integers(0, 8))
    uniform = float(rng.random())
    expected = reference_draw(
        reference_scores(logits, allowed, params, prompt, output), params, uniform
    )
    assume(expected is not None)
    out = sample_batch(logits[None], [SampleRow(0, pack(allowed), params, uniform, prompt, output)])
    assert int(out.tokens[0]) == expected
    masked = np.where(allowed, logits.astype(np.float64), -np.inf)
    log_softmax = masked - masked.max() - np.log(np.exp(masked - masked.max()).sum())
    assert float(out.logprobs[0]) == pytest.approx(log_softmax[expected], abs=1e-5)


def test_rows_are_independent_of_their_neighbours():
    """A row's token depends on its own inputs only: reordering the rows changes nothing, and
    neither does spreading them over threads."""
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((5, 700)).astype(np.float32)
    masks = [None, pack(rng.random(700) < 0.5), None, pack(rng.random(700) < 0.1), None]
    params = [SamplingParams(temperature=1.0, top_p=0.9), SamplingParams(top_k=5)] * 2
    params.append(SamplingParams(temperature=0.0))
    uniforms = rng.random(5)
    first = sample_batch(logits, rows_of(masks, params, uniforms, n_top=[3] * 5))
    order = [4, 2, 0, 3, 1]
    moved = sample_batch(
        logits[order],
        rows_of(
            [masks[i] for i in order], [params[i] for i in order], uniforms[order], n_top=[3] * 5
        ),
    )
    assert first.tokens[order].tolist() == moved.tokens.tolist()
    assert first.logprobs[order].tolist() == moved.logprobs.tolist()
    assert [first.top(i) for i in order] == [moved.top(b) for b in range(5)]
    spread = sample_batch(logits, rows_of(masks, params, uniforms, n_top=[3] * 5), parallel=True)
    assert spread.tokens.tolist() == first.tokens.tolist()
    assert spread.logprobs.tolist() == first.logprobs.tolist()
    assert [spread.top(b) for b in range(5)] == [first.top(b) for b in range(5)]


@settings(max_examples=40, deadline=None)
@given(
    v=st.sampled_from([1, 33, 700, 4100, 49152]),
    params=st.lists(params_strategy, min_size=2, max_size=12),
    threads=st.integers(2, 4),
    seed=st.integers(0, 2**31),
)
def test_the_parallel_sampler_equals_the_serial_one(v, params, threads, seed):
    """`sample_rows_parallel` (rows claimed by the threads as they come, costliest first)
    gives every row the token, logprob and top list `sample_rows` gives it, bit for bit: free,
    dense and gathered rows, shared masks, repeated rows, penalties, truncation, top lists, and
    more tasks than rows."""
    rng = np.random.default_rng(seed)
    b_rows = len(params)
    logits = (rng.standard_normal((b_rows + 1, v)) * 4).astype(np.float32)
    logits[rng.random(logits.shape) < 0.01] = -np.inf
    rows = rng.integers(0, b_rows + 1, b_rows)
    allowed = rng.random((b_rows, v)) < rng.choice([0.002, 0.1, 0.5, 1.0], (b_rows, 1))
    allowed[np.arange(b_rows), rng.integers(0, v, b_rows)] = True
    packed = pack(allowed)
    masks = [None if rng.random() < 0.25 else packed[b] for b in range(b_rows)]
    masks[1] = masks[0]  # one mask object for two rows (rows in the same state share it)
    prompts = [rng.integers(0, v, rng.integers(0, 6)) for _ in range(b_rows)]
    outputs = [rng.integers(0, v, rng.integers(0, 9)) for _ in range(b_rows)]
    n_top = rng.integers(0, 6, b_rows).tolist()
    uniforms = rng.random(b_rows)
    arguments = (logits, rows_of(masks, params, uniforms, prompts, outputs, n_top, rows))
    serial = sample_batch(*arguments, parallel=False)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        spread = sample_batch(*arguments, parallel=True)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    assert spread.tokens.tolist() == serial.tokens.tolist()
    assert spread.logprobs.tobytes() == serial.logprobs.tobytes()
    assert spread.top_counts.tolist() == serial.top_counts.tolist()
    for b in range(b_rows):
        k = int(serial.top_counts[b])
        assert spread.top_ids[b, :k].tolist() == serial.top_ids[b, :k].tolist()
        assert spread.top_logprobs[b, :k].tobytes() == serial.top_logprobs[b, :k].tobytes()


def test_batches_go_parallel_from_the_threshold(monkeypatch):
    """`parallel=None` picks `sample_rows_parallel` from `PARALLEL_MIN_ROWS` rows on (when
    Numba has more than one thread), `sample_rows` below it and when told False."""
    from corral.kernels.masks import sampling

    calls = []
    for name in ("sample_rows", "sample_rows_parallel"):
        real = getattr(kernel, name)
        monkeypatch.setattr(
            kernel, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a)
        )
    least = sampling.PARALLEL_MIN_ROWS
    logits = np.zeros((least, 40), np.float32)
    for b_rows, parallel in ((least - 1, None), (least, None), (least, False), (2, True)):
        free = [None] * b_rows
        rows = rows_of(free, [SamplingParams()] * b_rows, [0.5] * b_rows)
        sample_batch(logits[:b_rows], rows, parallel=parallel)
    many = numba.get_num_threads() > 1
    wide = "sample_rows_parallel" if many else "sample_rows"
    assert calls == ["sample_rows", wide, "sample_rows", "sample_rows_parallel"]


@settings(max_examples=80, deadline=None)
@given(
    v=st.integers(1, 5000),
    density=st.sampled_from([0.0005, 0.05, 0.5, 1.0]),
    special=st.sampled_from([0.0, 0.05, 0.5, 1.0]),
    seed=st.integers(0, 2**31),
)
def test_the_peak_is_the_largest_allowed_logit(v, density, special, seed):
    """`_peak` (whole groups of mask words in vector IR, the rest in Numba) against NumPy: the
    largest allowed logit that is not NaN, -inf when there is none; NaN, -inf and both zeros
    among the logits, masks from almost empty to full."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(v) * 5).astype(np.float32)
    odd = rng.random(v) < special
    x[odd] = rng.choice(np.array([np.nan, -np.inf, 0.0, -0.0], np.float32), odd.sum())
    allowed = rng.random(v) < density
    kept = x[allowed & ~np.isnan(x)]
    expected = kept.max() if len(kept) else -np.inf
    assert kernel._peak(x, pack(allowed), v) == expected


def test_a_row_that_allows_nothing_is_named_and_shapes_are_checked():
    logits = np.zeros((2, 40), np.float32)
    two = [SamplingParams()] * 2
    with pytest.raises(NoTokenAllowedError, match="row 1"):
        sample_batch(logits, rows_of([None, np.zeros(2, np.uint32)], two, [0.0, 0.0]))
    with pytest.raises(ValueError, match="words"):
        sample_batch(logits, rows_of([np.ones(1, np.uint32), None], two, [0.0, 0.0]))
    with pytest.raises(ValueError, match="beyond"):
        sample_batch(logits, rows_of([np.full(2, 2**31, np.uint32), None], two, [0, 0]))
    for row in (2, -1):
        with pytest.raises(ValueError, match="outside"):
            sample_batch(logits, [SampleRow(row, None, SamplingParams(), 0.0)])
    with pytest.raises(ValueError, match="n_top"):
        sample_batch(logits, [SampleRow(0, None, SamplingParams(), 0.0, n_top=-1)])
    with pytest.raises(TypeError, match="SampleRow"):
        sample_batch(logits, [(0, None, SamplingParams(), 0.0)])
    with pytest.raises(ValueError, match=r"\[N, V\]"):
        sample_batch(logits[0], [SampleRow(0, None, SamplingParams(), 0.0)])
    empty = sample_batch(logits, [])
    assert empty.tokens.shape == (0,) and empty.top_ids.shape == (0, 0)


def test_rows_of_minus_inf_allowed_logits_are_uniform():
    """Where every allowed logit is -inf (a caller's own masking), the allowed tokens are taken
    as equally likely, not NaN."""
    logits = np.full((1, 10), -np.inf, np.float32)
    logits[0, 0] = 5.0  # not allowed
    allowed = np.zeros(10, bool)
    allowed[[2, 5, 7]] = True
    for uniform, token in ((0.1, 2), (0.5, 5), (0.9, 7)):
        out = sample_batch(logits, [SampleRow(0, pack(allowed), SamplingParams(), uniform)])
        assert int(out.tokens[0]) == token
        assert float(out.logprobs[0]) == pytest.approx(-np.log(3))


@numba.njit
def _exp_each(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = exp_nonpositive(x[i])
    return out


def test_the_vectorized_exp_matches_numpy():
    """`exp_nonpositive` (Cephes' expf) against np.exp: relative error below 1e-6 down to
    exp(-87), 0 below and for -inf and NaN; `_sums` adds the weights of each block of allowed
    positions in float64."""
    x = np.concatenate([-np.geomspace(1e-8, 86.9, 3000), [0.0, -87.5, -100.0, -np.inf, np.nan]])
    x = x.astype(np.float32)
    weights = _exp_each(x)
    expected = np.exp(x.astype(np.float64))
    live = x >= -87
    np.testing.assert_allclose(weights[live], expected[live], rtol=1e-6)
    assert (weights[~live] == 0).all()
    n = len(x)
    allowed = np.random.default_rng(0).random(n) < 0.7
    sums = np.empty((n + kernel.BLOCK - 1) // kernel.BLOCK, np.float64)
    no_floor, one = np.float32(-np.inf), np.float32(1.0)
    total = kernel._sums(  # no next row to prefetch
        x, pack(allowed), n, np.float32(0), one, no_floor, np.float32(0), sums, x, False
    )
    kept = np.where(allowed & live, expected, 0.0)
    assert total == pytest.approx(kept.sum(), rel=1e-6)
    per_block = np.add.reduceat(kept, np.arange(0, n, kernel.BLOCK))
    np.testing.assert_allclose(sums, per_block, rtol=1e-6, atol=1e-300)


def test_a_full_vocabulary_row_and_wide_truncation():
    """SmolLM2's vocabulary size: the top-k and top-p candidates span many buckets, and the
    chosen token is in the kept set of the reference."""
    rng = np.random.default_rng(4)
    v = 49152
    logits = (rng.standard_normal((3, v)) * 2).astype(np.float32)
    params = [
        SamplingParams(top_k=2000),
        SamplingParams(temperature=0.3, top_p=0.99),
        SamplingParams(min_p=0.2),
    ]
    for b, p in enumerate(params):
        for uniform in (0.0, 0.5, 0.999):
            expected = reference_draw(logits[b].astype(np.float64), p, uniform)
            out = sample_batch(logits, [SampleRow(b, None, p, uniform)])
            if expected is not None:
                assert int(out.tokens[0]) == expected


@pytest.mark.parametrize("density", [0.05, 0.9])  # a gathered row and one read in place
def test_disallowed_tokens_never_show_even_when_they_lead(density):
    """Disallowed tokens with the largest logits and allowed ones of -inf: greedy takes the best
    allowed token, every draw (with top-k, top-p, min-p and penalties) is allowed, and the top
    list holds every allowed token, finite logits first, and nothing else."""
    rng = np.random.default_rng(7)
    v = 4000
    allowed = rng.random(v) < density
    logits = rng.standard_normal(v).astype(np.float32)
    logits[~allowed] += 50.0
    minus_inf = np.flatnonzero(allowed)[::7]
    logits[minus_inf] = -np.inf
    mask = pack(allowed)
    out = sample_batch(logits[None], [SampleRow(0, mask, SamplingParams(temperature=0), 0.0)])
    finite = np.where(allowed, logits, -np.inf)
    assert int(out.tokens[0]) == int(np.argmax(finite))
    many = [
        SamplingParams(top_k=3 * v),
        SamplingParams(top_p=0.5, temperature=2.0),
        SamplingParams(min_p=0.1, repetition_penalty=1.5, frequency_penalty=0.3),
    ]
    for params in many:
        uniforms = rng.random(50)
        output = rng.integers(0, v, 20)
        rows = [SampleRow(b, mask, params, u, output_ids=output) for b, u in enumerate(uniforms)]
        outs = sample_batch(np.repeat(logits[None], 50, 0), rows)
        assert allowed[outs.tokens].all()
        assert np.isfinite(logits[outs.tokens]).all()
    n_allowed = int(allowed.sum())
    ids, logprobs = top_logprobs(logits, mask, v)
    assert len(ids) == n_allowed and set(ids.tolist()) == set(np.flatnonzero(allowed).tolist())
    assert np.isfinite(logprobs[: n_allowed - len(minus_inf)]).all()
    assert (logprobs[n_allowed - len(minus_inf) :] == -np.inf).all()


@settings(max_examples=60, deadline=None)
@given(
    v=st.integers(1, 3000),
    density=st.sampled_from([0.01, 0.2, 0.3, 1.0]),
    n=st.integers(0, 40),
    seed=st.integers(0, 2**31),
)
def test_top_logprobs_agree_with_a_numpy_sort(v, density, n, seed):
    """The top list against NumPy: the allowed tokens by logit, largest first, ties by id (a
    stable sort), logprobs the float64 log-softmax over the allowed tokens; few distinct logit
    values make ties common, in gathered rows and rows read in place alike."""
    rng = np.random.default_rng(seed)
    logits = rng.integers(-4, 5, v).astype(np.float32)
    allowed = rng.random(v) < density
    allowed[rng.integers(v)] = True
    ids, logprobs = top_logprobs(logits, pack(allowed), n)
    masked = np.where(allowed, logits.astype(np.float64), -np.inf)
    expected = np.argsort(-masked, kind="stable")[: min(n, int(allowed.sum()))]
    assert ids.tolist() == expected.tolist()
    log_softmax = masked - masked.max() - np.log(np.exp(masked - masked.max()).sum())
    np.testing.assert_allclose(logprobs, log_softmax[expected], atol=1e-5)


@pytest.mark.parametrize("temperature", [1e-40, 1e-30, 1e-6])
def test_a_tiny_temperature_takes_the_largest_logit(temperature):
    """A temperature whose inverse overflows float32 still gives the peak weight 1 and every
    other weight 0: the draw is the greedy choice, in rows read in place and gathered."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 3000)).astype(np.float32)
    allowed = rng.random((2, 3000)) < np.array([[0.9], [0.05]])
    params = [SamplingParams(temperature=temperature)] * 2
    out = sample_batch(logits, rows_of([pack(allowed[0]), pack(allowed[1])], params, [0.99, 0.5]))
    expected = np.argmax(np.where(allowed, logits, -np.inf), axis=1)
    assert out.tokens.tolist() == expected.tolist()


def test_settings_made_afresh_each_call_are_read_afresh():
    """`sample_batch` keeps the tables of the settings objects it was last passed (by identity,
    the objects held): settings made and dropped call after call, whose identities Python may
    reuse, are each read as they are. Greedy rows take the largest logit; a temperature-1 row
    with top_k=1 too; a temperature-1 row with top_k=0 and a draw near 1 a token whose CDF
    reaches it, here never the largest logit's (it holds under half of the probability)."""
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((3, 300)).astype(np.float32)
    best = logits.argmax(axis=1)
    for i in range(300):
        kind = i % 3
        made = SamplingParams(temperature=0.0 if kind == 0 else 1.0, top_k=1 if kind == 1 else 0)
        tokens = sample_batch(logits, rows_of([None] * 3, [made] * 3, [0.999] * 3)).tokens
        del made  # its identity free for the next call's settings
        if kind < 2:
            np.testing.assert_array_equal(tokens, best)
        else:
            assert (tokens != best).all()

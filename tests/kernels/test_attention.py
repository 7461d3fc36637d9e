"""The ragged attention kernel against the textbook softmax(q k^T) v, one query row and head at a
time in float64 (docs/design.md section 6): random ragged segments (a few rows of one slot, as a
jump-forward chunk, mixed with single decode rows), grouped heads, rows of no segment left as
they were, and no read past a row's own context."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from compile_state import compile_afresh
from corral.kernels.compute import attention
from hypothesis import given, settings
from hypothesis import strategies as st


def reference_attention(q, keys, values, segments):
    """softmax(q k^T) v one query row and head at a time, in float64 (rows of no segment: NaN)."""
    group = q.shape[1] // keys.shape[1]
    out = np.full(q.shape, np.nan)
    for slot, start, first, n in segments:
        for j in range(n):
            for h in range(q.shape[1]):
                k = keys[slot, h // group, : start + j + 1].astype(np.float64)
                v = values[slot, h // group, : start + j + 1].astype(np.float64)
                scores = k @ q[first + j, h]
                weights = np.exp(scores - scores.max())
                out[first + j, h] = weights / weights.sum() @ v
    return out


def rounding_bound(q, keys, values, segments):
    """Per output element, the first-order bound of float32 rounding in the kernel's scores: a
    dot product of `width` terms summed in any order (the kernel's fast-math reassociation, the
    vector width) is off by at most `width` u sum|q_i k_i| (u = 2^-24; Higham, Accuracy and
    Stability of Numerical Algorithms, section 3.1), a softmax moves by at most twice its
    largest score error in the 1-norm, so the output by that times max|v|. Rows of no segment:
    0."""
    group, width = q.shape[1] // keys.shape[1], q.shape[2]
    bound = np.zeros(q.shape)
    for slot, start, first, n in segments:
        for j in range(n):
            for h in range(q.shape[1]):
                k = np.abs(keys[slot, h // group, : start + j + 1].astype(np.float64))
                v = np.abs(values[slot, h // group, : start + j + 1]).max()
                terms = (k @ np.abs(q[first + j, h].astype(np.float64))).max()
                bound[first + j, h] = 2 * width * 2.0**-24 * terms * v
    return bound


def assert_matches_reference(out, q, keys, values, segments):
    """`out` equals the float64 textbook attention within 1e-5 plus the rounding bound of its
    float32 scores (NaN where no segment wrote)."""
    expected = reference_attention(q, keys, values, segments)
    tolerance = 1e-5 * (1 + np.abs(expected)) + rounding_bound(q, keys, values, segments)
    written = ~np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(out), ~written)
    error = np.abs(out[written] - expected[written])
    assert (error <= tolerance[written]).all(), (error.max(), (error - tolerance[written]).max())


@st.composite
def ragged_passes(draw, most_rows=6):
    """(q, keys, values, segments): segments of 1..most_rows rows in distinct slots, in any
    order, some rows of the pass in no segment; scores spread from flat to peaked."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kv_heads, group = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    width = draw(st.sampled_from([4, 16, 64, 128, 256]))
    max_len = draw(st.integers(1, 70))
    n_slots = draw(st.integers(1, 5))
    segments, row = [], 0
    for slot in draw(st.permutations(range(n_slots))):
        n = draw(st.integers(1, min(most_rows, max_len)))
        start = draw(st.integers(0, max_len - n))
        row += draw(st.integers(0, 2))  # rows of no segment
        segments.append((slot, start, row, n))
        row += n
    segments = draw(st.permutations(segments))
    shape = (n_slots, kv_heads, max_len, width)
    keys = rng.standard_normal(shape).astype(np.float32)
    values = rng.standard_normal(shape).astype(np.float32)
    spread = draw(st.sampled_from([0.1, 1.0, 4.0]))
    q = (spread * rng.standard_normal((row, kv_heads * group, width))).astype(np.float32)
    return q, keys, values, np.array(segments, np.int64).reshape(-1, 4)


@settings(max_examples=150, deadline=None)
@given(ragged_passes())
def test_ragged_attention_equals_the_textbook_formula_row_by_row(case):
    q, keys, values, segments = case
    out = np.full(q.shape, np.nan, np.float32)
    attention.ragged_attention(q, keys, values, segments, out)
    assert_matches_reference(out, q, keys, values, segments)  # NaN: rows of no segment


@settings(max_examples=25, deadline=None)
@given(ragged_passes(most_rows=32))
def test_ragged_attention_of_jump_forward_chunks_equals_the_textbook_formula(case):
    """Segments of up to 32 rows (`llama.SHORT_SEGMENT`): the kernel's causal triangle within a
    segment, with contexts of any length (the four-key steps' remainders)."""
    q, keys, values, segments = case
    out = np.full(q.shape, np.nan, np.float32)
    attention.ragged_attention(q, keys, values, segments, out)
    assert_matches_reference(out, q, keys, values, segments)


@settings(max_examples=60, deadline=None)
@given(ragged_passes(most_rows=12), st.data())
def test_query_heads_cut_into_tasks_give_the_same_output_bit_for_bit(case, data):
    """A pair's G query heads cut into `split` tasks (batch 1's few pairs spread over the
    threads): the textbook formula, and the output of one task a pair, bit for bit."""
    q, keys, values, segments = case
    group = q.shape[1] // keys.shape[1]
    split = data.draw(st.integers(1, group), label="split")
    whole = attention.ragged_attention(q, keys, values, segments, np.full_like(q, np.nan), split=1)
    out = np.full_like(q, np.nan)
    attention.ragged_attention(q, keys, values, segments, out, split=split)
    np.testing.assert_array_equal(out, whole)
    assert_matches_reference(out, q, keys, values, segments)
    with pytest.raises(ValueError, match="split"):
        attention.ragged_attention(q, keys, values, segments, out, split=group + 1)


def test_few_pairs_are_cut_for_the_threads():
    assert attention.query_splits(1, 4, 2) == 2  # Gemma 3 270M at batch 1: a task a thread
    assert attention.query_splits(3, 3, 2) == 1  # SmolLM2 at batch 1: enough pairs
    assert attention.query_splits(1, 4, 8) == 4  # at most a head a task
    assert attention.query_splits(1, 1, 8) == 1


@settings(max_examples=50, deadline=None)
@given(ragged_passes(most_rows=12), st.integers(0, 2**32 - 1))
def test_a_row_is_blind_to_the_keys_and_values_past_its_position(case, seed):
    """Changing the keys and values after row j's position (to other finite numbers: they are
    its segment's later tokens) leaves row j's output exactly as it was."""
    q, keys, values, segments = case
    before = attention.ragged_attention(q, keys, values, segments, np.zeros_like(q)).copy()
    rng = np.random.default_rng(seed)
    for slot, start, first, n in segments:
        j = int(rng.integers(0, n))
        keys[slot, :, start + j + 1 :] = 100 * rng.standard_normal(
            keys[slot, :, start + j + 1 :].shape
        )
        values[slot, :, start + j + 1 :] = rng.standard_normal(
            values[slot, :, start + j + 1 :].shape
        )
        after = attention.ragged_attention(q, keys, values, segments, np.zeros_like(q))
        np.testing.assert_array_equal(after[first : first + j + 1], before[first : first + j + 1])


def crowded_segments(rng, sizes, length):
    """Segments `[slot, start, first, n]` (int64) of rows of `sizes` (decode rows of 1 and a
    few jump-forward chunks), one slot each in a random order, at random starts within caches
    of `length` positions: enough (segment, head) pairs for 3 KV heads that every thread takes
    many of them from the shared counter (`kernels.claim`)."""
    starts = rng.integers(0, length - np.array(sizes) + 1)
    firsts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    slots = rng.permutation(len(sizes))
    segments = np.column_stack([slots, starts, firsts, sizes]).astype(np.int64)
    assert len(segments) * 3 >= 48
    return segments


def test_ragged_attention_over_long_contexts_equals_numpy():
    """SmolLM2's shapes (9 query heads over 3 key/value heads of width 64) at decode contexts of
    a few hundred positions, where the prefetch runs ahead of the keys and values read."""
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((4, 3, 520, 64)).astype(np.float32)
    values = rng.standard_normal((4, 3, 520, 64)).astype(np.float32)
    segments = np.array([[2, 519, 0, 1], [0, 250, 1, 7], [3, 16, 8, 1]])  # (slot, start, first, n)
    q = (0.3 * rng.standard_normal((9, 9, 64))).astype(np.float32)
    out = attention.ragged_attention(q, keys, values, segments, np.empty_like(q))
    expected = reference_attention(q, keys, values, segments)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_ragged_attention_of_a_large_batch_equals_numpy():
    """A decode step of 40 rows and a few jump-forward chunks: enough (segment, head) pairs
    that every thread takes many from the shared counter (`kernels.claim`)."""
    rng = np.random.default_rng(5)
    keys = rng.standard_normal((44, 3, 40, 16)).astype(np.float32)
    values = rng.standard_normal((44, 3, 40, 16)).astype(np.float32)
    segments = crowded_segments(rng, [1] * 40 + [5, 2, 7, 3], 40)
    sizes = segments[:, 3]
    q = (0.5 * rng.standard_normal((sum(sizes), 9, 16))).astype(np.float32)
    out = attention.ragged_attention(q, keys, values, segments, np.empty_like(q))
    expected = reference_attention(q, keys, values, segments)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_ragged_attention_reads_nothing_past_a_context():
    rng = np.random.default_rng(1)
    keys = rng.standard_normal((2, 1, 40, 16)).astype(np.float32)
    values = rng.standard_normal((2, 1, 40, 16)).astype(np.float32)
    segments = np.array([[1, 2, 0, 1], [0, 18, 1, 3]])  # contexts of 3 and 21 positions
    q = rng.standard_normal((4, 2, 16)).astype(np.float32)
    before = attention.ragged_attention(q, keys, values, segments, np.empty_like(q)).copy()
    keys[1, :, 3:], values[1, :, 3:] = np.nan, np.nan
    keys[0, :, 21:], values[0, :, 21:] = np.nan, np.nan
    after = attention.ragged_attention(q, keys, values, segments, np.empty_like(q))
    np.testing.assert_array_equal(before, after)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-200, 50, width=32), min_size=1, max_size=300))
def test_softmax_with_the_polynomial_exponential_equals_numpy(scores):
    scores = np.array(scores, np.float32)
    expected = np.exp(scores.astype(np.float64) - scores.max())
    expected /= expected.sum()
    got = scores.copy()
    attention._softmax_(got, np.empty(attention._LANES, np.float32))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 3), st.booleans())
def test_store_rows_writes_what_numpy_indexing_writes(seed, n_slots, kv_heads, strided):
    """Distinct (slot, position) pairs, new rows in C order or as strided views (as `project_qkv`
    hands them over); nothing else of the cache changes."""
    rng = np.random.default_rng(seed)
    max_len, width = int(rng.integers(1, 20)), int(rng.choice([4, 64]))
    cells = rng.permutation(n_slots * max_len)[: int(rng.integers(1, n_slots * max_len + 1))]
    slots, positions = cells // max_len, cells % max_len
    shape = (n_slots, kv_heads, max_len, width)
    keys = rng.standard_normal(shape).astype(np.float32)
    values = rng.standard_normal(shape).astype(np.float32)
    fresh = rng.standard_normal((len(cells), 2 * kv_heads + 1, width)).astype(np.float32)
    k, v = (
        (fresh[:, 1 : kv_heads + 1], fresh[:, kv_heads + 1 :])
        if strided
        else (
            np.ascontiguousarray(fresh[:, :kv_heads]),
            np.ascontiguousarray(fresh[:, kv_heads + 1 :]),
        )
    )
    expected_keys, expected_values = keys.copy(), values.copy()
    expected_keys[slots, :, positions] = k
    expected_values[slots, :, positions] = v
    attention.store_rows(k, v, keys, values, slots, positions)
    np.testing.assert_array_equal(keys, expected_keys)
    np.testing.assert_array_equal(values, expected_values)


def decode_cells(rng, n_slots):
    """A decode step's shapes for `rope_store`: 6 query and 2 KV heads of width 4 or 64, caches
    of 12 positions, and the distinct (slot, position) cells of its rows in a random order."""
    q_heads, kv_heads, width, max_len = 6, 2, int(rng.choice([4, 64])), 12
    cells = rng.permutation(n_slots * max_len)[: int(rng.integers(1, n_slots * max_len + 1))]
    return q_heads, kv_heads, width, max_len, cells // max_len, cells % max_len


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.booleans())
def test_rope_store_equals_rope_then_scale_then_store_rows_bit_for_bit(seed, n_slots, strided):
    """The fused call against the separate steps the forward pass took before (`layers.rope`,
    q times hd^-1/2, `store_rows`), on a C-order projection or BLAS's transposed one."""
    from corral.kernels.compute import layers

    rng = np.random.default_rng(seed)
    q_heads, kv_heads, width, max_len, slots, positions = decode_cells(rng, n_slots)
    n, columns = len(slots), (q_heads + 2 * kv_heads) * width
    qkv = rng.standard_normal((n, columns) if not strided else (columns, n)).astype(np.float32)
    qkv = qkv.T if strided else qkv
    angles = rng.uniform(0, 50, (max_len, width // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    shape = (n_slots, kv_heads, max_len, width)
    keys = rng.standard_normal(shape).astype(np.float32)
    values = rng.standard_normal(shape).astype(np.float32)
    expected_keys, expected_values = keys.copy(), values.copy()
    heads = q_heads + kv_heads
    rotated = layers.rope(
        qkv[:, : heads * width].reshape(n, heads, width),
        cos[positions],
        sin[positions],
        np.empty((n, heads, width), np.float32),
    )
    scale = np.float32(width**-0.5)
    v = qkv[:, heads * width :].reshape(n, kv_heads, width)
    attention.store_rows(rotated[:, q_heads:], v, expected_keys, expected_values, slots, positions)
    q = np.full((n, q_heads, width), np.nan, np.float32)
    attention.rope_store(qkv, cos, sin, q_heads, scale, keys, values, slots, positions, q)
    np.testing.assert_array_equal(q, rotated[:, :q_heads] * scale)
    np.testing.assert_array_equal(keys, expected_keys)
    np.testing.assert_array_equal(values, expected_values)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 40),
    st.integers(0, 30),
    st.sampled_from([0.1, 1.0, 30.0]),
)
def test_causal_softmax_equals_numpy_softmax_of_the_masked_scores(
    seed, heads, group, n, first, spread
):
    """Row g n + i of each head (query i at position first + i) becomes the softmax of its
    scores at positions 0..first + i, and 0 past them, whatever they held (here NaN)."""
    rng = np.random.default_rng(seed)
    width = first + n + int(rng.integers(0, 3))  # a block may be narrower than the scores
    scores = (spread * rng.standard_normal((heads, group * n, width))).astype(np.float32)
    future = np.arange(width)[None, :] > first + np.arange(group * n)[:, None] % n  # [G n, T]
    scores[:, future] = np.nan
    expected = np.where(future, -np.inf, scores.astype(np.float64))
    expected = np.exp(expected - expected.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    attention.causal_softmax_(scores, first, n)
    np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-7)
    assert (scores[:, future] == 0).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 60))
def test_decode_rows_of_context_one_and_of_the_whole_cache_equal_numpy(seed, n_other):
    """Decode rows (n = 1) on SmolLM2's head shapes (G = 3 query heads per key/value head,
    hd = 64): a context of one position, one of the cache's whole length T, and others of any
    length (every remainder of the four-key steps), in a batch large enough, from n_other = 13
    on, for the dynamic schedule."""
    rng = np.random.default_rng(seed)
    max_len, batch = int(rng.integers(1, 80)), n_other + 2
    keys = rng.standard_normal((batch, 3, max_len, 64)).astype(np.float32)
    values = rng.standard_normal((batch, 3, max_len, 64)).astype(np.float32)
    lengths = np.concatenate([[1, max_len], rng.integers(1, max_len + 1, n_other)])
    slots = rng.permutation(batch)
    segments = np.column_stack([slots, lengths - 1, np.arange(batch), np.ones(batch, np.int64)])
    q = (0.3 * rng.standard_normal((batch, 9, 64))).astype(np.float32)
    out = attention.ragged_attention(q, keys, values, segments, np.empty_like(q))
    assert_matches_reference(out, q, keys, values, segments)


@settings(max_examples=30, deadline=None)
@given(ragged_passes(most_rows=8), st.integers(0, 2**32 - 1))
def test_a_segment_attends_alike_alone_and_in_any_batch(case, seed):
    """Determinism: a segment's output is the same bit for bit whether its pass holds it alone
    or with other segments (a larger batch, in another order, on the dynamic schedule)."""
    q, keys, values, segments = case
    together = attention.ragged_attention(q, keys, values, segments, np.zeros_like(q))
    rng = np.random.default_rng(seed)
    copies = 20  # 20 copies of every segment, each writing its own rows: many pairs a thread
    crowd = np.concatenate([segments + [0, 0, k * len(q), 0] for k in range(copies)])
    crowd = crowd[rng.permutation(len(crowd))]
    queries = np.concatenate([q] * copies)
    crowded = attention.ragged_attention(queries, keys, values, crowd, np.zeros_like(queries))
    np.testing.assert_array_equal(crowded, np.concatenate([together] * copies))
    for segment in segments:
        alone = attention.ragged_attention(q, keys, values, segment[None], np.zeros_like(q))
        _, _, first, n = segment
        np.testing.assert_array_equal(alone[first : first + n], together[first : first + n])


@numba.njit  # no cache: it would outlive a change to the intrinsics it inlines
def _blocks16(queries, q_start, rows, r_start, weights, w_start, scores, out, width):
    if width == 64:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 1, 64)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, 16, 1, 64)
    elif width == 128:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 1, 128)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, 16, 1, 128)
    else:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 1, 256)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, 16, 1, 256)


@numba.njit
def _pair16(queries, q_start, rows, r_start, weights, w_start, w_stride, scores, out, width):
    if width == 64:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 2, 64)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, w_stride, 2, 64)
    elif width == 128:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 2, 128)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, w_stride, 2, 128)
    else:
        attention._scores16(queries, q_start, rows, r_start, scores, 0, 16, 2, 256)
        attention._weighted16(out, 0, weights, w_start, rows, r_start, w_stride, 2, 256)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(attention.POSITIONAL_WIDTHS))
def test_the_16_row_intrinsics_equal_numpy_at_any_offset_and_alike_in_pairs(seed, width):
    """`_scores16`: 16 dot products of a query row of width 64, 128 or 256 with 16 rows, key
    l's in lane l; `_weighted16`: an output row plus the 16 rows weighted; both at arbitrary
    flat offsets. Two rows in one call give each row's one-row results bit for bit."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((int(rng.integers(16, 40)), width)).astype(np.float32)
    t = int(rng.integers(0, len(rows) - 15))
    queries = rng.standard_normal((3, width)).astype(np.float32)
    r = int(rng.integers(0, 2))
    weights = rng.random(80).astype(np.float32)
    w, stride = int(rng.integers(0, 25)), int(rng.integers(16, 40))
    scores = np.full(32, np.nan, np.float32)
    out = rng.standard_normal(2 * width).astype(np.float32)
    expected_out = out[:width].astype(np.float64) + weights[w : w + 16] @ rows[t : t + 16]
    alone_scores, alone_out = scores.copy(), out.copy()
    _blocks16(queries, r * width, rows, t * width, weights, w, alone_scores, alone_out, width)
    expected = rows[t : t + 16] @ queries[r].astype(float)
    np.testing.assert_allclose(alone_scores[:16], expected, atol=1e-4 * width / 64)
    np.testing.assert_allclose(alone_out[:width], expected_out, rtol=1e-5, atol=1e-5 * width / 64)
    second_scores, second_out = scores.copy(), out.copy()
    _blocks16(queries, (r + 1) * width, rows, t * width, weights, w + stride, second_scores,
              second_out[width:], width)  # fmt: skip
    _pair16(queries, r * width, rows, t * width, weights, w, stride, scores, out, width)
    np.testing.assert_array_equal(scores[:16], alone_scores[:16])
    np.testing.assert_array_equal(scores[16:], second_scores[:16])
    np.testing.assert_array_equal(out[:width], alone_out[:width])
    np.testing.assert_array_equal(out[width:], second_out[width:])


# ----------------------------------------------------------------------------------------------
# A float16 cache (`KVCache(..., dtype=np.float16)`): read widened to float32, written rounded


def float16_twins(keys, values):
    """The keys and values rounded to float16, and the same numbers in float32."""
    keys16, values16 = keys.astype(np.float16), values.astype(np.float16)
    return keys16, values16, keys16.astype(np.float32), values16.astype(np.float32)


TWIN_TOLERANCE = {"rtol": 1e-6, "atol": 1e-7}
"""A float16 cache's output against its float32 twin's: the same float32 arithmetic on the same
numbers, but LLVM may vectorize (and so order, under fast-math reassociation) the two compiled
versions' sums apart: a float32 ulp or so was seen. Both versions come from one compile
(`twins_compiled_here`)."""


@pytest.fixture(scope="module")
def twins_compiled_here():
    """The float16 and float32 versions of the ragged kernel, compiled in this process
    (`compile_state.compile_afresh`): Numba's cached and freshly compiled code of one kernel
    were seen an ulp apart, as far apart as the twins may be."""
    rng = np.random.default_rng(0)
    keys16, values16, keys32, values32 = float16_twins(*rng.standard_normal((2, 1, 1, 4, 64)))
    q = rng.standard_normal((1, 1, 64)).astype(np.float32)
    segments = np.array([[0, 3, 0, 1]], np.int64)
    for keys, values in ((keys16, values16), (keys32, values32)):
        attention.ragged_attention(q, keys, values, segments, np.empty_like(q))
    compile_afresh(attention)


@pytest.mark.usefixtures("twins_compiled_here")
@settings(max_examples=100, deadline=None)
@given(ragged_passes(most_rows=12))
def test_ragged_attention_over_a_float16_cache_is_its_float32_twins(case):
    """A float16 cache is read widened to float32 (exact) and computed in float32: the output is
    the kernel's over the same numbers stored as float32 (to about an ulp) and the textbook
    formula's (float64) over them; decode rows and jump-forward chunks, every head width's path."""
    q, keys, values, segments = case
    keys16, values16, keys32, values32 = float16_twins(keys, values)
    out16 = attention.ragged_attention(q, keys16, values16, segments, np.full_like(q, np.nan))
    out32 = attention.ragged_attention(q, keys32, values32, segments, np.full_like(q, np.nan))
    np.testing.assert_allclose(out16, out32, **TWIN_TOLERANCE)  # NaN where no segment wrote
    assert_matches_reference(out16, q, keys16, values16, segments)


@pytest.mark.usefixtures("twins_compiled_here")
def test_ragged_attention_of_a_large_batch_over_a_long_float16_cache_equals_numpy():
    """SmolLM2's shapes, 48 decode rows and two chunks over contexts of up to 300 positions:
    the 16-key intrinsics on half vectors, the tasks taken from the shared counter."""
    rng = np.random.default_rng(7)
    keys16, values16, keys32, values32 = float16_twins(
        rng.standard_normal((50, 3, 300, 64)), rng.standard_normal((50, 3, 300, 64))
    )
    segments = crowded_segments(rng, [1] * 48 + [9, 4], 300)
    sizes = segments[:, 3]
    q = (0.3 * rng.standard_normal((sum(sizes), 9, 64))).astype(np.float32)
    out16 = attention.ragged_attention(q, keys16, values16, segments, np.empty_like(q))
    out32 = attention.ragged_attention(q, keys32, values32, segments, np.empty_like(q))
    np.testing.assert_allclose(out16, out32, **TWIN_TOLERANCE)
    expected = reference_attention(q, keys16, values16, segments)
    np.testing.assert_allclose(out16, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.booleans())
def test_rope_store_and_store_rows_round_into_a_float16_cache_as_numpy(seed, n_slots, strided):
    """Written into a float16 cache, the new keys and values are the float32 cache's rounded as
    NumPy's `astype(np.float16)` rounds (to nearest, ties to even), bit for bit; the queries and
    the cache's other entries are as with a float32 cache. Values up to 10^5 reach float16's
    overflow (65504 -> inf, as NumPy's)."""
    rng = np.random.default_rng(seed)
    q_heads, kv_heads, width, max_len, slots, positions = decode_cells(rng, n_slots)
    n, columns = len(slots), (q_heads + 2 * kv_heads) * width
    scale_of = 10.0 ** rng.uniform(-8, 5, (n, columns) if not strided else (columns, n))
    qkv = (scale_of * rng.standard_normal(scale_of.shape)).astype(np.float32)
    qkv = qkv.T if strided else qkv
    angles = rng.uniform(0, 50, (max_len, width // 2))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    shape = (n_slots, kv_heads, max_len, width)
    keys16, values16, keys32, values32 = float16_twins(
        rng.standard_normal(shape), rng.standard_normal(shape)
    )
    q16, q32 = (np.full((n, q_heads, width), np.nan, np.float32) for _ in range(2))
    scale = np.float32(width**-0.5)
    with np.errstate(over="ignore"):
        attention.rope_store(qkv, cos, sin, q_heads, scale, keys32, values32, slots, positions, q32)
        attention.rope_store(qkv, cos, sin, q_heads, scale, keys16, values16, slots, positions, q16)
        np.testing.assert_array_equal(q16, q32)
        np.testing.assert_array_equal(
            keys16.view(np.uint16), keys32.astype(np.float16).view(np.uint16)
        )
        np.testing.assert_array_equal(
            values16.view(np.uint16), values32.astype(np.float16).view(np.uint16)
        )
        k = qkv[:, : kv_heads * width].reshape(n, kv_heads, width)
        v = qkv[:, kv_heads * width : 2 * kv_heads * width].reshape(n, kv_heads, width)
        attention.store_rows(k, v, keys32, values32, slots, positions)
        attention.store_rows(k, v, keys16, values16, slots, positions)
        np.testing.assert_array_equal(
            keys16.view(np.uint16), keys32.astype(np.float16).view(np.uint16)
        )
        np.testing.assert_array_equal(
            values16.view(np.uint16), values32.astype(np.float16).view(np.uint16)
        )


@pytest.mark.parametrize("width", attention.POSITIONAL_WIDTHS)
@settings(max_examples=40, deadline=None)
@given(case=ragged_passes(most_rows=32), seed=st.integers(0, 2**32 - 1))
def test_a_row_attends_alike_in_any_segment_that_holds_it(case, seed, width):
    """Positional order (the plan's `positional_attention`): with a head width of
    `POSITIONAL_WIDTHS` (64, 128, 256) a row's output is the same bit for bit whether its
    segment is cut into smaller ones at any rows (a prompt prefilled in pieces, decode steps,
    jump-forward chunks), since what sums its scores and values is fixed by its position
    alone."""
    q, keys, values, segments = case
    if q.shape[2] != width:
        q = np.resize(q, (*q.shape[:2], width))
        keys, values = (np.resize(a, (*a.shape[:3], width)) for a in (keys, values))
    together = attention.ragged_attention(q, keys, values, segments, np.zeros_like(q))
    rng = np.random.default_rng(seed)
    pieces = []
    for slot, start, first, n in segments.tolist():
        cuts = sorted(set(rng.integers(1, n, size=rng.integers(0, 3)).tolist())) if n > 1 else []
        for begin, end in zip([0, *cuts], [*cuts, n], strict=True):
            pieces.append((slot, start + begin, first + begin, end - begin))
    cut = np.array(pieces, np.int64).reshape(-1, 4)
    apart = attention.ragged_attention(q, keys, values, cut, np.zeros_like(q))
    np.testing.assert_array_equal(apart, together)

"""KV-cache correctness (docs/design.md section 6): prefill of N tokens then decode equals one
prefill of N + 1; a ragged batch equals its sequences run one at a time; slots in any order; chunked
and extended prefill; cache bookkeeping and errors. Mostly on a tiny random Llama (fast), and once
on the real model. The caches are float32, where the passes agree to float32 rounding; a float16
cache computes the same over rounded keys and values (test_float16_cache.py), and the real
model's ragged batch is checked in both."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from corral.model import CacheError
from corral.model.model import DECODE_ROWS_MAX
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ATOL = 2e-5
RAGGED_TOLERANCE = {np.float32: 1e-3, np.float16: 5e-3}
"""The real model's ragged batch against one sequence at a time, in logits. float32: docs/design.md
section 6's tolerance (1.1e-4 was seen on one logit of 49,152); the two compositions sum in other
orders (the blocks' kernels for 3 rows and for 4 give the same row's keys a float32 ulp or so
apart). float16: where two such keys straddle a float16 rounding boundary they are stored one
float16 ulp (2^13 float32 ulps) apart, and the next layers' keys drift further: 2.3e-4 to
2.9e-3 over six draws of three sequences, against 1.1e-2 to 1.5e-2 between a float16 and a
float32 cache (bench/results/README.md, float16 KV cache)."""


@pytest.fixture(scope="module")
def model(model, float32_plan):
    """The default model on float32 activations over a float32 KV cache (`float32_plan`)."""
    return model.with_plan(float32_plan)


def random_ids(model, n, seed):
    return np.random.default_rng(seed).integers(3, model.vocab_size, n).tolist()


def one_prefill(model, ids):
    """Last-position logits of `ids` from one prefill in a fresh cache.  -> [V]"""
    return model.prefill(model.new_cache(1, len(ids)), 0, ids)


@pytest.mark.parametrize("n", [1, 2, 7, 30])
def test_prefill_then_decode_equals_one_longer_prefill(tiny_model, n):
    ids = random_ids(tiny_model, n + 1, seed=n)
    cache = tiny_model.new_cache(1, n + 1)
    tiny_model.prefill(cache, 0, ids[:n])
    logits = tiny_model.decode(cache, [0], [ids[n]])
    assert logits.shape == (1, tiny_model.vocab_size) and logits.dtype == np.float32
    np.testing.assert_allclose(logits[0], one_prefill(tiny_model, ids), atol=ATOL)
    assert cache.lengths[0] == n + 1


def test_several_decode_steps_equal_prefills(tiny_model):
    ids = random_ids(tiny_model, 12, seed=1)
    cache = tiny_model.new_cache(1, 12)
    tiny_model.prefill(cache, 0, ids[:4])
    for n in range(4, 12):
        logits = tiny_model.decode(cache, [0], [ids[n]])[0]
        np.testing.assert_allclose(logits, one_prefill(tiny_model, ids[: n + 1]), atol=ATOL)


@pytest.mark.parametrize(
    "slots",
    [
        [0, 1, 2],  # in order: the cache is read in place
        [2, 0, 1],  # out of order: queries scattered over the span
        [3, 1, 0],  # a free slot inside the span
        [9, 0, 4],  # spread wide: rows gathered
    ],
)
def test_ragged_batch_equals_one_at_a_time(tiny_model, slots):
    lengths = [5, 11, 1]
    sequences = [random_ids(tiny_model, n + 3, seed=10 + n) for n in lengths]
    cache = tiny_model.new_cache(10, 20)
    for slot, ids, n in zip(slots, sequences, lengths, strict=True):
        tiny_model.prefill(cache, slot, ids[:n])
    for step in range(3):  # three batched steps, each sequence at its own position
        tokens = [ids[n + step] for ids, n in zip(sequences, lengths, strict=True)]
        batch = tiny_model.decode(cache, slots, tokens)
        assert batch.shape == (3, tiny_model.vocab_size)
        for row, (ids, n) in enumerate(zip(sequences, lengths, strict=True)):
            np.testing.assert_allclose(
                batch[row], one_prefill(tiny_model, ids[: n + step + 1]), atol=ATOL
            )
    assert [int(cache.lengths[s]) for s in slots] == [n + 3 for n in lengths]


def test_batched_decode_equals_separate_decodes(tiny_model):
    sequences = [random_ids(tiny_model, n, seed=n) for n in (3, 8, 5, 13)]
    together = tiny_model.new_cache(4, 16)
    for slot, ids in enumerate(sequences):
        tiny_model.prefill(together, slot, ids[:-1])
    batch = tiny_model.decode(together, [0, 1, 2, 3], [ids[-1] for ids in sequences])
    for slot, ids in enumerate(sequences):
        alone = tiny_model.new_cache(4, 16)
        tiny_model.prefill(alone, slot, ids[:-1])
        np.testing.assert_allclose(
            batch[slot], tiny_model.decode(alone, [slot], [ids[-1]])[0], atol=ATOL
        )


def test_prefill_extends_a_slot_and_chunks_equal_one_pass(tiny_model, monkeypatch):
    ids = random_ids(tiny_model, 40, seed=3)
    expected = one_prefill(tiny_model, ids)
    cache = tiny_model.new_cache(2, 40)
    tiny_model.prefill(cache, 1, ids[:17])
    np.testing.assert_allclose(tiny_model.prefill(cache, 1, ids[17:]), expected, atol=ATOL)
    monkeypatch.setattr(tiny_model, "prefill_chunk", 6)
    np.testing.assert_allclose(one_prefill(tiny_model, ids), expected, atol=ATOL)
    np.testing.assert_allclose(tiny_model.logits(ids)[-1], expected, atol=ATOL)


def test_logits_rows_are_the_prefixes_next_token_logits(tiny_model):
    ids = random_ids(tiny_model, 9, seed=4)
    logits = tiny_model.logits(ids)
    assert logits.shape == (9, tiny_model.vocab_size) and logits.dtype == np.float32
    for n in (1, 4, 9):
        np.testing.assert_allclose(logits[n - 1], one_prefill(tiny_model, ids[:n]), atol=ATOL)


def test_reset_truncate_and_copy_slot(tiny_model):
    ids = random_ids(tiny_model, 10, seed=5)
    cache = tiny_model.new_cache(3, 16)
    tiny_model.prefill(cache, 0, ids[:6])
    cache.copy_slot(0, 2)
    assert cache.lengths.tolist() == [6, 0, 6]
    np.testing.assert_allclose(
        tiny_model.decode(cache, [2], [ids[6]])[0], one_prefill(tiny_model, ids[:7]), atol=ATOL
    )
    cache.truncate(2, 3)
    np.testing.assert_allclose(
        tiny_model.prefill(cache, 2, ids[3:8]), one_prefill(tiny_model, ids[:8]), atol=ATOL
    )
    cache.reset(0)
    assert cache.lengths.tolist() == [0, 0, 8]
    np.testing.assert_allclose(
        tiny_model.prefill(cache, 0, ids[:2]), one_prefill(tiny_model, ids[:2]), atol=ATOL
    )
    cache.reset()
    assert cache.lengths.tolist() == [0, 0, 0]


def test_cache_errors(tiny_model):
    cache = tiny_model.new_cache(2, 4)
    with pytest.raises(CacheError, match="exceed max_len"):
        tiny_model.prefill(cache, 0, [5] * 5)
    tiny_model.prefill(cache, 0, [5] * 4)
    with pytest.raises(CacheError, match="full"):
        tiny_model.decode(cache, [0], [5])
    with pytest.raises(CacheError, match="distinct"):
        tiny_model.decode(cache, [1, 1], [5, 6])
    with pytest.raises(CacheError, match="does not exist"):
        tiny_model.prefill(cache, 2, [5])
    with pytest.raises(CacheError, match="within"):
        tiny_model.decode(cache, [1], [tiny_model.vocab_size])
    with pytest.raises(CacheError, match="at least one"):
        tiny_model.prefill(cache, 1, [])
    with pytest.raises(CacheError, match="as many"):
        tiny_model.decode(cache, [1], [5, 6])
    with pytest.raises(CacheError):
        cache.truncate(1, 3)
    assert cache.lengths.tolist() == [4, 0]  # failed calls change nothing


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_real_model_ragged_batch_equals_one_at_a_time(model, dtype):
    # float32 activations in the blocks' kernels (the module's `model`): the int8 ones are held
    # to their own bar (tests/model/test_int8_activations.py)
    model = model.with_plan(dataclasses.replace(model.plan, kv_dtype=np.dtype(dtype).name))
    sequences = [random_ids(model, n, seed=n) for n in (4, 19, 9)]
    cache = model.new_cache(3, 24)
    for slot, ids in enumerate(sequences):
        model.prefill(cache, slot, ids[:-1])
    batch = model.decode(cache, [1, 0, 2], [sequences[1][-1], sequences[0][-1], sequences[2][-1]])
    for row, slot in enumerate([1, 0, 2]):  # decode and prefill sum in other orders
        expected = one_prefill(model, sequences[slot])
        np.testing.assert_allclose(batch[row], expected, atol=RAGGED_TOLERANCE[dtype])


@pytest.mark.parametrize("chunk", [1024, 8])  # one shared pass; several passes, one split
def test_prefill_batch_equals_one_prefill_each(tiny_model, monkeypatch, chunk):
    monkeypatch.setattr(tiny_model, "prefill_chunk", chunk)
    sequences = [random_ids(tiny_model, n, seed=20 + n) for n in (3, 1, 12, 5, 2)]
    cache = tiny_model.new_cache(6, 16)
    tiny_model.prefill(cache, 4, sequences[3][:2])  # a slot that already holds a prefix
    slots = [5, 0, 2, 4, 1]
    tails = [ids[2:] if slot == 4 else ids for slot, ids in zip(slots, sequences, strict=True)]
    logits = tiny_model.prefill_batch(cache, slots, tails)
    assert logits.shape == (5, tiny_model.vocab_size) and logits.dtype == np.float32
    for row, ids in enumerate(sequences):
        np.testing.assert_allclose(logits[row], one_prefill(tiny_model, ids), atol=ATOL)
    assert [int(cache.lengths[s]) for s in slots] == [len(ids) for ids in sequences]
    # and decoding on from the batch-prefilled slots matches too
    step = tiny_model.decode(cache, slots, [7] * 5)
    for row, ids in enumerate(sequences):
        np.testing.assert_allclose(step[row], one_prefill(tiny_model, [*ids, 7]), atol=ATOL)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_short_chunks_as_decode_rows_equal_every_positions_logits(tiny_model, data):
    """`prefill_batch` of chunks of at most `DECODE_ROWS_MAX` tokens (one decode pass, a row
    per token, as jump-forward's forced tokens ride on a decode step) against `logits`, the
    whole sequence's every position in one prefill pass: each chunk's rows (`last`) and the
    slots' lengths, with slots holding prefixes of any length, in any order."""
    n = data.draw(st.integers(1, 4), label="sequences")
    slots = data.draw(st.permutations(range(5)), label="slots")[:n]
    prefixes = data.draw(st.lists(st.integers(0, 12), min_size=n, max_size=n), label="prefixes")
    sizes = data.draw(
        st.lists(st.integers(1, DECODE_ROWS_MAX), min_size=n, max_size=n), label="sizes"
    )
    last = [data.draw(st.integers(1, k), label="last") for k in sizes]
    seed = data.draw(st.integers(0, 2**16), label="seed")
    lengths = [p + k for p, k in zip(prefixes, sizes, strict=True)]
    full = [random_ids(tiny_model, length, seed + i) for i, length in enumerate(lengths)]
    cache = tiny_model.new_cache(5, 24)
    for slot, ids, p in zip(slots, full, prefixes, strict=True):
        if p:
            tiny_model.prefill(cache, slot, ids[:p])
    chunks = [ids[p:] for ids, p in zip(full, prefixes, strict=True)]
    rows = tiny_model.prefill_batch(cache, slots, chunks, last=last)
    expected = np.concatenate(
        [tiny_model.logits(ids)[len(ids) - k :] for ids, k in zip(full, last, strict=True)]
    )
    np.testing.assert_allclose(rows, expected, atol=ATOL)
    assert [int(cache.lengths[s]) for s in slots] == [len(ids) for ids in full]


def test_prefill_batch_errors_change_nothing(tiny_model):
    cache = tiny_model.new_cache(3, 8)
    with pytest.raises(CacheError, match="distinct"):
        tiny_model.prefill_batch(cache, [0, 0], [[5], [6]])
    with pytest.raises(CacheError, match="exceed max_len"):
        tiny_model.prefill_batch(cache, [0, 1], [[5] * 3, [6] * 9])
    with pytest.raises(CacheError, match="at least one"):
        tiny_model.prefill_batch(cache, [0, 1], [[5], []])
    assert cache.lengths.tolist() == [0, 0, 0]

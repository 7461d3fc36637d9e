"""The masked LM head (`llama.lm_head`'s `allowed`, docs/design.md section 4: the mask comes before
the log-softmax, so a constrained row needs only the logits its mask allows): a chosen logit is
the whole head's at batch 1 bit for bit on the blocks, within float rounding on float32 rows;
every other logit of a masked row is -inf; rows asked whole are the whole head's."""

from __future__ import annotations

import numpy as np
import pytest
from corral.model import llama
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def model(model, float32_plan):
    """The default model on float32 activations over a float32 KV cache (`float32_plan`)."""
    return model.with_plan(float32_plan)


@pytest.fixture(scope="module")
def hidden(model):
    """Final hidden states (float32 [6, d]): the last position of six short real prompts."""
    cache = model.new_cache(6, 32)
    texts = ['{"name": "', "Hello", "[1, 2,", "The answer is", "<|im_start|>user\nhi", "a"]
    prompts = [model.tokenizer.encode(text) for text in texts]
    last, *_ = model._prefill(cache, list(range(6)), prompts, all_positions=False)
    return last


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_chosen_logits_are_the_whole_heads_and_the_rest_is_minus_infinity(model, hidden, data):
    v = model.config.vocab_size
    rows = data.draw(st.integers(1, len(hidden)))
    x = hidden[:rows]
    allowed = []
    for _ in range(rows):
        n = data.draw(st.sampled_from([None, 1, 5, 17, 256]))
        seed = data.draw(st.integers(0, 2**32 - 1))
        ids = None if n is None else np.sort(np.random.default_rng(seed).choice(v, n, False))
        allowed.append(ids)
    got = llama.lm_head(model.params, x, allowed)
    assert got.shape == (rows, v) and got.dtype == np.float32
    whole = [i for i, ids in enumerate(allowed) if ids is None]
    if whole:  # rows asked whole: the head of those rows, as one pass
        assert np.array_equal(got[whole], llama.lm_head(model.params, x[whole]))
    for i, ids in enumerate(allowed):
        if ids is None:
            continue
        one = llama.lm_head(model.params, x[i : i + 1])[0]  # batch 1: the one-row product
        assert np.array_equal(got[i, ids], one[ids])
        rest = np.ones(v, bool)
        rest[ids] = False
        assert np.all(got[i, rest] == -np.inf)


def test_on_float32_rows_the_chosen_logits_agree_within_rounding(model, hidden):
    params = {k: v for k, v in model.params.items() if not k.startswith("lm_head_block")}
    ids = np.arange(0, model.config.vocab_size, 97)
    got = llama.lm_head(params, hidden, [ids] * len(hidden))
    whole = llama.lm_head(params, hidden)
    np.testing.assert_allclose(got[:, ids], whole[:, ids], rtol=1e-5, atol=1e-4)
    assert np.isneginf(np.delete(got, ids, axis=1)).all()


def test_allowed_needs_one_entry_a_row_of_ids_in_the_vocabulary(model, hidden):
    with pytest.raises(ValueError, match="one entry a row"):
        llama.lm_head(model.params, hidden, [None, np.arange(3)])
    v = model.config.vocab_size
    for bad in ([v], [-1], [0, v + 5]):
        with pytest.raises(ValueError, match=r"allowed\[1\] holds a token id outside"):
            llama.lm_head(model.params, hidden[:2], [None, bad])

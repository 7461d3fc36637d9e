"""The default forward pass where the CPU has AMX (int8 activations on AMX tiles,
`quant.every_pass`, and attention in an order fixed by positions, `llama.POSITIONAL_ATTENTION`,
over the float16 cache): a token's logits are the same bit for bit however the passes that
led to it were made up, so a seeded request samples the same tokens alone or in a batch, after
a prefix-cache hit or not, with jump-forward chunks or token by token (DESIGN.md section 6)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.model import quant
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.skipif(
    not quant.every_pass(), reason="bit-identical compositions need the AMX kernels"
)

PROMPT = (
    "Describe a person as JSON, with a name, an age, a list of hobbies and an address with a"
    " street, a city and a country."
)


@pytest.fixture(scope="module")
def ids(model) -> list[int]:
    return model.tokenizer.encode(model.render_chat([{"role": "user", "content": PROMPT}]))


@pytest.fixture(scope="module")
def whole(model, ids) -> np.ndarray:
    """The last token's logits with the prompt prefilled in one pass."""
    return model.prefill(model.new_cache(1, len(ids)), 0, ids)


@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_a_prompt_in_pieces_gives_the_logits_of_the_prompt_whole(model, ids, whole, data):
    cuts = sorted(data.draw(st.sets(st.integers(1, len(ids) - 1), max_size=4)))
    cache = model.new_cache(1, len(ids))
    for begin, end in zip([0, *cuts], [*cuts, len(ids)], strict=True):
        logits = model.prefill(cache, 0, ids[begin:end])
    np.testing.assert_array_equal(logits, whole)


def test_token_by_token_gives_the_logits_of_the_prompt_whole(model, ids, whole):
    cache = model.new_cache(1, len(ids))
    model.prefill(cache, 0, ids[:20])
    for token in ids[20:]:
        logits = model.decode(cache, [0], [token])[0]
    np.testing.assert_array_equal(logits, whole)


def test_in_a_batch_a_prompt_gives_its_logits_alone(model, ids, whole):
    others = [ids[:7], model.tokenizer.encode("Paris is the capital of"), ids[3:]]
    cache = model.new_cache(4, len(ids))
    logits = model.prefill_batch(cache, [0, 1, 2, 3], [others[0], ids, others[1], others[2]])
    np.testing.assert_array_equal(logits[1], whole)

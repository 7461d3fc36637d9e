"""Batch invariance: a token's logits are the same bit for bit however the passes that led to it
were made up (docs/design.md section 6), on every numerics plan this machine runs: a prompt
prefilled whole or in pieces, after a prefix copied from another slot (the prefix cache),
token by token, alone or beside other sequences in passes of any size (prompts of more than
`quant.QUANTIZED_MAX_ROWS` tokens included), so a seeded request samples the same tokens alone,
in any batch, or after a `--resume`.

The plans, each built directly (a `ComputePlan`): float32 activations (the default without AMX:
every pass from the blocks, attention in positional order) in the kernels of 16 lanes (AVX-512)
and of 8 (AVX2's shape) over a float32 and a float16 KV cache; int8 activations on AVX-512 VNNI;
int8 on AMX tiles (the default there). Each plan the CPU lacks is skipped with its reason, as are
float32 weights (every product a BLAS GEMM)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.kernels.compute.plan import ComputePlan
from corral.model import quant
from hypothesis import given, settings
from hypothesis import strategies as st

PROMPT = (
    "Describe a person as JSON, with a name, an age, a list of hobbies and an address with a"
    " street, a city and a country. Then describe a second person, older than the first, who"
    " lives in another country and has no hobbies at all, in the same format."
)
OTHERS = (
    "Paris is the capital of",
    "Write a haiku about the sea, then explain each of its lines in one sentence.",
    "1, 2, 3,",
)

PLANS = {
    "float32 x, float32 cache": ComputePlan("float32", 16),
    "float32 x, float16 cache": ComputePlan("float32", 16, kv_dtype="float16"),
    "float32 x in 8 lanes (AVX2)": ComputePlan("float32", 8, one_row_q4_1_in_registers=True),
    "int8 x on VNNI": ComputePlan("int8-vnni", 16),
    "int8 x on AMX": ComputePlan("int8-amx", 16, kv_dtype="float16"),
    "float32 weights": None,
}


@pytest.fixture(scope="module", params=list(PLANS))
def model(request, model):
    """The session model under one plan (`Model.with_plan`)."""
    plan = PLANS[request.param]
    if plan is None:
        pytest.skip("float32 weights multiply in BLAS GEMMs, whose sums' order follows the rows")
    reason = plan.missing()
    if reason is not None:
        pytest.skip(f"{request.param}: {reason}")
    return model.with_plan(plan)


@pytest.fixture(scope="module")
def ids(model) -> list[int]:
    ids = model.tokenizer.encode(model.render_chat([{"role": "user", "content": PROMPT}]))
    assert len(ids) > quant.QUANTIZED_MAX_ROWS  # a pass that main's code gave BLAS
    return ids


@pytest.fixture(scope="module")
def others(model) -> list[list[int]]:
    return [model.tokenizer.encode(text) for text in OTHERS]


@pytest.fixture(scope="module")
def whole(model, ids) -> np.ndarray:
    """The logits after every prompt position, the prompt prefilled in one pass, then the
    last token's."""
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


def test_in_a_batch_a_prompt_gives_its_logits_alone(model, ids, others, whole):
    batch = [ids[:7], ids, others[0], ids[3:], others[1]]
    cache = model.new_cache(len(batch), len(ids))
    logits = model.prefill_batch(cache, list(range(len(batch))), batch)
    np.testing.assert_array_equal(logits[1], whole)


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_any_composition_of_passes_gives_the_logits_of_the_prompt_whole(
    model, ids, others, whole, data
):
    """The prompt's first tokens copied from another slot that prefilled them (the prefix
    cache) or prefilled, then the rest in pieces, each pass shared with other sequences
    (prefilled in any number, or decoded one token each beside a one-token piece), the last
    token's logits asked with the masked LM head (where the whole head's products are float32
    ones, as the chosen rows') or whole."""
    float_head = model.plan.activations == "float32"  # the masked head's products are float32
    companions = data.draw(st.integers(0, 9), label="companions")
    slots = companions + 2  # the prompt's slot 0, its prefix's donor slot 1, the others
    cache = model.new_cache(slots, len(ids) + 40)
    start = data.draw(st.integers(0, len(ids) - 1), label="prefix")
    if start and data.draw(st.booleans(), label="copied"):
        model.prefill(cache, 1, ids[:start])
        cache.copy_prefix(1, 0, start)
    elif start:
        model.prefill(cache, 0, ids[:start])
    for slot in range(2, slots):  # each companion holds a few tokens of another text
        text = others[slot % len(others)]
        model.prefill(cache, slot, text[: 1 + slot % len(text)])
    while start < len(ids):
        end = data.draw(st.integers(start + 1, len(ids)), label="piece end")
        joined = (
            sorted(data.draw(st.sets(st.integers(2, slots - 1)), label="with"))
            if companions
            else []
        )
        extra = [int(ids[(slot * 7) % len(ids)]) for slot in joined]
        last = end == len(ids)
        allowed = None
        if last and float_head and data.draw(st.booleans(), label="masked head"):
            allowed = [np.arange(0, model.vocab_size, 97)] + [None] * len(joined)
        if end - start == 1 and data.draw(st.booleans(), label="decode"):
            logits = model.decode(cache, [0, *joined], [ids[start], *extra], allowed)[0]
        else:
            pieces = [ids[start:end]] + [[token] * (1 + slot % 3) for slot, token in
                                         zip(joined, extra, strict=True)]  # fmt: skip
            logits = model.prefill_batch(cache, [0, *joined], pieces, allowed)[0]
        start = end
    if allowed is None:
        np.testing.assert_array_equal(logits, whole)
    else:
        np.testing.assert_array_equal(logits[allowed[0]], whole[allowed[0]])

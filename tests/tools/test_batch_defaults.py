"""A Batch line without `max_tokens` may use what the context leaves, as in the API, whatever
its neighbours ask (issue 33, item 2), on the stand-in model (fast)."""

import io
import json

import pytest
from corral.model import kv_cache
from corral.model.generate import CacheWarning
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

CONTEXT = 96


def request_line(custom_id: str, **body) -> str:
    """A Batch line as a user sends it: only the fields given (no max_tokens unless asked)."""
    body.setdefault("messages", [{"role": "user", "content": custom_id}])
    return json.dumps({"custom_id": custom_id, "body": body})


def run(lines, eos_bias=0.0, batch_size=16) -> dict[str, dict]:
    out = io.StringIO()
    engine = Completions(StandInModel(context=CONTEXT, eos_bias=eos_bias))
    run_batch(engine, lines, out, batch_size=batch_size, progress=False)
    items = [json.loads(text) for text in out.getvalue().splitlines()]
    return {item["custom_id"]: item["response"] for item in items}


def answer(response: dict) -> tuple:
    assert response["status_code"] == 200, response
    choice = response["body"]["choices"][0]
    usage = response["body"]["usage"]
    return choice["message"]["content"], choice["finish_reason"], usage["completion_tokens"]


def test_a_line_without_max_tokens_alone_uses_what_the_context_leaves():
    response = run([request_line("t", temperature=0)], eos_bias=-100.0)["t"]
    content, reason, tokens = answer(response)
    assert reason == "length"
    assert tokens == CONTEXT - response["body"]["usage"]["prompt_tokens"]


@settings(max_examples=25, deadline=None)
@given(
    sampling=st.sampled_from([{"temperature": 0}, {"temperature": 1, "seed": 11}]),
    own=st.sampled_from([None, 5, 40]),
    neighbours=st.lists(st.sampled_from([None, 1, 3, 8, 30]), min_size=1, max_size=5),
    batch_size=st.integers(1, 4),
    eos_bias=st.sampled_from([-100.0, 0.0, 3.0]),
)
def test_a_line_answers_the_same_alone_and_next_to_any_neighbours(
    sampling, own, neighbours, batch_size, eos_bias
):
    limit = {} if own is None else {"max_tokens": own}
    target = request_line("target", **sampling, **limit)
    others = [
        request_line(f"n{i}", seed=i, **({} if m is None else {"max_tokens": m}))
        for i, m in enumerate(neighbours)
    ]
    alone = run([target], eos_bias)["target"]
    for lines in ([target, *others], [*others, target]):
        together = run(lines, eos_bias, batch_size)["target"]
        assert answer(together) == answer(alone)
    content, reason, tokens = answer(alone)
    bound = own if own is not None else CONTEXT - alone["body"]["usage"]["prompt_tokens"]
    assert tokens <= bound
    if eos_bias == -100.0:  # EOS never comes: the bound is reached, the context or max_tokens
        assert (reason, tokens) == ("length", bound)


def _memory_for(tokens: int) -> int:
    """The memory available at which the engine's cache budget holds `tokens` tokens."""
    per_token = kv_cache.KVCache.bytes_needed(StandInModel().config, 1, 1)
    return int(tokens * per_token / kv_cache.MEMORY_SHARE)


def test_lines_too_long_for_a_full_batch_run_after_the_others_in_fewer_slots(monkeypatch):
    lines = [
        request_line("free", temperature=0),
        request_line("free too", seed=5),
        *(request_line(f"short{i}", seed=i, max_tokens=4) for i in range(5)),
    ]
    ample = run(lines, eos_bias=-100.0, batch_size=4)
    # room for 4 slots of 40 tokens, or 1 slot of the whole context (96) and some
    monkeypatch.setattr(kv_cache, "available_memory", lambda: _memory_for(4 * 40))
    with pytest.warns(CacheWarning):
        tight = run(lines, eos_bias=-100.0, batch_size=4)
    assert {k: answer(v) for k, v in tight.items()} == {k: answer(v) for k, v in ample.items()}
    content, reason, tokens = answer(tight["free"])
    assert tokens == CONTEXT - tight["free"]["body"]["usage"]["prompt_tokens"]


def test_a_line_no_slot_can_hold_gets_its_own_error_naming_the_figures(monkeypatch):
    lines = [request_line("free", temperature=0), request_line("short", seed=1, max_tokens=4)]
    ample = run(lines, eos_bias=-100.0)
    monkeypatch.setattr(kv_cache, "available_memory", lambda: _memory_for(50))
    tight = run(lines, eos_bias=-100.0)
    assert answer(tight["short"]) == answer(ample["short"])
    error = tight["free"]["body"]["error"]
    assert tight["free"]["status_code"] == 400
    assert (error["param"], error["code"]) == ("max_tokens", "kv_cache_memory_exceeded")
    prompt = ample["free"]["body"]["usage"]["prompt_tokens"]
    assert f"slot of {CONTEXT} tokens" in error["message"]
    assert f"a max_tokens of at most {50 - prompt} fits" in error["message"]
    # the max_tokens the message names is answered
    fits = run([request_line("free", temperature=0, max_tokens=50 - prompt)], eos_bias=-100.0)
    assert answer(fits["free"])[2] == 50 - prompt

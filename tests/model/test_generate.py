"""The generation engine (corral.model.generate) on a stand-in model (tests/model/fake_model.py):
batching, budgets, triggers and seeds, checked fast and exactly."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from corral.automata import regex_to_dfa
from corral.kernels import Constraint, SamplingParams, TokenIndex, Vocabulary
from corral.model.errors import ContextLengthError, RequestError
from corral.model.generate import (
    BudgetTooSmallError,
    GenerationRequest,
    Generator,
    UnwritableGrammarError,
    check_budget,
    generate,
)
from fake_model import EOS, PIECES, FakeModel, ScriptedModel, index_of, tokens
from hypothesis import given, settings
from hypothesis import strategies as st

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_tokens=st.integers(1, 60))
def test_constrained_answers_are_valid_whatever_the_budget(seed, max_tokens):
    """Budget-aware ending: every answer that fits is complete, valid and ends with stop."""
    constraint = Constraint(index_of(CITY))
    request = GenerationRequest([1, 2, 3], max_tokens, SamplingParams(), seed, (), constraint)
    if constraint.tokens_to_complete() > max_tokens:
        with pytest.raises(BudgetTooSmallError):
            generate(FakeModel(), [request])
        return
    (result,) = generate(FakeModel(), [request])
    assert result.finish_reason == "stop"
    assert result.completion_tokens <= max_tokens
    jsonschema.validate(json.loads(result.text), CITY)


def test_without_budget_awareness_the_answer_is_cut():
    constraint = Constraint(index_of(pattern="a[0-9]{30}"))
    params = SamplingParams(temperature=0)
    cut = GenerationRequest([5], 5, params, 0, (), constraint, budget_aware=False)
    (result,) = generate(FakeModel(), [cut])
    assert result.finish_reason == "length"
    assert len(result.token_ids) == 5
    with pytest.raises(BudgetTooSmallError):
        check_budget(GenerationRequest([5], 5, params, 0, (), constraint))


def test_same_request_same_output_alone_or_in_any_batch():
    index = index_of(CITY)
    requests = [
        GenerationRequest(
            [7, i], 40, SamplingParams(temperature=1.0), seed=i, constraint=Constraint(index)
        )
        for i in range(6)
    ] + [
        GenerationRequest([9, i], 12, SamplingParams(temperature=0.8), seed=100 + i)
        for i in range(4)
    ]
    alone = [generate(FakeModel(), [r])[0] for r in requests]
    for batch_size in (1, 3, 16):
        model = FakeModel()
        together = generate(model, requests, batch_size=batch_size)
        assert together == alone
        assert max(model.decode_batches) <= batch_size


def test_continuous_batching_refills_free_slots():
    """With 2 slots and 5 requests of different lengths, slots are reused as sequences end."""
    lengths = [1, 9, 2, 3, 4]
    requests = [GenerationRequest([i], n, SamplingParams(), i) for i, n in enumerate(lengths)]
    model = FakeModel(bias={EOS: -100.0})
    results = generate(model, requests, batch_size=2)
    assert [r.completion_tokens for r in results] == lengths
    assert all(r.finish_reason == "length" for r in results)
    assert max(model.decode_batches) == 2


def test_eos_ends_free_text_and_is_not_in_the_text():
    model = FakeModel(bias={EOS: 100.0})
    (result,) = generate(model, [GenerationRequest([1], 10, SamplingParams(), 0)])
    assert result.finish_reason == "stop"
    assert result.token_ids == () and result.text == ""
    assert result.completion_tokens == 0  # EOS writes nothing: usage counts what logprobs list


def test_stop_strings_cut_free_text():
    # "Paris" is made very likely, so the stop string appears early
    model = FakeModel(bias={PIECES.index(b"Paris"): 50.0})
    request = GenerationRequest([1], 20, SamplingParams(), 0, stop=("ri",))
    (result,) = generate(model, [request])
    assert result.finish_reason == "stop"
    assert result.text == "Pa"


@pytest.mark.parametrize(
    "script",
    [
        (b"Hi", b" ", b"<tool", b"_call>"),  # the trigger ends on a token boundary
        (b"<tool", b"_", b"c", b"a", b"l", b"l", b'>{"'),  # a token runs past the trigger
    ],
)
def test_trigger_starts_the_constraint(script):
    pattern = r'\{"city":"[a-z]+"\}</tool_call>'
    script = [b"H", b"i"] + list(script[2:]) if script[0] == b"Hi" else list(script)
    model = ScriptedModel(1, tokens(*script))
    request = GenerationRequest(
        [3], 60, SamplingParams(), 0, (), Constraint(index_of(pattern=pattern)), "<tool_call>"
    )
    (result,) = generate(model, [request])
    before, opener, after = result.text.partition("<tool_call>")
    assert opener and "<tool_call>" not in before
    assert re.fullmatch(pattern, after), result.text
    assert result.finish_reason == "stop"


def test_trigger_respells_a_token_that_runs_into_refused_bytes():
    """`>{"` completes `<tool_call` into the trigger but the grammar wants `[`: the token is
    replaced by `>` and the constraint starts cleanly after the trigger."""
    script = tokens(b"<tool", b"_", b"c", b"a", b"l", b"l", b'>{"')
    model = ScriptedModel(1, script)
    request = GenerationRequest(
        [3], 30, SamplingParams(), 0, (), Constraint(index_of(pattern=r"\[1\]")), "<tool_call>"
    )
    (result,) = generate(model, [request])
    assert result.text == "<tool_call>[1]"
    assert result.token_ids[6] == PIECES.index(b">")
    assert result.finish_reason == "stop"


def test_a_trigger_too_late_for_the_budget_is_not_written():
    """Under a trigger, the budget cannot be checked up front: the trigger is allowed only while
    the tokens left can finish the shortest call (`corral.kernels.masks.trigger`), so a model that
    wants to call with too few tokens left writes other text (`length`), and the rest of the
    batch is unaffected."""
    script = tokens(b"<tool", b"_call>")
    pattern = r'\{"city":"[a-z]{20}"\}</tool_call>'
    late = GenerationRequest(
        [3], 4, SamplingParams(), 0, (), Constraint(index_of(pattern=pattern)), "<tool_call>"
    )
    other = GenerationRequest([4], 6, SamplingParams(), 1)
    late_result, other_result = generate(ScriptedModel(1, script), [late, other])
    assert late_result.finish_reason == "length"
    assert late_result.text.startswith("<tool") and "<tool_call>" not in late_result.text
    assert other_result.completion_tokens == 6 or other_result.finish_reason == "stop"


def test_requests_join_between_steps_and_end_as_they_would_alone():
    """A `Generator` takes requests at any time; each result equals the one it gets alone."""
    index = index_of(CITY)
    requests = [
        GenerationRequest([7, i], 30, SamplingParams(), seed=i, constraint=Constraint(index))
        for i in range(5)
    ]
    alone = generate(FakeModel(), requests)
    engine = Generator(FakeModel(), batch_size=2, max_len=64)
    results, pending = {}, list(requests)
    handles = [engine.submit(pending.pop(0))]
    while engine.has_work:
        for handle, result in engine.step():
            results[handle] = result
        if pending:  # one more joins after every step
            handles.append(engine.submit(pending.pop(0)))
    assert handles == list(range(5))
    assert [results[h] for h in handles] == alone
    assert engine.step() == [] and not engine.has_work


def test_submit_refuses_one_request_and_keeps_the_others():
    engine = Generator(FakeModel(), batch_size=2, max_len=40)
    good = engine.submit(GenerationRequest([1], 5, SamplingParams(), 0))
    too_small = GenerationRequest([1], 1, SamplingParams(), 0, (), Constraint(index_of(CITY)))
    with pytest.raises(BudgetTooSmallError):
        engine.submit(too_small)
    with pytest.raises(RequestError, match="at most 40 tokens per sequence") as caught:
        engine.submit(GenerationRequest([1] * 30, 11, SamplingParams(), 0))  # past max_len
    assert not isinstance(caught.value, ContextLengthError)  # the model's context is larger
    with pytest.raises(RequestError, match="at most 40 tokens per sequence") as caught:
        engine.submit(GenerationRequest([1] * 30, 4067, SamplingParams(), 0))  # past both
    assert "4096" not in str(caught.value)  # the limit named is the one the engine enforces
    with pytest.raises(BudgetTooSmallError):
        engine.submit(GenerationRequest([1], 0, SamplingParams(), 0))
    finished = []
    while engine.has_work:
        finished += engine.step()
    assert [handle for handle, _ in finished] == [good]


def test_partial_text_grows_and_cancel_frees_the_slot():
    """Between steps `partial_text` shows each live request's bytes so far (a prefix of its
    final text); `cancel` drops a live or waiting request and its slot goes to the next one."""
    requests = [GenerationRequest([3, i], 12, SamplingParams(), seed=i) for i in range(3)]
    (alone,) = generate(FakeModel(bias={EOS: -100.0}), requests[2:])
    engine = Generator(FakeModel(bias={EOS: -100.0}), batch_size=1, max_len=64)
    first, second, third = (engine.submit(r) for r in requests)
    seen = b""
    for _ in range(3):
        assert engine.step() == []
        text = engine.partial_text()[first]
        assert text.startswith(seen) and len(text) > len(seen)
        seen = text
    assert engine.cancel(second)  # waiting: leaves the queue
    assert engine.cancel(first)  # live: frees the slot
    assert not engine.cancel(first)
    assert engine.partial_text() == {} and engine.n_waiting == 1
    finished = []
    while engine.has_work:
        finished += engine.step()
    assert finished == [(third, alone)]


PIECES_OF_PATTERNS = ["a", "\\x04", "\\x1d", "(a|\\x04)", "(\\x04|\\x1d)", "b?", "[\\x00-\\x05]"]
MISSING = (0x04, 0x1D)  # bytes no token of this vocabulary holds (as in SmolLM2's vocabulary)
GAPPED = Vocabulary(tuple(p for p in PIECES if not set(MISSING) & set(p)) + (None,), ())


def writable(dfa) -> bool:
    """Brute force: an accepting state is reachable from the start over bytes other than
    MISSING (every other byte is a one-byte token of GAPPED)."""
    seen, todo = {0}, [0]
    while todo:
        state = todo.pop()
        if dfa.accept[state]:
            return True
        for byte in range(256):
            target = int(dfa.trans[state, byte])
            if byte not in MISSING and target >= 0 and target not in seen:
                seen.add(target)
                todo.append(target)
    return False


@settings(max_examples=40, deadline=None)
@given(
    pattern=st.lists(
        st.sampled_from(
            ["a", "\\x04", "\\x1d", "(a|\\x04)", "(\\x04|\\x1d)", "b?", "[\\x00-\\x05]"]
        ),
        min_size=1,
        max_size=4,
    ).map("".join),
    max_tokens=st.integers(1, 10),
)
def test_a_grammar_no_token_can_write_is_refused_as_such_whatever_the_budget(pattern, max_tokens):
    """A constraint whose every answer needs a byte the vocabulary lacks is an
    UnwritableGrammarError (not a budget of "-1 tokens"); any other is judged on its budget."""
    dfa = regex_to_dfa(pattern)
    constraint = Constraint(TokenIndex(dfa, GAPPED))
    request = GenerationRequest([1], max_tokens, SamplingParams(), 0, (), constraint)
    if not writable(dfa):
        with pytest.raises(UnwritableGrammarError, match="no answer can be written"):
            check_budget(request)
        return
    try:
        check_budget(request)
    except BudgetTooSmallError as error:
        assert constraint.tokens_to_complete() > max_tokens and "-1" not in str(error)


def test_a_sequence_that_ends_takes_no_more_forward_passes():
    """The last token of a spent budget or of a complete answer with nothing left to allow is
    never fed to the model: its logits could not change the outcome."""
    model = FakeModel(bias={EOS: -1000.0})
    (free,) = generate(model, [GenerationRequest([5], 3, SamplingParams(), 0)])
    assert (free.completion_tokens, free.finish_reason) == (3, "length")
    assert model.decode_batches == [1, 1]  # after tokens 1 and 2, not 3
    model = FakeModel()
    request = GenerationRequest([5], 9, seed=0, constraint=Constraint(index_of(pattern="a[0-9]")))
    (answer,) = generate(model, [request])
    assert re.fullmatch("a[0-9]", answer.text) and answer.finish_reason == "stop"
    assert model.decode_batches == [1]  # after "a"; the digit completes the answer

"""One step, one question per sequence (docs/engine.md): the engine asks each sequence once per
step what it needs next (`LiveSequence.need`: `Sample`, `Force` or `Finish`), a question with no
side effect, and computes its next mask once: for the masked LM head and the sampler alike.

On the tiny random checkpoint (`tiny_model`: a real forward pass with the masked LM head and a
byte-level BPE tokenizer for jump-forward), with free, constrained and triggered requests."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import schema_to_dfa
from corral.kernels import Constraint, SamplingParams, TokenIndex
from corral.model import sequence as sequence_module
from corral.model.generate import BudgetTooSmallError, GenerationRequest, Generator
from corral.model.sequence import Finish, Force, LiveSequence, Sample
from hypothesis import given, settings
from hypothesis import strategies as st

SCHEMAS = [
    {
        "type": "object",
        "properties": {"days": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["days", "ok"],
    },
    {"type": "array", "items": {"enum": ["hello", "hell", "help"]}, "minItems": 2, "maxItems": 4},
    {"enum": ["hello, well", "hello, hello", "well"]},
]


@pytest.fixture(scope="module")
def indexes(tiny_model):
    return [TokenIndex(schema_to_dfa(s), tiny_model.vocabulary) for s in SCHEMAS]


def state(seq: LiveSequence):
    """Everything of `seq` a question could change."""

    def at(c):
        return None if c is None else (c.state, c.done)

    return (
        list(seq.ids), list(seq.logprobs), bytes(seq.text), list(seq.forced), seq.generated,
        seq.finish_reason, seq.awaiting, at(seq.constraint), at(seq.waiting),
        seq.rng.bit_generator.state, None if seq.top is None else list(seq.top),
    )  # fmt: skip


def same_need(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, Sample):
        masks_agree = (a.mask is None) == (b.mask is None) and (
            a.mask is None or np.array_equal(a.mask, b.mask)
        )
        return masks_agree and a.constrained == b.constrained
    return a == b


request_kinds = st.sampled_from(["free", "stop", "constrained", "cut", "no-jump", "trigger"])


@settings(max_examples=25, deadline=None)
@given(
    kinds=st.lists(request_kinds, min_size=1, max_size=4),
    schema=st.integers(0, len(SCHEMAS) - 1),
    max_tokens=st.sampled_from([None, 3, 12, 40]),
    temperature=st.sampled_from([0.0, 1.0]),
    top=st.sampled_from([None, 2]),
    batch_size=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_sequence_is_asked_once_a_step_and_its_mask_computed_once(
    tiny_model, indexes, kinds, schema, max_tokens, temperature, top, batch_size, seed
):
    """A sequence is asked once a token (in its first step twice: at admission for the step's
    token, then for the next), asking changes nothing (asked again, it answers the same), and
    the masks computed (the constraint's and a trigger's budget mask) are at most one a
    question, though the masked LM head reads a constrained row's mask before the forward pass
    and the sampler after it."""
    tokenizer = tiny_model.tokenizer
    index = indexes[schema]
    hell = tokenizer.encode("hell")[0]  # one token: it completes the trigger "hel" and runs on
    requests = []
    for k, kind in enumerate(kinds):
        constrained = kind in ("constrained", "cut", "no-jump", "trigger")
        try_tokens = max_tokens
        if constrained and kind != "cut" and max_tokens is not None:
            try_tokens = max(max_tokens, 12)  # the budget holds the shortest answer
        requests.append(
            GenerationRequest(
                tokenizer.encode(f"Write {kind} number {k}:"),
                try_tokens,
                SamplingParams(temperature=temperature),
                seed + k,
                stop=("ll",) if kind == "stop" else (),
                constraint=Constraint(index) if constrained else None,
                trigger="hel" if kind == "trigger" else None,
                budget_aware=kind != "cut",
                logit_bias={hell: 4.0} if kind == "trigger" else None,
                top_logprobs=top,
                jump_forward=kind != "no-jump",
            )
        )
    steps, submitted, ended = run_counted(tiny_model, batch_size, requests)
    assert ended == submitted
    for asked, masks, before, after in steps:
        admitted = after - before  # asked at admission too, for the step's own token
        for handle in before | after:
            assert asked.count(handle) <= 1 + (handle in admitted)  # once a token
        assert masks <= len(before | after) + len(admitted)  # one mask a question, at most
        assert masks <= len(asked)


def run_counted(model, batch_size: int, requests: list[GenerationRequest]):
    """Run `requests` (those `submit` takes) on a `Generator`, each `need` checked for side
    effects and asked twice; returns ([(handles asked, masks computed, handles live before the
    step, handles live after it or ended in it) per step], requests submitted, requests
    ended)."""
    masks = [0]
    asked: list[int] = []
    mask, trigger_mask, need = Constraint.mask, sequence_module.trigger_mask, LiveSequence.need

    def counted_mask(self, *args, **kwargs):
        masks[0] += 1
        return mask(self, *args, **kwargs)

    def counted_trigger_mask(*args, **kwargs):
        masks[0] += 1
        return trigger_mask(*args, **kwargs)

    def checked_need(self):
        before = state(self)
        answer = need(self)
        assert state(self) == before  # no side effect
        computed = masks[0]
        assert same_need(need(self), answer)  # asked again: the same answer
        masks[0] = computed  # the check's own masks are not the engine's
        asked.append(self.handle)
        return answer

    steps, submitted, ended = [], 0, 0
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Constraint, "mask", counted_mask)
        patch.setattr(sequence_module, "trigger_mask", counted_trigger_mask)
        patch.setattr(LiveSequence, "need", checked_need)
        engine = Generator(model, batch_size, 96)
        for request in requests:
            try:
                engine.submit(request)
                submitted += 1
            except BudgetTooSmallError:  # a budget too small for the grammar
                pass
        while engine.has_work:
            before = {seq.handle for seq in engine._live}
            masks[0], asked[:] = 0, []
            finished = engine.step()
            ended += len(finished)
            after = {seq.handle for seq in engine._live} | {h for h, _ in finished}
            steps.append((list(asked), masks[0], before, after))
    return steps, submitted, ended


def test_a_need_answers_what_the_next_step_does(tiny_model, indexes):
    """`Finish` for an answer complete with nothing left to allow, and for a spent budget
    ("length" when the answer is not complete); `Sample` under the constraint's mask, marked
    constrained; free text is a `Sample` without a mask; a respelled trigger's tokens `Force`."""
    tokenizer = tiny_model.tokenizer
    done = Constraint(indexes[2])
    done.advance_bytes(b'"well"')
    request = GenerationRequest(tokenizer.encode("hi"), 5, SamplingParams(), 0, (), done)
    seq = LiveSequence(0, request, 0, tiny_model.vocabulary)
    assert seq.need() == Finish("stop")
    request = GenerationRequest(tokenizer.encode("hi"), 5, constraint=Constraint(indexes[2]))
    seq = LiveSequence(0, request, 0, tiny_model.vocabulary)
    need = seq.need()
    assert isinstance(need, Sample) and need.constrained
    assert np.array_equal(need.mask, Constraint(indexes[2]).mask(5))
    seq.generated = 5
    assert seq.need() == Finish("length")
    free = LiveSequence(1, GenerationRequest(tokenizer.encode("hi"), 5), 1, tiny_model.vocabulary)
    need = free.need()
    assert isinstance(need, Sample) and need.mask is None and not need.constrained
    free.forced.extend([7, 8])
    assert free.need() == Force(7)

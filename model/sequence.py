"""One request while it runs in a `Generator` (`LiveSequence`: its tokens, logprobs and text, its
constraint, stop strings, lazy trigger and jump-forward) and what it needs at its next step
(`Need`: `Sample`, `Force` or `Finish`). The rules it carries out are in docs/engine.md.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
from corral.kernels import (
    GREEDY,
    SampleRow,
    TokenNotAllowedError,
    Vocabulary,
    sample_batch,
    top_logprobs,
)
from corral.kernels.masks.trigger import trigger_mask
from corral.model.generation_request import GenerationRequest, GenerationResult
from corral.model.jump_forward import ForcedTokenizer


@dataclass(frozen=True, eq=False, slots=True)
class Sample:
    """The next token is sampled from the logits the sequence receives.

    Attributes:
        mask: packed uint32 `[ceil(V / 32)]` of the tokens allowed (shared: never written), or
            None for the whole vocabulary.
        constrained: the mask is the constraint's, so that only the logits of the tokens it
            allows are needed (the masked LM head); False for free text, masked or not.
    """

    mask: np.ndarray | None = None
    constrained: bool = False


@dataclass(frozen=True, slots=True)
class Force:
    """The next token is `token`, already chosen (the rest of a respelled trigger): it is
    written with its logprob over the whole vocabulary, so the logits are needed whole."""

    token: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The sequence ends whatever the logits, with finish_reason `reason` ("stop" or
    "length"): it needs no forward pass."""

    reason: str


Need = Sample | Force | Finish
"""What a sequence needs at its next step (`LiveSequence.need`)."""
FREE = Sample()
"""Free text without a mask."""
UNBOUNDED = 2**31 - 1
"""The tokens left of a request that is not budget-aware, for the thinking budget's rule."""


class LiveSequence:
    """The mutable state of one request while it runs in a `Generator`: its tokens, logprobs
    and text, written and unwritten only through `_record` and `_unrecord`.

    Args:
        handle: the `Generator`'s handle of the request.
        request: the `GenerationRequest` (its constraint is copied: the request stays as given).
        slot: the KV-cache slot the sequence decodes in.
        vocabulary: the model's `Vocabulary` (token bytes, `spell` for a respelled trigger).
        jump: the `ForcedTokenizer` of jump-forward, or None (never jump).

    Attributes:
        awaiting: how many of the last tokens (written by jump-forward for a request asking
            for top_logprobs or allowed_mass) wait for their logprobs from the forward pass
            that writes them (`receive_forced`); 0 otherwise.
        mass, unmasked: per token, its allowed mass and unmasked logprob, for a request asking
            for `allowed_mass`; else None.
    """

    def __init__(
        self,
        handle: int,
        request: GenerationRequest,
        slot: int,
        vocabulary: Vocabulary,
        jump: ForcedTokenizer | None = None,
    ):
        self.handle = handle
        self.request = request
        self.slot = slot
        self.vocabulary = vocabulary
        self.rng = np.random.default_rng(request.seed)
        self.waiting = request.constraint.copy() if request.constraint is not None else None
        self.constraint = None
        if request.trigger is None and self.waiting is not None:
            self.constraint, self.waiting = self.waiting, None
        self.prompt = np.asarray(request.prompt_ids, dtype=np.int64)
        self.cached_tokens = 0  # prompt tokens the prefix cache gave (set at admission)
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[tuple[tuple[int, float], ...]] | None = (
            None if request.top_logprobs is None else []
        )
        self.mass: list[float] | None = [] if request.allowed_mass else None
        self.unmasked: list[float] | None = [] if request.allowed_mass else None
        self._jump_masks: list[np.ndarray] = []  # the masks of the `awaiting` tokens
        bias = request.logit_bias or {}
        self._bias_ids = np.fromiter(bias.keys(), np.int64, len(bias))
        self._bias_values = np.fromiter(bias.values(), np.float32, len(bias))
        self.text = bytearray()
        self.forced: deque[int] = deque()
        self.generated = 0  # tokens generated, EOS included
        self.logits: np.ndarray | None = None
        self.block: np.ndarray | None = None  # float32 [N, V]: self.logits is block[row]
        self.row = 0
        self.finish_reason: str | None = None
        self._stop = [s.encode("utf-8") for s in request.stop if s]
        self._trigger = request.trigger.encode("utf-8") if request.trigger else None
        self._jump = jump if request.jump_forward else None
        self.awaiting = 0
        # a thinking block before free text: held to the prelude until its state leaves it
        self._prelude = request.prelude is not None and self.constraint is None
        if self._prelude:
            self.constraint = request.prelude.copy()
        self._free_from = 0  # stop strings and the trigger are looked for from here on
        # the thinking block, for a constraint (or prelude) from the first token: its tokens
        # are counted (`reasoning_tokens`), and held to the thinking budget when there is one
        self.thought = request.thought if self.constraint is not None else None
        self._budgeted = self.thought is not None and request.thinking_budget is not None
        self.thought_left = request.thinking_budget if self._budgeted else UNBOUNDED
        self._thought_tokens = 0  # written from inside the block
        self._opened = False  # the block's opener was written

    def receive_forced(self, block: np.ndarray, row: int) -> None:
        """Take the logprobs of the `awaiting` tokens jump-forward wrote last from the pass that
        wrote them: rows row..row+awaiting-1 of float32 `[N, V]` `block` are the logits before
        each, the request's logit_bias added as `receive` adds it. Each token's logprob is over
        the whole vocabulary, as for every forced token, and its top alternatives (or its
        diagnostics: the allowed mass of the mask the constraint gave before it) too."""
        n, self.awaiting = self.awaiting, 0
        for j in range(n):
            logits = block[row + j]
            if len(self._bias_ids):
                logits = logits.copy()
                logits[self._bias_ids] += self._bias_values
            at = len(self.ids) - n + j
            self.logprobs[at] = _logprob(logits, self.ids[at])
            if self.mass is not None:
                self.mass[at] = _allowed_mass(logits, self._jump_masks[j])
                self.unmasked[at] = self.logprobs[at]
            if self.top is not None:
                ids, logprobs = top_logprobs(logits, None, self.request.top_logprobs)
                self.top[at] = tuple(zip(ids.tolist(), logprobs.tolist(), strict=True))

    def receive(self, block: np.ndarray, row: int) -> None:
        """Take the model's next-token logits, row `row` of float32 `[N, V]` `block`, with the
        request's logit_bias (a biased row is a copy, a block of its own)."""
        if len(self._bias_ids):
            block, row = block[row : row + 1].copy(), 0
            block[0, self._bias_ids] += self._bias_values
        self.block, self.row, self.logits = block, row, block[row]

    def need(self) -> Need:
        """What the next step needs, from the state alone (no side effect; the logits are not
        read): `Finish` when nothing the model could say would continue the sequence (its
        answer complete with nothing left to allow: "stop"; its budget spent: "length", a
        complete answer's too); `Force` for a token already chosen; else `Sample`
        under the constraint's mask (with the budget rule when `budget_aware`), or free text,
        under a lazy trigger's budget mask when some token may not complete the trigger yet.
        The engine asks once per step, after the step's tokens are written."""
        constraint = self.constraint
        left = self.request.max_tokens - self.generated
        if constraint is not None and constraint.done:
            return Finish("stop")
        if left <= 0:  # the budget, not the model, ended it: OpenAI's and vLLM's "length"
            return Finish("length")
        if self.forced:
            return Force(self.forced[0])
        if constraint is None:
            if self.waiting is not None and self._trigger and self.request.budget_aware:
                # a trigger may open a call only while the tokens left can finish it
                mask = trigger_mask(self.waiting, self._trigger, self.text, left)
                return FREE if mask is None else Sample(mask)
            return FREE
        return Sample(self._mask(constraint, left), True)

    def _mask(self, constraint, left: int) -> np.ndarray:
        """The constraint's mask with `left` tokens left: the budget rule when budget_aware,
        and inside a budgeted thinking block the thought's rule too
        (`ThoughtBudget.mask`)."""
        budget_aware = self.request.budget_aware
        thought = self.thought
        if self._budgeted and thought.is_inside(constraint.state):
            tokens = left if budget_aware else UNBOUNDED
            return thought.mask(constraint.state, self.thought_left, tokens)
        return constraint.mask(left if budget_aware else None)

    def _count_thought(self, state: int, after: int) -> None:
        """Count a token written from `state` (to `after`) against the thinking budget."""
        thought = self.thought
        if thought is not None and thought.is_inside(state):
            self.thought_left -= 1
            self._thought_tokens += 1
            self._opened = self._opened or thought.is_open(state) or thought.is_open(after)

    @property
    def reasoning_tokens(self) -> int:
        """The tokens of the thinking block written so far (0 while an optional block was
        not opened: the tokens counted against its budget before that are the answer's)."""
        return self._thought_tokens if self._opened else 0

    def finish(self, reason: str) -> None:
        """End the sequence with finish_reason `reason` (a `Finish`'s)."""
        self.finish_reason = reason

    def take_forced(self) -> None:
        """Write the forced token (a `Force`'s) with its logprob over the whole vocabulary of
        the logits received, then look for stop strings and the trigger in free text."""
        token, start = self.forced.popleft(), len(self.text)
        logprob = _logprob(self.logits, token)
        self._record(token, logprob, None, diagnostics=_forced_diagnostics(logprob))
        if self.constraint is None:
            self._after_free_text(start)

    def sample_row(self, need: Sample) -> SampleRow:
        """The `sample_batch` row of this step's token under `need`, at the row of the logits
        received; draws its uniform from the request's generator (none when greedy)."""
        request = self.request
        uniform = 0.0 if request.params.greedy else self.rng.random()
        return SampleRow(
            self.row,
            need.mask,
            request.params,
            uniform,
            self.prompt,
            self.ids,
            request.top_logprobs or 0,
            request.allowed_mass,
        )

    def take_sampled(
        self,
        token: int,
        logprob: float,
        top: tuple[tuple[int, float], ...] | None,
        eos_ids,
        diagnostics: tuple[float, float] | None = None,
    ) -> None:
        """Take the sampled `token`, its logprob and top list (under the mask it was sampled
        under) and its `(allowed mass, unmasked logprob)` when asked for: advance the
        constraint, end on EOS, else record it and look for stop strings and the trigger."""
        constraint = self.constraint
        state = -1
        if constraint is not None:
            state = constraint.state
            constraint.advance(token)
            self._count_thought(state, constraint.state)
        if token in eos_ids and (constraint is None or constraint.done):
            self.generated += 1
            self.finish_reason = "stop"
            return
        start = len(self.text)
        self._record(token, logprob, None, top, diagnostics)
        if self._prelude:
            self._leave_prelude(state, start)
        elif self.constraint is None:
            self._after_free_text(start)

    def _leave_prelude(self, state: int, start: int) -> None:
        """After the tokens written from prelude state `state` (their text from `start`): once
        the prelude's state is outside the thinking block, the text is free from the byte
        after the block (from the answer's start when an optional block was left out), and
        the rest of those tokens' text is looked at for stop strings and the trigger."""
        prelude, thought = self.constraint, self.thought
        if thought.is_inside(prelude.state):
            return
        self._prelude, self.constraint, self.thought = False, None, None  # its count is done
        if self._opened:  # the byte after which the walk leaves the block
            at = start
            while thought.is_inside(state):
                state = prelude.index.step_bytes(state, bytes(self.text[at : at + 1]))
                at += 1
            self._free_from = at
        self._after_free_text(start)

    def jump_forward(self) -> list[int]:
        """Record and return the tokens jump-forward writes now (docs/engine.md):
        those of the text the constraint forces, within the budget; [] when there are none.
        Their logprobs are 0.0 (the grammar chose them), or, for a request asking for
        top_logprobs or allowed_mass, the model's, from the pass that writes them
        (`awaiting`)."""
        if self._jump is None or self.constraint is None or self.forced:
            return []
        left = self.request.max_tokens - self.generated
        before = self.constraint.copy()
        thought, thought_left = self.thought, self.thought_left
        total = left if self.request.budget_aware else UNBOUNDED
        fits = None
        if self._budgeted:

            def fits(after, passed: list[int]) -> bool:  # the thought's budget after the jump
                spent = sum(map(thought.is_inside, passed))
                return thought.fits(after.state, thought_left - spent, total - len(passed))

        start = len(self.text)
        ids, self.constraint = self._jump.jump(
            self.constraint, left, self.request.budget_aware, fits
        )
        self._jump_masks = []
        state_0 = before.state
        for j, token in enumerate(ids):  # each token's mask (as if sampled) and thought count
            if self.mass is not None:
                self._jump_masks.append(self._mask(before, left - j))
            state = before.state
            before.advance(token)
            self._count_thought(state, before.state)
        placeholder = None if self.top is None else ()  # filled by `receive_forced`
        for token in ids:
            self._record(token, 0.0, None, placeholder, (math.nan, math.nan))
        if self.request.model_logprobs:
            self.awaiting = len(ids)
        if self._prelude and ids:
            self._leave_prelude(state_0, start)
        return ids

    def _record(
        self,
        token: int,
        logprob: float,
        mask: np.ndarray | None,
        top: tuple[tuple[int, float], ...] | None = None,
        diagnostics: tuple[float, float] | None = None,
    ) -> None:
        """Append a generated token: its id, logprob, bytes and, if asked for, the top
        alternatives (`top`, else computed under `mask`; None: the whole vocabulary) and the
        `(allowed mass, unmasked logprob)` `diagnostics`."""
        self.generated += 1
        self.ids.append(token)
        self.logprobs.append(logprob)
        if self.mass is not None:
            self.mass.append(diagnostics[0])
            self.unmasked.append(diagnostics[1])
        self.text += self.vocabulary.tokens[token] or b""
        if self.top is not None:
            if top is None:
                ids, logprobs = top_logprobs(self.logits, mask, self.request.top_logprobs)
                top = tuple(zip(ids.tolist(), logprobs.tolist(), strict=True))
            self.top.append(top)

    def _unrecord(self) -> None:
        """Take back the last `_record`."""
        token = self.ids.pop()
        self.logprobs.pop()
        if self.top is not None:
            self.top.pop()
        if self.mass is not None:
            self.mass.pop()
            self.unmasked.pop()
        self.generated -= 1
        del self.text[len(self.text) - len(self.vocabulary.tokens[token] or b"") :]

    def _after_free_text(self, start: int) -> None:
        """Stop strings and the trigger, looked for in the bytes the last token could touch."""
        for stop in self._stop:
            at = self.text.find(stop, max(self._free_from, start - len(stop) + 1))
            if at >= 0:
                del self.text[at:]
                self.finish_reason = "stop"
                return
        if self._trigger is None or self.waiting is None:
            return
        at = self.text.find(self._trigger, max(self._free_from, start - len(self._trigger) + 1))
        if at < 0:
            return
        end = at + len(self._trigger)
        constraint, self.waiting = self.waiting, None
        rest = bytes(self.text[end:])
        if rest:
            try:
                constraint.advance_bytes(rest)
            except TokenNotAllowedError:  # the token ran past the trigger into refused bytes
                self._respell(start, end)
        self.constraint = constraint

    def _respell(self, start: int, end: int) -> None:
        """Replace the last token (its text starts at `start`) by tokens spelling exactly
        text[start:end]: the first is recorded now, the others are forced on the next steps."""
        piece = bytes(self.text[start:end])
        self._unrecord()
        first, *rest = self.vocabulary.spell(piece)
        self.forced.extend(rest)
        logprob = _logprob(self.logits, first)
        self._record(first, logprob, None, diagnostics=_forced_diagnostics(logprob))

    def result(self) -> GenerationResult:
        return GenerationResult(
            data=bytes(self.text),
            token_ids=tuple(self.ids),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish_reason or "length",
            prompt_tokens=len(self.prompt),
            completion_tokens=len(self.ids),
            top_logprobs=None if self.top is None else tuple(self.top),
            allowed_mass=None if self.mass is None else tuple(self.mass),
            unmasked_logprobs=None if self.unmasked is None else tuple(self.unmasked),
            reasoning_tokens=self.reasoning_tokens,
            cached_tokens=self.cached_tokens,
        )


def _forced_diagnostics(logprob: float) -> tuple[float, float]:
    """`(allowed mass, unmasked logprob)` of a token the engine wrote to spell a trigger
    exactly (a respelling), whose `logprob` is over the whole vocabulary: it was the one token
    left, so the mass allowed is the model's probability of it."""
    return math.exp(logprob), logprob


def _allowed_mass(logits: np.ndarray, mask: np.ndarray) -> float:
    """The probability mass `mask` allows under float32 `[V]` `logits` (the sampler's kernel's,
    `SampleRow.diagnose`), for a token jump-forward wrote under that mask."""
    out = sample_batch(logits[None], [SampleRow(0, mask, GREEDY, 0.0, diagnose=True)])
    return float(out.allowed_mass[0])


def _logprob(logits: np.ndarray, token: int) -> float:
    """The model's log-softmax of `token` over the whole vocabulary (for forced tokens), bit for
    bit as `corral.kernels.sample` and `top_logprobs` report it: the kernel's
    `float32(logit - peak)` in float64 less its log-total, read from the most likely token's
    logprob (`-log_total`, as its `logit - peak` is 0)."""
    best, logprobs = top_logprobs(logits, None, 1)
    peak = logits[int(best[0])]
    return float(np.float32(logits[token] - peak)) + float(logprobs[0])

"""One request while it runs in a `Generator`: its tokens, logprobs and text, its constraint,
stop strings, lazy trigger and jump-forward (docs/design.md section 7; the decisions are in
`corral.model.generate`'s module docstring, which this module's `LiveSequence` carries out).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from corral.kernels import TokenNotAllowedError, Vocabulary, few_allowed_ids, top_logprobs
from corral.kernels.masks.trigger import trigger_mask
from corral.model.generation_request import GenerationRequest, GenerationResult
from corral.model.jump_forward import ForcedTokenizer


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
            for top_logprobs) wait for their logprobs from the forward pass that writes them
            (`receive_forced`); 0 otherwise.
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
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[tuple[tuple[int, float], ...]] | None = (
            None if request.top_logprobs is None else []
        )
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

    def receive_forced(self, block: np.ndarray, row: int) -> None:
        """Take the logprobs of the `awaiting` tokens jump-forward wrote last from the pass that
        wrote them: rows row..row+awaiting-1 of float32 `[N, V]` `block` are the logits before
        each, the request's logit_bias added as `receive` adds it. Each token's logprob is over
        the whole vocabulary, as for every forced token, and its top alternatives too."""
        n, self.awaiting = self.awaiting, 0
        for j in range(n):
            logits = block[row + j]
            if len(self._bias_ids):
                logits = logits.copy()
                logits[self._bias_ids] += self._bias_values
            at = len(self.ids) - n + j
            self.logprobs[at] = _logprob(logits, self.ids[at])
            ids, logprobs = top_logprobs(logits, None, self.request.top_logprobs)
            self.top[at] = tuple(zip(ids.tolist(), logprobs.tolist(), strict=True))

    def receive(self, block: np.ndarray, row: int) -> None:
        """Take the model's next-token logits, row `row` of float32 `[N, V]` `block`, with the
        request's logit_bias (a biased row is a copy, a block of its own)."""
        if len(self._bias_ids):
            block, row = block[row : row + 1].copy(), 0
            block[0, self._bias_ids] += self._bias_values
        self.block, self.row, self.logits = block, row, block[row]

    def ends_now(self) -> bool:
        """End the sequence if nothing the model could say would continue it (`finish_reason`
        set): its answer is complete with nothing left to allow, or its budget is spent. The
        engine asks before a forward pass, which such a sequence does not need."""
        constraint = self.constraint
        if constraint is not None and constraint.done:
            self.finish_reason = "stop"
        elif self.request.max_tokens - self.generated <= 0:
            complete = constraint is not None and constraint.is_complete()
            self.finish_reason = "stop" if complete else "length"
        return self.finish_reason is not None

    def before_sample(self) -> np.ndarray | bool:
        """This step's work before sampling: end the sequence (`ends_now`) or take a forced
        token (recorded here), returning False; else return the packed mask to sample under,
        or True for free text."""
        if self.ends_now():
            return False
        left = self.request.max_tokens - self.generated
        constraint = self.constraint
        if self.forced:
            token, start = self.forced.popleft(), len(self.text)
            self._record(token, _logprob(self.logits, token), None)
            if self.constraint is None:
                self._after_free_text(start)
            return False
        if constraint is None:
            if self.waiting is not None and self._trigger and self.request.budget_aware:
                # a trigger may open a call only while the tokens left can finish it
                mask = trigger_mask(self.waiting, self._trigger, self.text, left)
                return True if mask is None else mask
            return True
        return constraint.mask(left if self.request.budget_aware else None)

    def next_allowed(self, limit: int) -> np.ndarray | None:
        """The ids (int32) of the tokens the next sample may take, when the mask it will be
        drawn under (`before_sample`'s) allows at most `limit` of them; else None: the next
        logits are needed whole (free text, a forced token next, whose logprob is over the
        whole vocabulary, a sequence about to end, or a mask that allows more). Everything a
        sample reads under a mask (its logprob, `top_logprobs`, a `logit_bias`, penalties) is
        at allowed ids. The engine asks after the step's tokens are written, for the masked LM
        head (`corral.model.llama.lm_head`)."""
        constraint = self.constraint
        left = self.request.max_tokens - self.generated
        if constraint is None or constraint.done or left <= 0 or self.forced:
            return None
        return few_allowed_ids(constraint.mask(left if self.request.budget_aware else None), limit)

    def uniform(self) -> float:
        """This sequence's draw for its next sampled token (none when greedy: 0.0)."""
        return 0.0 if self.request.params.greedy else self.rng.random()

    def after_sample(
        self, token: int, logprob: float, top: tuple[tuple[int, float], ...] | None, eos_ids
    ) -> None:
        """Take the sampled `token`, its logprob and top list (under the mask it was sampled
        under): advance the constraint, end on EOS, else record it and look for stop strings
        and the trigger."""
        constraint = self.constraint
        if constraint is not None:
            constraint.advance(token)
        if token in eos_ids and (constraint is None or constraint.done):
            self.generated += 1
            self.finish_reason = "stop"
            return
        start = len(self.text)
        self._record(token, logprob, None, top)
        if self.constraint is None:
            self._after_free_text(start)

    def jump_forward(self) -> list[int]:
        """Record and return the tokens jump-forward writes now (see the module docstring):
        those of the text the constraint forces, within the budget; [] when there are none.
        Their logprobs are 0.0 (the grammar chose them), or, for a request asking for
        top_logprobs, the model's, from the pass that writes them (`awaiting`)."""
        if self._jump is None or self.constraint is None or self.forced:
            return []
        left = self.request.max_tokens - self.generated
        ids, self.constraint = self._jump.jump(self.constraint, left, self.request.budget_aware)
        placeholder = None if self.top is None else ()  # filled by `receive_forced`
        for token in ids:
            self._record(token, 0.0, None, placeholder)
        if self.top is not None:
            self.awaiting = len(ids)
        return ids

    def _record(
        self,
        token: int,
        logprob: float,
        mask: np.ndarray | None,
        top: tuple[tuple[int, float], ...] | None = None,
    ) -> None:
        """Append a generated token: its id, logprob, bytes and, if asked for, the top
        alternatives (`top`, else computed under `mask`; None: the whole vocabulary)."""
        self.generated += 1
        self.ids.append(token)
        self.logprobs.append(logprob)
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
        self.generated -= 1
        del self.text[len(self.text) - len(self.vocabulary.tokens[token] or b"") :]

    def _after_free_text(self, start: int) -> None:
        """Stop strings and the trigger, looked for in the bytes the last token could touch."""
        for stop in self._stop:
            at = self.text.find(stop, max(0, start - len(stop) + 1))
            if at >= 0:
                del self.text[at:]
                self.finish_reason = "stop"
                return
        if self._trigger is None or self.waiting is None:
            return
        at = self.text.find(self._trigger, max(0, start - len(self._trigger) + 1))
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
        self._record(first, _logprob(self.logits, first), None)

    def result(self) -> GenerationResult:
        return GenerationResult(
            data=bytes(self.text),
            token_ids=tuple(self.ids),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish_reason or "length",
            prompt_tokens=len(self.prompt),
            completion_tokens=len(self.ids),
            top_logprobs=None if self.top is None else tuple(self.top),
        )


def _logprob(logits: np.ndarray, token: int) -> float:
    """The model's log-softmax of `token` over the whole vocabulary (for forced tokens), bit for
    bit as `corral.kernels.sample` and `top_logprobs` report it: the kernel's
    `float32(logit - peak)` in float64 less its log-total, read from the most likely token's
    logprob (`-log_total`, as its `logit - peak` is 0)."""
    best, logprobs = top_logprobs(logits, None, 1)
    peak = logits[int(best[0])]
    return float(np.float32(logits[token] - peak)) + float(logprobs[0])

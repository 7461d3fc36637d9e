"""Batched generation under constraints, with continuous batching (DESIGN.md sections 4 and 7).

A `Generator(model, batch_size, max_len)` runs requests on one KV cache of `batch_size` slots:
`submit(request)` queues a request (at any time, also between steps) and returns its handle;
`step()` prefills the prompts of waiting requests into free slots, picks one token for every live
sequence, and decodes them all together, one forward pass for the whole batch; it returns the
`(handle, GenerationResult)` of the sequences that ended, whose slots go to the next waiting
requests. Between steps, `partial_text()` shows what each live sequence wrote so far (streaming)
and `cancel(handle)` drops a request (a client that went away). At each step each sequence's
mask is applied before the log-softmax (`corral.kernels.sample`) and its `Constraint` advances.
`iter_generate` and `generate` are thin loops over a `Generator` for a fixed list of requests.

The engine knows nothing of HTTP or OpenAI shapes: a request is prompt token ids, sampling
settings, an optional `Constraint` and an optional trigger string.

Decisions:
- Budget-aware ending (on by default, `GenerationRequest.budget_aware`): a constrained answer is
  never cut mid-JSON by `max_tokens`. The engine keeps the invariant "the fewest tokens from the
  constraint's state to a complete answer (`Constraint.tokens_to_complete`, a BFS over the token
  graph) <= tokens left" by sampling under `Constraint.mask(tokens_left)`: the plain mask while
  tokens are plenty, else only the tokens after which a complete answer still fits. An answer that
  is complete when the budget runs out ends with finish_reason `stop`. A budget too small for any
  answer is refused at `submit` (`BudgetTooSmallError`, `check_budget`). Turned off, the answer is
  cut at `max_tokens` (finish_reason `length`).
- Lazy trigger (tool_choice `auto`, llama.cpp's grammar triggers): the output is free until its
  bytes contain the trigger; the bytes after it, if any, are walked through the constraint
  (`Constraint.advance_bytes`). If the token that completed the trigger carries bytes the grammar
  refuses, it is replaced by tokens spelling exactly the text up to the trigger's end
  (`Vocabulary.spell`: its own token if the vocabulary has one, else single-byte tokens), so the
  constraint always starts cleanly.
- Stop strings apply to free text only: inside a constrained answer they would cut valid JSON.
  The text is cut before the stop string, which is not returned (OpenAI's behaviour).
- EOS ends a sequence and is not part of its text or `token_ids`; it is counted in
  `completion_tokens`.
- Each request has its own `numpy.random.Generator` seeded by its `seed`, so the same request
  gives the same tokens alone or in any batch, up to float rounding that differs between batch
  shapes in BLAS (logits agree to ~1e-5; a token could flip only on a near-tie).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from corral.automata import ConstrainError
from corral.kernels import (
    Constraint,
    SamplingParams,
    TokenNotAllowedError,
    Vocabulary,
    sample,
)
from corral.model.errors import CacheError

DEFAULT_PARAMS = SamplingParams()


class BudgetTooSmallError(ConstrainError):
    """`max_tokens` is smaller than the shortest answer the constraint allows."""


@dataclass(frozen=True, eq=False)
class GenerationRequest:
    """One sequence to generate.

    Attributes:
        prompt_ids: int token ids of the prompt, at least one.
        max_tokens: the most tokens to generate (EOS included), >= 1.
        params: temperature, top_k, top_p, min_p, penalties (`corral.kernels.SamplingParams`).
        seed: seeds this request's own random generator (None: fresh entropy).
        stop: strings that end free text (not returned).
        constraint: a fresh `Constraint` the output must satisfy (from the first token, or from
            the trigger); the engine works on a copy.
        trigger: when set, the constraint starts after the output's bytes contain this string.
        budget_aware: keep a constrained answer within `max_tokens` (see the module docstring).
    """

    prompt_ids: Sequence[int]
    max_tokens: int = 256
    params: SamplingParams = DEFAULT_PARAMS
    seed: int | None = None
    stop: tuple[str, ...] = ()
    constraint: Constraint | None = None
    trigger: str | None = None
    budget_aware: bool = True


@dataclass(frozen=True)
class GenerationResult:
    """What one request produced.

    Attributes:
        text: the generated text (UTF-8 decoded; stop string and EOS excluded).
        token_ids: the generated token ids (EOS excluded).
        logprobs: float per token of `token_ids` (`corral.kernels.sample`'s logprob).
        finish_reason: `stop` (EOS, a stop string, or a complete answer with nothing left to
            write) or `length` (max_tokens reached).
        prompt_tokens, completion_tokens: usage, as OpenAI counts it.
    """

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int


@dataclass
class GenerationStats:
    """Running totals, updated as a `Generator` steps (for progress bars and benches):
    decode steps, tokens, and seconds in prefill, in decode forward passes, and in masks and
    sampling."""

    steps: int = 0
    completion_tokens: int = 0
    prefill_seconds: float = 0.0
    forward_seconds: float = 0.0
    mask_and_sample_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)


class _Sequence:
    """The mutable state of one request while it runs: its tokens, logprobs and text, written
    and unwritten only through `_record` and `_unrecord`."""

    def __init__(self, handle: int, request: GenerationRequest, slot: int, vocabulary: Vocabulary):
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
        self.text = bytearray()
        self.forced: deque[int] = deque()
        self.generated = 0  # tokens generated, EOS included
        self.logits: np.ndarray | None = None
        self.finish_reason: str | None = None
        self._stop = [s.encode("utf-8") for s in request.stop if s]
        self._trigger = request.trigger.encode("utf-8") if request.trigger else None

    def choose(self, eos_ids: frozenset[int]) -> int | None:
        """Pick the next token from `self.logits` and record it; None when the sequence ended
        without a token (EOS, a complete answer with nothing left, or the budget spent)."""
        left = self.request.max_tokens - self.generated
        constraint = self.constraint
        if constraint is not None and constraint.done:
            self.finish_reason = "stop"
            return None
        if left <= 0:
            complete = constraint is not None and constraint.is_complete()
            self.finish_reason = "stop" if complete else "length"
            return None
        if self.forced:
            token = self.forced.popleft()
            logprob = _logprob(self.logits, token)
        else:
            mask = None
            if constraint is not None:
                mask = constraint.mask(left if self.request.budget_aware else None)
            params = self.request.params
            token, logprob = sample(self.logits, params, self.rng, mask, self.prompt, self.ids)
            if constraint is not None:
                constraint.advance(token)
            if token in eos_ids and (constraint is None or constraint.done):
                self.generated += 1
                self.finish_reason = "stop"
                return None
        start = len(self.text)
        self._record(token, logprob)
        if self.constraint is None:
            self._after_free_text(start)
        return token

    def _record(self, token: int, logprob: float) -> None:
        """Append a generated token: its id, logprob and bytes."""
        self.generated += 1
        self.ids.append(token)
        self.logprobs.append(logprob)
        self.text += self.vocabulary.tokens[token] or b""

    def _unrecord(self) -> None:
        """Take back the last `_record`."""
        token = self.ids.pop()
        self.logprobs.pop()
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
        self._record(first, _logprob(self.logits, first))

    def result(self) -> GenerationResult:
        return GenerationResult(
            text=self.text.decode("utf-8", errors="replace"),
            token_ids=tuple(self.ids),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish_reason or "length",
            prompt_tokens=len(self.prompt),
            completion_tokens=self.generated,
        )


def _logprob(logits: np.ndarray, token: int) -> float:
    """The model's log-softmax of `token` over the whole vocabulary (for forced tokens)."""
    top = float(logits.max())
    return float(logits[token]) - top - float(np.log(np.exp(logits - top).sum()))


def check_budget(request: GenerationRequest) -> None:
    """Raise `BudgetTooSmallError` if `max_tokens` is below 1 or cannot hold the shortest
    constrained answer (`Constraint.tokens_to_complete`; checked only for a budget-aware request
    whose constraint starts at the first token)."""
    if request.max_tokens < 1:
        raise BudgetTooSmallError(f"max_tokens must be at least 1, not {request.max_tokens}")
    c = request.constraint
    if c is None or request.trigger is not None or not request.budget_aware:
        return
    needed = c.tokens_to_complete()
    if needed > request.max_tokens or needed < 0:
        raise BudgetTooSmallError(
            f"max_tokens={request.max_tokens} is too small: the shortest answer the grammar "
            f"allows takes {needed} tokens"
        )


class Generator:
    """The engine: continuous batching of requests over one KV cache (see the module docstring).

    Args:
        model: a `corral.model.Model`, or anything with `new_cache(n_slots, max_len)`,
            `prefill_batch(cache, slots, sequences)`, `decode(cache, slots, tokens)` and
            `vocabulary` (a `corral.kernels.Vocabulary`, whose `eos_ids` end free text).
        batch_size: how many sequences decode together (the KV cache's slots), >= 1.
        max_len: the most tokens a sequence holds (prompt plus `max_tokens`), the cache's length.
        stats: updated in place as steps run, if given (else a fresh `GenerationStats`).

    Attributes:
        stats: the running `GenerationStats`.
    """

    def __init__(self, model, batch_size: int, max_len: int, stats: GenerationStats | None = None):
        self.model = model
        self.vocabulary: Vocabulary = model.vocabulary
        self.stats = stats if stats is not None else GenerationStats()
        self._eos_ids = frozenset(self.vocabulary.eos_ids)
        self._cache = model.new_cache(batch_size, max_len)
        self._free = list(range(batch_size - 1, -1, -1))
        self._waiting: deque[tuple[int, GenerationRequest]] = deque()
        self._live: list[_Sequence] = []
        self._handles = 0

    @property
    def has_work(self) -> bool:
        """True while some submitted request has not ended."""
        return bool(self._waiting or self._live)

    def submit(self, request: GenerationRequest) -> int:
        """Queue `request`; it starts at a coming `step` when a slot is free. Returns its handle:
        0, 1, 2, ... in the order of submission.

        Raises:
            BudgetTooSmallError: its max_tokens cannot hold its shortest answer (`check_budget`).
            CacheError: its prompt plus max_tokens exceed `max_len`.
        """
        check_budget(request)
        if len(request.prompt_ids) + request.max_tokens > self._cache.max_len:
            raise CacheError(
                f"a prompt of {len(request.prompt_ids)} tokens and max_tokens="
                f"{request.max_tokens} exceed the engine's max_len {self._cache.max_len}"
            )
        handle = self._handles
        self._handles += 1
        self._waiting.append((handle, request))
        return handle

    def cancel(self, handle: int) -> bool:
        """Drop a submitted request that has not ended: a waiting one leaves the queue, a live
        one frees its slot for the next `step` (for a client that went away). Returns whether
        the handle was found; its result is never returned."""
        for i, (waiting, _) in enumerate(self._waiting):
            if waiting == handle:
                del self._waiting[i]
                return True
        for i, seq in enumerate(self._live):
            if seq.handle == handle:
                del self._live[i]
                self.stats.completion_tokens += seq.generated
                self._free.append(seq.slot)
                return True
        return False

    def partial_text(self) -> dict[int, bytes]:
        """The bytes each live request has generated so far, by handle (for streaming). Free
        text may still lose a tail to a stop string that is not yet complete; a constrained
        answer only grows."""
        return {seq.handle: bytes(seq.text) for seq in self._live}

    @property
    def n_waiting(self) -> int:
        """Submitted requests not yet given a slot."""
        return len(self._waiting)

    @property
    def n_live(self) -> int:
        """Requests holding a slot."""
        return len(self._live)

    def step(self) -> list[tuple[int, GenerationResult]]:
        """Admit waiting requests into free slots (their prompts share prefill passes), pick a
        token for every live sequence, and run one decode pass for those still going. Returns
        `(handle, result)` for each request that ended in this step (possibly none).

        Raises:
            CacheError: a prompt the model refuses (e.g. empty, or a token id out of range).
        """
        self._admit()
        stats = self.stats
        started = time.perf_counter()
        finished, tokens, still = [], [], []
        for seq in self._live:
            token = seq.choose(self._eos_ids) if seq.finish_reason is None else None
            if token is None or seq.finish_reason is not None:
                stats.completion_tokens += seq.generated
                self._free.append(seq.slot)
                finished.append((seq.handle, seq.result()))
            else:
                tokens.append(token)
                still.append(seq)
        stats.mask_and_sample_seconds += time.perf_counter() - started
        self._live = still
        if still:
            self._decode(tokens)
        return finished

    def _admit(self) -> None:
        admitted = []
        while self._waiting and self._free:
            handle, request = self._waiting.popleft()
            admitted.append(_Sequence(handle, request, self._free.pop(), self.vocabulary))
        if not admitted:
            return
        started = time.perf_counter()
        for seq in admitted:
            self._cache.reset(seq.slot)
        slots = [seq.slot for seq in admitted]
        logits = self.model.prefill_batch(self._cache, slots, [seq.prompt for seq in admitted])
        for row, seq in zip(logits, admitted, strict=True):
            seq.logits = row
        self.stats.prefill_seconds += time.perf_counter() - started
        self._live.extend(admitted)

    def _decode(self, tokens: list[int]) -> None:
        """One decode pass: `tokens[i]` is appended to `self._live[i]`'s slot."""
        order = sorted(range(len(self._live)), key=lambda i: self._live[i].slot)
        self._live = [self._live[i] for i in order]
        started = time.perf_counter()
        slots = [seq.slot for seq in self._live]
        logits = self.model.decode(self._cache, slots, [tokens[i] for i in order])
        self.stats.forward_seconds += time.perf_counter() - started
        self.stats.steps += 1
        for row, seq in zip(logits, self._live, strict=True):
            seq.logits = row


def iter_generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    stats: GenerationStats | None = None,
) -> Iterator[tuple[int, GenerationResult]]:
    """Run `requests` with continuous batching (a `Generator` sized for them); yield
    `(request index, result)` as each ends.

    Raises:
        BudgetTooSmallError: a request's max_tokens cannot hold its shortest answer (raised
            before anything runs).
        CacheError: a prompt the model refuses.
    """
    if not requests:
        return
    max_len = max(1, *(len(r.prompt_ids) + r.max_tokens for r in requests))
    generator = Generator(model, min(batch_size, len(requests)), max_len, stats)
    for request in requests:
        generator.submit(request)
    while generator.has_work:
        yield from generator.step()


def generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    stats: GenerationStats | None = None,
) -> list[GenerationResult]:
    """Run `requests` (see `iter_generate`) and return their results in request order."""
    results: list[GenerationResult | None] = [None] * len(requests)
    for index, result in iter_generate(model, requests, batch_size, stats):
        results[index] = result
    return results  # type: ignore[return-value]

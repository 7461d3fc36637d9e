"""Batched generation under constraints, with continuous batching (DESIGN.md sections 4 and 7).

`generate(model, requests)` runs many requests on one KV cache of `batch_size` slots: a request's
prompt is prefilled when a slot frees up, then every live sequence decodes together, one forward
pass per step for the whole batch. At each step each sequence's mask is applied before the
log-softmax (`corral.kernels.sample`) and its `Constraint` advances; a sequence that ends leaves
its slot to the next waiting request.

The engine knows nothing of HTTP or OpenAI shapes: a request is prompt token ids, sampling
settings, an optional `Constraint` and an optional trigger string.

Decisions:
- Budget-aware ending (on by default, `GenerationRequest.budget_aware`): a constrained answer is
  never cut mid-JSON by `max_tokens`. The engine keeps the invariant "the fewest tokens from the
  constraint's state to a complete answer (`TokenIndex.token_distance`, a BFS over the token
  graph) <= tokens left": while tokens are plenty it uses the plain mask, and when they are not
  it allows only tokens after which a complete answer still fits
  (`TokenIndex.mask_within_tokens`). An answer that is complete when the budget runs out ends with
  finish_reason `stop`. A budget too small for any answer is refused up front
  (`BudgetTooSmallError`). Turned off, the answer is cut at `max_tokens` (finish_reason `length`).
- Lazy trigger (tool_choice `auto`, llama.cpp's grammar triggers): the output is free until its
  bytes contain the trigger; the bytes after it, if any, are walked through the constraint's DFA.
  If the token that completed the trigger carries bytes the grammar refuses, it is replaced by
  tokens spelling exactly the text up to the trigger's end (its own token if the vocabulary has
  one, else single-byte tokens), so the constraint always starts cleanly.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from corral.automata import ConstrainError
from corral.kernels import Constraint, SamplingParams, sample

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
    """Running totals, updated as `iter_generate` goes (for progress bars and benches):
    decode steps, tokens, and seconds in prefill, in decode forward passes, and in masks and
    sampling."""

    steps: int = 0
    completion_tokens: int = 0
    prefill_seconds: float = 0.0
    forward_seconds: float = 0.0
    mask_and_sample_seconds: float = 0.0
    started: float = field(default_factory=time.perf_counter)


class _Sequence:
    """The mutable state of one request while it runs."""

    def __init__(self, index: int, request: GenerationRequest, slot: int, vocabulary):
        self.index = index
        self.request = request
        self.slot = slot
        self.vocabulary = vocabulary
        self.rng = np.random.default_rng(request.seed)
        self.waiting = request.constraint.copy() if request.constraint is not None else None
        self.constraint = None
        if request.trigger is None and self.waiting is not None:
            self.constraint, self.waiting = self.waiting, None
        c = request.constraint
        # the most tokens any state needs to finish: with more left, every token keeps in budget
        self.max_distance = int(c.index.token_distance.max()) if c is not None else 0
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

    # -- choosing the next token -------------------------------------------------------------

    def choose(self, eos_ids: frozenset[int]) -> int | None:
        """Pick the next token from `self.logits` and record it; None when the sequence ended
        without a token (a complete answer with nothing left, or the budget spent)."""
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
            self._record(token, _logprob(self.logits, token))
            return token
        mask = None
        if constraint is not None:
            if self.request.budget_aware and self.max_distance > left - 1:
                # only tokens after which a complete answer still fits in the tokens left; none
                # fit when a trigger started the answer too late: it is then cut (`length`)
                mask = constraint.index.mask_within_tokens(constraint.state, left - 1)
                if not mask.any():
                    mask = constraint.mask()
            else:
                mask = constraint.mask()
        params = self.request.params
        token, logprob = sample(self.logits, params, self.rng, mask, self.prompt, self.ids)
        if constraint is not None:
            constraint.advance(token)
        if token in eos_ids and (constraint is None or constraint.done):
            self.generated += 1
            self.finish_reason = "stop"
            return None
        self._record(token, logprob)
        return token

    def _record(self, token: int, logprob: float) -> None:
        self.generated += 1
        self.ids.append(token)
        self.logprobs.append(logprob)
        start = len(self.text)
        self.text += self.vocabulary[token] or b""
        if self.constraint is None:
            self._after_free_text(start)

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
        state = constraint.index.dfa.step(0, bytes(self.text[end:]))
        if state < 0:  # the token ran past the trigger into bytes the grammar refuses
            self._respell(start, end)
            state = 0
        self.constraint = Constraint(constraint.index, state)

    def _respell(self, start: int, end: int) -> None:
        """Replace the last token by tokens spelling exactly text[start:end]."""
        piece = bytes(self.text[start:end])
        del self.text[start:]
        self.ids.pop()
        self.logprobs.pop()
        self.generated -= 1
        tokens = self.vocabulary.spell(piece)
        self.forced.extend(tokens[1:])
        self.generated += 1
        self.ids.append(tokens[0])
        self.logprobs.append(_logprob(self.logits, tokens[0]))
        self.text += piece[: len(self.vocabulary[tokens[0]])]

    def result(self) -> GenerationResult:
        return GenerationResult(
            text=self.text.decode("utf-8", errors="replace"),
            token_ids=tuple(self.ids),
            logprobs=tuple(self.logprobs),
            finish_reason=self.finish_reason or "length",
            prompt_tokens=len(self.prompt),
            completion_tokens=self.generated,
        )


class _Bytes:
    """Token id -> bytes (b"" for specials), and the shortest spelling of a byte string."""

    def __init__(self, tokens: Sequence[bytes | None]):
        self.tokens = [t or b"" for t in tokens]
        self.by_bytes: dict[bytes, int] = {}
        for i, t in enumerate(tokens):
            if t:
                self.by_bytes.setdefault(t, i)

    def __getitem__(self, token: int) -> bytes:
        return self.tokens[token]

    def spell(self, piece: bytes) -> list[int]:
        """Token ids whose bytes concatenate to `piece`: one token if the vocabulary has it,
        else one per byte. Raises ConstrainError if a byte has no token."""
        if piece in self.by_bytes:
            return [self.by_bytes[piece]]
        try:
            return [self.by_bytes[bytes([b])] for b in piece]
        except KeyError:
            raise ConstrainError(f"the vocabulary cannot spell {piece!r}") from None


def _logprob(logits: np.ndarray, token: int) -> float:
    """The model's log-softmax of `token` over the whole vocabulary (for forced tokens)."""
    top = float(logits.max())
    return float(logits[token]) - top - float(np.log(np.exp(logits - top).sum()))


def check_budget(request: GenerationRequest) -> None:
    """Raise `BudgetTooSmallError` if `max_tokens` cannot hold the shortest constrained answer
    (only for a constraint that starts at the first token and a budget-aware request)."""
    if request.max_tokens < 1:
        raise BudgetTooSmallError(f"max_tokens must be at least 1, not {request.max_tokens}")
    c = request.constraint
    if c is None or request.trigger is not None or not request.budget_aware:
        return
    needed = int(c.index.token_distance[c.state])
    if needed > request.max_tokens or needed < 0:
        raise BudgetTooSmallError(
            f"max_tokens={request.max_tokens} is too small: the shortest answer the grammar "
            f"allows takes {needed} tokens"
        )


def iter_generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    stats: GenerationStats | None = None,
) -> Iterator[tuple[int, GenerationResult]]:
    """Run `requests` with continuous batching; yield `(request index, result)` as each ends.

    Args:
        model: a `corral.model.Model` (`new_cache`, `prefill_batch`, `decode`, `vocabulary`,
            `eos_ids`).
        requests: the requests; each is checked with `check_budget` before anything runs.
        batch_size: how many sequences decode together (the KV cache's slots).
        stats: updated in place as steps run, if given.

    Raises:
        BudgetTooSmallError: a request's max_tokens cannot hold its shortest answer.
        ConstrainError: a prompt longer than the model's context.
    """
    for request in requests:
        check_budget(request)
    if not requests:
        return
    stats = stats if stats is not None else GenerationStats()
    vocabulary = _Bytes(model.vocabulary())
    eos_ids = frozenset(model.eos_ids)
    max_len = max(len(r.prompt_ids) + r.max_tokens for r in requests)
    cache = model.new_cache(min(batch_size, len(requests)), max_len)
    waiting = deque(range(len(requests)))
    free = list(range(cache.n_slots - 1, -1, -1))
    live: list[_Sequence] = []
    while waiting or live:
        admitted = []
        while waiting and free:
            index = waiting.popleft()
            admitted.append(_Sequence(index, requests[index], free.pop(), vocabulary))
        if admitted:  # the new prompts share prefill passes (`Model.prefill_batch`)
            started = time.perf_counter()
            for seq in admitted:
                cache.reset(seq.slot)
            slots = [seq.slot for seq in admitted]
            logits = model.prefill_batch(cache, slots, [seq.prompt for seq in admitted])
            for row, seq in zip(logits, admitted, strict=True):
                seq.logits = row
            stats.prefill_seconds += time.perf_counter() - started
            live.extend(admitted)
        started = time.perf_counter()
        tokens, still = [], []
        for seq in live:
            token = seq.choose(eos_ids) if seq.finish_reason is None else None
            if token is None or seq.finish_reason is not None:
                stats.completion_tokens += seq.generated
                free.append(seq.slot)
                yield seq.index, seq.result()
            else:
                tokens.append(token)
                still.append(seq)
        stats.mask_and_sample_seconds += time.perf_counter() - started
        live = still
        if not live:
            continue
        order = sorted(range(len(live)), key=lambda i: live[i].slot)
        live = [live[i] for i in order]
        started = time.perf_counter()
        logits = model.decode(cache, [s.slot for s in live], [tokens[i] for i in order])
        stats.forward_seconds += time.perf_counter() - started
        stats.steps += 1
        for row, seq in zip(logits, live, strict=True):
            seq.logits = row


def generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    on_result: Callable[[int, GenerationResult], None] | None = None,
    stats: GenerationStats | None = None,
) -> list[GenerationResult]:
    """Run `requests` (see `iter_generate`) and return their results in request order;
    `on_result(index, result)` is called as each one ends."""
    results: list[GenerationResult | None] = [None] * len(requests)
    for index, result in iter_generate(model, requests, batch_size, stats):
        results[index] = result
        if on_result is not None:
            on_result(index, result)
    return results  # type: ignore[return-value]

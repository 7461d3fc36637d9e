"""Batched generation under constraints, with continuous batching: the engine (`Generator`) and
its thin loops over a fixed list of requests (`iter_generate`, `generate`).

A `Generator` runs `GenerationRequest`s on one KV cache: `submit` queues one, `step` admits
waiting requests, picks one token for every live sequence (one `sample_batch` call) and decodes
them in one forward pass, returning the `GenerationResult`s of those that ended. Each sequence
is asked once a token what it needs (`LiveSequence.need`: `Sample`, `Force`, `Finish`). The
decisions behind the engine (context, memory, budget, trigger, logprobs, jump-forward, prefix
cache, masked LM head, seeds) are in docs/engine.md.
"""

from __future__ import annotations

import inspect
import time
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from corral.kernels import SampleRow, Vocabulary, few_allowed_ids, sample_batch
from corral.model import kv_cache
from corral.model.errors import CacheError
from corral.model.generation_request import (
    BudgetTooSmallError,
    GenerationRequest,
    GenerationResult,
    ThinkingBudgetTooSmallError,
    UnwritableGrammarError,
    check_budget,
    check_request,
    is_integer,
)
from corral.model.jump_forward import ForcedTokenizer
from corral.model.llama import MASKED_HEAD_MAX
from corral.model.sequence import Finish, Force, LiveSequence, Need, Sample

__all__ = [
    "BudgetTooSmallError",
    "ThinkingBudgetTooSmallError",
    "CacheWarning",
    "GenerationRequest",
    "GenerationResult",
    "GenerationStats",
    "Generator",
    "UnwritableGrammarError",
    "check_budget",
    "check_request",
    "generate",
    "iter_generate",
]


MIN_SHARED = 16
"""The fewest prompt tokens the prefix cache reuses (vLLM's block size): shorter shared prefixes,
such as the chat template's opening that every prompt has, are prefilled again."""


class CacheWarning(UserWarning):
    """The KV cache runs fewer slots than asked for, to fit in the memory available."""


@dataclass
class GenerationStats:
    """Running totals, updated as a `Generator` steps (for progress bars and benches):
    decode steps, tokens (of which `forced_tokens` were written by jump-forward), prompt tokens
    admitted (with the forced tokens that went with them), the prefix cache's hits (admissions
    that reused a cached prefix) and the prompt tokens whose prefill they saved
    (`prefix_tokens`), seconds in prefill, in decode forward passes, and in masks and
    sampling, and the rows whose logits the masked LM head computed in part (`masked_rows`)."""

    steps: int = 0
    completion_tokens: int = 0
    forced_tokens: int = 0
    prompt_tokens: int = 0
    prefix_hits: int = 0
    prefix_tokens: int = 0
    prefill_seconds: float = 0.0
    forward_seconds: float = 0.0
    mask_and_sample_seconds: float = 0.0
    masked_rows: int = 0
    started: float = field(default_factory=time.perf_counter)


class Generator:
    """The engine: continuous batching of requests over one KV cache (docs/engine.md).

    Args:
        model: a `corral.model.Model`, or anything with `new_cache(n_slots, max_len)`,
            `prefill_batch(cache, slots, sequences)` (with `last`, as `Model`'s, for the
            forced tokens' logprobs), `decode(cache, slots, tokens)` and
            `vocabulary` (a `corral.kernels.Vocabulary`, whose `eos_ids` end free text).
        batch_size: how many sequences decode together (the KV cache's slots), >= 1; lowered
            to what fits in memory (a `CacheWarning`).
        max_len: the most tokens a sequence holds (prompt plus `max_tokens`), the cache's
            length and the context the engine serves; None or more than the model's
            `context_length`: the model's context.
        stats: updated in place as steps run, if given (else a fresh `GenerationStats`).
        prefix_cache: reuse the keys and values of a prompt's longest cached prefix
            (docs/engine.md); on only when the model's cache has `copy_prefix(source,
            target, length)`, as `KVCache` has. False: every prompt is prefilled whole.
        masked_head: compute only the allowed tokens' logits of a constrained row whose mask
            allows few (docs/engine.md); on only when the model's `decode` and
            `prefill_batch` take `allowed`, as `Model`'s do. False: every row's logits whole.

    Attributes:
        stats: the running `GenerationStats`.
        batch_size: the slots actually allocated.
        max_len: the context the engine serves, in tokens.

    Raises:
        CacheError: batch_size (or max_len) not an integer >= 1, or not even one slot fits in
            memory (the message gives the figures and the longest max_len that fits).
        TypeError: `stats` not a `GenerationStats`, or `prefix_cache` or `masked_head` not a
            boolean.
    """

    def __init__(
        self,
        model,
        batch_size: int,
        max_len: int | None = None,
        stats: GenerationStats | None = None,
        prefix_cache: bool = True,
        masked_head: bool = True,
    ):
        _check_size("batch_size", batch_size)
        if max_len is not None:
            _check_size("max_len", max_len)
        if stats is not None and not isinstance(stats, GenerationStats):
            raise TypeError(f"stats must be None or a GenerationStats, not {stats!r}")
        for name, value in (("prefix_cache", prefix_cache), ("masked_head", masked_head)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a boolean, not {value!r}")
        self.model = model
        self.vocabulary: Vocabulary = model.vocabulary
        self.stats = stats if stats is not None else GenerationStats()
        self._eos_ids = frozenset(self.vocabulary.eos_ids)
        tokenizer = getattr(model, "tokenizer", None)
        self._jump = None if tokenizer is None else ForcedTokenizer(tokenizer, self.vocabulary)
        context = model.context_length
        self.max_len = context if max_len is None else min(max_len, context)
        available = kv_cache.available_memory()
        dtype = getattr(model, "kv_dtype", kv_cache.DEFAULT_DTYPE)
        fit = kv_cache.slots_that_fit(
            model.config, batch_size, self.max_len, available, dtype=dtype
        )
        if fit < batch_size:
            needed = kv_cache.KVCache.bytes_needed(model.config, batch_size, self.max_len, dtype)
            warnings.warn(
                f"a KV cache of {batch_size} slots of {self.max_len} tokens needs "
                f"{kv_cache.format_bytes(needed)}, more than {kv_cache.MEMORY_SHARE:.0%} of the "
                f"{kv_cache.format_bytes(available)} available: running {fit} sequences at a time",
                CacheWarning,
                stacklevel=2,
            )
        self.batch_size = fit
        self._cache = model.new_cache(fit, self.max_len)
        self._free = list(range(fit - 1, -1, -1))
        self._prefix = prefix_cache and hasattr(self._cache, "copy_prefix")
        passes = (model.decode, model.prefill_batch)
        self._masked = masked_head and all(
            "allowed" in inspect.signature(f).parameters for f in passes
        )
        self._last = "last" in inspect.signature(model.prefill_batch).parameters
        self._held: dict[int, np.ndarray] = {}  # slot -> the tokens its first positions hold
        self._waiting: deque[tuple[int, GenerationRequest]] = deque()
        self._live: list[LiveSequence] = []
        self._needs: dict[int, Need] = {}  # handle -> what its next step needs (`_ask`)
        self._handles = 0

    @property
    def has_work(self) -> bool:
        """True while some submitted request has not ended."""
        return bool(self._waiting or self._live)

    @property
    def prefix_cache(self) -> bool:
        """True when the prefix cache is on: asked for, and the model's KV cache can copy a
        prefix (`copy_prefix`)."""
        return self._prefix

    def submit(self, request: GenerationRequest) -> int:
        """Queue `request`; it starts at a coming `step` when a slot is free. Returns its handle:
        0, 1, 2, ... in the order of submission.

        Raises (for this request only; the engine goes on):
            ContextLengthError: its prompt plus max_tokens exceed the model's context (the
                message gives the model's figures).
            BudgetTooSmallError: its max_tokens cannot hold its shortest answer (whose
                thought fits its thinking budget).
            ThinkingBudgetTooSmallError: its thinking budget cannot hold the block's markup.
            UnwritableGrammarError: no token sequence spells a complete answer.
            RequestError: its prompt plus max_tokens (absent: what the context leaves) fit the
                context but not this engine's smaller `max_len`; anything else it carries that
                cannot run (`check_request`).
        """
        request = check_request(
            request, self.model.context_length, len(self.vocabulary.tokens), self.max_len
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
                self._release(seq)
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

        Requests were checked at `submit`, so a step raises only on a fault of the engine or the
        model, never because of what a request carries.
        """
        self._admit()
        stats = self.stats
        started = time.perf_counter()
        self._choose()
        finished: list[tuple[int, GenerationResult]] = []
        chunks, still = [], []
        for seq in self._live:
            if seq.finish_reason is None:
                # ids[-1]: the sampled token (after a trigger's respelling, the new one)
                chunk = [seq.ids[-1], *seq.jump_forward()]
                stats.forced_tokens += len(chunk) - 1
                # an ending sequence needs no logits, no forward pass, unless its forced
                # tokens wait for their logprobs from the pass that writes them
                if not isinstance(self._ask(seq), Finish) or seq.awaiting:
                    chunks.append(chunk)
                    still.append(seq)
                    continue
            finished.append(self._release(seq))
        stats.mask_and_sample_seconds += time.perf_counter() - started
        self._live = still
        if still:
            self._decode(chunks)
            for seq in self._live:
                if seq.finish_reason is not None:  # it ran for its forced tokens' logprobs
                    finished.append(self._release(seq))
            self._live = [seq for seq in self._live if seq.finish_reason is None]
        return finished

    def _ask(self, seq: LiveSequence) -> Need:
        """Ask `seq` what its next step needs (`LiveSequence.need`), once per step, after the
        step's tokens are written: the answer is kept for the masked LM head (`_allowed`) and
        the next `_choose`, and a `Finish` ends the sequence now."""
        need = self._needs[seq.handle] = seq.need()
        if isinstance(need, Finish):
            seq.finish(need.reason)
        return need

    def _release(self, seq: LiveSequence) -> tuple[int, GenerationResult]:
        """Free the slot of `seq`, which ended or was cancelled, count its tokens, and return
        `(handle, result)`."""
        self.stats.completion_tokens += seq.generated
        self._free.append(seq.slot)
        self._needs.pop(seq.handle, None)
        return seq.handle, seq.result()

    def _choose(self) -> None:
        """Act on every live sequence's need (`_ask`): a `Force` writes its token, and every
        `Sample` is drawn in one `sample_batch` call per block of logits (one in a decode step;
        the prefill's block and biased rows are blocks of their own)."""
        groups: dict[int, tuple[list[LiveSequence], list[SampleRow]]] = {}
        for seq in self._live:
            if seq.finish_reason is not None:  # a `Finish`
                continue
            need = self._needs[seq.handle]
            if isinstance(need, Force):
                seq.take_forced()
            else:
                sampling, rows = groups.setdefault(id(seq.block), ([], []))
                sampling.append(seq)
                rows.append(seq.sample_row(need))
        for sampling, rows in groups.values():
            out = sample_batch(sampling[0].block, rows)
            tokens, logprobs = out.tokens.tolist(), out.logprobs.tolist()
            asked = out.allowed_mass is not None
            mass = out.allowed_mass.tolist() if asked else None
            unmasked = out.unmasked_logprobs.tolist() if asked else None
            for b, seq in enumerate(sampling):
                top = out.top(b) if seq.top is not None else None
                diagnostics = (mass[b], unmasked[b]) if seq.mass is not None else None
                seq.take_sampled(tokens[b], logprobs[b], top, self._eos_ids, diagnostics)

    def _admit(self) -> None:
        """Give waiting requests free slots and prefill their prompts (with the text forced at
        the start), each after the longest prefix of it already cached. Prompts share passes;
        one whose prefix another prompt of this admission writes goes in a later pass."""
        admitted = []
        while self._waiting and len(admitted) < len(self._free):
            handle, request = self._waiting.popleft()
            jump = self._jump if self._last or not request.model_logprobs else None
            seq = LiveSequence(handle, request, -1, self.vocabulary, jump)
            forced = seq.jump_forward()  # forced text at the start goes with the prompt
            self.stats.forced_tokens += len(forced)
            self._ask(seq)
            admitted.append((seq, np.concatenate([seq.prompt, np.asarray(forced, np.int64)])))
        if not admitted:
            return
        started = time.perf_counter()
        prefills: list[_Prefill] = []
        for seq, tokens in admitted:
            seq.slot, reused, source = self._place(tokens, prefills, 1 + seq.awaiting)
            seq.cached_tokens = min(reused, len(seq.prompt))
            depth = 0 if source is None else source.depth + 1
            prefills.append(_Prefill(seq, tokens, reused, source, depth))
            self.stats.prompt_tokens += len(tokens)
            self.stats.prefix_hits += int(reused > 0)
            self.stats.prefix_tokens += reused
        for depth in range(max(p.depth for p in prefills) + 1):
            group = [p for p in prefills if p.depth == depth]
            for p in group:
                if p.source is not None:
                    self._cache.copy_prefix(p.source.seq.slot, p.seq.slot, p.reused)
            slots = [p.seq.slot for p in group]
            tails = [p.tokens[p.reused :] for p in group]
            extra = self._allowed([p.seq for p in group])
            logits, rows = self._prefill(slots, tails, [p.seq for p in group], extra)
            for row, p in zip(rows, group, strict=True):
                p.seq.receive(logits, row)
                if self._prefix:
                    self._held[p.seq.slot] = p.tokens
            self._live.extend(p.seq for p in group)
        self.stats.prefill_seconds += time.perf_counter() - started

    def _place(
        self, tokens: np.ndarray, prefills: list[_Prefill], needed: int = 1
    ) -> tuple[int, int, _Prefill | None]:
        """A free slot for a sequence that prefills `tokens`, and the prefix it reuses:
        `(slot, tokens reused, source)`. The longest prefix of at least `MIN_SHARED` tokens
        (never the last `needed` tokens, whose logits are needed) held by a slot is copied into
        the slot now, or kept in place when that slot is free (then it is the one taken); one that a
        prompt admitted before it in this step writes (`source`, one of `prefills`) is copied
        once that prompt's pass has run. Otherwise the slot is emptied; a free slot holding
        nothing goes first, then the one freed longest ago."""
        cache = self._cache
        if not self._prefix:
            slot = self._free.pop()
            cache.reset(slot)
            return slot, 0, None
        limit = len(tokens) - needed
        reused, holder, source = 0, None, None
        for slot, held in self._held.items():
            shared = _shared_prefix(held, tokens, limit)
            if shared > reused:
                reused, holder = shared, slot
        for prefill in prefills:
            shared = _shared_prefix(prefill.tokens, tokens, limit)
            if shared > reused:
                reused, holder, source = shared, None, prefill
        if reused < MIN_SHARED:
            reused, holder, source = 0, None, None
        if holder is not None and holder in self._free:
            slot = holder
        else:
            slot = next((s for s in self._free if s not in self._held), self._free[0])
        self._free.remove(slot)
        self._held.pop(slot, None)
        if holder is not None:
            cache.copy_prefix(holder, slot, reused)
        else:
            cache.reset(slot)
        return slot, reused, source

    def _decode(self, chunks: list[list[int]]) -> None:
        """One forward pass: the tokens `chunks[i]` are appended to `self._live[i]`'s slot (a
        decode pass when every chunk is one token, else one prefill pass for all of them)."""
        order = sorted(range(len(self._live)), key=lambda i: self._live[i].slot)
        self._live = [self._live[i] for i in order]
        started = time.perf_counter()
        slots = [seq.slot for seq in self._live]
        extra = self._allowed(self._live)
        if all(len(chunk) == 1 for chunk in chunks):
            logits = self.model.decode(self._cache, slots, [chunks[i][0] for i in order], **extra)
            rows = range(len(slots))
        else:
            ordered = [chunks[i] for i in order]
            logits, rows = self._prefill(slots, ordered, self._live, extra)
        self.stats.forward_seconds += time.perf_counter() - started
        self.stats.steps += 1
        for row, seq in zip(rows, self._live, strict=True):
            seq.receive(logits, row)

    def _prefill(self, slots, sequences, live: list[LiveSequence], extra: dict):
        """One `prefill_batch` of `sequences` into `slots` for the sequences `live`; the rows
        before a sequence's last hold the logits of the tokens it `awaiting`s, which it takes
        here (`LiveSequence.receive_forced`). Returns (logits, the row of each sequence's
        next-token logits)."""
        last = [seq.awaiting + 1 for seq in live]
        if all(k == 1 for k in last):
            logits = self.model.prefill_batch(self._cache, slots, sequences, **extra)
            return logits, range(len(slots))
        logits = self.model.prefill_batch(self._cache, slots, sequences, last=last, **extra)
        ends = np.cumsum(last) - 1
        for seq, end, k in zip(live, ends.tolist(), last, strict=True):
            if k > 1:
                seq.receive_forced(logits, end - k + 1)
        return logits, ends.tolist()

    def _allowed(self, sequences: list[LiveSequence]) -> dict:
        """The masked LM head's argument of a pass over `sequences`: {"allowed": for each one,
        the ids (int32, ascending) its next token may take when its need is a constrained
        `Sample` whose mask allows at most `MASKED_HEAD_MAX` tokens, else None (the logits
        whole)}, or {} when the head is off or every row needs its logits whole (so a model
        without `allowed` is called as before). Everything a sample reads under a mask (its
        logprob, `top_logprobs`, a `logit_bias`, penalties) is at allowed ids; a request asking
        for `allowed_mass` reads every logit, so its rows are never the head's."""
        if not self._masked:
            return {}
        allowed = [
            None if seq.request.allowed_mass else _head_ids(self._needs[seq.handle])
            for seq in sequences
        ]
        if all(ids is None for ids in allowed):
            return {}
        self.stats.masked_rows += sum(ids is not None for ids in allowed)
        return {"allowed": allowed}


@dataclass(frozen=True, eq=False)
class _Prefill:
    """A sequence admitted in this step: its prompt `tokens` (int64, with the forced text at
    the start), the first `reused` of them taken from the cache, from `source`'s slot when
    another admitted prompt writes them, and its pass (`depth`: one after its source's)."""

    seq: LiveSequence
    tokens: np.ndarray
    reused: int
    source: _Prefill | None
    depth: int


def iter_generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    stats: GenerationStats | None = None,
    prefix_cache: bool = True,
    masked_head: bool = True,
) -> Iterator[tuple[int, GenerationResult]]:
    """Run `requests` with continuous batching (a `Generator` sized for them: max_len is the
    longest prompt plus max_tokens among them, at most the model's context; `prefix_cache` and
    `masked_head` as `Generator`'s); yield `(request index, result)` as each ends.

    Raises (before anything runs):
        RequestError: a request `Generator.submit` refuses (`ContextLengthError`,
            `BudgetTooSmallError`, ...).
        CacheError: batch_size not an integer >= 1, or not even one slot fits in memory.
        TypeError: `requests` not a sequence of `GenerationRequest`s (or a `Generator`
            argument of the wrong type).
    """
    _check_requests(requests)
    if not requests:
        return
    context = model.context_length
    wanted = (_wanted(r, context) for r in requests)
    max_len = min(context, max(1, *wanted))
    _check_size("batch_size", batch_size)
    batch_size = min(batch_size, len(requests))
    generator = Generator(model, batch_size, max_len, stats, prefix_cache, masked_head)
    for request in requests:
        generator.submit(request)
    while generator.has_work:
        yield from generator.step()


def generate(
    model,
    requests: Sequence[GenerationRequest],
    batch_size: int = 16,
    stats: GenerationStats | None = None,
    prefix_cache: bool = True,
    masked_head: bool = True,
) -> list[GenerationResult]:
    """Run `requests` (see `iter_generate`) and return their results in request order."""
    _check_requests(requests)
    results: list[GenerationResult | None] = [None] * len(requests)
    run = iter_generate(model, requests, batch_size, stats, prefix_cache, masked_head)
    for index, result in run:
        results[index] = result
    return results  # type: ignore[return-value]


def _wanted(request: GenerationRequest, context: int) -> int:
    """The tokens `request` may fill: its prompt plus max_tokens (None: the context); 1 for a
    request whose fields are not those numbers (`Generator.submit` refuses it, naming them)."""
    prompt, max_tokens = request.prompt_ids, request.max_tokens
    if not isinstance(prompt, Sequence | np.ndarray):
        return 1
    if max_tokens is None:
        return len(prompt) + context
    return len(prompt) + max_tokens if is_integer(max_tokens) and max_tokens > 0 else 1


def _check_requests(requests) -> None:
    """Raise a TypeError unless `requests` is a sequence of `GenerationRequest`s."""
    if (
        not isinstance(requests, Sequence)
        or isinstance(requests, str | bytes)
        or not all(isinstance(r, GenerationRequest) for r in requests)
    ):
        raise TypeError(f"requests must be a sequence of GenerationRequest, not {requests!r:.80}")


def _check_size(name: str, value) -> None:
    """Raise a `CacheError` naming `name` unless `value` is an integer >= 1."""
    if not (is_integer(value) and value >= 1):
        raise CacheError(f"{name} must be an integer >= 1, not {value!r}")


def _head_ids(need: Need) -> np.ndarray | None:
    """The ids (int32) the masked LM head computes for a row whose next step is `need`: those
    of a constrained `Sample`'s mask when it allows at most `MASKED_HEAD_MAX`; else None."""
    if isinstance(need, Sample) and need.constrained:
        return few_allowed_ids(need.mask, MASKED_HEAD_MAX)
    return None


def _shared_prefix(held: np.ndarray, tokens: np.ndarray, limit: int) -> int:
    """How many leading token ids `held` and `tokens` (int64 [n]) share, at most `limit`."""
    n = min(len(held), len(tokens), limit)
    differ = np.flatnonzero(held[:n] != tokens[:n])
    return int(differ[0]) if len(differ) else n

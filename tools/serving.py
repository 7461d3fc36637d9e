"""The engine thread behind `corral serve` (docs/design.md section 9): one thread owns the model
and one `Generator`, so the event loop never waits on it.

`EngineThread.submit(job)` hands a `Job` (the engine requests of one chat request's `n`
choices) to the thread; each step, the thread takes new jobs and cancellations, runs one
`Generator.step`, and posts each job's events to its asyncio loop: `("text", choice,
new_bytes)` for a streamed choice that grew, `("done", choice, GenerationResult)` when a choice
ends, `("error", exception)` when the engine failed it. `admit(n)` refuses a job once the batch
is full and `max_waiting` choices wait (the server's 429).

Low-priority work (the Batch API's lines, `corral.tools.batch_service`) comes from
`EngineThread.background`: the thread asks it for a few `BackgroundJob`s (`take`) into slots
that are free: up to `BESIDE` choices beside interactive ones already running, and, once none
is in the engine, only `QUIET_STEPS` steps after the last one left (an idle engine waits as long
as they would take); an interactive job drops
(preempts) the newest background jobs until it finds free slots and at most `BESIDE`
background choices run beside it; they get `("preempted",)` and run again later: an interactive
request never waits behind batch work for more than one step.
A background job cancelled gets `("cancelled",)`. `ChoiceStream` turns one streamed
choice's bytes into tool-call events, holding back what a stop string could still remove.
`Metrics` are the Prometheus series of `/metrics`.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from corral.automata.special import complete_symbols_length
from corral.model.generate import GenerationRequest, GenerationResult, Generator
from corral.model.generation_request import text_decoder
from corral.tools.events import CallStart, Content, ToolEvent
from corral.tools.parser import HERMES_SYNTAX, ToolParser
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

DEFAULT_MAX_WAITING = 64
BESIDE = 4
"""The most background choices an interactive job leaves running beside it (`_preempt`)."""
QUIET_STEPS = 2
"""Steps after the last interactive choice leaves the engine before background lines are
admitted again, while background choices run (`_feed`): a client's next request, sent as the
last one ends, then waits for a decode step of at most `BESIDE` choices, not for one that also
prefills new batch lines (docs/server.md, "Batch work and interactive latency")."""
LOG = logging.getLogger("corral.serve")
"""Where the engine thread reports what it failed (a traceback), as uvicorn's own loggers do."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The Prometheus series of one server, in their own `registry` (so that two servers in one
    process do not clash). Names follow vLLM's where they exist."""

    def __init__(self):
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "corral_http_requests", "HTTP requests by route and status", ["route", "status"],
            registry=r,
        )  # fmt: skip
        self.prompt_tokens = Counter("corral_prompt_tokens", "Prompt tokens served", registry=r)
        self.completion_tokens = Counter(
            "corral_completion_tokens", "Completion tokens generated", registry=r
        )
        self.time_to_first_token = Histogram(
            "corral_time_to_first_token_seconds", "Seconds from submission to the first token",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.inter_token_latency = Histogram(
            "corral_inter_token_latency_seconds", "Seconds between a choice's successive tokens",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.running = Gauge("corral_requests_running", "Choices holding a slot", registry=r)
        self.waiting = Gauge("corral_requests_waiting", "Choices waiting for a slot", registry=r)
        self.mask_seconds = Counter(
            "corral_mask_and_sample_seconds", "Seconds spent in token masks and sampling",
            registry=r,
        )  # fmt: skip
        self.prefix_queries = Counter(
            "corral_prefix_cache_queries", "Prompt tokens admitted, looked up in the prefix cache",
            registry=r,
        )  # fmt: skip
        self.prefix_hits = Counter(
            "corral_prefix_cache_hits", "Prompt tokens whose prefill the prefix cache saved",
            registry=r,
        )  # fmt: skip

    def watch_grammars(self, compiler) -> None:
        """Serve `compiler`'s cache counts (`GrammarCompiler.hits` and `misses`) as the counter
        `corral_grammar_cache_lookups_total{result="hit"|"miss"}`, read at each scrape."""
        self.registry.register(_GrammarCacheCollector(compiler))


class _GrammarCacheCollector:
    """A Prometheus collector of a `GrammarCompiler`'s hits and misses."""

    def __init__(self, compiler):
        self.compiler = compiler

    def collect(self):
        family = CounterMetricFamily(
            "corral_grammar_cache_lookups", "Grammar cache lookups by result", labels=["result"]
        )
        family.add_metric(["hit"], self.compiler.hits)
        family.add_metric(["miss"], self.compiler.misses)
        yield family


@dataclass(eq=False)
class Job:
    """One chat request in the engine: its choices' engine requests, whether it streams, and the
    asyncio loop and queue its events go to. `handles` maps the Generator's handles to choice
    indexes (written by the engine thread only)."""

    choices: list[GenerationRequest]
    stream: bool
    loop: object  # asyncio.AbstractEventLoop
    events: object  # asyncio.Queue
    handles: dict[int, int] = field(default_factory=dict)
    submitted: float = field(default_factory=time.perf_counter)
    dropped: bool = False

    background = False

    def post(self, event: tuple) -> None:
        """Hand `event` to the job's loop (from any thread); dropped if the loop is closed."""
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)


@dataclass(eq=False)
class BackgroundJob(Job):
    """A low-priority job (see the module docstring): not counted by `admit`, its events put
    as `(job, event)` on `events`, a `queue.Queue` (`loop` is unused)."""

    background = True

    def post(self, event: tuple) -> None:
        self.events.put((self, event))


class EngineThread:
    """The thread that owns the model's `Generator` (see the module docstring).

    Args:
        model: a `corral.model.Model` (or the engine's stand-in, see `Generator`).
        batch_size: KV cache slots, the most choices decoding together.
        max_len: the most tokens a choice holds, prompt included.
        max_waiting: the most choices waiting for a slot before `admit` refuses.
        metrics: where to count tokens, latencies and queue lengths.
        prefix_cache: reuse the keys and values of prompt prefixes already prefilled
            (`Generator`'s prefix cache).
    """

    def __init__(
        self,
        model,
        batch_size: int,
        max_len: int,
        max_waiting: int,
        metrics: Metrics,
        prefix_cache: bool = True,
    ):
        self.model = model
        self.batch_size = batch_size
        self.max_len = max_len
        self.max_waiting = max_waiting
        self.metrics = metrics
        self.prefix_cache = prefix_cache
        self.generator = Generator(model, batch_size, max_len, prefix_cache=prefix_cache)
        self._inbox: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._load = 0  # choices submitted and not yet ended or cancelled
        self._jobs: dict[int, Job] = {}  # handle -> job
        self._last_token: dict[int, float] = {}  # handle -> time of its last new bytes
        self._lengths: dict[int, int] = {}  # handle -> bytes reported so far
        self.background = None  # low-priority work: `take(room, empty) -> [BackgroundJob]`
        self._background: dict[BackgroundJob, None] = {}  # in the engine, oldest first
        self._quiet = 0  # steps left before background lines may be admitted (`QUIET_STEPS`)
        self._step_seconds = 0.0  # how long the last step with a forward pass took
        self._thread = threading.Thread(target=self._run, name="corral-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after its current step, and wait for it."""
        self._inbox.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    @property
    def load(self) -> int:
        """Choices in the engine (running or waiting)."""
        with self._lock:
            return self._load

    def admit(self, n: int) -> bool:
        """Reserve room for `n` choices: False when the batch is full and the waiting queue
        would pass `max_waiting` (the caller answers 429). A job larger than the whole capacity
        is admitted when the engine is empty, so that it cannot wait forever."""
        with self._lock:
            if self._load and self._load + n > self.batch_size + self.max_waiting:
                return False
            self._load += n
            return True

    def submit(self, job: Job) -> None:
        """Queue an admitted job (see `admit`); its events arrive on `job.events`."""
        self._inbox.put(("submit", job))

    def cancel(self, job: Job) -> None:
        """Drop what is left of a job (its client went away); its slots free at the next step."""
        self._inbox.put(("cancel", job))

    # --- the thread ------------------------------------------------------------------------

    def wake(self) -> None:
        """Have the thread ask `background` for work (it has new lines)."""
        self._inbox.put(("wake", None))

    def _run(self) -> None:
        while True:
            self._feed()
            idle = not self.generator.has_work
            linger = self._step_seconds * QUIET_STEPS if idle and self._quiet else None
            try:
                op = self._inbox.get(block=idle, timeout=linger)
            except queue.Empty:
                if idle:  # the quiet steps' time passed with no request: batch lines may run
                    self._quiet = 0
                op = ()
            while op != ():
                if op is None:
                    return
                self._apply(*op)
                try:
                    op = self._inbox.get_nowait()
                except queue.Empty:
                    op = ()
            if self.generator.has_work:
                self._step()
                if self._background:
                    time.sleep(0)  # the kernels hold the GIL: let a request being read have it
            self.metrics.running.set(self.generator.n_live)
            self.metrics.waiting.set(self.generator.n_waiting)

    def _feed(self) -> None:
        """Background jobs into free slots: beside interactive choices that all hold a slot (so
        past their first step), up to `BESIDE` background choices; with none in the engine, not
        in the `QUIET_STEPS` steps after the last one left (an idle engine counts them as the
        time the last step took, `_run`)."""
        if self.background is None or self.generator.n_waiting:
            return
        room = self.batch_size - self.generator.n_live
        if self._load:
            running = sum(h in self._jobs for job in self._background for h in job.handles)
            if self._load > len(self._jobs) - running:  # an interactive job not yet submitted
                return
            room = min(room, BESIDE - running)
        elif self._quiet:
            return
        if room > 0:
            for job in self.background.take(room, not self.generator.has_work):
                self._apply("submit", job)

    def _preempt(self, n: int) -> None:
        """Drop the newest background jobs until `n` more choices find free slots and at most
        `BESIDE` background choices run (each decode step is then not much longer than the
        interactive choices' own)."""
        running = sum(h in self._jobs for job in self._background for h in job.handles)
        over = self.generator.n_live + self.generator.n_waiting + n - self.batch_size
        over = max(over, running - BESIDE)
        for job in reversed(list(self._background)):
            if over <= 0:
                return
            over -= sum(handle in self._jobs for handle in job.handles)
            self._drop(job)
            job.post(("preempted",))

    def _apply(self, kind: str, job: Job) -> None:
        if kind == "wake":
            return
        if kind == "submit":
            if job.background:
                self._background[job] = None
            else:
                self._preempt(len(job.choices))
            try:
                for i, request in enumerate(job.choices):
                    handle = self.generator.submit(request)
                    job.handles[handle] = i
                    self._jobs[handle] = job
                    self._lengths[handle] = 0
            except Exception as error:  # the request was checked before: an engine refusal
                LOG.exception("the engine refused a request it had admitted")
                self._drop(job)
                job.post(("error", error))
        else:
            self._drop(job)
            if job.background:
                job.post(("cancelled",))

    def _drop(self, job: Job) -> None:
        """Cancel a job's remaining choices and give back their room (once)."""
        if job.dropped:
            return
        job.dropped = True
        live = [h for h in job.handles if self._jobs.pop(h, None) is not None]
        for handle in live:
            self.generator.cancel(handle)
            self._forget(handle)
        if job.background:
            self._background.pop(job, None)
            return
        unsubmitted = len(job.choices) - len(job.handles)  # a submit that failed part-way
        with self._lock:
            self._load -= len(live) + unsubmitted

    def _forget(self, handle: int) -> None:
        self._last_token.pop(handle, None)
        self._lengths.pop(handle, None)

    def _step(self) -> None:
        stats = self.generator.stats
        mask_before = stats.mask_and_sample_seconds
        prompt_before, reused_before = stats.prompt_tokens, stats.prefix_tokens
        self._quiet = QUIET_STEPS if self._load else max(self._quiet - 1, 0)
        started, passes = time.perf_counter(), stats.steps
        try:
            finished = self.generator.step()
        except Exception as error:  # a failed forward pass: fail every job, start afresh
            LOG.exception("a step of the engine failed: every running request fails")
            self._fail_all(error)
            return
        if stats.steps > passes:  # not a step whose choices all ended without a pass
            self._step_seconds = time.perf_counter() - started
        metrics = self.metrics
        metrics.mask_seconds.inc(stats.mask_and_sample_seconds - mask_before)
        if self.prefix_cache:  # with the cache off, nothing is looked up
            metrics.prefix_queries.inc(stats.prompt_tokens - prompt_before)
            metrics.prefix_hits.inc(stats.prefix_tokens - reused_before)
        now = time.perf_counter()
        for handle, text in self.generator.partial_text().items():
            job = self._jobs[handle]
            grown = len(text) - self._lengths[handle]
            if grown > 0 and not job.background:
                self._tick(handle, job, now)
                self._lengths[handle] = len(text)
                if job.stream:
                    job.post(("text", job.handles[handle], text[len(text) - grown :]))
        for handle, result in finished:
            job = self._jobs.pop(handle)
            if result.completion_tokens and handle not in self._last_token and not job.background:
                self._tick(handle, job, now)
            self._forget(handle)
            if job.background:
                if not any(h in self._jobs for h in job.handles):
                    self._background.pop(job, None)
            else:
                with self._lock:
                    self._load -= 1
            metrics.prompt_tokens.inc(result.prompt_tokens)
            metrics.completion_tokens.inc(result.completion_tokens)
            job.post(("done", job.handles[handle], result))

    def _tick(self, handle: int, job: Job, now: float) -> None:
        """A choice produced new bytes: observe its time to first token or inter-token
        latency."""
        last = self._last_token.get(handle)
        if last is None:
            self.metrics.time_to_first_token.observe(now - job.submitted)
        else:
            self.metrics.inter_token_latency.observe(now - last)
        self._last_token[handle] = now

    def _fail_all(self, error: Exception) -> None:
        jobs = {id(job): job for job in self._jobs.values()}
        for job in jobs.values():
            self._drop(job)
            job.post(("error", error))
        self.generator = Generator(
            self.model, self.batch_size, self.max_len, prefix_cache=self.prefix_cache
        )


class ChoiceStream:
    """One streamed choice: its new bytes in, tool-call events out (see the module docstring).

    Args:
        call_id: the request id its calls are named after (`call_<call_id>_<index>`), or None
            when the request allows no calls (all text is `Content`).
        stop: the request's stop strings; the last `len(longest) - 1` bytes are held back until
            the choice ends, since the engine cuts a stop string only once it is complete.
        syntax: the parser's `CallSyntax` (the request's turn format; Hermes' by default).
        vocabulary: the model's `Vocabulary`, whose special tokens' symbols are read as their
            texts (a symbol cut short is held back until whole); None: no symbols.
    """

    def __init__(
        self, call_id: str | None, stop: tuple[str, ...], syntax=HERMES_SYNTAX, vocabulary=None
    ):
        self.parser = ToolParser(call_id, syntax) if call_id is not None else None
        self.symbols = vocabulary if getattr(vocabulary, "special_texts", None) else None
        self.decoder = text_decoder()
        self.hold = max((len(s.encode("utf-8")) for s in stop), default=1) - 1
        self.pending = bytearray()
        self.released = 0  # bytes handed to the decoder
        self.calls = 0

    def feed(self, new_bytes: bytes) -> list[ToolEvent]:
        """Events for the bytes a step added."""
        self.pending += new_bytes
        cut = len(self.pending) - self.hold
        if self.symbols is not None:
            cut = min(cut, complete_symbols_length(bytes(self.pending)))
        if cut <= 0:
            return []
        piece = bytes(self.pending[:cut])
        del self.pending[:cut]
        self.released += len(piece)
        if self.symbols is not None:
            piece = self.symbols.text_of_symbols(piece)
        return self._events(self.decoder.decode(piece), last=False)

    def finish(self, result: GenerationResult) -> list[ToolEvent]:
        """The last events, from the choice's final bytes (`result.data`, a stop string already
        cut off: they begin with every byte released so far). The text of all the events is
        `result.text`, whatever bytes are not UTF-8 and wherever the pieces were cut."""
        rest = result.data[self.released :]
        if self.symbols is not None:
            rest = self.symbols.text_of_symbols(rest)
        return self._events(self.decoder.decode(rest, final=True), last=True)

    def replay(self, result: GenerationResult, token_bytes) -> list[tuple]:
        """A whole choice streamed from its result, token by token: `(event, positions)` pairs,
        `positions` the indexes in `result.token_ids` of the tokens whose bytes the event first
        carries (a token's bytes held back, by a stop string's possible start or by the parser,
        go with the next event; what is left at the end goes with the last one, or with a
        final `(None, positions)` when the end yields no event). `token_bytes[id]` are a
        token's bytes (None for a special token). For a streamed request with logprobs."""
        data = result.data
        pairs: list[tuple] = []
        pending: list[int] = []

        def take(events: list[ToolEvent]) -> None:
            nonlocal pending
            for k, event in enumerate(events):
                pairs.append((event, pending if k == 0 else []))
            if events:
                pending = []

        written = 0
        for j, token in enumerate(result.token_ids):
            pending.append(j)
            # the answer's bytes, cut where the tokens' bytes end (the last may be cut short by
            # a stop string)
            piece = data[written : written + len(token_bytes[token] or b"")]
            written += len(piece)
            take(self.feed(piece))
        take(self.finish(result))
        if pending:
            if pairs and not pairs[-1][1]:
                pairs[-1] = (pairs[-1][0], pending)
            else:
                pairs.append((None, pending))
        return pairs

    def _events(self, text: str, last: bool) -> list[ToolEvent]:
        if self.parser is None:
            events: list[ToolEvent] = [Content(text)] if text else []
        else:
            events = self.parser.push(text) if text else []
            if last:
                events += self.parser.finish()
        self.calls += sum(isinstance(e, CallStart) for e in events)
        return events

"""The engine thread's priority of interactive requests over Batch API lines
(`corral.tools.serving`, issue 39): driven turn by turn, as its loop runs them, over the
stand-in model, for random arrival orders of a sequential client beside a batch."""

from __future__ import annotations

import queue

from corral.model.generate import GenerationRequest
from corral.tools.serving import BESIDE, QUIET_STEPS, BackgroundJob, EngineThread, Job, Metrics
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel


class _Loop:
    """What `Job.post` uses of an asyncio loop, calling at once."""

    def call_soon_threadsafe(self, callback, *args):
        callback(*args)


class _Batch:
    """A background source of `lines` (max_tokens each), as `BatchService.take` hands them out:
    at most 4 choices a call, at most `room`."""

    def __init__(self, lines: list[int]):
        self.lines = list(lines)
        self.events: queue.Queue = queue.Queue()
        self.taken = 0
        self.answered = 0

    def take(self, room: int, empty: bool) -> list[BackgroundJob]:
        jobs = []
        while self.lines and len(jobs) < min(room, 4):
            request = GenerationRequest([1, 2, 3, len(self.lines)], self.lines.pop(), seed=0)
            jobs.append(BackgroundJob([request], False, None, self.events))
        self.taken += len(jobs)
        return jobs

    def collect(self) -> None:
        """Count the lines that ended; a preempted one goes back to the queue's front."""
        while not self.events.empty():
            job, event = self.events.get_nowait()
            if event[0] == "preempted":
                self.lines.append(job.choices[0].max_tokens)
            else:
                self.answered += event[0] == "done"


def interactive(max_tokens: int) -> Job:
    return Job([GenerationRequest([7, 8, 9], max_tokens, seed=1)], False, _Loop(), queue.Queue())


@settings(deadline=None, max_examples=60)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=30),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 6)), min_size=1, max_size=8),
)
def test_batch_lines_are_never_admitted_just_after_an_interactive_request(lines, requests):
    """A sequential client sends each request `gap` turns after the last one ended (0: at once,
    as its answer arrives): once no interactive choice is in the engine, no step admits batch
    lines within `QUIET_STEPS` steps of the last that held one (so the next request waits for a
    decode step of at most `BESIDE` batch choices, never for a batch prefill); at most `BESIDE`
    batch choices run beside an interactive one (batch lines still start beside it); and every
    line and request still ends. An idle
    engine waits for a request before it admits batch lines (the test's turn with no arrival
    stands for that wait timing out)."""
    assert QUIET_STEPS >= 1  # a window of no steps would let a batch prefill in: the fault
    thread = EngineThread(StandInModel(eos_bias=-100.0), 8, 64, 8, Metrics())
    batch = _Batch(lines)
    thread.background = batch
    pending = list(requests)
    current: Job | None = None
    gap = 0
    since_interactive = None  # steps since the last step that held an interactive choice
    lingered = False  # the engine was idle since that step, and no request came
    for _ in range(2000):
        if current is None and not pending and not thread.generator.has_work and not batch.lines:
            break
        batch.collect()
        taken = batch.taken
        thread._feed()
        if batch.taken > taken and since_interactive is not None and not thread._load:
            assert since_interactive >= QUIET_STEPS or lingered
        if current is None and pending:
            if gap == 0:
                gap, tokens = pending.pop(0)
                current = interactive(tokens)
                assert thread.admit(1)
                thread._apply("submit", current)
            else:
                gap -= 1
        if not thread.generator.has_work:
            if current is None:  # idle, and no request came in the quiet steps' time
                thread._quiet, lingered = 0, True
            continue
        if thread._load:
            running = sum(h in thread._jobs for job in thread._background for h in job.handles)
            assert running <= BESIDE
            since_interactive, lingered = 0, False
        elif since_interactive is not None:
            since_interactive += 1
        thread._step()
        if current is not None and not current.events.empty():
            assert current.events.get_nowait()[0] == "done"
            current = None
    else:
        raise AssertionError("the engine did not finish the batch and the requests")
    assert not pending and current is None
    batch.collect()
    assert batch.answered == len(lines)


def test_batch_lines_start_beside_a_running_interactive_request_after_its_first_step():
    """Batch lines keep their pace under interactive load: once an interactive choice holds its
    slot, the engine admits batch lines beside it, up to `BESIDE` choices, never in its first
    step."""
    thread = EngineThread(StandInModel(eos_bias=-100.0), 8, 64, 8, Metrics())
    batch = _Batch([20] * 10)
    thread.background = batch
    job = interactive(30)
    assert thread.admit(1)
    thread._feed()  # the request is admitted, not yet submitted: no batch line
    assert batch.taken == 0
    thread._apply("submit", job)
    thread._step()  # its first step
    assert batch.taken == 0
    for _ in range(3):
        thread._feed()
        thread._step()
    running = sum(h in thread._jobs for j in thread._background for h in j.handles)
    assert batch.taken == running == BESIDE
    assert job.events.empty()  # still running

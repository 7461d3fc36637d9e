"""Each engine in its own worker process, with a time cap per job (bench/engines.py).

A `Worker` spawns a process that loads a vocabulary (`VOCABULARIES`) and one engine, then answers
jobs sent over a pipe: `measure` (compile, first mask, masks and advances along a token walk),
`cover` (compile, then feed instances token by token) and `forget` (drop the engine's
cross-grammar caches and warm up again, before a repeated `measure`). A job that runs past its
time cap (CPU seconds of the worker, so a busy machine does not turn into false timeouts; and a
wall-clock backstop) kills the process (result "timeout"); a process that dies (result
"crashed") is restarted on the next job. Nothing is hidden: every job gets a result with a `status`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import traceback
from pathlib import Path

import numpy as np

STARTUP_SECONDS = 300.0
WALL_FACTOR = 10  # a job's wall-clock cap is this many times its CPU-time cap


def _rss_bytes() -> int:
    """Resident set size of this process (Linux /proc), bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


VOCAB_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "llama.cpp" / "vocab"
"""llama.cpp's vocabulary-only GGUF files (its tokenizer tests' data)."""

VOCABULARIES = {
    "smollm2": ("SmolLM2", None),
    "llama3": ("Llama 3", "ggml-vocab-llama-bpe.gguf"),
    "qwen2": ("Qwen2", "ggml-vocab-qwen2.gguf"),
    "gemma4": ("Gemma 4", "ggml-vocab-gemma-4.gguf"),
}
"""`--vocab` name -> (title, GGUF file in `VOCAB_DIR`; None: the default model's tokenizer.json)."""


def load_vocabulary(name: str = "smollm2", vocab_dir: Path = VOCAB_DIR):
    """(`Vocabulary`, tokenizer.json text) of the vocabulary called `name` (`VOCABULARIES`):
    SmolLM2's from the default model's cached folder (49,152 ids), the others from their GGUF
    file, whose `tokenizer.*` metadata corral turns into both (`corral.model.gguf_tokenizer`:
    the same token bytes for every engine; llguidance reads the JSON).

    Raises:
        KeyError: an unknown name. FileNotFoundError: the GGUF file is missing.
    """
    title, file = VOCABULARIES[name]
    if file is None:
        from corral.model.loading import default_model_folder
        from corral.model.vocabulary import vocabulary_from_tokenizer

        path = default_model_folder(progress=False) / "tokenizer.json"
        return vocabulary_from_tokenizer(path, size=49152), path.read_text(encoding="utf-8")
    from corral.model.gguf_metadata import read_gguf_metadata
    from corral.model.gguf_tokenizer import tokenizer_json_from_gguf
    from corral.model.vocabulary import vocabulary_from_fields

    path = vocab_dir / file
    if not path.is_file():
        raise FileNotFoundError(f"{title} vocabulary: no file {path}")
    fields = read_gguf_metadata(path, prefixes=("tokenizer.",))
    return vocabulary_from_fields(fields), json.dumps(tokenizer_json_from_gguf(fields, path))


WARM_UP = (
    ("regex", "(ab)+"),
    (
        "schema",
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer"},
                "s": {"type": "string"},
                "c": {"type": "string", "maxLength": 4},
            },
        },
    ),
)
"""What every engine's worker compiles (and masks once) before its first timed job: a regex and
a small schema (with a length-bounded string), so that no engine's first timed compile pays
one-time set-up (imports, lazily built tables, first calls) that a serving process pays once.
The timed grammars differ from these, so no compile cache can answer them."""


def warm_up(engine) -> None:
    """Compile each `WARM_UP` grammar and compute its first mask (nothing timed)."""
    for kind, source in WARM_UP:
        engine.start(engine.compile(kind, source)).fill()


def forget(engine) -> dict:
    """The engine's `forget`: drop every cross-grammar cache a repeat of the same grammar could
    hit, then warm up again (bench/engines.py runs it before each repeat of a `measure`, so a
    repeat is not answered from a memo of the one before). Returns {"status": "ok"}."""
    engine.forget()
    return {"status": "ok"}


def measure(engine, kind: str, source, walk: list[int]) -> dict:
    """Compile, first mask, then along `walk` (valid token ids, EOS last) advance and mask.

    Returns a dict: status "ok" or "refused" (with `error`); compile_s and first_mask_s
    (compile + start + first mask, seconds); mask_s and advance_s (seconds per step, lists);
    masks (uint32 `[steps, ceil(V/32)]`, the mask before each token of the walk); refused_at
    (index of the first walk token the engine refused, or None); states (corral only: the DFA
    state before each token); rss_growth (bytes, compile to end of walk); cpu_s (CPU seconds of
    the whole job, every thread of the process).
    """
    from engine_adapters import Refused

    rss = _rss_bytes()
    start, cpu = time.perf_counter(), time.process_time()
    try:
        compiled = engine.compile(kind, source)
    except Refused as error:
        return {"status": "refused", "error": str(error)}
    compiled_at = time.perf_counter()
    session = engine.start(compiled)
    session.fill()
    first = time.perf_counter()
    masks, states, mask_s, advance_s, refused_at = [session.buffer.copy()], [], [], [], None
    states.append(getattr(session, "state", -1))
    for step, token in enumerate(walk):
        t0 = time.perf_counter()
        ok = session.advance(token)
        t1 = time.perf_counter()
        if not ok:
            refused_at = step
            break
        advance_s.append(t1 - t0)
        if step == len(walk) - 1:
            break
        t0 = time.perf_counter()
        session.fill()
        mask_s.append(time.perf_counter() - t0)
        masks.append(session.buffer.copy())
        states.append(getattr(session, "state", -1))
    return {
        "status": "ok",
        "compile_s": compiled_at - start,
        "first_mask_s": first - start,
        "mask_s": mask_s,
        "advance_s": advance_s,
        "masks": np.stack(masks),
        "states": states,
        "refused_at": refused_at,
        "rss_growth": _rss_bytes() - rss,
        "cpu_s": time.process_time() - cpu,
    }


def cover(engine, kind: str, source, instances: list[list[int]]) -> dict:
    """Compile, then feed each instance (token ids, EOS last) from a fresh start.

    Returns a dict: status "ok" or "refused" (with `error`), compile_s (wall seconds),
    compile_cpu_s and cpu_s (CPU seconds of the process, every thread: the compile, the whole
    job), accepted (one bool per instance: every token taken, EOS included), narrowed (corral
    compiled the schema with narrowed bounds, docs/subsets.md).
    """
    from engine_adapters import Refused

    start, cpu = time.perf_counter(), time.process_time()
    try:
        compiled = engine.compile(kind, source)
    except Refused as error:
        return {"status": "refused", "error": str(error)}
    compile_s, compile_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    accepted = []
    for tokens in instances:
        session = engine.start(compiled)
        accepted.append(all(session.advance(token) for token in tokens))
    return {
        "status": "ok",
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "cpu_s": time.process_time() - cpu,
        "accepted": accepted,
        "narrowed": bool(getattr(engine, "narrowed", False)),
    }


def _serve(name: str, threads: int, memory_gib: float, vocab: str, connection) -> None:
    """Worker main: cap the address space, load the engine, say "ready", then answer jobs until
    the pipe closes."""
    import resource

    from engine_adapters import make_engine

    cap = int(memory_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        vocabulary, tokenizer_json = load_vocabulary(vocab)
        engine = make_engine(name, vocabulary, tokenizer_json, threads)
        warm_up(engine)  # JIT and lazy set-up of both paths, before any timing
    except Exception as error:  # reported to the parent, which records the engine unavailable
        connection.send({"status": "unavailable", "error": f"{type(error).__name__}: {error}"})
        return
    connection.send({"status": "ready"})
    jobs = {"measure": measure, "cover": cover, "forget": forget}
    while True:
        try:
            job, args = connection.recv()
        except EOFError:
            return
        try:
            result = jobs[job](engine, *args)
        except MemoryError:
            result = {"status": "crashed", "error": f"out of memory (cap {memory_gib:g} GiB)"}
        except Exception as error:  # an engine's own failure on one grammar, not ours
            result = {"status": "error", "error": f"{type(error).__name__}: {error}"}
            result["trace"] = traceback.format_exc(limit=3)
        connection.send(result)


class Worker:
    """One engine in a spawned process; `call(job, args, timeout)` -> the job's result dict, or
    {"status": "timeout" | "crashed" | "unavailable", ...}.

    Args:
        name: an engine of `engine_adapters.ENGINES`.
        threads: NUMBA_NUM_THREADS, OMP_NUM_THREADS and RAYON_NUM_THREADS of the process, and
            XGrammar's compile threads.
        memory_gib: the process's address-space cap (RLIMIT_AS), GiB: an engine that blows up
            on a grammar fails there ("crashed") instead of taking the machine's memory.
        vocab: the vocabulary's name (`VOCABULARIES`).
    """

    def __init__(self, name: str, threads: int = 1, memory_gib: float = 8.0, vocab="smollm2"):
        self.name, self.threads, self.memory_gib, self.vocab = name, threads, memory_gib, vocab
        self.process = self.connection = None
        self.unavailable: str | None = None
        self.restarts = 0
        self.cpu_s = 0.0  # CPU seconds of the process over its jobs and startups

    def _start(self) -> None:
        context = multiprocessing.get_context("spawn")
        parent, child = context.Pipe()
        threads = str(self.threads)
        saved = {k: os.environ.get(k) for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS")}
        os.environ.update(
            NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads, RAYON_NUM_THREADS=threads
        )
        try:
            self.process = context.Process(
                target=_serve,
                args=(self.name, self.threads, self.memory_gib, self.vocab, child),
                daemon=True,
            )
            self.process.start()
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
        child.close()
        self.connection = parent
        hello = self._receive(STARTUP_SECONDS)
        if hello.get("status") != "ready":
            self.unavailable = hello.get("error", hello["status"])
            self.stop()

    def _cpu_seconds(self) -> float:
        """CPU time (user + system, every thread) the worker process has used, seconds."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _receive(self, timeout: float) -> dict:
        """The next answer; a timeout when the job used `timeout` CPU seconds, or
        WALL_FACTOR x `timeout` wall seconds (a job that sleeps or waits)."""
        start, wall, used = self._cpu_seconds(), time.monotonic(), 0.0
        while not self.connection.poll(min(1.0, timeout)):
            try:
                used = self._cpu_seconds() - start
            except (FileNotFoundError, ProcessLookupError):  # died: recv below says so
                break
            if used >= timeout or time.monotonic() - wall >= WALL_FACTOR * timeout:
                self.cpu_s += used
                self.stop()
                return {
                    "status": "timeout",
                    "error": f"over {timeout:g} CPU s or {WALL_FACTOR * timeout:g} wall s",
                }
        try:
            answer = self.connection.recv()
            self.cpu_s += self._cpu_seconds() - start
            return answer
        except (EOFError, ConnectionError):
            self.cpu_s += used
            code = self.process.exitcode if self.process else None
            self.stop()
            return {"status": "crashed", "error": f"worker died (exit code {code})"}

    def call(self, job: str, args: tuple, timeout: float) -> dict:
        if self.unavailable:
            return {"status": "unavailable", "error": self.unavailable}
        if self.process is None:
            self._start()
            if self.unavailable:
                return {"status": "unavailable", "error": self.unavailable}
        try:
            self.connection.send((job, args))
        except (BrokenPipeError, ConnectionError):
            self.stop()
            return {"status": "crashed", "error": "worker died before the job"}
        result = self._receive(timeout)
        if result["status"] in ("timeout", "crashed"):
            self.restarts += 1
        return result

    def stop(self) -> None:
        """Kill the process (if any); the next call starts a fresh one."""
        if self.process is not None:
            self.process.kill()
            self.process.join()
        if self.connection is not None:
            self.connection.close()
        self.process = self.connection = None

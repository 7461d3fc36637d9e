"""The main job: an OpenAI Batch API input file in, its output file out (docs/design.md section 7).

`run_batch` answers each input line `{"custom_id", "method": "POST", "url":
"/v1/chat/completions", "body"}` with an output line `{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}`, written as lines finish: the `chat.completion`,
or the error the API would answer (`corral.tools.errors.openai_error`). A line that is no request
object gets `"response": null` and `"error": {"code", "message"}`; a later line reusing a
custom_id gets a `duplicate_custom_id` error line right after the first line's. Whatever goes
wrong with one line is that line's error line, and the other lines still run. The KV caches are
grouped by the lines' needs (`_plan`, docs/batch-memory.md).
"""

from __future__ import annotations

import codecs
import itertools
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from corral.model import kv_cache
from corral.model.errors import RequestError
from corral.model.generate import (
    GenerationRequest,
    GenerationResult,
    GenerationStats,
    Generator,
    check_request,
)
from corral.tools.completions import Completions
from corral.tools.errors import openai_error
from corral.tools.output_file import write_line
from corral.tools.request import ToolRequest, check_model, json_int, parse_tool_request
from tqdm import tqdm

DEFAULT_MAX_TOKENS = 512
ALLOWED_MASS_BELOW = 0.5
"""The summary line's default threshold: it counts the answers (asking for `allowed_mass`)
some token of which the mask left less than this share of the model's probability."""
URL = "/v1/chat/completions"


@dataclass
class _Line:
    """One runnable input line: its request and the engine requests of its `n` choices."""

    custom_id: str
    number: int
    request: ToolRequest
    choices: list[GenerationRequest]
    results: dict[int, GenerationResult] = field(default_factory=dict)
    duplicates: list[int] = field(default_factory=list)  # later lines with the same custom_id
    failed: bool = False


def output_line(custom_id, status: int | None, body: dict | None, error: dict | None) -> str:
    """One line of the Batch API output file: compact JSON, non-ASCII text as is except the
    Unicode line breaks `_LINE_BREAKS`, escaped."""
    response = None
    if status is not None:
        response = {"status_code": status, "request_id": uuid.uuid4().hex, "body": body}
    line = {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return json.dumps(line, ensure_ascii=False).translate(_LINE_BREAKS)


_LINE_BREAKS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}
"""The characters outside JSON's escaped controls that Python's `str.splitlines` (and other
Unicode-aware readers) break lines at: written as `\\u` escapes (the same JSON value), so an
output line is one line to every reader, not only to those that split at "\\n"."""


class LineError(ValueError):
    """An input line that is not a runnable Batch API request (`custom_id` when it has one)."""

    def __init__(self, custom_id: str | None, message: str):
        self.custom_id = custom_id
        super().__init__(message)


_OTHER_ENCODINGS = (  # longest first: UTF-32's little-endian mark begins as UTF-16's
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def encoding_problem(data: bytes) -> str | None:
    """Why a Batch input file's bytes are not UTF-8 text as a whole: it begins with a UTF-16 or
    UTF-32 byte-order mark (what Windows tools write by default; read as UTF-8, every line would
    be refused as not JSON); None otherwise (a byte that is not UTF-8 is then its line's error,
    `read_line`)."""
    for mark, name in _OTHER_ENCODINGS:
        if data.startswith(mark):
            return (
                f"the file is {name} (it begins with a {name} byte-order mark): a Batch input "
                "file is UTF-8 JSONL; convert it, e.g. with iconv -t UTF-8"
            )
    return None


def input_lines(data: bytes) -> list[str]:
    """The lines of a Batch input file's bytes (split at b"\\n", a leading UTF-8 byte-order mark
    dropped), each decoded as UTF-8. A byte that is not part of valid UTF-8 is kept as a lone
    surrogate (U+DC80..U+DCFF, Python's "surrogateescape" error handler, PEP 383), which no
    UTF-8 text can hold: `read_line` then refuses that line alone, naming the byte, and every
    other line still runs."""
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    return data.decode("utf-8", errors="surrogateescape").split("\n")


def _first_bad_byte(text: str) -> tuple[int, int] | None:
    """(byte offset in the line, byte value) of the first byte `input_lines` could not decode."""
    for i, char in enumerate(text):
        if "\udc80" <= char <= "\udcff":
            return len(text[:i].encode("utf-8", errors="surrogateescape")), ord(char) - 0xDC00
    return None


def read_line(text: str, number: int) -> tuple[str, dict]:
    """`(custom_id, body)` of one input line (from `input_lines`, or any str). Raises LineError
    naming what is wrong: not UTF-8 (the byte and its offset), not JSON, not a request object
    (a key other than the Batch API's custom_id, method, url and body included), a custom_id
    missing, empty or not a string (its JSON type and value named, as OpenAI's
    `invalid_type` messages name them)."""
    bad = _first_bad_byte(text)
    if bad is not None:
        raise LineError(
            None, f"line {number} is not UTF-8: byte {bad[0]} of the line is 0x{bad[1]:02x}"
        )
    try:
        item = json.loads(text, parse_int=json_int)
    except RecursionError:
        raise LineError(None, f"line {number} is nested too deeply to read") from None
    except ValueError as error:  # not JSON, or an integer of more digits than Python reads
        raise LineError(None, f"line {number} is not JSON: {error}") from None
    if not isinstance(item, dict):
        raise LineError(None, f"line {number} is not a JSON object")
    if "custom_id" not in item:
        raise LineError(None, f"line {number} has no custom_id")
    custom_id = item["custom_id"]
    if not isinstance(custom_id, str):
        raise LineError(
            None,
            f"line {number}: invalid type for 'custom_id': expected a string, but got "
            f"{_json_value(custom_id)} instead",
        )
    if custom_id == "":
        raise LineError(None, f"line {number}: custom_id is empty")
    unknown = sorted(set(item) - {"custom_id", "method", "url", "body"})
    if unknown:
        raise LineError(
            custom_id,
            f"line {number}: unknown key {unknown[0]!r} (a Batch line holds custom_id, method, "
            "url and body)",
        )
    if item.get("method", "POST") != "POST" or item.get("url", URL) != URL:
        raise LineError(custom_id, f"line {number}: only POST {URL} is supported")
    if not isinstance(item.get("body"), dict):
        raise LineError(custom_id, f"line {number} has no body object")
    return custom_id, item["body"]


def _json_value(value) -> str:
    """A value `json.loads` made, named by its JSON type and its JSON text cut to 40 characters
    ("an integer 7", "an array [1, 2]", "null")."""
    if value is None:
        return "null"
    kinds = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (list, "an array"))
    kind = next((name for t, name in kinds if isinstance(value, t)), "an object")
    shown = json.dumps(value, ensure_ascii=False)
    return f"{kind} {shown if len(shown) <= 40 else shown[:37] + '...'}"


@dataclass
class BatchSummary:
    """Counts of a batch run: lines answered and their answers (choices: `n` a line), lines refused
    (error lines), lines skipped (already answered in the output a run resumes: `unanswered`),
    answers (choices) that are not valid for their request (must stay 0), answers whose max_tokens
    ended them (`length`: free text cut, or a constrained answer the budget rule ended complete),
    tokens and seconds, the grammar cache's hits and misses during the run (`GrammarCompiler.hits`
    and `misses`: a miss built, or tried to build, a grammar's token index), and the prefix cache's
    hits among the prompts admitted, with the tokens whose prefill they saved, of the tokens
    admitted: the prompts' and the text jump-forward forced at their start, which goes with them
    (`GenerationStats`; so `prompt_tokens` exceeds the answers' `usage.prompt_tokens` by those
    forced tokens); `allowed_mass_minima`: the minimum allowed mass of each answer that asked for
    `allowed_mass` and has a token, in the order written."""

    requests: int = 0
    answers: int = 0
    errors: int = 0
    skipped: int = 0
    invalid: int = 0
    cut: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    grammar_hits: int = 0
    grammar_misses: int = 0
    prompt_tokens: int = 0
    prefix_hits: int = 0
    prefix_tokens: int = 0
    allowed_mass_minima: list[float] = field(default_factory=list)

    def line(self, allowed_mass_below: float | None = None) -> str:
        """The summary line; with answers that asked for `allowed_mass`, the share of them whose
        minimum allowed mass fell below `allowed_mass_below` (None: `ALLOWED_MASS_BELOW`; a
        threshold given says so even when no answer asked)."""
        rate = self.completion_tokens / self.seconds if self.seconds else 0.0
        lookups = self.grammar_hits + self.grammar_misses
        hit_rate = 100 * self.grammar_hits / lookups if lookups else 0.0
        return (
            f"{_count(self.requests, 'line')} answered ({_count(self.answers, 'answer')}), "
            f"{self.errors} refused, {_count(self.invalid, 'invalid answer')}, "
            f"{_count(self.cut, 'answer')} cut by max_tokens, "
            f"{_count(self.completion_tokens, 'completion token')} in {self.seconds:.1f} s "
            f"({rate:.1f} tokens/s), grammar cache {_count(self.grammar_hits, 'hit')} / "
            f"{_count(self.grammar_misses, 'miss', 'misses')} ({hit_rate:.0f}% hit rate)"
            f", prefix cache {_count(self.prefix_hits, 'hit')}, {self.prefix_tokens} of "
            f"{_count(self.prompt_tokens, 'prompt and forced token')} reused"
            + (
                f", {_count(self.skipped, 'line')} skipped (already in the output)"
                if self.skipped
                else ""
            )
            + self._pushed(allowed_mass_below)
        )

    def _pushed(self, below: float | None) -> str:
        """The line's end ", allowed mass below P in K of N answers (S%)", or "" when no
        answer asked for `allowed_mass` and no threshold was given."""
        minima = self.allowed_mass_minima
        if not minima:
            return "" if below is None else f", no answer asked for allowed_mass (below {below:g})"
        below = ALLOWED_MASS_BELOW if below is None else below
        k = sum(m < below for m in minima)
        return (
            f", allowed mass below {below:g} in {k} of {_count(len(minima), 'answer')} "
            f"({100 * k / len(minima):.1f}%)"
        )


def _count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for 1: "1 line", "2 lines", "0 misses"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


class _Writer:
    """Writes output lines to a text stream, each flushed at once, and counts the error lines."""

    def __init__(self, out, summary: BatchSummary):
        self.out = out
        self.summary = summary

    def write(self, custom_id, status: int | None, body: dict | None, error: dict | None):
        """Write one line and flush it. Raises OutputWriteError when the stream cannot take it."""
        write_line(self.out, output_line(custom_id, status, body, error))
        if status != 200:
            self.summary.errors += 1

    def failure(self, line: _Line, error: Exception) -> None:
        """The error line of a line that raised `error` (then its duplicates' lines)."""
        line.failed = True
        field = "max_tokens" if line.request is None else line.request.max_tokens_field
        answer = openai_error(error, field)
        self.write(line.custom_id, answer.status, answer.to_json(), None)
        self.duplicates(line)

    def duplicates(self, line: _Line) -> None:
        """The error lines of the later lines that reuse `line`'s custom_id."""
        for number in line.duplicates:
            self.duplicate(line.custom_id, number, line.number)
        line.duplicates.clear()

    def duplicate(self, custom_id: str, number: int, first: int) -> None:
        message = f"line {number}: custom_id {custom_id!r} was already used on line {first}"
        self.write(custom_id, None, None, {"code": "duplicate_custom_id", "message": message})


class ForeignAnswerError(ValueError):
    """The output a run resumes answers a custom_id more times than the input has lines of it
    (most often one the input does not have: the output of another input file), so appending
    to it would mix two batches' answers.

    Attributes:
        custom_id: the first such custom_id in the output's order (None: lines that named
            none, whose error lines have a null custom_id).
        answered: how many output lines answer it.
        lines: how many input lines have it (0: none).
    """

    def __init__(self, custom_id: str | None, answered: int, lines: int):
        self.custom_id, self.answered, self.lines = custom_id, answered, lines
        named = "lines without a custom_id" if custom_id is None else f"custom_id {custom_id!r}"
        has = f"has {lines} line{'s' * (lines != 1)} of it" if lines else "has no such line"
        lines_of = f"{answered} line{'s' * (answered != 1)}"
        super().__init__(f"it has {lines_of} answering {named} and the input {has}")


def unanswered(
    lines: Iterable[str], counts: Mapping[str | None, int]
) -> tuple[list[int], list[str], dict[str, int]]:
    """The input lines a resumed run still answers, given how many output lines answer each
    custom_id (`output_file.answered_counts`). A run writes each custom_id's lines in input
    order (the first line's answer or error, then its duplicates' errors), and the lines that
    name no custom_id in input order (`_prepare`'s first phase), so the first `counts[c]`
    lines of custom_id c, and the first `counts[None]` lines naming none, are answered.

    Returns (the other non-blank lines' numbers from 1, their texts, `used`: custom_id -> the
    line number of its first line, for the custom_ids whose first line is answered, so that
    `run_batch` reports their other lines as duplicates of it).

    Raises ForeignAnswerError when `counts` answers a custom_id more times than `lines` have it
    (the first such in `counts`' order: the output's, for `answered_counts`)."""
    left = Counter(counts)
    numbers, texts, used = [], [], {}
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            custom_id, _ = read_line(text, number)
        except LineError as error:
            custom_id = error.custom_id
        if left[custom_id] > 0:
            left[custom_id] -= 1
            if custom_id is not None:
                used.setdefault(custom_id, number)
            continue
        numbers.append(number)
        texts.append(text)
    for custom_id, extra in left.items():
        if extra > 0:
            answered = counts[custom_id]
            raise ForeignAnswerError(custom_id, answered, answered - extra)
    return numbers, texts, used


def run_batch(
    engine: Completions,
    lines: Iterable[str],
    out,
    used: Mapping[str, int] | None = None,
    batch_size: int = 16,
    default_max_tokens: int | None = None,
    progress: bool = True,
    numbers: Iterable[int] | None = None,
    prefix_cache: bool = True,
    json_object_depth: int | None = None,
    allowed_mass: bool | None = None,
) -> BatchSummary:
    """Run the input lines and write the output lines to the text stream `out` as they finish
    (see the module docstring for duplicates, phases and the KV cache).

    Args:
        engine: the `Completions` (model, served name and token index cache).
        lines: the input file's lines (str), blank ones ignored.
        out: a text stream; every line written is flushed at once.
        used: custom_ids a resumed run answered already (`unanswered`) -> the line number of
            their first line: lines with these custom_ids are reported as its duplicates.
        batch_size: sequences decoded together, >= 1.
        default_max_tokens: max_tokens of requests that set none (None: what the context
            leaves, the OpenAI API's default).
        progress: show the `prepare` and `requests` progress bars (tqdm, on stderr).
        numbers: the input file's line number of each line, for error messages (None: 1, 2, ...;
            a part of a file run elsewhere, as `corral.tools.ray_batch` does, keeps its own).
        prefix_cache: reuse the keys and values of prompt prefixes the run already prefilled
            (`corral.model.Generator`); False: every prompt is prefilled whole.
        json_object_depth: the `json_object_depth` of lines that set none (None: the default).
        allowed_mass: the `allowed_mass` of lines that set none (None: the default, off).

    Returns a `BatchSummary`. Never raises for a bad line: it becomes an error line."""
    summary = BatchSummary()
    started = time.perf_counter()
    hits, misses = engine.compiler.hits, engine.compiler.misses
    writer = _Writer(out, summary)
    pending = _prepare(
        engine, lines, used, default_max_tokens, writer, progress, numbers, json_object_depth,
        allowed_mass,
    )  # fmt: skip
    groups, refused_lines = _plan(engine, pending, batch_size)
    for line, error in refused_lines:
        writer.failure(line, error)
    stats = GenerationStats()
    bar = tqdm(total=len(pending), desc="requests", unit="req", disable=not progress)
    try:
        bar.total -= len(refused_lines)
        for group in groups:
            _run_group(engine, group, writer, prefix_cache, stats, bar, started)
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - started
    summary.grammar_hits = engine.compiler.hits - hits
    summary.grammar_misses = engine.compiler.misses - misses
    summary.prompt_tokens = stats.prompt_tokens
    summary.prefix_hits, summary.prefix_tokens = stats.prefix_hits, stats.prefix_tokens
    return summary


def _run_group(engine, group: _Group, writer: _Writer, prefix_cache, stats, bar, started):
    """Submit a group's choices to a `Generator` of its own and run it to the end, writing each
    line as it finishes (the generator and its KV cache are freed on return, before the next
    group's are made)."""
    summary = writer.summary
    lines = list({id(line): line for line, _, _ in group.choices}.values())
    failed = sum(line.failed for line in lines)
    generator, handles = _submit(engine, group, writer, prefix_cache, stats)
    bar.total -= sum(line.failed for line in lines) - failed  # refused at submit
    bar.refresh()
    while generator.has_work:
        for handle, result in generator.step():
            line, i = handles.pop(handle)
            line.results[i] = result
            summary.completion_tokens += result.completion_tokens
            if line.failed or len(line.results) < len(line.choices):
                continue
            _finish(engine, line, writer)
            elapsed = time.perf_counter() - started
            bar.set_postfix(
                tok_s=f"{summary.completion_tokens / elapsed:.1f}", invalid=summary.invalid
            )
            bar.update(1)


def _prepare(
    engine, lines, used, default_max_tokens, writer: _Writer, progress, numbers=None, depth=None,
    allowed_mass=None, max_len=None,
) -> list[_Line]:  # fmt: skip
    """Phase 1: read, validate and compile every line, and check its choices as the engine will
    (`check_request`: the model's context, or the smaller `max_len` of a server's engine, which
    an overflow then names; a max_tokens of None made what it leaves); write the error lines of
    those that fail and of duplicates (of earlier lines, or of `used`'s). Returns the lines to
    run, in input order."""
    pending: list[_Line] = []
    first: dict[str, _Line | int] = dict(used or {})  # custom_id -> its pending line or number
    total = sum(1 for text in lines if text.strip()) if hasattr(lines, "__len__") else None
    bar = tqdm(total=total, desc="prepare", unit="line", disable=not progress)
    try:
        numbers = itertools.count(1) if numbers is None else numbers
        for number, text in zip(numbers, lines, strict=False):  # numbers may be endless
            if not text.strip():
                continue  # blank lines (and the "" after a last newline) are not counted
            bar.update(1)
            custom_id = None
            try:
                custom_id, body = read_line(text, number)
            except LineError as error:
                custom_id = error.custom_id
                if _is_duplicate(custom_id, number, first, writer):
                    continue
                writer.write(custom_id, None, None, {"code": "invalid_line", "message": str(error)})
                if custom_id is not None:
                    first[custom_id] = number
                continue
            if _is_duplicate(custom_id, number, first, writer):
                continue
            line = _Line(custom_id, number, None, [])
            try:
                line.request = parse_tool_request(body, engine.vocabulary.size)
                if depth is not None and line.request.json_object_depth is None:
                    line.request = replace(line.request, json_object_depth=depth)
                if allowed_mass is not None and line.request.allowed_mass is None:
                    line.request = replace(line.request, allowed_mass=allowed_mass)
                check_model(line.request.model, engine.model_name)
                model = engine.model
                line.choices = [
                    check_request(c, model.context_length, len(model.vocabulary.tokens), max_len)
                    for c in engine.requests(line.request, default_max_tokens, max_len)
                ]
            except Exception as error:  # any fault of one line is that line's error line
                writer.failure(line, error)
                first[custom_id] = number
                continue
            first[custom_id] = line
            pending.append(line)
            bar.set_postfix(grammars=len(engine.compiler))
    finally:
        bar.close()
    return pending


def _is_duplicate(custom_id, number: int, first: dict, writer: _Writer) -> bool:
    """Whether line `number` reuses a custom_id seen before; if so, its error line is written
    now (the first line is already written) or queued after the first line's output."""
    if custom_id is None or custom_id not in first:
        return False
    seen = first[custom_id]
    if isinstance(seen, _Line):
        seen.duplicates.append(number)
    else:
        writer.duplicate(custom_id, number, seen)
    return True


class CacheMemoryError(RequestError):
    """A line's prompt plus `max_tokens` (absent: what the context leaves) need a KV cache slot
    longer than the memory available can hold (its 400, for that line only)."""

    param = "max_tokens"
    code = "kv_cache_memory_exceeded"


@dataclass
class _Group:
    """Choices run together by one `Generator` of `slots` slots of `max_len` tokens."""

    max_len: int
    slots: int
    choices: list[tuple[_Line, int, GenerationRequest]] = field(default_factory=list)


def _need(choice: GenerationRequest, context: int) -> int:
    """The tokens a choice's slot may come to hold: its prompt plus `max_tokens`; without
    `max_tokens`, the whole context (what the context leaves is the answer's). 1 for a choice
    past the context, which `Generator.submit` refuses whatever the cache."""
    prompt = len(choice.prompt_ids)
    need = context if choice.max_tokens is None else prompt + choice.max_tokens
    return need if prompt < context and need <= context else 1


def _plan(engine, pending: list[_Line], batch_size: int) -> tuple[list[_Group], list]:
    """The KV caches of the pending lines, grouped by need (docs/batch-memory.md): a first
    group of the choices whose need fits `batch_size` slots in the memory available
    (`corral.model.kv_cache.MEMORY_SHARE` of it), sized to the longest of them; a second of the
    longer ones, at the longest of them, in the slots that fit (`Generator` lowers its slots
    with a `CacheWarning`). Returns the groups (empty ones left out) and `(line,
    CacheMemoryError)` for each line whose need does not fit even one slot."""
    model = engine.model
    context = model.context_length
    items = [
        (line, i, c, _need(c, context)) for line in pending for i, c in enumerate(line.choices)
    ]
    slots = max(1, min(batch_size, len(items)))
    available = kv_cache.available_memory()
    dtype = getattr(model, "kv_dtype", kv_cache.DEFAULT_DTYPE)
    per_token = kv_cache.KVCache.bytes_needed(model.config, 1, 1, dtype)
    budget = None if available is None else int(available * kv_cache.MEMORY_SHARE)
    full = context if budget is None else budget // (per_token * slots)
    one = context if budget is None else budget // per_token
    short = [item for item in items if item[3] <= full]
    long = [item for item in items if full < item[3] <= one]
    refused_lines: dict[int, tuple[_Line, CacheMemoryError]] = {}
    for line, _, choice, need in items:
        if need > one and id(line) not in refused_lines:
            prompt = len(choice.prompt_ids)
            asked = (
                "what the context leaves"
                if choice.max_tokens is None
                else f"max_tokens of {choice.max_tokens}"
            )
            fits = max(one - prompt, 0)
            error = CacheMemoryError(
                f"this line needs a KV cache slot of {need} tokens (its prompt of {prompt} plus "
                f"{asked}), {kv_cache.format_bytes(need * per_token)}, more than the "
                f"{kv_cache.format_bytes(budget)} allowed ({kv_cache.MEMORY_SHARE:.0%} of the "
                f"{kv_cache.format_bytes(available)} available); a max_tokens of at most {fits} "
                "fits"
            )
            refused_lines[id(line)] = (line, error)
    groups = []
    for part in (short, long):
        kept = [item for item in part if id(item[0]) not in refused_lines]
        if kept:
            group = _Group(max(item[3] for item in kept), min(batch_size, len(kept)))
            group.choices = [item[:3] for item in kept]
            groups.append(group)
    return groups, list(refused_lines.values())


def _submit(
    engine,
    group: _Group,
    writer: _Writer,
    prefix_cache: bool = True,
    stats: GenerationStats | None = None,
) -> tuple[Generator, dict[int, tuple[_Line, int]]]:
    """A group's set-up: a `Generator` of the group's slots and max_len, and every choice of
    the group submitted to it. A line whose submit raises (a budget too small for its grammar, a
    prompt past the context: `corral.model.RequestError`) gets its error line. Returns the
    generator and `{handle: (line, choice index)}`."""
    generator = Generator(
        engine.model, group.slots, group.max_len, stats, prefix_cache=prefix_cache
    )
    handles: dict[int, tuple[_Line, int]] = {}
    for line, i, choice in group.choices:
        if line.failed:
            continue  # its choices already submitted run, and are dropped
        try:
            handles[generator.submit(choice)] = (line, i)
        except Exception as error:  # any fault of one line is that line's error line
            writer.failure(line, error)
    return generator, handles


def _finish(engine, line: _Line, writer: _Writer) -> None:
    """Write a finished line's answer (then its duplicates' error lines) and count it."""
    summary = writer.summary
    body = engine.completion(line.request, [line.results[i] for i in range(len(line.choices))])
    summary.requests += 1
    summary.answers += len(body["choices"])
    for choice in body["choices"]:
        minimum = choice.get("allowed_mass", {}).get("min")
        if minimum is not None:
            summary.allowed_mass_minima.append(minimum)
        if line.results[choice["index"]].finish_reason == "length":
            summary.cut += 1  # a constrained one ended complete: validated all the same
        if not valid_choice(line.request, choice):
            summary.invalid += 1
    writer.write(line.custom_id, 200, body, None)
    writer.duplicates(line)


def valid_choice(request: ToolRequest, choice: dict) -> bool:
    """Whether a choice is what its request promises, checked by the
    `jsonschema` library (independent of corral's compiler): each call names a tool and its
    arguments validate against that tool's parameters; a forced call was made; a json_schema
    content validates against the schema, a json_object content is a JSON object."""
    import jsonschema  # here, not at the top: its import costs seconds every `corral` command

    message = choice["message"]
    calls = message.get("tool_calls") or []
    try:
        for call in calls:
            tool = request.tool(call["function"]["name"])
            jsonschema.validate(json.loads(call["function"]["arguments"]), tool.parameters)
        if request.calls_allowed and request.tool_choice in ("required", "function"):
            return len(calls) >= 1 and message["content"] is None
        if calls:
            return True
        fmt = request.response_format
        if fmt.type == "json_schema":
            jsonschema.validate(json.loads(message["content"] or ""), fmt.schema)
        elif fmt.type == "json_object":
            return isinstance(json.loads(message["content"] or ""), dict)
    except (json.JSONDecodeError, KeyError, jsonschema.ValidationError, jsonschema.SchemaError):
        return False
    return True

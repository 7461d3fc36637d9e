"""The main job: an OpenAI Batch API input file in, its output file out (DESIGN.md section 7).

Each input line is `{"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}`, the
body a chat completions request (tools, tool_choice, response_format, ...). Each output line is
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`, the body a
`chat.completion`, or the 400/422 error body the API would answer. A line that is not even a
request object gets `"response": null` and an `"error": {"code", "message"}` (OpenAI's form for
lines that cannot run). Every other line still runs.

Lines are written as they finish (not in input order, as in OpenAI's output files), each flushed,
so an interrupted run keeps what it finished, and `resume=True` skips the custom_ids already in
the output file.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
from corral.kernels import Constraint, SamplingParams
from corral.model.generate import (
    BudgetTooSmallError,
    GenerationRequest,
    GenerationResult,
    GenerationStats,
    check_budget,
    iter_generate,
)
from corral.tools.errors import ToolError, invalid
from corral.tools.grammar import DEFAULT_MAX_GRAMMARS, GrammarCompiler, grammar
from corral.tools.parser import ToolParser
from corral.tools.render import render_request
from corral.tools.request import ToolRequest, parse_tool_request
from corral.tools.shapes import collect, finish_reason, message_json
from tqdm import tqdm

DEFAULT_MAX_TOKENS = 512
URL = "/v1/chat/completions"


@dataclass
class _Line:
    """One runnable input line: its request and the engine requests of its `n` choices."""

    custom_id: str
    request: ToolRequest
    choices: list[GenerationRequest]
    results: dict[int, GenerationResult] = field(default_factory=dict)


class Engine:
    """A model, its vocabulary, and the `GrammarCompiler` whose bounded cache of token indexes
    every request shares.

    Args:
        model: a `corral.model.Model`.
        model_name: the `model` of answers whose request names none.
        max_grammars: how many token indexes the compiler keeps (`DEFAULT_MAX_GRAMMARS`).
    """

    def __init__(
        self,
        model,
        model_name: str = "SmolLM2-135M-Instruct",
        max_grammars: int = DEFAULT_MAX_GRAMMARS,
    ):
        self.model = model
        self.model_name = model_name
        self.vocabulary = model.vocabulary
        self.compiler = GrammarCompiler(self.vocabulary, max_grammars)

    def requests(self, request: ToolRequest, default_max_tokens: int) -> list[GenerationRequest]:
        """The engine requests of a chat request's `n` choices.

        Raises ToolError: 422 for a schema the subset refuses or a grammar past a size limit;
        400 for messages the template refuses or a max_tokens too small for any valid answer."""
        constraint, trigger = None, None
        found = grammar(request)
        if found is not None:
            constraint = Constraint(self.compiler.index(found))
            trigger = found.trigger
        prompt = self.model.tokenizer.encode(render_request(self.model, request))
        params = SamplingParams(
            temperature=request.temperature,
            top_p=request.top_p,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
        )
        max_tokens = request.max_tokens or default_max_tokens
        out = []
        for i in range(request.n):
            seed = None if request.seed is None else request.seed + i
            out.append(
                GenerationRequest(
                    prompt, max_tokens, params, seed, request.stop, constraint, trigger
                )
            )
        try:
            check_budget(out[0])
        except BudgetTooSmallError as error:
            raise invalid("max_tokens", str(error)) from None
        return out

    def completion(self, line: _Line) -> dict:
        """The `chat.completion` body of a finished line."""
        request, choices = line.request, []
        prompt_tokens = completion_tokens = 0
        request_id = uuid.uuid4().hex[:12]
        for i in range(len(line.choices)):
            result = line.results[i]
            prompt_tokens = result.prompt_tokens
            completion_tokens += result.completion_tokens
            content, calls = result.text, []
            if request.calls_allowed:
                parser = ToolParser(f"{request_id}_{i}" if request.n > 1 else request_id)
                content, calls = collect(parser.push(result.text) + parser.finish())
            choices.append(
                {
                    "index": i,
                    "message": message_json(content, calls),
                    "logprobs": None,
                    "finish_reason": finish_reason(calls, result.finish_reason),
                }
            )
        return {
            "id": f"chatcmpl-{request_id}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or self.model_name,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


def output_line(custom_id, status: int | None, body: dict | None, error: dict | None) -> str:
    """One line of the Batch API output file."""
    response = None
    if status is not None:
        response = {"status_code": status, "request_id": uuid.uuid4().hex, "body": body}
    line = {
        "id": f"batch_req_{uuid.uuid4().hex}",
        "custom_id": custom_id,
        "response": response,
        "error": error,
    }
    return json.dumps(line, ensure_ascii=False)


class LineError(ValueError):
    """An input line that is not a runnable Batch API request (`custom_id` when it has one)."""

    def __init__(self, custom_id: str | None, message: str):
        self.custom_id = custom_id
        super().__init__(message)


def read_line(text: str, number: int) -> tuple[str, dict]:
    """`(custom_id, body)` of one input line. Raises LineError naming what is wrong."""
    try:
        item = json.loads(text)
    except json.JSONDecodeError as error:
        raise LineError(None, f"line {number} is not JSON: {error}") from None
    if not isinstance(item, dict):
        raise LineError(None, f"line {number} is not a JSON object")
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise LineError(None, f"line {number} has no custom_id string")
    if item.get("method", "POST") != "POST" or item.get("url", URL) != URL:
        raise LineError(custom_id, f"line {number}: only POST {URL} is supported")
    if not isinstance(item.get("body"), dict):
        raise LineError(custom_id, f"line {number} has no body object")
    return custom_id, item["body"]


def done_ids(output: Path) -> set[str]:
    """The custom_ids already written to `output` (for `--resume`); a torn last line is
    ignored."""
    ids = set()
    if output.exists():
        for text in output.read_text(encoding="utf-8").splitlines():
            try:
                ids.add(json.loads(text)["custom_id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return ids


@dataclass
class BatchSummary:
    """Counts of a batch run: lines answered, lines refused (error lines), answers (choices)
    that are not valid for their request (must stay 0), answers cut by max_tokens (free text
    only: constrained answers end within their budget), tokens and seconds."""

    requests: int = 0
    errors: int = 0
    invalid: int = 0
    cut: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        rate = self.completion_tokens / self.seconds if self.seconds else 0.0
        return (
            f"{self.requests} answered, {self.errors} refused, {self.invalid} invalid answers, "
            f"{self.cut} answers cut by max_tokens, {self.completion_tokens} completion tokens "
            f"in {self.seconds:.1f} s ({rate:.1f} tokens/s)"
        )


def run_batch(
    engine: Engine,
    lines: Iterable[str],
    out,
    skip: set[str] = frozenset(),
    batch_size: int = 16,
    default_max_tokens: int = DEFAULT_MAX_TOKENS,
    progress: bool = True,
) -> BatchSummary:
    """Run the input lines and write the output lines to the text stream `out` as they finish.

    Returns a `BatchSummary`. Never raises for a bad line: it becomes an error line."""
    summary = BatchSummary()
    started = time.perf_counter()
    runnable: list[_Line] = []
    flat: list[tuple[_Line, int]] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        custom_id = None
        try:
            custom_id, body = read_line(text, number)
            if custom_id in skip:
                continue
            request = parse_tool_request(body)
            line = _Line(custom_id, request, engine.requests(request, default_max_tokens))
        except LineError as error:
            if error.custom_id in skip:
                continue
            failure = {"code": "invalid_line", "message": str(error)}
            out.write(output_line(error.custom_id, None, None, failure) + "\n")
            summary.errors += 1
            continue
        except ToolError as error:
            out.write(output_line(custom_id, error.status, error.to_json(), None) + "\n")
            summary.errors += 1
            continue
        runnable.append(line)
        flat.extend((line, i) for i in range(len(line.choices)))
    out.flush()
    stats = GenerationStats()
    bar = tqdm(total=len(runnable), unit="req", disable=not progress)
    try:
        requests = [line_.choices[i] for line_, i in flat]
        for k, result in iter_generate(engine.model, requests, batch_size, stats):
            line, i = flat[k]
            line.results[i] = result
            summary.completion_tokens += result.completion_tokens
            if len(line.results) < len(line.choices):
                continue
            body = engine.completion(line)
            summary.requests += 1
            for choice in body["choices"]:
                if line.results[choice["index"]].finish_reason == "length":
                    summary.cut += 1
                elif not valid_choice(line.request, choice):
                    summary.invalid += 1
            out.write(output_line(line.custom_id, 200, body, None) + "\n")
            out.flush()
            elapsed = time.perf_counter() - started
            bar.set_postfix(
                tok_s=f"{summary.completion_tokens / elapsed:.1f}", invalid=summary.invalid
            )
            bar.update(1)
    finally:
        bar.close()
    summary.seconds = time.perf_counter() - started
    return summary


def valid_choice(request: ToolRequest, choice: dict) -> bool:
    """Whether a finished (not cut) choice is what its request promises, checked by the
    `jsonschema` library (independent of corral's compiler): each call names a tool and its
    arguments validate against that tool's parameters; a forced call was made; a json_schema
    content validates against the schema, a json_object content is a JSON object."""
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

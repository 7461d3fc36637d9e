"""The Batch API as a service of `corral serve`: `/v1/files` and `/v1/batches` in OpenAI's shapes
(docs/server.md, "The Batch API"), over the Batch runner's own steps.

Files and batches live in a folder (`data_dir`): `files/<id>.data` (the bytes) and
`files/<id>.json` (the file object), `batches/<id>.json` (the batch object and the ids of its
output and error files). One worker thread runs the batches one after another, oldest first:
it reads and validates the input lines with the runner's `_prepare` (a bad line becomes its
error line, as `corral generate` writes it), then hands the lines to the server's engine thread
as low-priority work (`EngineThread.background`, see `corral.tools.serving`): the engine takes
a few lines a step, at most 4 choices beside running interactive requests and none in the steps
just after one ended, and drops (preempts) batch lines to make room for an interactive request;
a preempted line runs again later. Each
line is written when it ends (`corral.tools.output_file.write_line`: whole, flushed lines):
answers (status 200) to the output file, every other line to the error file, as OpenAI splits
them. A server restarted on the same folder goes on with the batches that had not ended: the
lines already written are skipped (`batch.unanswered`), so no line is answered twice and
none is lost.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import time
import uuid
from collections import deque
from pathlib import Path

import platformdirs
from corral.tools.batch import (
    URL,
    BatchSummary,
    _finish,
    _prepare,
    _Writer,
    encoding_problem,
    input_lines,
    unanswered,
)
from corral.tools.completions import Completions
from corral.tools.errors import ToolError, invalid, openai_error
from corral.tools.fields import check_metadata, unknown
from corral.tools.output_file import answered_counts, drop_torn_tail
from corral.tools.request import read_body
from corral.tools.serving import BackgroundJob, EngineThread
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

COMPLETION_WINDOW = "24h"
WINDOW_SECONDS = 24 * 3600
FEED_CHOICES = 4
"""The most batch choices the engine takes in one step (their prompts' prefill is one pass: an
interactive request arriving meanwhile waits at most that pass)."""
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")


def default_data_dir() -> Path:
    """Where `corral serve` keeps files and batches when `--data-dir` is not given: the user's
    data folder (platformdirs), `corral/serve`."""
    return Path(platformdirs.user_data_dir("corral")) / "serve"


def new_id(prefix: str) -> str:
    """A new id: `prefix`, the time in nanoseconds (16 hex digits) and 16 random hex digits, so
    that ids sort in the order they were made."""
    return f"{prefix}{time.time_ns():016x}{uuid.uuid4().hex[:16]}"


def not_found(kind: str, name: str, param: str) -> ToolError:
    """The 404 for an unknown file or batch id, in OpenAI's shape."""
    return ToolError(404, param, None, f"No {kind} found with id '{name}'.")


def jsonl_problem(data: bytes) -> tuple[str, str] | None:
    """`(code, message)` when `data` is not JSONL at all (no line, or no line that is JSON);
    None when some line is JSON (the other lines become error lines). A file in UTF-16 or
    UTF-32 (`corral.tools.batch.encoding_problem`) is `invalid_encoding`."""
    if encoding_problem(data):
        return "invalid_encoding", f"The input file is not UTF-8: {encoding_problem(data)}."
    lines = [text for text in input_lines(data) if text.strip()]
    if not lines:
        return "empty_file", "The input file holds no line."
    for text in lines:
        try:
            json.loads(text)
            return None
        except (ValueError, RecursionError):
            continue
    return "invalid_json_line", "No line of the input file is JSON: it is not a JSONL file."


class _SplitStream:
    """A text stream for the runner's `_Writer`: each output line goes to `out` when its
    response's status is 200, else to `errors` (OpenAI's output and error files), counted."""

    def __init__(self, out, errors, completed: int, failed: int):
        self.out, self.errors = out, errors
        self.completed, self.failed = completed, failed
        self._last = out

    def write(self, text: str) -> None:
        response = json.loads(text)["response"]
        ok = response is not None and response["status_code"] == 200
        self._last = self.out if ok else self.errors
        self._last.write(text)
        if ok:
            self.completed += 1
        else:
            self.failed += 1

    def flush(self) -> None:
        self._last.flush()


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


class BatchService:
    """Files and batches of one server (see the module docstring).

    Args:
        engine: the server's `Completions`.
        thread: the server's `EngineThread` (its `background` becomes this service).
        data_dir: the folder of files and batches (made at the first upload).
        max_len: the server's tokens per choice (a line past it is that line's 400).
        default_max_tokens: max_tokens of a line that sets none (None: what `max_len` leaves).
    """

    def __init__(
        self,
        engine: Completions,
        thread: EngineThread,
        data_dir: Path,
        max_len: int,
        default_max_tokens: int | None = None,
    ):
        self.engine = engine
        self.thread = thread
        self.root = Path(data_dir)
        self.max_len = max_len
        self.default_max_tokens = default_max_tokens
        self._lock = threading.Lock()
        self._files = {p.stem: self._read(p) for p in (self.root / "files").glob("*.json")}
        self._batches = {p.stem: self._read(p) for p in (self.root / "batches").glob("*.json")}
        self._ready: deque = deque()  # the running batch's lines waiting for the engine
        self._live: set[BackgroundJob] = set()  # its lines in the engine
        self._events: queue.Queue = queue.Queue()
        self._wake = threading.Event()
        self._stopping = False
        self._worker = threading.Thread(target=self._work, name="corral-batches", daemon=True)

    # --- storage ---------------------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> dict:
        return json.loads(path.read_text("utf-8"))

    @staticmethod
    def _write(path: Path, value) -> None:
        """Write `value` as JSON, atomically (a temporary file renamed over the old one)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(value), "utf-8")
        os.replace(temporary, path)

    def _data(self, file_id: str) -> Path:
        return self.root / "files" / f"{file_id}.data"

    def _save_batch(self, record: dict) -> None:
        self._write(self.root / "batches" / f"{record['batch']['id']}.json", record)

    def _add_file(self, file_id: str, size: int, filename: str, purpose: str) -> dict:
        obj = {
            "id": file_id,
            "object": "file",
            "bytes": size,
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
            "status_details": None,
        }
        with self._lock:
            self._write(self.root / "files" / f"{file_id}.json", obj)
            self._files[file_id] = obj
        return obj

    # --- files -----------------------------------------------------------------------------

    def create_file(self, data: bytes, filename: str, purpose: str) -> dict:
        """Store an uploaded file. Raises ToolError 400 (param `purpose`) for a purpose other
        than `batch`."""
        if purpose != "batch":
            raise invalid("purpose", f"'purpose' must be 'batch', not {purpose!r}.")
        file_id = new_id("file-")
        temporary = self._data(file_id).with_suffix(".tmp")
        temporary.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(data)
        os.replace(temporary, self._data(file_id))
        return self._add_file(file_id, len(data), filename, purpose)

    def file(self, file_id: str) -> dict:
        """A file object. Raises ToolError 404 for an unknown id."""
        with self._lock:
            obj = self._files.get(file_id) if _ID.fullmatch(file_id) else None
        if obj is None:
            raise not_found("file", file_id, "file_id")
        return obj

    def content(self, file_id: str) -> Path:
        """The path of a file's bytes. Raises ToolError 404 for an unknown id."""
        self.file(file_id)
        return self._data(file_id)

    def files(self, purpose: str | None = None) -> list[dict]:
        """The file objects, newest first, those of `purpose` only when given."""
        with self._lock:
            found = [f for f in self._files.values() if purpose in (None, f["purpose"])]
        return sorted(found, key=lambda f: f["id"], reverse=True)

    def delete_file(self, file_id: str) -> dict:
        """Delete a file; OpenAI's deletion object. Raises ToolError 404 for an unknown id, 400
        (param `file_id`) for the input file of a batch that has not ended."""
        self.file(file_id)
        with self._lock:
            for record in self._batches.values():
                batch = record["batch"]
                if batch["input_file_id"] == file_id and batch["status"] in ACTIVE:
                    raise invalid(
                        "file_id",
                        f"File '{file_id}' is the input of batch '{batch['id']}', which has "
                        "not ended; cancel it first.",
                    )
            del self._files[file_id]
            (self.root / "files" / f"{file_id}.json").unlink()
            self._data(file_id).unlink(missing_ok=True)
        return {"id": file_id, "object": "file", "deleted": True}

    # --- batches ---------------------------------------------------------------------------

    def create_batch(self, body: dict) -> dict:
        """A new batch (status `validating`, or `failed` with `errors` when its input file is
        not JSONL at all). Raises ToolError 400 naming the parameter at fault (an unknown one,
        an `endpoint` other than /v1/chat/completions, a `completion_window` other than 24h,
        an input file whose purpose is not batch, a `metadata` OpenAI refuses:
        `corral.tools.fields.check_metadata`), 404 for an unknown `input_file_id`."""
        known = {"input_file_id", "endpoint", "completion_window", "metadata"}
        for name in body:
            if name not in known:
                raise unknown(name)
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str):
                raise invalid(
                    name, f"Missing required parameter: '{name}'.", "missing_required_parameter"
                )
        if body["endpoint"] != URL:
            raise invalid("endpoint", f"'endpoint' must be '{URL}', not {body['endpoint']!r}.")
        if body["completion_window"] != COMPLETION_WINDOW:
            raise invalid(
                "completion_window",
                f"'completion_window' must be '{COMPLETION_WINDOW}', not "
                f"{body['completion_window']!r}.",
            )
        metadata = body.get("metadata")
        check_metadata(metadata)
        source = self.file(body["input_file_id"])
        if source["purpose"] != "batch":
            raise invalid(
                "input_file_id",
                f"File '{source['id']}' has purpose {source['purpose']!r}, not 'batch'.",
            )
        data = self._data(source["id"]).read_bytes()
        now = int(time.time())
        batch = {
            "id": new_id("batch_"),
            "object": "batch",
            "endpoint": URL,
            "errors": None,
            "input_file_id": source["id"],
            "completion_window": COMPLETION_WINDOW,
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": now,
            "in_progress_at": None,
            "expires_at": now + WINDOW_SECONDS,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {
                "total": sum(1 for text in input_lines(data) if text.strip()),
                "completed": 0,
                "failed": 0,
            },
            "metadata": metadata,
            "model": self.engine.model_name,
        }
        problem = jsonl_problem(data)
        if problem is not None:
            code, message = problem
            error = {"code": code, "message": message, "param": "input_file_id", "line": None}
            batch.update(status="failed", failed_at=now)
            batch["errors"] = {"object": "list", "data": [error]}
        record = {
            "batch": batch,
            "output": new_id("file-"),
            "error": new_id("file-"),
        }
        with self._lock:
            self._batches[batch["id"]] = record
            self._save_batch(record)
        self._wake.set()
        return dict(batch)

    def batch(self, batch_id: str) -> dict:
        """A batch object. Raises ToolError 404 for an unknown id."""
        with self._lock:
            record = self._batches.get(batch_id) if _ID.fullmatch(batch_id) else None
            if record is None:
                raise not_found("batch", batch_id, "batch_id")
            return json.loads(json.dumps(record["batch"]))

    def batches(self) -> list[dict]:
        """Every batch object, newest first."""
        with self._lock:
            found = [json.loads(json.dumps(r["batch"])) for r in self._batches.values()]
        return sorted(found, key=lambda b: b["id"], reverse=True)

    def cancel(self, batch_id: str) -> dict:
        """Ask a batch that has not ended to stop: status `cancelling`, then `cancelled` once
        its lines in the engine are dropped (the lines already written stay in its files).
        Raises ToolError 404 for an unknown id, 400 for a batch that has ended."""
        self.batch(batch_id)
        with self._lock:
            record = self._batches[batch_id]
            batch = record["batch"]
            if batch["status"] not in ACTIVE:
                raise invalid(
                    "batch_id", f"Batch '{batch_id}' has status {batch['status']!r}: it has ended."
                )
            if batch["status"] != "cancelling":
                batch.update(status="cancelling", cancelling_at=int(time.time()))
                self._save_batch(record)
        self._wake.set()
        return self.batch(batch_id)

    # --- the engine's side -------------------------------------------------------------------

    def take(self, room: int, empty: bool) -> list[BackgroundJob]:
        """Called by the engine thread: the next lines to run, as jobs of at most
        `FEED_CHOICES` choices in all and at most `room` (a line of more choices than the whole
        batch goes alone into an `empty` engine)."""
        jobs = []
        with self._lock:
            budget = min(room, FEED_CHOICES)
            while self._ready:
                n = len(self._ready[0].choices)
                if n > budget and not (empty and not jobs):
                    break
                line = self._ready.popleft()
                job = BackgroundJob(line.choices, False, None, self._events)
                job.line = line
                self._live.add(job)
                jobs.append(job)
                budget -= n
        return jobs

    # --- the worker --------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.background = self
        self._worker.start()

    def stop(self) -> None:
        """Stop the worker (a running batch stays `in_progress`: the next server on the same
        folder goes on with it)."""
        self._stopping = True
        self._wake.set()
        self._events.put(None)
        if self._worker.is_alive():
            self._worker.join(timeout=30)

    def _next(self) -> dict | None:
        with self._lock:
            active = [r for r in self._batches.values() if r["batch"]["status"] in ACTIVE]
        return min(active, key=lambda r: r["batch"]["id"], default=None)

    def _work(self) -> None:
        while not self._stopping:
            record = self._next()
            if record is None:
                self._wake.wait(timeout=1.0)
                self._wake.clear()
                continue
            try:
                self._run(record)
            except Exception as error:  # a fault of the service: the batch fails, others go on
                self._fail(record, openai_error(error).message)

    def _set(self, record: dict, **fields) -> None:
        with self._lock:
            record["batch"].update(fields)
            self._save_batch(record)

    def _fail(self, record: dict, message: str) -> None:
        error = {"code": "server_error", "message": message, "param": None, "line": None}
        self._set(
            record,
            status="failed",
            failed_at=int(time.time()),
            errors={"object": "list", "data": [error]},
        )

    def _stopped(self, record: dict) -> str | None:
        """`cancelled` or `expired` when the batch is to stop, else None."""
        batch = record["batch"]
        if batch["status"] == "cancelling":
            return "cancelled"
        return "expired" if time.time() > batch["expires_at"] else None

    def _run(self, record: dict) -> None:
        batch = record["batch"]
        out_path, err_path = self._data(record["output"]), self._data(record["error"])
        for path in (out_path, err_path):
            drop_torn_tail(path)
        data = self._data(batch["input_file_id"]).read_bytes()
        counts = answered_counts(out_path, err_path)
        numbers, lines, used = unanswered(input_lines(data), counts)
        with out_path.open("a", encoding="utf-8") as out, err_path.open("a", encoding="utf-8") as e:
            stream = _SplitStream(out, e, _lines(out_path), _lines(err_path))
            writer = _Writer(stream, BatchSummary())
            pending = []
            if self._stopped(record) is None:
                pending = _prepare(
                    self.engine, lines, used, self.default_max_tokens, writer, False, numbers,
                    max_len=self.max_len,
                )  # fmt: skip
            self._counts(record, stream)
            if batch["in_progress_at"] is None:
                self._set(record, in_progress_at=int(time.time()))
            if batch["status"] == "validating":
                self._set(record, status="in_progress")
            if not self._drive(record, pending, writer, stream):
                self._counts(record, stream)
                return  # the server is stopping: the batch goes on at the next start
        self._counts(record, stream)
        stopped = self._stopped(record)
        if stopped is None:
            self._set(record, status="finalizing", finalizing_at=int(time.time()))
        outputs = {}
        for key, path, name in (
            ("output_file_id", out_path, "output"),
            ("error_file_id", err_path, "error"),
        ):
            if path.exists() and path.stat().st_size:
                file_id = record["output" if name == "output" else "error"]
                self._add_file(
                    file_id, path.stat().st_size, f"{batch['id']}_{name}.jsonl", "batch_output"
                )
                outputs[key] = file_id
        now = int(time.time())
        end = {"completed": "completed_at", "cancelled": "cancelled_at", "expired": "expired_at"}
        status = stopped or "completed"
        self._set(record, status=status, **{end[status]: now}, **outputs)

    def _counts(self, record: dict, stream: _SplitStream) -> None:
        self._set(
            record,
            request_counts={
                "total": record["batch"]["request_counts"]["total"],
                "completed": stream.completed,
                "failed": stream.failed,
            },
        )

    def _drive(self, record: dict, pending: list, writer: _Writer, stream) -> bool:
        """Run the pending lines on the engine thread until each is written (or the batch
        stops). Returns False when the server is stopping."""
        with self._lock:
            self._ready.extend(pending)
        self.thread.wake()
        remaining = len(pending)
        stopping = False
        saved = time.monotonic()
        while remaining:
            if self._stopping:
                self._drop_all()
                return False
            if not stopping and self._stopped(record) is not None:
                stopping = True
                with self._lock:
                    remaining -= len(self._ready)
                    self._ready.clear()
                    live = list(self._live)
                for job in live:
                    self.thread.cancel(job)
            try:
                item = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            if item is None:
                continue
            job, event = item
            with self._lock:
                if job not in self._live:
                    continue
                if event[0] != "done":
                    self._live.discard(job)
            line = job.line
            if event[0] == "done":
                line.results[event[1]] = event[2]
                if len(line.results) < len(line.choices):
                    continue
                with self._lock:
                    self._live.discard(job)
                _finish(self.engine, line, writer)
            elif event[0] == "error":
                writer.failure(line, event[1])
            elif event[0] == "preempted" and not stopping:
                line.results.clear()
                with self._lock:
                    self._ready.appendleft(line)
                self.thread.wake()
                continue
            remaining -= 1
            if time.monotonic() - saved > 0.5:
                self._counts(record, stream)
                saved = time.monotonic()
        return True

    def _drop_all(self) -> None:
        with self._lock:
            self._ready.clear()
            live = list(self._live)
            self._live.clear()
        for job in live:
            self.thread.cancel(job)


# --- the HTTP routes ---------------------------------------------------------------------------


def _answer(value) -> Response:
    if isinstance(value, ToolError):
        return JSONResponse(value.to_json(), status_code=value.status)
    return value if isinstance(value, Response) else JSONResponse(value)


def _page(items: list[dict], params, most: int, default: int) -> dict:
    """A list object of `items` after the id `after`, at most `limit` (1..`most`) of them.
    Raises ToolError 400 naming `limit` or `after`."""
    text = params.get("limit", str(default))
    try:
        limit = int(text)
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise invalid("limit", f"'limit' must be an integer from 1 to {most}, not {text!r}.")
    after = params.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise invalid("after", f"'after' names no listed object: {after!r}.")
        items = items[ids.index(after) + 1 :]
    data = items[:limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(items) > limit,
    }


def batch_routes(service: BatchService, check_key, read_json, max_file_bytes: int) -> list:
    """The starlette routes of the Batch API over `service`: `check_key(request)` gives the
    401 response or None, `read_json(request)` the body bytes or an error response (the
    server's own checks of every `/v1/*` route)."""

    def guarded(handler):
        async def route(request: Request) -> Response:
            refused = check_key(request)
            if refused is not None:
                return refused
            try:
                return _answer(await handler(request))
            except Exception as error:  # any fault is the request's error, in OpenAI's shape
                return _answer(openai_error(error))

        return route

    async def upload(request: Request):
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "multipart/form-data":
            message = f"Content-Type must be multipart/form-data, not {kind or 'missing'}."
            return ToolError(415, None, "invalid_type", message)
        too_large = ToolError(
            413, "file", None, f"The upload is larger than {max_file_bytes} bytes."
        )
        if int(request.headers.get("content-length") or 0) > max_file_bytes:
            return too_large
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_file_bytes:
                return too_large

        async def replay():
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        try:
            form = await Request(request.scope, replay).form(max_files=1)
        except (HTTPException, MultiPartException) as error:  # starlette's own 400
            detail = getattr(error, "detail", None) or getattr(error, "message", str(error))
            return invalid("file", f"The body is not a multipart form: {detail}")
        try:
            upload, purpose = form.get("file"), form.get("purpose")
            if not isinstance(purpose, str):
                return invalid(
                    "purpose",
                    "Missing required parameter: 'purpose'.",
                    "missing_required_parameter",
                )
            if upload is None or isinstance(upload, str):
                return invalid(
                    "file", "Missing required parameter: 'file'.", "missing_required_parameter"
                )
            data = await upload.read()
            name = upload.filename or "upload.jsonl"
        finally:
            await form.close()
        return await run_in_threadpool(service.create_file, data, name, purpose)

    async def list_files(request: Request):
        order = request.query_params.get("order", "desc")
        if order not in ("asc", "desc"):
            return invalid("order", f"'order' must be 'asc' or 'desc', not {order!r}.")
        files = service.files(request.query_params.get("purpose"))
        if order == "asc":
            files.reverse()
        return _page(files, request.query_params, 10000, 10000)

    async def get_file(request: Request):
        return service.file(request.path_params["file_id"])

    async def delete_file(request: Request):
        return await run_in_threadpool(service.delete_file, request.path_params["file_id"])

    async def file_content(request: Request):
        path = service.content(request.path_params["file_id"])
        return FileResponse(path, media_type="application/octet-stream")

    async def create_batch(request: Request):
        body = await read_json(request)
        if isinstance(body, Response):
            return body
        return await run_in_threadpool(service.create_batch, read_body(body))

    async def list_batches(request: Request):
        return _page(service.batches(), request.query_params, 100, 20)

    async def get_batch(request: Request):
        return service.batch(request.path_params["batch_id"])

    async def cancel_batch(request: Request):
        return service.cancel(request.path_params["batch_id"])

    return [
        Route("/v1/files", guarded(upload), methods=["POST"]),
        Route("/v1/files", guarded(list_files), methods=["GET"]),
        Route("/v1/files/{file_id}", guarded(get_file), methods=["GET"]),
        Route("/v1/files/{file_id}", guarded(delete_file), methods=["DELETE"]),
        Route("/v1/files/{file_id}/content", guarded(file_content), methods=["GET"]),
        Route("/v1/batches", guarded(create_batch), methods=["POST"]),
        Route("/v1/batches", guarded(list_batches), methods=["GET"]),
        Route("/v1/batches/{batch_id}", guarded(get_batch), methods=["GET"]),
        Route("/v1/batches/{batch_id}/cancel", guarded(cancel_batch), methods=["POST"]),
    ]

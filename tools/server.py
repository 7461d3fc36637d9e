"""`corral serve`: an OpenAI-compatible HTTP server on starlette and uvicorn (docs/design.md
section 9; its decisions: docs/tools.md, "Server").

Routes: `POST /v1/chat/completions` (the validation, shapes and errors of a Batch line, through
the shared `corral.tools.completions.Completions`; `stream: true` sends server-sent events
ending with `data: [DONE]`), `GET /v1/models`, `GET /v1/models/{model}`, `GET /health`,
`GET /metrics` (Prometheus text) and `GET /openapi.json`; the Batch API's `/v1/files` and
`/v1/batches` routes (`corral.tools.batch_service`). The model runs in one engine thread
(`corral.tools.serving.EngineThread`); the event loop only reads bodies (up to
`max_body_bytes`): parsing, validating, rendering and compiling run in starlette's thread pool.
Every error is OpenAI's shape (`corral.tools.errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import socket
import threading
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import uvicorn
from corral.model import load_model
from corral.model.errors import CacheError, RequestError
from corral.model.generate import check_request
from corral.tools import openapi
from corral.tools.batch_service import BatchService, batch_routes, default_data_dir
from corral.tools.completions import DEFAULT_MODEL_NAME, Completions
from corral.tools.errors import ToolError, engine_failure, openai_error, refused
from corral.tools.request import (
    ToolRequest,
    check_model,
    check_stream,
    parse_tool_request,
    read_body,
    streaming_fields,
)
from corral.tools.serving import DEFAULT_MAX_WAITING, ChoiceStream, EngineThread, Job, Metrics
from corral.tools.shapes import (
    ChoiceDeltas,
    allowed_mass_json,
    completion_json,
    finish_reason,
    logprobs_json,
    usage_json,
)
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

DISCONNECT_POLL_SECONDS = 1.0
# On SIGINT/SIGTERM the server stops taking requests and gives those in flight this long to end;
# a stream still open then ends with an error event, never silently (docs/server.md, "Shutdown").
SHUTDOWN_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one server.

    Attributes:
        batch_size: KV cache slots, the most choices decoding together.
        max_len: the most tokens one choice holds, prompt included (the KV cache's length).
        max_waiting: the most choices waiting for a slot; past it, 429.
        max_body_bytes: the largest request body; past it, 413.
        api_key: when set, `/v1/*` needs `Authorization: Bearer <api_key>` (the scheme in
            any case).
        model_name: the id `/v1/models` lists and answers carry when the request names none.
        default_max_tokens: max_tokens of a request that sets none (None: what `max_len`
            leaves, as the OpenAI API gives what the context leaves).
        prefix_cache: reuse the keys and values of prompt prefixes already prefilled (on by
            default, as vLLM's automatic prefix caching).
        cors_origins: the origins (`https://app.example:8443`, or `*` for any) whose pages
            may call the server from a browser (CORS); empty: no CORS headers.
        data_dir: the folder of the Batch API's files and batches (None: `default_data_dir()`).
        max_file_bytes: the largest file upload (`POST /v1/files`); past it, 413.
        tool_format: the turn format's name (`corral.tools.formats`); None: detected from the
            model's chat template.
    """

    batch_size: int = 16
    max_len: int = 2048
    max_waiting: int = DEFAULT_MAX_WAITING
    max_body_bytes: int = 4 * 1024 * 1024
    api_key: str | None = None
    model_name: str = DEFAULT_MODEL_NAME
    default_max_tokens: int | None = None
    prefix_cache: bool = True
    cors_origins: tuple[str, ...] = ()
    data_dir: Path | None = None
    tool_format: str | None = None
    max_file_bytes: int = 200 * 1024 * 1024


def error_response(error: ToolError, headers: dict | None = None) -> JSONResponse:
    """The response for an API error: its status and OpenAI-shaped body
    (`corral.tools.errors`)."""
    return JSONResponse(error.to_json(), status_code=error.status, headers=headers)


class ShutdownOnCancel:
    """ASGI middleware for uvicorn's force exit (a second Ctrl-C): uvicorn then stops without
    sending the lifespan's shutdown, and the event loop's close cancels the lifespan task. A
    cancelled lifespan runs the application's shutdown all the same (the engine thread and the
    Batch API's worker stop after their current step; a running batch stays `in_progress` for
    the next server on its folder)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def receive_or_shutdown():
            try:
                return await receive()
            except asyncio.CancelledError:
                return {"type": "lifespan.shutdown"}

        await self.app(scope, receive_or_shutdown, send)


def _not_a_cancellation(record: logging.LogRecord) -> bool:
    """A filter of uvicorn's error log: False for the tracebacks of requests cancelled at a
    force exit (their connections are closed all the same: a client sees its stream cut)."""
    return not (record.exc_info and isinstance(record.exc_info[1], asyncio.CancelledError))


def _uvicorn(app, **options) -> uvicorn.Server:
    """A uvicorn server of `app` (`uvicorn.Config`'s options) whose graceful shutdown waits for
    requests in flight, and whose force exit is quiet."""
    settings = uvicorn.Config(
        app, timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS + 10, **options
    )  # then unended requests are cut
    error_log = logging.getLogger("uvicorn.error")
    if _not_a_cancellation not in error_log.filters:
        error_log.addFilter(_not_a_cancellation)
    return uvicorn.Server(settings)


class CountRequests:
    """ASGI middleware: counts every HTTP request by route (its template, such as
    `/v1/models/{model:path}`; `other` for unknown paths) and status in `Metrics.requests`."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_counted(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            route = scope.get("route")  # set by starlette's router, on a wrong method too
            path = route.path if route is not None else "other"
            self.metrics.requests.labels(route=path, status=str(status)).inc()


class Server:
    """The routes of one server over one `Completions` (model, vocabulary, grammar compiler).

    Args:
        engine: a `corral.tools.completions.Completions`.
        config: a `ServerConfig`.

    Raises:
        CacheError: `config.max_len` is more than the model's context length.
    """

    def __init__(self, engine: Completions, config: ServerConfig = ServerConfig()):
        context = engine.model.context_length
        if config.max_len > context:  # vLLM refuses a max_model_len past the model's too
            raise CacheError(
                f"max_len (--max-len) {config.max_len} is more than the model's context "
                f"length, {context} tokens"
            )
        self.engine = engine
        self.config = config
        self.metrics = Metrics()
        self.metrics.watch_grammars(engine.compiler)
        self.thread = EngineThread(
            engine.model,
            config.batch_size,
            config.max_len,
            config.max_waiting,
            self.metrics,
            config.prefix_cache,
        )
        self.created = int(time.time())
        self.batches = BatchService(
            engine,
            self.thread,
            config.data_dir or default_data_dir(),
            config.max_len,
            config.default_max_tokens,
        )

    def app(self) -> Starlette:
        """The ASGI application; its lifespan starts and stops the engine thread."""

        @asynccontextmanager
        async def lifespan(app):
            self.thread.start()
            self.batches.start()
            yield
            self.batches.stop()
            self.thread.stop()

        async def not_found(request: Request, exc: HTTPException) -> Response:
            if exc.status_code == 405:  # starlette's exception carries the Allow header
                message = f"Method {request.method} is not allowed on {request.url.path}."
                return error_response(ToolError(405, None, None, message), exc.headers)
            message = f"Unknown route {request.method} {request.url.path}."
            return error_response(ToolError(exc.status_code, None, None, message))

        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model:path}", self.model, methods=["GET"]),
            *self._batch_routes(),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_text, methods=["GET"]),
            Route("/openapi.json", self.openapi, methods=["GET"]),
        ]
        middleware = [
            Middleware(ShutdownOnCancel),
            Middleware(CountRequests, metrics=self.metrics),
        ]
        if self.config.cors_origins:
            middleware.append(
                Middleware(
                    CORSMiddleware,
                    allow_origins=list(self.config.cors_origins),
                    allow_methods=["GET", "POST", "DELETE"],
                    allow_headers=["*"],  # the openai clients send their own x-stainless-* too
                )
            )
        return Starlette(
            routes=routes,
            lifespan=lifespan,
            middleware=middleware,
            exception_handlers={HTTPException: not_found},
        )

    def _batch_routes(self) -> list:
        """The Batch API's routes (`corral.tools.batch_service.batch_routes`)."""
        limit = self.config.max_file_bytes
        return batch_routes(self.batches, self._check_key, self._read_body, limit)

    # --- small routes ----------------------------------------------------------------------

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics_text(self, request: Request) -> Response:
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi.document(self.config.model_name))

    def _model_object(self) -> dict:
        """The served model in OpenAI's shape (`id`, `object`, `created`, `owned_by`)."""
        return {
            "id": self.config.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "corral",
        }

    async def models(self, request: Request) -> Response:
        refused = self._check_key(request)
        if refused is not None:
            return refused
        return JSONResponse({"object": "list", "data": [self._model_object()]})

    async def model(self, request: Request) -> Response:
        """`GET /v1/models/{model}`: the served model's object, or a 404 `model_not_found`
        (param `model`) for any other id, as the OpenAI API answers."""
        refused = self._check_key(request)
        if refused is not None:
            return refused
        try:
            check_model(request.path_params["model"], self.config.model_name)
        except ToolError as error:
            return error_response(error)
        return JSONResponse(self._model_object())

    def _check_key(self, request: Request) -> Response | None:
        """None when the server has no key or `Authorization` is `Bearer <key>` (the scheme in
        any case, RFC 9110; compared in constant time); else the 401."""
        key = self.config.api_key
        if key is None:
            return None
        given = request.headers.get("authorization", "")
        scheme, _, token = given.strip().partition(" ")
        # starlette decodes headers as latin-1: the bytes sent, compared with the key's UTF-8
        sent = token.strip().encode("latin-1")
        if scheme.lower() == "bearer" and hmac.compare_digest(sent, key.encode("utf-8")):
            return None
        message = "Missing API key." if not given else "Incorrect API key provided."
        return error_response(ToolError(401, None, "invalid_api_key", message))

    async def _read_body(self, request: Request) -> bytes | Response:
        """The request body, or the error response for a wrong content type or size."""
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            message = f"Content-Type must be application/json, not {kind or 'missing'}."
            return error_response(ToolError(415, None, "invalid_type", message))
        limit = self.config.max_body_bytes
        too_large = error_response(
            ToolError(413, None, None, f"The body is larger than {limit} bytes.")
        )
        if int(request.headers.get("content-length") or 0) > limit:
            return too_large
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                return too_large
        return bytes(body)

    # --- chat completions ------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        refused = self._check_key(request)
        if refused is not None:
            return refused
        body = await self._read_body(request)
        if isinstance(body, Response):
            return body
        try:  # off the event loop: the work grows with the body
            parsed, stream, include_usage, choices = await run_in_threadpool(self._prepare, body)
        except Exception as error:  # any fault of one request is its error (as a Batch line's)
            return error_response(openai_error(error))
        if not self.thread.admit(len(choices)):
            message = "The server is busy: the batch is full and the waiting queue too."
            busy = ToolError(429, None, "rate_limit_exceeded", message, "rate_limit_error")
            return error_response(busy, {"Retry-After": "1"})  # the openai clients wait and retry
        loop = asyncio.get_running_loop()
        # a streamed choice with logprobs is sent when it ends (see the module docstring)
        job = Job(choices, stream and not parsed.logprobs, loop, asyncio.Queue())
        self.thread.submit(job)
        if stream:
            shutdown = anyio.Event()  # set by sse-starlette when uvicorn is told to exit
            return EventSourceResponse(
                self._stream(parsed, job, include_usage, shutdown),
                sep="\n",
                shutdown_event=shutdown,
                shutdown_grace_period=SHUTDOWN_GRACE_SECONDS + 5,  # the stream ends itself first
            )
        try:
            results = {}
            while len(results) < len(choices):
                try:
                    event = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_SECONDS)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)  # nobody reads it; frees the slots
                    continue
                if event[0] == "error":
                    return error_response(engine_failure(event[1]))
                if event[0] == "done":
                    results[event[1]] = event[2]
        finally:
            self.thread.cancel(job)  # frees the slots of a client that went away; else a no-op
        return JSONResponse(self._completion(parsed, results))

    def _prepare(self, body: bytes) -> tuple[ToolRequest, bool, bool, list]:
        """A request body read, validated and made into engine requests, in a worker thread:
        `(request, stream, include_usage, engine requests)`. Raises ToolError: what
        `read_body`, `streaming_fields`, `parse_tool_request`, `check_model` and
        `_engine_requests` raise."""
        fields, stream, include_usage = streaming_fields(read_body(body))
        parsed = parse_tool_request(fields, self.engine.vocabulary.size)
        check_stream(parsed, stream)
        check_model(parsed.model, self.config.model_name)
        return parsed, stream, include_usage, self._engine_requests(parsed)

    def _engine_requests(self, request: ToolRequest) -> list:
        """The engine requests of `request` (`Completions.requests`), checked as the engine's
        `submit` will check them (`check_request`: the model's context, this server's
        `max_len`, the budget), so that submitting cannot fail. A request without `max_tokens`
        gets what `max_len` leaves. Raises ToolError: as `Completions.requests` does (for this
        server's `max_len`), and 400 (`refused`) for what the engine would refuse: an overflow
        names `max_len` when it is smaller than the context, however far past the context the
        request goes (`corral.model.generation_request.length_error`)."""
        model = self.engine.model
        size = len(self.engine.vocabulary.tokens)
        max_len = self.config.max_len  # within the context (`Server` refuses one past it)
        choices = self.engine.requests(request, self.config.default_max_tokens, max_len)
        try:
            return [check_request(c, model.context_length, size, max_len) for c in choices]
        except RequestError as error:
            raise refused(error, request.max_tokens_field) from None

    def _completion(self, request: ToolRequest, results: dict) -> dict:
        """The `chat.completion` body (`corral.tools.shapes.completion_json`, as `corral
        generate` writes it), `results` by choice index."""
        ordered = [results[i] for i in range(len(results))]
        return completion_json(
            request,
            ordered,
            uuid.uuid4().hex[:12],
            self.config.model_name,
            self.engine.vocabulary,
            self.engine.syntax(request),
        )

    async def _stream(self, request: ToolRequest, job: Job, usage: bool, shutdown: anyio.Event):
        """The server-sent events of a streamed request (see the module docstring). When the
        server is told to exit, the stream goes on for `SHUTDOWN_GRACE_SECONDS`, then ends with
        an error event (`server_shutdown`) instead of being cut."""
        request_id = uuid.uuid4().hex[:12]
        created = int(time.time())
        model = self.config.model_name
        n = len(job.choices)
        streams, shapes = [], []
        syntax = self.engine.syntax(request)
        for i in range(n):
            call_id = None
            if syntax is not None:
                call_id = f"{request_id}_{i}" if request.n > 1 else request_id
            streams.append(ChoiceStream(call_id, request.stop, syntax, self.engine.vocabulary))
            shapes.append(ChoiceDeltas(streams[i].parser is None))

        def chunk(choices: list, **extra) -> dict:
            body = {
                "id": f"chatcmpl-{request_id}",
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": choices,
            }
            if usage:
                body["usage"] = None
            body.update(extra)
            return {"data": event_json(body)}

        def choice(i: int, delta: dict, reason: str | None = None, logprobs=None) -> dict:
            return {"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": reason}

        def with_logprobs(i: int, result) -> list[dict]:
            """A choice's delta chunks replayed from its result, each with the logprobs of the
            tokens whose bytes it carries (`ChoiceStream.replay`)."""
            top = result.top_logprobs
            mass, unmasked = result.allowed_mass, result.unmasked_logprobs
            chunks = []
            for item, positions in streams[i].replay(result, self.engine.vocabulary.tokens):
                logprobs = logprobs_json(
                    [result.token_ids[j] for j in positions],
                    [result.logprobs[j] for j in positions],
                    None if top is None else [top[j] for j in positions],
                    self.engine.vocabulary,
                    request.top_logprobs or 0,
                    None
                    if mass is None
                    else ([mass[j] for j in positions], [unmasked[j] for j in positions]),
                )
                deltas = [{}] if item is None else shapes[i].event(item) or [{}]
                chunks += [chunk([choice(i, delta)]) for delta in deltas[:-1]]
                chunks.append(chunk([choice(i, deltas[-1], None, logprobs)]))
            return chunks

        results = []  # the ended choices', for `usage`
        try:
            for i in range(n):
                for delta in shapes[i].opening():
                    yield chunk([choice(i, delta)])
            ended = 0
            deadline = None
            while ended < n:
                if shutdown.is_set():
                    deadline = deadline or time.monotonic() + SHUTDOWN_GRACE_SECONDS
                    if time.monotonic() >= deadline:
                        message = "The server is shutting down: this stream did not end in time."
                        stopped = ToolError(503, None, "server_shutdown", message, "server_error")
                        yield {"data": json.dumps(stopped.to_json())}
                        return
                try:
                    event = await asyncio.wait_for(job.events.get(), DISCONNECT_POLL_SECONDS)
                except asyncio.TimeoutError:
                    continue
                if event[0] == "error":
                    error = error_response(engine_failure(event[1]))
                    yield {"data": error.body.decode("utf-8").translate(_LINE_BREAKS)}
                    return
                i = event[1]
                if event[0] == "text":
                    for item in streams[i].feed(event[2]):
                        for delta in shapes[i].event(item):
                            yield chunk([choice(i, delta)])
                    continue
                result = event[2]
                ended += 1
                results.append(result)
                if request.logprobs:
                    for piece in with_logprobs(i, result):
                        yield piece
                else:
                    for item in streams[i].finish(result):
                        for delta in shapes[i].event(item):
                            yield chunk([choice(i, delta)])
                reason = finish_reason(streams[i].calls, result.finish_reason)
                last = choice(i, shapes[i].closing(), reason)
                if request.allowed_mass:  # corral's, on the choice's last chunk
                    last["allowed_mass"] = allowed_mass_json(result.allowed_mass)
                yield chunk([last])
            if usage:
                yield chunk([], usage=usage_json(results))
            yield {"data": "[DONE]"}
        finally:
            self.thread.cancel(job)


# characters JSON leaves unescaped that `str.splitlines` (httpx's `iter_lines`, and so many SSE
# clients) takes for line breaks
_LINE_BREAKS = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def event_json(body: dict) -> str:
    """`body` as one server-sent event's JSON text: UTF-8 as it is, except the characters a
    client may take for a line break (U+0085, U+2028, U+2029), escaped, so that every event is
    one line to every client (the others JSON escapes already)."""
    return json.dumps(body, ensure_ascii=False).translate(_LINE_BREAKS)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on `host` (for tests and benches)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def background_server(model, config: ServerConfig = ServerConfig(), host: str = "127.0.0.1"):
    """Run a server over `model` in a background thread of this process, on `host` and a free
    port, for the `with` block (tests, benches, notebooks). Yields `(base_url, Server)`.

    Raises:
        RuntimeError: uvicorn did not start within 30 s.
    """
    server = Server(Completions(model, config.model_name, tool_format=config.tool_format), config)
    port = free_port(host)
    uv = _uvicorn(server.app(), host=host, port=port, log_level="warning")
    thread = threading.Thread(target=uv.run, name="corral-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            uv.should_exit = True
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://{host}:{port}", server
    finally:
        uv.should_exit = True
        thread.join(timeout=30)


def serve(
    model_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    config: ServerConfig = ServerConfig(),
) -> None:
    """Load the model and run the server until interrupted (uvicorn's own signal handling).

    Raises:
        ConstrainError: the model cannot be loaded (`corral.model.load_model`).
    """
    engine = Completions(load_model(model_path), config.model_name, tool_format=config.tool_format)
    server = _uvicorn(Server(engine, config).app(), host=host, port=port, log_level="info")
    with contextlib.suppress(KeyboardInterrupt):  # as `uvicorn.run`
        server.run()

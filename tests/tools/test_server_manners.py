"""`corral serve` on the stand-in model, live on 127.0.0.1 (issue 33, items 5, 6 and 10): no
body freezes the event loop, HTTP manners (405 with `Allow`, CORS preflights under
`--cors-origin`, the Bearer scheme in any case), `GET /v1/models/{model}`, and one answer for
every context overflow."""

from __future__ import annotations

import importlib
import io
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

import httpx
import openai
import pytest
from corral.automata import ConstrainError
from corral.model.errors import ContextLengthError
from corral.tools.batch import run_batch
from corral.tools.cli import main
from corral.tools.completions import Completions
from corral.tools.errors import ToolError
from corral.tools.prompt_bound import PromptBound
from corral.tools.render import render_request
from corral.tools.request import MAX_TOOLS, parse_tool_request
from corral.tools.server import Server, ServerConfig, background_server, free_port
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel
from starlette.testclient import TestClient

KEY = "sk-manners"
NAME = ServerConfig().model_name
ORIGIN = "https://app.example"
CONTEXT, MAX_LEN = 1024, 256
ASK = [{"role": "user", "content": "hi"}]
AUTH = {"Authorization": f"Bearer {KEY}"}
SERVED = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model():
    return StandInModel(context=CONTEXT)


@pytest.fixture(scope="module")
def url(model):
    config = ServerConfig(max_len=MAX_LEN, api_key=KEY, cors_origins=(ORIGIN,))
    with background_server(model, config) as (base, _):
        yield base


@pytest.fixture(scope="module")
def http():
    with httpx.Client(timeout=120) as client:
        yield client


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


# --- no body freezes the event loop ----------------------------------------------------------


def maximal_body(limit: int) -> bytes:
    """A body of exactly `limit` bytes: `MAX_TOOLS` tools whose descriptions fill it, under
    tool_choice `none` (so nothing but validation works on them)."""
    tools = [
        {"type": "function", "function": {"name": f"f{i}", "description": ""}}
        for i in range(MAX_TOOLS)
    ]
    body = {"messages": ASK, "tools": tools, "tool_choice": "none", "max_tokens": 2}
    room = limit - len(json.dumps(body).encode())
    for i, tool in enumerate(tools):
        tool["function"]["description"] = "d" * (room // MAX_TOOLS + (i < room % MAX_TOOLS))
    data = json.dumps(body).encode()
    assert len(data) == limit
    return data


# each step a request goes through before the engine; the old server ran them on the loop
STEPS = [
    ("corral.tools.server", "read_body"),
    ("corral.tools.server", "streaming_fields"),
    ("corral.tools.server", "parse_tool_request"),
    ("corral.tools.request", "check_values"),
    ("corral.tools.server", "check_model"),
]


@pytest.mark.parametrize(("module", "name"), STEPS)
def test_health_answers_while_a_maximal_body_is_validated(url, monkeypatch, module, name):
    """Each step is held until `/health` has answered: on a worker thread it is answered at
    once; on the event loop it could not be until the step gave up waiting (30 s), so the order
    would be validating, validated, health."""
    order: list[str] = []
    started, answered = threading.Event(), threading.Event()
    step = getattr(importlib.import_module(module), name)

    def held(*args, **kwargs):
        order.append("validating")
        started.set()
        answered.wait(30)
        result = step(*args, **kwargs)
        order.append("validated")
        return result

    monkeypatch.setattr(f"{module}.{name}", held)
    body = maximal_body(ServerConfig().max_body_bytes)

    def post() -> httpx.Response:
        with httpx.Client(timeout=120) as client:
            headers = {**AUTH, "Content-Type": "application/json"}
            return client.post(f"{url}/v1/chat/completions", content=body, headers=headers)

    with ThreadPoolExecutor(1) as pool, httpx.Client(timeout=120) as client:
        posted = pool.submit(post)
        assert started.wait(60)
        assert client.get(f"{url}/health").json() == {"status": "ok"}
        order.append("health")
        answered.set()
        response = posted.result()
    assert response.status_code == 200, response.text
    assert order == ["validating", "health", "validated"]


def test_more_tools_than_the_limit_are_refused_before_anything_is_built(url, http, monkeypatch):
    built = []
    monkeypatch.setattr(Completions, "requests", lambda *args: built.append(args))
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(20_000)]
    body = {"messages": ASK, "tools": tools}
    error = error_of(http.post(f"{url}/v1/chat/completions", json=body, headers=AUTH), 400)
    assert (error["param"], error["code"]) == ("tools", "array_above_max_length")
    assert "20000 tools" in error["message"] and str(MAX_TOOLS) in error["message"]
    assert built == []


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 8), st.integers(0, 3000), st.sampled_from(["auto", "required"]))
def test_no_grammar_is_built_for_tools_whose_prompt_fills_the_context(tools, words, choice):
    """The tools' schemas are in the prompt: when it fills the context, counted in tokens
    (here with no bound from its length, as for a tokenizer with a normalizer), the request is
    refused before any grammar is built."""
    model = StandInModel(context=CONTEXT)
    engine = Completions(model)
    engine.prompt_bound = PromptBound(None, b"")
    built = []
    index = engine.compiler.index
    engine.compiler.index = lambda grammar: built.append(grammar) or index(grammar)
    listed = [
        {"type": "function", "function": {"name": f"f{i}", "description": "w " * words}}
        for i in range(tools)
    ]
    request = parse_tool_request({"messages": ASK, "tools": listed, "tool_choice": choice})
    prompt = len(model.tokenizer.encode(render_request(model, request)))
    try:
        engine.requests(request)
    except ToolError as error:
        assert prompt >= CONTEXT
        assert (error.status, error.param, error.code) == (
            400,
            "messages",
            "context_length_exceeded",
        )
        assert built == []
    else:
        assert prompt < CONTEXT and len(built) == 1


# --- HTTP manners ------------------------------------------------------------------------------

ALLOWED = {
    "/v1/chat/completions": {"POST"},
    "/v1/models": {"GET", "HEAD"},
    f"/v1/models/{NAME}": {"GET", "HEAD"},
    "/health": {"GET", "HEAD"},
    "/metrics": {"GET", "HEAD"},
    "/openapi.json": {"GET", "HEAD"},
}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


@pytest.mark.parametrize(
    ("path", "method"),
    [(path, m) for path in ALLOWED for m in METHODS if m not in ALLOWED[path]],
)
def test_a_wrong_method_is_a_405_with_the_allow_header(url, http, path, method):
    response = http.request(method, f"{url}{path}", headers=AUTH)
    error_of(response, 405)
    assert {m.strip() for m in response.headers["allow"].split(",")} == ALLOWED[path]


PREFLIGHT = {
    "Origin": ORIGIN,
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
}


def test_a_browser_preflight_from_a_configured_origin_is_answered(url, http):
    chat = f"{url}/v1/chat/completions"
    response = http.options(chat, headers=PREFLIGHT)  # no key: browsers send none
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed = {
        h.strip().lower() for h in response.headers["access-control-allow-headers"].split(",")
    }
    assert {"authorization", "content-type", "x-stainless-os"} <= allowed
    # the requests themselves: the page may read their answers, errors included
    body = {"messages": ASK, "max_tokens": 2}
    answer = http.post(chat, json=body, headers={**AUTH, "Origin": ORIGIN})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == ORIGIN
    refused = http.post(chat, json=body, headers={"Origin": ORIGIN})
    error_of(refused, 401)
    assert refused.headers["access-control-allow-origin"] == ORIGIN
    # another origin gets no grant
    other = http.options(chat, headers={**PREFLIGHT, "Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in other.headers
    answer = http.post(chat, json=body, headers={**AUTH, "Origin": "https://elsewhere.example"})
    assert "access-control-allow-origin" not in answer.headers


def test_without_cors_origins_a_preflight_gets_no_grant():
    server = Server(Completions(StandInModel(context=CONTEXT)), ServerConfig(max_len=MAX_LEN))
    with TestClient(server.app()) as client:
        response = client.options("/v1/chat/completions", headers=PREFLIGHT)
        assert response.status_code == 405 and response.headers["allow"] == "POST"
        assert "access-control-allow-origin" not in response.headers
        answer = client.post("/v1/chat/completions", json={"messages": ASK, "max_tokens": 2})
        assert answer.status_code == 200 and "access-control-allow-origin" not in answer.headers


def test_corral_serve_takes_cors_origins(monkeypatch, capsys):
    seen = []
    monkeypatch.setattr("corral.tools.server.serve", lambda *args: seen.append(args))
    port = str(free_port())
    one, two = "https://a.example", "http://localhost:3000"
    assert main(["serve", "--port", port, "--cors-origin", one, "--cors-origin", two]) == 0
    assert seen[0][3].cors_origins == (one, two)
    assert main(["serve", "--port", port]) == 0
    assert seen[1][3].cors_origins == ()
    for wrong in ("http://localhost:3000/", "localhost:3000", "https://a.example/app", "x"):
        assert main(["serve", "--port", port, "--cors-origin", wrong]) == 2
        assert "--cors-origin must be an origin" in capsys.readouterr().err
    assert len(seen) == 2


@SERVED
@given(st.lists(st.booleans(), min_size=6, max_size=6), st.booleans(), st.integers(1, 3))
def test_the_bearer_scheme_is_read_in_any_case(url, http, upper, right, spaces):
    scheme = "".join(c.upper() if u else c for c, u in zip("bearer", upper, strict=True))
    key = KEY if right else KEY + "x"
    headers = {"Authorization": scheme + " " * spaces + key}
    for path in ("/v1/models", f"/v1/models/{NAME}"):
        response = http.get(f"{url}{path}", headers=headers)
        assert response.status_code == (200 if right else 401), response.text
        if not right:
            assert error_of(response, 401)["code"] == "invalid_api_key"


# --- GET /v1/models/{model} ---------------------------------------------------------------------


def test_the_openai_client_retrieves_the_served_model(url):
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    model = client.models.retrieve(NAME)
    assert (model.id, model.object, model.owned_by) == (NAME, "model", "corral")
    assert model == client.models.list().data[0]
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("gpt-4o")
    assert (missing.value.code, missing.value.param) == ("model_not_found", "model")
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{url}/v1", api_key="no", max_retries=0).models.retrieve(NAME)


@SERVED
@given(
    st.text(
        st.characters(codec="utf-8", exclude_categories=("Cc",), exclude_characters="/?#%"),
        min_size=1,
    )
)
def test_any_other_model_id_is_a_404_in_openais_shape(url, http, name):
    if name in (NAME, ".", ".."):
        return
    response = http.get(f"{url}/v1/models/{quote(name, safe='')}", headers=AUTH)
    error = error_of(response, 404)
    assert (error["param"], error["code"], error["type"]) == (
        "model",
        "model_not_found",
        "invalid_request_error",
    )
    assert f"'{name}'" in error["message"]


# --- one answer for every context overflow ----------------------------------------------------


@SERVED
@given(
    st.integers(0, 400) | st.integers(0, 2 * CONTEXT),
    st.none() | st.integers(1, 10**12) | st.integers(1, 2 * CONTEXT),
    st.sampled_from(["max_tokens", "max_completion_tokens"]),
)
def test_every_context_overflow_is_one_answer(url, http, model, length, max_tokens, name):
    """Past this server's `max_len` or past the model's context too, with any max_tokens or
    none: a 400 `context_length_exceeded` naming the limit the server enforces, its `max_len`
    (256) and never the model's larger context (1024), with the prompt's figure; `param` the
    field the request set its limit with (`max_tokens` or `max_completion_tokens`, the message
    naming it and not the other) when the prompt alone fits, `messages` otherwise (the
    stand-in's tokens are bytes, so the prompt's length is known exactly)."""
    body = {"messages": [{"role": "user", "content": "x" * length}]}
    if max_tokens is not None:
        body[name] = max_tokens
    prompt = len(model.tokenizer.encode(render_request(model, parse_tool_request(body))))
    response = http.post(f"{url}/v1/chat/completions", json=body, headers=AUTH)
    if prompt + (max_tokens or 1) <= MAX_LEN:
        assert response.status_code == 200, response.text
        return
    error = error_of(response, 400)
    field = name if max_tokens is not None and prompt < MAX_LEN else "messages"
    assert (error["code"], error["param"]) == ("context_length_exceeded", field), error
    if field == name:
        other = ({"max_tokens", "max_completion_tokens"} - {name}).pop()
        assert f"{name} asks for {max_tokens} more" in error["message"], error
        assert other not in error["message"], error
    assert f"at most {MAX_LEN} tokens" in error["message"], error
    assert str(CONTEXT) not in error["message"] and str(prompt) in error["message"], error


def _constrain(text):
    return ConstrainError(text)


def _context(text):
    return ContextLengthError(100, 120, None)


def _tool_error(text):
    return ToolError(422, "tools", "unsupported_parameter", text or "no")


def _unicode(text):
    return UnicodeEncodeError("utf-8", text, 0, 1, "why")


ERRORS = [RuntimeError, KeyError, ValueError, OverflowError, RecursionError]
ERRORS += [_constrain, _context, _tool_error, _unicode]


@settings(SERVED, max_examples=30)
@given(make=st.sampled_from(ERRORS), text=st.text(max_size=20))
def test_the_server_and_a_batch_line_answer_one_error_alike(monkeypatch, make, text):
    """Whatever a request's preparation raises, the server answers the status and body the
    Batch runner writes for that line (one mapping, `corral.tools.errors.openai_error`)."""
    error = make(text)
    completions = Completions(StandInModel(context=CONTEXT))
    monkeypatch.setattr(completions, "requests", lambda *args: (_ for _ in ()).throw(error))
    body = {"messages": ASK, "max_tokens": 2}
    out = io.StringIO()
    line = json.dumps({"custom_id": "a", "body": body})
    run_batch(completions, [line], out, progress=False)
    written = json.loads(out.getvalue())["response"]
    with TestClient(Server(completions, ServerConfig(max_len=MAX_LEN)).app()) as client:
        answer = client.post("/v1/chat/completions", json=body)
    assert (answer.status_code, answer.json()) == (written["status_code"], written["body"])

"""`corral serve` live on 127.0.0.1 with the real SmolLM2-135M-Instruct, driven by the official
`openai` client and by plain HTTP (corral.tools.server, corral.tools.serving): the cases of the
server's issue, checked with `jsonschema`, independent of corral's compiler."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest
from corral.model.generate import GenerationResult
from corral.tools.cli import main
from corral.tools.events import CallStart, Content, ToolCall, collect
from corral.tools.server import ServerConfig, background_server, free_port
from corral.tools.serving import ChoiceStream
from example_schemas import WEATHER
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

KEY = "sk-test"
MODEL = "SmolLM2-135M-Instruct"  # the served model's name
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
FORCED = {"type": "function", "function": {"name": "get_weather"}}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
}
PERSON_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
DESCRIBE = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def server(smollm2):
    config = ServerConfig(batch_size=16, max_len=512, api_key=KEY)
    with background_server(smollm2, config) as (url, _):
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=300)


def weather_arguments_valid(call) -> bool:
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    return call.function.name == "get_weather"


def forced(**extra) -> dict:
    body = {"model": MODEL, "messages": ASK, "tools": [WEATHER], "tool_choice": FORCED}
    return {"max_tokens": 60, "seed": 7, **body, **extra}


# --- 1. the official openai client --------------------------------------------------------


@pytest.mark.slow
def test_forced_call_returns_schema_valid_tool_calls(client):
    answer = client.chat.completions.create(**forced())
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert weather_arguments_valid(call)
    assert call.id.startswith("call_")
    assert answer.usage.completion_tokens > 0


@pytest.mark.slow
def test_streamed_call_accumulated_by_the_client_equals_the_plain_call(client):
    plain = client.chat.completions.create(**forced()).choices[0]
    with client.chat.completions.stream(**forced()) as stream:
        streamed = stream.get_final_completion().choices[0]
    assert streamed.finish_reason == "tool_calls"
    (a,), (b,) = plain.message.tool_calls, streamed.message.tool_calls
    assert (a.function.name, a.function.arguments) == (b.function.name, b.function.arguments)
    assert weather_arguments_valid(b)


@pytest.mark.slow
def test_stream_deltas_index_calls_and_report_usage(client):
    chunks = list(
        client.chat.completions.create(
            **forced(), stream=True, stream_options={"include_usage": True}
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert calls[0].id is not None and calls[0].function.name == "get_weather"
    assert all(c.index == 0 for c in calls) and all(c.id is None for c in calls[1:])
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


@pytest.mark.slow
def test_streamed_free_text_with_n_and_stop_equals_the_plain_answer(client):
    """n choices stream under their own index; a stop string is cut from the streamed text as
    from the plain one (its first bytes were held back, never sent)."""
    body = {"model": MODEL, "messages": DESCRIBE, "max_tokens": 24, "seed": 5, "n": 2}
    plain = client.chat.completions.create(**body).choices
    stop = next(c.message.content for c in plain)[6:8]  # a piece the seeded answer contains
    plain = client.chat.completions.create(**body, stop=[stop]).choices
    chunks = list(client.chat.completions.create(**body, stop=[stop], stream=True))
    texts, reasons = ["", ""], [None, None]
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            reasons[choice.index] = choice.finish_reason or reasons[choice.index]
    assert texts == [c.message.content or "" for c in plain]
    assert reasons == [c.finish_reason for c in plain]
    assert stop not in texts[0] and reasons[0] == "stop"


@pytest.mark.slow
def test_tool_choice_none_calls_nothing(client):
    answer = client.chat.completions.create(**forced(tool_choice="none", max_tokens=12))
    choice = answer.choices[0]
    assert choice.message.tool_calls is None
    assert choice.finish_reason in ("stop", "length")
    assert choice.message.content


@pytest.mark.slow
def test_json_schema_content_validates(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=DESCRIBE, response_format=PERSON_FORMAT, max_tokens=40, seed=3
    )
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)


@pytest.mark.slow
def test_logprobs_come_back_in_the_api_shape(client):
    answer = client.chat.completions.create(
        model=MODEL, messages=DESCRIBE, response_format=PERSON_FORMAT, max_tokens=40, seed=3,
        logprobs=True,
    )  # fmt: skip
    choice = answer.choices[0]
    tokens = choice.logprobs.content
    assert tokens and all(t.logprob <= 0.0 for t in tokens)
    assert "".join(t.token for t in tokens) == choice.message.content
    assert b"".join(bytes(t.bytes) for t in tokens) == choice.message.content.encode()
    assert all(t.top_logprobs == [] for t in tokens)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [
        {"messages": ASK, "top_logprobs": 2},
        {"messages": DESCRIBE, "n": 2, "top_logprobs": 0},
        {"messages": DESCRIBE, "response_format": PERSON_FORMAT},
        {"messages": ASK, "tools": [WEATHER], "tool_choice": FORCED, "top_logprobs": 1},
    ],
)
def test_streamed_logprobs_are_those_of_the_plain_answer_chunk_by_chunk(client, extra):
    """Each chunk's logprobs are the entries of the tokens whose text its delta carries: joined
    in order they are the plain answer's, and their bytes are the text the deltas carried."""
    body = {"model": MODEL, "max_tokens": 30, "seed": 11, "logprobs": True, **extra}
    plain = client.chat.completions.create(**body).choices
    chunks = [c for c in client.chat.completions.create(**body, stream=True) if c.choices]
    for i, answer in enumerate(plain):
        mine = [c.choices[0] for c in chunks if c.choices[0].index == i]
        entries = [e for c in mine if c.logprobs is not None for e in c.logprobs.content]
        # the same tokens; logprobs within float noise (a prefix-cached prefill or another
        # batch shape moves logits by about 1e-5)
        assert [e.token for e in entries] == [e.token for e in answer.logprobs.content]
        assert [e.logprob for e in entries] == pytest.approx(
            [e.logprob for e in answer.logprobs.content], abs=1e-3
        )
        assert [[t.token for t in e.top_logprobs] for e in entries] == [
            [t.token for t in e.top_logprobs] for e in answer.logprobs.content
        ]
        if answer.message.tool_calls is None:  # content: the chunks' tokens spell their deltas
            spelled = b"".join(bytes(e.bytes) for e in entries)
            assert spelled.decode(errors="replace") == "".join(c.delta.content or "" for c in mine)
            for c in mine:  # a chunk with text carries the tokens of that text
                assert bool(c.delta.content) <= bool(c.logprobs and c.logprobs.content)


def test_errors_arrive_as_the_clients_exceptions(client, server):
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=[])
    assert bad.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=MODEL, messages=ASK, temperature=5)
    assert bad.value.param == "temperature"
    unsupported = {
        "type": "function",
        "function": {"name": "f", "parameters": {"not": {"format": "email"}}},
    }
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.chat.completions.create(model=MODEL, messages=ASK, tools=[unsupported])
    assert refused.value.param == "tools[0].function.parameters"
    assert refused.value.code == "unsupported_parameter"
    wrong = openai.OpenAI(base_url=f"{server}/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.chat.completions.create(model=MODEL, messages=ASK)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()


def test_models_lists_the_served_model(client):
    (model,) = client.models.list().data
    assert model.id == "SmolLM2-135M-Instruct" and model.object == "model"


# --- errors over plain HTTP ---------------------------------------------------------------


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def test_http_errors_keep_openais_shape(server):
    url = f"{server}/v1/chat/completions"
    auth = {"Authorization": f"Bearer {KEY}"}
    json_type = {**auth, "Content-Type": "application/json"}
    with httpx.Client(timeout=60) as http:
        assert error_of(http.post(url, content=b"{nope", headers=json_type), 400)["code"] == (
            "invalid_json"
        )
        error_of(http.post(url, content=b"x", headers={**auth, "Content-Type": "text/plain"}), 415)
        error_of(http.post(url, content=b" " * (5 * 1024 * 1024), headers=json_type), 413)
        error_of(http.get(f"{server}/v1/nothing", headers=auth), 404)
        error_of(http.get(url, headers=auth), 405)
        error_of(http.post(url, json={"messages": ASK}), 401)
        assert error_of(http.get(f"{server}/v1/models"), 401)["code"] == "invalid_api_key"
        long_answer = {"messages": ASK, "max_tokens": 600}  # past this server's max_len
        assert error_of(http.post(url, json=long_answer, headers=auth), 400)["param"] == (
            "max_tokens"
        )
        long_prompt = [{"role": "user", "content": "word " * 600}]  # alone past max_len 512
        for max_tokens in (5, None):
            body = {"messages": long_prompt, "max_tokens": max_tokens}
            error = error_of(http.post(url, json=body, headers=auth), 400)
            assert (error["param"], error["code"]) == ("messages", "context_length_exceeded")
        other = {"model": "gpt-4o", "messages": ASK, "max_tokens": 2}
        error = error_of(http.post(url, json=other, headers=auth), 404)
        assert (error["param"], error["code"]) == ("model", "model_not_found")
        assert "gpt-4o" in error["message"] and MODEL in error["message"]
        past_context = {"messages": ASK, "max_tokens": 9000}  # past the model's 8192 too
        error = error_of(http.post(url, json=past_context, headers=auth), 400)
        assert error["code"] == "context_length_exceeded" and error["param"] == "max_tokens"
        assert "at most 512 tokens" in error["message"] and "8192" not in error["message"]
        assert http.get(f"{server}/health").json() == {"status": "ok"}
        assert http.get(f"{server}/openapi.json").json()["openapi"].startswith("3.")


# --- 2. sixteen concurrent clients --------------------------------------------------------


def mixed_request(i: int) -> dict:
    """Request i of the concurrency test: tool calls and schema answers, seeded. top_p cuts the
    distribution's long tail, where tokens of near-equal tiny probability sit side by side: there
    a logit difference of 1e-5 between batch shapes (BLAS rounding, see corral.model.generate)
    moves a draw to a neighbour, a change that says nothing about the server."""
    if i % 2:
        body = forced(seed=100 + i, max_tokens=40)
    else:
        body = {"model": MODEL, "messages": DESCRIBE, "response_format": PERSON_FORMAT}
        body.update(seed=100 + i, max_tokens=32)
    return {**body, "top_p": 0.8}


def answer_of(client, body: dict, stream: bool) -> tuple:
    """`(kind, text)`: the tool call's name and arguments, or the content, after checking it is
    complete and valid."""
    if stream:
        with client.chat.completions.stream(**body) as events:
            choice = events.get_final_completion().choices[0]
    else:
        choice = client.chat.completions.create(**body).choices[0]
    if "tools" in body:
        assert choice.finish_reason == "tool_calls"
        (call,) = choice.message.tool_calls
        assert weather_arguments_valid(call)
        return ("call", call.function.arguments)
    assert choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), PERSON)
    return ("content", choice.message.content)


@pytest.mark.slow
def test_sixteen_concurrent_clients_each_get_their_own_valid_answer(client):
    bodies = [mixed_request(i) for i in range(16)]
    streamed = [i % 4 < 2 for i in range(16)]  # 8 streaming, across both kinds
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(answer_of, [client] * 16, bodies, streamed))
    alone = [answer_of(client, body, False) for body in bodies]
    assert together == alone
    assert len({text for _, text in together}) > 2  # different seeds, different answers


# --- 3. a dropped stream ------------------------------------------------------------------


def gauge(base: str, name: str) -> float:
    text = httpx.get(f"{base}/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.slow
def test_a_dropped_stream_frees_its_slot(smollm2):
    config = ServerConfig(batch_size=1, max_len=512, max_waiting=0)
    never_ends = {str(t): -100 for t in smollm2.vocabulary.eos_ids}  # no early EOS: a stream
    with background_server(smollm2, config) as (url, _):  # outlives what the test reads
        body = {"messages": DESCRIBE, "max_tokens": 300, "stream": True, "logit_bias": never_ends}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            pieces = [next(lines) for _ in range(6)]  # a few chunks, then hang up
        assert any(p.startswith("data: ") for p in pieces)
        deadline = time.monotonic() + 10
        while gauge(url, "corral_requests_running") > 0:
            assert time.monotonic() < deadline, "the dropped stream kept its slot"
            time.sleep(0.1)
        assert httpx.get(f"{url}/health").status_code == 200
        small = {"messages": ASK, "max_tokens": 3}
        answer = httpx.post(f"{url}/v1/chat/completions", json=small, timeout=60)
        assert answer.status_code == 200, answer.text  # admitted at once: no 429
        busy = {"messages": DESCRIBE, "max_tokens": 200, "stream": True, "logit_bias": never_ends}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=busy, timeout=60) as r:
            lines = r.iter_lines()
            next(lines)
            refused = httpx.post(f"{url}/v1/chat/completions", json=small, timeout=60)
            if refused.status_code != 429:  # say how the busy stream ended
                rest = [line for line in lines if line]
                raise AssertionError(f"{refused.text}\nbusy stream: {rest[:3]} ... {rest[-3:]}")
        assert error_of(refused, 429)["code"] == "rate_limit_exceeded"
        assert refused.headers["retry-after"] == "1"  # the openai clients wait, then retry


@contextlib.contextmanager
def serve_process(tmp_path):
    """`corral serve` in a child process on a free port, until it answers /health. Yields
    (base_url, process, log path); the process is killed after the block."""
    port = free_port()
    run = "import sys; from corral.tools.command import main; sys.exit(main())"
    command = [sys.executable, "-c", run, "serve", "--port", str(port)]
    path = tmp_path / "serve.log"
    log = open(path, "wb")  # noqa: SIM115 (closed in the finally below)
    server = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, path.read_text()[-2000:]
            assert time.monotonic() < deadline, "the server did not start"
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        yield url, server, path
    finally:
        server.kill()
        server.wait()
        log.close()


@pytest.mark.slow
def test_sigint_lets_an_open_stream_end_and_refuses_new_requests(tmp_path):
    """Ctrl-C while a stream is open: the stream ends whole (its finish_reason and [DONE]), a new
    connection is refused, and the process exits 0 (uvicorn's graceful shutdown)."""
    with serve_process(tmp_path) as (url, server, _):
        body = {"messages": DESCRIBE, "max_tokens": 40, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            first = next(lines)
            server.send_signal(signal.SIGINT)
            rest = [line for line in lines if line]
        chunks = [json.loads(line[6:]) for line in [first, *rest] if line != "data: [DONE]"]
        assert rest[-1] == "data: [DONE]", rest[-3:]
        assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length"), chunks[-1]
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", timeout=2)
        assert server.wait(timeout=60) == 0


@pytest.mark.slow
def test_a_second_sigint_cuts_open_streams_and_exits_quietly(tmp_path):
    """Ctrl-C twice while a long stream is open (uvicorn's force exit): the process exits 0
    without waiting for the stream, which is cut (no [DONE]), and logs no traceback."""
    never_ends = {"0": -100, "1": -100, "2": -100}  # SmolLM2's EOS and its other specials
    body = {"messages": DESCRIBE, "max_tokens": 1500, "stream": True, "logit_bias": never_ends}
    with serve_process(tmp_path) as (url, server, log):
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
            lines = r.iter_lines()
            seen = [next(lines) for _ in range(4)]
            server.send_signal(signal.SIGINT)
            time.sleep(0.5)
            server.send_signal(signal.SIGINT)
            with contextlib.suppress(httpx.TransportError):  # the cut may surface as one
                seen += [line for line in lines if line]
        assert server.wait(timeout=60) == 0
        assert "data: [DONE]" not in seen
        text = log.read_text()
        assert "Traceback" not in text and "ERROR" not in text, text[-3000:]


# --- 4. /metrics --------------------------------------------------------------------------


def counters(base: str) -> dict:
    text = httpx.get(f"{base}/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            values[key] = sample.value
    return values


@pytest.mark.slow
def test_metrics_count_what_was_served(server, client):
    before = counters(server)
    usage = [client.chat.completions.create(**forced(max_tokens=40)).usage for _ in range(2)]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[])
    after = counters(server)

    def grew(name: str, **labels) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    route = "/v1/chat/completions"
    assert grew("corral_http_requests_total", route=route, status="200") == 2
    assert grew("corral_http_requests_total", route=route, status="400") == 1
    assert grew("corral_prompt_tokens_total") == sum(u.prompt_tokens for u in usage)
    assert grew("corral_completion_tokens_total") == sum(u.completion_tokens for u in usage)
    assert grew("corral_time_to_first_token_seconds_count") == 2
    assert grew("corral_inter_token_latency_seconds_count") > 0
    assert grew("corral_mask_and_sample_seconds_total") > 0
    # the second request's prompt is the first one's: its prefill is all but its last token
    assert grew("corral_prefix_cache_queries_total") >= sum(u.prompt_tokens for u in usage)
    assert grew("corral_prefix_cache_hits_total") >= usage[1].prompt_tokens - 1
    hits = grew("corral_grammar_cache_lookups_total", result="hit")
    assert hits + grew("corral_grammar_cache_lookups_total", result="miss") == 2
    assert hits >= 1  # the second request's grammar is the first one's
    assert after[("corral_requests_running", ())] == 0


@pytest.mark.slow
def test_without_the_prefix_cache_metrics_count_no_prefix_queries(smollm2):
    config = ServerConfig(batch_size=2, max_len=256, prefix_cache=False)
    with background_server(smollm2, config) as (url, _):
        plain = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0, timeout=300)
        for _ in range(2):
            plain.chat.completions.create(**forced(max_tokens=40))
        after = counters(url)
    assert after[("corral_prompt_tokens_total", ())] > 0
    assert after.get(("corral_prefix_cache_queries_total", ()), 0.0) == 0
    assert after.get(("corral_prefix_cache_hits_total", ()), 0.0) == 0


# --- 5. schemathesis against /openapi.json --------------------------------------------------


CHECKS = ",".join(
    [
        "not_a_server_error",
        "response_schema_conformance",
        "status_code_conformance",
        "content_type_conformance",
    ]
)


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_nonconforming_response(smollm2, tmp_path):
    runner = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    config = ServerConfig(batch_size=4, max_len=160, default_max_tokens=8, data_dir=tmp_path)
    with background_server(smollm2, config) as (url, _):
        command = [
            runner, "run", f"{url}/openapi.json", "--max-examples", "15",
            "--checks", CHECKS,
            "--request-timeout", "120", "--workers", "1", "--generation-deterministic",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=400, cwd=tmp_path)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-4000:]
    assert "createChatCompletion" in report or "/v1/chat/completions" in report, report[-2000:]


# --- streaming a choice's bytes (no model) ------------------------------------------------


def test_choice_stream_holds_back_what_a_stop_string_may_still_remove():
    stream = ChoiceStream(None, ("END",))
    assert stream.feed(b"abc") == [Content("a")]
    assert stream.feed(b"E") == [Content("b")]
    assert stream.feed(b"N") == [Content("c")]
    final = GenerationResult(b"abc", (), (), "stop", 1, 4)  # the engine cut "END"
    assert stream.finish(final) == []


def test_choice_stream_decodes_utf8_split_between_steps_and_parses_calls():
    stream = ChoiceStream("req", ())
    text = 'é<tool_call>{"name":"f","arguments":{"a":1}}</tool_call>'
    raw = text.encode()
    events = stream.feed(raw[:1]) + stream.feed(raw[1:20]) + stream.feed(raw[20:])
    events += stream.finish(GenerationResult(raw, (), (), "stop", 1, 9))
    assert collect(events) == ("é", [ToolCall("call_req_0", "f", '{"a":1}')])
    assert stream.calls == 1


TOKEN_BYTES = [b"a", b"<", b"tool_call>", b'{"name":"f","arguments":{}}', b"</tool_call>",
               b"\xc3", b"\xa9", b"EN", b"D", b" ", None]  # fmt: skip


@given(
    st.lists(st.integers(0, len(TOKEN_BYTES) - 1), max_size=20),
    st.booleans(),
    st.sampled_from([(), ("END",), ("a<",)]),
)
def test_a_replayed_choice_gives_the_streamed_events_and_every_token_once(tokens, calls, stop):
    """`ChoiceStream.replay`: the events a choice streams, fed token by token, each with the
    tokens whose bytes it first carries; every token goes with exactly one event, in order."""
    raw = b"".join(TOKEN_BYTES[t] or b"" for t in tokens)
    for s in stop:  # the engine cuts at the first stop string
        if s.encode() in raw:
            raw = raw[: raw.index(s.encode())]
    result = GenerationResult(raw, tuple(tokens), (0.0,) * len(tokens), "stop", 1, len(tokens))
    call_id = "r" if calls else None
    fed = ChoiceStream(call_id, stop)
    whole = fed.feed(raw) + fed.finish(result)
    pairs = ChoiceStream(call_id, stop).replay(result, TOKEN_BYTES)
    assert collect([e for e, _ in pairs if e is not None]) == collect(whole)
    assert [j for _, positions in pairs for j in positions] == list(range(len(tokens)))
    assert sum(isinstance(e, CallStart) for e, _ in pairs) == sum(
        isinstance(e, CallStart) for e in whole
    )


def test_corral_serve_refuses_bad_arguments_before_loading_the_model(capsys):
    assert main(["serve", "--batch-size", "0"]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err


def test_a_max_len_past_the_models_context_is_refused(smollm2):
    """`corral serve --max-len 100000` on an 8,192-token model: refused when the server is made
    (as vLLM refuses a max_model_len past the model's), naming both figures, not capped unsaid."""
    from corral.model.errors import CacheError
    from corral.tools.completions import Completions
    from corral.tools.server import Server

    engine = Completions(smollm2)
    with pytest.raises(CacheError, match=r"\(--max-len\) 100000 .* context length, 8192 tokens"):
        Server(engine, ServerConfig(max_len=100_000))
    Server(engine, ServerConfig(max_len=8192))  # the whole context is allowed

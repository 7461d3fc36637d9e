"""The main job end to end with the real SmolLM2-135M-Instruct (DESIGN.md section 7): a Batch API
file of mixed requests, checked with `jsonschema`, independent of corral's compiler."""

from __future__ import annotations

import io
import json

import jsonschema
import pytest
from corral.model.generate import generate
from corral.tools.batch import Engine, done_ids, run_batch, valid_choice
from corral.tools.request import parse_tool_request

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}},
            "required": ["city"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
    },
    "required": ["name", "age"],
}
ASK = [{"role": "user", "content": "What is the weather and the time in Paris and in Rome?"}]


def line(custom_id: str, **body) -> str:
    body.setdefault("messages", ASK)
    body.setdefault("max_tokens", 80)
    request = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
    return json.dumps({**request, "body": body})


NAMED = {"type": "function", "function": {"name": "get_weather"}}
LINES = [
    line("named-greedy", tools=[WEATHER, TIME], tool_choice=NAMED, temperature=0),
    line("named-sampled", tools=[WEATHER, TIME], tool_choice=NAMED, temperature=1, seed=3),
    line("required-parallel", tools=[WEATHER, TIME], tool_choice="required", temperature=0),
    line(
        "required-single",
        tools=[WEATHER, TIME],
        tool_choice="required",
        parallel_tool_calls=False,
        temperature=0.8,
        seed=5,
    ),
    line("auto", tools=[WEATHER, TIME], tool_choice="auto", temperature=0),
    line("none", tools=[WEATHER], tool_choice="none", temperature=0, max_tokens=12),
    line("json-object", response_format={"type": "json_object"}, temperature=0.7, seed=1),
    line(
        "json-schema",
        messages=[{"role": "user", "content": "Describe Ada Lovelace."}],
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
        temperature=1,
        seed=2,
    ),
]


@pytest.fixture(scope="module")
def engine(smollm2):
    return Engine(smollm2)


@pytest.mark.slow
def test_mixed_batch_end_to_end(engine):
    out = io.StringIO()
    summary = run_batch(engine, LINES, out, batch_size=8, progress=False)
    answers = {}
    for text in out.getvalue().splitlines():
        item = json.loads(text)
        assert item["error"] is None and item["response"]["status_code"] == 200, item
        answers[item["custom_id"]] = item["response"]["body"]
    assert sorted(answers) == sorted(json.loads(t)["custom_id"] for t in LINES)
    assert summary.invalid == 0 and summary.errors == 0
    bodies = {json.loads(t)["custom_id"]: json.loads(t)["body"] for t in LINES}
    for custom_id, body in answers.items():
        assert body["object"] == "chat.completion"
        choice = body["choices"][0]
        request = parse_tool_request(bodies[custom_id])
        if custom_id not in ("auto", "none"):  # constrained from the first token: never cut
            assert choice["finish_reason"] in ("stop", "tool_calls"), (custom_id, choice)
        assert valid_choice(request, choice), (custom_id, choice)
        message = choice["message"]
        for call in message.get("tool_calls") or []:
            assert call["type"] == "function" and call["id"].startswith("call_")
            schema = request.tool(call["function"]["name"]).parameters
            jsonschema.validate(json.loads(call["function"]["arguments"]), schema)
        if custom_id.startswith(("named", "required")):
            assert choice["finish_reason"] == "tool_calls"
            assert message["content"] is None
        if custom_id.startswith("named"):
            assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
        if custom_id == "required-single":
            assert len(message["tool_calls"]) == 1
        if custom_id == "none":
            assert "tool_calls" not in message
        if custom_id == "json-object":
            assert isinstance(json.loads(message["content"]), dict)
        if custom_id == "json-schema":
            jsonschema.validate(json.loads(message["content"]), PERSON)
        usage = body["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.slow
def test_bad_line_and_good_line(engine, tmp_path):
    bad_schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "not": {}}
    lines = [
        "this is not JSON",
        line(
            "bad",
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "b", "schema": bad_schema},
            },
        ),
        line("too-small", tools=[WEATHER], tool_choice=NAMED, max_tokens=3),
        line("good", response_format={"type": "json_object"}, temperature=0, max_tokens=40),
        json.dumps({"custom_id": "wrong-url", "url": "/v1/embeddings", "body": {}}),
    ]
    output = tmp_path / "out.jsonl"
    with output.open("w") as out:
        summary = run_batch(engine, lines, out, progress=False)
    items = [json.loads(t) for t in output.read_text().splitlines()]
    by_id = {item["custom_id"]: item for item in items}
    assert len(items) == 5 and summary.errors == 4 and summary.requests == 1
    assert by_id["wrong-url"]["response"] is None
    assert by_id["wrong-url"]["error"]["code"] == "invalid_line"
    assert by_id[None]["response"] is None and by_id[None]["error"]["code"] == "invalid_line"
    bad = by_id["bad"]["response"]
    assert bad["status_code"] == 422
    assert bad["body"]["error"]["code"] == "unsupported_parameter"
    assert "not" in bad["body"]["error"]["message"]
    small = by_id["too-small"]["response"]
    assert small["status_code"] == 400 and small["body"]["error"]["param"] == "max_tokens"
    assert by_id["good"]["response"]["status_code"] == 200
    # --resume: what is already in the output is skipped
    assert done_ids(output) == {None, "bad", "too-small", "good", "wrong-url"}
    with output.open("a") as out:
        again = run_batch(engine, lines[1:], out, skip=done_ids(output), progress=False)
    assert again.requests == 0 and again.errors == 0


@pytest.mark.slow
def test_same_request_same_output_alone_or_in_a_batch(engine):
    """The same request with the same seed gives the same output alone or batched
    (with the real model, whose batched BLAS calls round differently only in the last bits)."""
    bodies = [
        {"messages": ASK, "tools": [WEATHER], "tool_choice": NAMED, "seed": 11, "max_tokens": 40},
        {"messages": ASK, "response_format": {"type": "json_object"}, "seed": 4, "max_tokens": 24},
        {"messages": ASK, "temperature": 0.9, "seed": 5, "max_tokens": 16},
    ]
    requests = [engine.requests(parse_tool_request(b), 64)[0] for b in bodies]
    alone = [generate(engine.model, [r])[0] for r in requests]
    together = generate(engine.model, requests, batch_size=3)
    assert [r.token_ids for r in together] == [r.token_ids for r in alone]

"""A stream equals its answer: the same seeded request, streamed and not, gives the same choices
in every field. A stream's deltas joined as OpenAI's client joins them (`accumulate`, strict:
a member's first value is taken as it is, null included; strings are concatenated) give the
answer's `message` (role, content, tool_calls, reasoning_content), its `finish_reason`,
`logprobs` and `allowed_mass`, and `usage`, for every tool_choice, response_format, n, stop and
turn format. A pure tool-call answer's content is null streamed as not (OpenAI's first delta
of one is `{"role": "assistant", "content": null, "tool_calls": [...]}`)."""

from __future__ import annotations

import json

import httpx
import pytest
from corral.tools.server import ServerConfig, background_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 4}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}},
    },
}
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "n",
        "schema": {"type": "object", "properties": {"n": {"type": "integer", "maximum": 99}}},
    },
}
TOOL_CHOICES = [
    None,
    "none",
    "auto",
    "required",
    {"type": "function", "function": {"name": "get_weather"}},
]
RESPONSE_FORMATS = [None, {"type": "text"}, {"type": "json_object"}, SCHEMA]


@pytest.fixture(scope="module", params=[None, "qwen3"])
def http(request):
    """A server over the stand-in model, in its detected (Hermes) turn format and in Qwen3's,
    which thinks (its thought is `reasoning_content`)."""
    model = StandInModel(eos_bias=0.5)
    if request.param is not None:
        model.chat_template = None  # corral renders the tools itself
    config = ServerConfig(batch_size=4, tool_format=request.param)
    with (
        background_server(model, config) as (url, _),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        yield client


def accumulate(into: dict, delta: dict) -> None:
    """Join one delta into `into` as OpenAI's client does, strictly: a member not yet seen, or
    null so far, takes the delta's value; strings concatenate; tool calls join by `index`."""
    for key, value in delta.items():
        if key == "tool_calls":
            calls = into.setdefault("tool_calls", [])
            for piece in value:
                index = piece["index"]
                if index == len(calls):
                    calls.append({k: v for k, v in piece.items() if k != "index"})
                    continue
                assert index < len(calls), delta
                assert set(piece) == {"index", "function"}, delta  # only arguments later
                calls[index]["function"]["arguments"] += piece["function"]["arguments"]
        elif into.get(key) is None:
            into[key] = value
        else:
            assert isinstance(value, str), (key, delta)
            into[key] += value


def streamed(http: httpx.Client, body: dict) -> dict:
    """The `chat.completion` a stream of `body` adds up to (`usage` asked for)."""
    body = body | {"stream": True, "stream_options": {"include_usage": True}}
    choices: dict[int, dict] = {}
    usage = None
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        lines = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]", lines[-3:]
    for line in lines[:-1]:
        chunk = json.loads(line)
        assert "error" not in chunk, chunk
        if chunk["usage"] is not None:
            assert usage is None and chunk["choices"] == [], chunk
            usage = chunk["usage"]
        for piece in chunk["choices"]:
            choice = choices.setdefault(
                piece["index"],
                {"index": piece["index"], "message": {}, "logprobs": None, "finish_reason": None},
            )
            assert choice["finish_reason"] is None, "a delta after the choice's finish_reason"
            accumulate(choice["message"], piece["delta"])
            if piece["logprobs"] is not None:
                if choice["logprobs"] is None:
                    choice["logprobs"] = {"content": [], "refusal": None}
                choice["logprobs"]["content"] += piece["logprobs"]["content"]
            choice["finish_reason"] = piece["finish_reason"]
            if "allowed_mass" in piece:
                choice["allowed_mass"] = piece["allowed_mass"]
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage}


def without_ids(choices: list[dict]) -> list[dict]:
    """`choices` with each call id replaced by its place (ids name the request, which differs
    between the two requests); the ids' being distinct is checked."""
    out = json.loads(json.dumps(choices))
    for choice in out:
        calls = choice["message"].get("tool_calls") or []
        assert len({call["id"] for call in calls}) == len(calls)
        for k, call in enumerate(calls):
            assert call["id"].startswith("call_")
            call["id"] = k
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    tools=st.sampled_from([None, [WEATHER], [WEATHER, TIME]]),
    tool_choice=st.sampled_from(TOOL_CHOICES),
    response_format=st.sampled_from(RESPONSE_FORMATS),
    n=st.integers(1, 2),
    stop=st.sampled_from([None, "e", ["}", "a"], "<"]),
    logprobs=st.booleans(),
    allowed_mass=st.booleans(),
    max_tokens=st.sampled_from([None, 12, 40]),
    seed=st.integers(0, 2**16),
)
def test_a_stream_adds_up_to_its_answer(
    http, tools, tool_choice, response_format, n, stop, logprobs, allowed_mass, max_tokens, seed
):
    body = {"messages": [{"role": "user", "content": "hi"}], "seed": seed, "n": n}
    fields = {
        "tools": tools,
        "tool_choice": tool_choice if tools else None,
        "response_format": response_format,
        "stop": stop,
        "max_tokens": max_tokens,
    }
    body |= {k: v for k, v in fields.items() if v is not None}  # as a user leaves them out
    if logprobs:
        body |= {"logprobs": True, "top_logprobs": 2}
    if allowed_mass:
        body["allowed_mass"] = True
    answer = http.post("/v1/chat/completions", json=body)
    if answer.status_code != 200:  # refused (e.g. a budget too small): refused streamed too
        with http.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as r:
            assert r.status_code == answer.status_code, (answer.json(), r.read())
        return
    answer = answer.json()
    stream = streamed(http, body)
    assert without_ids(stream["choices"]) == without_ids(answer["choices"])
    for usage in (stream["usage"], answer["usage"]):  # the prefix cache's, which the first fills
        del usage["prompt_tokens_details"]["cached_tokens"]
    assert stream["usage"] == answer["usage"]

"""The OpenAI message and delta shapes (docs/design.md section 5 "Shapes")."""

import json
from dataclasses import dataclass

import pytest
from corral.kernels import Vocabulary
from corral.tools import (
    Arguments,
    CallStart,
    Content,
    ToolCall,
    collect,
    delta_json,
    finish_reason,
    message_json,
    parse_text,
    parse_tool_request,
)
from corral.tools.shapes import completion_json, token_json


def test_message_with_calls_has_null_content_and_string_arguments():
    content, calls = collect(
        parse_text(
            '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>', "r1"
        )
    )
    message = message_json(content, calls)
    assert message == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_r1_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ],
    }
    assert isinstance(message["tool_calls"][0]["function"]["arguments"], str)
    assert '"content": null' in json.dumps(message)


def test_message_content_is_null_never_empty_beside_tool_calls():
    calls = [ToolCall("call_r_0", "f", "{}")]
    assert message_json("", calls)["content"] is None
    assert message_json(None, calls)["content"] is None
    assert message_json("Sure.", calls)["content"] == "Sure."


def test_message_without_calls_has_no_tool_calls_key():
    assert message_json("Hello", []) == {"role": "assistant", "content": "Hello"}


def test_delta_for_a_call_start():
    assert delta_json(CallStart(1, "call_r_1", "get_time")) == {
        "tool_calls": [
            {
                "index": 1,
                "id": "call_r_1",
                "type": "function",
                "function": {"name": "get_time", "arguments": ""},
            }
        ]
    }


def test_delta_for_an_arguments_fragment():
    assert delta_json(Arguments(0, '{"city":"Pa')) == {
        "tool_calls": [{"index": 0, "function": {"arguments": '{"city":"Pa'}}]
    }


def test_delta_for_content():
    assert delta_json(Content("Sure.")) == {"content": "Sure."}


def test_deltas_reassemble_to_the_message():
    pieces = [
        "Sure.<tool_",
        'call>{"name":"get_weather","argu',
        'ments":{"city":"Pa',
        'ris"}}</tool_call>',
    ]
    from corral.tools import ToolParser

    parser = ToolParser("req7")
    events = [e for p in pieces for e in parser.push(p)] + parser.finish()
    deltas = [delta_json(e) for e in events]
    content = "".join(d.get("content", "") for d in deltas)
    calls: dict[int, dict] = {}
    for d in deltas:
        for tc in d.get("tool_calls", []):
            entry = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in tc:
                entry["id"] = tc["id"]
                entry["name"] = tc["function"]["name"]
            entry["arguments"] += tc["function"]["arguments"]
    message = message_json(*collect(events))
    assert content == message["content"] == "Sure."
    assert [(c["id"], c["name"], c["arguments"]) for c in calls.values()] == [
        (t["id"], t["function"]["name"], t["function"]["arguments"]) for t in message["tool_calls"]
    ]


def test_finish_reason():
    assert finish_reason(1, "stop") == "tool_calls"
    assert finish_reason([ToolCall("a", "f", "{}")], "stop") == "tool_calls"
    assert finish_reason(0, "stop") == "stop"
    assert finish_reason(0, "length") == "length"
    assert finish_reason(2, "length") == "length"


def test_collect_refuses_arguments_of_a_call_that_never_started():
    with pytest.raises(ValueError):
        collect([Arguments(0, "{}")])


# --- logprobs and the chat.completion body ---------------------------------------------------

VOCABULARY = Vocabulary.from_list(["Hi", b"\xc3", b"\xa9", None, " there"], eos_ids=[3])


@dataclass(frozen=True)
class Result:
    """A hand-built engine result with the per-token alternatives the engine reports."""

    text: str
    token_ids: tuple
    logprobs: tuple
    finish_reason: str = "stop"
    prompt_tokens: int = 7
    completion_tokens: int = 3
    top_logprobs: tuple | None = None
    reasoning_tokens: int = 0
    cached_tokens: int = 0


HI = Result(
    "Hié",
    (0, 1, 2),
    (-0.5, -1.25, 0.0),
    top_logprobs=(((0, -0.5), (4, -1.0), (3, -3.0)), ((1, -1.25), (0, -2.0)), ((2, 0.0),)),
)


def request(**fields):
    return parse_tool_request({"messages": [{"role": "user", "content": "x"}], **fields})


def test_logprobs_come_in_the_api_shape_with_the_asked_number_of_alternatives():
    body = completion_json(request(logprobs=True, top_logprobs=2), [HI], "r1", "m", VOCABULARY)
    logprobs = body["choices"][0]["logprobs"]
    assert logprobs == {
        "content": [
            {
                "token": "Hi",
                "logprob": -0.5,
                "bytes": [72, 105],
                "top_logprobs": [
                    {"token": "Hi", "logprob": -0.5, "bytes": [72, 105]},
                    {"token": " there", "logprob": -1.0, "bytes": list(b" there")},
                ],
            },
            {
                "token": "\ufffd",
                "logprob": -1.25,
                "bytes": [0xC3],
                "top_logprobs": [
                    {"token": "\ufffd", "logprob": -1.25, "bytes": [0xC3]},
                    {"token": "Hi", "logprob": -2.0, "bytes": [72, 105]},
                ],
            },
            {
                "token": "\ufffd",
                "logprob": 0.0,
                "bytes": [0xA9],
                "top_logprobs": [{"token": "\ufffd", "logprob": 0.0, "bytes": [0xA9]}],
            },
        ],
        "refusal": None,
    }
    joined = bytes(b for entry in logprobs["content"] for b in entry["bytes"])
    assert joined.decode("utf-8") == body["choices"][0]["message"]["content"]
    json.dumps(body, allow_nan=False)


def test_a_special_token_has_no_bytes():
    assert token_json(3, -2.0, VOCABULARY) == {"token": "", "logprob": -2.0, "bytes": None}


def test_logprobs_without_alternatives_and_without_asking():
    body = completion_json(request(logprobs=True), [HI], "r1", "m", VOCABULARY)
    assert [e["top_logprobs"] for e in body["choices"][0]["logprobs"]["content"]] == [[], [], []]
    plain = Result("Hi", (0,), (-0.5,))  # an engine result without top_logprobs
    body = completion_json(request(logprobs=True, top_logprobs=5), [plain], "r1", "m", VOCABULARY)
    assert body["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == []
    assert completion_json(request(), [HI], "r1", "m", VOCABULARY)["choices"][0]["logprobs"] is None


def test_the_completion_body_of_n_choices_with_calls():
    tools = [{"type": "function", "function": {"name": "f"}}]
    call = Result('<tool_call>{"name":"f","arguments":{}}</tool_call>', (4,), (-0.1,))
    cut = Result("<tool_call>", (4,), (-0.1,), finish_reason="length", completion_tokens=1)
    body = completion_json(
        request(tools=tools, n=2, model="mine"), [call, cut], "r9", "m", VOCABULARY
    )
    # the model that answered, not the name the request gave
    assert (body["id"], body["object"], body["model"]) == ("chatcmpl-r9", "chat.completion", "m")
    first, second = body["choices"]
    assert first["message"]["tool_calls"][0]["id"] == "call_r9_0_0"
    assert (first["finish_reason"], second["finish_reason"]) == ("tool_calls", "length")
    assert body["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 4,
        "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 0},  # 0, not absent, as OpenAI's
        "completion_tokens_details": {"reasoning_tokens": 0},  # as OpenAI's, for no thought
    }
    assert completion_json(request(), [HI], "r1", "m", VOCABULARY)["model"] == "m"

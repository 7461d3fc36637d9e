"""The OpenAI message and delta shapes (DESIGN.md section 5 "Shapes"; tool-calls-spec section 4:
message_and_delta_json_shapes)."""

import json

import pytest
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
)


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

"""Reading chat-completion requests (DESIGN.md section 5; tool-calls-spec section 4:
parse_tool_request_hand_example)."""

import json

import pytest
from corral.tools import ToolError, parse_tool_request
from example_schemas import WEATHER

TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def body(**fields):
    return {"model": "smollm2", "messages": MESSAGES, **fields}


def refused(request) -> ToolError:
    with pytest.raises(ToolError) as info:
        parse_tool_request(request)
    return info.value


# --- defaults and a named choice ---------------------------------------------------------


def test_defaults_without_tools():
    request = parse_tool_request(json.dumps(body()))
    assert request.tools == ()
    assert request.tool_choice == "none"
    assert request.function_name is None
    assert request.response_format.type == "text"
    assert request.parallel_tool_calls is True
    assert not request.calls_allowed
    assert (request.temperature, request.top_p, request.n) == (1.0, 1.0, 1)
    assert (request.max_tokens, request.seed, request.stop, request.stream) == (
        None,
        None,
        (),
        False,
    )
    assert request.messages == tuple(MESSAGES)


def test_defaults_with_tools_are_auto_and_parallel():
    request = parse_tool_request(body(tools=[WEATHER, TIME]))
    assert [t.name for t in request.tools] == ["get_weather", "get_time"]
    assert request.tools[0].description == "Current weather in a city."
    assert request.tool_choice == "auto"
    assert request.parallel_tool_calls is True
    assert request.calls_allowed


def test_a_named_choice():
    request = parse_tool_request(
        body(
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_time"}},
            parallel_tool_calls=False,
        )
    )
    assert request.tool_choice == "function"
    assert request.function_name == "get_time"
    assert request.parallel_tool_calls is False
    assert request.tool("get_time").parameters == TIME["function"]["parameters"]


def test_string_choices():
    for choice in ("none", "auto", "required"):
        assert parse_tool_request(body(tools=[WEATHER], tool_choice=choice)).tool_choice == choice
    assert not parse_tool_request(body(tools=[WEATHER], tool_choice="none")).calls_allowed


def test_schema_property_order_is_kept_from_json_text():
    text = (
        '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":'
        '{"name":"f","parameters":{"type":"object","properties":{"zeta":{"type":"integer"},'
        '"alpha":{"type":"integer"},"mid":{"type":"integer"}}}}}]}'
    )
    request = parse_tool_request(text)
    assert list(request.tools[0].parameters["properties"]) == ["zeta", "alpha", "mid"]


def test_a_tool_without_parameters_takes_an_empty_object():
    request = parse_tool_request(body(tools=[{"type": "function", "function": {"name": "ping"}}]))
    assert request.tools[0].parameters == {"type": "object", "properties": {}}


def test_sampling_fields():
    request = parse_tool_request(
        body(
            max_tokens=10,
            max_completion_tokens=20,
            temperature=0,
            top_p=0.5,
            seed=7,
            stop="END",
            n=2,
            presence_penalty=-1,
            frequency_penalty=1.5,
            stream=True,
            stream_options={"include_usage": True},
            logprobs=True,
            top_logprobs=3,
        )
    )
    assert request.max_tokens == 20  # max_completion_tokens wins
    assert (request.temperature, request.top_p, request.seed, request.stop) == (
        0.0,
        0.5,
        7,
        ("END",),
    )
    assert (request.n, request.presence_penalty, request.frequency_penalty) == (2, -1.0, 1.5)
    assert request.stream and request.stream_include_usage and request.logprobs
    assert request.top_logprobs == 3
    assert parse_tool_request(body(max_tokens=5)).max_tokens == 5


def test_response_formats():
    assert parse_tool_request(body(response_format={"type": "text"})).response_format.type == "text"
    fmt = parse_tool_request(body(response_format={"type": "json_object"})).response_format
    assert fmt.type == "json_object"
    schema = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}
    fmt = parse_tool_request(
        body(
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "thing", "schema": schema, "strict": True},
            }
        )
    ).response_format
    assert (fmt.type, fmt.name, fmt.schema, fmt.strict) == ("json_schema", "thing", schema, True)


# --- the 400s ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": {"type": "function"}}, "tools"),
        ({"tools": ["get_weather"]}, "tools[0]"),
        (
            {"tools": [{"type": "function", "function": {"description": "no name"}}]},
            "tools[0].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "has space"}}]},
            "tools[0].function.name",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": []}}]},
            "tools[0].function.parameters",
        ),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools[0].function.parameters",
        ),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type"),
        ({"tools": [WEATHER, TIME, WEATHER]}, "tools[2].function.name"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
        ),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function"}}, "tool_choice.function.name"),
        ({"tool_choice": "auto"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}, "tool_choice"),
        ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"response_format": {"type": "yaml"}}, "response_format.type"),
        ({"response_format": "json"}, "response_format"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}},
            "response_format.json_schema.name",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        ({"temperature": 3}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens"),
        ({"seed": True}, "seed"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"stop": [""]}, "stop"),
        ({"n": 0}, "n"),
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"stream": "true"}, "stream"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"messages": []}, "messages"),
        ({"messages": None}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ],
)
def test_malformed_requests_are_400s_naming_the_param(fields, param):
    error = refused(body(**fields))
    assert error.status == 400
    assert error.param == param
    assert error.to_json()["error"]["type"] == "invalid_request_error"


def test_a_body_that_is_not_a_json_object_is_a_400():
    assert refused("{not json").status == 400
    assert refused("[1, 2]").code == "invalid_type"


def test_arguments_that_are_not_json_name_the_message_index():
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{city: Paris"},
                }
            ],
        },
    ]
    error = refused(body(messages=messages, tools=[WEATHER]))
    assert error.status == 400
    assert error.param == "messages[1].tool_calls[0].function.arguments"
    assert "message 1" in error.message


# --- the 422 ---------------------------------------------------------------------------------


def test_schemas_are_not_compiled_here():
    """A schema the subset refuses passes here: `corral.tools.grammar` refuses it with a 422
    (test_grammar.py) when a grammar uses it."""
    parameters = {"type": "object", "properties": {"s": {"type": "array", "uniqueItems": True}}}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    request = parse_tool_request(body(tools=[WEATHER, tool]))
    assert request.tool("f").parameters == parameters


def test_image_content_parts_are_a_422():
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    error = refused(body(messages=messages))
    assert (error.status, error.param) == (422, "messages[0].content[0].type")


def test_an_empty_tools_list_counts_as_no_tools():
    request = parse_tool_request(body(tools=[]))
    assert (request.tools, request.tool_choice, request.calls_allowed) == ((), "none", False)
    assert refused(body(tools=[], tool_choice="required")).param == "tool_choice"

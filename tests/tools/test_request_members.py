"""Accepted means honoured in every object of a request, not only at the top level: a member the
API does not define, at any object path of a valid request (a message, a content part, a tool
call and its function, a tool and its function or custom object, `tool_choice`,
`response_format` and its `json_schema`, `stream_options`, `structured_outputs`), is a 400
`unknown_parameter` naming that path as OpenAI names it; a member OpenAI defines that corral
does not honour is refused by name; the valid requests themselves are taken. And an overflow
of `max_completion_tokens` names `max_completion_tokens`."""

import copy
import io
import json

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.request import streaming_fields
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
SHOUT = {
    "type": "custom",
    "custom": {
        "name": "shout",
        "description": "Shout it.",
        "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": "[A-Z]+"}},
    },
}
WHISPER = {"type": "custom", "custom": {"name": "whisper", "format": {"type": "text"}}}
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {"id": "call_2", "type": "custom", "custom": {"name": "shout", "input": "HI"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "ok"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "21 C."}]},
    {"role": "user", "content": "And tomorrow?"},
]
USER = [{"role": "user", "content": "Hi"}]
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
VALID = [
    {
        "messages": CONVERSATION,
        "tools": [WEATHER, SHOUT, WHISPER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "stream": True,
        "stream_options": {"include_usage": True},
    },
    {
        "messages": CONVERSATION,
        "tools": [WEATHER, SHOUT],
        "tool_choice": {"type": "custom", "custom": {"name": "shout"}},
        "max_completion_tokens": 50,
        "logit_bias": {"17": -100},
        "metadata": {"k": "v"},
    },
    {
        "messages": USER,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON, "strict": True},
        },
    },
    {"messages": USER, "response_format": {"type": "json_object"}},
    {"messages": USER, "response_format": {"type": "text"}, "stream": False},
    {"messages": USER, "structured_outputs": {"regex": "a+", "choice": None}},
    {"messages": USER, "structured_outputs": {"json": PERSON}},
]
"""Valid requests as users send them, every object corral reads among them."""
MAPS = {"parameters", "schema", "json", "logit_bias", "metadata", "arguments"}
"""Members whose value is the client's map (a schema, token ids, metadata), not an object of
the API."""
DEFINED = {
    "role", "content", "name", "refusal", "audio", "function_call", "tool_calls",
    "tool_call_id", "type", "text", "image_url", "input_audio", "file", "id", "function",
    "custom", "arguments", "input", "description", "parameters", "strict", "format", "grammar",
    "syntax", "definition", "json_schema", "schema", "include_usage", "include_obfuscation",
    "regex", "choice", "json", "json_object", "disable_fallback", "disable_any_whitespace",
    "disable_additional_properties", "whitespace_pattern", "structural_tag", "allowed_tools",
    "reasoning_content",
}  # fmt: skip
"""Every member name OpenAI (or vLLM, for `structured_outputs` and `reasoning_content`) defines
in a nested object of a request: a key drawn outside them is unknown wherever it goes."""


def read(body: dict):
    """A body read as the server reads it: the streaming fields, then the rest."""
    fields, _, _ = streaming_fields(body)
    return parse_tool_request(fields)


def refusal(body: dict) -> ToolError:
    with pytest.raises(ToolError) as caught:
        read(body)
    return caught.value


def objects(value, path: str = ""):
    """`(path, object)` for every object nested in a request body (not the body itself, not
    into `MAPS`), paths written as OpenAI writes a `param`."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from objects(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        if path:
            yield path, value
        for key, item in value.items():
            if key not in MAPS:
                yield from objects(item, f"{path}.{key}" if path else key)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=4,
)
keys = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda k: k not in DEFINED
)


@pytest.mark.parametrize("body", VALID)
def test_the_valid_requests_are_taken(body):
    read(copy.deepcopy(body))


@settings(max_examples=300, deadline=None)
@given(st.data(), keys, json_values)
def test_an_unknown_member_anywhere_is_a_400_naming_its_path(data, key, value):
    body = copy.deepcopy(data.draw(st.sampled_from(VALID)))
    path, obj = data.draw(st.sampled_from(list(objects(body))))
    obj[key] = value
    error = refusal(body)
    param = f"{path}.{key}"
    assert (error.status, error.code, error.param) == (400, "unknown_parameter", param), error
    assert error.message == f"Unknown parameter: '{param}'."
    assert error.to_json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "path",
    [
        "messages[0].zzz",
        "tools[0].foo",
        "tools[0].function.foo",
        "response_format.foo",
        "response_format.json_schema.foo",
        "tool_choice.foo",
        "stream_options.bogus",
    ],
)
def test_the_reported_members_are_refused(path):
    body = {
        "messages": copy.deepcopy(USER),
        "tools": [copy.deepcopy(WEATHER)],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {}}},
        "stream": True,
        "stream_options": {},
    }
    *steps, last = path.replace("[0]", ".0").split(".")
    obj = body
    for step in steps:
        obj = obj[int(step)] if step.isdigit() else obj[step]
    obj[last] = 1
    error = refusal(body)
    assert (error.code, error.param, error.message) == (
        "unknown_parameter",
        path,
        f"Unknown parameter: '{path}'.",
    )


ASSISTANT = {"role": "assistant", "content": "Hello."}
NOT_HONOURED = [
    ({"messages": [{**USER[0], "name": "ada"}]}, "messages[0].name"),
    ({"messages": [{"role": "system", "content": "s", "name": "boss"}, *USER]}, "messages[0].name"),
    ({"messages": [*USER, {**ASSISTANT, "name": "bot"}, *USER]}, "messages[1].name"),
    ({"messages": [*USER, {**ASSISTANT, "refusal": "No."}, *USER]}, "messages[1].refusal"),
    ({"messages": [*USER, {**ASSISTANT, "audio": {"id": "a1"}}, *USER]}, "messages[1].audio"),
    (
        {"messages": [*USER, {**ASSISTANT, "function_call": {"name": "f", "arguments": "{}"}}]},
        "messages[1].function_call",
    ),
    (
        {
            "messages": USER,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "p", "schema": PERSON, "description": "A person."},
            },
        },
        "response_format.json_schema.description",
    ),
    (
        {"messages": USER, "stream": True, "stream_options": {"include_obfuscation": True}},
        "stream_options.include_obfuscation",
    ),
    (
        {"messages": USER, "structured_outputs": {"regex": "a+", "whitespace_pattern": " "}},
        "structured_outputs.whitespace_pattern",
    ),
]


@pytest.mark.parametrize(("body", "param"), NOT_HONOURED)
def test_members_openai_defines_that_corral_does_not_honour_are_refused_by_name(body, param):
    """Refused, never dropped (a message's `name` is not in the prompt: the templates do not
    show it); null counts as absent."""
    error = refusal(copy.deepcopy(body))
    assert (error.status, error.code, error.param) == (400, "unsupported_parameter", param)
    assert error.message.startswith(f"'{param}' is not supported: ")
    *steps, last = param.replace("[", ".").replace("]", "").split(".")
    nulled = copy.deepcopy(body)
    obj = nulled
    for step in steps:
        obj = obj[int(step)] if step.isdigit() else obj[step]
    obj[last] = None
    read(nulled)


def test_obfuscation_off_is_taken():
    read({"messages": USER, "stream": True, "stream_options": {"include_obfuscation": False}})


# --- max_completion_tokens named as the request names it ---------------------------------------


def batch(lines: list[dict]) -> dict:
    out = io.StringIO()
    texts = [json.dumps({"custom_id": str(i), "body": b}) for i, b in enumerate(lines)]
    run_batch(Completions(StandInModel(context=200)), texts, out, progress=False)
    items = [json.loads(text) for text in out.getvalue().splitlines()]
    return {int(item["custom_id"]): item["response"]["body"].get("error") for item in items}


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_a_batch_line_refused_for_its_limit_names_the_field_it_set(name):
    """Past the context, or below the shortest answer, a line's error names the field that set
    its limit, in `param` and in the message, and never the other one."""
    other = ({"max_tokens", "max_completion_tokens"} - {name}).pop()
    errors = batch(
        [
            {"messages": USER, name: 1_000_000},
            {"messages": USER, "response_format": {"type": "json_object"}, name: 1},
        ]
    )
    assert errors[0]["code"] == "context_length_exceeded"
    for error in errors.values():
        assert error["param"] == name, error
        assert name in error["message"] and other not in error["message"], error


@pytest.mark.parametrize("mode", ["auto", "required"])
def test_tool_choice_allowed_tools_is_refused_by_name(mode):
    # OpenAI's `allowed_tools` (a subset of the tools, with a mode) is not served: refused as
    # such, never read as another tool_choice nor answered as a generic bad value.
    allowed = {"mode": mode, "tools": [{"type": "function", "function": {"name": "get_weather"}}]}
    body = {
        "messages": copy.deepcopy(USER),
        "tools": [copy.deepcopy(WEATHER)],
        "tool_choice": {"type": "allowed_tools", "allowed_tools": allowed},
    }
    error = refusal(body)
    assert (error.status, error.code, error.param) == (
        400,
        "unsupported_parameter",
        "tool_choice.type",
    ), error
    assert "allowed_tools" in error.message

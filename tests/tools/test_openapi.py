"""/openapi.json describes what the server accepts: every field `corral.tools.request` honours or
accepts, and the request bodies it takes (custom tools, vLLM's `structured_outputs`) validate
against the document's request schema (OpenAPI 3.0's `nullable` read as a JSON Schema null)."""

import copy

import jsonschema
import pytest
from corral.tools.openapi import COMPLETION, MESSAGE_IN, REQUEST
from corral.tools.request import FIELDS, parse_tool_request


def validate(value, schema) -> None:
    """Validate against an OpenAPI 3.0 schema: JSON Schema draft 4 (OpenAPI 3.0's base, boolean
    `exclusiveMinimum`), `nullable: true` read as admitting null."""
    jsonschema.Draft4Validator(as_json_schema(schema)).validate(value)


def as_json_schema(schema):
    """An OpenAPI 3.0 schema as JSON Schema: `nullable: true` admits null."""
    if isinstance(schema, list):
        return [as_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: as_json_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable"):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def test_every_field_corral_takes_is_in_the_document():
    taken = {name for name, field in FIELDS.items() if field.use in ("honoured", "no_effect")}
    assert taken - set(REQUEST["properties"]) == set()
    assert set(REQUEST["properties"]) <= set(FIELDS)


LARK = 'start: "a"+'
CUSTOM_TOOLS = [
    {"type": "custom", "custom": {"name": "shout"}},
    {
        "type": "custom",
        "custom": {
            "name": "as_grammar",
            "description": "d",
            "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": LARK}},
        },
    },
    {
        "type": "custom",
        "custom": {
            "name": "as_regex",
            "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": "b+"}},
        },
    },
    {"type": "custom", "custom": {"name": "as_text", "format": {"type": "text"}}},
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
]
USER = [{"role": "user", "content": "hi"}]
ACCEPTED = [
    {"messages": USER, "tools": CUSTOM_TOOLS},
    {
        "messages": USER,
        "tools": CUSTOM_TOOLS,
        "tool_choice": {"type": "custom", "custom": {"name": "as_grammar"}},
    },
    {"messages": USER, "structured_outputs": {"regex": "a+"}},
    {"messages": USER, "structured_outputs": {"grammar": 'root ::= "a"', "regex": None}},
    {"messages": USER, "structured_outputs": {"choice": ["yes", "no"]}},
    {"messages": USER, "structured_outputs": {"json": {"type": "integer"}}},
    {"messages": USER, "structured_outputs": {"json": '{"type": "integer"}'}},
    {"messages": USER, "response_format": {"type": "json_object"}, "json_object_depth": 5},
    {"messages": USER, "logit_bias": {"17": -100}, "user": "u", "store": None, "metadata": {}},
    {
        "messages": [
            *USER,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "custom", "custom": {"name": "shout", "input": "A"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": CUSTOM_TOOLS,
    },
]


@pytest.mark.parametrize("body", ACCEPTED)
def test_a_body_corral_accepts_validates_against_the_document(body):
    parse_tool_request(copy.deepcopy(body))  # accepted: raises nothing
    validate(body, REQUEST)


def test_a_custom_tool_call_answer_validates_against_the_document():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "custom", "custom": {"name": "x", "input": "aa"}}],
    }
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls", "logprobs": None}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    validate(answer, COMPLETION)
    validate(message, MESSAGE_IN)

"""BFCL's function descriptions to JSON Schema (tools/bfcl.py)."""

import json

import pytest
from corral.automata import ConstrainError, SchemaError
from corral.tools import ToolError, bfcl_to_json_schema, bfcl_tools, parse_tool_request


def test_python_type_names_become_json_schema_ones():
    schema = {
        "type": "dict",
        "properties": {
            "coordinates": {"type": "tuple", "items": {"type": "float"}, "description": "lat, lon"},
            "value": {"type": "any"},
            "options": {
                "type": "dict",
                "properties": {"flag": {"type": "boolean", "default": True, "optional": True}},
            },
            "kind": {"type": "string", "enum": ["dict", "float"]},
        },
        "required": ["coordinates"],
    }
    assert bfcl_to_json_schema(schema) == {
        "type": "object",
        "properties": {
            "coordinates": {
                "type": "array",
                "items": {"type": "number"},
                "description": "lat, lon",
            },
            "value": {"type": "string"},
            "options": {
                "type": "object",
                "properties": {"flag": {"type": "boolean", "default": True}},
            },
            "kind": {"type": "string", "enum": ["dict", "float"]},  # values are never touched
        },
        "required": ["coordinates"],
    }
    assert list(bfcl_to_json_schema(schema)["properties"]) == [
        "coordinates",
        "value",
        "options",
        "kind",
    ]


def test_bfcl_tools_are_openai_tools():
    functions = [
        {"name": "math.hypot", "description": "d", "parameters": {"type": "dict", "properties": {}}}
    ]
    assert bfcl_tools(functions) == [
        {
            "type": "function",
            "function": {
                "name": "math.hypot",
                "description": "d",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


@pytest.mark.parametrize(
    "name",
    [
        "BFCL_v4_simple_python.jsonl",
        "BFCL_v4_multiple.jsonl",
        "BFCL_v4_parallel.jsonl",
        "BFCL_v4_parallel_multiple.jsonl",
        "BFCL_v4_live_simple.jsonl",
    ],
)
def test_every_bfcl_tool_is_accepted_or_refused_with_a_422_naming_a_keyword(data_set, name):
    """Over the sample's lines of each BFCL file and, when present, the full file's."""
    accepted = refused = 0
    with open(data_set.root / "bfcl" / name, encoding="utf-8") as lines:
        for line in lines:
            entry = json.loads(line)
            body = {
                "messages": [{"role": "user", "content": "x"}],
                "tools": bfcl_tools(entry["function"]),
            }
            try:
                parse_tool_request(body)
                accepted += 1
            except ToolError as error:
                assert error.status == 422, error
                assert error.param.startswith("tools[") and error.param.endswith(
                    "].function.parameters"
                )
                refused += 1
    assert accepted >= 8 and accepted > 0.9 * (accepted + refused)


def test_keywords_outside_the_subset_are_kept_so_they_are_refused():
    schema = {"type": "dict", "properties": {"fee": {"type": "integer", "maximum": 400}}}
    assert bfcl_to_json_schema(schema)["properties"]["fee"] == {"type": "integer", "maximum": 400}
    assert issubclass(SchemaError, ConstrainError)

"""BFCL's function descriptions as JSON Schema (used by the tests and the main job,
docs/design.md section 7).

The Berkeley Function Calling Leaderboard writes parameter types in Python's words: `dict`,
`float`, `tuple`, `any`. `bfcl_to_json_schema` renames them to JSON Schema's (`object`,
`number`, `array`, `string`: corral's subset has no "any JSON value", and BFCL's `any` arguments
are in practice strings) and drops BFCL's own `optional` flag (optional members are already the
ones missing from `required`). Everything else is kept as it is, in its order, so keywords the
subset refuses (`format`, `maximum`, ...) are still refused downstream, never silently dropped.
"""

from __future__ import annotations

TYPE_NAMES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "not")


def bfcl_to_json_schema(schema):
    """A copy of the BFCL parameter schema `schema` in JSON Schema's words (see the module
    docstring). Key order is kept; values of `enum`, `default`, `const` and `examples` are
    never touched. Non-dict input is returned as it is."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "optional":
            continue
        if key == "type":
            out[key] = (
                [TYPE_NAMES.get(t, t) for t in value]
                if isinstance(value, list)
                else TYPE_NAMES.get(value, value)
            )
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: bfcl_to_json_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [bfcl_to_json_schema(sub) for sub in value]
        elif key in _SCHEMA_VALUES:
            out[key] = bfcl_to_json_schema(value)
        else:
            out[key] = value
    return out


def bfcl_tools(functions: list[dict]) -> list[dict]:
    """BFCL's `function` list as OpenAI `tools` (parameters converted)."""
    tools = []
    for function in functions:
        converted = {key: value for key, value in function.items() if key != "parameters"}
        converted["parameters"] = bfcl_to_json_schema(function.get("parameters", {}))
        tools.append({"type": "function", "function": converted})
    return tools

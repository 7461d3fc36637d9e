"""Example JSON Schemas shared by more than one test module (docs/design.md section 3).

- `WEATHER`: an OpenAI tool definition (tests/tools, tests/kernels).
- `ALGEBRA_SCHEMAS`: schemas compiled by products of DFAs (also in `HAND_SCHEMAS`).
- `HAND_SCHEMAS`: hand-made schemas covering every supported keyword (the schema compiler's
  soundness tests, tests/automata; the constrained-output tests, tests/kernels).
"""

ALGEBRA_SCHEMAS = [
    # boolean algebra on DFAs (docs/algebra.md): not, oneOf, allOf, if/then/else, ...
    {"type": "string", "maxLength": 2, "not": {"enum": ["a", "b"]}},
    {"type": "integer", "oneOf": [{"minimum": 0}, {"maximum": 10}]},
    {"allOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]},
    {"type": "integer", "minimum": 0, "maximum": 20, "if": {"minimum": 10},
     "then": {"maximum": 12}, "else": {"maximum": 3}},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
     "dependentSchemas": {"a": {"required": ["b"]}}},
    {"type": "object", "properties": {"ab": {"type": "integer"}, "b": {"type": "integer"}},
     "propertyNames": {"maxLength": 1}},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
     "contains": {"minimum": 5}, "minContains": 2, "maxContains": 3, "maxItems": 5},
]  # fmt: skip

HAND_SCHEMAS = [
    {"type": "string"},
    {"type": "integer"},
    {"type": "number"},
    {"type": "boolean"},
    {"type": "null"},
    {"type": ["string", "null"]},
    {"enum": ["a", 2.5, None, True, {"k": [1, "x"]}, "é\n\"\\", -0.0, 1e16]},
    {"const": {"b": 1, "a": [1.5e-05, "\u2028"]}},
    {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
    {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": -5, "maximum": 1234},
            "name": {"type": "string", "minLength": 2, "maxLength": 5},
            "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "ok"],
        "additionalProperties": False,
    },
    {"anyOf": [{"type": "integer", "exclusiveMinimum": 10}, {"type": "string", "maxLength": 1}]},
    {"type": "number", "minimum": -3, "exclusiveMaximum": 7},
    {"type": "string", "pattern": "^[a-z]+[0-9]{2}$"},
    {"type": "string", "pattern": "ab|^c|d$"},
    {"type": "string", "pattern": "^\\S+$"},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "date"},
    {"type": "string", "format": "time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "format": "email"},
    {"type": "string", "format": "ipv4"},
    {"type": "string", "format": "uri"},
    {"type": "string", "format": "uri-reference"},
    {"type": "string", "format": "json-pointer"},
    {"type": "string", "pattern": "^[a-z]*$", "maxLength": 3, "minLength": 1},
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "definitions": {"pos": {"type": "integer", "minimum": 1}},
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/pos"}, "b": {"$ref": "#/definitions/pos"}},
        "required": ["a"],
    },
    {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    },
    {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"a": {"minimum": 0}, "b": {"type": "string"}}},
        ]
    },
    {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
             "required": ["kind", "r"]},
            {"type": "object", "properties": {"kind": {"const": "square"}, "s": {"type": "number"}},
             "required": ["kind", "s"]},
        ]
    },
    {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "anyOf": [{"required": ["a"]}, {"required": ["b"]}],
    },
    {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
    {"type": "array", "items": [{"type": "boolean"}], "additionalItems": {"type": "null"},
     "$schema": "http://json-schema.org/draft-04/schema#"},
    {"type": "integer", "format": "int32"},
    {"description": "anything", "title": "t", "default": 3, "examples": [1], "_format": "x"},
    {"type": "array"},
    {"type": "object", "properties": {"a": {"type": "integer"}},
     "patternProperties": {"^a$": {"minimum": 3}}, "minProperties": 0},
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "null"}},
     "dependentRequired": {"a": ["b"]}},
    {"type": "string", "enum": ["x", "yy", "zzz"], "maxLength": 2},
    {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"},
     "c": {"type": "null"}}, "minProperties": 1, "maxProperties": 2},
    {"type": "object", "properties": {"a": {"type": "null"}}, "minProperties": 2,
     "patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False},
    {"minProperties": 1, "additionalProperties": {"type": "boolean"}},
    {"type": "array", "items": {"enum": ["r", "g", "b", 0]}, "uniqueItems": True, "minItems": 1},
    True,
    *ALGEBRA_SCHEMAS,
]  # fmt: skip

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
"""An OpenAI tool with a string, an enum and an integer argument, one of them required."""

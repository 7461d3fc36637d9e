"""Keyword tables of the schema compiler (docs/design.md section 3: "Annotations are accepted and
change nothing ... Every other keyword is refused with an error naming it"), and the small
readers every lowering step shares: JSON pointers, refusals, counts.
"""

from __future__ import annotations

import math

from corral.automata.errors import SchemaError
from corral.automata.schema.values import is_int

TYPES = ("string", "integer", "number", "boolean", "null", "array", "object")
"""The JSON Schema type names, in the order an alternation of types lists them."""

ANNOTATIONS = frozenset(
    {
        "title", "description", "default", "examples", "$schema", "$id", "id", "$comment",
        "deprecated", "readOnly", "writeOnly", "definitions", "$defs", "$anchor",
        "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "contentEncoding",
        "contentMediaType", "contentSchema",
    }
)  # fmt: skip
"""Keys accepted and ignored (docs/design.md's annotations, plus containers and 2020-12
annotations)."""

ALL_KEYWORDS = frozenset(
    {
        # draft 3
        "type", "properties", "patternProperties", "additionalProperties", "items",
        "additionalItems", "required", "dependencies", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minItems", "maxItems", "uniqueItems", "pattern", "minLength",
        "maxLength", "enum", "default", "title", "description", "format", "divisibleBy",
        "disallow", "extends", "id", "$ref", "$schema",
        # draft 4
        "multipleOf", "maxProperties", "minProperties", "allOf", "anyOf", "oneOf", "not",
        "definitions",
        # draft 6 and 7
        "const", "contains", "propertyNames", "examples", "$id", "if", "then", "else",
        "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "$comment",
        # 2019-09 and 2020-12
        "$anchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary", "$defs",
        "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties",
        "maxContains", "minContains", "deprecated", "contentSchema", "prefixItems",
        "$dynamicRef", "$dynamicAnchor",
    }
)  # fmt: skip
"""Every keyword of the JSON Schema validation and core vocabularies, drafts 3 to 2020-12."""

SUPPORTED = frozenset(
    {
        "type", "enum", "const", "properties", "required", "additionalProperties", "items",
        "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", "anyOf",
        "oneOf", "allOf", "$ref", "minLength", "maxLength", "pattern", "format", "minimum",
        "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
        "maxProperties", "patternProperties", "dependentRequired", "dependencies",
        "not", "if", "then", "else", "dependentSchemas", "propertyNames", "contains",
        "minContains", "maxContains",
    }
)  # fmt: skip
"""Keywords the compiler handles (some only in the cases `corral.automata.schema` lists)."""

TYPE_OF_KEYWORD = {
    "minLength": "string", "maxLength": "string", "pattern": "string",
    "minimum": "number", "maximum": "number", "exclusiveMinimum": "number",
    "exclusiveMaximum": "number", "multipleOf": "number",
    "items": "array", "prefixItems": "array", "additionalItems": "array", "minItems": "array",
    "maxItems": "array", "uniqueItems": "array",
    "properties": "object", "required": "object", "additionalProperties": "object",
    "patternProperties": "object", "minProperties": "object", "maxProperties": "object",
    "dependentRequired": "object", "dependencies": "object", "propertyNames": "object",
    "contains": "array",
}  # fmt: skip
"""Keyword -> the type an untyped schema using it is read as (a sub-language)."""

LEGACY_DRAFTS = ("draft-03", "draft-04", "draft-06", "draft-07")
"""`$schema` URIs whose `$ref` siblings are ignored (as validators of those drafts do)."""


def is_constraint(key: str) -> bool:
    """True for a JSON Schema keyword that is not an annotation."""
    return key in ALL_KEYWORDS and key not in ANNOTATIONS


def check_keywords(schema: dict, pointer: str) -> None:
    """Raise `SchemaError` naming the first keyword of `schema` that is neither supported nor an
    annotation (keys of no JSON Schema draft are annotations: validators ignore them)."""
    for key in schema:
        if key in ANNOTATIONS or key not in ALL_KEYWORDS or key in SUPPORTED:
            continue
        raise unsupported(pointer, key)


def child(pointer: str, *keys) -> str:
    """The JSON pointer (RFC 6901) `pointer` extended by `keys` (names or indexes)."""
    for key in keys:
        pointer = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
    return pointer


def unsupported(pointer: str, keyword: str, detail: str = "") -> SchemaError:
    """The `SchemaError` of a keyword outside the subset: "keyword 'K' is not supported"."""
    reason = f"keyword {keyword!r} is not supported"
    return SchemaError(pointer, keyword, reason + (f": {detail}" if detail else ""))


def written(value) -> str:
    """A schema's number as its user wrote it, for an error message: a float as Python writes it
    (`1e+308`, not its 309 digits), an integer of more than 20 digits in a short form
    (`about 10**400`; Python refuses to write an integer of more than 4,300 digits)."""
    if is_int(value) and abs(value).bit_length() > 66:
        sign = "-" if value < 0 else ""
        return f"{sign}about 10**{int(math.log10(abs(value)))}"
    return repr(value)


def count(schema: dict, key: str, pointer: str) -> int | None:
    """The non-negative integer value of `schema[key]` (an integral float is accepted), None
    when absent. Raises SchemaError naming `key` otherwise."""
    if key not in schema:
        return None
    value = schema[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not is_int(value) or value < 0:
        raise SchemaError(pointer, key, f"{key} must be a non-negative integer")
    return value

"""JSON values as the schema compiler writes and compares them (DESIGN.md section 3: "Values
written by the schema (enum, const) are Python's `json.dumps(v, separators=(",", ":"),
ensure_ascii=False)`").
"""

from __future__ import annotations

import json

from corral.automata.errors import NonFiniteNumberError


def dumps(value) -> str:
    """Compact JSON text of `value`: `json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)` (keys in insertion order, non-ASCII raw, floats as Python's repr).

    Raises:
        NonFiniteNumberError: `value` contains NaN or an infinity.
    """
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError as error:
        raise NonFiniteNumberError(f"NaN and infinities are not JSON: {error}") from None


def json_key(value):
    """A hashable key under which JSON values are equal as JSON Schema compares them
    (1 == 1.0, true != 1, objects unordered). Raises TypeError on a non-JSON value."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(json_key(v) for v in value))
    if isinstance(value, dict):
        return ("object", frozenset((k, json_key(v)) for k, v in value.items()))
    raise TypeError(f"not a JSON value: {value!r}")


def json_type(value) -> str:
    """The JSON Schema type name of a Python JSON value ("integer" only for Python ints)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def is_int(value) -> bool:
    """True for a Python int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    """True for a Python int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)

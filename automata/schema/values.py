"""JSON values as the schema compiler writes and compares them (docs/design.md section 3: "Values
written by the schema (enum, const) are Python's `json.dumps(v, separators=(",", ":"),
ensure_ascii=False)`").
"""

from __future__ import annotations

import json

from corral.automata.errors import NonFiniteNumberError, SchemaError

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
"""The encoder `json.dumps` would make for `dumps`'s arguments, made once."""


def dumps(value) -> str:
    """Compact JSON text of `value`: `json.dumps(value, separators=(",", ":"),
    ensure_ascii=False)` (keys in insertion order, non-ASCII raw, floats as Python's repr),
    except that a float holding an integer is written as that integer (`2.0` as `2`, `-0.0` as
    `0`, `1e16` as `10000000000000000`): JSON Schema compares numbers by value, and `2.0` is
    an integer. O(size of the value); a value with such floats is written twice.

    Raises:
        NonFiniteNumberError: `value` contains NaN or an infinity.
    """
    try:
        text = _ENCODER.encode(value)
    except ValueError as error:
        raise NonFiniteNumberError(f"NaN and infinities are not JSON: {error}") from None
    if _holds_integral_float(value):
        text = _ENCODER.encode(json.loads(text, parse_float=_number_by_value))
    return text


def _number_by_value(text: str):
    """A JSON number with a fraction or an exponent, as an int when its float is integral."""
    number = float(text)
    return int(number) if number.is_integer() else number


def _holds_integral_float(value) -> bool:
    """True when `value` is or contains a float that holds an integer (no recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if item.is_integer():
                return True
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return False


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
    """The JSON Schema type name of a Python JSON value, by value: "integer" for an int and for
    a float that holds an integer (`2.0`, as JSON Schema from draft 6 on), "number" for other
    floats."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
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


MAX_NESTING = 512
"""The deepest nesting of arrays and objects a schema document may have (`check_document`):
deeper documents are refused before anything recurses through them."""


def printable(text: str) -> str:
    """`text` with every character that is not UTF-8 text (a lone surrogate) written as a
    backslash escape (`\\ud800`), so that it can go into an error message."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def is_text(text: str) -> bool:
    """True when `text` is UTF-8 text (no lone surrogate such as `"\\ud800"`)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_document(schema, max_nesting: int = MAX_NESTING) -> None:
    """Check, without recursion, what the compiler takes for granted of a parsed schema: every
    string and member name is UTF-8 text (a lone surrogate such as `"\\ud800"` is not), and
    arrays and objects are nested at most `max_nesting` levels. O(size of the document); the
    JSON pointer of a value is written out only for an error (a path is kept as nested
    `(parent path, member name or index)` pairs).

    Raises:
        SchemaError: naming the JSON pointer of the culprit (escaped with `printable`).
    """
    stack = [(schema, None, 0)]
    while stack:
        value, path, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and not is_text(value):
                raise SchemaError(
                    _pointer(path), None, "a string with a lone surrogate is not text"
                )
            continue
        if not isinstance(value, (dict, list)):
            continue
        if depth >= max_nesting:
            raise SchemaError(_pointer(path), None, f"nested deeper than {max_nesting} levels")
        if isinstance(value, list):
            stack.extend((item, (path, i), depth + 1) for i, item in enumerate(value))
            continue
        for key, item in value.items():
            name = str(key)
            if not name.isascii() and not is_text(name):
                raise SchemaError(
                    _pointer((path, name)), None, "a member name with a lone surrogate is not text"
                )
            stack.append((item, (path, name), depth + 1))


def _pointer(path) -> str:
    """The JSON pointer of a `check_document` path (member names escaped, `printable`)."""
    parts = []
    while path is not None:
        path, step = path
        parts.append(step if isinstance(step, int) else printable(_escape_pointer(step)))
    return "".join(f"/{part}" for part in reversed(parts))


def _escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")

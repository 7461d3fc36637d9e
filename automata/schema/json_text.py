"""The languages of compact JSON text that need no schema (docs/design.md section 3): the scalars,
any JSON value with containers nested at most some depth, and any JSON object
(`json_object_regex`, for `response_format: {"type": "json_object"}`).

The regex texts are in docs/design.md section 2's subset and mean the same to Python's `re`.
"""

from __future__ import annotations

from corral.automata.limits import DEFAULT_SCHEMA_LIMITS
from corral.automata.schema.form import (
    Lit,
    Regex,
    TreeBuilder,
    choice,
    pin_fragment,
    repeat,
    seq,
)
from corral.automata.schema.text import TextRenderer
from corral.automata.tree import Node

_HEX = "[0-9a-fA-F]"
UNICODE_ESCAPE = (
    rf"\\u(?:[0-9a-cA-Ce-fE-F]{_HEX}{{3}}|[dD][0-7]{_HEX}{{2}}"
    rf"|[dD][89abAB]{_HEX}{{2}}\\u[dD][c-fC-F]{_HEX}{{2}})"
)
"""A `\\u` escape of a scalar value: 4 hex digits outside U+D800..U+DFFF, or a high surrogate
followed by a low one (a pair, one character). A lone surrogate is never written: it decodes to
text that has no UTF-8 form."""
STRING_CHAR = r'[^"\\\x00-\x1f]|\\["\\/bfnrt]|' + UNICODE_ESCAPE
"""One character of a JSON string: raw (>= U+0020, not `"` or `\\`), a short escape or a
`\\u` escape (`UNICODE_ESCAPE`)."""
STRING = r'"(?:' + STRING_CHAR + r')*"'
MAX_DIGITS = 17
"""Most digits of an unbounded number's mantissa (integer and fraction parts together): 17
significant digits tell any two doubles apart."""
MAX_EXPONENT = 289
"""Largest magnitude of an unbounded number's exponent: with `MAX_DIGITS` digits, any such
number lies below 10**306 and any non-zero one above 10**-306, a finite normal double."""


def _mantissa() -> str:
    """Regex text of `-?I(.F)?` with at most `MAX_DIGITS` digits in I and F together."""
    parts = [rf"0(?:\.[0-9]{{1,{MAX_DIGITS - 1}}})?"]
    for k in range(1, MAX_DIGITS + 1):
        head = "[1-9]" + (f"[0-9]{{{k - 1}}}" if k > 1 else "")
        parts.append(head + (rf"(?:\.[0-9]{{1,{MAX_DIGITS - k}}})?" if k < MAX_DIGITS else ""))
    return "-?(?:" + "|".join(parts) + ")"


INTEGER = r"-?(?:0|[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
"""JSON's grammars of integers and numbers, whole: the any-value language's numbers."""
SHORT_NUMBER = _mantissa() + r"(?:[eE][+-]?(?:[0-9]{1,2}|1[0-9]{2}|2[0-8][0-9]))?"
"""A number a reader holds as a finite double, spelt with at most `MAX_DIGITS` digits before
an optional exponent of magnitude at most `MAX_EXPONENT`: a number schema without bounds (a
documented narrowing: the schema does not ask for more, and a small model left free writes
digits until its budget ends)."""
BOOLEAN = r"true|false"

STRING_FORM = Regex(STRING, 2)
INTEGER_FORM = Regex(INTEGER, 2)
NUMBER_FORM = Regex(NUMBER, 2)
SHORT_NUMBER_FORM = Regex(SHORT_NUMBER, 2)
BOOLEAN_FORM = Regex(BOOLEAN, 1)
NULL_FORM = Lit("null")
QUOTE = Lit('"')

for _form in (
    STRING_FORM,
    INTEGER_FORM,
    NUMBER_FORM,
    SHORT_NUMBER_FORM,
    BOOLEAN_FORM,
):
    pin_fragment(_form.text)  # parsed once per process, instances copied (`form.pin_fragment`)


def any_value(depth: int, cache: dict, number=NUMBER_FORM):
    """The form of any JSON value with containers nested at most `depth` levels, its numbers
    those of the form `number`; `cache` (depth -> form) shares the inner levels between calls
    of one compile (one `number` per cache)."""
    if depth in cache:
        return cache[depth]
    scalars = [STRING_FORM, number, Lit("true"), Lit("false"), NULL_FORM]
    if depth == 0:
        out = choice(scalars)
    else:
        inner = any_value(depth - 1, cache, number)
        out = choice([*scalars, _object_of(inner), _array_of(inner)])
    cache[depth] = out
    return out


def _object_of(value):
    """`{}` or `{"k":V,...}` with members in any order, V given by the form `value`."""
    member = seq(STRING_FORM, Lit(":"), value)
    return seq(
        Lit("{"), repeat(seq(member, repeat(seq(Lit(","), member), 0, None)), 0, 1), Lit("}")
    )


def _array_of(item):
    return seq(Lit("["), repeat(seq(item, repeat(seq(Lit(","), item), 0, None)), 0, 1), Lit("]"))


def json_object_form(depth: int):
    """The form of any JSON object whose containers (itself included) nest at most `depth`
    levels, `depth` >= 1; its numbers finite doubles of at most 17 digits (`SHORT_NUMBER`, as
    an unbounded `number` schema's), never `1e400` or the 150 digits a small model writes."""
    return _object_of(any_value(depth - 1, {}, SHORT_NUMBER_FORM))


def json_object_regex(depth: int) -> str:
    """Regex text of any compact JSON object whose containers (objects and arrays, the outer
    object included) nest at most `depth` levels; members in any order (docs/design.md section 3;
    depth 3 for `response_format: {"type": "json_object"}`). `depth` >= 1, else ValueError."""
    if depth < 1:
        raise ValueError("json_object_regex needs depth >= 1")
    return TextRenderer(DEFAULT_SCHEMA_LIMITS.max_regex_length).render(json_object_form(depth))


def json_object_tree(depth: int) -> Node:
    """The regex tree of `json_object_regex(depth)` (shared subtrees, built without text).
    `depth` >= 1, else ValueError."""
    if depth < 1:
        raise ValueError("json_object_tree needs depth >= 1")
    return TreeBuilder(None).build(json_object_form(depth))

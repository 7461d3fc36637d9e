"""Whatever a request body holds, reading it raises only `ToolError`, and compiling its grammar
raises only `ToolError` (docs/design.md section 5, "Errors"; section 7: a bad line gets its own
error line). Random JSON in every field, random schemas with extreme numbers, deep nesting,
unusual strings and member names (lone surrogates among them), in dicts and in JSON text."""

import contextlib
import json

import pytest
from corral.tools import ToolError, compile_dfa, parse_tool_request, schema_grammar
from corral.tools.grammar import grammar
from corral.tools.request import FIELDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

UNUSUAL = ["", "\ud800", "a\udfffb", "\x00", "\u2028", "é", "🙂", "~/", "$ref", "#", "\\", '"']
EXTREME = [
    0, -1, 1, 2**53 + 1, 10**20, -(10**20), 10**400, -(10**400), 2**1024, 1e308, -1e308,
    5e-324, 1.5, float("nan"), float("inf"), float("-inf"), True, False, None,
]  # fmt: skip

strings = st.one_of(st.text(max_size=6), st.sampled_from(UNUSUAL))
numbers = st.one_of(st.integers(), st.floats(), st.sampled_from(EXTREME))
# what passes `check_values`: finite, within a double's range, no lone surrogate
clean_strings = st.one_of(st.text(max_size=6), st.sampled_from(UNUSUAL[4:]))
clean_numbers = st.one_of(
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 2**53 + 1, 10**20, -(10**20), 10**300, -(10**300), 1e308, -1e308]),
    st.sampled_from([5e-324, 1.5, True, False, None]),
)


def json_values(strings, numbers):
    return st.recursive(
        st.one_of(strings, numbers),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)
        ),
        max_leaves=8,
    )


values = json_values(strings, numbers)


@st.composite
def deep(draw, inner=values):
    """`inner` wrapped in many levels of arrays or single-member objects."""
    value = draw(inner)
    key = draw(strings)
    as_object = draw(st.booleans())
    for _ in range(draw(st.sampled_from([3, 60, 254, 255, 256, 400, 1500]))):
        value = {key: value} if as_object else [value]
    return value


KEYWORDS = [
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "enum",
    "const", "minLength", "maxLength", "pattern", "format", "minItems", "maxItems", "items",
    "prefixItems", "required", "additionalProperties", "minProperties", "maxProperties",
]  # fmt: skip
TYPES = ["integer", "number", "string", "boolean", "null", "array", "object"]


def schemas(strings=strings, numbers=numbers) -> st.SearchStrategy:
    """Schemas built from the subset's keywords with extreme or random values, nested through
    properties, items and anyOf."""
    values = json_values(strings, numbers)
    leaf = st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(TYPES), st.lists(st.sampled_from(TYPES), max_size=3))},
        optional={
            key: st.one_of(numbers, strings, values, st.sampled_from(TYPES)) for key in KEYWORDS
        },
    )
    bounded = st.fixed_dictionaries(
        {"type": st.sampled_from(["integer", "number"])},
        optional={key: numbers for key in KEYWORDS[:5]},
    )
    named = st.fixed_dictionaries(
        {"type": st.just("object"), "properties": st.dictionaries(strings, bounded, max_size=2)},
        optional={"required": st.lists(strings, max_size=2)},
    )
    listed = st.fixed_dictionaries({"enum": st.lists(st.one_of(strings, numbers), min_size=1)})
    return st.recursive(
        st.one_of(leaf, bounded, named, listed, st.booleans(), values),
        lambda inner: st.one_of(
            st.fixed_dictionaries(
                {"type": st.just("object"), "properties": st.dictionaries(strings, inner, max_size=3)},  # noqa: E501
                optional={"required": st.lists(strings, max_size=3)},
            ),
            st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
            st.fixed_dictionaries({"anyOf": st.lists(inner, min_size=1, max_size=3)}),
            st.fixed_dictionaries({"$ref": st.sampled_from(["#", "#/$defs/a", "#/x"])}),
            deep(inner),
        ),
        max_leaves=6,
    )  # fmt: skip


def tool(parameters):
    return {"type": "function", "function": {"name": "f", "parameters": parameters}}


@st.composite
def bodies(draw, clean=False) -> dict:
    """A valid request, then some of its fields (and made-up ones) replaced by random JSON, a
    random schema in a tool or the response_format, and random messages. `clean`: only the
    schema is random, with values that pass `check_values`, so that the grammar is compiled."""
    body = {"messages": [{"role": "user", "content": "hi"}]}
    schema = draw(schemas(clean_strings, clean_numbers) if clean else schemas())
    place = draw(st.sampled_from(["tool", "required", "named", "format", "none"]))
    if place == "tool":
        body["tools"] = [tool(schema)]
    elif place == "required":
        body.update(tools=[tool(schema)], tool_choice="required")
    elif place == "named":
        body.update(
            tools=[tool(schema)], tool_choice={"type": "function", "function": {"name": "f"}}
        )
    elif place == "format":
        spec = {"name": "x", "schema": schema}
        body["response_format"] = {"type": "json_schema", "json_schema": spec}
    if clean:
        return body
    names = st.one_of(st.sampled_from(sorted(FIELDS)), strings)
    for name in draw(st.lists(names, max_size=3)):
        body[name] = draw(st.one_of(values, deep(), schemas()))
    if draw(st.booleans()) and isinstance(body.get("messages"), list):  # not replaced above
        message = draw(st.dictionaries(st.sampled_from(["role", "content", "tool_calls"]), values))
        body["messages"] = [message, *body["messages"]]
    return body  # fmt: skip


def assert_writable(error: ToolError) -> None:
    """The error line can be written as UTF-8 JSON."""
    json.dumps(error.to_json(), ensure_ascii=False, allow_nan=False).encode("utf-8")


@SETTINGS
@given(bodies(), st.booleans())
def test_reading_any_body_raises_only_tool_error(body, as_text):
    if as_text:
        # NaN, Infinity, huge ints and \ud800 escapes in the text; a body nested too deep for
        # Python to write as text is read as the dict
        with contextlib.suppress(RecursionError):
            body = json.dumps(body)
    try:
        parse_tool_request(body, 49152)
    except ToolError as error:
        assert_writable(error)


@settings(SETTINGS, max_examples=80)
@given(bodies(clean=True))
def test_compiling_the_grammar_of_any_accepted_body_raises_only_tool_error(body):
    try:
        found = grammar(parse_tool_request(body))
        if found is not None:
            compile_dfa(found)
    except ToolError as error:
        assert_writable(error)


@settings(SETTINGS, max_examples=80)
@given(schemas())
def test_compiling_any_schema_raises_only_tool_error(schema):
    """The quick form (`corral generate --schema`) compiles a schema that no request check has
    seen: lone surrogates, huge integers, NaN and deep nesting must still be 422s."""
    try:
        compile_dfa(schema_grammar(schema))
    except ToolError as error:
        assert error.status == 422
        assert_writable(error)

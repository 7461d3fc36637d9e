"""Reading a request costs work linear in its body, and a tool list past `MAX_TOOLS` is refused
before anything is built (issue 33, item 5: one 1.6 MB body of 30,000 tools froze a server for
23 s, since duplicate names were found by a scan of the tools before each one).

Work is counted as the bytecode instructions Python executes (`sys.settrace` opcode events):
deterministic, no clock."""

from __future__ import annotations

import gc
import sys

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.render import render_messages
from corral.tools.request import MAX_NESTING, MAX_TOOLS
from hypothesis import given, settings
from hypothesis import strategies as st

ASK = [{"role": "user", "content": "hi"}]


def opcodes(function, *args) -> int:
    """The bytecode instructions Python executes in `function(*args)` (a ToolError counts as
    an answer). The garbage collector is off meanwhile: the finalizers of other tests' garbage
    would run, and count, at whichever allocation set it off."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    gc.collect()
    gc.disable()
    sys.settrace(trace)
    try:
        function(*args)
    except ToolError:
        pass
    finally:
        sys.settrace(None)
        gc.enable()
    return count


def read(body: dict) -> None:
    """What the server does with a body before the engine: validate it, render its turns."""
    request = parse_tool_request(body)
    render_messages(list(request.messages), request.tools)


def tool(name: str, word: str) -> dict:
    parameters = {"type": "object", "properties": {word: {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def call(i: int) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}


# each kind: a body of size n (n <= 128, MAX_TOOLS, so that every body is read whole)
KINDS = {
    "tools": lambda n, w: {"messages": ASK, "tools": [tool(f"{w}{i}", w) for i in range(n)]},
    "tool answers": lambda n, w: {
        "messages": [
            *ASK,
            {"role": "assistant", "tool_calls": [call(i) for i in range(n)]},
            *({"role": "tool", "tool_call_id": f"c{i}", "content": w} for i in range(n)),
        ]
    },
    "turns": lambda n, w: {
        "messages": [{"role": ("user", "assistant")[i % 2], "content": w} for i in range(n)]
    },
    "content parts": lambda n, w: {
        "messages": [{"role": "user", "content": [{"type": "text", "text": w}] * n}]
    },
    "properties": lambda n, w: {
        "messages": ASK,
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "x",
                "schema": {"properties": {f"{w}{i}": {"type": "string"} for i in range(n)}},
            },
        },
    },
    "nesting": lambda n, w: {
        "messages": ASK,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "f",
                    "parameters": {"type": "object", "default": _nested(n, w)},
                },
            }
        ],
    },
    "logit_bias": lambda n, w: {"messages": ASK, "logit_bias": {str(i): 1 for i in range(n)}},
}


def _nested(depth: int, key: str):
    value: object = key
    for _ in range(depth):
        value = {key: value}
    return value


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(sorted(KINDS)),
    st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12),
    st.integers(4, 16),
)
def test_reading_a_body_costs_work_linear_in_its_size(kind, word, n):
    """The work of n more elements is the same at the end of a body of 8n as after the first
    n: a step quadratic in the elements makes the later ones cost more (1.3 to 3 times as much
    for tools and tool answers on the old code)."""

    def work(size: int) -> int:
        return opcodes(read, KINDS[kind](size, word))

    early, late = work(2 * n) - work(n), work(8 * n) - work(7 * n)
    assert late <= 1.05 * early, (kind, early, late)


def test_the_kinds_are_read_whole():
    for build in KINDS.values():
        read(build(128, "w"))  # no error: each body is valid, so every part of it was read
    assert MAX_TOOLS >= 8 * 16 and MAX_NESTING > 8 * 16


@given(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f", "g"]), min_size=1, max_size=12))
def test_the_first_duplicate_tool_name_is_named(names):
    body = {"messages": ASK, "tools": [tool(name, "x") for name in names]}
    first = next((i for i in range(len(names)) if names[i] in names[:i]), None)
    if first is None:
        assert [t.name for t in parse_tool_request(body).tools] == names
        return
    with pytest.raises(ToolError) as refused:
        parse_tool_request(body)
    assert refused.value.param == f"tools[{first}].function.name"
    assert f"Duplicate tool name '{names[first]}'" in refused.value.message


@given(st.integers(MAX_TOOLS + 1, 40_000))
@settings(max_examples=10, deadline=None)
def test_more_tools_than_the_limit_are_refused_before_any_is_read(n):
    """Tools that are not even objects: past the limit, the count is refused before any tool
    is looked at (the malformed first tool would be the error otherwise)."""
    with pytest.raises(ToolError) as error:
        parse_tool_request({"messages": ASK, "tools": [5] * n})
    assert (error.value.status, error.value.param, error.value.code) == (
        400,
        "tools",
        "array_above_max_length",
    )
    assert f"{n} tools" in error.value.message and str(MAX_TOOLS) in error.value.message


def test_the_limit_itself_is_allowed():
    body = {"messages": ASK, "tools": [tool(f"f{i}", "x") for i in range(MAX_TOOLS)]}
    assert len(parse_tool_request(body).tools) == MAX_TOOLS

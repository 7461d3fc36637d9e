"""A JSON Schema refused for `Limits.max_nfa_states` names, as the other schema errors do, the
JSON pointer of the part that blew up: the deepest subschema that alone passes the limit
(oracle: each subschema compiled on its own, its NFA built with the same limits)."""

from __future__ import annotations

import contextlib

import pytest
from corral.automata import Limits, schema_to_dfa, schema_to_tree
from corral.automata.errors import ConstrainError, TooManyNfaStatesError
from corral.automata.nfa import tree_to_nfa
from hypothesis import given, settings
from hypothesis import strategies as st

LIMITS = Limits(max_nfa_states=2_000)
LEAVES = st.sampled_from(
    [
        {"type": "integer"},
        {"type": "boolean"},
        {"type": "string", "maxLength": 8},
        {"type": "string", "maxLength": 40},
        {"type": "string", "maxLength": 60},
        {"enum": ["red", "green", "blue"]},
    ]
)
SCHEMAS = st.recursive(
    LEAVES,
    lambda inner: (
        st.dictionaries(st.sampled_from("abcdefgh"), inner, min_size=1, max_size=5).map(
            lambda props: {"type": "object", "properties": props, "required": sorted(props)}
        )
        | st.builds(lambda item: {"type": "array", "items": item, "maxItems": 3}, inner)
    ),
    max_leaves=12,
)


def passes_alone(schema) -> bool:
    """Whether the NFA of `schema` compiled on its own, at the bounds asked for (no narrowed
    retry: the error raised is the first attempt's), passes the limit."""
    try:
        tree_to_nfa(schema_to_tree(schema), LIMITS)
    except TooManyNfaStatesError:
        return True
    return False


def children(schema: dict, pointer: str) -> list[tuple[dict, str]]:
    if "properties" in schema:
        return [(s, f"{pointer}/properties/{k}") for k, s in schema["properties"].items()]
    if "items" in schema:
        return [(schema["items"], f"{pointer}/items")]
    return []


def blamed(schema: dict, pointer: str = "") -> str:
    """The oracle: the deepest subschema that passes alone, none of whose children does."""
    for child, at in children(schema, pointer):
        if passes_alone(child):
            return blamed(child, at)
    return pointer


@settings(max_examples=60, deadline=None)
@given(SCHEMAS)
def test_the_nfa_limit_names_the_deepest_subschema_past_it(schema):
    try:
        schema_to_dfa(schema, limits=LIMITS)
    except TooManyNfaStatesError as error:
        expected = blamed(schema)
        assert error.pointer == expected, (error.pointer, expected, schema)
        assert str(error).startswith(f"{expected or '/'}: "), str(error)
        assert "max_nfa_states=2000" in str(error)
    except ConstrainError:
        pass  # another limit (DFA states, subset work): not this test's


def test_the_reported_case_names_the_array():
    """A large array of long strings beside a small member: the array, not the document."""
    schema = {
        "type": "object",
        "properties": {
            "x": {"type": "integer"},
            "a": {"type": "array", "items": {"type": "string", "maxLength": 256}, "minItems": 60},
        },
    }
    try:
        schema_to_dfa(schema)
    except TooManyNfaStatesError as error:
        assert error.pointer == "/properties/a"
        assert str(error).startswith("/properties/a: ")
    else:
        raise AssertionError("the schema compiled")


@pytest.mark.parametrize(
    ("max_length", "pattern"),
    [(196, "a"), (200, "ab"), (300, "a."), (200, ".*"), (400, ".*a.{5}"), (600, "a.{10}")],
)
def test_a_limit_tripped_on_the_way_to_a_narrower_retry_is_named_or_retried_never_a_crash(
    max_length, pattern
):
    """Naming the part at fault builds parts' NFAs as deep as the compile does: it runs under
    the compile's recursion limit (a long string with an unanchored pattern, whose first attempt
    passes the NFA limit before the narrower retry that fits, raised RecursionError there).
    Not a hypothesis test: hypothesis raises Python's recursion limit, which hid the fault."""
    schema = {"type": "string", "maxLength": max_length, "pattern": pattern}
    with contextlib.suppress(ConstrainError):
        schema_to_dfa(schema)

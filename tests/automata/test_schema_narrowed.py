"""Narrowed compiles: a schema past a state limit at every `$ref` unrolling depth is compiled again
with lower `max_string_length` and `max_array_length` (`corral.automata.limits.NARROWER_BOUNDS`)
before it is refused, and said to be narrowed. The language stays a subset of the schema's
(every sampled string validates with `jsonschema`, an independent oracle)."""

import json
from unittest import mock

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    ConstrainError,
    Limits,
    SchemaLimits,
    SubsetWorkError,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
    compile_schema_dfa,
    schema_to_dfa,
)
from corral.automata.schema import compiler
from corral.automata.schema.compiler import narrower_limits
from corral.tools.cli import main
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

STATE_LIMITS = (TooManyDfaStatesError, TooManyNfaStatesError, SubsetWorkError)
SMALL = Limits(max_dfa_states=1_000, max_nfa_states=8_000)
"""Limits a few long members pass, so each example compiles in a fraction of a second."""


def long_strings(members: int, most: int) -> dict:
    """An object of `members` required strings of at most `most` characters (Snowplow's shape)."""
    names = [f"m{i}" for i in range(members)]
    strings = {"type": "string", "maxLength": most}
    return {
        "type": "object",
        "properties": dict.fromkeys(names, strings),
        "required": names,
        "additionalProperties": False,
    }


def test_the_ladder_only_lowers_bounds():
    assert [(s.max_string_length, s.max_array_length) for s in narrower_limits(SchemaLimits())] == [
        (64, 16),
        (16, 4),
    ]
    low = SchemaLimits(max_string_length=10, max_array_length=100, max_recursion=2)
    assert [(s.max_string_length, s.max_array_length) for s in narrower_limits(low)] == [
        (10, 16),
        (10, 4),
    ]
    assert all(s.max_recursion == 2 for s in narrower_limits(low))
    assert narrower_limits(SchemaLimits(max_string_length=4, max_array_length=2)) == []


def test_a_schema_of_long_strings_past_the_dfa_limit_compiles_narrowed():
    """20 strings of at most 1,000 characters (256 at the default bound): about 66,000 DFA states
    at the default bounds, refused before; at 64 characters they fit."""
    schema = long_strings(20, 1000)
    with mock.patch.object(compiler, "NARROWER_BOUNDS", ()), pytest.raises(STATE_LIMITS):
        schema_to_dfa(schema)  # the exact compile passes the state limit
    compiled = compile_schema_dfa(schema)
    assert compiled.narrowed and not compiled.exact
    assert compiled.schema_limits == SchemaLimits(max_string_length=64, max_array_length=16)
    rng = np.random.default_rng(0)
    for _ in range(50):
        value = json.loads(compiled.result.sample(rng))
        jsonschema.validate(value, schema)
        assert all(len(v) <= 64 for v in value.values())
    assert compile_schema_dfa(long_strings(2, 1000)).exact


def test_corral_compile_says_exact_or_narrowed(tmp_path, capsys):
    narrowed, exact = tmp_path / "narrowed.json", tmp_path / "exact.json"
    narrowed.write_text(json.dumps(long_strings(20, 1000)))
    exact.write_text(json.dumps(long_strings(2, 10)))
    assert main(["compile", "--schema", str(narrowed), "--samples", "0"]) == 0
    out = capsys.readouterr().out
    assert "schema: narrowed (max_string_length=64, max_array_length=16, max_recursion=3)" in out
    assert main(["compile", "--schema", str(exact), "--samples", "0"]) == 0
    assert "schema: exact (max_string_length=256, max_array_length=64" in capsys.readouterr().out
    assert main(["compile", "--schema", str(narrowed), "--samples", "0", "--json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["exact"] is False and facts["max_string_length"] == 64


def member_schemas():
    """Member schemas whose length bounds cost states: long strings (some with a pattern, a
    length product), arrays of many items, and `oneOf`/`not` over string lengths (the algebra
    must not subtract a narrowed branch)."""
    lengths = st.integers(60, 400)
    short = st.integers(0, 3)
    strings = st.builds(
        lambda most, least, pattern: (
            {"type": "string", "maxLength": most, "minLength": least}
            | ({"pattern": "^[a-c]*$"} if pattern else {})
        ),
        lengths,
        short,
        st.booleans(),
    )
    items = st.sampled_from(
        [{"type": "integer"}, {"type": "boolean"}, {"type": "string", "maxLength": 8}]
    )
    arrays = st.builds(
        lambda most, least, item: {
            "type": "array",
            "items": item,
            "maxItems": most,
            "minItems": least,
        },
        st.integers(10, 100),
        short,
        items,
    )
    one_of = st.builds(
        lambda a, b: {
            "type": "string",
            "oneOf": [{"maxLength": a}, {"minLength": 2, "maxLength": b}],
        },
        st.integers(60, 256),
        st.integers(60, 256),
    )
    negated = st.builds(
        lambda a: {"type": "string", "maxLength": 300, "not": {"maxLength": a}}, st.integers(1, 3)
    )
    return st.one_of(strings, arrays, one_of, negated)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=st.lists(member_schemas(), min_size=1, max_size=5),
    required=st.lists(st.booleans(), min_size=5, max_size=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_narrowed_compile_is_a_subset_of_the_schema_and_said_so(members, required, seed):
    """Differential: compiled without the ladder (the old compiler) the schema either fits, and
    then the compile is exact with the same DFA, or passes a state limit, and then it is
    narrowed or refused with that first error; a narrowed DFA's samples validate against the
    schema."""
    names = [f"k{i}" for i in range(len(members))]
    schema = {
        "type": "object",
        "properties": dict(zip(names, members, strict=True)),
        "required": [n for n, r in zip(names, required, strict=False) if r],
        "additionalProperties": False,
    }
    try:
        with mock.patch.object(compiler, "NARROWER_BOUNDS", ()):
            plain = compile_schema_dfa(schema, SMALL)
    except STATE_LIMITS as error:
        plain = error
    except ConstrainError:
        return  # refused otherwise at the bounds asked for: nothing to narrow
    try:
        compiled = compile_schema_dfa(schema, SMALL)
    except STATE_LIMITS as error:
        assert isinstance(plain, Exception) and type(error) is type(plain)
        return
    if not isinstance(plain, Exception):
        assert compiled.exact and compiled.schema_limits == SchemaLimits()
        assert np.array_equal(compiled.result.trans, plain.result.trans)
        return
    assert compiled.narrowed and compiled.schema_limits in narrower_limits(SchemaLimits())
    event(f"narrowed to {compiled.schema_limits.max_string_length}")
    bounds = compiled.schema_limits
    rng = np.random.default_rng(seed)
    for _ in range(30):
        value = json.loads(compiled.result.sample(rng))
        jsonschema.validate(value, schema)
        for v in value.values():
            if isinstance(v, (str, list)):
                assert len(v) <= max(bounds.max_string_length, bounds.max_array_length)


def test_a_narrowed_step_that_refuses_keeps_the_first_error():
    """`minLength` above a lowered `max_string_length` refuses the narrowed step; the error
    raised is the state limit of the bounds asked for, not the step's own refusal."""
    schema = long_strings(20, 1000)
    schema["properties"] = dict(schema["properties"])
    schema["properties"]["m0"] = {"type": "string", "minLength": 100, "maxLength": 200}
    with pytest.raises(STATE_LIMITS):
        compile_schema_dfa(schema)


def test_a_grammar_around_a_schema_narrows_as_the_schema_alone():
    """The server's path (`corral.tools.grammar.compile_dfa`) narrows the same way: a schema alone
    compiles there to the DFA `compile_schema_dfa` gives, and a pattern blow-up (no length to
    narrow) is still refused."""
    from corral.tools.errors import ToolError
    from corral.tools.grammar import compile_dfa, schema_grammar

    schema = long_strings(20, 1000)
    alone = compile_schema_dfa(schema).result
    served = compile_dfa(schema_grammar(schema))
    assert np.array_equal(served.trans, alone.trans)
    assert np.array_equal(served.accept, alone.accept)
    with pytest.raises(ToolError, match="max_dfa_states"):
        compile_dfa(schema_grammar({"type": "string", "pattern": "^[ab]*a[ab]{16}$"}))

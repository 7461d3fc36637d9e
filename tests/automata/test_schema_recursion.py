"""Recursive schemas past a state limit: the `$ref` unrolling is made shallower before the schema
is refused (docs/design.md section 3: the language is a sub-language of the schema's; the depths
tried are `corral.automata.schema.compiler.shallower_recursion`)."""

import json

import jsonschema
import numpy as np
import pytest
from corral.automata import (
    EmptyLanguageError,
    Limits,
    SchemaLimits,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
    schema_to_dfa,
    tree_to_dfa,
)
from corral.automata.product import difference
from corral.automata.schema import compiler
from corral.automata.schema.compiler import compile_schema, shallower_recursion, unrolled_tree

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "v": {"type": "boolean"},
                "kids": {"type": "array", "maxItems": 2, "items": {"$ref": "#/$defs/node"}},
            },
            "required": ["v"],
        }
    },
    "$ref": "#/$defs/node",
}
# Unrolled 3 deep, TREE's subset construction makes 172 states (NFA: 206); 2 deep 74 (88);
# 1 deep 25 (29).


def unrolled(depth: int):
    return schema_to_dfa(TREE, schema_limits=SchemaLimits(max_recursion=depth))


@pytest.mark.parametrize(
    "limits, depth",
    [
        (Limits(max_dfa_states=100), 2),
        (Limits(max_nfa_states=150), 2),
        (Limits(max_dfa_states=50), 1),
    ],
)
def test_a_recursive_schema_past_a_state_limit_compiles_unrolled_less_deep(limits, depth):
    dfa = schema_to_dfa(TREE, limits)
    expected = unrolled(depth)
    assert np.array_equal(dfa.trans, expected.trans)
    assert np.array_equal(dfa.accept, expected.accept)
    rng = np.random.default_rng(0)
    for _ in range(200):
        jsonschema.validate(json.loads(dfa.sample(rng)), TREE)
    with pytest.raises(EmptyLanguageError):
        difference(dfa, unrolled(3))  # a subset of the default depth's language
    assert difference(unrolled(3), dfa).accept.any()  # and a strictly smaller one


def test_compile_schema_retries_when_its_build_passes_a_limit():
    assert compile_schema(TREE)[1] is True
    assert compile_schema({"type": "null"})[1] is False
    calls = []

    def build(node):
        calls.append(node)
        if len(calls) < 3:
            raise TooManyNfaStatesError("max_nfa_states", 1, "test")
        return len(calls)

    assert compile_schema(TREE, build=build) == (3, True)


def test_when_every_depth_passes_the_limit_the_first_error_is_raised(monkeypatch):
    depths = []
    real = compiler.Compiler

    def counting(schema, limits, schema_limits):
        depths.append(schema_limits.max_recursion)
        return real(schema, limits, schema_limits)

    monkeypatch.setattr(compiler, "Compiler", counting)
    with pytest.raises(TooManyDfaStatesError) as info:
        schema_to_dfa(TREE, Limits(max_dfa_states=20))
    assert depths == [3, 2, 1]
    assert info.value.limit == "max_dfa_states"


def test_a_schema_without_recursion_past_a_limit_is_refused_without_a_retry(monkeypatch):
    schema = {"type": "string", "pattern": "^[ab]*a[ab]{16}$"}  # 2**17 DFA states
    made = []
    real = compiler.Compiler
    monkeypatch.setattr(compiler, "Compiler", lambda *a: made.append(a) or real(*a))
    with pytest.raises(TooManyDfaStatesError):
        schema_to_dfa(schema)
    assert len(made) == 1


def test_another_error_at_a_shallower_depth_keeps_the_first_error():
    first = TooManyDfaStatesError("max_dfa_states", 1, "first")
    errors = [first, EmptyLanguageError("shallower")]

    def build(node):
        raise errors.pop(0)

    with pytest.raises(TooManyDfaStatesError) as info:
        compile_schema(TREE, build=build)
    assert info.value is first and not errors


def test_shallower_recursion_lowers_max_recursion_down_to_one():
    assert [s.max_recursion for s in shallower_recursion(SchemaLimits())] == [3, 2, 1]
    assert shallower_recursion(SchemaLimits(max_recursion=1)) == [SchemaLimits(max_recursion=1)]
    lowered = shallower_recursion(SchemaLimits(max_depth=9, max_recursion=2))
    assert [(s.max_depth, s.max_recursion) for s in lowered] == [(9, 2), (9, 1)]


def test_unrolled_tree_skips_the_unrollings_whose_nfa_is_counted_past_the_limit():
    # 3 deep, TREE's NFA has 206 states: past 150 (and the count's margin), it is skipped
    # without a build, and the tree is the one schema_to_dfa builds its DFA from, 2 deep.
    limits = Limits(max_nfa_states=150)
    unrolling = unrolled_tree(TREE, limits)
    assert (unrolling.max_recursion, unrolling.recursive) == (2, True)
    assert isinstance(unrolling.skipped, TooManyNfaStatesError)
    dfa, expected = tree_to_dfa(unrolling.tree, limits), schema_to_dfa(TREE, limits)
    assert np.array_equal(dfa.trans, expected.trans)
    assert np.array_equal(dfa.trans, unrolled(2).trans)
    deepest = unrolled_tree(TREE)
    assert (deepest.max_recursion, deepest.recursive, deepest.skipped) == (3, True, None)
    assert np.array_equal(tree_to_dfa(deepest.tree).trans, unrolled(3).trans)
    flat = unrolled_tree({"type": "null"})
    assert (flat.max_recursion, flat.recursive, flat.skipped) == (3, False, None)

"""Shortcuts of the schema compiler that must give the tables of the long way:

- `corral.automata.schema.nfa_size`: the NFA states of a schema form, counted without building
  them, are never fewer than the builder makes (so a depth skipped for its count could not have
  been built) and as many on the recursive schemas here; a recursive schema whose deeper
  unrolling is counted past the limit goes straight to the depth that fits, with the same
  tables.
- `corral.automata.schema.algebra`: a finished DFA is not rebuilt, a union of finished DFAs is
  made by products, a repeated negative is subtracted once; each gives the tables of building
  through the NFA.
"""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import Limits, SchemaLimits, TooManyNfaStatesError, schema_to_dfa
from corral.automata import compile as build_module
from corral.automata.nfa import tree_to_nfa
from corral.automata.schema import algebra
from corral.automata.schema.compiler import Compiler, _compile
from corral.automata.schema.nfa_size import TooLarge, check_nfa_states, nfa_states
from hypothesis import given, settings
from hypothesis import strategies as st
from test_algebra import _outcome, schemas
from test_schema_recursion import TREE

leaf = st.sampled_from(
    [
        {"type": "integer"},
        {"type": "string", "maxLength": 3},
        {"type": "string", "pattern": "^a[bc]*$"},
        {"enum": ["ab", "cb", 1, None]},
        {"type": "boolean"},
        {"type": "string", "format": "date"},
    ]
)


def _containers(inner):
    names = st.sampled_from(["a", "b", "c", "d"])
    return st.one_of(
        st.tuples(st.dictionaries(names, inner, max_size=4), st.lists(names, max_size=2)).map(
            lambda t: {"type": "object", "properties": t[0], "required": sorted(set(t[1]))}
        ),
        st.tuples(inner, st.sampled_from([None, 0, 2, 5])).map(
            lambda t: (
                {"type": "array", "items": t[0]} | ({} if t[1] is None else {"maxItems": t[1]})
            )
        ),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"anyOf": b}),
        inner.map(lambda s: {"type": "array", "items": s, "minItems": 1}),
    )


forms = st.recursive(leaf, _containers, max_leaves=8)


def _count_and_build(schema, schema_limits=None):
    c = Compiler(schema, None, schema_limits or SchemaLimits())
    form = _compile(schema, c)
    return nfa_states(form, c.trees, 10**9), tree_to_nfa(c.trees.build(form)).n_states


@settings(max_examples=150, deadline=None)
@given(forms)
def test_the_count_is_never_below_the_builders(schema):
    counted, built = _count_and_build(schema)
    assert counted >= built


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize(
    "schema",
    [
        TREE,
        {
            "$defs": {
                "e": {
                    "anyOf": [
                        {"type": "string", "enum": ["x", "y"]},
                        {"type": "array", "items": {"$ref": "#/$defs/e"}},
                        {
                            "type": "object",
                            "properties": {"k": {"$ref": "#/$defs/e"}, "n": {"type": "null"}},
                        },
                    ]
                }
            },
            "$ref": "#/$defs/e",
        },
    ],
)
def test_the_count_is_exact_on_recursive_schemas(schema, depth):
    counted, built = _count_and_build(schema, SchemaLimits(max_recursion=depth))
    assert counted == built


def test_the_count_stops_at_its_bound_and_the_check_raises_the_builders_error():
    c = Compiler(TREE, Limits(max_nfa_states=100), SchemaLimits())
    form = _compile(TREE, c)
    with pytest.raises(TooLarge):
        nfa_states(form, c.trees, 100)
    with pytest.raises(TooManyNfaStatesError) as info:
        check_nfa_states(form, c.trees)
    assert info.value.limit == "max_nfa_states"
    check_nfa_states(form, Compiler(TREE, None, SchemaLimits()).trees)  # fits: no error


def test_a_depth_counted_past_the_limit_is_not_built(monkeypatch):
    refused = []
    real = build_module.tree_to_nfa

    def building(node, limits=None):
        try:
            return real(node, limits)
        except TooManyNfaStatesError:
            refused.append(node)
            raise

    monkeypatch.setattr(build_module, "tree_to_nfa", building)
    dfa = schema_to_dfa(TREE, Limits(max_nfa_states=150))  # depth 3 needs 206 NFA states
    expected = schema_to_dfa(TREE, schema_limits=SchemaLimits(max_recursion=2))
    assert np.array_equal(dfa.trans, expected.trans)
    assert np.array_equal(dfa.accept, expected.accept)
    assert not refused  # depth 3 was counted past 165 states, never built
    with pytest.raises(TooManyNfaStatesError):  # 3 and 2 deep counted past 22, 1 deep (29
        schema_to_dfa(TREE, Limits(max_nfa_states=20))  # states, the last depth) built
    assert len(refused) == 1


def _the_long_way(patch):
    """Algebra.dfa always through the NFA."""
    patch.setattr(algebra, "_is_automaton", lambda form: False)
    patch.setattr(algebra, "_union_of_automata", lambda form: None)


@settings(max_examples=80, deadline=None)
@given(schemas)
def test_algebra_shortcuts_give_the_tables_of_the_long_way(schema):
    limits = Limits(max_dfa_states=3000, max_nfa_states=60_000)
    short = _outcome(schema, limits)
    with pytest.MonkeyPatch.context() as patch:
        _the_long_way(patch)
        assert _outcome(schema, limits) == short


def test_a_union_of_negations_is_made_by_products(monkeypatch):
    negations = [{"not": {"pattern": "a"}}, {"not": {"pattern": "b"}}, {"not": {"pattern": "c"}}]
    schema = {"type": "string", "not": {"anyOf": negations}}  # strings holding a, b and c
    made = []
    real = algebra.union
    monkeypatch.setattr(algebra, "union", lambda a, b, limits: made.append(1) or real(a, b, limits))
    short = _outcome(schema)
    assert len(made) == 2
    _the_long_way(monkeypatch)
    assert _outcome(schema) == short

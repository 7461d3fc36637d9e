"""Copied NFA fragments (`corral.automata.nfa.register_fragment`, used for the schema
compiler's plain string, `corral.automata.schema.strings.PLAIN_STRING_FORM`): an instance is a
copy of one NFA of the node made once per process. The tables must be those of building every
instance, in every place a plain string can stand (after a member name, inside arrays, as one
branch of several that share its first or last byte, optional and repeated)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from corral.automata import nfa as nfa_module
from corral.automata import schema_to_dfa
from corral.automata.nfa import tree_to_nfa
from corral.automata.schema.form import PINNED
from corral.automata.schema.strings import PLAIN_STRING_FORM
from corral.automata.tree import Concat, literal_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

STRING = {"type": "string"}

leaf = st.sampled_from(
    [
        STRING,
        STRING,
        {"type": "integer"},
        {"const": "x"},
        {"enum": ["", "a\\"]},
        {"type": "string", "maxLength": 2},
        {"type": ["string", "null"]},
    ]
)


def _containers(inner):
    names = st.sampled_from(["a", "b", "c"])
    return st.one_of(
        st.tuples(st.dictionaries(names, inner, max_size=3), st.lists(names, max_size=2)).map(
            lambda t: {"type": "object", "properties": t[0], "required": sorted(set(t[1]))}
        ),
        st.tuples(inner, st.sampled_from([None, 1, 3])).map(
            lambda t: (
                {"type": "array", "items": t[0]} | ({} if t[1] is None else {"maxItems": t[1]})
            )
        ),
        st.lists(inner, min_size=2, max_size=3).map(lambda b: {"anyOf": b}),
    )


schemas = st.recursive(leaf, _containers, max_leaves=6)


def _without_copies(function, *args):
    with mock.patch.object(nfa_module, "FRAGMENTS", {}):
        return function(*args)


@settings(max_examples=120, deadline=None)
@given(schemas)
def test_copied_strings_give_the_tables_of_built_ones(schema):
    copied = schema_to_dfa(schema)
    built = _without_copies(schema_to_dfa, schema)
    assert np.array_equal(copied.trans, built.trans)
    assert np.array_equal(copied.accept, built.accept)


def test_the_plain_string_is_registered_and_a_copy_has_the_states_of_a_build():
    node = PINNED[PLAIN_STRING_FORM.text]
    assert nfa_module.FRAGMENTS[id(node)][0] is node
    tree = Concat((literal_bytes(b'{"a":'), node, literal_bytes(b"}")))
    copied = tree_to_nfa(tree)
    built = _without_copies(tree_to_nfa, tree)
    assert copied.start == built.start
    assert [tuple(e) for e in copied.epsilon] == [tuple(e) for e in built.epsilon]
    assert copied.edge_mask == built.edge_mask
    assert copied.edge_target == built.edge_target

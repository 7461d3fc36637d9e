"""`Constraint.forced_bytes` and `next_bytes`: the text a grammar forces from a state and the bytes
it allows next (jump-forward), against a pure-Python walk of the DFA and single-byte advances, on
random DFAs and on a schema's worked example."""

from __future__ import annotations

from corral.automata import schema_to_dfa
from corral.kernels import Constraint, TokenIndex, TokenNotAllowedError, Vocabulary
from hypothesis import given
from kernel_strategies import SETTINGS, random_dfas

BYTES = Vocabulary(tuple(bytes([b]) for b in range(256)) + (None,), (256,))


def oracle(dfa, state: int) -> bytes:
    """Follow the one live byte of each non-accepting state, at most n_states bytes."""
    out = bytearray()
    while len(out) < dfa.n_states and not dfa.accept[state]:
        live = [b for b in range(256) if dfa.trans[state, b] >= 0]
        if len(live) != 1:
            break
        out.append(live[0])
        state = int(dfa.trans[state, live[0]])
    return bytes(out)


@SETTINGS
@given(dfa=random_dfas())
def test_forced_bytes_equal_a_walk_of_the_dfa(dfa):
    index = TokenIndex(dfa, BYTES)
    for state in range(dfa.n_states):
        constraint = Constraint(index, state)
        expected = b"" if constraint.done else oracle(dfa, state)
        assert constraint.forced_bytes() == expected
        assert constraint.forced_bytes(limit=1) == expected[:1]


def test_the_forced_text_of_an_object_is_its_keys_and_constants():
    schema = {
        "type": "object",
        "properties": {"name": {"const": "get_weather"}, "days": {"type": "integer"}},
        "required": ["name", "days"],
    }
    constraint = Constraint(TokenIndex(schema_to_dfa(schema), BYTES))
    assert constraint.forced_bytes() == b'{"name":"get_weather","days":'
    constraint.advance_bytes(b'{"name":"get_weather","days":')
    assert constraint.forced_bytes() == b""  # a digit or a minus sign: the model chooses
    constraint.advance_bytes(b"12")
    assert constraint.forced_bytes() == b""  # more digits or `}`
    constraint.advance_bytes(b"}")
    assert constraint.done and constraint.forced_bytes() == b""


@SETTINGS
@given(dfa=random_dfas())
def test_next_bytes_are_the_bytes_an_advance_takes(dfa):
    index = TokenIndex(dfa, BYTES)
    for state in range(dfa.n_states):
        constraint = Constraint(index, state)
        taken = bytearray()
        for b in range(256):
            walk = constraint.copy()
            try:
                walk.advance_bytes(bytes([b]))
            except TokenNotAllowedError:
                continue
            taken.append(b)
        assert constraint.next_bytes() == bytes(taken)

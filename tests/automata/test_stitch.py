"""Stitching (`corral.automata.stitch`): an envelope DFA with holes and the pieces' DFAs give one
table whose language is the envelope's with each hole replaced by its piece's language.

- Differential, on random envelopes shaped like tool calls (a prefix per piece, a choice
  before the hole, calls repeated) and random pieces: the stitched table, minimized, is the
  canonical DFA that `tree_to_dfa` compiles from the substituted tree, and both agree on
  sampled strings and their one-byte mutations.
- The contract: a hole after which the piece's first byte could also be envelope text, a piece
  accepting the empty string, a hole naming no piece, a table past its bound, are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import TooManyDfaStatesError, parse, tree_to_dfa
from corral.automata.minimize import minimize, number_breadth_first
from corral.automata.stitch import HOLE_MARKER, hole, hole_tree, stitch
from corral.automata.tree import Alt, Concat, Repeat, literal_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

IDENTITY = np.arange(256, dtype=np.int32)

piece_patterns = st.recursive(
    st.sampled_from(["a", "b", "c", "[ab]", "[bc]", "a?", ""]),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda t: t[0] + t[1]),
        st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
        inner.map(lambda t: f"(?:{t})*"),
        inner.map(lambda t: f"(?:{t}){{1,2}}"),
    ),
    max_leaves=6,
).map(lambda p: f"(?:{p})[abc]")  # never empty
"""Pieces over a, b, c; the envelope's own text uses other bytes, so a piece's end is clear."""

names = st.lists(st.text("xyz", min_size=1, max_size=3), min_size=1, max_size=4, unique=True)


def canonical(dfa):
    trans, accept = minimize(dfa.trans, dfa.accept)
    return number_breadth_first(trans, accept, IDENTITY)


def envelope(calls: list[tuple[str, object]], alternative: bool, repeats: int):
    """`("q" NAME "=" (PIECE "!" | "-")?)` repeated 1 to `repeats` times with ";" between, PIECE
    a hole or a piece's tree (`calls`: (name, tree)), the "-" option present when
    `alternative`."""
    options = []
    for name, body in calls:
        tail = Concat((body, literal_bytes(b"!")))
        if alternative:
            tail = Alt((tail, literal_bytes(b"-")))
        options.append(Concat((literal_bytes(f"q{name}=".encode()), tail)))
    call = Alt(tuple(options))
    return Concat((call, Repeat(Concat((literal_bytes(b";"), call)), 0, repeats - 1)))


@settings(max_examples=60, deadline=None)
@given(
    names,
    st.lists(piece_patterns, min_size=1, max_size=4),
    st.booleans(),
    st.integers(1, 3),
    st.data(),
)
def test_the_stitched_table_accepts_the_substituted_language(
    call_names, patterns, alternative, repeats, data
):
    uses = [data.draw(st.integers(0, len(patterns) - 1)) for _ in call_names]  # shared pieces
    pieces = [tree_to_dfa(parse(p)) for p in patterns]
    holes = envelope(
        [(n, hole_tree(k)) for n, k in zip(call_names, uses, strict=True)], alternative, repeats
    )
    direct = envelope(
        [(n, parse(patterns[k])) for n, k in zip(call_names, uses, strict=True)],
        alternative,
        repeats,
    )
    stitched = stitch(tree_to_dfa(holes), pieces)
    expected = tree_to_dfa(direct)
    assert not (stitched.trans[:, HOLE_MARKER] >= 0).any()
    result = canonical(stitched)
    assert np.array_equal(result.trans, expected.trans)
    assert np.array_equal(result.accept, expected.accept)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    for _ in range(20):
        text = bytearray(expected.sample(rng))
        assert stitched.matches(bytes(text))
        if text:
            text[rng.integers(len(text))] = rng.choice(list(b"abcqxyz=!-;"))
        assert stitched.matches(bytes(text)) == expected.matches(bytes(text))


def test_a_piece_copied_per_state_after_its_hole_and_shared_otherwise():
    piece = tree_to_dfa(parse("a+b"))  # 3 states
    once = stitch(
        tree_to_dfa(Concat((literal_bytes(b"x"), hole_tree(0), literal_bytes(b"!")))), [piece]
    )
    twice = Concat((literal_bytes(b"x"), hole_tree(0), literal_bytes(b"!"), hole_tree(0)))
    assert once.n_states == 2 + 3
    assert stitch(tree_to_dfa(twice), [piece]).matches(b"xab!aab")


def test_a_piece_whose_first_byte_could_also_be_envelope_text_is_refused():
    env = tree_to_dfa(Alt((Concat((literal_bytes(b"x"), hole_tree(0))), literal_bytes(b"xa"))))
    with pytest.raises(ValueError, match="before piece 0"):
        stitch(env, [tree_to_dfa(parse("ab"))])


def test_a_piece_end_that_could_also_continue_the_piece_is_refused():
    env = tree_to_dfa(Concat((hole_tree(0), literal_bytes(b"a"))))
    with pytest.raises(ValueError, match="after piece 0"):
        stitch(env, [tree_to_dfa(parse("a+"))])


def test_a_piece_accepting_the_empty_string_is_refused():
    with pytest.raises(ValueError, match="empty string"):
        stitch(tree_to_dfa(hole_tree(0)), [tree_to_dfa(parse("a?"))])


def test_a_hole_naming_no_piece_is_refused():
    with pytest.raises(ValueError, match="names no piece"):
        stitch(tree_to_dfa(hole_tree(1)), [tree_to_dfa(parse("a"))])
    with pytest.raises(ValueError):
        hole(1 << 16)


def test_a_table_past_its_bound_is_refused_before_it_is_built():
    env = tree_to_dfa(Concat((literal_bytes(b"x"), hole_tree(0))))
    piece = tree_to_dfa(parse("[a-z]{10}"))
    # counted before the copy: 5 envelope states (3 inside the hole) and 11 of the piece
    assert stitch(env, [piece], max_states=16).n_states == 12
    with pytest.raises(TooManyDfaStatesError, match="max_stitched_states"):
        stitch(env, [piece], max_states=15)

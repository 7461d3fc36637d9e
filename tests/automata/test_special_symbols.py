"""Special-token symbols (corral.automata.special, docs/special-tokens.md): the symbol bytes, the
tree and the token-reference notation; and the guarantee they rest on: no regex of the subset and
no JSON Schema compiles to a DFA that reads a byte UTF-8 text lacks (0xC0, 0xC1, 0xF5..0xFF), so
text never spells a symbol."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import json_object_tree, regex_to_dfa, schema_to_dfa, tree_to_dfa
from corral.automata.errors import ConstrainError, PatternError
from corral.automata.special import (
    MAX_SYMBOL_ID,
    SYMBOL_LENGTH,
    complete_symbols_length,
    read_token_reference,
    special_symbol,
    special_token,
    split_symbols,
)
from example_schemas import ALGEBRA_SCHEMAS, HAND_SCHEMAS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from regex_strategies import patterns

NOT_UTF8 = [0xC0, 0xC1, *range(0xF5, 0x100)]
"""The bytes no UTF-8 text holds."""
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ALGEBRA = ALGEBRA_SCHEMAS + HAND_SCHEMAS


def reads_no_foreign_byte(dfa) -> bool:
    """True when no state moves on a byte UTF-8 text lacks."""
    return bool((dfa.trans[:, NOT_UTF8] < 0).all())


@SETTINGS
@given(pattern=patterns)
def test_no_pattern_reads_a_symbol_byte(pattern):
    """Every construct of the regex subset (negated classes, `.`, `\\W`, `\\xff`, ranges)
    compiles to UTF-8 only: no state reads 0xFF or any other byte text lacks."""
    try:
        dfa = regex_to_dfa(pattern)
    except ConstrainError:
        assume(False)
    assert reads_no_foreign_byte(dfa)


@pytest.mark.parametrize(
    "pattern", [r"\xff", r"[^a]", r"\W", r"\S", r"\D", ".", "[\x00-\U0010ffff]"]
)
def test_negations_and_byte_escapes_stay_utf8(pattern):
    dfa = regex_to_dfa(pattern)
    assert reads_no_foreign_byte(dfa)
    assert dfa.step(0, b"\xff") < 0
    if pattern == r"\xff":
        assert dfa.accept[dfa.step(0, "\xff".encode())]  # U+00FF, the bytes C3 BF


@pytest.mark.parametrize("schema", ALGEBRA, ids=range(len(ALGEBRA)))
def test_no_schema_reads_a_symbol_byte(schema):
    try:
        dfa = schema_to_dfa(schema)
    except ConstrainError:
        pytest.skip("schema outside the subset")
    assert reads_no_foreign_byte(dfa)


def test_json_object_reads_no_symbol_byte():
    assert reads_no_foreign_byte(tree_to_dfa(json_object_tree(2)))


@SETTINGS
@given(text=st.text(max_size=30), token=st.integers(0, MAX_SYMBOL_ID))
def test_text_never_holds_a_symbol(text, token):
    data = text.encode("utf-8", "surrogatepass")
    assert special_symbol(token) not in data and 0xFF not in data
    assert split_symbols(data) == ([data] if data else [])
    assert split_symbols(data + special_symbol(token) + data) == [
        piece for piece in (data, token, data) if piece != b""
    ]


def test_symbol_and_notation():
    assert special_symbol(7) == b"\xff0000007" and len(special_symbol(7)) == SYMBOL_LENGTH
    for bad in (-1, MAX_SYMBOL_ID + 1, True, 1.0):
        with pytest.raises(ValueError):
            special_symbol(bad)
    names = {"<|python_tag|>": 128010, "<think>": 9}
    assert read_token_reference("x <[128010]> y", 2, names) == (128010, 12)
    assert read_token_reference("<|python_tag|>{", 0, names) == (128010, 14)
    assert read_token_reference("a<think>", 1, names.get) == (9, 8)
    for text, reason in [
        ("<[12", "missing ']>'"),
        ("<[1a]>", "not a decimal number"),
        ("<[]>", "not a decimal number"),
        ("<[99999999]>", "larger than"),
        ("<nope>", "no token has the text '<nope>'"),
        ("<|python_tag|", "missing '>'"),
        ("[TOOL_CALLS]", "starts with '<'"),
    ]:
        with pytest.raises(PatternError, match=reason.replace("[", r"\[")) as caught:
            read_token_reference(text, 0, names)
        assert caught.value.position == 0


def test_symbol_tree_is_the_symbol():
    dfa = tree_to_dfa(special_token(123))
    assert dfa.accept[dfa.step(0, special_symbol(123))]
    assert np.count_nonzero(dfa.trans[0] >= 0) == 1


def merged(pieces: list[bytes | int]) -> list[bytes | int]:
    """Adjacent text runs joined, empty ones dropped."""
    out: list[bytes | int] = []
    for piece in pieces:
        if isinstance(piece, bytes) and out and isinstance(out[-1], bytes):
            out[-1] += piece
        elif piece != b"":
            out.append(piece)
    return out


@SETTINGS
@given(
    pieces=st.lists(st.text(max_size=4).map(str.encode) | st.integers(0, MAX_SYMBOL_ID)),
    cuts=st.lists(st.integers(0, 200), max_size=6),
)
def test_streamed_symbols_split_as_the_whole(pieces, cuts):
    """Text and symbols cut into chunks anywhere: splitting each chunk's complete prefix and
    carrying the rest gives the pieces of the whole."""
    data = b"".join(special_symbol(p) if isinstance(p, int) else p for p in pieces)
    assert split_symbols(data) == merged(pieces)
    out: list[bytes | int] = []
    held = b""
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        held += data[lo:hi]
        n = complete_symbols_length(held)
        out += split_symbols(held[:n])
        held = held[n:]
    assert held == b"" and merged(out) == merged(pieces)

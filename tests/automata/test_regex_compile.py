"""The regex pipeline's results: docs/design.md section 2's worked example, canonical form,
minimality, UTF-8 handling, shared tails, `escape`, and the JSON string pattern of section 3."""

from __future__ import annotations

import itertools
import re
from unittest import mock

import numpy as np
import pytest
from corral.automata import (
    EmptyLanguageError,
    Limits,
    TooManyDfaStatesError,
    determinize,
    escape,
    parse,
    regex_to_dfa,
    tree_to_dfa,
)
from corral.automata.determinize import byte_classes, classes_of, remove_dead_states
from corral.automata.nfa import tree_to_nfa
from corral.automata.tree import EMPTY, Alt, Concat, Repeat, byte_set, literal_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from regex_strategies import bare_patterns, equivalent_state_pairs

JSON_STRING = r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"'


def live_edges(dfa) -> dict[tuple[int, str], int]:
    states, symbols = np.nonzero(dfa.trans >= 0)
    return {(int(s), chr(b)): int(dfa.trans[s, b]) for s, b in zip(states, symbols, strict=True)}


def test_worked_example_table():
    dfa = regex_to_dfa("(cat|car|dog)s?")
    assert dfa.trans.dtype == np.int32 and dfa.trans.shape == (7, 256)
    assert dfa.accept.dtype == np.bool_ and dfa.accept.shape == (7,)
    assert np.flatnonzero(dfa.accept).tolist() == [5, 6]
    assert live_edges(dfa) == {
        (0, "c"): 1,
        (0, "d"): 2,
        (1, "a"): 3,
        (2, "o"): 4,
        (3, "r"): 5,
        (3, "t"): 5,
        (4, "g"): 5,
        (5, "s"): 6,
    }
    assert dfa.n_live_edges == 8


def test_worked_example_distances_to_acceptance():
    dfa = regex_to_dfa("(cat|car|dog)s?")
    distance = dfa.distance_to_accept()
    assert distance.dtype == np.int32
    assert distance.tolist() == [3, 2, 2, 1, 1, 0, 0]


def test_states_that_cannot_reach_acceptance_are_removed():
    trans = np.array([[1, 2], [-1, 3], [2, -1], [-1, -1]], dtype=np.int32)  # 2 loops, never accepts
    accept = np.array([False, False, False, True])
    live_trans, live_accept = remove_dead_states(trans, accept)
    assert live_trans.tolist() == [[1, -1], [-1, 2], [-1, -1]]
    assert live_accept.tolist() == [False, False, True]
    with pytest.raises(EmptyLanguageError):
        remove_dead_states(trans[:3, :], np.zeros(3, dtype=bool))


EQUAL_LANGUAGES = [
    ("a|b", "[ab]"),
    ("aa*", "a+"),
    ("x{2,3}", "xxx?"),
    ("(p)?", "(|p)"),
    ("cat|dog|cow", "cow|dog|cat"),
    ("a{0,}", "a*"),
    ("a{,}", "a*"),
    ("a{,2}", "(aa?)?"),
    ("^abc$", "abc"),
    ("^^a$$", "a"),
    ("^a|^^b$|c$$", "a|b|c"),
    ("^|a", "a?"),
    ("^$", ""),
    ("\\d", "[0-9]"),
    ("\\w+", "[A-Za-z0-9_]+"),
    ("\\s", "[ \\t\\n\\r\\f\\v]"),
    (".", "[^\\n]"),
    ("[\\s\\S]", ".|\\n"),
    ("\\D", "[^0-9]"),
    ("é|è", "[èé]"),
    ("\\u00e9\\x41", "éA"),
    ("(?:ab)+", "ab(ab)*"),
    ("(?P<x>a|b)c", "(?:b|a)c"),
    ("a|", "a?"),
    ("[a-c-]", "[-abc]"),
    ("[]a]", "[a\\]]"),
    ("(a*)*", "a*"),
    ("[\\u0080-\\U0010ffff]".replace("\\U0010ffff", "\U0010ffff"), "[^\\x00-\\x7f]"),
]


@pytest.mark.parametrize(("first", "second"), EQUAL_LANGUAGES)
def test_equal_languages_give_identical_arrays(first, second):
    a, b = regex_to_dfa(first), regex_to_dfa(second)
    assert np.array_equal(a.trans, b.trans) and np.array_equal(a.accept, b.accept)


@pytest.mark.parametrize(("first", "second"), [("a*", "a+"), ("ab", "ba"), (".", "[\\s\\S]")])
def test_different_languages_give_different_arrays(first, second):
    a, b = regex_to_dfa(first), regex_to_dfa(second)
    assert a.trans.shape != b.trans.shape or not (
        np.array_equal(a.trans, b.trans) and np.array_equal(a.accept, b.accept)
    )


REWRITES = [
    lambda p, q: (f"(?:{p})", p),
    lambda p, q: (f"(?:{p})|(?:{p})", p),
    lambda p, q: (f"(?:{p})|(?:{q})", f"(?:{q})|(?:{p})"),
    lambda p, q: (f"(?:{p})?", f"(?:|{p})"),
    lambda p, q: (f"(?:{p})+", f"(?:{p})(?:{p})*"),
    lambda p, q: (f"(?:{p}){{2,3}}", f"(?:{p})(?:{p})(?:{p})?"),
    lambda p, q: (f"(?:(?:{p})*)*", f"(?:{p})*"),
    lambda p, q: (f"(?:{p})(?:(?:{q})(?:{p}))*", f"(?:(?:{p})(?:{q}))*(?:{p})"),
    lambda p, q: (f"(?:{p}){{0}}(?:{q})", q),
]
LIMITS = Limits(max_dfa_states=2_000)


def _unnamed(pattern: str) -> str:
    """Named groups made non-capturing, so a pattern may appear twice in a rewrite."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=bare_patterns, q=bare_patterns, rewrite=st.sampled_from(REWRITES))
def test_language_preserving_rewrites_give_identical_arrays(p, q, rewrite):
    first, second = rewrite(_unnamed(p), _unnamed(q))
    try:
        a = regex_to_dfa(first, LIMITS)
        b = regex_to_dfa(second, LIMITS)
    except TooManyDfaStatesError:
        return  # the unminimized DFAs of the two sides differ in size; skip the rare big ones
    except EmptyLanguageError:
        for pattern in (first, second):
            with pytest.raises(EmptyLanguageError):
                regex_to_dfa(pattern, LIMITS)
        return
    assert np.array_equal(a.trans, b.trans) and np.array_equal(a.accept, b.accept)


@pytest.mark.parametrize(
    ("pattern", "n_states"),
    [
        ("(a|b)*a(a|b){3}", 16),
        ("(0|1(01*0)*1)*", 3),  # binary multiples of 3
        ("[a-z]{1,64}", 65),
        (JSON_STRING, None),
        ("(ab|a)(c|bcd)(d*)", None),
        ("(x+x+)+y", 4),
    ],
)
def test_no_two_states_are_equivalent(pattern, n_states):
    dfa = regex_to_dfa(pattern)
    if n_states is not None:
        assert dfa.n_states == n_states
    if dfa.n_states <= 80:
        assert equivalent_state_pairs(dfa.trans, dfa.accept) == []


def test_equivalence_check_finds_equivalent_states():
    """The independent check itself: an unminimized DFA for a|b with two accepting states."""
    trans = np.full((3, 256), -1, dtype=np.int32)
    trans[0, ord("a")], trans[0, ord("b")] = 1, 2
    assert equivalent_state_pairs(trans, np.array([False, True, True])) == [(1, 2)]


def test_json_string_pattern_compiles_to_a_small_dfa():
    dfa = regex_to_dfa(JSON_STRING)
    assert dfa.n_states <= 20
    for text in ['""', '"abc"', '"é日😀"', '"a\\"b"', '"\\u00e9\\n"', '"\\/"']:
        assert dfa.matches(text.encode("utf-8")), text
    for text in ['"', '"\x01"', '"\\x"', '"\\u00e"', '"a"b"', "abc", '"\\"']:
        assert not dfa.matches(text.encode("utf-8")), text
    assert not dfa.matches(b'"\xff"') and not dfa.matches(b'"\xc3"')


def _scalar_values() -> np.ndarray:
    codes = np.arange(0x110000)
    return codes[(codes < 0xD800) | (codes > 0xDFFF)]


def _accepts_all(dfa, strings: list[bytes]) -> np.ndarray:
    """bool per string, stepping all strings of one length together (vectorized)."""
    out = np.zeros(len(strings), dtype=bool)
    by_length: dict[int, list[int]] = {}
    for i, s in enumerate(strings):
        by_length.setdefault(len(s), []).append(i)
    for length, indices in by_length.items():
        data = np.frombuffer(b"".join(strings[i] for i in indices), np.uint8).reshape(-1, length)
        state = np.zeros(len(indices), dtype=np.int64)
        for column in data.T:
            state = np.where(state >= 0, dfa.trans[np.maximum(state, 0), column], -1)
        out[indices] = (state >= 0) & dfa.accept[np.maximum(state, 0)]
    return out


def _count_accepted(dfa, max_length: int) -> int:
    """Number of accepted byte strings of length <= max_length (paths counted by length)."""
    paths = np.zeros(dfa.n_states, dtype=np.int64)
    paths[0] = 1
    total = int(paths[dfa.accept].sum())
    for _ in range(max_length):
        nxt = np.zeros_like(paths)
        states, symbols = np.nonzero(dfa.trans >= 0)
        np.add.at(nxt, dfa.trans[states, symbols], paths[states])
        paths = nxt
        total += int(paths[dfa.accept].sum())
    return total


@pytest.mark.parametrize(
    ("pattern", "excluded"),
    [(".", {0x0A}), ("[^a\\d日]", {0x61, *range(0x30, 0x3A), 0x65E5}), ("\\W", None)],
)
def test_non_ascii_classes_match_exactly_the_utf8_of_scalar_values(pattern, excluded):
    """Every scalar value's UTF-8 outside the excluded ones is accepted, and nothing else: the
    number of accepted byte strings equals the number of those scalar values."""
    dfa = regex_to_dfa(pattern)
    codes = _scalar_values()
    if excluded is None:
        excluded = {c for c in range(128) if re.fullmatch(r"\w", chr(c), re.ASCII)}
    wanted = codes[~np.isin(codes, sorted(excluded))]
    strings = [chr(c).encode("utf-8") for c in wanted]
    assert _accepts_all(dfa, strings).all()
    assert _count_accepted(dfa, 4) == len(wanted)
    overlong, surrogate, too_large, cut = (
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xe6\x97",
    )
    for bad in [overlong, b"\xc1\xbf", surrogate, too_large, cut, b"\x80", b"\xff"]:
        assert not dfa.matches(bad)


def test_trailing_dollar_does_not_match_a_final_newline():
    dfa = regex_to_dfa("a$")
    assert dfa.matches(b"a") and not dfa.matches(b"a\n")
    assert re.fullmatch("a$", "a\n", re.ASCII) is None


def _optional_members(names: list[str]):
    """`{` then the members, each optional, with commas only between the present ones, `}`:
    the DAG the schema compiler builds (docs/design.md section 3). `rest[i]` is what may follow once
    something was written: shared by `rest[i - 1]` and `first[i - 1]`."""
    members = [literal_bytes(f'"{n}":1'.encode()) for n in names]
    comma = byte_set(b",")
    rest = [EMPTY] * (len(names) + 1)
    first = [EMPTY] * (len(names) + 1)
    for i in reversed(range(len(names))):
        rest[i] = Alt((Concat((comma, members[i], rest[i + 1])), rest[i + 1]))
        first[i] = Alt((Concat((members[i], rest[i + 1])), first[i + 1]))
    return Concat((byte_set(b"{"), first[0], byte_set(b"}")))


def test_shared_tails_give_a_linear_nfa():
    sizes = {
        n: tree_to_nfa(_optional_members([f"k{i}" for i in range(n)])).n_states
        for n in (10, 20, 40, 80)
    }
    steps = [sizes[20] - sizes[10], sizes[40] - sizes[20], sizes[80] - sizes[40]]
    assert steps[1] == 2 * steps[0] and steps[2] == 2 * steps[1], sizes  # linear in n
    assert sizes[80] < 20 * 80
    dfa = tree_to_dfa(_optional_members([f"k{i}" for i in range(80)]))
    assert dfa.n_states < 20 * 80


def test_shared_tails_give_the_right_language():
    names = ["x", "y", "z"]
    dfa = tree_to_dfa(_optional_members(names))
    for size in range(4):
        for chosen in itertools.permutations(names, size):
            text = "{" + ",".join(f'"{n}":1' for n in chosen) + "}"
            in_order = list(chosen) == sorted(chosen, key=names.index)
            assert dfa.matches(text.encode()) == in_order, text
    assert not dfa.matches(b'{,"x":1}') and not dfa.matches(b'{"x":1,}')


def test_tree_to_dfa_of_a_hand_made_tree():
    tree = Concat((Repeat(byte_set(b"ab"), 2, None), Repeat(literal_bytes("é".encode()), 0, 1)))
    dfa = tree_to_dfa(tree)
    assert np.array_equal(dfa.trans, regex_to_dfa("[ab]{2,}é?").trans)
    assert parse("é") is not None


@settings(max_examples=300, deadline=None)
@given(text=st.text(st.characters(codec="utf-8"), max_size=20))  # no surrogates
def test_escape_is_the_inverse_of_parsing_a_literal(text):
    pattern = escape(text)
    dfa = regex_to_dfa(pattern)
    data = text.encode("utf-8")
    assert dfa.matches(data)
    assert dfa.n_states == len(data) + 1 and dfa.n_live_edges == len(data)  # exactly `text`
    assert re.fullmatch(pattern, text, re.ASCII)


def test_escape_writes_readable_patterns():
    assert escape("a.b*c") == "a\\.b\\*c"
    assert escape("{x}[y]") == "\\{x\\}\\[y\\]"
    assert escape("\n\t\x00é") == "\\n\\t\\x00é"


def test_limits_defaults_are_documented_values():
    limits = Limits()
    assert (limits.max_pattern_length, limits.max_repetition) == (100_000, 1_000)
    assert (limits.max_nfa_states, limits.max_dfa_states) == (250_000, 40_000)


byte_masks = st.one_of(
    st.integers(0, (1 << 256) - 1),
    st.integers(0, 255).map(lambda b: 1 << b),
    st.tuples(st.integers(0, 255), st.integers(0, 255)).map(
        lambda r: ((1 << (max(r) + 1)) - 1) ^ ((1 << min(r)) - 1)
    ),
)


@settings(max_examples=200, deadline=None)
@given(masks=st.lists(byte_masks, max_size=80), many=st.booleans(), colliding=st.booleans())
def test_byte_classes_are_the_bytes_every_mask_treats_alike(masks, many, colliding):
    """By definition: bytes a, b share a class exactly when every mask holds both or neither,
    and classes are numbered in order of their smallest byte; each mask's class bitset holds
    exactly the classes of its bytes. `many`: more than 52 distinct masks, so the columns are
    hashed; `colliding`: every column then hashes alike, so the exact fallback of `classes_of`
    gives the classes."""
    if many:
        masks = masks + [3 << b for b in range(0, 106, 2)]
    weights = np.zeros_like(determinize._KEY_WEIGHTS) if colliding else determinize._KEY_WEIGHTS
    with mock.patch.object(determinize, "_KEY_WEIGHTS", weights):
        classes, sets = classes_of(masks)
    classes = classes.tolist()
    signature = [tuple(m >> b & 1 for m in masks) for b in range(256)]
    for a, b in itertools.combinations(range(0, 256, 7), 2):
        assert (classes[a] == classes[b]) == (signature[a] == signature[b])
    first_seen = list(dict.fromkeys(classes))
    assert first_seen == list(range(len(first_seen)))
    assert len(first_seen) == len(set(signature))
    assert byte_classes(masks).tolist() == classes
    for m, bits in zip(masks, sets, strict=True):
        assert bits == sum(1 << c for c in {classes[b] for b in range(256) if m >> b & 1})

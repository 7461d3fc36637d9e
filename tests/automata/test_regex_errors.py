"""Refused patterns name their position and reason; an empty language and every limit have their
own error (docs/design.md section 2, "Everything else ... is refused with an error naming the
position" and "Limits")."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest
from corral.automata import (
    ConstrainError,
    EmptyLanguageError,
    Limits,
    PatternError,
    PatternTooLongError,
    RepetitionTooLargeError,
    SchemaError,
    TooManyDfaStatesError,
    TooManyNfaStatesError,
    parse,
    regex_to_dfa,
    schema_to_dfa,
    tree_to_dfa,
)
from corral.automata.tree import Alt, Concat, byte_set
from hypothesis import given, settings
from hypothesis import strategies as st
from regex_strategies import sequence

REFUSED = [
    # (pattern, position, words of the reason)
    ("(ab", 0, "missing ')'"),
    ("a(b(c)", 1, "missing ')'"),
    ("ab)", 2, "unbalanced ')'"),
    ("a**", 2, "nested quantifier"),
    ("a{2}{3}", 4, "nested quantifier"),
    ("a*?", 2, "lazy"),
    ("a{1,2}?", 6, "lazy"),
    ("a++", 2, "possessive"),
    ("(?=a)", 0, "lookahead"),
    ("b(?!a)", 1, "negative lookahead"),
    ("(?<=a)b", 0, "lookbehind"),
    ("(?<!a)b", 0, "negative lookbehind"),
    ("(a)\\1", 3, "backreference"),
    ("(?P<n>a)(?P=n)", 8, "backreference"),
    ("[z-a]", 1, "bad range"),
    ("[\\d-z]", 1, "cannot end a range"),
    ("a{3,2}", 1, "greater than maximum"),
    ("ab\\", 2, "trailing backslash"),
    ("*a", 0, "nothing to repeat"),
    ("a|+b", 2, "nothing to repeat"),
    ("(?:?)", 3, "nothing to repeat"),
    ("{2}", 0, "nothing to repeat"),
    ("(?i)a", 0, "inline flags"),
    ("a(?s:b)", 1, "inline flags"),
    ("\\b", 0, "word boundaries"),
    ("a\\B", 1, "word boundaries"),
    ("\\Aa", 0, "anchor"),
    ("a\\Z", 1, "anchor"),
    ("[]", 0, "unterminated character set"),
    ("x[^]", 1, "unterminated character set"),
    ("[a", 0, "unterminated character set"),
    ("\\q", 0, "unknown escape"),
    ("a\\p{L}", 1, "Unicode property"),
    ("\\x4", 0, "exactly 2 hex digits"),
    ("\\xg1", 0, "exactly 2 hex digits"),
    ("ab\\u12", 2, "exactly 4 hex digits"),
    ("\\0", 0, "octal"),
    ("[\\1]", 1, "octal"),
    ("a{", 1, "literal '{'"),
    ("a{x}", 1, "literal '{'"),
    ("a{}", 1, "literal '{'"),
    ("a^b", 1, "'^'"),
    ("a$b", 1, "'$'"),
    ("(a$)", 2, "'$'"),
    ("(^a)", 1, "'^'"),
    ("a|b^", 3, "'^'"),
    ("a?^b", 2, "'^'"),
    ("^a$$b", 2, "'$'"),
    ("$^", 0, "'$'"),
    ("^*a", 1, "nothing to repeat"),
    ("a$*", 1, "'$'"),
    ("(?P<1a>x)", 0, "bad group name"),
    ("(?P<n>a)(?P<n>b)", 8, "used twice"),
    ("(?<n>a)", 0, "(?P<name>...)"),
    ("(?#note)", 0, "comments"),
    ("x(?>a)", 1, "atomic"),
    ("(?(1)a|b)", 0, "conditional"),
]


@pytest.mark.parametrize(("pattern", "position", "reason"), REFUSED)
def test_refused_pattern_names_position_and_reason(pattern, position, reason):
    with pytest.raises(PatternError) as caught:
        parse(pattern)
    assert caught.value.position == position
    assert reason in caught.value.reason
    assert caught.value.pattern == pattern
    assert f"position {position}" in str(caught.value)
    assert isinstance(caught.value, ConstrainError)


# anchor-free sequences of the subset, groups made non-capturing (no names to clash)
ATOMS = sequence.filter(bool).map(lambda p: p.replace("(?P<>", "(?:"))


@settings(max_examples=300, deadline=None)
@given(before=ATOMS, anchor=st.sampled_from("^$"), after=ATOMS)
def test_an_anchor_between_atoms_is_refused_at_its_position(before, anchor, after):
    """Anchors are accepted only at the start or end of a top-level branch: one inside a
    sequence, or inside a group, is refused where it stands."""
    for pattern, position in (
        (before + anchor + after, len(before)),
        (f"({before}{anchor}{after})", 1 + len(before)),
        (f"x|(?:{anchor}{after})", 5),
    ):
        with pytest.raises(PatternError) as caught:
            parse(pattern)
        assert caught.value.position == position, pattern
        assert f"'{anchor}'" in caught.value.reason


ANCHORED = ["^^a$$", "^a|^b$", "a$$|^^b", "^", "$", "(^a)", "a^", "$a", "a|b$c", "^(a|b)$"]


@pytest.mark.parametrize("pattern", ANCHORED)
def test_one_rule_for_anchors_in_a_regex_and_in_a_schema_pattern(pattern):
    """`regex_to_dfa` and a JSON Schema `pattern` accept and refuse the same anchors, at the
    same position."""
    schema = {"type": "string", "pattern": pattern}
    try:
        regex_to_dfa(pattern)
    except PatternError as error:
        with pytest.raises(SchemaError) as caught:
            schema_to_dfa(schema)
        assert f"({error.reason} at {error.position})" in str(caught.value)
    else:
        schema_to_dfa(schema)


def test_anchors_in_a_schema_pattern_anchor_their_branch():
    dfa = schema_to_dfa({"type": "string", "pattern": "^^ab$$|^c|d$"})
    for value in ["ab", "c", "cx", "xd", "d", "xcd"]:
        assert dfa.matches(json.dumps(value).encode()), value
    for value in ["xab", "abx", "xc", "dx", ""]:
        assert not dfa.matches(json.dumps(value).encode()), value


EMPTY_LANGUAGES = [
    "[^\\s\\S]",
    "a[^\\d\\D]b",
    "\\ud800",
    "[\\ud800-\\udfff]",
    "(x|[^\\w\\W])y[^\\s\\S]",
]


@pytest.mark.parametrize("pattern", EMPTY_LANGUAGES)
def test_empty_language_is_refused(pattern):
    with pytest.raises(EmptyLanguageError):
        regex_to_dfa(pattern)


def test_empty_tree_is_refused():
    with pytest.raises(EmptyLanguageError):
        tree_to_dfa(Alt(()))
    with pytest.raises(EmptyLanguageError):
        tree_to_dfa(Concat((byte_set(b"a"), byte_set([]))))


def test_pattern_length_limit():
    assert parse("a" * 10, Limits(max_pattern_length=10)) is not None
    with pytest.raises(PatternTooLongError) as caught:
        parse("a" * 11, Limits(max_pattern_length=10))
    assert caught.value.limit == "max_pattern_length" and caught.value.value == 10


@pytest.mark.parametrize("pattern", ["a{1001}", "a{2,1001}", "a{1001,}", "a{,1001}"])
def test_repetition_limit(pattern):
    with pytest.raises(RepetitionTooLargeError) as caught:
        parse(pattern)
    assert caught.value.limit == "max_repetition" and caught.value.value == 1000
    assert "position 1" in str(caught.value)
    parse(pattern, Limits(max_repetition=1001))


def test_nfa_state_limit_is_raised_while_building():
    with pytest.raises(TooManyNfaStatesError):
        regex_to_dfa("a{100}b{100}", Limits(max_nfa_states=150))
    start = time.process_time()  # CPU time: the machine may be shared
    with pytest.raises(TooManyNfaStatesError) as caught:
        regex_to_dfa("(.{1000}){1000}")  # would need about 10**7 states
    assert caught.value.limit == "max_nfa_states"
    assert time.process_time() - start < 5


EXPLODING = "(a|b)*a(a|b){24}"  # its minimal DFA has 2**25 states


def test_dfa_blow_up_is_refused_in_about_a_second():
    start = time.process_time()  # CPU time: the machine may be shared
    with pytest.raises(TooManyDfaStatesError) as caught:
        regex_to_dfa(EXPLODING)
    elapsed = time.process_time() - start
    assert caught.value.limit == "max_dfa_states"
    assert elapsed < 3, elapsed  # about 0.5 s of CPU


def test_dfa_blow_up_is_refused_without_a_memory_blow_up():
    tracemalloc.start()
    try:
        with pytest.raises(TooManyDfaStatesError):
            regex_to_dfa(EXPLODING, Limits(max_dfa_states=5_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, peak


def test_dfa_state_limit_is_configurable():
    regex_to_dfa("(a|b)*a(a|b){3}", Limits(max_dfa_states=16))
    with pytest.raises(TooManyDfaStatesError):
        regex_to_dfa("(a|b)*a(a|b){3}", Limits(max_dfa_states=15))


@pytest.mark.parametrize("pattern", [123, b"ab", None, ["a"]])
def test_a_pattern_that_is_no_str_is_a_type_error(pattern):
    from corral.automata import lazy_regex_dfa

    for compile_pattern in (parse, regex_to_dfa, lazy_regex_dfa):
        with pytest.raises(TypeError, match="a pattern is a str, not "):
            compile_pattern(pattern)

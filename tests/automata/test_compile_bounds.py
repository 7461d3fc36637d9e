"""Every compile stops within its limits (issue 33, item 9): the NFA is counted before it is
built, and the subset construction's work (`Limits.max_subset_work`) is counted as its states are
made, so a short pattern such as `((a?){1000}){4}` is refused with a `LimitError` naming the
limit instead of running for a minute. No timing here: the tests check the counters.
"""

from __future__ import annotations

import re

import corral.automata.determinize as determinize
import corral.automata.nfa as nfa_module
import pytest
from corral.automata import (
    EmptyLanguageError,
    LimitError,
    Limits,
    PatternError,
    SchemaError,
    SubsetWorkError,
    TooManyNfaStatesError,
    regex_to_dfa,
    schema_to_dfa,
)
from corral.automata.determinize import PYTHON_STEP_UNITS
from corral.automata.parse import parse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


class _Recorder:
    """Records the `Subsets` made and the NFA states built while it is installed."""

    def __init__(self, monkeypatch):
        self.subsets = []
        self.nfa_states = 0
        made = determinize.Subsets.__init__
        new_state = nfa_module._Builder.new_state

        def init(subsets, nfa, *args, **kwargs):
            self.subsets.append((subsets, nfa.n_states))
            made(subsets, nfa, *args, **kwargs)

        def count(builder):
            self.nfa_states += 1
            return new_state(builder)

        monkeypatch.setattr(determinize.Subsets, "__init__", init)
        monkeypatch.setattr(nfa_module._Builder, "new_state", count)


def _one_charge(n_nfa_states: int, n_classes: int = 3) -> int:
    """The most one step of the construction adds to its work: one closure search over every
    NFA state, one union over all of them, or one atom plan of every NFA state's edge over
    every byte class (the patterns here have at most 3: `a`, `b` and the rest)."""
    return (PYTHON_STEP_UNITS * (n_classes + 3) + 10) * n_nfa_states


@pytest.mark.parametrize("pattern", ["((a?){1000}){4}", "^((a?){1000}){3}$", "((a|b)?){1000}"])
def test_nested_optional_repeats_are_refused_by_the_work_limit(pattern, monkeypatch):
    recorder = _Recorder(monkeypatch)
    with pytest.raises(SubsetWorkError) as caught:
        regex_to_dfa(pattern)
    assert caught.value.limit == "max_subset_work"
    assert "max_subset_work=" in str(caught.value)
    limit = Limits().max_subset_work
    for subsets, n_nfa in recorder.subsets:
        assert subsets.work <= limit + _one_charge(n_nfa)
        assert subsets.n_states < Limits().max_dfa_states


@pytest.mark.parametrize("pattern", ["(a{1000}){1000}", "((ab){999}){999}", "(x{900}|y{900}){500}"])
def test_a_pattern_past_the_nfa_limit_is_refused_before_any_state_is_built(pattern, monkeypatch):
    recorder = _Recorder(monkeypatch)
    with pytest.raises(TooManyNfaStatesError):
        parse(pattern)
    assert recorder.nfa_states == 0


def test_the_same_pattern_in_a_schema_is_refused_naming_the_keyword():
    with pytest.raises(SchemaError) as caught:
        schema_to_dfa({"type": "string", "pattern": "^(a{1000}){1000}$"})
    assert caught.value.keyword == "pattern"


@st.composite
def slow_patterns(draw, depth: int = 0):
    """The kinds of patterns whose compile grows fast in their length: nested bounded repeats
    of optional items, alternations of long literals, and repeats of those."""
    kind = draw(st.sampled_from(["literal", "optional", "alternation", "repeat"]))
    if kind == "literal" or depth >= 3:
        return draw(st.text("ab", min_size=1, max_size=12))
    inner = draw(slow_patterns(depth + 1))
    if kind == "optional":
        return f"({inner})?"
    if kind == "alternation":
        other = draw(slow_patterns(depth + 1))
        return f"({inner}|{other})"
    lo = draw(st.integers(0, 20))
    hi = draw(st.integers(lo, lo + 60))
    return f"({inner}){{{lo},{hi}}}"


SMALL = Limits(max_nfa_states=4_000, max_dfa_states=2_000, max_subset_work=60_000)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=slow_patterns())
def test_every_compile_stays_within_its_counted_limits(pattern):
    """Compiled or refused with a LimitError; either way no construction did more work, made
    more NFA states or more DFA states than its limits (plus one step), and a compiled DFA is
    the language Python's `re` gives."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        recorder = _Recorder(monkeypatch)
        try:
            dfa = regex_to_dfa(pattern, SMALL)
        except (LimitError, EmptyLanguageError):
            dfa = None
    for subsets, n_nfa in recorder.subsets:
        assert n_nfa <= SMALL.max_nfa_states
        assert subsets.work <= SMALL.max_subset_work + _one_charge(n_nfa)
        assert subsets.n_states <= SMALL.max_dfa_states
    if dfa is not None:
        for text in ["", "a", "ab", "ba", "a" * 30, "ab" * 20, "b" * 7]:
            expected = re.fullmatch(pattern, text, re.ASCII) is not None
            assert dfa.matches(text.encode()) == expected, (pattern, text)


def test_a_lone_surrogate_in_a_pattern_is_refused_with_its_position():
    with pytest.raises(PatternError) as caught:
        regex_to_dfa("ab\udcffc")
    assert caught.value.position == 2 and "U+DCFF" in caught.value.reason


@settings(max_examples=30, deadline=None)
@given(length=st.integers(100_001, 200_000), where=st.sampled_from(["regex", "schema", "keys"]))
def test_an_over_long_pattern_is_quoted_by_a_prefix(length, where):
    """An error about a pattern never repeats all of it (issue 33, item 10): at most a prefix
    and the length."""
    pattern = "a" * length
    try:
        if where == "regex":
            regex_to_dfa(pattern)
        elif where == "schema":
            schema_to_dfa({"type": "string", "pattern": pattern})
        else:
            schema_to_dfa({"type": "object", "patternProperties": {pattern + "(": {}}})
    except (LimitError, SchemaError) as error:
        assert len(str(error)) < 400, str(error)[:400]
        if where != "regex":
            assert str(length + (where == "keys")) in str(error)
    else:
        raise AssertionError("an over-long pattern was compiled")

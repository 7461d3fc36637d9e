"""docs/design.md section 2's oracle, checked on random patterns of the whole subset: for every str
`s` without surrogates, `dfa.matches(s.encode("utf-8")) == (re.fullmatch(p, s, re.ASCII) is not
None)`.
"""

from __future__ import annotations

import re
import signal

import numpy as np
import pytest
from corral.automata import EmptyLanguageError, Limits, TooManyDfaStatesError, regex_to_dfa
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from regex_strategies import equivalent_state_pairs, pattern_pieces, patterns, texts

# Random patterns nest counted repetitions of multi-byte classes; the few whose DFA would pass
# 2,000 states are skipped to keep the run short (the limit itself is tested elsewhere).
LIMITS = Limits(max_dfa_states=2_000)


class _Backtracking(Exception):
    """Python's backtracking matcher ran too long (a random pattern with nested repetitions)."""


def _interrupt(signum, frame):
    raise _Backtracking


def python_fullmatch(pattern: str, text: str, seconds: float = 0.5) -> bool:
    """The oracle, `re.fullmatch(pattern, text, re.ASCII)`, given at most `seconds`: `re`
    backtracks and can take exponential time on patterns like `(a|aa)*c`, which a DFA does not.
    SRE checks for signals while it matches, so an interval timer stops it; the example is then
    rejected (`assume`), never counted as a pass."""
    previous = signal.signal(signal.SIGALRM, _interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return re.fullmatch(pattern, text, re.ASCII) is not None
    except _Backtracking:
        assume(False)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def agree(pattern: str, dfa, text: str) -> None:
    expected = python_fullmatch(pattern, text)
    assert (dfa is not None and dfa.matches(text.encode("utf-8"))) == expected, (pattern, text)


# Python warns (FutureWarning) that `[[`, `--`, `&&`, `||` or `~~` inside a class may mean a
# set operation in a future version; the oracle is today's meaning, which the DFA must match.
@pytest.mark.filterwarnings("ignore:Possible (nested set|set [a-z ]+) at position:FutureWarning")
@settings(
    max_examples=2000, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(pattern=patterns, data=st.data())
def test_dfa_agrees_with_python_fullmatch(pattern, data):
    re.compile(pattern, re.ASCII)  # the strategy writes only patterns Python accepts
    try:
        dfa = regex_to_dfa(pattern, LIMITS)
    except EmptyLanguageError:
        dfa = None
    except TooManyDfaStatesError:
        assume(False)
    for text in data.draw(st.lists(texts, min_size=3, max_size=3), label="texts"):
        agree(pattern, dfa, text)
    for text in data.draw(st.lists(pattern_pieces(pattern), min_size=3, max_size=3)):
        agree(pattern, dfa, text)
    if dfa is None:
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    for _ in range(3):
        member = dfa.sample(rng, stop_probability=0.5).decode("utf-8")  # well-formed UTF-8
        if len(member) > 16:
            continue  # Python's backtracking can take exponential time on long near-misses
        assert python_fullmatch(pattern, member), (pattern, member)
        cut = data.draw(st.integers(0, len(member)), label="cut")
        agree(pattern, dfa, member[:cut] + member[cut + 1 :])
        agree(pattern, dfa, member[:cut] + data.draw(texts) + member[cut:])


@settings(
    max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(pattern=patterns)
def test_dfa_is_minimal_and_canonically_numbered(pattern):
    try:
        dfa = regex_to_dfa(pattern, LIMITS)
    except (EmptyLanguageError, TooManyDfaStatesError):
        return
    if dfa.n_states > 40:
        return
    assert equivalent_state_pairs(dfa.trans, dfa.accept) == []
    # Breadth-first numbering from 0 over bytes 0..255 discovers states in the order 0, 1, 2...
    order, seen = [0], {0}
    for state in order:
        for b in range(256):
            t = int(dfa.trans[state, b])
            if t >= 0 and t not in seen:
                seen.add(t)
                order.append(t)
    assert order == list(range(dfa.n_states))
    assert (dfa.distance_to_accept() >= 0).all()  # every state can reach acceptance

"""Language operations on a regex tree (`corral.automata.tree_ops`), checked against Python's
`re` on every string over a small alphabet: emptiness, the empty string, and the strings that
start with a byte of a set, on trees with empty parts and finished DFAs (`Automaton`) inside."""

from __future__ import annotations

import itertools
import re

from corral.automata import EmptyLanguageError, tree_to_dfa
from corral.automata.tree import Alt, Automaton, ByteSet, Concat, Repeat
from corral.automata.tree_ops import ALL_BYTES, is_empty, is_nullable, starting_with
from hypothesis import given, settings
from hypothesis import strategies as st

ALPHABET = "abc"
STRINGS = ["".join(s) for n in range(5) for s in itertools.product(ALPHABET, repeat=n)]
NOTHING = "(?!)"  # Python's regex of the empty language


def byte_set(chars) -> tuple:
    """(tree, regex) of one byte of `chars` (none: the empty language)."""
    mask = sum(1 << ord(c) for c in chars)
    return ByteSet(mask), f"[{''.join(sorted(chars))}]" if chars else NOTHING


def concat(parts) -> tuple:
    return Concat(tuple(t for t, _ in parts)), "".join(f"(?:{r})" for _, r in parts)


def alt(parts) -> tuple:
    if not parts:
        return Alt(()), NOTHING
    return Alt(tuple(t for t, _ in parts)), "(?:" + "|".join(r for _, r in parts) + ")"


def repeat(part, low: int, more: int | None) -> tuple:
    high = None if more is None else low + more
    return Repeat(part[0], low, high), f"(?:{part[1]}){{{low},{'' if high is None else high}}}"


def automaton(part) -> tuple:
    """The part's language as a finished DFA leaf (the part itself when it is empty)."""
    try:
        return Automaton(tree_to_dfa(part[0])), part[1]
    except EmptyLanguageError:
        return part


trees = st.recursive(
    st.sets(st.sampled_from(ALPHABET)).map(byte_set),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(concat),
        st.lists(inner, max_size=3).map(alt),
        st.builds(repeat, inner, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 2))),
        inner.map(automaton),
    ),
    max_leaves=8,
)


def language(pattern: str) -> set[str]:
    """The strings of STRINGS that Python's `re` matches whole."""
    return {s for s in STRINGS if re.fullmatch(pattern, s)}


def matched(tree) -> set[str]:
    """The strings of STRINGS in `tree`'s language, by its DFA."""
    try:
        dfa = tree_to_dfa(tree)
    except EmptyLanguageError:
        return set()
    return {s for s in STRINGS if dfa.matches(s.encode())}


def has_no_string(tree) -> bool:
    """True when `tree_to_dfa` finds the language empty."""
    try:
        tree_to_dfa(tree)
    except EmptyLanguageError:
        return True
    return False


@settings(max_examples=300, deadline=None)
@given(tree=trees, first=st.sets(st.sampled_from(ALPHABET)))
def test_tree_ops_agree_with_python_re(tree, first):
    tree, pattern = tree
    strings = language(pattern)
    assert is_nullable(tree) == ("" in strings)
    assert is_empty(tree) == has_no_string(tree)
    if strings:
        assert not is_empty(tree)
    mask = sum(1 << ord(c) for c in first)
    starting = starting_with(tree, mask)
    assert matched(starting) == {s for s in strings if s and s[0] in first}
    assert is_empty(starting) == has_no_string(starting)
    assert matched(starting_with(tree, ALL_BYTES)) == strings - {""}

"""Random grammars (rules, recursion, classes, repetition) against Lark (docs/grammars.md).

Each drawn grammar is written in GBNF and in Lark. corral compiles both; the two canonical DFAs
must be identical (GBNF refuses left recursion, as llama.cpp does: then only the Lark one is
compiled). Against Lark's Earley parser (`grammar_oracle.LarkOracle`):
- every string drawn from the DFA parses (never wider), and so does every mutation of them the
  DFA accepts; when no recursion was cut, the DFA and Lark agree on every mutation (exact);
- every string of a random derivation in which no rule occurs more than `max_recursion` times
  on a path is accepted by the DFA (exact up to the bound).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from corral.automata import EmptyLanguageError, GrammarError, compile_grammar_text
from grammar_oracle import LarkOracle, mutations, samples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CHARS = "ab\u00e9"
POOL = "abcz\u00e9\n"  # characters a derivation may pick for `.` and negated classes


def exprs(n_rules: int):
    leaves = st.one_of(
        st.tuples(st.just("lit"), st.text(CHARS, min_size=1, max_size=3)),
        st.tuples(st.just("cls"), st.text(CHARS + "c", min_size=1, max_size=3), st.booleans()),
        st.just(("any",)),
        st.tuples(st.just("ref"), st.integers(0, n_rules - 1)),
    )
    bounds = st.sampled_from([(0, None), (1, None), (0, 1), (2, 2), (1, 3), (2, None), (0, 2)])
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(st.just("seq"), st.lists(inner, min_size=2, max_size=3)),
            st.tuples(st.just("alt"), st.lists(inner, min_size=2, max_size=3)),
            st.tuples(st.just("rep"), inner, bounds),
        ),
        max_leaves=6,
    )


@st.composite
def grammars(draw):
    """1 to 3 rules; some in the linear forms rewritten as repetition (`r ::= r x | y`,
    `r ::= x r | y`), some recursive through others."""
    n = draw(st.integers(1, 3))
    rules = []
    for i in range(n):
        form = draw(st.sampled_from(["any", "any", "left", "right"]))
        body = draw(exprs(n))
        if form != "any":
            own = ("ref", i)
            step = ("seq", [own, body] if form == "left" else [body, own])
            body = ("alt", [step, draw(exprs(n))])
        rules.append(body)
    return rules


def gbnf_expr(e) -> str:
    kind = e[0]
    if kind == "lit":
        return '"' + e[1] + '"'
    if kind == "cls":
        return "[" + ("^" if e[2] else "") + e[1] + "]"
    if kind == "any":
        return "."
    if kind == "ref":
        return f"r{e[1]}"
    if kind in ("seq", "alt"):
        return "(" + (" " if kind == "seq" else " | ").join(gbnf_expr(i) for i in e[1]) + ")"
    low, high = e[2]
    suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get(e[2])
    if suffix is None:
        suffix = f"{{{low},{'' if high is None else high}}}" if low != high else f"{{{low}}}"
    return f"({gbnf_expr(e[1])}){suffix}"


def lark_expr(e) -> str:
    kind = e[0]
    if kind == "lit":
        return '"' + e[1] + '"'
    if kind == "cls":
        return "/[" + ("^" if e[2] else "") + "".join(f"\\u{ord(c):04x}" for c in e[1]) + "]/"
    if kind == "any":
        return "/(.|\\n)/"
    if kind == "ref":
        return f"r{e[1]}"
    if kind in ("seq", "alt"):
        return "(" + (" " if kind == "seq" else " | ").join(lark_expr(i) for i in e[1]) + ")"
    item = "(" + lark_expr(e[1]) + ")"
    low, high = e[2]
    suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get(e[2])
    if suffix is not None:
        return item + suffix
    if high is None:
        return f"({item} ~ {low} {item}*)"
    return f"{item} ~ {low}..{high}"


def gbnf_text(rules) -> str:
    return "root ::= r0\n" + "".join(f"r{i} ::= {gbnf_expr(e)}\n" for i, e in enumerate(rules))


def lark_text(rules) -> str:
    return "start: r0\n" + "".join(f"r{i}: {lark_expr(e)}\n" for i, e in enumerate(rules))


class DeadEnd(Exception):
    pass


def derive(rules, e, counts: dict, bound: int, rng: random.Random, out: list) -> None:
    """Append to `out` the text of a random derivation of `e` in which rule i occurs at most
    `bound` times on any path (`counts`: occurrences above); DeadEnd when a choice passes it."""
    kind = e[0]
    if kind == "lit":
        out.append(e[1])
    elif kind == "cls":
        pool = [c for c in POOL if c not in e[1]] if e[2] else list(e[1])
        if not pool:
            raise DeadEnd
        out.append(rng.choice(pool))
    elif kind == "any":
        out.append(rng.choice(POOL))
    elif kind == "ref":
        i = e[1]
        if counts.get(i, 0) >= bound:
            raise DeadEnd
        derive(rules, rules[i], {**counts, i: counts.get(i, 0) + 1}, bound, rng, out)
    elif kind == "seq":
        for item in e[1]:
            derive(rules, item, counts, bound, rng, out)
    elif kind == "alt":
        derive(rules, rng.choice(e[1]), counts, bound, rng, out)
    else:
        low, high = e[2]
        for _ in range(rng.randint(low, low + 2 if high is None else high)):
            derive(rules, e[1], counts, bound, rng, out)


def derivations(rules, bound: int, seed: int, tries: int = 60) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(tries):
        text: list[str] = []
        try:
            derive(rules, ("ref", 0), {}, bound, rng, text)
        except (DeadEnd, RecursionError):
            continue
        out.append("".join(text))
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grammars(), st.integers(0, 2**16))
def test_random_grammars_against_lark(rules, seed):
    lark_grammar = lark_text(rules)
    try:
        compiled = compile_grammar_text(lark_grammar, "lark", max_recursion=3)
    except EmptyLanguageError:
        return  # no string derivable within the bound: nothing to draw
    try:
        gbnf = compile_grammar_text(gbnf_text(rules), "gbnf", max_recursion=3)
    except GrammarError as error:
        assert "left-recursive" in error.reason, error
    else:
        assert np.array_equal(gbnf.dfa.trans, compiled.dfa.trans)
        assert np.array_equal(gbnf.dfa.accept, compiled.dfa.accept)
        assert gbnf.cut_rules == compiled.cut_rules
    oracle = LarkOracle(lark_grammar)
    drawn = samples(compiled.dfa, seed, n=12)
    for s in drawn:
        assert oracle.accepts(s), s
    for s in mutations(drawn, seed, per_text=3, alphabet=POOL):
        ours = compiled.dfa.matches(s.encode("utf-8"))
        if ours or compiled.exact:
            assert ours == oracle.accepts(s), (s, ours)
    for s in derivations(rules, compiled.max_recursion, seed):
        assert compiled.dfa.matches(s.encode("utf-8")), s


@pytest.mark.parametrize(
    "grammar, inside, outside",
    [
        # right-linear and left-linear recursion: rewritten as repetition, exact at any depth
        ("root ::= item root | item\nitem ::= [a-z]", ["a", "abcdefghij"], ["", "1"]),
        ('start: expr\nexpr: expr "+" NUM | NUM\nNUM: /[0-9]+/', ["1", "1+2+3+4+5+6+7"], ["1+"]),
    ],
)
def test_linear_recursion_is_exact(grammar, inside, outside):
    compiled = compile_grammar_text(grammar, "lark" if "start:" in grammar else "gbnf")
    assert compiled.exact
    for s in inside:
        assert compiled.dfa.matches(s.encode())
    for s in outside:
        assert not compiled.dfa.matches(s.encode())

"""bench/engine_check.py: the differential check's categories and its independent oracle."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from engine_check import Oracle, classify, shortest_completion  # noqa: E402


class Tokens:
    """A stand-in vocabulary: token id -> bytes."""

    def __init__(self, tokens):
        self.tokens = tokens


VOCABULARY = Tokens([b"\x7f", b"a\xc2\x85", b"\xd9", b"c", b"ci", b"x", b"\xe0"])


@pytest.mark.parametrize(
    "engine,mine,theirs,rest,expected",
    [
        ("xgrammar", [0, 1], [], b"", "C1 in strings"),
        ("outlines-core", [], [2, 6], b"", "Unicode classes"),
        ("llguidance", [3, 4], [], b'city"', "forced bytes"),
        ("xgrammar", [3, 4], [], b'city"', ""),  # only llguidance is excused for this
        ("llguidance", [3, 5], [], b'city"', ""),  # x is not a prefix of what follows
        ("outlines-core", [0], [2], b"", ""),  # both directions at once
        ("outlines-core@corral-regex", [0], [], b"", ""),  # the same regex: nothing excused
    ],
)
def test_classify(engine, mine, theirs, rest, expected):
    assert classify(engine, mine, theirs, rest, VOCABULARY) == expected


def test_shortest_completion_is_shortest_and_none_when_dead():
    oracle = Oracle("regex", "(cat|car|dog)s?")
    trans, accept = oracle.dfa.trans, oracle.dfa.accept
    assert shortest_completion(trans, accept, 0) == b"car"
    assert shortest_completion(trans, accept, oracle.state_after(b"do")) == b"g"
    assert shortest_completion(np.full((1, 256), -1, np.int32), np.zeros(1, bool), 0) is None


def test_oracle_checks_completions_against_jsonschema():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    oracle = Oracle("schema", schema)
    assert oracle.valid(b'{"n":3}') and not oracle.valid(b'{"n":"3"}')
    assert oracle.invalid_completions(b'{"n":', [b"1", b"-"]) == []
    assert oracle.invalid_completions(b'{"n":', [b'"']) == [b'{"n":"<none>']  # corral: dead


def test_oracle_flags_a_completion_outside_the_language():
    from corral.automata import regex_to_dfa

    oracle = Oracle("regex", "ab")
    oracle.dfa = regex_to_dfa("ab|ac")  # a DFA wider than its pattern: a corral bug to catch
    assert oracle.invalid_completions(b"a", [b"b", b"c"]) == [b"ac"]


class SmallVocabulary(Tokens):
    size, eos_ids = 3, (2,)

    def decode(self, ids):
        return b"".join(self.tokens[t] for t in ids if t != 2)


def packed(*ids):
    row = np.zeros(1, np.uint32)
    for t in ids:
        row[0] |= np.uint32(1 << t)
    return row


def test_disagreements_sort_each_differing_step():
    from engine_check import disagreements

    vocabulary = SmallVocabulary([b"c", b"d", b""])
    corral = {"masks": np.stack([packed(0, 1), packed(0)]), "states": [0, 1], "refused_at": None}
    other = {"masks": np.stack([packed(0), packed(0, 1)]), "refused_at": None}
    found = disagreements("g", "regex", "(cat|car|dog)s?", [0, 0], corral, other, "x", vocabulary)
    assert [category for category, _ in found] == ["corral wider, checked", "corral narrower"]
    assert "corral only 1 [1:b'd']" in found[0][1] and "x only 1 [1:b'd']" in found[1][1]
    same = {"masks": corral["masks"], "refused_at": None}
    assert disagreements("g", "regex", "c", [0], corral, same, "x", vocabulary) == []

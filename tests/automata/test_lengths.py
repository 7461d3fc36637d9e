"""`minLength` / `maxLength` next to a `pattern` (docs/design.md section 3), applied by the product
of the pattern's DFA with a character counter (`corral.automata.schema.lengths.length_product`):
the compiled schema accepts exactly the strings that `re.search` the pattern (classes read as
ASCII, docs/design.md section 2) and whose length in
characters is within the bounds, checked on every string of up to six characters over a small
alphabet of one-, two- and three-byte characters."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from corral.automata import schema_to_dfa
from corral.automata.errors import EmptyLanguageError

ALPHABET = ["a", "b", "é", "日"]
STRINGS = ["".join(p) for n in range(7) for p in itertools.product(ALPHABET, repeat=n)]


@pytest.mark.parametrize(
    ("pattern", "min_len", "max_len"),
    [("^[ab]+$", 0, 3), ("é", 1, 4), ("^(?:a|日日)*b?$", 2, 5), ("a.b", 0, 6), ("^\\w", 3, 3)],
)
def test_length_product_accepts_exactly_the_bounded_matches(pattern, min_len, max_len):
    schema = {"type": "string", "pattern": pattern, "minLength": min_len, "maxLength": max_len}
    dfa = schema_to_dfa(schema)
    for s in STRINGS:
        expected = re.search(pattern, s, re.ASCII) is not None and min_len <= len(s) <= max_len
        text = json.dumps(s, ensure_ascii=False).encode("utf-8")
        assert dfa.matches(text) == expected, s


@pytest.mark.parametrize(
    ("pattern", "min_len"),
    [("^[ab]+$", 3), ("é", 2), ("^(?:a|日日)*b?$", 4), ("a.b", 5), ("^\\w", 1), ("b$", 6)],
)
def test_min_length_alone_accepts_exactly_the_long_enough_matches(pattern, min_len):
    """No `maxLength`: the pattern's strings of at least `minLength` characters, by an
    intersection (the length is unbounded, so no counter product)."""
    dfa = schema_to_dfa({"type": "string", "pattern": pattern, "minLength": min_len})
    for s in STRINGS:
        expected = re.search(pattern, s, re.ASCII) is not None and len(s) >= min_len
        text = json.dumps(s, ensure_ascii=False).encode("utf-8")
        assert dfa.matches(text) == expected, s


def test_min_length_past_every_match_of_a_bounded_pattern_is_an_empty_language():
    with pytest.raises(EmptyLanguageError):
        schema_to_dfa({"type": "string", "pattern": "^a{1,3}$", "minLength": 4})

"""Hypothesis strategies that write pattern text in docs/design.md section 2's regex subset, and a
brute-force minimality check; shared by the regex tests."""

from __future__ import annotations

import itertools
import re

import numpy as np
from hypothesis import strategies as st

LITERALS = list("abcxyz019_ -,:#'\"/") + ["é", "ü", "日", "\U0001f600", "ÿ", "\x7f", "\x01"]
ESCAPED = [r"\.", r"\*", r"\+", r"\?", r"\(", r"\)", r"\[", r"\]", r"\{", r"\}", r"\|", r"\\"]
ESCAPED += [r"\^", r"\$", r"\/", r"\-", r"\"", r"\ "]
ESCAPES = [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S", r"\n", r"\t", r"\r", r"\f", r"\v"]
ESCAPES += [r"\x41", r"\x7f", r"\x00", r"\xe9", r"\u00e9", r"\u65e5", r"\uFFFF"]
CLASS_CHARS = list("abcxyz09_.$^*+?(){}|é日ü😀 ") + [r"\]", r"\\", r"\-", r"\n", r"\b", r"\^"]
CLASS_RANGES = ["a-c", "0-9", "x-z", "A-Z", "à-ÿ", "\x00-\x1f", "é-😀", "一-龥", r"\x20-\x7e"]
CLASS_RANGES += [r"\u0080-\u07ff", r"\u0800-\uffff", r"\u00ff-\u0100", r"\ud7ff-\ue000"]
CLASS_RANGES += ["a-a", " -~", "\U00010000-\U0010ffff"]
CLASS_ESCAPES = [r"\d", r"\w", r"\s", r"\D", r"\W", r"\S"]

literal = st.sampled_from(LITERALS + ESCAPED)
escape = st.sampled_from(ESCAPES)
class_item = st.sampled_from(CLASS_CHARS + CLASS_RANGES + CLASS_ESCAPES)


@st.composite
def bracket(draw) -> str:
    """`[...]` or `[^...]` with chars, ranges and class escapes; sometimes a literal `]` first
    or a literal `-` first or last, as Python reads them."""
    negate = draw(st.sampled_from(["", "^"]))
    head = draw(st.sampled_from(["", "", "", "]", "-"]))
    items = draw(st.lists(class_item, min_size=0 if head else 1, max_size=4))
    if not negate and not head and items[0] == "^":
        items[0] = r"\^"  # a bare ^ first would negate the class instead of being a member
    tail = draw(st.sampled_from(["", "", "", "-"]))
    return f"[{negate}{head}{''.join(items)}{tail}]"


atom = st.one_of(literal, literal, escape, st.just("."), bracket())
quantifier = st.sampled_from(["", "", "", "*", "+", "?"]) | st.tuples(
    st.integers(0, 2), st.integers(0, 2), st.sampled_from(["m", "m,", "m,n", ",n"])
).map(lambda t: "{" + t[2].replace("m", str(t[0])).replace("n", str(t[0] + t[1])) + "}")
GROUP_OPENERS = ["(", "(?:", "(?P<>"]


def _extend(sequences):
    alternation = st.lists(sequences, min_size=1, max_size=3).map("|".join)
    group = st.tuples(st.sampled_from(GROUP_OPENERS), alternation).map(lambda t: f"{t[0]}{t[1]})")
    piece = st.tuples(st.one_of(atom, group), quantifier).map("".join)
    return st.lists(piece, max_size=3).map("".join)


sequence = st.recursive(
    st.lists(st.tuples(atom, quantifier).map("".join), max_size=4).map("".join),
    _extend,
    max_leaves=6,
)


def _name_groups(pattern: str) -> str:
    counter = itertools.count()
    return re.sub(r"\(\?P<>", lambda _: f"(?P<g{next(counter)}>", pattern)


bare_patterns = st.lists(sequence, min_size=1, max_size=3).map(lambda t: _name_groups("|".join(t)))
starts = st.sampled_from(["", "", "", "^", "^^"])
ends = st.sampled_from(["", "", "", "$", "$$"])
anchored_branch = st.tuples(starts, sequence, ends).map("".join)
patterns = st.lists(anchored_branch, min_size=1, max_size=3).map(
    lambda t: _name_groups("|".join(t))
)
"""Patterns of the whole subset, anchors included: any number of `^` at the start and `$` at
the end of each top-level branch (`corral.automata.parse`'s rule)."""

TEXT_ALPHABET = list("abcxyz019_ -,:.\n\t\r]\\{}()|*+?$^#'\"/AZ") + ["é", "ü", "日", "😀", "ÿ"]
TEXT_ALPHABET += ["\x7f", "\x00", "\x01", "\x08", "\x0b", "\x0c", "\x1f", "\uffff", "ǿ", "一", "龥"]
texts = st.text(alphabet=st.sampled_from(TEXT_ALPHABET), max_size=10)


def pattern_pieces(pattern: str) -> st.SearchStrategy[str]:
    """Strings made of the pattern's own characters (and what its escapes stand for)."""
    alphabet = sorted(set(pattern) | {"\n", "\t", "A", "\x7f", "é", "日", "\x00", "\uffff"})
    return st.text(alphabet=st.sampled_from(alphabet), max_size=12)


def equivalent_state_pairs(trans: np.ndarray, accept: np.ndarray) -> list[tuple[int, int]]:
    """All pairs of distinct states with the same language, by the textbook table-filling
    algorithm over bytes (pure Python, independent of corral's minimization): a pair is
    distinguishable when exactly one accepts, or some byte leads one to dead and not the
    other, or to a distinguishable pair; repeat until nothing changes."""
    n = len(accept)
    rows = [list(map(int, trans[s])) for s in range(n)]
    columns = sorted({tuple(r[b] for r in rows) for b in range(256)})  # bytes alike collapse
    moves = [[col[s] for col in columns] for s in range(n)]
    distinct = {(p, q) for p in range(n) for q in range(p + 1, n) if accept[p] != accept[q]}
    changed = True
    while changed:
        changed = False
        for p in range(n):
            for q in range(p + 1, n):
                if (p, q) in distinct:
                    continue
                for a, b in zip(moves[p], moves[q], strict=True):
                    if a == b:
                        continue
                    if a < 0 or b < 0 or (min(a, b), max(a, b)) in distinct:
                        distinct.add((p, q))
                        changed = True
                        break
    return [(p, q) for p in range(n) for q in range(p + 1, n) if (p, q) not in distinct]

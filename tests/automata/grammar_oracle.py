"""The independent oracle of the grammar tests: Lark's Earley parser over the character-level
language (`lexer="dynamic_complete"`: every split of the text into terminals is tried), and
helpers to draw strings from a DFA and mutate them."""

from __future__ import annotations

import numpy as np
from lark import Lark
from lark.exceptions import LarkError


class LarkOracle:
    """Accepts a string when Lark's Earley parser derives it from the grammar's `start`."""

    def __init__(self, text: str):
        self.parser = Lark(text, parser="earley", lexer="dynamic_complete")

    def accepts(self, s: str) -> bool:
        try:
            self.parser.parse(s)
        except LarkError:
            return False
        return True


def samples(dfa, seed: int, n: int, stop_probability: float = 0.3) -> list[str]:
    """`n` strings drawn from `dfa` (`Dfa.sample`), decoded (a DFA of corral only holds
    well-formed UTF-8)."""
    rng = np.random.default_rng(seed)
    return [dfa.sample(rng, stop_probability).decode("utf-8") for _ in range(n)]


def mutations(texts: list[str], seed: int, per_text: int, alphabet: str) -> list[str]:
    """Each text edited `per_text` times at random: a character deleted, inserted (from
    `alphabet` and the text's own), replaced, or a slice doubled."""
    rng = np.random.default_rng(seed)
    out = []
    for text in texts:
        chars = sorted(set(alphabet + text))
        for _ in range(per_text):
            s = list(text)
            i = int(rng.integers(0, len(s) + 1))
            kind = int(rng.integers(0, 4))
            c = chars[int(rng.integers(0, len(chars)))]
            if kind == 0 and s:
                del s[min(i, len(s) - 1)]
            elif kind == 1:
                s.insert(i, c)
            elif kind == 2 and s:
                s[min(i, len(s) - 1)] = c
            else:
                j = int(rng.integers(i, len(s) + 1))
                s[i:i] = s[i:j]
            out.append("".join(s))
    return out

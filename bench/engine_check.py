"""The differential check of bench/engines.py: corral's allowed tokens against another engine's at
every step of a walk, each difference sorted into a documented category (bench/README.md).

Three differences are recognized from the tokens alone (`EXPLAINED`). Any other is sorted by
direction: where corral allows tokens the other engine does not, each such token is checked by
an independent oracle (`wider_is_sound`): the shortest completion corral's DFA gives after the
token must parse with `json.loads` and validate with `jsonschema` (for a regex: match Python's
`re.fullmatch` with `re.ASCII`, docs/design.md section 2). A failed check is a corral bug. Where
only the other engine allows more, corral's language is narrower there (sound; it shows in
coverage).
"""

from __future__ import annotations

import collections
import json
import re

import numpy as np
from engine_adapters import allowed_ids

EXPLAINED = {  # category -> its explanation (bench/README.md, "Disagreements")
    "C1 in strings": "corral allows U+007F-U+009F unescaped inside JSON strings (RFC 8259 and "
    "docs/design.md section 3 do); the other engine does not",
    "Unicode classes": "the other engine's \\d \\w \\s are Unicode (more lead bytes); corral's "
    "are ASCII (docs/design.md section 2, Python's re.ASCII)",
    "forced bytes": "where the grammar forces the next bytes, llguidance allows only their "
    "canonical tokens; corral allows every token spelling a prefix of them",
    "corral wider, checked": "corral allows more here; every extra token's shortest completion "
    "is valid (json.loads + jsonschema, or re.fullmatch): the other engine is narrower",
    "corral narrower": "the other engine allows more here; corral's language is a sound subset "
    "(see bench/README.md for the kinds seen)",
}
BUG = "corral wider, INVALID completion"
SAME_REGEX = "same regex, masks differ"  # outlines-core on corral's own regex: a bug in one


def _has_c1(data: bytes) -> bool:
    """Whether `data` holds U+007F or the UTF-8 of U+0080-U+009F (C2 80 - C2 9F)."""
    return b"\x7f" in data or any(
        data[i] == 0xC2 and 0x80 <= data[i + 1] <= 0x9F for i in range(len(data) - 1)
    )


def classify(engine: str, only_corral, only_other, rest: bytes, vocabulary) -> str:
    """The token-level category of one step's difference, or "" when none fits.

    Args:
        only_corral, only_other: token ids allowed by one engine only.
        rest: the walk's bytes from this step on (the valid continuation being fed).
    """
    if engine.endswith("@corral-regex"):  # the same regex: no language difference to excuse
        return ""
    mine = [vocabulary.tokens[t] or b"" for t in only_corral]
    theirs = [vocabulary.tokens[t] or b"" for t in only_other]
    if mine and not theirs and all(_has_c1(t) for t in mine):
        return "C1 in strings"
    if theirs and not mine and all(max(t, default=0) >= 0x80 for t in theirs):
        return "Unicode classes"
    if engine == "llguidance" and mine and not theirs and all(rest.startswith(t) for t in mine):
        return "forced bytes"
    return ""


def shortest_completion(trans: np.ndarray, accept: np.ndarray, state: int) -> bytes | None:
    """The shortest bytes (smallest bytes first) from `state` to an accepting state of a DFA
    (`trans` int32 `[n, 256]`, -1 dead), or None when there is none. Breadth-first, O(n x 256)."""
    parent = {state: None}
    frontier = [state]
    while frontier:
        following = []
        for s in frontier:
            if accept[s]:
                out = bytearray()
                while parent[s] is not None:
                    s, byte = parent[s]
                    out.append(byte)
                return bytes(reversed(out))
            for byte in np.flatnonzero(trans[s] >= 0):
                t = int(trans[s, byte])
                if t not in parent:
                    parent[t] = (s, int(byte))
                    following.append(t)
        frontier = following
    return None


class Oracle:
    """Checks texts against one grammar, independently of corral: a schema by `json.loads` and
    `jsonschema` (its format checker), a regex by `re.fullmatch(pattern, text, re.ASCII)`."""

    def __init__(self, kind: str, source):
        from corral.automata import regex_to_dfa, schema_to_dfa

        self.kind, self.source = kind, source
        self._completions: dict[int, bytes | None] = {}
        self.dfa = regex_to_dfa(source) if kind == "regex" else schema_to_dfa(source)
        if kind == "schema":
            import jsonschema

            cls = jsonschema.validators.validator_for(source)
            self.validator = cls(source, format_checker=cls.FORMAT_CHECKER)

    def valid(self, data: bytes) -> bool:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if self.kind == "regex":
            return re.fullmatch(self.source, text, re.ASCII) is not None
        try:
            return self.validator.is_valid(json.loads(text))
        except (ValueError, RecursionError):
            return False

    def state_after(self, data: bytes, state: int = 0) -> int:
        """The DFA state after `data` from `state` (-1: dead)."""
        for byte in data:
            state = int(self.dfa.trans[state, byte]) if state >= 0 else -1
        return state

    def completion(self, state: int) -> bytes | None:
        """`shortest_completion` from `state`, remembered per state."""
        if state not in self._completions:
            self._completions[state] = shortest_completion(self.dfa.trans, self.dfa.accept, state)
        return self._completions[state]

    def invalid_completions(self, prefix: bytes, tokens: list[bytes]) -> list[bytes]:
        """The texts, among prefix + token + corral's shortest completion, that fail the oracle
        (a token corral's DFA does not take counts as failed)."""
        bad, start = [], self.state_after(prefix)
        for token in tokens:
            state = self.state_after(token, start)
            rest = (
                shortest_completion(self.dfa.trans, self.dfa.accept, state) if state >= 0 else None
            )
            text = prefix + token + (rest if rest is not None else b"<none>")
            if rest is None or not self.valid(text):
                bad.append(text)
        return bad


def disagreements(
    grammar: str, kind: str, source, walk, corral: dict, other: dict, engine: str, vocabulary
) -> list[tuple[str, str]]:
    """(category, line) for every step where `other`'s allowed set differs from corral's along
    the walk (state, prefix, a few tokens allowed by one only), and for a walk token either
    refused. Categories: `EXPLAINED`'s, `BUG`, or "refused walk token". `kind` and `source` are
    the grammar ("regex" or "schema"), for the oracle."""
    lines, oracle = [], None
    steps = min(len(corral["masks"]), len(other["masks"]))
    for step in range(steps):
        mine, theirs = corral["masks"][step], other["masks"][step]
        if np.array_equal(mine, theirs):
            continue
        # set differences on the packed words (O(V / 32)); np.setdiff1d sorts or hashes ids
        only_mine = allowed_ids(mine & ~theirs, vocabulary.size)
        only_theirs = allowed_ids(theirs & ~mine, vocabulary.size)
        prefix = vocabulary.decode(walk[:step])
        category = classify(
            engine, only_mine, only_theirs, vocabulary.decode(walk[step:]), vocabulary
        )
        note = ""
        if not category and len(only_mine):
            oracle = oracle or Oracle(kind, source)
            eos = set(vocabulary.eos_ids)
            pieces = [vocabulary.tokens[t] for t in only_mine if t not in eos]
            bad = oracle.invalid_completions(prefix, pieces[:50])
            category = BUG if bad else "corral wider, checked"
            note = f" INVALID: {bad[0][-80:]!r}" if bad else ""
        elif not category:
            category = "corral narrower"
        if engine.endswith("@corral-regex") and category != BUG:
            category = SAME_REGEX
        lines.append(
            (
                category,
                f"{grammar} | {engine} | step {step} state {corral['states'][step]} prefix "
                f"{prefix[-60:]!r}: corral only {len(only_mine)} "
                f"{_spell(only_mine[:5], vocabulary)}; {engine} only {len(only_theirs)} "
                f"{_spell(only_theirs[:5], vocabulary)}{note}",
            )
        )
    for who, result in (("corral", corral), (engine, other)):
        if result.get("refused_at") is not None:
            step = result["refused_at"]
            lines.append(
                (
                    "refused walk token",
                    f"{grammar} | {engine} | {who} refused walk token {walk[step]} "
                    f"{_spell([walk[step]], vocabulary)} at step {step} after "
                    f"{vocabulary.decode(walk[:step])[-60:]!r}",
                )
            )
    return lines


def _spell(ids, vocabulary) -> str:
    return "[" + ", ".join(f"{t}:{vocabulary.tokens[t]!r}" for t in ids) + "]"


def summary(diffs: list[tuple[str, str]], examples: int = 2) -> str:
    """Markdown: steps per (engine, category) with the explanation; a few example lines of each
    explained category; the first line of each grammar of the others, and every `BUG` line."""
    counts = collections.Counter((line.split(" | ")[1], cat) for cat, line in diffs)
    out = ["| engine | category | steps | explanation |", "|---|---|---|---|"]
    for (engine, category), n in sorted(counts.items()):
        out.append(f"| {engine} | {category} | {n} | {EXPLAINED.get(category, 'below')} |")
    shown: collections.Counter = collections.Counter()
    seen_grammars = set()
    for category, line in diffs:
        engine, grammar = line.split(" | ")[1], line.split(" | ")[0]
        first = category in ("corral narrower", "corral wider, checked", "refused walk token")
        key = (engine, category)
        if (
            category in (BUG, SAME_REGEX)
            or (first and (grammar, engine, category) not in seen_grammars)
            or (not first and shown[key] < examples)
        ):
            shown[key] += 1
            seen_grammars.add((grammar, engine, category))
            out.append(f"- [{category}] {line}")
    return "\n".join(out)

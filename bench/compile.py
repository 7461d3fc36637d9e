"""Compile benchmark (docs/design.md sections 2 and 3): the time of each stage of the pipeline, for
five patterns, the three schemas of `bench/masks.py` and length-bounded strings.

Run: `python bench/compile.py [--repeats N]`. Prints one line per grammar: the DFA's states
and live edges, then the best time over the repeats (CPU time of this process, in ms) of each
stage: `tree` (pattern parse or schema -> regex tree), `nfa` (Thompson construction), `classes`
(byte classes and each NFA edge's class bitset), `subset` (subset construction), `dead`
(dead-state removal), `minimize` (Moore's rounds, Hopcroft's refinement when they do not
settle), `number` (canonical breadth-first numbering), and their total. Figures are meaningful
only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from corral.automata import parse, schema_to_tree
from corral.automata.compile import deep_recursion
from corral.automata.determinize import classes_of, remove_dead_states, subset_construction
from corral.automata.minimize import minimize, number_breadth_first
from corral.automata.nfa import tree_to_nfa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from masks import CITY_SCHEMA, TOOL_CALL_SCHEMA, TWELVE_PROPERTY_SCHEMA  # noqa: E402

PATTERNS = {
    "worked example": r"(cat|car|dog)s?",
    "JSON string": r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"',
    "ISO date-time": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})",
    "email-like": r"[\w.+-]+@[\w-]+(\.[\w-]+)+",
    "bounded word": r"[a-z]{1,64}",
}

SCHEMAS = {
    "city schema": CITY_SCHEMA,
    "tool-call schema": TOOL_CALL_SCHEMA,
    "12-property schema": TWELVE_PROPERTY_SCHEMA,
    "maxLength 100": {"type": "string", "maxLength": 100},
    "two long strings": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 256},
            "body": {"type": "string", "minLength": 3, "maxLength": 200},
        },
    },
}

STAGES = ("tree", "nfa", "classes", "subset", "dead", "minimize", "number")


def stage_times(make_tree) -> tuple[list[float], object]:
    """(seconds of CPU per stage, the Dfa) of one compile; `make_tree()` gives the regex tree."""
    clock = time.process_time
    marks = [clock()]
    with deep_recursion():
        node = make_tree()
        marks.append(clock())
        nfa = tree_to_nfa(node)
        marks.append(clock())
        byte_to_class, class_sets = classes_of(nfa.edge_mask)
        marks.append(clock())
        trans, accept = subset_construction(nfa, byte_to_class, None, class_sets)
        marks.append(clock())
        trans, accept = remove_dead_states(trans, accept)
        marks.append(clock())
        trans, accept = minimize(trans, accept)
        marks.append(clock())
        dfa = number_breadth_first(trans, accept, byte_to_class)
        marks.append(clock())
    return [b - a for a, b in zip(marks, marks[1:], strict=False)], dfa


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11, help="compiles per grammar")
    args = parser.parse_args()
    grammars = [(name, lambda p=p: parse(p)) for name, p in PATTERNS.items()]
    grammars += [(name, lambda s=s: schema_to_tree(s)) for name, s in SCHEMAS.items()]
    print(
        f"{'grammar':<20} {'states':>6} {'edges':>6} "
        + " ".join(f"{s:>8}" for s in (*STAGES, "total"))
    )
    for name, make_tree in grammars:
        runs = [stage_times(make_tree) for _ in range(args.repeats)]
        best = [min(r[0][i] for r in runs) * 1e3 for i in range(len(STAGES))]
        dfa = runs[-1][1]
        cells = " ".join(f"{t:8.2f}" for t in (*best, sum(best)))
        print(f"{name:<20} {dfa.n_states:>6} {dfa.n_live_edges:>6} {cells}")
    print("ms of CPU, best of the repeats per stage; total: the sum of the stages' bests.")


if __name__ == "__main__":
    main()

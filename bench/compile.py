"""Compile benchmark (docs/design.md sections 2 and 3): the time of each stage of the pipeline, for
five patterns, the three schemas of `bench/masks.py` and length-bounded strings.

Run: `python bench/compile.py [--repeats N]`; `python bench/compile.py --tools` instead times
tool-call grammars of many tools (docs/tools.md, "Many tools: stitched grammars").
Prints one line per grammar: the DFA's states and live edges, then the best time over the
repeats (CPU time of this process, in ms) of each stage: `tree` (pattern parse or schema ->
regex tree), `nfa` (Thompson construction), `classes`
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


def small_tools(n: int) -> list[dict]:
    """`n` tools of one integer and one short string each, their names and members distinct."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"count_{i}": {"type": "integer"},
                        f"label_{i}": {"type": "string", "maxLength": 12},
                    },
                    "required": [f"count_{i}", f"label_{i}"],
                },
            },
        }
        for i in range(n)
    ]


def bfcl_functions(n: int) -> list[dict]:
    """The first `n` distinct functions (by name) of the BFCL files in the full data
    ($CORRAL_TEST_DATA, else ../shared/data beside the checkout) whose parameters corral
    compiles, as OpenAI tools."""
    import json
    import os

    from corral.tools import ToolError, bfcl_tools
    from corral.tools import grammar as tool_grammar

    root = Path(__file__).resolve().parent.parent
    data = Path(os.environ.get("CORRAL_TEST_DATA", root.parent / "shared" / "data"))
    seen: dict[str, dict] = {}
    for path in sorted((data / "bfcl").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            for function in json.loads(line)["function"]:
                seen.setdefault(function["name"], function)
    tools = []
    for tool in bfcl_tools(list(seen.values())):
        try:
            tool_grammar._tree(tool_grammar.Arguments(tool["function"]["parameters"], "p"))
        except ToolError:
            continue
        tools.append(tool)
    return tools[:n]


def tools_main() -> None:
    """Per tool list and tool_choice: the stitched DFA's states and table size, the wall time
    of `compile_dfa` with the piece cache empty (cold) and full (warm: the envelope compiled
    and the pieces stitched), and the old one-shot compile of the whole tree (or its error)."""
    from corral.automata import ConstrainError, tree_to_dfa
    from corral.tools import grammar as tool_grammar
    from corral.tools import parse_tool_request

    clock = time.perf_counter
    lists = {"48 small": small_tools(48), "48 BFCL": bfcl_functions(48)}
    lists["128 BFCL"] = bfcl_functions(128)
    print(
        f"{'tools':<9} {'choice':<9} {'states':>7} {'MiB':>5} {'cold s':>7} {'warm s':>7}  at once"
    )
    for name, tools in lists.items():
        last = {"type": "function", "function": {"name": tools[-1]["function"]["name"]}}
        for label, choice in (("required", "required"), ("named", last), ("auto", "auto")):
            body = {"messages": [{"role": "user", "content": "Go."}], "tools": tools}
            g = tool_grammar.grammar(parse_tool_request({**body, "tool_choice": choice}))
            tool_grammar._pieces.clear()
            start = clock()
            dfa = tool_grammar.compile_dfa(g)
            cold = clock() - start
            start = clock()
            tool_grammar.compile_dfa(g)
            warm = clock() - start
            start = clock()
            try:
                once = f"{tree_to_dfa(g.tree).n_states} states, {clock() - start:.2f} s"
            except ConstrainError as error:
                once = f"refused after {clock() - start:.2f} s: {error}"
            mib = dfa.trans.nbytes / 2**20
            print(
                f"{name:<9} {label:<9} {dfa.n_states:>7} {mib:>5.0f} {cold:>7.2f} {warm:>7.2f}",
                once,
            )
    print("wall seconds, one run each; at once: the whole grammar in one compile, as before.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=11, help="compiles per grammar")
    parser.add_argument("--tools", action="store_true", help="time grammars of many tools")
    args = parser.parse_args()
    if args.tools:
        tools_main()
        return
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

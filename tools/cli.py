"""The `corral` command line: `corral compile` (a pattern or schema to its DFA) and
`corral generate` (the main job, DESIGN.md section 7)."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _compile(args: argparse.Namespace) -> int:
    from corral.automata import ConstrainError, regex_to_dfa

    try:
        dfa = regex_to_dfa(args.pattern)
    except ConstrainError as error:
        print(f"corral compile: {error}", file=sys.stderr)
        return 2
    accepting = np.flatnonzero(dfa.accept).tolist()
    print(f"states: {dfa.n_states}  live edges: {dfa.n_live_edges}  accepting: {accepting}")
    if args.json:
        print(json.dumps({"trans": dfa.trans.tolist(), "accept": dfa.accept.tolist()}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `corral` console script."""
    parser = argparse.ArgumentParser(prog="corral", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser("compile", help="compile a regex to its canonical byte DFA")
    compile_.add_argument("pattern")
    compile_.add_argument("--json", action="store_true", help="print the whole table as JSON")
    compile_.set_defaults(run=_compile)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

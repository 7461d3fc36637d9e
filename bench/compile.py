"""Regex compile benchmark (DESIGN.md section 2): median compile time and DFA size for five
patterns.

Run: `python bench/compile.py [--repeats N]`. Prints one line per pattern: median wall time of
`regex_to_dfa` over the repeats, the number of states and live edges. Figures are meaningful only
on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

from corral.automata import regex_to_dfa

PATTERNS = {
    "worked example": r"(cat|car|dog)s?",
    "JSON string": r'"([^"\\\x00-\x1f]|\\(["\\/bfnrt]|u[0-9a-fA-F]{4}))*"',
    "ISO date-time": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})",
    "email-like": r"[\w.+-]+@[\w-]+(\.[\w-]+)+",
    "bounded word": r"[a-z]{1,64}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21, help="compiles per pattern")
    args = parser.parse_args()
    print(f"{'pattern':<16} {'median ms':>10} {'states':>7} {'live edges':>11}")
    for name, pattern in PATTERNS.items():
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            dfa = regex_to_dfa(pattern)
            times.append(time.perf_counter() - start)
        median_ms = 1000 * statistics.median(times)
        print(f"{name:<16} {median_ms:>10.2f} {dfa.n_states:>7} {dfa.n_live_edges:>11}")


if __name__ == "__main__":
    main()

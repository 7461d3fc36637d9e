"""Schema coverage on JSONSchemaBench: every schema in ../shared/data/jsonschemabench/
through `compile_schema_dfa`, per subset compiled (exact, and narrowed: compiled with lower
string, array or `$ref` bounds to fit the state limits, docs/subsets.md) / refused, the ten most
common refusal reasons, and the median and worst compile time (schema -> DFA, seconds of wall
time); docs/design.md section 3. With `--llguidance`, also the schemas llguidance compiles (its
`LLMatcher.validate_grammar` on the grammar of each schema, aligned as bench/engine_adapters.py
aligns it: compact JSON, no extra members), the same alarm on each.

One schema cannot hang the run: the regex limits are the library's (`corral.automata.Limits`;
`--max-nfa-states`, `--max-dfa-states` change them) and a wall-clock alarm (`--timeout`,
SIGALRM) counts a schema that runs past it as refused with reason "timeout".

    .venv/bin/python bench/schema_coverage.py [--data DIR] [--subset NAME ...] [--timeout 10]
        [--slowest 20] [--llguidance]

`--slowest N` ends with the N slowest compiles, by CPU seconds, as `subset id seconds` lines:
the file `--ids` reads.

With `--ids FILE` (lines `subset id ...`, as the slowest-schemas lists are kept; other lines are
skipped) it compiles only those schemas, in the file's order, and prints one line each: the CPU
seconds of the compile (`time.process_time`, so other processes on the machine count less), the
DFA's states and a SHA-256 prefix of its table bytes (trans then accept), to compare the
language before and after a change:

    .venv/bin/python bench/schema_coverage.py --ids slow.txt
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import re
import signal
import statistics
import sys
import time
from pathlib import Path

from corral.automata import (
    ConstrainError,
    LimitError,
    Limits,
    SchemaError,
    compile_schema_dfa,
    schema_to_dfa,
)

DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "jsonschemabench"


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout()


def reason_of(error: Exception) -> str:
    """A short, schema-independent name for a refusal (quoted values elided)."""
    if isinstance(error, _Timeout):
        return "timeout"
    if isinstance(error, SchemaError):
        text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", error.reason)
        keyword = error.keyword or "-"
        if text.startswith("keyword … is not supported"):
            text = text[len("keyword … is not supported") :].lstrip(": ") or "unsupported"
        return f"{keyword}: {text}"[:90]
    if isinstance(error, LimitError):
        return f"limit {error.limit}"
    return type(error).__name__


def llguidance_compiles(schema) -> bool:
    """True when llguidance 1.9.1 takes `schema`, aligned as bench/engine_adapters.py does."""
    import llguidance
    from engine_adapters import forbid_extra_members

    options = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            forbid_extra_members(schema), overrides=options
        )
        return not llguidance.LLMatcher.validate_grammar(grammar)
    except (ValueError, TypeError, RuntimeError):
        return False


def _alarmed(timeout: float, call, *args):
    """`call(*args)` under a one-shot wall-clock alarm of `timeout` seconds (raises `_Timeout`)."""
    try:  # the one-shot alarm may fire anywhere inside: the `finally` clears it
        signal.setitimer(signal.ITIMER_REAL, timeout)
        return call(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def run(
    data: Path,
    subsets: list[str],
    limits: Limits,
    timeout: float,
    slowest: int = 0,
    llguidance: bool = False,
) -> int:
    signal.signal(signal.SIGALRM, _on_alarm)
    cpu_times: list[tuple[float, str, str]] = []  # (CPU s, subset, id) of every compiled schema
    files = sorted(data.glob("*.jsonl"))
    if subsets:
        files = [f for f in files if f.stem in subsets]
    rows = []
    all_reasons: collections.Counter = collections.Counter()
    all_times: list[float] = []
    worst = (0.0, "")
    for path in files:
        exact = narrowed = refused = theirs = 0
        times: list[float] = []
        for line in path.open(encoding="utf-8"):
            record = json.loads(line)
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                compiled = _alarmed(timeout, compile_schema_dfa, record["schema"], limits)
                ok, error = True, None
            except (ConstrainError, _Timeout, RecursionError) as caught:
                ok, error = False, caught
            elapsed = time.perf_counter() - start
            if ok:
                cpu_times.append((time.process_time() - cpu_start, path.stem, str(record["id"])))
                exact += compiled.exact
                narrowed += compiled.narrowed
                times.append(elapsed)
                if elapsed > worst[0]:
                    worst = (elapsed, f"{path.stem}/{record['id']}")
            else:
                refused += 1
                all_reasons[reason_of(error)] += 1
            if llguidance:
                with contextlib.suppress(_Timeout, RecursionError):
                    theirs += _alarmed(timeout, llguidance_compiles, record["schema"])
        all_times += times
        median = statistics.median(times) if times else 0.0
        top = max(times, default=0.0)
        rows.append((path.stem, exact, narrowed, refused, theirs, median, top))
        compiled_n = exact + narrowed
        print(
            f"{path.stem:16} compiled {compiled_n:5} (exact {exact}, narrowed {narrowed}) "
            f"refused {refused:5} ({100 * compiled_n / max(compiled_n + refused, 1):5.1f}%)  "
            + (f"llguidance {theirs:5}  " if llguidance else "")
            + f"median {median:.3f}s  worst {top:.2f}s",
            flush=True,
        )
    total = [sum(r[i] for r in rows) for i in range(1, 5)]
    print()
    theirs_head = " llguidance |" if llguidance else ""
    print(
        f"| subset | schemas | compiled | exact | narrowed | refused | compiled % |{theirs_head}"
        " median s | worst s |"
    )
    print("|---" * (9 + llguidance) + "|")
    for name, ok_exact, ok_narrowed, bad, theirs, median, top in rows:
        line = _row(name, ok_exact, ok_narrowed, bad, theirs if llguidance else None)
        print(f"{line} {median:.3f} | {top:.2f} |")
    line = _row("**all**", *total[:3], total[3] if llguidance else None)
    print(
        f"{line} {statistics.median(all_times) if all_times else 0:.3f} | "
        f"{worst[0]:.2f} ({worst[1]}) |"
    )
    print()
    print("Ten most common refusal reasons:")
    for reason, count in all_reasons.most_common(10):
        print(f"{count:6}  {reason}")
    if slowest:
        print()
        print(f"The {slowest} slowest compiles (subset id CPU-seconds; a file for --ids):")
        for seconds, subset, ident in sorted(cpu_times, reverse=True)[:slowest]:
            print(f"{subset} {ident} {seconds:.2f}")
    return 0


def _row(name: str, exact: int, narrowed: int, refused: int, theirs: int | None) -> str:
    """A table row's counts, up to the median: compiled = exact + narrowed."""
    ok, total = exact + narrowed, exact + narrowed + refused
    cells = [name, total, ok, exact, narrowed, refused, f"{100 * ok / max(total, 1):.1f}"]
    if theirs is not None:
        cells.append(theirs)
    return "| " + " | ".join(str(c) for c in cells) + " |"


def run_ids(data: Path, ids_file: Path, limits: Limits) -> int:
    """One line per schema listed in `ids_file`: CPU seconds, states, table digest."""
    wanted = []
    for line in ids_file.open(encoding="utf-8"):
        parts = line.split()
        if len(parts) >= 2 and (data / f"{parts[0]}.jsonl").is_file():
            wanted.append((parts[0], parts[1]))
    schemas = {}
    for subset in sorted({subset for subset, _ in wanted}):
        for line in (data / f"{subset}.jsonl").open(encoding="utf-8"):
            record = json.loads(line)
            schemas[(subset, str(record["id"]))] = record["schema"]
    print("| schema | CPU s | states | table sha256 |")
    print("|---|---|---|---|")
    for key in wanted:
        start = time.process_time()
        try:
            dfa = schema_to_dfa(schemas[key], limits)
            digest = hashlib.sha256(dfa.trans.tobytes() + dfa.accept.tobytes()).hexdigest()[:16]
            states = str(dfa.n_states)
        except (ConstrainError, RecursionError) as error:
            digest, states = reason_of(error), "-"
        seconds = time.process_time() - start
        print(f"| {key[0]}/{key[1]} | {seconds:.2f} | {states} | {digest} |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--subset", action="append", default=[], help="only these subsets")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per schema")
    parser.add_argument("--ids", type=Path, help="only these schemas, one line each (CPU s)")
    parser.add_argument(
        "--slowest", type=int, default=0, help="list the N slowest compiles (CPU s) at the end"
    )
    defaults = Limits()  # the library's own limits unless told otherwise
    parser.add_argument("--max-nfa-states", type=int, default=defaults.max_nfa_states)
    parser.add_argument("--max-dfa-states", type=int, default=defaults.max_dfa_states)
    parser.add_argument(
        "--llguidance", action="store_true", help="also count the schemas llguidance compiles"
    )
    args = parser.parse_args(argv)
    limits = Limits(max_nfa_states=args.max_nfa_states, max_dfa_states=args.max_dfa_states)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 50_000))
    if args.ids is not None:
        return run_ids(args.data, args.ids, limits)
    return run(args.data, args.subset, limits, args.timeout, args.slowest, args.llguidance)


if __name__ == "__main__":
    sys.exit(main())

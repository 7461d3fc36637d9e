"""A hypothesis search for slow compiles at the default limits (issue 33, item 9): patterns and
schemas of the kinds whose compile grows fast in their length (nested bounded repeats, optional
items, alternations of long literals, character classes; in schemas, a pattern with a length
bound and `allOf` intersections of patterns), each compiled or refused, its CPU time the target
hypothesis maximizes. Prints the slowest found, with what each ended in.

    .venv/bin/python bench/compile_bounds.py --examples 400

Figures are CPU seconds (`time.process_time`) of one process; run it alone on a quiet machine.
A compile past `--cap` seconds is stopped and reported as "stopped" (a bound that does not hold).
"""

from __future__ import annotations

import argparse
import heapq
import signal
import sys
import time

from corral.automata import ConstrainError, regex_to_dfa, schema_to_dfa
from hypothesis import HealthCheck, given, settings, target
from hypothesis import strategies as st

LITERALS = st.text("abc", min_size=1, max_size=40)
CLASSES = st.sampled_from(["[a-z]", "[ab]", ".", "\\d", "[^a]", "\\w", "é", "[α-ω]"])


@st.composite
def patterns(draw, depth: int = 0) -> str:
    kind = draw(st.sampled_from(["literal", "class", "optional", "alternation", "repeat", "seq"]))
    if depth >= 3 or kind == "literal":
        return draw(LITERALS)
    if kind == "class":
        return draw(CLASSES)
    inner = draw(patterns(depth + 1))
    if kind == "optional":
        return f"({inner})?"
    if kind == "alternation":
        items = [inner] + draw(st.lists(patterns(depth + 1), min_size=1, max_size=6))
        return "(" + "|".join(items) + ")"
    if kind == "seq":
        return f"({inner})({draw(patterns(depth + 1))})"
    lo = draw(st.integers(0, 1000))
    hi = draw(st.one_of(st.none(), st.integers(lo, 1000)))
    return f"({inner}){{{lo},{'' if hi is None else hi}}}"


@st.composite
def jobs(draw) -> tuple[str, object]:
    """("regex", pattern) or ("schema", schema)."""
    pattern = draw(patterns())
    form = draw(st.sampled_from(["regex", "pattern", "length", "allOf"]))
    if form == "regex":
        return "regex", pattern
    schema: dict = {"type": "string", "pattern": pattern}
    if form == "length":
        schema["maxLength"] = draw(st.integers(1, 256))
    if form == "allOf":
        other = {"pattern": draw(patterns())}
        schema = {"type": "string", "allOf": [{"pattern": pattern}, other]}
    return "schema", schema


class _Stopped(Exception):
    pass


def _stop(signum, frame):
    raise _Stopped()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=400)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before a compile stops")
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    slowest: list[tuple[float, str, str]] = []
    signal.signal(signal.SIGALRM, _stop)

    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(job=jobs())
    def search(job):
        kind, value = job
        start = time.process_time()
        signal.setitimer(signal.ITIMER_REAL, args.cap, 0.5)  # again each 0.5 s if swallowed
        try:
            (regex_to_dfa if kind == "regex" else schema_to_dfa)(value)
            outcome = "compiled"
        except ConstrainError as error:
            outcome = type(error).__name__ + (
                f" ({error.limit})" if hasattr(error, "limit") else ""
            )
        except RecursionError:
            outcome = "RecursionError"
        except _Stopped:
            outcome = "stopped"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        seconds = time.process_time() - start
        target(seconds)
        if seconds > 1:
            print(f"  {seconds:.2f}s {outcome}: {value!r}"[:400], file=sys.stderr, flush=True)
        item = (seconds, repr(value)[:160], outcome)
        if len(slowest) < args.top:
            heapq.heappush(slowest, item)
        else:
            heapq.heappushpop(slowest, item)

    search()
    print(f"slowest of {args.examples} examples (CPU seconds, input, outcome):")
    for seconds, value, outcome in sorted(slowest, reverse=True):
        print(f"{seconds:7.2f}  {outcome:40}  {value}")


if __name__ == "__main__":
    main()

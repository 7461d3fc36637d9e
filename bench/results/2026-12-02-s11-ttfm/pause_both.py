"""Time to first mask (compile, start, first mask, as engines.py's `measure` times it) of corral
and llguidance in one process each, every compile after a pause of `--pause` seconds (0: back to
back), over bench/masks.py's five grammars; medians of `--rounds`, ms. Printed, not asserted.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/results/2026-12-02-s11-ttfm/pause_both.py
        --engine corral|llguidance [--pause SECONDS] [--rounds N]
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/

from engine_adapters import make_engine  # noqa: E402
from engine_workers import WARM_UP, load_vocabulary  # noqa: E402
from masks import GRAMMARS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", default="corral")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    vocabulary, tokenizer_json = load_vocabulary()
    engine = make_engine(args.engine, vocabulary, tokenizer_json, 1)
    for kind, source in WARM_UP:
        engine.start(engine.compile(kind, source)).fill()
    out = []
    for name, kind, source in GRAMMARS:
        times = []
        for round_ in range(args.rounds):
            # a fresh copy of a schema; a regex behind a different number of empty groups
            fresh = copy.deepcopy(source) if kind == "schema" else "(?:)" * round_ + source
            time.sleep(args.pause)
            start = time.perf_counter()
            engine.start(engine.compile(kind, fresh)).fill()
            times.append(time.perf_counter() - start)
        out.append(f"{name} {1e3 * statistics.median(times):.3f}")
    print(f"{args.engine} pause {args.pause}: " + "; ".join(out))


if __name__ == "__main__":
    main()

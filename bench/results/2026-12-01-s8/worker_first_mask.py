"""Time to first mask in one process set up as bench/engines.py's corral worker is (the same
`make_engine` and warm-up), through the worker's own `measure`, with the garbage collections
that ran during each compile; printed, not asserted. Run from the repository root:

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/results/2026-12-01-s8/worker_first_mask.py
"""

import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/

from engine_adapters import make_engine  # noqa: E402
from engine_workers import WARM_UP, load_vocabulary, measure  # noqa: E402
from masks import CITY_SCHEMA, TOOL_CALL_SCHEMA, TWELVE_PROPERTY_SCHEMA  # noqa: E402

GRAMMARS = [
    ("(cat|car|dog)s?", "regex", "(cat|car|dog)s?"),
    ("city schema", "schema", CITY_SCHEMA),
    ("tool-call schema", "schema", TOOL_CALL_SCHEMA),
    ("12-property schema", "schema", TWELVE_PROPERTY_SCHEMA),
]


def main() -> None:
    vocabulary, tokenizer_json = load_vocabulary()
    engine = make_engine("corral", vocabulary, tokenizer_json, 1)
    for kind, source in WARM_UP:
        engine.start(engine.compile(kind, source)).fill()
    collections, started = [], [0.0]

    def on_gc(phase, info):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))

    gc.callbacks.append(on_gc)
    for name, kind, source in GRAMMARS:
        collections.clear()
        result = measure(engine, kind, source, [])
        spent = ", ".join(f"gen {g} {1e3 * s:.2f} ms" for g, s in collections) or "none"
        print(f"{name}: first mask {1e3 * result['first_mask_s']:.2f} ms; collections: {spent}")


if __name__ == "__main__":
    main()

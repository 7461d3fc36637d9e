"""Time to first mask in-process: corral-lazy against llguidance on the schemas named, each
engine's `compile` + `start` + first `fill` (as bench/engines.py's `measure` times it), min and
median of `--repeats` runs, alternating engines, over one vocabulary (docs/benchmarks.md, "The
lazy first mask").

    .venv/bin/python bench/first_mask.py --vocab llama3 --repeats 15 \\
        --schema 12prop --schema Github_medium/o9771 --schema Github_hard/o71565

A schema is `12prop` (bench/masks.py's 12-property schema) or SUBSET/ID of JSONSchemaBench in
`--data`. The machine's load moves the figures: compare the engines within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from engine_adapters import CorralLazyEngine, LLGuidanceEngine  # noqa: E402
from engine_workers import load_vocabulary  # noqa: E402
from masks import TWELVE_PROPERTY_SCHEMA  # noqa: E402


def load_schema(name: str, data: Path) -> dict:
    if name == "12prop":
        return TWELVE_PROPERTY_SCHEMA
    subset, wanted = name.split("/")
    for line in (data / "jsonschemabench" / f"{subset}.jsonl").open(encoding="utf-8"):
        record = json.loads(line)
        if record["id"] == wanted:
            return record["schema"]
    raise KeyError(name)


def first_mask_s(engine, schema) -> float:
    engine.forget()
    start = time.perf_counter()
    session = engine.start(engine.compile("schema", schema))
    session.fill()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default="llama3")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--schema", action="append", default=[])
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    args = parser.parse_args()
    vocabulary, tokenizer_json = load_vocabulary(args.vocab)
    engines = [
        CorralLazyEngine(vocabulary, tokenizer_json),
        LLGuidanceEngine(vocabulary, tokenizer_json),
    ]
    for name in args.schema or ["12prop"]:
        schema = load_schema(name, args.data)
        runs: dict[str, list[float]] = {e.name: [] for e in engines}
        for engine in engines:
            first_mask_s(engine, schema)  # warm-up
        for _ in range(args.repeats):
            for engine in engines:
                runs[engine.name].append(first_mask_s(engine, schema))
        cells = [
            f"{e}: min {min(r) * 1e3:.2f} ms, median {statistics.median(r) * 1e3:.2f} ms"
            for e, r in runs.items()
        ]
        lazy, llg = (statistics.median(r) for r in runs.values())
        print(f"{name}: " + "; ".join(cells) + f"; median ratio {lazy / llg:.2f}", flush=True)


if __name__ == "__main__":
    main()

"""corral's per-step masks over a `bench/engines.py --json` run's sample, replayed in one
process: p50, p99 and mean of the steps (the adapter's `fill`, as the bench times it), and the
slowest steps with the state's mode, DFA size and run (`own`, `run`, `loops`), to find what
makes the tail. Figures only; the machine's load moves them, so compare runs taken in turns.

Run:  .venv/bin/python bench/engine_tail.py --vocab gemma4 --json out.json [--only o41033]
          [--top 40]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from engine_adapters import CorralEngine
from engine_workers import VOCABULARIES, load_vocabulary, warm_up
from engines import DEFAULT_DATA, WALK_STEPS, compact, read_subsets
from tokenizers import Tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", choices=sorted(VOCABULARIES), required=True)
    parser.add_argument("--json", required=True, help="a bench/engines.py --json file")
    parser.add_argument("--only", action="append", default=[], help="labels containing this")
    parser.add_argument("--top", type=int, default=40, help="slowest steps to print")
    args = parser.parse_args(argv)
    with open(args.json) as f:
        labels = list(json.load(f)["sample_per_schema"])
    labels = [x for x in labels if not args.only or any(o in x for o in args.only)]
    vocabulary, tokenizer_json = load_vocabulary(args.vocab)
    tokenizer = Tokenizer.from_str(tokenizer_json)
    engine = CorralEngine(vocabulary, tokenizer_json)
    warm_up(engine)
    data = read_subsets(DEFAULT_DATA, sorted({x.split("/")[0] for x in labels}))
    steps = []
    for label in labels:
        subset, name = label.split("/", 1)
        record = next(r for r in data[subset] if r["id"] == name)
        index = engine.compile("schema", record["schema"])
        text = compact(next(t for t in record["tests"] if t["valid"])["data"])
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        walk = [*ids, vocabulary.eos_ids[0]][:WALK_STEPS]
        session = engine.start(index)
        session.fill()
        for i, token in enumerate(walk[:-1]):
            if not session.advance(token):
                break
            start = time.perf_counter()
            session.fill()
            seconds = time.perf_counter() - start
            s = session.state
            run = (hex(index._own[s]), int(index._run[s]), hex(index._loops[s]))
            steps.append((seconds * 1e6, label, i, s, index.mode, index.n_states, *run))
    times = np.array([x[0] for x in steps])
    print(f"steps {len(times)}  p50 {np.median(times):.2f} us  p99 "
          f"{np.percentile(times, 99):.1f} us  mean {times.mean():.2f} us")  # fmt: skip
    print("us label step state mode n_states own run loops")
    for x in sorted(steps, reverse=True)[: args.top]:
        print(f"{x[0]:.0f}", *x[1:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

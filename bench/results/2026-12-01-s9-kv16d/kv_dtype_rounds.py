"""Decode steps at batch 32 and 64 with the float32 and the float16 KV cache in turn
(`Model.kv_dtype`), as ../2026-12-01-s8/kv_dtype_step.py, with every round's figures and ratio
printed: on a shared machine the medians of the two arms move with the other workers' load,
the paired ratios much less. Timed by bench/model.py's `step_breakdown`; printed, not asserted.

    .venv/bin/python bench/results/2026-12-01-s9-kv16d/kv_dtype_rounds.py ROUNDS STEPS [BATCH ...]
"""

import importlib.util
import os
import statistics
import sys
from pathlib import Path

import numpy as np
from corral.model import load_model

BENCH = Path(__file__).resolve().parents[2] / "model.py"


def main() -> None:
    spec = importlib.util.spec_from_file_location("bench_model", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    model = load_model(progress=False)
    rounds, steps = int(sys.argv[1]), int(sys.argv[2])
    for batch in [int(b) for b in sys.argv[3:]] or [32, 64]:
        runs = {"float32": [], "float16": []}
        for i in range(rounds):
            for name in runs:
                model.kv_dtype = np.dtype(name).type
                runs[name].append(bench.step_breakdown(model, batch, steps))
            a, b = runs["float32"][-1], runs["float16"][-1]
            print(f"batch {batch} round {i}: step ms {sum(a.values()):.1f} -> "
                  f"{sum(b.values()):.1f} (x{sum(b.values()) / sum(a.values()):.2f}), attention "
                  f"ms {a['attention']:.1f} -> {b['attention']:.1f} "
                  f"(x{b['attention'] / a['attention']:.2f}), load average "
                  f"{os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
        for name, parts in runs.items():
            step = statistics.median(sum(p.values()) for p in parts)
            attention = statistics.median(p["attention"] for p in parts)
            print(f"batch {batch} {name}: step ms median {step:.1f}, attention ms median "
                  f"{attention:.1f}, tokens/s {batch / step * 1e3:.0f}", flush=True)  # fmt: skip
        pairs = list(zip(runs["float32"], runs["float16"], strict=True))
        step_ratio = statistics.median(sum(b.values()) / sum(a.values()) for a, b in pairs)
        attention_ratio = statistics.median(b["attention"] / a["attention"] for a, b in pairs)
        print(f"batch {batch}: float16/float32, medians of the paired rounds: step "
              f"{step_ratio:.2f}, attention {attention_ratio:.2f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

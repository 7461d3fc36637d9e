"""Decode step at batch 32/64 with the float32 and the float16 KV cache, interleaved
(bench/model.py's step_breakdown, imported as is)."""
import importlib.util, statistics, sys
import numpy as np
from corral.model import load_model

spec = importlib.util.spec_from_file_location("bench_model", "bench/model.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)
model = load_model(progress=False)
rounds, steps = int(sys.argv[1]), int(sys.argv[2])
batches = [int(b) for b in sys.argv[3:]] or [32, 64]
for batch in batches:
    results = {"float32": [], "float16": []}
    for _ in range(rounds):
        for name, dtype in (("float32", np.float32), ("float16", np.float16)):
            model.kv_dtype = dtype
            results[name].append(bench.step_breakdown(model, batch, steps))
    for name, runs in results.items():
        total = [sum(r.values()) for r in runs]
        attn = [r["attention"] for r in runs]
        med = statistics.median(total)
        print(f"batch {batch} {name}: step ms median {med:.1f} (runs {', '.join(f'{t:.1f}' for t in total)}), "
              f"attention ms median {statistics.median(attn):.1f} (runs {', '.join(f'{a:.1f}' for a in attn)}), "
              f"tokens/s {batch / med * 1e3:.0f}", flush=True)
    t32 = statistics.median(sum(r.values()) for r in results["float32"])
    t16 = statistics.median(sum(r.values()) for r in results["float16"])
    a32 = statistics.median(r["attention"] for r in results["float32"])
    a16 = statistics.median(r["attention"] for r in results["float16"])
    print(f"batch {batch}: float16/float32 step {t16 / t32:.3f}, attention {a16 / a32:.3f}", flush=True)
    ratios = [r16["attention"] / r32["attention"] for r32, r16 in zip(results["float32"], results["float16"])]
    step_ratios = [sum(r16.values()) / sum(r32.values()) for r32, r16 in zip(results["float32"], results["float16"])]
    print(f"batch {batch}: paired rounds, attention f16/f32 {', '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}); "
          f"step f16/f32 {', '.join(f'{x:.2f}' for x in step_ratios)} (median {statistics.median(step_ratios):.2f})", flush=True)

"""Resident memory of a 1.5B Q4_K_M model decoding at batch 1 over a 4k context (issue 38's
memory goal: under 2 GB, no float32 copy of any K-quant matrix). Printed, not asserted.

    .venv/bin/python bench/memory.py                         # writes the model once, runs
    .venv/bin/python bench/memory.py --model /tmp/q15.gguf   # that file (written if missing)

The model is synthetic, `synthetic.py`'s `qwen2.5-1.5b` in Q4_K_M: Qwen2.5-1.5B's shapes (28
layers, hidden 1536, 12 query heads and 2 key/value heads of 128, MLP 8960, q/k/v biases, tied
embeddings, Qwen2's 151,936-token vocabulary), its matrices random valid blocks typed as
llama.cpp's Q4_K_M types them (Q4_K; Q6_K for the embedding / tied LM head and for attn_v and
ffn_down in 14 of the 28 layers), written once into corral's cache dir
(`synthetic.cached_model`), or at `--model PATH`.

A child process (so that the writer's memory is not counted) loads the file with
`corral.model.load_model`, allocates a KV cache of one slot of --context tokens and fills it
(every page written, as a 4k conversation would), prefills a short prompt and decodes a few
tokens at position --context - 16, then prints its resident memory: after loading, while
decoding, and the peak (`ru_maxrss`, the load included); the bytes of the weights as laid out
for the kernels and of the cache; and the largest float32 array among the model's parameters
(norms and biases only: a float32 copy of a K-quant matrix would show here).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import synthetic


def resident_mb() -> float:
    """This process's resident set now, in MB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(path: Path, context: int, steps: int, kv_dtype: str) -> dict:
    """Load `path`, fill a `context`-token cache, decode `steps` tokens: the figures of the
    module docstring, in MB."""
    from corral.model import load_model

    baseline = resident_mb()
    start = time.perf_counter()
    model = load_model(path, progress=False, kv_dtype=np.dtype(kv_dtype))
    load_seconds = time.perf_counter() - start
    loaded = resident_mb()
    params = model.params
    weights = sum(m.nbytes for layer in params["layers"] for m in layer["blocks"].values())
    weights += params["lm_head_blocks"].nbytes
    values = [*params.values(), *(v for layer in params["layers"] for v in layer.values())]
    floats = [a for a in values if isinstance(a, np.ndarray) and a.dtype == np.float32]
    cache = model.new_cache(1, context)
    rng = np.random.default_rng(0)
    for array in (cache.keys, cache.values):  # every page of the cache written, a layer a time
        for layer in array:
            layer[...] = rng.standard_normal(layer.shape, np.float32) * np.float32(0.1)
    filled = resident_mb()
    model.prefill(cache, 0, rng.integers(100, 40000, 16))
    cache.lengths[0] = context - steps - 1
    slots, tokens = np.arange(1), rng.integers(100, 40000, 1)
    start = time.perf_counter()
    for _ in range(steps):
        logits = model.decode(cache, slots, tokens)
        tokens = np.asarray(logits).reshape(1, -1).argmax(-1)
    decode_seconds = (time.perf_counter() - start) / steps
    return {
        "load_s": load_seconds,
        "baseline": baseline,
        "after_load": loaded,
        "cache_filled": filled,
        "decoding": resident_mb(),
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "weights": weights / 2**20,
        "cache": (cache.keys.nbytes + cache.values.nbytes) / 2**20,
        "largest_float32": max(a.size for a in floats),
        "s_per_token": decode_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="resident memory of a 1.5B Q4_K_M model")
    parser.add_argument("--model", type=Path, help="the synthetic GGUF's path (written if missing)")
    parser.add_argument("--context", type=int, default=4096, help="KV cache tokens (4096)")
    parser.add_argument("--steps", type=int, default=4, help="tokens decoded (4)")
    parser.add_argument(
        "--kv-dtype", default="float32", choices=("float32", "float16"), help="KV cache (float32)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.model, args.context, args.steps, args.kv_dtype)))
        return
    if args.model is None:
        path = synthetic.cached_model("qwen2.5-1.5b", "Q4_K_M")
    else:
        path = args.model
        if not path.exists():
            synthetic.write_model(path, synthetic.SPECS["qwen2.5-1.5b"], "Q4_K_M")
    command = [sys.executable, __file__, "--child", "--model", str(path),
               "--context", str(args.context), "--steps", str(args.steps),
               "--kv-dtype", args.kv_dtype]  # fmt: skip
    child = subprocess.run(command, capture_output=True, text=True, check=False)
    if child.returncode != 0:
        raise SystemExit(f"the child failed: {child.stderr.strip()[-500:]}")
    facts = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"{path.name}: {path.stat().st_size / 2**20:.0f} MB file")
    print(
        f"resident: {facts['baseline']:.0f} MB before loading, {facts['after_load']:.0f} MB "
        f"after ({facts['load_s']:.0f} s), {facts['cache_filled']:.0f} MB with the cache "
        f"filled, {facts['decoding']:.0f} MB decoding at batch 1 over a {args.context}-token "
        f"{args.kv_dtype} context, "
        f"peak {facts['peak']:.0f} MB (the load included)"
    )
    print(
        f"weights as laid out {facts['weights']:.0f} MB, KV cache {facts['cache']:.0f} MB; "
        f"largest float32 parameter {facts['largest_float32']} values; "
        f"{facts['s_per_token'] * 1e3:.0f} ms a token"
    )


if __name__ == "__main__":
    main()

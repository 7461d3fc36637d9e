"""Sampler microbenchmark (docs/design.md section 4), printed, not asserted: `sample_batch` per call
on real rows, at batch 1 and 32, temperature 1 and greedy.

The rows are SmolLM2-135M-Instruct's logits of `--steps` decode steps of 32 answers to
`bench/generate.py`'s profile schema (seeds drawn from one generator, the masks each row's
constraint gives under a budget of 64 tokens), so free-like dense string masks and sparse masks
(a key, a number) come in the mix a constrained batch meets. Each call gets its step's logits
copied just before it (cache-resident, as after the forward pass's lm head); batch 1 takes row 0
of every step. Prints the median microseconds per call over `--rounds` passes over the steps,
as the engine calls it (`sample_batch`'s default: on Numba's threads from `PARALLEL_MIN_ROWS`
rows) and on the calling thread alone (`parallel=False`), the two taking turns call by call.

Run alone (other processes on the cores change every figure):
    .venv/bin/python bench/sample_batch.py [--steps 40] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from corral.kernels import Constraint, SamplingParams, sample_batch
from corral.model import load_model
from corral.tools.completions import Completions

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402  (bench/generate.py: the profile workload)

BATCH = 32
BUDGET = 64


def capture(steps: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 `[steps, 32, V]` logits and uint32 `[steps, 32, ceil(V / 32)]` masks of `steps`
    decode steps of 32 profile answers (an answer that ends starts again)."""
    model = load_model()
    request = generate.engine_requests(Completions(model), generate.profile_bodies(), 256)[0]
    prompt, index = list(request.prompt_ids), request.constraint.index
    cache = model.new_cache(BATCH, len(prompt) + steps + 2)
    slots = list(range(BATCH))
    logits = model.prefill_batch(cache, slots, [prompt] * BATCH)
    walks = [Constraint(index) for _ in slots]
    left = [BUDGET] * BATCH
    rng = np.random.default_rng(0)
    params = [SamplingParams(temperature=1.0)] * BATCH
    all_logits, all_masks = [], []
    for _ in range(steps):
        for b, c in enumerate(walks):
            if c.done or left[b] == 0:
                walks[b], left[b] = Constraint(index), BUDGET
        masks = [c.mask(n) for c, n in zip(walks, left, strict=True)]
        all_logits.append(logits.copy())
        all_masks.append(np.stack(masks))
        tokens = sample_batch(logits, masks, params, rng.random(BATCH)).tokens.tolist()
        for c, token in zip(walks, tokens, strict=True):
            c.advance(token)
        left = [n - 1 for n in left]
        logits = model.decode(cache, slots, tokens)
    return np.stack(all_logits), np.stack(all_masks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logits, masks = capture(args.steps)
    kinds = {"t=1": SamplingParams(temperature=1.0), "greedy": SamplingParams(temperature=0.0)}
    rng = np.random.default_rng(0)
    sample_batch(logits[0, :2], list(masks[0, :2]), [kinds["t=1"]] * 2, [0.5, 0.5])  # compile
    allowed = np.unpackbits(masks.view(np.uint8), axis=-1).sum(-1)
    dense = np.mean(allowed * 4 >= logits.shape[-1])
    print(f"{args.steps} steps x {BATCH} rows; {100 * dense:.0f}% of the rows read in place")
    print(f"{'batch':>5} {'params':>6} | {'us per call':>11} | {'one thread':>10}")
    for batch in (1, BATCH):
        for name, params in kinds.items():
            times = {None: [], False: []}
            for _ in range(args.rounds):
                for step in range(args.steps):
                    for parallel, spent in times.items():
                        rows = logits[step, :batch].copy()
                        row_masks = list(masks[step, :batch])
                        uniforms = rng.random(batch)
                        started = time.perf_counter()
                        sample_batch(rows, row_masks, [params] * batch, uniforms, parallel=parallel)
                        spent.append(time.perf_counter() - started)
            default, serial = (1e6 * np.median(times[k]) for k in (None, False))
            print(f"{batch:>5} {name:>6} | {default:>11.1f} | {serial:>10.1f}")


if __name__ == "__main__":
    main()

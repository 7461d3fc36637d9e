"""How often a sampled request's tokens come out the same alone and in a batch of three, with the
float32 and the float16 KV cache: tests/tools/test_batch.py's three requests (a named tool call,
a json_object answer, free text at temperature 0.9) at seeds 0..SEEDS-1. Alone, each prompt is
prefilled by itself (from the blocks: at most 64 tokens); together, in one pass of float32 GEMMs,
whose keys differ from the blocks' by a float32 ulp or so: with float16 storage, some land a
float16 ulp apart. Printed, not asserted.

    .venv/bin/python bench/results/2026-12-01-s9-kv16d/batch_invariance.py SEEDS
"""

import sys
from pathlib import Path

import numpy as np
from corral.model import load_model
from corral.model.generate import generate
from corral.tools.batch import Engine
from corral.tools.request import parse_tool_request

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "tools"))
from test_batch import ASK, NAMED, WEATHER  # noqa: E402


def main() -> None:
    engine = Engine(load_model(progress=False))
    seeds = int(sys.argv[1])
    for dtype in (np.float32, np.float16):
        engine.model.kv_dtype = dtype
        same = first_apart = total = 0
        for seed in range(seeds):
            bodies = [
                {"messages": ASK, "tools": [WEATHER], "tool_choice": NAMED, "seed": seed,
                 "max_tokens": 40},
                {"messages": ASK, "response_format": {"type": "json_object"}, "seed": seed,
                 "max_tokens": 24},
                {"messages": ASK, "temperature": 0.9, "seed": seed, "max_tokens": 16},
            ]  # fmt: skip
            requests = [engine.requests(parse_tool_request(b), 64)[0] for b in bodies]
            alone = [generate(engine.model, [r])[0].token_ids for r in requests]
            together = [r.token_ids for r in generate(engine.model, requests, batch_size=3)]
            for a, b in zip(alone, together, strict=True):
                total += 1
                same += a == b
                if a != b:
                    pairs = enumerate(zip(a, b, strict=False))
                    first_apart += next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
        apart = total - same
        print(f"{np.dtype(dtype).name} cache: {same} of {total} requests the same alone and "
              f"batched; where apart, at token {first_apart / max(apart, 1):.1f} on average",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

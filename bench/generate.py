"""Generation benchmark (DESIGN.md sections 4 and 7), printed, not asserted: completion
tokens/s of the real SmolLM2-135M-Instruct at batch sizes 1, 8 and 32, unconstrained and under a
json_schema constraint, side by side in one run, with the constraint's overhead and the time per
step spent in masks and sampling.

Run alone (two BLAS threads slow down up to 10x when another process computes):
    .venv/bin/python bench/generate.py [--tokens 64] [--batches 1,8,32]

Each row runs B requests of the same prompt with different seeds at temperature 1, every one
generating up to --tokens tokens (EOS is made impossible in the free-text runs, so both sides
write the same number of tokens; the constrained answers stop when their JSON is complete).
tokens/s counts completion tokens over the wall time of the whole run (prefill included), and
"decode tokens/s" over the decode steps only.

A second table (`sampler_share`) times one decode step's parts apart at each batch size: the
forward pass, and the masks, sampling (one `sample_batch` call) and constraint advances of its
rows, with their share of the step (goal: at most 2% at batch 1, 1% at batch 32).
"""

from __future__ import annotations

import argparse
import time

import numpy as np  # noqa: E402
from corral.automata import schema_to_dfa  # noqa: E402
from corral.kernels import Constraint, SamplingParams, TokenIndex  # noqa: E402
from corral.model import load_model  # noqa: E402
from corral.model.generate import GenerationRequest, GenerationStats, generate  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "format": "email"},
        "city": {"type": "string", "maxLength": 30},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 5},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "city", "tags", "active"],
}
PROMPT = "Write a JSON profile of a software engineer who lives in Lisbon."


class NoEos:
    """The model with EOS made impossible (so free text runs to max_tokens)."""

    def __init__(self, model):
        self.model = model
        self.eos_ids = model.eos_ids

    def __getattr__(self, name):
        return getattr(self.model, name)

    def prefill_batch(self, cache, slots, sequences):
        logits = self.model.prefill_batch(cache, slots, sequences)
        logits[:, list(self.eos_ids)] = -np.inf
        return logits

    def decode(self, cache, slots, tokens):
        logits = self.model.decode(cache, slots, tokens)
        logits[:, list(self.eos_ids)] = -np.inf
        return logits


def run(model, requests, batch_size):
    stats = GenerationStats()
    started = time.perf_counter()
    results = generate(model, requests, batch_size=batch_size, stats=stats)
    wall = time.perf_counter() - started
    tokens = sum(r.completion_tokens for r in results)
    return wall, tokens, stats


def sampler_share(model, index, batches, steps: int = 12) -> None:
    """Per decode step at each batch size: the forward pass (`Model.decode`), then masks +
    `sample_batch` + advances of B constrained rows on its logits, in ms, and their share of
    the step (medians over `steps` steps, after one warm-up step)."""
    from corral.kernels import sample_batch

    params = SamplingParams(temperature=1.0)
    prompt = model.tokenizer.encode(model.render_chat([{"role": "user", "content": PROMPT}]))
    print(f"{'batch':>5} | {'forward ms':>10} | {'masks+sample ms':>15} | {'share':>6}")
    for batch in batches:
        cache = model.new_cache(batch, len(prompt) + steps + 2)
        slots = list(range(batch))
        logits = model.prefill_batch(cache, slots, [prompt] * batch)
        walks = [Constraint(index) for _ in slots]
        rng = np.random.default_rng(0)
        forward, sampling = [], []
        for _ in range(steps + 1):
            walks = [Constraint(index) if c.done else c for c in walks]
            started = time.perf_counter()
            masks = [c.mask() for c in walks]
            out = sample_batch(logits, masks, [params] * batch, rng.random(batch))
            tokens = out.tokens.tolist()
            for c, token in zip(walks, tokens, strict=True):
                c.advance(token)
            middle = time.perf_counter()
            logits = model.decode(cache, slots, tokens)
            forward.append(time.perf_counter() - middle)
            sampling.append(middle - started)
        f_ms, s_ms = 1e3 * np.median(forward[1:]), 1e3 * np.median(sampling[1:])
        print(f"{batch:>5} | {f_ms:>10.2f} | {s_ms:>15.3f} | {100 * s_ms / (f_ms + s_ms):>5.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batches", default="1,8,32")
    args = parser.parse_args()
    model = load_model()
    vocabulary = model.vocabulary
    started = time.perf_counter()
    index = TokenIndex(schema_to_dfa(SCHEMA), vocabulary)
    _ = index.token_distance
    print(f"grammar: {index.n_states} DFA states, index + token distances built in "
          f"{1e3 * (time.perf_counter() - started):.1f} ms")  # fmt: skip
    prompt = model.tokenizer.encode(model.render_chat([{"role": "user", "content": PROMPT}]))
    params = SamplingParams(temperature=1.0)
    free_model = NoEos(model)
    # warm-up of everything the timed runs use: BLAS, the free sampler, and the json run's
    # kernels with the budget rule on (a budget this tight takes the budgeted mask walk from the
    # first token; warmed with the rule off, that kernel compiled inside the timed run)
    tight = int(index.token_distance[0]) + 2
    generate(free_model, [GenerationRequest(prompt, 8, params, 0)])
    generate(model, [GenerationRequest(prompt, tight, params, 0, (), Constraint(index))])
    print(f"prompt: {len(prompt)} tokens; up to {args.tokens} tokens per answer; temperature 1")
    header = (
        f"{'batch':>5} | {'free tok/s':>10} {'decode':>7} | {'json tok/s':>10} {'decode':>7} | "
        f"{'overhead':>8} | {'mask+sample/step':>16} {'share':>6}"
    )
    print(header)
    print("-" * len(header))
    for batch in (int(b) for b in args.batches.split(",")):
        free = [GenerationRequest(prompt, args.tokens, params, i) for i in range(batch)]
        json_ = [
            GenerationRequest(prompt, args.tokens, params, i, (), Constraint(index))
            for i in range(batch)
        ]
        f_wall, f_tokens, f_stats = run(free_model, free, batch)
        j_wall, j_tokens, j_stats = run(model, json_, batch)
        f_rate, j_rate = f_tokens / f_wall, j_tokens / j_wall
        f_decode = f_tokens / (f_stats.forward_seconds + f_stats.mask_and_sample_seconds)
        j_decode = j_tokens / (j_stats.forward_seconds + j_stats.mask_and_sample_seconds)
        per_step = 1e3 * j_stats.mask_and_sample_seconds / max(j_stats.steps, 1)
        share = 100 * j_stats.mask_and_sample_seconds / j_wall
        overhead = 100 * (f_rate / j_rate - 1)
        print(
            f"{batch:>5} | {f_rate:>10.1f} {f_decode:>7.1f} | {j_rate:>10.1f} {j_decode:>7.1f} | "
            f"{overhead:>7.1f}% | {per_step:>13.2f} ms {share:>5.1f}%"
        )
    print("overhead: how much slower per token the json_schema run is than free text, in percent;")
    print("mask+sample/step: time in masks and sampling for the whole batch, per decode step.")
    sampler_share(model, index, [int(b) for b in args.batches.split(",")])


if __name__ == "__main__":
    main()

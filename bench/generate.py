"""Generation benchmark (docs/design.md sections 4 and 7), printed, not asserted: completion
tokens/s of the real SmolLM2-135M-Instruct, free and constrained, with and without jump-forward,
side by side in one run, per workload and batch size.

Run alone (two BLAS threads slow down up to 10x when another process computes):
    .venv/bin/python bench/generate.py [--tokens 64] [--batches 1,32] [--workloads ...] [--rounds 3]

Workloads (`--workloads`, comma-separated):
- `profile`: one json_schema (a six-field profile), the same prompt with B seeds.
- `tool_call`: BFCL simple questions (tests/data/bfcl), each forcing a call of its one function
  (tool_choice names it), R requests over the questions in turn.
- `jsonschemabench`: JSONSchemaBench schemas that compile (tests/data/jsonschemabench), as
  json_schema response formats, R requests over the schemas in turn.

Each row runs R = max(B, the workload's distinct prompts) requests on B slots (so a batch-1 row
answers every prompt of its workload in turn, not one) at temperature 1 (seeds 0..R-1) through
`corral.tools.completions.Completions` (it renders the prompts, compiles the grammars), at most
--tokens tokens per answer:
- free: the same prompts without a grammar, EOS made impossible, so every answer writes --tokens;
- json: under the grammar, jump-forward off (every token sampled) and on (forced text appended in
  chunks); a constrained answer stops when its JSON is complete.
tokens/s is completion tokens (forced tokens included, counted as the engine counts them) over the
wall time of the whole run, prefill included. The free run does more work than the constrained
ones: every free answer writes --tokens tokens while a constrained one stops when its JSON is
complete, so free decoding amortizes the same prompts' prefill over more tokens and keeps its batch
full to the end, while the constrained batch thins out as answers end (at batch 32, R = B: none
waiting).
So a second free run gives each free request the work of its jump-forward twin:
- free=: the same free requests, each with max_tokens = the completion tokens of the same request
  in the jump-forward run (EOS impossible, so it writes exactly that many): the same prompts, the
  same answer lengths, the same tail. "jump/free=" compares the two; "free" and "jump/free" are
  kept as they were. Neither side gets a discount: both are wall time of the whole run, prefill
  included, and the free side is the engine's plain decoding with no mask and no sampler cut.
- steps: decode passes (forward passes after prefill) of the jump-forward run / of the free= run,
  a count, free of timing noise: jump-forward's gain is the passes it saves, at the price of
  chunks (a pass with forced tokens has more rows).
- decoding: jump/free= over the wall time less the prompts' prefill (`GenerationStats.
  prefill_seconds`; the same prompts on both sides): the decoding alone, jump-forward's chunks
  included, as llama.cpp reports its eval rate apart from its prompt rate.
"forced" is the share of the jump-forward run's
completion tokens written by jump-forward; "mask/step" its time in masks and sampling per step;
"reused" the share of the jump-forward run's prompt tokens whose prefill the prefix cache saved
(R requests over at most `N_BODIES` prompts; `--no-prefix-cache` turns the cache off in every run);
"masked" the share of the jump-forward run's forward-pass rows whose logits the masked LM head
computed in part (`GenerationStats.masked_rows`; `--no-masked-head` computes every row whole).

Each row's four runs (free, json, +jump, free=) are taken --rounds times in turn and each figure
is the median of its rounds: on the 2-core virtual machines of this project the same run's time
drifted by 20-40% within minutes, so one run of each, minutes apart, could not be compared.

A second table (`sampler_share`) times one decode step's parts apart at each batch size: the
forward pass, and the masks (under each row's budget of --tokens, as the engine takes them),
sampling (one `sample_batch` call) and constraint advances of its rows, with their share of the
step (goal: at most 2% at batch 1, 1% at batch 32), on a fresh index (first visits) and again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from corral.kernels.threads import configure

configure()  # corral's process settings, before NumPy and Numba load (docs/numerics.md)

import numpy as np  # noqa: E402
from corral.kernels import Constraint, SamplingParams, TokenIndex, sample_batch  # noqa: E402
from corral.model import load_model  # noqa: E402
from corral.model.generate import GenerationRequest, GenerationStats, generate  # noqa: E402
from corral.model.generation_request import BudgetTooSmallError, check_budget  # noqa: E402
from corral.tools import ToolError, bfcl_tools, parse_tool_request  # noqa: E402
from corral.tools.completions import Completions  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
PROFILE = {
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
N_BODIES = 8  # distinct questions or schemas per workload
MAX_PROMPT = 600  # tokens: longer prompts (large schemas) would time prefill more than decoding


class NoEos:
    """The model with EOS made impossible (so free text runs to max_tokens)."""

    def __init__(self, model):
        self.model = model
        self.eos_ids = model.eos_ids

    def __getattr__(self, name):
        return getattr(self.model, name)

    def prefill_batch(self, cache, slots, sequences, allowed=None):
        logits = self.model.prefill_batch(cache, slots, sequences, allowed)
        logits[:, list(self.eos_ids)] = -np.inf
        return logits

    def decode(self, cache, slots, tokens, allowed=None):
        logits = self.model.decode(cache, slots, tokens, allowed)
        logits[:, list(self.eos_ids)] = -np.inf
        return logits


def schema_body(schema: dict, prompt: str) -> dict:
    return {
        "messages": [{"role": "user", "content": prompt}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }


def profile_bodies() -> list[dict]:
    prompt = "Write a JSON profile of a software engineer who lives in Lisbon."
    return [schema_body(PROFILE, prompt)]


def tool_call_bodies() -> list[dict]:
    bodies = []
    for line in (DATA / "bfcl" / "BFCL_v4_simple_python.jsonl").read_text().splitlines():
        item = json.loads(line)
        tools = bfcl_tools(item["function"])
        name = tools[0]["function"]["name"]
        bodies.append(
            {
                "messages": item["question"][0],
                "tools": tools,
                "tool_choice": {"type": "function", "function": {"name": name}},
            }
        )
    return bodies


def jsonschemabench_bodies() -> list[dict]:
    bodies = []
    for path in sorted((DATA / "jsonschemabench").glob("*.jsonl")):
        for line in path.read_text().splitlines()[:2]:
            schema = json.loads(line)["schema"]
            prompt = f"Write a JSON object that follows this JSON schema:\n{json.dumps(schema)}"
            bodies.append(schema_body(schema, prompt))
    return bodies


WORKLOADS = {
    "profile": profile_bodies,
    "tool_call": tool_call_bodies,
    "jsonschemabench": jsonschemabench_bodies,
}


def engine_requests(
    engine: Completions, bodies: list[dict], tokens: int
) -> list[GenerationRequest]:
    """One temperature-1 request per body (seed 0) for the first `N_BODIES` bodies that compile,
    whose prompt has at most `MAX_PROMPT` tokens and whose shortest answer fits in `tokens`."""
    out = []
    for body in bodies:
        try:
            (request,) = engine.requests(parse_tool_request({**body, "seed": 0}), tokens)
            check_budget(request)
        except (ToolError, BudgetTooSmallError):
            continue
        if len(request.prompt_ids) > MAX_PROMPT:
            continue
        out.append(request)
        if len(out) == N_BODIES:
            break
    return out


def run(model, requests, batch_size, prefix_cache=True, masked_head=True):
    stats = GenerationStats()
    started = time.perf_counter()
    results = generate(model, requests, batch_size, stats, prefix_cache, masked_head)
    wall = time.perf_counter() - started
    return results, wall, stats


def completion_tokens(results) -> int:
    return sum(r.completion_tokens for r in results)


def sampler_share(model, request, batches, tokens: int) -> None:
    """Per decode step at each batch size: the forward pass (`Model.decode`), then masks +
    `sample_batch` + advances of B rows under `request`'s grammar on its logits, in ms, each
    part apart and their share of the step (means over `tokens` steps, after one warm-up step:
    whole answers, budget included). Each row has a budget of `tokens` tokens per answer,
    counted down, and takes its mask as the engine does (`Constraint.mask(tokens_left)`: budget
    masks once some state is too far for the tokens left, which with a tight budget is the
    answer's last part); a row whose answer ends starts a new one. The steps run
    twice on a fresh index of the grammar (its token distances computed first, as the engine's
    budget check at submit does) and both runs are printed: in the first, each state's mask and
    budget rows are built at its first visit (as a request meets it); in the second ("again")
    every one the steps need is built, so the row shows masks and sampling alone. The sampler
    runs right after a forward pass, as in generation: its code and data come back into caches
    the forward pass evicted."""
    params = SamplingParams(temperature=1.0)
    prompt, grammar = list(request.prompt_ids), request.constraint.index
    print(f"{tokens} tokens per answer (budget masks once a state is too far)")
    print(
        f"{'batch':>5} {'run':>5} | {'forward ms':>10} | {'masks ms':>8} | {'sample ms':>9} | "
        f"{'advance ms':>10} | {'masks+sample ms':>15} | {'share':>6}"
    )
    for batch in batches:
        index = TokenIndex(grammar.dfa, grammar.vocabulary)  # fresh: masks built at first visit
        _ = index.token_distance
        for run in ("first", "again"):  # the same steps twice: masks built at first visit, warm
            parts = _sampler_steps(model, prompt, index, params, batch, tokens, tokens)
            ms = {name: 1e3 * np.mean(times[1:]) for name, times in parts.items()}
            total = ms["step"]
            print(
                f"{batch:>5} {run:>5} | {ms['forward']:>10.2f} | {ms['masks']:>8.3f} | "
                f"{ms['sample']:>9.3f} | {ms['advance']:>10.3f} | {total:>15.3f} | "
                f"{100 * total / (ms['forward'] + total):>5.2f}%"
            )


def _sampler_steps(model, prompt, index, params, batch, steps, tokens):
    """`steps + 1` decode steps of `sampler_share` at one batch size, each row with `tokens`
    tokens per answer; the seconds of each part of each step, by name."""
    cache = model.new_cache(batch, len(prompt) + steps + 2)
    slots = list(range(batch))
    logits = model.prefill_batch(cache, slots, [prompt] * batch)
    walks = [Constraint(index) for _ in slots]
    left = [tokens] * batch
    rng = np.random.default_rng(0)
    parts = {"forward": [], "masks": [], "sample": [], "advance": [], "step": []}
    for _ in range(steps + 1):
        for b, c in enumerate(walks):
            if c.done or left[b] == 0:
                walks[b], left[b] = Constraint(index), tokens
        started = time.perf_counter()
        masks = [c.mask(n) for c, n in zip(walks, left, strict=True)]
        masked = time.perf_counter()
        out = sample_batch(logits, masks, [params] * batch, rng.random(batch))
        tokens_out = out.tokens.tolist()
        sampled = time.perf_counter()
        for c, token in zip(walks, tokens_out, strict=True):
            c.advance(token)
        middle = time.perf_counter()
        left = [n - 1 for n in left]
        logits = model.decode(cache, slots, tokens_out)
        parts["forward"].append(time.perf_counter() - middle)
        parts["masks"].append(masked - started)
        parts["sample"].append(sampled - masked)
        parts["advance"].append(middle - sampled)
        parts["step"].append(middle - started)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batches", default="1,32")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--no-prefix-cache", action="store_true")
    parser.add_argument("--no-masked-head", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = load_model()
    engine = Completions(model)
    free_model = NoEos(model)
    print(f"up to {args.tokens} tokens per answer; temperature 1")
    header = (
        f"{'workload':>15} {'batch':>5} | {'free tok/s':>10} {'free= tok/s':>11} | "
        f"{'json tok/s':>10} {'+jump tok/s':>11} | {'jump/free':>9} {'jump/free=':>10} "
        f"{'decoding':>10} "
        f"{'steps':>7} {'forced':>6} | {'mask/step':>9} | reused masked"
    )
    print(header)
    print("-" * len(header))
    for workload in args.workloads.split(","):
        base = engine_requests(engine, WORKLOADS[workload](), args.tokens)
        if not base:
            print(f"{workload:>15}: no request compiles and fits in {args.tokens} tokens")
            continue
        # warm-up: BLAS, the free sampler, every grammar's token distances, the masks and the
        # budgeted walk (a budget this tight takes it from the first token), chunked prefill
        # (three prompts on two slots: multi-row decode passes and prefix-cache remainders,
        # whose row counts take the block kernels, compile here and not in a timed run)
        warm = [base[i % len(base)] for i in range(3)]
        generate(
            free_model, [dataclasses.replace(r, constraint=None, max_tokens=4) for r in warm], 2
        )
        for request in base:
            _ = request.constraint.index.token_distance
        tight = base[0].constraint.tokens_to_complete() + 2
        generate(model, [dataclasses.replace(base[0], max_tokens=tight)])
        for batch in (int(b) for b in args.batches.split(",")):
            requests = [
                dataclasses.replace(base[i % len(base)], seed=i, max_tokens=args.tokens)
                for i in range(max(batch, len(base)))
            ]
            free = [dataclasses.replace(r, constraint=None, trigger=None) for r in requests]
            off = [dataclasses.replace(r, jump_forward=False) for r in requests]
            prefix, masked = not args.no_prefix_cache, not args.no_masked_head
            j_results, _, _ = run(model, requests, batch, prefix, masked)  # the answers' lengths
            matched = [
                dataclasses.replace(r, max_tokens=j.completion_tokens)
                for r, j in zip(free, j_results, strict=True)
            ]
            rounds = {"free": [], "off": [], "jump": [], "free=": []}
            for _ in range(args.rounds):  # in turn, so that a drift of the machine hits all
                for name, runner, batch_requests, mask in (
                    ("free", free_model, free, True),
                    ("off", model, off, masked),
                    ("jump", model, requests, masked),
                    ("free=", free_model, matched, True),
                ):
                    results, wall, stats = run(runner, batch_requests, batch, prefix, mask)
                    rounds[name].append((completion_tokens(results), wall, stats))
            f_rate, o_rate, j_rate, m_rate = (
                statistics.median(tokens / wall for tokens, wall, _ in rounds[name])
                for name in ("free", "off", "jump", "free=")
            )
            rate = {n: [t / w for t, w, _ in rounds[n]] for n in rounds}
            over_free, over_matched = (  # ratios within a round (the same drift), then medians
                statistics.median(j / x for j, x in zip(rate["jump"], rate[n], strict=True))
                for n in ("free", "free=")
            )
            decode = statistics.median(
                (m_wall - m_stats.prefill_seconds) / (j_wall - j_stats.prefill_seconds)
                for (_, m_wall, m_stats), (_, j_wall, j_stats) in zip(
                    rounds["free="], rounds["jump"], strict=True
                )
            )
            j_tokens, _, j_stats = rounds["jump"][0]
            m_tokens, _, m_stats = rounds["free="][0]
            assert m_tokens == completion_tokens(j_results)  # free= does the same work
            reused = 100 * j_stats.prefix_tokens / max(j_stats.prompt_tokens, 1)
            per_step = 1e3 * j_stats.mask_and_sample_seconds / max(j_stats.steps, 1)
            forced = 100 * j_stats.forced_tokens / max(j_tokens, 1)
            rows = j_tokens - j_stats.forced_tokens  # one row a sampled token, before EOS
            masked_share = 100 * j_stats.masked_rows / max(rows, 1)
            steps = f"{j_stats.steps}/{m_stats.steps}"
            print(
                f"{workload:>15} {batch:>5} | {f_rate:>10.1f} {m_rate:>11.1f} | "
                f"{o_rate:>10.1f} {j_rate:>11.1f} | {over_free:>8.2f}x "
                f"{over_matched:>9.2f}x {decode:>9.2f}x {steps:>7} {forced:>5.0f}% | "
                f"{per_step:>6.2f} ms | "
                f"{reused:>5.0f}% {masked_share:>5.0f}%"
            )
    print("jump/free: constrained tokens/s with jump-forward over free tokens/s (goal: >= 1.3x);")
    print("free=, jump/free=: free requests each writing as many tokens as its jump-forward twin;")
    print("decoding: jump/free= over the wall time less the prompts' prefill (same prompts, both);")
    print(
        f"each figure the median of {args.rounds} rounds taken in turn (a ratio: of each round's);"
    )
    print("steps: decode passes of the jump-forward run / of the free= run;")
    print("forced: the share of those completion tokens that jump-forward wrote;")
    print("reused: the share of its prompt tokens whose prefill the prefix cache saved;")
    print("masked: the share of its sampled tokens whose logits the masked LM head computed.")
    # the share table needs only a prompt and a grammar: any budget the profile answer fits in
    profile = engine_requests(engine, WORKLOADS["profile"](), max(args.tokens, 256))[0]
    sampler_share(model, profile, [int(b) for b in args.batches.split(",")], args.tokens)


if __name__ == "__main__":
    main()

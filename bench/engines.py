"""corral against outlines-core, XGrammar and llguidance, side by side, on the SmolLM2 vocabulary
(docs/design.md section 4), with a differential check of the masks. Needs `pip install -e
'.[bench]'` (see bench/README.md for alignment of the languages and the documented differences).

Three parts, each engine in its own worker process with a time cap (bench/engine_workers.py):
  1. figures: the five grammars of bench/masks.py and a deterministic sample of schemas of
     ../shared/data/jsonschemabench (stratified by subset, accepted by every engine, walked along
     their first valid instance): compile, time to first mask, mask per step (mean/p50/p99/max),
     advance per step, RSS growth; ratio corral / best other engine (and corral-lazy / best
     other when it runs: `--engines corral,corral-lazy,llguidance`).
  2. differential: at every step of every walk, corral's allowed set against each engine's
     (outlines-core also on corral's own regex of each grammar, and with --exact of each sample
     schema: an exact check of the masks).
  3. coverage and soundness over the developer split: per engine per subset, compiled / refused /
     crashed / timeout, median compile, valid instances accepted, invalid instances let through.

Compile and time to first mask of the five grammars are the median of `--repeats N` (default 7)
measurements per engine, the engines taken in turn within each repeat so they see the same machine
noise; before each one the worker drops the engine's cross-grammar caches (corral's memo of parsed
regex patterns) and redoes its warm-up (`forget`), so no repeat is answered from the one before.
Mask and advance steps, memory and the differential check are the first repeat's. The sample is
one measurement per schema (its figures are medians over the schemas).

Run:  .venv/bin/python bench/engines.py [--results DIR] [--engines corral,xgrammar]
          [--skip fixed|sample|coverage] [--report] [--repeats 7] [--sample 200] [--walk 200]
          [--exact]
          [--limit N] [--subset NAME ...] [--timeout 60] [--cover-timeout 60] [--retry timeout]
          [--json out.json] [--plot masks.png (default: bench/results/engines-masks.png)]
`--json` also keeps, per sample schema and engine, its compile, first mask, per-step mask times
and (corral's) states (`sample_per_schema`), to find which schemas and steps make the tail.
Coverage is stored per engine in DIR and resumed (bench/engine_store.py); bench/README.md has
the recipes. Small run while developing: --sample 10 --limit 5 --subset Github_easy.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

import numpy as np
from engine_adapters import DEFAULT_ENGINES, ENGINES
from engine_check import BUG, SAME_REGEX, disagreements, summary
from engine_report import coverage_table, figure_tables, figures, plot
from engine_store import Store, coverage_cells, engine_version, median_ms, schema_sha
from engine_workers import VOCABULARIES, Worker, load_vocabulary
from masks import GRAMMARS

RESULTS = Path(__file__).resolve().parent / "results"  # the current figures and plots
DEFAULT_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "jsonschemabench"

MEASURE_ORDER = ("corral", "corral-lazy", "llguidance", "xgrammar", "outlines-core")
"""The order engines are measured in: the quickest to refuse first."""
WALK_STEPS = 200  # sample: the first tokens of each schema's walk are timed (README)

# A valid text for each grammar of bench/masks.py (walked token by token).
EXAMPLES = {
    "(cat|car|dog)s?": "dogs",
    "city schema": '{"city":"São Paulo, the largest city of Brazil"}',
    "tool-call schema": '{"name":"get_weather","arguments":{"city":"Paris","unit":"celsius",'
    '"days":3}}',
    "12-property schema": '{"id":42,"name":"Ada Lovelace","email":"ada@example.org","age":36,'
    '"score":9.5,"active":true,"role":"admin","tags":["math","poetry"],"address":{"street":'
    '"12 St James Square","city":"London","zip":"SW1Y","country":"FR"},"manager":null,'
    '"created":"1815-12-10","notes":"first programmer"}',
    "ISO date-time regex": "2024-05-17T13:45:09.123456Z",
}


def compact(value) -> str:
    """The compact JSON text of an instance (docs/design.md section 3's writing of values)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def stable_key(record: dict) -> str:
    return hashlib.sha1(record["id"].encode("utf-8")).hexdigest()


def read_subsets(data: Path, subsets: list[str]) -> dict[str, list[dict]]:
    """Subset name -> its records in a fixed pseudo-random order (sha1 of the id)."""
    out = {}
    for path in sorted(data.glob("*.jsonl")):
        if subsets and path.stem not in subsets:
            continue
        records = [json.loads(line) for line in path.open(encoding="utf-8")]
        out[path.stem] = sorted(records, key=stable_key)
    return out


def quotas(sizes: dict[str, int], total: int) -> dict[str, int]:
    """Stratified allocation of `total` over subsets, proportional to size (largest remainder),
    at least one per non-empty subset when `total` allows."""
    everything = sum(sizes.values()) or 1
    exact = {name: total * size / everything for name, size in sizes.items()}
    out = {name: min(size, max(int(exact[name]), 1 if size else 0)) for name, size in sizes.items()}
    for name in sorted(exact, key=lambda n: exact[n] - int(exact[n]), reverse=True):
        if sum(out.values()) >= total:
            break
        if out[name] < sizes[name]:
            out[name] += 1
    return out


class Bench:
    """The workers, the tokenizer and the results of one run."""

    def __init__(
        self, engines: list[str], timeout: float, threads: int, memory_gib: float, vocab="smollm2"
    ):
        from tokenizers import Tokenizer

        self.engines = engines
        self.timeout = timeout
        self.vocabulary, tokenizer_json = load_vocabulary(vocab)
        self.tokenizer = Tokenizer.from_str(tokenizer_json)
        self.eos = self.vocabulary.eos_ids[0]
        self.workers = {name: Worker(name, threads, memory_gib, vocab) for name in engines}
        self.cover_timeout = timeout
        self.exact = False  # outlines-core also on corral's regex of every sample schema
        self.rows: dict[str, dict] = {}
        self.sample_results: dict[str, list[dict]] = collections.defaultdict(list)
        self.step_times: dict[str, list] = collections.defaultdict(list)
        self.diffs: list[tuple[str, str]] = []  # (category, line)
        self.per_schema: dict[str, dict] = {}  # sample label -> engine -> its figures and steps

    def tokens(self, text: str) -> list[int]:
        return [*self.tokenizer.encode(text, add_special_tokens=False).ids, self.eos]

    def measure_all(self, kind: str, source, walk: list[int]) -> dict[str, dict]:
        """engine -> its `measure` result, in MEASURE_ORDER; stops at the first engine that does
        not answer ok, or when corral refuses a token of the walk (the rest are not run)."""
        results = {}
        for engine in sorted(self.engines, key=MEASURE_ORDER.index):
            results[engine] = self.workers[engine].call(
                "measure", (kind, source, walk), self.timeout
            )
            if results[engine]["status"] != "ok" or (
                engine == "corral" and results[engine]["refused_at"] is not None
            ):
                break
        return results

    def record(self, name: str, kind: str, source, walk, results: dict, row: str | None):
        """Keep figures (under `row`, or pooled into the sample), step times and disagreements."""
        for engine, result in results.items():
            if result["status"] == "ok":
                self.step_times[engine].extend(result["mask_s"])
        if row is not None:
            self.rows[row] = {
                e: (figures([r]) if r["status"] == "ok" else cell_status(r))
                for e, r in results.items()
            }
        corral = results.get("corral")
        if not corral or corral["status"] != "ok":
            return
        others = [(e, r) for e, r in results.items() if e != "corral" and r["status"] == "ok"]
        if kind == "schema" and "outlines-core" in self.engines and (row or self.exact):
            regex = corral_regex(source)
            if regex is not None:
                same = self.workers["outlines-core"].call(
                    "measure", ("regex", regex, walk), self.timeout
                )
                if same["status"] == "ok":
                    others.append(("outlines-core@corral-regex", same))
        for engine, result in others:
            found = disagreements(name, kind, source, walk, corral, result, engine, self.vocabulary)
            self.diffs.extend(found)
            for category, line in found:
                if category in (BUG, SAME_REGEX):
                    print("  DISAGREE " + line, flush=True)

    def stop(self):
        for worker in self.workers.values():
            worker.stop()


def cell_status(result: dict) -> str:
    """A table cell for an engine that did not answer ok: its status, and why when the engine
    could not start (e.g. it cannot take the vocabulary)."""
    if result["status"] == "unavailable":
        return f"unavailable: {str(result.get('error'))[:80]}"
    return result["status"]


def corral_regex(schema) -> str | None:
    """corral's regex text of a schema, or None when corral refuses it or it is too long."""
    from corral.automata import ConstrainError, json_schema_to_regex

    try:
        regex = json_schema_to_regex(schema)
    except (ConstrainError, RecursionError):
        return None
    return regex if len(regex) < 200_000 else None


def repeat_measures(bench: Bench, kind: str, source, walk: list[int], repeats: int):
    """engine -> its `measure` results of `repeats` repeats, the engines in turn within each
    repeat (A, B, A, B, ...: both see the same machine noise). Before each measure the worker
    runs `forget` (the engine drops its cross-grammar caches and warms up again), so no repeat
    is answered from a memo of the one before; a forget that fails stands for that repeat's
    result. An engine whose first repeat is not ok (refused, timeout, ...) is not repeated."""
    runs: dict[str, list[dict]] = {e: [] for e in bench.engines}
    for repeat in range(repeats):
        for engine in bench.engines:
            if runs[engine] and runs[engine][0]["status"] != "ok":
                continue
            worker = bench.workers[engine]
            forgot = worker.call("forget", (), bench.timeout)
            if forgot["status"] == "ok":
                result = worker.call("measure", (kind, source, walk), bench.timeout)
            else:
                result = dict(forgot, error=f"forget: {forgot.get('error')}")
            if repeat and result["status"] != "ok":
                print(
                    f"  {engine} repeat {repeat + 1}: {result['status']} "
                    f"({str(result.get('error'))[:200]}); left out of the median",
                    flush=True,
                )
            runs[engine].append(result)
    return runs


def run_fixed(bench: Bench, repeats: int = 7) -> None:
    """The five grammars, each measured `repeats` times per engine (`repeat_measures`).
    Compile and first mask are the medians over the repeats that answered ok (every repeat's
    value is kept in the row: compile_runs_s, first_mask_runs_s); mask and advance steps,
    memory, masks, states and the differential check are the first repeat's."""
    for name, kind, source in GRAMMARS:
        walk = bench.tokens(EXAMPLES[name])
        print(f"[figures] {name}: {len(walk)} tokens, {repeats} repeats", flush=True)
        runs = repeat_measures(bench, kind, source, walk, repeats)
        results = {e: r[0] for e, r in runs.items()}
        bench.record(name, kind, source, walk, results, row=name)
        for engine, row in bench.rows[name].items():
            if not isinstance(row, dict):  # a status: the first repeat did not answer ok
                continue
            ok = [r for r in runs[engine] if r["status"] == "ok"]
            for key in ("compile", "first_mask"):
                values = [r[f"{key}_s"] for r in ok]
                row[key] = float(np.median(values))
                row[f"{key}_runs_s"] = values
            row["repeats"] = len(ok)


def run_sample(
    bench: Bench, data: dict[str, list[dict]], size: int, steps: int, store: Store
) -> dict:
    """Measure `size` schemas, stratified by subset, that every engine compiles, each walked
    along the first `steps` tokens of its first valid instance (which corral must accept).

    Candidates are taken in each subset's fixed order (sha1 of the id); a candidate that a
    stored coverage record (same schema text) of another engine than corral shows refused,
    crashed or timed out is skipped without running it. Returns the counts of skipped
    candidates by reason."""
    candidates = {
        s: [r for r in records if any(t["valid"] for t in r.get("tests", []))]
        for s, records in data.items()
    }
    skipped: collections.Counter = collections.Counter()
    taken = 0
    for subset, quota in quotas({s: len(c) for s, c in candidates.items()}, size).items():
        got = 0
        for record in candidates[subset]:
            if got >= quota:
                break
            sha = schema_sha(record["schema"])
            others = [e for e in bench.engines if e != "corral"]  # corral's record may be stale
            known = [store.records[e].get(record["id"]) for e in others]
            bad = [
                (e, r)
                for e, r in zip(others, known, strict=True)
                if r and r["schema_sha"] == sha and r["status"] != "ok"
            ]
            if bad:
                skipped[f"{bad[0][0]} {bad[0][1]['status']} (stored)"] += 1
                continue
            text = compact(next(t for t in record["tests"] if t["valid"])["data"])
            walk = bench.tokens(text)[:steps]
            results = bench.measure_all("schema", record["schema"], walk)
            bad = [e for e, r in results.items() if r["status"] != "ok"]
            if bad:
                skipped[f"{bad[0]} {results[bad[0]]['status']}"] += 1
                continue
            if "corral" in results and results["corral"]["refused_at"] is not None:
                skipped["corral refuses the first valid instance"] += 1
                continue
            got += 1
            for engine, result in results.items():
                bench.sample_results[engine].append(result)
            label = f"{subset}/{record['id']}"
            bench.record(label, "schema", record["schema"], walk, results, None)
            bench.per_schema[label] = {
                e: {
                    "compile_s": r["compile_s"],
                    "first_mask_s": r["first_mask_s"],
                    "mask_s": list(r["mask_s"]),
                    "states": list(r["states"]) if e.startswith("corral") else [],
                }
                for e, r in results.items()
            }
        taken += got
        print(f"[sample] {subset}: {got}/{quota}", flush=True)
    bench.rows[f"sample of {taken} schemas"] = {
        e: figures(r) or "-" for e, r in bench.sample_results.items()
    }
    return dict(skipped)


def run_coverage(
    bench: Bench, data: dict[str, list[dict]], limit: int | None, store: Store, retry=()
) -> None:
    """Per subset, per engine: compile and feed every test instance (compact JSON + EOS), one
    record per (engine, schema) appended to `store`; jobs already stored are skipped (resume)."""
    versions = {engine: engine_version(engine) for engine in bench.engines}
    # One pseudo-random order over every subset: a run stopped early covers a stratified sample.
    jobs = sorted(
        ((subset, r) for subset, records in data.items() for r in records[:limit]),
        key=lambda job: stable_key(job[1]),
    )
    ran: collections.Counter = collections.Counter()
    for done, (subset, record) in enumerate(jobs, 1):
        sha = schema_sha(record["schema"])
        cap = bench.cover_timeout
        todo = [e for e in bench.engines if not store.done(e, record["id"], sha, cap, retry)]
        tests = record.get("tests", [])
        instances = [bench.tokens(compact(t["data"])) for t in tests] if todo else []
        for engine in todo:
            got = bench.workers[engine].call(
                "cover", ("schema", record["schema"], instances), bench.cover_timeout
            )
            if got["status"] == "unavailable":
                continue
            ran[engine] += 1
            ok = got["status"] == "ok"
            store.add(
                {
                    "engine": engine,
                    "subset": subset,
                    "id": record["id"],
                    "schema_sha": sha,
                    "status": got["status"],
                    "cap_s": bench.cover_timeout,
                    "compile_s": got["compile_s"] if ok else None,
                    "compile_cpu_s": got["compile_cpu_s"] if ok else None,
                    "cpu_s": got.get("cpu_s"),
                    "valid": [bool(t["valid"]) for t in tests],
                    "accepted": got["accepted"] if ok else [],
                    "narrowed": ok and got.get("narrowed", False),
                    "error": None if ok else str(got.get("error"))[:300],
                    "version": versions[engine],
                }
            )
        if done % 100 == 0 or done == len(jobs):
            print(f"[coverage] {done}/{len(jobs)} schemas, run now {dict(ran)}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--engines", default=",".join(DEFAULT_ENGINES), help="comma-separated (also corral-lazy)"
    )
    parser.add_argument("--subset", action="append", default=[], help="only these subsets")
    parser.add_argument("--sample", type=int, default=200, help="schemas in the figure sample")
    parser.add_argument("--walk", type=int, default=WALK_STEPS, help="sample: tokens per walk")
    parser.add_argument(
        "--exact",
        action="store_true",
        help="sample: also run outlines-core on corral's own regex (the five grammars always do;"
        " about doubles the sample's time)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=7,
        help="five grammars: measures per grammar and engine, engines in turn; compile and first"
        " mask are their median (default 7)",
    )
    parser.add_argument("--limit", type=int, help="coverage: first N schemas of each subset")
    parser.add_argument("--timeout", type=float, default=60.0, help="CPU seconds per measure job")
    parser.add_argument(
        "--cover-timeout", type=float, default=60.0, help="CPU seconds per coverage job (recorded)"
    )
    parser.add_argument(
        "--retry",
        action="append",
        default=[],
        choices=["crashed", "error", "timeout"],
        help="coverage: rerun stored jobs of this status",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=Path("engines-results"),
        help="folder of coverage-<engine>.jsonl (resumed, merged)",
    )
    parser.add_argument(
        "--vocab",
        default="smollm2",
        choices=list(VOCABULARIES),
        help="the tokenizer every engine masks over (llama3, qwen2, gemma4: llama.cpp's GGUFs)",
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per engine")
    parser.add_argument("--memory", type=float, default=8.0, help="GiB of address space per worker")
    parser.add_argument(
        "--skip", action="append", default=[], choices=["fixed", "sample", "coverage"]
    )
    parser.add_argument("--report", action="store_true", help="only print the stored coverage")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--plot", type=Path, default=RESULTS / "engines-masks.png")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `kill`: stop the workers too
    started = time.process_time()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engine(s) {', '.join(unknown)}; choose from {', '.join(ENGINES)}")
    engines.sort(key=lambda e: (e != "corral", ENGINES.index(e)))
    skip = set(args.skip) | ({"fixed", "sample", "coverage"} if args.report else set())
    data = read_subsets(args.data, args.subset)
    if not data:
        parser.error(f"no *.jsonl subsets in {args.data} (--data, --subset)")
    store = Store(args.results)
    bench = Bench(engines, args.timeout, args.threads, args.memory, args.vocab)
    bench.cover_timeout, bench.exact = args.cover_timeout, args.exact
    skipped = {}
    try:
        if "fixed" not in skip:
            run_fixed(bench, args.repeats)
        if "sample" not in skip:
            skipped = run_sample(bench, data, args.sample, args.walk, store)
        if "coverage" not in skip:
            run_coverage(bench, data, args.limit, store, tuple(args.retry))
    finally:
        bench.stop()
        store.close()
    unavailable = {n: w.unavailable for n, w in bench.workers.items() if w.unavailable}
    for name, reason in unavailable.items():
        print(f"\n{name} unavailable: {reason}")
    if bench.rows:
        title = VOCABULARIES[args.vocab][0]
        print(f"\n## Figures ({title} vocabulary, {bench.vocabulary.size:,} tokens)")
        fixed = [n for n, *_ in GRAMMARS if n in bench.rows]
        parts = [f"five grammars: median of {args.repeats} repeats"] if fixed else []
        if len(bench.rows) > len(fixed):
            parts.append("sample: median over its schemas")
        note = "; ".join(parts)
        print(figure_tables(bench.rows, engines, {"compile": note, "first_mask": note}))
        short = {
            f"{n} / {e}": f"{row['repeats']} of {args.repeats}"
            for n in fixed
            for e, row in bench.rows[n].items()
            if isinstance(row, dict) and row["repeats"] < args.repeats
        }
        if short:
            print(f"\nrepeats that answered ok, where fewer than {args.repeats}: {short}")
    if skipped:
        print(f"\nsample candidates skipped: {skipped}")
    ids = {s: [r["id"] for r in records[: args.limit]] for s, records in data.items()}
    shown = args.report or "coverage" not in skip  # a skipped part prints nothing
    covered = [e for e in ENGINES if e in store.engines()] if shown else []
    cells = coverage_cells(store, ids, covered) if covered else {}
    if cells:
        print(
            f"\n## Coverage and soundness ({args.results}: test instances, compact JSON, "
            "token by token)\n"
        )
        print(coverage_table(cells, covered))
    if bench.rows:
        print(f"\n## Disagreements with corral along the walks: {len(bench.diffs)} steps\n")
        print(summary(bench.diffs))
        plot({e: np.asarray(bench.step_times[e]) for e in engines}, args.plot)
        print(f"\nplot: {args.plot}")
    cpu = {n: round(w.cpu_s, 1) for n, w in bench.workers.items()}
    cpu["parent (tokenizer, differential)"] = round(time.process_time() - started, 1)
    print(f"\nCPU seconds of the jobs (a quiet machine's wall time is about their sum): {cpu}")
    if args.json:
        payload = {
            "cpu_seconds": cpu,
            "engines": engines,
            "unavailable": unavailable,
            "figures_seconds_bytes": bench.rows,
            "sample_skipped": skipped,
            "sample_per_schema": bench.per_schema,
            "coverage": {
                s: {
                    e: {k: v for k, v in c.items() if k != "compile_s"}
                    | {"median_compile_ms": median_ms(c)}
                    for e, c in by.items()
                }
                for s, by in cells.items()
            },
            "disagreements": [{"category": c, "line": line} for c, line in bench.diffs],
            "restarts": {n: w.restarts for n, w in bench.workers.items()},
        }
        args.json.write_text(json.dumps(payload, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time to first mask, stage by stage, in one process set up as bench/engines.py's corral worker
(the same vocabulary and warm-up): schema or pattern -> regex tree (`tree`), Thompson NFA
(`nfa`), byte classes (`classes`, with each edge's class bitset where `classes_of` exists),
subset construction (`subset`), dead-state removal when the NFA is not trimmed (`dead`),
minimization (`minimize`), canonical numbering (`number`), `TokenIndex` (`index`) and the start
state's mask (`mask0`); then the whole path as engines.py's worker times it (`ttfm`: compile,
index and first mask). Medians over the rounds, ms; printed, not asserted. The stages are the
pipeline's own functions called one after the other, so the script runs at a commit before
`classes_of` too (for an A/B against an older worktree).

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/results/2026-12-02-s9-ttfm2/ttfm_stages.py
        [--rounds N] [--idle SECONDS] [--sample N]

--idle: sleep that long before each round (the caches go cold on a shared machine, as between
engines.py's jobs). --sample: also the median `ttfm` of the first N schemas of engines.py's
sample order (stratified by subset, those corral compiles; each compiled once, after the
others' first compile, so no cache of a parse answers).
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # bench/

import corral.automata.determinize as determinize  # noqa: E402
from corral.automata import parse, regex_to_dfa, schema_to_dfa, schema_to_tree  # noqa: E402
from corral.automata.compile import deep_recursion  # noqa: E402
from corral.automata.minimize import minimize, number_breadth_first  # noqa: E402
from corral.automata.nfa import tree_to_nfa  # noqa: E402
from corral.kernels import TokenIndex  # noqa: E402
from engine_workers import WARM_UP, load_vocabulary  # noqa: E402
from engines import DEFAULT_DATA, quotas, read_subsets  # noqa: E402
from masks import GRAMMARS  # noqa: E402

STAGES = ("tree", "nfa", "classes", "subset", "dead", "minimize", "number", "index", "mask0")
CLASSES_OF = getattr(determinize, "classes_of", None)


def stage_times(kind: str, source, vocabulary) -> list[float]:
    """Seconds of each stage of `STAGES` for one compile and first mask."""
    marks = [time.perf_counter()]
    with deep_recursion():
        node = parse(source) if kind == "regex" else schema_to_tree(source)
        marks.append(time.perf_counter())
        nfa = tree_to_nfa(node)
        marks.append(time.perf_counter())
        if CLASSES_OF is not None:
            byte_to_class, class_sets = CLASSES_OF(nfa.edge_mask)
            marks.append(time.perf_counter())
            trans, accept = determinize.subset_construction(nfa, byte_to_class, None, class_sets)
        else:
            byte_to_class = determinize.byte_classes([m for m in nfa.edge_mask if m])
            marks.append(time.perf_counter())
            trans, accept = determinize.subset_construction(nfa, byte_to_class)
        marks.append(time.perf_counter())
        if not nfa.trimmed:
            trans, accept = determinize.remove_dead_states(trans, accept)
        marks.append(time.perf_counter())
        trans, accept = minimize(trans, accept)
        marks.append(time.perf_counter())
        dfa = number_breadth_first(trans, accept, byte_to_class)
        marks.append(time.perf_counter())
    index = TokenIndex(dfa, vocabulary)
    marks.append(time.perf_counter())
    index.mask(0)
    marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:], strict=False)]


def first_mask_seconds(kind: str, source, vocabulary) -> float:
    """Compile, index and first mask, as engines.py's corral worker times them."""
    start = time.perf_counter()
    dfa = regex_to_dfa(source) if kind == "regex" else schema_to_dfa(source)
    TokenIndex(dfa, vocabulary).mask(0)
    return time.perf_counter() - start


def sample_schemas(size: int) -> list:
    """The first `size` schemas of engines.py's sample order that corral compiles."""
    data = read_subsets(DEFAULT_DATA, [])
    candidates = {
        s: [r for r in records if any(t["valid"] for t in r.get("tests", []))]
        for s, records in data.items()
    }
    out = []
    for subset, quota in quotas({s: len(c) for s, c in candidates.items()}, size).items():
        taken = 0
        for record in candidates[subset]:
            if taken >= quota:
                break
            try:
                schema_to_dfa(copy.deepcopy(record["schema"]))
            except Exception:  # refused or past a limit: engines.py's sample skips it too
                continue
            taken += 1
            out.append(record["schema"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--idle", type=float, default=0.0, help="seconds of sleep per round")
    parser.add_argument("--sample", type=int, default=0, help="schemas of the sample")
    args = parser.parse_args()
    vocabulary, _ = load_vocabulary()
    for kind, source in WARM_UP:
        stage_times(kind, source, vocabulary)
        first_mask_seconds(kind, source, vocabulary)
    print(f"{'grammar':22}" + "".join(f"{s:>9}" for s in STAGES) + f"{'ttfm':>9}")
    for name, kind, source in GRAMMARS:
        rows, totals = [], []
        for round_ in range(args.rounds):
            time.sleep(args.idle)
            # a regex is prefixed by a different number of empty groups each time (the same
            # NFA), so parse's cache never answers, as in engines.py; a schema is a fresh copy
            fresh = copy.deepcopy(source) if kind == "schema" else "(?:)" * 2 * round_ + source
            rows.append(stage_times(kind, fresh, vocabulary))
            time.sleep(args.idle)
            fresh = (
                copy.deepcopy(source) if kind == "schema" else "(?:)" * (2 * round_ + 1) + source
            )
            totals.append(first_mask_seconds(kind, fresh, vocabulary))
        medians = [1e3 * statistics.median(column) for column in zip(*rows, strict=True)]
        ttfm = 1e3 * statistics.median(totals)
        print(f"{name:22}" + "".join(f"{m:9.3f}" for m in medians) + f"{ttfm:9.3f}")
    if args.sample:
        schemas = sample_schemas(args.sample)
        firsts = []
        for schema in schemas:
            time.sleep(args.idle)
            firsts.append(1e3 * first_mask_seconds("schema", copy.deepcopy(schema), vocabulary))
        print(
            f"sample of {len(schemas)} schemas: ttfm median {statistics.median(firsts):.3f} ms, "
            f"mean {statistics.mean(firsts):.3f} ms"
        )


if __name__ == "__main__":
    main()

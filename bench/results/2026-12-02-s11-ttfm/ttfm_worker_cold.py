"""Time to first mask as an engines.py worker sees it, stage by stage, in one process: before
each compile it does what the corral worker does between two of its jobs, the walk of the
grammar before (a mask and an advance per token of its example text, which sweeps the
vocabulary's trie through the caches) and a pause (`--pause`, the parent and the other engines'
workers run meanwhile). The stages are `ttfm_stages.py`'s (session 9); printed, not asserted.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/results/2026-12-02-s11-ttfm/ttfm_worker_cold.py
        [--rounds N] [--pause SECONDS] [--sample N]

Run from the worktree to measure (its venv's corral); the script itself only reads bench/.
--sample: also the median `ttfm` of the first N schemas of engines.py's sample order (each
compiled once, each after the walk of one of the five grammars).
"""

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))  # bench/
sys.path.insert(0, str(HERE.parents[1] / "2026-12-02-s9-ttfm2"))

from corral.automata import regex_to_dfa, schema_to_dfa  # noqa: E402
from corral.kernels import TokenIndex  # noqa: E402
from engine_workers import WARM_UP, load_vocabulary  # noqa: E402
from engines import EXAMPLES  # noqa: E402
from masks import GRAMMARS  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from ttfm_stages import STAGES, first_mask_seconds, sample_schemas, stage_times  # noqa: E402


def walk(index: TokenIndex, tokens: list[int]) -> None:
    """Mask and advance along `tokens` from the start state, as engines.py's `measure` does."""
    state = 0
    for token in tokens:
        index.mask(state)
        state = index.next_state(state, token)
        if state < 0:
            return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pause", type=float, default=0.005, help="seconds before a compile")
    parser.add_argument("--sample", type=int, default=0, help="schemas of the sample")
    args = parser.parse_args()
    vocabulary, tokenizer_json = load_vocabulary()
    tokenizer = Tokenizer.from_str(tokenizer_json)
    for kind, source in WARM_UP:
        stage_times(kind, source, vocabulary)
    walks = []
    for name, kind, source in GRAMMARS:
        dfa = regex_to_dfa(source) if kind == "regex" else schema_to_dfa(copy.deepcopy(source))
        tokens = tokenizer.encode(EXAMPLES[name], add_special_tokens=False).ids
        walks.append((TokenIndex(dfa, vocabulary), tokens))
    print(f"{'grammar':22}" + "".join(f"{s:>9}" for s in STAGES) + f"{'ttfm':>9}")
    for g, (name, kind, source) in enumerate(GRAMMARS):
        rows, totals = [], []
        for round_ in range(args.rounds):
            for staged in (True, False):
                walk(*walks[g - 1])
                time.sleep(args.pause)
                # a fresh copy of a schema; a regex behind a different number of empty groups
                # each time (the same NFA), so no parse cache answers
                empty = "(?:)" * (2 * round_ + (not staged))
                fresh = copy.deepcopy(source) if kind == "schema" else empty + source
                if staged:
                    rows.append(stage_times(kind, fresh, vocabulary))
                else:
                    totals.append(first_mask_seconds(kind, fresh, vocabulary))
        medians = [1e3 * statistics.median(column) for column in zip(*rows, strict=True)]
        ttfm = 1e3 * statistics.median(totals)
        print(f"{name:22}" + "".join(f"{m:9.3f}" for m in medians) + f"{ttfm:9.3f}")
    if args.sample:
        firsts = []
        for i, schema in enumerate(sample_schemas(args.sample)):
            walk(*walks[i % len(walks)])
            time.sleep(args.pause)
            firsts.append(1e3 * first_mask_seconds("schema", copy.deepcopy(schema), vocabulary))
        print(f"sample of {len(firsts)} schemas: ttfm median {statistics.median(firsts):.3f} ms")


if __name__ == "__main__":
    main()

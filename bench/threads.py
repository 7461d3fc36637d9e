"""How idle threads should wait, measured on a shared machine: the default model (or the float32
one) in one child process per thread environment, the children taking turns at short
measurements, printed, not asserted.

    .venv/bin/python bench/threads.py                      # blocks, 4 environments, 6 rounds
    .venv/bin/python bench/threads.py --weights float32 --rounds 3
    .venv/bin/python bench/threads.py --environments P:- P:4 1000:-

An environment is SPIN:TIMEOUT: SPIN is "P" (OMP_WAIT_POLICY=PASSIVE alone, corral's default)
or a libgomp GOMP_SPINCOUNT (with PASSIVE: how long Numba's idle OpenMP worker polls before it
sleeps); TIMEOUT is "-" (OPENBLAS_THREAD_TIMEOUT unset: OpenBLAS's idle threads poll for about
2^28 cycles after each call) or an OPENBLAS_THREAD_TIMEOUT (4: they sleep at once). Both
libraries read their variables once, when they load, hence the child processes.

Every child loads its model once, then waits for requests: a 256-token prefill, or a few decode
steps at batch 1, 8, 32 or 64 over 256-token contexts (each after one untimed step). Each round
asks every child for each measurement, the children in a shuffled order, so a burst of other load
falls on all of them alike; the table gives each figure's median over the rounds and the median
of its ratio to the first environment's figure of the same round. bench/model.py is the run for a
machine alone; this one is for when other processes share the cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

PROMPT_TOKENS = 256

MEASUREMENTS = (("prefill", 1, 1), ("decode", 1, 8), ("decode", 8, 8), ("decode", 32, 3),
                ("decode", 64, 2))  # fmt: skip
"""(kind, batch, steps) of one request to a child."""


def child_environment(spec: str) -> dict[str, str]:
    """The environment of the child for SPIN:TIMEOUT (see the module docstring)."""
    spin, timeout = spec.split(":")
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    for name in ("GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT"):
        env.pop(name, None)
    if spin != "P":
        env["GOMP_SPINCOUNT"] = str(int(spin))
    if timeout != "-":
        env["OPENBLAS_THREAD_TIMEOUT"] = str(int(timeout))
    return env


def serve(weights: str, threads: int) -> None:
    """The child: load the model, answer each request line [kind, batch, steps] with one line,
    tokens/s. NumPy loads OpenBLAS before corral is imported, so OpenBLAS sees only the
    OPENBLAS_THREAD_TIMEOUT `child_environment` gave (not corral's default)."""
    import numpy as np  # noqa: I001
    import numba
    from corral.model import load_model
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    with threadpool_limits(limits=threads, user_api="blas"):
        model = load_model(progress=False, weights=weights)
        rng = np.random.default_rng(0)
        prompt = rng.integers(100, 40000, PROMPT_TOKENS)
        cache = model.new_cache(64, PROMPT_TOKENS + 2)
        model.prefill(cache, 0, prompt)
        for slot in range(1, 64):
            cache.copy_slot(0, slot)
        prompt_cache = model.new_cache(1, PROMPT_TOKENS)
        print("ready", flush=True)
        for line in sys.stdin:
            kind, batch, steps = json.loads(line)
            slots, tokens = np.arange(batch), rng.integers(100, 40000, batch)

            def run(n, kind=kind, slots=slots, tokens=tokens):
                for _ in range(n):
                    if kind == "prefill":
                        prompt_cache.reset(0)
                        model.prefill(prompt_cache, 0, prompt)
                    else:
                        model.decode(cache, slots, tokens)
                        cache.lengths[slots] = PROMPT_TOKENS

            run(1)  # wakes the threads, untimed
            start = time.perf_counter()
            run(steps)
            tokens_done = steps * (PROMPT_TOKENS if kind == "prefill" else batch)
            print(json.dumps(tokens_done / (time.perf_counter() - start)), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="thread waiting, children taking turns")
    parser.add_argument("--weights", default="auto", choices=("auto", "float32"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--environments", nargs="+", default=["P:-", "P:4", "1000:-", "1000:4"])
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child
    args = parser.parse_args()
    if args.serve:
        serve(args.weights, args.threads)
        return
    command = [sys.executable, __file__, "--serve", "--weights", args.weights]
    command += ["--threads", str(args.threads)]
    children = {
        spec: subprocess.Popen(
            command,
            env=child_environment(spec),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for spec in args.environments
    }
    for spec, child in children.items():
        if child.stdout.readline().strip() != "ready":
            sys.exit(f"the child for {spec} did not start")
    rates = {(spec, m): [] for spec in children for m in MEASUREMENTS}
    order = random.Random(0)
    for _ in range(args.rounds):
        for measurement in MEASUREMENTS:
            specs = list(children)
            order.shuffle(specs)
            for spec in specs:
                children[spec].stdin.write(json.dumps(measurement) + "\n")
                children[spec].stdin.flush()
                rates[spec, measurement].append(json.loads(children[spec].stdout.readline()))
    for child in children.values():
        child.stdin.close()
        child.wait()

    first = args.environments[0]
    names = ["prefill" if kind == "prefill" else f"b={batch}" for kind, batch, _ in MEASUREMENTS]
    print(
        f"tokens/s, {args.weights} weights, {args.threads} threads, {PROMPT_TOKENS}-token prompt"
        f" / context: median of {args.rounds} rounds (median ratio to {first} in the same round)"
    )
    print(f"{'SPIN:TIMEOUT':14s}" + "".join(f"{name:>16s}" for name in names))
    for spec in children:
        cells = []
        for m in MEASUREMENTS:
            ratios = [a / b for a, b in zip(rates[spec, m], rates[first, m], strict=True)]
            cells.append(
                f"{statistics.median(rates[spec, m]):9.1f} ({statistics.median(ratios):.2f})"
            )
        print(f"{spec:14s}" + "".join(f"{cell:>16s}" for cell in cells))
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()

"""Each of SmolLM2-135M's block products alone, float32 activations against int8 activations on
AVX-512 VNNI, at a few batches: GFLOP/s (2 B n_out k over the median time of a call), the
share of the machine's float32 GEMM rate (NumPy's float32 matmul of two 2048 x 2048 matrices on
the process's threads, measured in the same run) and GB/s (the weights' bytes over that time:
at batch 1, where a call reads them once, their stream's rate). Printed, not asserted.

    .venv/bin/python bench/products.py                          # batches 1 8 32 64, 3 rounds
    .venv/bin/python bench/products.py --batches 32 --rounds 5 --repeats 30
    .venv/bin/python bench/products.py --kernels float32 paired q8_1-1 q8_1-2
    .venv/bin/python bench/products.py --model --kernels float32 int8-vnni q8_1 --rounds 3
    .venv/bin/python bench/products.py --set qwen3-0.6b --batches 32 64  # K-quant products
    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python bench/products.py --clock cpu

The products are SmolLM2-135M Q4_1's: q/k/v stacked (960 x 576, Q4_1), o (576 x 576), gate/up
stacked (3072 x 576), down (576 x 1536), the LM head (49,152 x 576, Q8_0), as
`corral.model.quant.TiledMatrix.matmul` runs them (the model's dispatch, the parts of x its
callers ask for: `ACTIVATION_PARTS` for the layers, `HEAD_ACTIVATION_PARTS` for the head).
W is random blocks, one copy, so a layer's weights (0.2 to 1 MB) are in cache, as at batch 8 and
more, where each product reads its weights once per group of rows; the head's 28 MB come from
L3 or memory. The kernels take turns call by call, so that a shared machine's load falls on all
of them alike; the table gives each product's best round (`--rounds`) of the median time of
`--repeats` calls.

`--set` takes another model's products instead, in the forms its Q4_K_M GGUF holds them as
`corral.kernels.compute.kquant_layout.as_blocks` rewrites them (random blocks, `kquants.py`'s):
"qwen3-0.6b" (Qwen3-0.6B's dimensions: Q4_K, the layers' down Q6_K where llama.cpp gives it
more bits, the LM head Q6_K) or "gemma3-270m" (Gemma 3 270M's: rows of 640 weights are no
multiple of 256, so Q5_0 for Q4_K and Q8_0 for Q6_K, as llama.cpp falls back). Their kernels
are "float32" and "int8-vnni" (and "paired").

Kernels (`--kernels`): "float32" (the float32 plan's), "int8-vnni" (the int8-vnni plan's, with
the parts the model asks for), "paired" (`quant_int8.paired_matmul`: x in two int8 parts on
one scale), "q8_1-N" (`quant_int8.int8_matmul`: x in N parts of ggml's Q8_1), "super" (Q4_K
and Q6_K in their own bytes, `quant.super_tiled`, on the int8-vnni plan: the form a model loads
where VNNI runs; other kinds as "int8-vnni").
"""

from __future__ import annotations

from corral.kernels.threads import configure

configure()

import argparse  # noqa: E402 - after configure()
import dataclasses  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402
from corral.kernels.compute import quant_int8  # noqa: E402
from corral.kernels.compute.plan import ComputePlan  # noqa: E402
from corral.model import quant  # noqa: E402

PRODUCTS = {
    "qkv": ("Q4_1", 960, 576),
    "o": ("Q4_1", 576, 576),
    "gate_up": ("Q4_1", 3072, 576),
    "down": ("Q4_1", 576, 1536),
    "lm_head": ("Q8_0", 49152, 576),
}
"""SmolLM2-135M Q4_1's products: name -> (block type, n_out, k)."""

SETS = {
    "smollm2": PRODUCTS,
    "qwen3-0.6b": {
        "qkv": ("Q4_K", 4096, 1024),
        "o": ("Q4_K", 1024, 2048),
        "gate_up": ("Q4_K", 6144, 1024),
        "down": ("Q4_K", 1024, 3072),
        "down_q6k": ("Q6_K", 1024, 3072),
        "lm_head": ("Q6_K", 151936, 1024),
        "head_q4k": ("Q4_K", 151936, 1024),
    },
    "gemma3-270m": {
        "qkv": ("Q5_0", 1536, 640),
        "o": ("Q4_K", 640, 1024),
        "gate_up": ("Q5_0", 4096, 640),
        "down": ("Q4_K", 640, 2048),
        "down_q8": ("Q8_0", 640, 2048),
        "lm_head": ("Q8_0", 262144, 640),
    },
}
"""`--set`'s products: name -> (GGUF block type, n_out, k). Qwen3-0.6B: hidden 1024, 16 query
and 8 key/value heads of 128, FFN 3072, vocabulary 151,936; Gemma 3 270M: hidden 640, 4 query
and 1 key/value head of 256, FFN 2048, vocabulary 262,144 (its LM head alone, 168 MB as Q8_0,
comes from memory). "head_q4k" is Qwen3's head as Q4_K, no product of the model: 92 MB of
Q4_K from memory, the one-row kernel's stream as a batch-1 step reads it."""


def random_matrix(rng: np.random.Generator, kind: str, n_out: int, k: int) -> quant.BlockMatrix:
    """Random blocks with small float16 scales (and minimums)."""
    size = {"Q4_1": 20, "Q8_0": 34}[kind]
    raw = rng.integers(0, 256, (n_out, k // 32, size), dtype=np.uint8)
    for start in (0, 2) if kind == "Q4_1" else (0,):
        half = rng.uniform(-0.01, 0.01, raw.shape[:2] + (1,)).astype(np.float16)
        raw[..., start : start + 2] = half.view(np.uint8)
    return quant.BlockMatrix.from_blocks(kind, raw.reshape(n_out, -1))


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
"""`--clock`: wall time, or the process's CPU time (every thread's: on one thread, a core's
rate whatever else the machine runs)."""


def median_seconds(call, repeats: int, clock=time.perf_counter) -> float:
    """The median time of `repeats` calls after one untimed call."""
    return interleaved_medians({"call": call}, repeats, clock)["call"]


def interleaved_medians(calls: dict, repeats: int, clock=time.perf_counter) -> dict:
    """{name: the median time of `repeats` calls by `clock`}, the calls taking turns call by
    call (after one untimed call each), so that a shared machine's load falls on all of them
    alike."""
    for call in calls.values():
        call()
    times = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            call()
            times[name].append(clock() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def gemm_peak(repeats: int, clock=time.perf_counter) -> float:
    """NumPy's float32 matmul of two 2048 x 2048 matrices: GFLOP/s (median of `repeats`)."""
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    return 2 * 2048**3 / median_seconds(lambda: a @ a, repeats, clock) / 1e9


def tiled_pair(rng: np.random.Generator, kind: str, n_out: int, k: int) -> dict:
    """{"float32", "int8-vnni": one random matrix of GGUF type `kind` on that plan} (the same
    arrays): Q4_1 and Q8_0 as `random_matrix`, tiled; the others rewritten by `as_blocks`, in
    word tiles alone; Q4_K and Q6_K also "super": the same blocks in their own bytes
    (`quant.super_tiled`), as the model holds them where VNNI runs."""
    if kind in ("Q4_1", "Q8_0"):
        tiled = random_matrix(rng, kind, n_out, k).tiled(ComputePlan("float32", 16))
    else:
        from corral.kernels.compute.kquant_layout import as_blocks
        from kquants import random_raw

        raw = random_raw(rng, kind, n_out, k)
        block = quant.BlockMatrix(*as_blocks(raw, kind))
        tiled = block.tiled(ComputePlan("float32", 16), words_only=True)
    pair = {name: dataclasses.replace(tiled, plan=ComputePlan(name, 16))
            for name in ("float32", "int8-vnni")}  # fmt: skip
    if kind in quant.SUPER_KINDS:  # the form the model loads where VNNI runs
        pair["super"] = dataclasses.replace(
            quant.super_tiled(raw, kind), plan=pair["int8-vnni"].plan
        )
    return pair


def kernel_call(name: str, matrices: dict, product: str, x: np.ndarray):
    """A call of no argument: x times `product`'s matrix by kernel `name` (`--kernels`)."""
    head = product == "lm_head"
    if name == "float32":
        return lambda: matrices["float32"].matmul(x)
    if name == "super":
        matrix = matrices.get("super", matrices["int8-vnni"])
        return lambda: matrix.matmul(x)
    if name == "int8-vnni":
        parts = quant.HEAD_ACTIVATION_PARTS if head else quant.ACTIVATION_PARTS
        return lambda: matrices["int8-vnni"].matmul(x, parts)
    m = matrices["int8-vnni"]
    coefs = m.scales if m.minimums is None else m.minimums
    out = np.empty((x.shape[0], m.n_out), np.float32)
    if name == "paired":
        halves = m.kind == "Q8_16"
        return lambda: quant_int8.paired_matmul(x, m.scales, coefs, m.words, out, halves)
    parts = int(name.removeprefix("q8_1-"))
    return lambda: quant_int8.int8_matmul(x, parts, m.scales, coefs, m.words, out)


def weights_bytes(name: str, matrices: dict) -> int:
    """The bytes of the weights kernel `name` reads (once per call at batch 1: the table's
    GB/s column is these over the time)."""
    if name == "float32":
        return matrices["float32"].nbytes
    if name == "super":
        return matrices.get("super", matrices["int8-vnni"]).nbytes
    return matrices["int8-vnni"].nbytes


def model_speeds(
    batches: list[int], kernels: list[str], steps: int, rounds: int, clock=time.perf_counter
) -> dict:
    """Prefill tokens/s (a 256-token prompt) and decode tokens/s (a 256-token context a
    sequence) of the default model on each kernel's plan, taking turns: "float32"
    (`ComputePlan.detect(int8_activations=False)`), "int8-vnni" (`ComputePlan("int8-vnni",
    16)`, float32 cache), "q8_1" (the same plan with the products on `quant_int8.int8_matmul`,
    x in the model's parts of Q8_1: the VNNI path before `paired_matmul`).
    -> {(batch or "prefill", kernel): best tokens/s}"""
    from corral.model import load_model

    model = load_model(progress=False)
    vnni = ComputePlan("int8-vnni", 16)
    plans = {"float32": ComputePlan.detect(int8_activations=False, kv_dtype="float32"),
             "int8-vnni": vnni, "q8_1": vnni}  # fmt: skip
    models = {name: model.with_plan(plans[name]) for name in kernels}
    rng = np.random.default_rng(0)
    prompt = rng.integers(100, 40000, 256)
    caches = {}
    for name, m in models.items():
        caches[name] = m.new_cache(max(batches), 256 + steps + 2)
        m.prefill(caches[name], 0, prompt)
        for slot in range(1, max(batches)):
            caches[name].copy_slot(0, slot)

    def q8_1(matrix, x, parts):  # the VNNI dispatch before paired_matmul
        coefs = matrix.minimums if matrix.kind == "Q4_1" else matrix.scales
        out = np.empty((x.shape[0], matrix.n_out), np.float32)
        return quant_int8.int8_matmul(x, parts, matrix.scales, coefs, matrix.words, out)

    paired = quant.MATMULS["int8-vnni"]
    best: dict = {}
    for _ in range(rounds):
        for name, m in models.items():  # prefill: the 256-token prompt again, in slot 0
            quant.MATMULS["int8-vnni"] = q8_1 if name == "q8_1" else paired
            try:
                caches[name].reset(0)
                start = clock()
                m.prefill(caches[name], 0, prompt)
                rate = len(prompt) / (clock() - start)
            finally:
                quant.MATMULS["int8-vnni"] = paired
            best[("prefill", name)] = max(best.get(("prefill", name), 0.0), rate)
        for batch in batches:
            slots = np.arange(batch)
            tokens = rng.integers(100, 40000, batch)
            for name, m in models.items():
                quant.MATMULS["int8-vnni"] = q8_1 if name == "q8_1" else paired
                try:
                    m.decode(caches[name], slots, tokens)  # warm-up
                    start = clock()
                    for _ in range(steps):
                        m.decode(caches[name], slots, tokens)
                    rate = batch * steps / (clock() - start)
                finally:
                    quant.MATMULS["int8-vnni"] = paired
                caches[name].lengths[slots] = 256
                best[(batch, name)] = max(best.get((batch, name), 0.0), rate)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--set", default="smollm2", choices=list(SETS),
                        help="the model whose products are timed (smollm2)")  # fmt: skip
    parser.add_argument("--products", nargs="+", help="some of the set's products (all)")
    parser.add_argument("--kernels", nargs="+", default=["float32", "int8-vnni"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--clock", default="wall", choices=list(CLOCKS),
                        help="wall time, or CPU time (a core's rate, with NUMBA_NUM_THREADS=1 "
                        "OPENBLAS_NUM_THREADS=1)")  # fmt: skip
    parser.add_argument("--model", action="store_true",
                        help="decode tokens/s of the whole model instead (kernels: float32, "
                        "int8-vnni, q8_1)")  # fmt: skip
    parser.add_argument("--steps", type=int, default=10, help="decode steps a turn (--model)")
    args = parser.parse_args()
    if args.model:
        kernels = [k for k in args.kernels if k in ("float32", "int8-vnni", "q8_1")]
        best = model_speeds(args.batches, kernels, args.steps, args.rounds, CLOCKS[args.clock])
        print(f"threads {numba.get_num_threads()}; {args.clock} time; decode tokens/s, "
              f"256-token contexts, best of {args.rounds} rounds of {args.steps} "
              "steps")  # fmt: skip
        print(f"{'B':>7} " + " ".join(f"{k:>10}" for k in kernels))
        for batch in ["prefill", *args.batches]:
            print(f"{batch:>7} " + " ".join(f"{best[(batch, k)]:10.1f}" for k in kernels))
        return
    if not quant_int8.available():
        args.kernels = [k for k in args.kernels if k == "float32"]
        print("the VNNI kernels do not run here: float32 only")
    products = SETS[args.set]
    args.products = args.products or list(products)
    unknown = sorted(set(args.products) - set(products))
    if unknown:
        parser.error(f"--products: {', '.join(unknown)} not in --set {args.set}'s {list(products)}")
    if args.set != "smollm2":
        args.kernels = [k for k in args.kernels if k in ("float32", "int8-vnni", "paired", "super")]
    rng = np.random.default_rng(0)
    matrices = {product: tiled_pair(rng, *products[product]) for product in args.products}
    widest = max(products[product][2] for product in args.products)
    xs = {b: rng.standard_normal((b, widest)).astype(np.float32) for b in args.batches}
    best: dict = {}
    peaks = []
    for _ in range(args.rounds):
        peaks.append(gemm_peak(5, CLOCKS[args.clock]))
        for product in args.products:
            k = products[product][2]
            for batch in args.batches:
                x = np.ascontiguousarray(xs[batch][:, :k])
                calls = {name: kernel_call(name, matrices[product], product, x)
                         for name in args.kernels}  # fmt: skip
                medians = interleaved_medians(calls, args.repeats, CLOCKS[args.clock])
                for name, seconds in medians.items():
                    key = (product, batch, name)
                    best[key] = min(best.get(key, np.inf), seconds)
    peak = max(peaks)
    print(f"{args.set}; threads {numba.get_num_threads()}; {args.clock} time; "
          f"float32 GEMM (NumPy 2048^3): "
          f"{', '.join(f'{p:.0f}' for p in peaks)} GFLOP/s, best {peak:.0f}")  # fmt: skip
    header = f"{'product':>8} {'n_out x k':>12} {'type':>4} {'B':>3}"
    for name in args.kernels:
        header += f" | {name:>14} us {'GFLOP/s':>7} {'peak':>5} {'GB/s':>5}"
    print(header)
    for product in args.products:
        kind, n_out, k = products[product]
        for batch in args.batches:
            line = f"{product:>8} {f'{n_out}x{k}':>12} {kind:>4} {batch:>3}"
            for name in args.kernels:
                seconds = best[(product, batch, name)]
                rate = 2 * batch * n_out * k / seconds / 1e9
                read = weights_bytes(name, matrices[product]) / seconds / 1e9
                line += f" | {seconds * 1e6:17.0f} {rate:7.1f} {rate / peak:5.0%} {read:5.1f}"
            print(line)


if __name__ == "__main__":
    main()

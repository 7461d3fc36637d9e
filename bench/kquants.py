"""The K-quant products' speed (`corral.kernels.compute.kquants`) beside the Q4_1 kernels on
the same shape: GB/s of weight bytes read (the tiled arrays' bytes over the median time of a
call), and ms a call, at batch 1 and a few larger batches. Printed, not asserted.

    .venv/bin/python bench/kquants.py                         # 2048 x 8192, batches 1 8 32
    .venv/bin/python bench/kquants.py --n-out 8192 --k 2048 --batches 1 --repeats 50

W is random blocks (n_out rows, k columns: y = x W^T reads n_out k weights). The Q4_1 figures
are `kernels.compute.quant.q4_1_matmul` (the one-row kernel streaming the weights) and
`kernels.compute.quant_rows.float_matmul` (the model's float path for one row and several). Run
it alone on a quiet machine: on a shared one the figures move with the other load.
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


def median_seconds(call, repeats: int) -> float:
    """The median time of `call()` over `repeats` calls, after two untimed ones."""
    call(), call()
    times = []
    for _ in range(repeats):
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
    parser.add_argument("--kinds", nargs="+", default=["Q4_K", "Q5_K", "Q6_K", "Q5_0"])
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n_out, k = args.n_out, args.k
    print(f"W {n_out} x {k}, {numba.get_num_threads()} threads; median of {args.repeats} calls")
    print(f"{'kernel':32} {'batch':>5} {'ms':>8} {'GB/s':>7} {'weights MB':>10}")
    cases = []
    for kind in args.kinds:
        w = repack(random_raw(rng, kind, n_out, k), kind)
        name = f"{kind} kquants.kquant_matmul"
        cases.append((name, w.nbytes, lambda x, w=w: kquant_matmul(x, w)))
    nbytes, calls = q4_1_calls(random_raw(rng, "Q4_1", n_out, k), n_out, k)
    cases += [(name, nbytes, call) for name, call in calls.items()]
    for batch in args.batches:
        x = rng.standard_normal((batch, k)).astype(np.float32)
        for name, nbytes, call in cases:
            seconds = median_seconds(lambda call=call, x=x: call(x), args.repeats)
            gbs = nbytes / seconds / 1e9
            print(f"{name:32} {batch:5} {seconds * 1e3:8.2f} {gbs:7.2f} {nbytes / 1e6:10.2f}")


if __name__ == "__main__":
    main()

"""The main job on a Ray cluster with Ray Data (docs/design.md section 7; its guarantees:
docs/tools.md, "Ray"): `corral generate INPUT -o OUTPUT --ray [ADDRESS]`, or `run_batch_ray`.

The input's lines are split into shards by custom_id (`shard_of`), `Dataset.map_batches` runs
them on actors that load the model once each (`BatchActor`, `corral.tools.batch.run_batch` over
a shard), and the driver appends each finished shard's lines to the output and adds up the
counts. Ray is imported only here, and this module only with `--ray` (`corral[ray]`).
"""

from __future__ import annotations

import io
import json
import math
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import fields

from corral.tools.batch import BatchSummary, LineError, read_line
from corral.tools.completions import served_name
from tqdm import tqdm

LINES_PER_SHARD = 64
"""Lines per shard (about): small enough that output streams and actors share the work, large
enough that each shard keeps an actor's batch full."""


def shard_of(text: str, number: int, n_shards: int) -> int:
    """The shard of an input line: by a stable hash (CRC-32) of its custom_id, so that every line
    of a custom_id lands in one shard; a line without one by its line number."""
    try:
        key = read_line(text, number)[0]
    except LineError as error:
        key = error.custom_id
    if key is None:
        return number % n_shards
    return zlib.crc32(key.encode("utf-8")) % n_shards


def shards(lines: Sequence[str], n_shards: int, numbers: Sequence[int] | None = None) -> list[dict]:
    """The non-blank lines in `n_shards` shards (empty ones dropped), each a dataset row
    `{"shard": JSON text of {"numbers": [...], "texts": [...]}}`, with the lines' `numbers`
    (None: 1, 2, ...)."""
    parts = [([], []) for _ in range(n_shards)]
    numbers = range(1, len(lines) + 1) if numbers is None else numbers
    for number, text in zip(numbers, lines, strict=True):
        if text.strip():
            numbers, texts = parts[shard_of(text, number, n_shards)]
            numbers.append(number)
            texts.append(text)
    return [
        {"shard": json.dumps({"numbers": numbers, "texts": texts}, ensure_ascii=False)}
        for numbers, texts in parts
        if numbers
    ]


class BatchActor:
    """A Ray Data actor: the model loaded once, then `run_batch` over each shard it is given.

    Args:
        model: a Hugging Face folder or .gguf path, or None for the default model.
        used, batch_size, default_max_tokens: as in `run_batch`.

    Call: a batch `{"shard": [JSON text, ...]}` -> `{"output": [lines text], "summary": [JSON]}`.
    """

    def __init__(self, model, used, batch_size: int, default_max_tokens: int | None):
        from corral.model import load_model
        from corral.tools.completions import Completions

        self.engine = Completions(load_model(model, progress=False), served_name(model))
        self.used = dict(used)
        self.batch_size = batch_size
        self.default_max_tokens = default_max_tokens

    def __call__(self, batch: dict) -> dict:
        from corral.tools.batch import run_batch

        outputs, summaries = [], []
        for shard in batch["shard"]:
            shard = json.loads(str(shard))
            out = io.StringIO()
            summary = run_batch(self.engine, shard["texts"], out, self.used, self.batch_size,
                                self.default_max_tokens, False, shard["numbers"])  # fmt: skip
            outputs.append(out.getvalue())
            summaries.append(json.dumps(summary.__dict__))
        return {"output": outputs, "summary": summaries}


def run_batch_ray(
    lines: Sequence[str],
    out,
    used: Mapping[str, int] | None = None,
    batch_size: int = 16,
    default_max_tokens: int | None = None,
    progress: bool = True,
    model: str | None = None,
    address: str | None = None,
    actors: int | None = None,
    lines_per_shard: int = LINES_PER_SHARD,
    numbers: Sequence[int] | None = None,
) -> BatchSummary:
    """`corral.tools.batch.run_batch` on Ray actors (see the module docstring).

    Args:
        lines, out, used, batch_size, default_max_tokens, progress: as in `run_batch` (the
            progress bar counts shards).
        model: the model each actor loads (`corral.model.load_model`'s path; None: default).
        address: the Ray cluster to join (`ray.init(address=...)`: `auto`, `ray://host:10001`,
            `host:6379`); None: join `$RAY_ADDRESS` or start a local Ray. An initialized Ray is
            used as it is.
        actors: how many actors (one CPU each); None: the cluster's CPUs.
        lines_per_shard: about how many lines a shard holds (>= 1).
        numbers: the lines' numbers in the input file (None: 1, 2, ...), for error messages.

    Returns the `BatchSummary` of every shard, seconds the wall time of this call.

    Raises:
        ImportError: Ray is not installed (`pip install corral[ray]`).
        ValueError: batch_size, actors or lines_per_shard < 1.
    """
    import ray

    for name, value in (("batch_size", batch_size), ("actors", actors or 1),
                        ("lines_per_shard", lines_per_shard)):  # fmt: skip
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    started = time.perf_counter()
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)
    if actors is None:
        actors = max(1, int(ray.cluster_resources().get("CPU", 1)))
    n_lines = sum(1 for text in lines if text.strip())
    rows = shards(lines, max(actors, math.ceil(n_lines / lines_per_shard)), numbers)
    summary = BatchSummary()
    if rows:
        dataset = ray.data.from_items(rows).map_batches(
            BatchActor,
            fn_constructor_kwargs={"model": model, "used": dict(used or {}),
                                   "batch_size": batch_size,
                                   "default_max_tokens": default_max_tokens},
            batch_size=1,
            concurrency=min(actors, len(rows)),
            num_cpus=1,
        )  # fmt: skip
        bar = tqdm(total=len(rows), desc="shards", unit="shard", disable=not progress)
        try:
            for row in dataset.iter_rows():
                out.write(row["output"])
                out.flush()
                _add(summary, json.loads(row["summary"]))
                bar.update(1)
        finally:
            bar.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _add(summary: BatchSummary, counts: dict) -> None:
    """Add a shard's counts (not its seconds) to `summary`."""
    for field in fields(BatchSummary):
        if field.name != "seconds":
            setattr(summary, field.name, getattr(summary, field.name) + counts[field.name])

"""The Batch job on Ray: the sharding is checked without Ray (every shard run by `run_batch`
with its line numbers gives, together, the local run's lines), then one slow run on a local Ray
(2 CPUs, 2 actors) with the real model equals the local run for fixed seeds."""

from __future__ import annotations

import io
import json

import pytest
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.ray_batch import shard_of, shards
from stand_in_model import StandInModel


def quick_line(custom_id: str, **body) -> str:
    body.setdefault("messages", [{"role": "user", "content": custom_id}])
    body.setdefault("seed", 7)
    return json.dumps({"custom_id": custom_id, "body": body})


LINES = [
    quick_line("a"),
    quick_line("b", temperature="hot"),  # 400
    "not json",
    quick_line("a"),  # duplicate of line 1
    quick_line("c", response_format={"type": "json_object"}),
    "",
    json.dumps({"custom_id": "d", "method": "GET", "body": {}}),  # invalid line with an id
    quick_line("b"),  # duplicate of line 2
    *[quick_line(f"x{i}", temperature=0.8) for i in range(9)],
    quick_line("x3"),  # duplicate
]


def comparable(text: str) -> list:
    """Output lines without their random ids and times, sorted by custom_id then content."""
    items = []
    for line in text.splitlines():
        item = json.loads(line)
        body = (item["response"] or {}).get("body") or {}
        choices = [c["message"] for c in body.get("choices", [])]
        error = item["error"] or body.get("error")
        items.append(json.dumps([item["custom_id"], choices, error], sort_keys=True))
    return sorted(items)


def run(lines, engine, **options) -> str:
    out = io.StringIO()
    run_batch(engine, lines, out, progress=False, batch_size=4, **options)
    return out.getvalue()


def test_every_line_of_a_custom_id_is_in_one_shard():
    for n_shards in (1, 2, 5):
        for text in LINES:
            placed = {shard_of(text, number, n_shards) for number in (1, 2, 9)}
            if '"custom_id"' in text:
                assert len(placed) == 1


@pytest.mark.parametrize("n_shards", [1, 3, 7])
def test_shards_run_apart_give_the_local_runs_lines(n_shards):
    engine = Completions(StandInModel())
    local = run(LINES, engine)
    parts = ""
    for row in shards(LINES, n_shards):
        shard = json.loads(row["shard"])
        parts += run(shard["texts"], engine, numbers=shard["numbers"])
    assert comparable(parts) == comparable(local)
    assert "line 4" in parts and "line 3 is not JSON" in parts  # the input's line numbers
    used = {"a": 1, "x1": 2}
    resumed = "".join(
        run(json.loads(r["shard"])["texts"], engine, numbers=json.loads(r["shard"])["numbers"],
            used=used)
        for r in shards(LINES, n_shards)
    )  # fmt: skip
    assert comparable(resumed) == comparable(run(LINES, engine, used=used))


@pytest.mark.slow
def test_local_ray_run_equals_the_local_run(smollm2, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (corral[ray])")
    from corral.tools.ray_batch import run_batch_ray

    lines = LINES + [
        quick_line("j", response_format={"type": "json_object"}, max_tokens=24, temperature=0.7)
    ]
    local_out = io.StringIO()
    local_summary = run_batch(Completions(smollm2), lines, local_out, batch_size=4, progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = io.StringIO()
        summary = run_batch_ray(lines, out, batch_size=4, progress=False, actors=2,
                                lines_per_shard=4)  # fmt: skip
    finally:
        ray.shutdown()
    assert comparable(out.getvalue()) == comparable(local_out.getvalue())
    assert (summary.requests, summary.errors, summary.invalid) == (12, 6, 0)
    assert (local_summary.requests, local_summary.errors) == (12, 6)
    assert summary.completion_tokens == local_summary.completion_tokens


def test_ray_is_refused_for_the_quick_form(capsys):
    from corral.tools.cli import main

    assert main(["generate", "--regex", "a", "--prompt", "x", "--ray"]) != 0
    assert "--ray runs an input file" in capsys.readouterr().err

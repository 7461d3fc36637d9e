"""bench/engine_store.py: coverage records resumed and merged per engine (no engine needed)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from engine_store import Store, coverage_cells, schema_sha, tally  # noqa: E402


def record(engine, id_, status="ok", cap=60.0, valid=(True, False), accepted=(True, False)):
    ok = status == "ok"
    return {
        "engine": engine,
        "subset": "S",
        "id": id_,
        "schema_sha": schema_sha({"id": id_}),
        "status": status,
        "cap_s": cap,
        "compile_s": 0.5 if ok else None,
        "valid": list(valid),
        "accepted": list(accepted) if ok else [],
        "error": None,
        "version": engine,
    }


def test_records_survive_a_restart_and_the_last_line_wins(tmp_path):
    store = Store(tmp_path)
    store.add(record("xgrammar", "a", status="timeout"))
    store.add(record("xgrammar", "a"))
    store.add(record("llguidance", "a", status="refused"))
    store.close()
    again = Store(tmp_path)
    assert again.records["xgrammar"]["a"]["status"] == "ok"
    assert again.engines() == ["llguidance", "xgrammar"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "coverage-llguidance.jsonl",
        "coverage-xgrammar.jsonl",
    ]


@pytest.mark.parametrize(
    "status,cap_then,cap_now,retry,expected",
    [
        ("ok", 60, 60, (), True),
        ("refused", 60, 60, (), True),
        ("timeout", 60, 60, (), True),
        ("timeout", 60, 120, (), False),  # a larger cap reruns a timeout
        ("timeout", 120, 60, (), True),
        ("crashed", 60, 60, ("crashed",), False),
    ],
)
def test_done_resumes_except_under_a_larger_cap_or_a_retry(
    tmp_path, status, cap_then, cap_now, retry, expected
):
    store = Store(tmp_path)
    store.add(record("corral", "a", status=status, cap=cap_then))
    assert store.done("corral", "a", schema_sha({"id": "a"}), cap_now, retry) is expected
    assert not store.done("corral", "a", schema_sha({"id": "changed"}), cap_now)
    assert not store.done("corral", "b", schema_sha({"id": "b"}), cap_now)


def test_tally_counts_instances_of_compiled_schemas_only():
    cell = tally(
        [
            record("e", "a", valid=(True, True, False), accepted=(True, False, True)),
            record("e", "b", status="refused", valid=(True, False)),
        ]
    )
    assert (cell["ok"], cell["refused"], cell["schemas"]) == (1, 1, 2)
    assert (cell["valid_ok"], cell["valid"], cell["invalid_ok"], cell["invalid"]) == (1, 2, 1, 1)


def test_coverage_cells_merge_engines_and_count_what_was_not_run(tmp_path):
    store = Store(tmp_path)
    store.add(record("corral", "a"))
    store.add(record("xgrammar", "a"))
    store.add(record("xgrammar", "b", status="refused"))
    cells = coverage_cells(store, {"S": ["a", "b"], "T": ["c"]}, ["corral", "xgrammar"])
    assert cells["S"]["corral"]["missing"] == 1 and cells["S"]["xgrammar"]["missing"] == 0
    assert cells["T"]["xgrammar"]["missing"] == 1
    assert cells["all"]["xgrammar"]["ok"] == 1 and cells["all"]["xgrammar"]["refused"] == 1
    assert cells["all"]["corral"]["missing"] == 2
    assert cells["common 1"]["xgrammar"]["ok"] == 1 and cells["common 1"]["corral"]["ok"] == 1


def test_coverage_counts_narrowed_compiles_apart_from_exact_ones():
    """corral's records say when a schema compiled with narrowed bounds (docs/subsets.md); the
    coverage table counts them apart (older records, without the field, count as exact)."""
    from engine_report import coverage_table

    narrowed = record("corral", "b") | {"narrowed": True}
    cell = tally([record("corral", "a"), narrowed, record("corral", "c", status="refused")])
    assert (cell["ok"], cell["narrowed"], cell["refused"]) == (2, 1, 1)
    table = coverage_table({"S": {"corral": cell | {"missing": 0}}}, ["corral"]).splitlines()
    assert table[0].startswith("| subset | engine | compiled | exact | narrowed | refused |")
    assert table[2].startswith("| S | corral | 2 | 1 | 1 | 1 |")

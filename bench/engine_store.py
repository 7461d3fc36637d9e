"""The coverage results of bench/engines.py, stored one JSON line per (engine, schema), one file per
engine, so a run can be resumed and the engines run apart and merged into one table.

A results folder holds `coverage-<engine>.jsonl`. Each line is one `cover` job:

    {"engine": "xgrammar", "subset": "BFCL", "id": "...", "schema_sha": "<sha1 of the schema>",
     "status": "ok" | "refused" | "crashed" | "timeout" | "error", "cap_s": 120.0,
     "compile_s": 0.012 | null, "valid": [true, false, ...], "accepted": [true, true, ...],
     "error": "..." | null, "version": "xgrammar 0.2.9"}

`valid` is each test instance's label, `accepted` whether the engine took every token of it (EOS
included); both follow the record's `tests` order. Re-running corral's coverage after a change of
the schema compiler is deleting (or moving) `coverage-corral.jsonl` and running
`--engines corral`: the other engines' files stay and are merged into the same table.
"""

from __future__ import annotations

import collections
import hashlib
import json
from pathlib import Path

import numpy as np

STATUSES = ("ok", "refused", "crashed", "timeout", "error")


def schema_sha(schema) -> str:
    """sha1 of the schema's JSON text (keys in document order): a changed data file is rerun."""
    return hashlib.sha1(json.dumps(schema).encode("utf-8")).hexdigest()


def engine_version(engine: str) -> str:
    """`"<engine> <package version>"` of an installed engine (corral: the git commit if known)."""
    from importlib import metadata

    package = {"outlines-core": "outlines_core"}.get(engine, engine)
    try:
        return f"{engine} {metadata.version(package)}"
    except metadata.PackageNotFoundError:
        return engine


class Store:
    """The coverage records of one results folder, readable and appendable per engine.

    Args:
        folder: the results folder (created if missing).

    `done(engine, id, sha, cap, retry)` says whether a job needs no run: a record exists for the
    same schema text, and it is not a timeout under a smaller cap than `cap` (nor a crash or an
    error when `retry` holds them).
    """

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict[str, dict]] = collections.defaultdict(dict)
        for path in sorted(self.folder.glob("coverage-*.jsonl")):
            for line in path.open(encoding="utf-8"):
                if line.strip():
                    record = json.loads(line)
                    self.records[record["engine"]][record["id"]] = record  # the last line wins
        self._files: dict[str, object] = {}

    def path(self, engine: str) -> Path:
        return self.folder / f"coverage-{engine}.jsonl"

    def done(self, engine: str, id_: str, sha: str, cap: float, retry=()) -> bool:
        record = self.records[engine].get(id_)
        if record is None or record["schema_sha"] != sha or record["status"] in retry:
            return False
        return not (record["status"] == "timeout" and record["cap_s"] < cap)

    def add(self, record: dict) -> None:
        """Append one record to its engine's file (flushed: a killed run loses at most one)."""
        engine = record["engine"]
        if engine not in self._files:
            self._files[engine] = self.path(engine).open("a", encoding="utf-8")
        handle = self._files[engine]
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        self.records[engine][record["id"]] = record

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def engines(self) -> list[str]:
        """Engines with records, corral first, then by name."""
        return sorted(self.records, key=lambda e: (e != "corral", e))


def tally(records: list[dict]) -> dict:
    """Counts of a list of records of one engine: per status, valid / invalid instances fed and
    accepted (of compiled schemas only), compile seconds of the compiled ones, and caps used."""
    cell = dict.fromkeys(STATUSES, 0) | {
        "schemas": len(records),
        "narrowed": 0,
        "valid": 0,
        "valid_ok": 0,
        "invalid": 0,
        "invalid_ok": 0,
        "compile_s": [],
        "caps_s": sorted({r["cap_s"] for r in records}),
    }
    for record in records:
        cell[record["status"]] = cell.get(record["status"], 0) + 1
        if record["status"] != "ok":
            continue
        cell["compile_s"].append(record["compile_s"])
        cell["narrowed"] += bool(record.get("narrowed"))  # corral's compiles with narrowed bounds
        for valid, accepted in zip(record["valid"], record["accepted"], strict=True):
            kind = "valid" if valid else "invalid"
            cell[kind] += 1
            cell[kind + "_ok"] += int(accepted)
    return cell


def coverage_cells(
    store: Store, subsets: dict[str, list[str]], engines: list[str]
) -> dict[str, dict[str, dict]]:
    """subset -> engine -> `tally` of the stored records of that subset's ids (ids without a
    record are counted under "missing"), plus an "all" row per engine, and when some records
    are missing a "common N" row: the N schemas every engine has a record of."""
    out: dict[str, dict[str, dict]] = {}
    pooled: dict[str, list[dict]] = collections.defaultdict(list)
    for subset, ids in subsets.items():
        out[subset] = {}
        for engine in engines:
            got = [store.records[engine][i] for i in ids if i in store.records[engine]]
            pooled[engine].extend(got)
            out[subset][engine] = tally(got) | {"missing": len(ids) - len(got)}
    total = sum(len(ids) for ids in subsets.values())
    out["all"] = {e: tally(pooled[e]) | {"missing": total - len(pooled[e])} for e in engines}
    common = [
        i for ids in subsets.values() for i in ids if all(i in store.records[e] for e in engines)
    ]
    if len(common) < total:  # a partial run: the same schemas for every engine
        out[f"common {len(common)}"] = {
            e: tally([store.records[e][i] for i in common]) | {"missing": 0} for e in engines
        }
    return out


def median_ms(cell: dict) -> float:
    return float(np.median(cell["compile_s"]) * 1e3) if cell["compile_s"] else float("nan")

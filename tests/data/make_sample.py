"""Rebuild tests/data, the small sample of the third-party test data, from the full data.

    python tests/data/make_sample.py [FULL_DATA]    # default: ../shared/data beside the checkout

The sample has the full data's layout (shared/data/README.md), so the tests read both with the
same code. The choice is deterministic: the same full data gives byte-identical files.
- `jsonschemabench/`: from every subset file, round(n / 32) lines (at least one), where n is the
  subset's line count, so each subset keeps its share. Lines are taken whole (schema and test
  instances) among those of at most 8,000 bytes, in the order of
  sha256("corral-test-sample-v1\\t<subset>\\t<id>"), and written in the full file's order.
- `bfcl/`: the same rule, 8 lines per file, plus `multiple_117`, the entry
  tests/tools/test_forced_calls.py picks from the full data; and LICENSE.
- `json-schema-test-suite/`: a few draft 2020-12 keyword files, byte for byte; and LICENSE.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_FULL = HERE.parent.parent.parent / "shared" / "data"
SALT = "corral-test-sample-v1"
SCHEMA_FRACTION = 1 / 32
MAX_LINE_BYTES = 8_000
BFCL_LINES = 8
BFCL_ALWAYS = {"BFCL_v4_multiple": {"multiple_117"}}
SUITE_FILES = [
    "draft2020-12/type.json",
    "draft2020-12/enum.json",
    "draft2020-12/properties.json",
    "draft2020-12/required.json",
    "draft2020-12/items.json",
    "draft2020-12/anyOf.json",
    "draft2020-12/additionalProperties.json",
    "draft2020-12/pattern.json",
    "draft2020-12/minimum.json",
    "draft2020-12/optional/format/uuid.json",
    "draft2020-12/optional/format/email.json",
]


def lines_of(path: Path) -> list[bytes]:
    """The non-empty lines of a JSON Lines file, as bytes (split on b"\\n" only: JSON strings may
    hold U+2028 and other characters that str.splitlines would split on)."""
    return [line for line in path.read_bytes().split(b"\n") if line]


def choose(subset: str, lines: list[bytes], count: int, always: set[str] = frozenset()) -> bytes:
    """`count` lines of at most MAX_LINE_BYTES by salted hash of their id, plus the ids in
    `always`; returned as one JSON Lines text in the input order."""

    def rank(line: bytes) -> str:
        record_id = json.loads(line)["id"]
        return hashlib.sha256(f"{SALT}\t{subset}\t{record_id}".encode()).hexdigest()

    small = [line for line in lines if len(line) <= MAX_LINE_BYTES]
    chosen = set(sorted(small, key=rank)[:count])
    chosen |= {line for line in lines if json.loads(line)["id"] in always}
    return b"".join(line + b"\n" for line in lines if line in chosen)


def main(full: Path) -> None:
    for folder in ("jsonschemabench", "bfcl", "json-schema-test-suite"):
        shutil.rmtree(HERE / folder, ignore_errors=True)
        (HERE / folder).mkdir()
    for path in sorted((full / "jsonschemabench").glob("*.jsonl")):
        lines = lines_of(path)
        count = max(1, round(len(lines) * SCHEMA_FRACTION))
        (HERE / "jsonschemabench" / path.name).write_bytes(choose(path.stem, lines, count))
    for path in sorted((full / "bfcl").glob("BFCL_*.jsonl")):
        always = BFCL_ALWAYS.get(path.stem, set())
        sample = choose(path.stem, lines_of(path), BFCL_LINES, always)
        (HERE / "bfcl" / path.name).write_bytes(sample)
    shutil.copyfile(full / "bfcl" / "LICENSE", HERE / "bfcl" / "LICENSE")
    suite = full / "json-schema-test-suite"
    for name in ["LICENSE", *SUITE_FILES]:
        target = HERE / "json-schema-test-suite" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(suite / name, target)
    total = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    print(f"tests/data: {total:,} bytes")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_FULL)

"""What the example scripts share: where the benchmark data is, writing a Batch API input line,
reading the answers of an output file (docs/design.md section 7), and the `make` / `score` command
line (a missing or unreadable file is one line on stderr and exit status 2, not a traceback)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
_ANNOUNCED: set[str] = set()  # the data sets whose sample was said to be used


def data_folder(name: str, root: Path = CHECKOUT, environ=os.environ) -> Path:
    """The folder of the data set `name` (`bfcl`, `jsonschemabench`), looked for as the tests
    look for it: in `$CORRAL_TEST_DATA`, else in `../shared/data` beside the checkout `root`,
    else the small sample shipped in `tests/data` (said on stderr, since scores over it are
    not the benchmark's)."""
    named = environ.get("CORRAL_TEST_DATA")
    if named:
        return Path(named) / name
    beside = root.parent / "shared" / "data" / name
    if beside.is_dir():
        return beside
    if name not in _ANNOUNCED:
        _ANNOUNCED.add(name)
        print(f"full data not found ({beside}; set CORRAL_TEST_DATA): using the sample in "
              f"tests/data/{name}", file=sys.stderr)  # fmt: skip
    return root / "tests" / "data" / name


def request_line(custom_id: str, body: dict) -> str:
    """One line of a Batch API input file (no newline)."""
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps(line, ensure_ascii=False)


@dataclass
class Tally:
    """Counts of an output file: answers, refused requests, answers cut by max_tokens, and
    answers that parse and validate."""

    total: int = 0
    errors: int = 0
    cut: int = 0
    valid: int = 0

    def report(self) -> None:
        print(f"answers: {self.total}; errors (refused requests): {self.errors}; "
              f"cut by max_tokens: {self.cut}")  # fmt: skip
        share = 100 * self.valid / max(self.total, 1)
        print(f"parse and validate: {self.valid}/{self.total} = {share:.1f}%")


def finished_choices(output: str, tally: Tally) -> Iterator[tuple[str, dict]]:
    """`(custom_id, first choice)` of each answered line of the output file that was not cut by
    max_tokens; refused lines (printed) and cut answers are counted in `tally`."""
    for text in Path(output).read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        tally.total += 1
        response = line["response"]
        if response is None or response["status_code"] != 200:
            tally.errors += 1
            print("error", line["custom_id"], json.dumps(response or line["error"])[:300])
            continue
        choice = response["body"]["choices"][0]
        if choice["finish_reason"] == "length":
            tally.cut += 1
            continue
        yield line["custom_id"], choice


def request_bodies(requests: str) -> dict[str, dict]:
    """custom_id -> request body of a Batch API input file."""
    bodies = {}
    for text in Path(requests).read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        bodies[line["custom_id"]] = line["body"]
    return bodies


def main(
    doc: str,
    make: Callable[[argparse.Namespace], None],
    score: Callable[[argparse.Namespace], None],
    output: str,
    options: dict[str, int],
) -> None:
    """`make -o OUTPUT [--OPTION N ...]` and `score REQUESTS OUTPUT`; `options` maps each
    integer option of `make` (`--max-tokens`) to its default; the first line of the script's
    `doc` describes it."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("make")
    m.add_argument("-o", "--output", default=output)
    for flag, default in options.items():
        m.add_argument(flag, type=int, default=default)
    m.set_defaults(run=make)
    s = commands.add_parser("score")
    s.add_argument("requests")
    s.add_argument("output")
    s.set_defaults(run=score)
    args = parser.parse_args()
    try:
        args.run(args)
    except OSError as error:  # a file that is missing, a folder, unreadable
        parser.exit(2, f"{parser.prog}: {error.filename}: {error.strerror}\n")

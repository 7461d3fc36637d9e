"""JSONSchemaBench schemas as an OpenAI Batch API file, and the scoring of the output.

    python examples/jsonschemabench.py make -o jsb_requests.jsonl [--count 100]
    corral generate jsb_requests.jsonl -o jsb_output.jsonl
    python examples/jsonschemabench.py score jsb_requests.jsonl jsb_output.jsonl

`make` takes schemas that corral's subset compiles (within 5 s each), round-robin over the
benchmark's subsets in file order, and asks for one JSON document each with
`response_format: json_schema` (the schema is also shown in the prompt, cut to 1,500
characters). `score` reports the share of answers that
parse and validate with `jsonschema` (answers cut by max_tokens and refused requests apart).
"""

from __future__ import annotations

import argparse
import json
import signal
from itertools import zip_longest
from pathlib import Path

import jsonschema
from corral.automata import ConstrainError, schema_to_dfa

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "jsonschemabench"
SUBSETS = (
    "Github_easy", "Github_medium", "Github_hard", "Github_trivial", "Github_ultra", "Glaiveai2K",
    "JsonSchemaStore", "Kubernetes", "Snowplow", "WashingtonPost",
)  # fmt: skip


class _TooSlow(Exception):
    pass


def _alarm(signum, frame):
    raise _TooSlow


def compiled(subset: str, limit: int, seconds: float = 5.0):
    """Up to `limit` (id, schema) pairs of a subset that corral compiles within `seconds` each
    (a schema that takes longer is passed over, as one that is refused)."""
    signal.signal(signal.SIGALRM, _alarm)
    found = 0
    for text in (DATA / f"{subset}.jsonl").read_text(encoding="utf-8").splitlines():
        if found >= limit:
            return
        item = json.loads(text)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            schema_to_dfa(item["schema"])
        except (ConstrainError, RecursionError, _TooSlow):
            continue
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        found += 1
        yield f"{subset}/{item['id']}", item["schema"]


def make(args: argparse.Namespace) -> None:
    per_subset = -(-args.count // len(SUBSETS)) + 5
    pools = [list(compiled(subset, per_subset)) for subset in SUBSETS]
    chosen = [pair for row in zip_longest(*pools) for pair in row if pair][: args.count]
    with open(args.output, "w", encoding="utf-8") as out:
        for custom_id, schema in chosen:
            shown = json.dumps(schema, ensure_ascii=False)[:1500]
            body = {
                "messages": [
                    {"role": "system", "content": "You write JSON documents."},
                    {"role": "user", "content": f"Write a JSON document for this schema:\n{shown}"},
                ],
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "document", "schema": schema, "strict": True},
                },
                "temperature": 0,
                "max_tokens": args.max_tokens,
            }
            line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}, ensure_ascii=False) + "\n")


def score(args: argparse.Namespace) -> None:
    schemas = {}
    for text in Path(args.requests).read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        schemas[line["custom_id"]] = line["body"]["response_format"]["json_schema"]["schema"]
    total = valid = cut = errors = 0
    for text in Path(args.output).read_text(encoding="utf-8").splitlines():
        line = json.loads(text)
        total += 1
        response = line["response"]
        if response is None or response["status_code"] != 200:
            errors += 1
            print("error", line["custom_id"], json.dumps(response or line["error"])[:300])
            continue
        choice = response["body"]["choices"][0]
        if choice["finish_reason"] == "length":
            cut += 1
            continue
        schema = schemas[line["custom_id"]]
        try:
            instance = json.loads(choice["message"]["content"])
            jsonschema.validators.validator_for(schema)(schema).validate(instance)
            valid += 1
        except (json.JSONDecodeError, TypeError, jsonschema.ValidationError) as error:
            print("invalid", line["custom_id"], str(error)[:300])
    print(f"answers: {total}; errors (refused requests): {errors}; cut by max_tokens: {cut}")
    print(f"parse and validate: {valid}/{total} = {100 * valid / max(total, 1):.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("make")
    m.add_argument("-o", "--output", default="jsb_requests.jsonl")
    m.add_argument("--count", type=int, default=100)
    m.add_argument("--max-tokens", type=int, default=512)
    m.set_defaults(run=make)
    s = commands.add_parser("score")
    s.add_argument("requests")
    s.add_argument("output")
    s.set_defaults(run=score)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()

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

import jsonschema
from batch_files import Tally, data_folder, finished_choices, main, request_bodies, request_line
from corral.automata import ConstrainError, schema_to_dfa

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
    path = data_folder("jsonschemabench") / f"{subset}.jsonl"
    for text in path.read_text(encoding="utf-8").splitlines():
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
            out.write(request_line(custom_id, body) + "\n")


def score(args: argparse.Namespace) -> None:
    schemas = {
        custom_id: body["response_format"]["json_schema"]["schema"]
        for custom_id, body in request_bodies(args.requests).items()
    }
    tally = Tally()
    for custom_id, choice in finished_choices(args.output, tally):
        schema = schemas[custom_id]
        try:
            instance = json.loads(choice["message"]["content"])
            jsonschema.validators.validator_for(schema)(schema).validate(instance)
            tally.valid += 1
        except (json.JSONDecodeError, TypeError, jsonschema.ValidationError) as error:
            print("invalid", custom_id, str(error)[:300])
    tally.report()


if __name__ == "__main__":
    main(__doc__, make, score, "jsb_requests.jsonl", {"--count": 100, "--max-tokens": 512})

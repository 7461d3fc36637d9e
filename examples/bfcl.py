"""BFCL questions as an OpenAI Batch API file, and the scoring of `corral generate`'s output.

    python examples/bfcl.py make  -o bfcl_requests.jsonl [--per-file 20]
    corral generate bfcl_requests.jsonl -o bfcl_output.jsonl
    python examples/bfcl.py score bfcl_requests.jsonl bfcl_output.jsonl

What the adapter maps, as BFCL's own OpenAI-format runs do: parameter types `dict` -> `object`,
`float` -> `number`, `tuple` -> `array`, `any` -> `string` and BFCL's `optional` flag dropped
(`corral.tools.bfcl_to_json_schema`); dots in function names (`spotify.play`) become `_`, since
OpenAI function names allow only letters, digits, `_` and `-`. Every request uses
`tool_choice: "required"` and greedy decoding; `parallel_tool_calls` is true only in the
categories whose expected answers hold several calls (`parallel`, `parallel_multiple`), since
SmolLM2 otherwise tends to repeat its one call.

The score has two parts: the share of answers whose calls parse and validate against their tool's
parameters with `jsonschema` (corral's guarantee; answers cut by max_tokens counted apart), and
the share whose calls match BFCL's expected answer (a measure of the model, not of corral): same
set of function names, and every argument among the allowed values (strings compared without case
and surrounding spaces, numbers by value, "" in the allowed list meaning it may be omitted).
"""

from __future__ import annotations

import argparse
import json

import jsonschema
from batch_files import Tally, data_folder, finished_choices, main, request_bodies, request_line
from corral.tools import bfcl_tools

FILES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple")


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def make(args: argparse.Namespace) -> None:
    data = data_folder("bfcl")
    with open(args.output, "w", encoding="utf-8") as out:
        for name in FILES:
            lines = (data / f"BFCL_v4_{name}.jsonl").read_text(encoding="utf-8").splitlines()
            for text in lines[: args.per_file]:
                item = json.loads(text)
                tools = bfcl_tools(item["function"])
                for tool in tools:
                    tool["function"]["name"] = openai_name(tool["function"]["name"])
                body = {
                    "messages": item["question"][0],
                    "tools": tools,
                    "tool_choice": "required",
                    "parallel_tool_calls": name.startswith("parallel"),
                    "temperature": 0,
                    "max_tokens": args.max_tokens,
                }
                out.write(request_line(item["id"], body) + "\n")


def expected_answers() -> dict[str, list[dict]]:
    answers = {}
    data = data_folder("bfcl")
    for name in FILES:
        path = data / "possible_answer" / f"BFCL_v4_{name}.jsonl"
        for text in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(text)
            answers[item["id"]] = item["ground_truth"]
    return answers


def same_value(value, allowed) -> bool:
    if isinstance(value, str) and isinstance(allowed, str):
        return value.strip().lower() == allowed.strip().lower()
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed
    if isinstance(value, int | float) and isinstance(allowed, int | float):
        return float(value) == float(allowed)
    if isinstance(value, list) and isinstance(allowed, list):
        return len(value) == len(allowed) and all(map(same_value, value, allowed))
    if isinstance(value, dict) and isinstance(allowed, dict):
        return value.keys() == allowed.keys() and all(
            same_value(value[k], allowed[k]) for k in value
        )
    return value == allowed


def call_matches(name: str, arguments: dict, expected: dict) -> bool:
    ((want, params),) = expected.items()
    if openai_name(want) != name:
        return False
    for param, allowed in params.items():
        if param not in arguments:
            if "" not in allowed:
                return False
        elif not any(same_value(arguments[param], a) for a in allowed if a != ""):
            return False
    return set(arguments) <= set(params)


def calls_match(calls: list[tuple[str, dict]], expected: list[dict]) -> bool:
    """Every expected call matched by a distinct produced call, and nothing extra."""
    if len(calls) != len(expected):
        return False
    left = list(calls)
    for want in expected:
        for i, (name, arguments) in enumerate(left):
            if call_matches(name, arguments, want):
                del left[i]
                break
        else:
            return False
    return True


def score(args: argparse.Namespace) -> None:
    tools = {
        custom_id: {t["function"]["name"]: t["function"]["parameters"] for t in body["tools"]}
        for custom_id, body in request_bodies(args.requests).items()
    }
    answers = expected_answers()
    tally, matched = Tally(), 0
    by_category: dict[str, list[int]] = {}
    for custom_id, choice in finished_choices(args.output, tally):
        calls = []
        try:
            for call in choice["message"].get("tool_calls") or []:
                name = call["function"]["name"]
                arguments = json.loads(call["function"]["arguments"])
                jsonschema.validate(arguments, tools[custom_id][name])
                calls.append((name, arguments))
        except (json.JSONDecodeError, KeyError, jsonschema.ValidationError) as error:
            print("invalid", custom_id, str(error)[:200])
            continue
        if not calls:
            print("no call", custom_id)
            continue
        tally.valid += 1
        hit = calls_match(calls, answers[custom_id])
        matched += hit
        category = by_category.setdefault(custom_id.rsplit("_", 1)[0], [0, 0])
        category[0] += hit
        category[1] += 1
    tally.report()
    share = 100 * matched / max(tally.total, 1)
    print(f"match BFCL's expected calls: {matched}/{tally.total} = {share:.1f}%")
    for category, (hits, n) in sorted(by_category.items()):
        print(f"  {category}: {hits}/{n}")


if __name__ == "__main__":
    main(__doc__, make, score, "bfcl_requests.jsonl", {"--per-file": 20, "--max-tokens": 384})

"""Batch invariance end to end, through the `corral generate` command (issue 33, item 7): the same
seeded Batch lines run alone (`--batch-size 1`), inside batches of 8 and of 32 among other lines,
and across a `--resume` (an output cut after some lines, with a torn last line, then finished at
another batch size) must give the same bytes: each seeded line's answer (its `choices` and `usage`,
the response body without its `id` and `created`; a tool call's id without the random request id it
holds), and two identical lines of one file the same answer. Printed, one row per seeded line, with
whether every run agreed; the exit status is 1 when one did not.

    .venv/bin/python bench/batch_invariance.py            # the default model, the default plan
    .venv/bin/python bench/batch_invariance.py --int8     # int8 activations (VNNI or AMX)

The plan is the one `corral generate` runs with (`ComputePlan.detect`'s default); with `--int8`
each child (`python -c`, then the command's `main`) first makes `ComputePlan.detect` choose
int8 activations (`int8_activations=True`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def chat(text: str, **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}], **extra}


SEEDED = {  # custom_id: body; the two "twin" lines are the same request
    "s11-text": chat("Tell me a short story about a cat.", seed=11, max_tokens=40),
    "s999-text-a": chat("What is your favourite city, and why?", seed=999, max_tokens=40),
    "s999-text-b": chat("What is your favourite city, and why?", seed=999, max_tokens=40),
    "s11-json": chat(
        "Describe a person.",
        seed=11,
        max_tokens=40,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}},
    ),
    "s999-tool": chat(
        "What is the weather in Lyon?",
        seed=999,
        max_tokens=40,
        tools=[WEATHER],
        tool_choice="required",
    ),  # fmt: skip
    "s5-hot": chat("Write a list of five fruits.", seed=5, max_tokens=40, temperature=1.3),
}
TWINS = [("s999-text-a", "s999-text-b")]
FILLER_TOPICS = [
    "the sea", "a mountain", "bread", "a train", "winter", "a violin", "the moon", "coffee",
    "a garden", "rain", "a library", "the desert", "a bicycle", "snow", "a lighthouse",
]  # fmt: skip


def lines(with_filler: bool) -> list[str]:
    """The seeded lines, alone or spread among 34 other lines (seeded and greedy, short and
    long answers), as Batch API input lines."""
    items = [(cid, body) for cid, body in SEEDED.items()]
    if with_filler:
        filler = []
        for i in range(34):
            topic = FILLER_TOPICS[i % len(FILLER_TOPICS)]
            body = chat(f"Say something about {topic}." + " Please." * (i % 7), seed=100 + i,
                        max_tokens=8 + (i * 5) % 40)  # fmt: skip
            filler.append((f"filler-{i}", body))
        spread = []
        for i, item in enumerate(filler):
            spread.append(item)
            if i % 6 == 2 and items:
                spread.append(items.pop(0))
        items = spread + items
    return [
        json.dumps(
            {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}
        )  # fmt: skip
        for cid, body in items
    ]


def run(input_path: Path, output: Path, batch_size: int, int8: bool, resume: bool = False):
    """`corral generate INPUT -o OUTPUT --batch-size N [--resume] --quiet` in a child."""
    setup = (
        "import functools; from corral.kernels.compute.plan import ComputePlan as P; "
        "P.detect = staticmethod(functools.partial(P.detect, int8_activations=True)); "
        if int8
        else ""
    )
    code = f"{setup}import sys; from corral.tools.command import main; sys.exit(main())"
    argv = [str(input_path), "-o", str(output), "--batch-size", str(batch_size), "--quiet"]
    command = [sys.executable, "-c", code, "generate", *argv, *(["--resume"] if resume else [])]
    subprocess.run(command, check=True)


def answers(output: Path) -> dict[str, str]:
    """custom_id -> the canonical bytes of its answer (choices and usage)."""
    out = {}
    for text in output.read_text(encoding="utf-8").splitlines():
        item = json.loads(text)
        body = (item.get("response") or {}).get("body") or {"error": item.get("error")}
        kept = {key: body.get(key) for key in ("choices", "usage", "error") if key in body}
        for choice in kept.get("choices") or []:  # a call's id holds the random request id
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                call["id"] = call["id"].rsplit("_", 1)[-1]  # its index only
        out[item["custom_id"]] = json.dumps(kept, sort_keys=True, ensure_ascii=False)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--int8", action="store_true", help="int8 activations (VNNI or AMX)")
    args = parser.parse_args()
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        alone_in, mixed_in = scratch / "alone.jsonl", scratch / "mixed.jsonl"
        alone_in.write_text("\n".join(lines(False)) + "\n", encoding="utf-8")
        mixed_in.write_text("\n".join(lines(True)) + "\n", encoding="utf-8")
        run(alone_in, scratch / "alone.out", 1, args.int8)
        runs["alone"] = answers(scratch / "alone.out")
        for size in (8, 32):
            run(mixed_in, scratch / f"b{size}.out", size, args.int8)
            runs[f"batch {size}"] = answers(scratch / f"b{size}.out")
        # --resume: the batch-8 output cut after its first 12 lines and half of the 13th
        # (a torn line), then finished at batch size 32
        done = (scratch / "b8.out").read_text(encoding="utf-8").splitlines(keepends=True)
        cut = "".join(done[:12]) + done[12][: len(done[12]) // 2]
        (scratch / "resume.out").write_text(cut, encoding="utf-8")
        kept = {json.loads(text)["custom_id"] for text in done[:12]}
        run(mixed_in, scratch / "resume.out", 32, args.int8, resume=True)
        runs["--resume"] = answers(scratch / "resume.out")

    def short(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    names = list(runs)
    print(f"{'seeded line':14s}" + "".join(f"{name:>13s}" for name in names) + "  same")
    failures = 0
    for cid in SEEDED:
        cells = [runs[name].get(cid, "missing") for name in names]
        same = len(set(cells)) == 1
        failures += not same
        marks = "".join(f"{short(c):>13s}" for c in cells)
        redone = "" if cid in kept else " (redone after --resume)"
        print(f"{cid:14s}{marks}  {'yes' if same else 'NO'}{redone}")
    for a, b in TWINS:
        for name in names:
            same = runs[name].get(a) == runs[name].get(b)
            failures += not same
            print(f"twins {a} = {b} in {name}: {'yes' if same else 'NO'}")
    print("every seeded line gave the same bytes" if not failures else f"{failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

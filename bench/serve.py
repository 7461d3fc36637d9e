"""Server benchmark, printed, not asserted: `corral serve` with the real SmolLM2-135M-Instruct
on 127.0.0.1, with 1, 4 and 16 concurrent clients, for a forced tool call and for a json_schema
answer: requests/s, completion tokens/s and time to first token (p50, p99), beside the same work
through `corral generate`'s path (`corral.tools.batch.run_batch`, batch size = clients): the
server's overhead is the drop in completion tokens/s, in percent.

Run alone (two BLAS threads slow down up to 10x when another process computes):
    .venv/bin/python bench/serve.py [--requests 32] [--clients 1,4,16] [--tokens 48]

Every client streams (the `openai` client, `stream_options.include_usage`), so the time to first
token is the first content or tool-call delta as the client sees it.

With `--with-batch N`, the figure of the Batch API's priority instead: one client's interactive
latency (time to first token and whole request, p50 and p99, over `--requests` sequential tool
calls) alone, then while a batch of N lines (`/v1/batches`, each a json_schema answer of
`--tokens` tokens) runs on the same engine, and the batch lines answered meanwhile:
    .venv/bin/python bench/serve.py --with-batch 10000 --requests 32
"""

from __future__ import annotations

import argparse
import io
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
from corral.model import load_model
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.server import ServerConfig, background_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
        },
    },
}
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 30},
    },
    "required": ["name", "age", "city"],
}
WORKLOADS = {
    "tool call": {
        "messages": [{"role": "user", "content": "What is the weather in Lisbon?"}],
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    },
    "json_schema": {
        "messages": [{"role": "user", "content": "Describe a person who lives in Lisbon."}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON},
        },
    },
}


def one(client: openai.OpenAI, body: dict) -> tuple[float, int]:
    """Stream one request: (seconds to the first delta, completion tokens)."""
    started = time.perf_counter()
    first, tokens = None, 0
    stream = client.chat.completions.create(
        **body, stream=True, stream_options={"include_usage": True}
    )
    for chunk in stream:
        if first is None and chunk.choices:
            delta = chunk.choices[0].delta
            if delta.tool_calls or delta.content:
                first = time.perf_counter() - started
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    return (first if first is not None else time.perf_counter() - started), tokens


def through_server(client, bodies: list[dict], clients: int) -> tuple[float, int, list[float]]:
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda b: one(client, b), bodies))
    return time.perf_counter() - started, sum(t for _, t in results), [f for f, _ in results]


def through_generate(engine: Completions, bodies: list[dict], clients: int) -> tuple[float, int]:
    lines = [
        json.dumps({"custom_id": str(i), "method": "POST", "url": "/v1/chat/completions",
                    "body": body})
        for i, body in enumerate(bodies)
    ]  # fmt: skip
    summary = run_batch(engine, lines, io.StringIO(), batch_size=clients, progress=False)
    return summary.seconds, summary.completion_tokens


def interactive(client, bodies: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """One client's requests in turn: (seconds to the first delta, seconds to the end) each."""
    first, whole = [], []
    for body in bodies:
        started = time.perf_counter()
        first.append(one(client, body)[0])
        whole.append(time.perf_counter() - started)
    return np.array(first), np.array(whole)


def beside_a_batch(model, args) -> None:
    """Interactive latency alone and while a batch of `args.with_batch` lines runs."""
    config = ServerConfig(batch_size=16, max_len=512, data_dir=tempfile.mkdtemp())
    line = {"model": config.model_name, **WORKLOADS["json_schema"], "max_tokens": args.tokens}
    text = "".join(
        json.dumps({"custom_id": str(i), "body": {**line, "seed": i}}) + "\n"
        for i in range(args.with_batch)
    )
    bodies = [
        {"model": config.model_name, **WORKLOADS["tool call"], "max_tokens": args.tokens, "seed": i}
        for i in range(args.requests)
    ]
    print(f"{'interactive':28} {'ttft p50':>9} {'ttft p99':>9} {'req p50':>8} {'req p99':>8}")
    with background_server(model, config) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
        one(client, bodies[0])  # warm the grammar cache and the kernels
        rows = [("alone", interactive(client, bodies))]
        file = client.files.create(file=("batch.jsonl", text.encode()), purpose="batch")
        batch = client.batches.create(
            input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        while client.batches.retrieve(batch.id).status == "validating":
            time.sleep(0.5)
        before = client.batches.retrieve(batch.id).request_counts.completed
        rows.append((f"beside a batch of {args.with_batch} lines", interactive(client, bodies)))
        after = client.batches.retrieve(batch.id)
        client.batches.cancel(batch.id)
        for name, (first, whole) in rows:
            p50, p99 = np.percentile(first, [50, 99])
            w50, w99 = np.percentile(whole, [50, 99])
            print(f"{name:28} {p50:9.3f} {p99:9.3f} {w50:8.3f} {w99:8.3f}")
        done = after.request_counts.completed - before
        print(f"batch lines answered meanwhile: {done} ({after.status})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=32, help="requests per row (32)")
    parser.add_argument("--clients", default="1,4,16", help="concurrent clients (1,4,16)")
    parser.add_argument("--tokens", type=int, default=48, help="max_tokens per request (48)")
    parser.add_argument(
        "--with-batch", type=int, metavar="N", help="interactive latency beside a batch of N lines"
    )
    args = parser.parse_args()
    model = load_model()
    if args.with_batch:
        beside_a_batch(model, args)
        return
    engine = Completions(model)
    config = ServerConfig(batch_size=16, max_len=512)
    print(
        f"{'workload':12} {'clients':>7} {'req/s':>7} {'tok/s':>7} {'ttft p50':>9} "
        f"{'ttft p99':>9} {'generate tok/s':>15} {'overhead':>9}"
    )
    with background_server(model, config) as (url, _):
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
        for name, workload in WORKLOADS.items():
            bodies = [
                {"model": config.model_name, **workload, "max_tokens": args.tokens, "seed": i}
                for i in range(args.requests)
            ]
            one(client, bodies[0])  # warm the grammar cache and the kernels
            for clients in (int(c) for c in args.clients.split(",")):
                seconds, tokens, ttft = through_server(client, bodies, clients)
                g_seconds, g_tokens = through_generate(engine, bodies, clients)
                rate, g_rate = tokens / seconds, g_tokens / g_seconds
                p50, p99 = np.percentile(ttft, [50, 99])
                print(
                    f"{name:12} {clients:7d} {len(bodies) / seconds:7.2f} {rate:7.1f} "
                    f"{p50:9.3f} {p99:9.3f} {g_rate:15.1f} {100 * (1 - rate / g_rate):8.1f}%"
                )


if __name__ == "__main__":
    main()

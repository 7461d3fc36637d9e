"""Server flood benchmark, printed, not asserted: while `corral serve` (the real
SmolLM2-135M-Instruct, on 127.0.0.1 only) reads and refuses one maximal body of tools, how long
does `GET /health` take to answer?

One client posts a body of `--body-bytes` (4 MiB, the default `max_body_bytes`) to
`/v1/chat/completions`; another asks `/health` again and again, one request at a time, until
the post is answered (or `--timeout` seconds pass). Printed: each shape's post status and
seconds, and the `/health` answers' count, median and worst seconds. Shapes:

- `many`: as many small tools as fit (`{"type":"function","function":{"name":"f123"}}`,
  about 80,000), under tool_choice `auto` (the default);
- `large`: 128 tools (OpenAI's and corral's limit) whose parameter schemas fill the body, each
  with object properties of long descriptions, under `auto`.

Run alone (the figure is a latency on a shared machine otherwise):
    .venv/bin/python bench/serve_flood.py [--shapes many,large] [--timeout 600]
To measure another checkout's code (say main's, extracted with `git archive` under
`/tmp/main/corral/`), put it first on the path: `PYTHONPATH=/tmp/main .venv/bin/python ...`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time

import httpx
from corral.model import load_model
from corral.tools.server import ServerConfig, background_server

ASK = [{"role": "user", "content": "Which tool fits?"}]
LARGE_TOOLS = 128


def many_tools(size: int) -> dict:
    """The body with the most small tools whose JSON fits in `size` bytes."""
    body = {"messages": ASK, "tools": []}
    used = len(json.dumps(body))
    for i in range(size):
        tool = {"type": "function", "function": {"name": f"f{i}"}}
        cost = len(json.dumps(tool)) + 2  # ", " between tools
        if used + cost > size:
            break
        body["tools"].append(tool)
        used += cost
    return body


def large_tools(size: int) -> dict:
    """`LARGE_TOOLS` tools whose parameter schemas fill about `size` bytes: each has properties
    `p0`, `p1`, ... of type string with 1,000-character descriptions."""
    per_tool = size // LARGE_TOOLS
    description = "d" * 1000
    properties = {}
    while len(json.dumps(properties)) + 1100 < per_tool - 200:
        properties[f"p{len(properties)}"] = {"type": "string", "description": description}
    tools = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "parameters": {"type": "object", "properties": properties},
            },
        }
        for i in range(LARGE_TOOLS)
    ]
    return {"messages": ASK, "tools": tools}


SHAPES = {"many": many_tools, "large": large_tools}


def flood(url: str, body: bytes, timeout: float) -> dict:
    """Post `body` and time `/health` until the post is answered. Returns the figures."""
    posted: dict = {}

    def post() -> None:
        started = time.perf_counter()
        with httpx.Client(timeout=timeout) as http:
            try:
                response = http.post(
                    f"{url}/v1/chat/completions",
                    content=body,
                    headers={"Content-Type": "application/json"},
                )
                posted["status"] = response.status_code
                posted["answer"] = response.text[:160]
            except httpx.TimeoutException:
                posted["status"] = "timeout"
        posted["seconds"] = time.perf_counter() - started

    thread = threading.Thread(target=post)
    latencies = []
    with httpx.Client(timeout=timeout) as http:
        thread.start()
        while thread.is_alive():
            started = time.perf_counter()
            http.get(f"{url}/health").raise_for_status()
            latencies.append(time.perf_counter() - started)
        thread.join()
    return {"latencies": latencies, **posted}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="many,large", help="many, large (both)")
    parser.add_argument("--body-bytes", type=int, default=4 * 1024 * 1024, help="(4 MiB)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per post (600)")
    args = parser.parse_args()
    model = load_model(progress=False)
    config = ServerConfig(max_body_bytes=args.body_bytes)
    with background_server(model, config, host="127.0.0.1") as (url, _):
        print(
            f"{'shape':6} {'tools':>6} {'bytes':>8} {'status':>7} {'post s':>8} "
            f"{'health n':>8} {'p50 s':>7} {'worst s':>8}  answer"
        )
        for name in args.shapes.split(","):
            body = SHAPES[name](args.body_bytes)
            data = json.dumps(body).encode()
            assert len(data) <= args.body_bytes, len(data)
            figures = flood(url, data, args.timeout)
            lat = figures["latencies"]
            print(
                f"{name:6} {len(body['tools']):6d} {len(data):8d} {figures['status']!s:>7} "
                f"{figures['seconds']:8.2f} {len(lat):8d} {statistics.median(lat):7.3f} "
                f"{max(lat):8.3f}  {figures.get('answer', '')}"
            )


if __name__ == "__main__":
    main()

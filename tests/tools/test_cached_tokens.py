"""`usage.prompt_tokens_details.cached_tokens`, the prompt tokens the prefix cache gave, in an
answer of `corral serve`, in its stream's usage chunk and in a Batch line, re-derived from the
token ids of the prompts a request shares a prefix with (the stand-in model)."""

from __future__ import annotations

import io
import json

import httpx
import pytest
from corral.model.generate import MIN_SHARED
from corral.tools import parse_tool_request
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.server import ServerConfig, background_server
from stand_in_model import StandInModel

LONG = "Describe the weather in Paris in one line, please. "


def body(last: str, **fields) -> dict:
    ask = [{"role": "user", "content": LONG + last}]
    return {"messages": ask, "max_tokens": 4, "temperature": 0} | fields


def expected(engine: Completions, earlier: list[dict], later: dict) -> int:
    """The oracle: the longest prefix of `later`'s prompt ids that an earlier prompt shares,
    never its last token, and none below `MIN_SHARED`."""
    ids = engine.requests(parse_tool_request(later))[0].prompt_ids
    best = 0
    for other in earlier:
        held = engine.requests(parse_tool_request(other))[0].prompt_ids
        n = 0
        while n < min(len(held), len(ids) - 1) and held[n] == ids[n]:
            n += 1
        best = max(best, n)
    return best if best >= MIN_SHARED else 0


def cached(usage: dict) -> int:
    return usage["prompt_tokens_details"]["cached_tokens"]


@pytest.fixture
def engine():
    return Completions(StandInModel(), ServerConfig().model_name)


def test_answers_and_streams_report_the_prefix_the_cache_gave(engine):
    first, second = body("Thanks."), body("Quickly!")
    streamed = second | {"stream": True, "stream_options": {"include_usage": True}}
    with background_server(StandInModel()) as (url, _), httpx.Client(timeout=60) as http:
        answer = http.post(f"{url}/v1/chat/completions", json=first).json()
        assert cached(answer["usage"]) == 0  # nothing held yet: 0, not absent
        with http.stream("POST", f"{url}/v1/chat/completions", json=streamed) as events:
            data = [line[6:] for line in events.iter_lines() if line.startswith("data: ")]
        usage = json.loads(data[-2])["usage"]
        reused = expected(engine, [first], second)
        assert reused > 0 and cached(usage) == reused
        again = http.post(f"{url}/v1/chat/completions", json=second).json()
        assert cached(again["usage"]) == expected(engine, [first, second], second)
        assert again["usage"]["prompt_tokens"] == usage["prompt_tokens"]


def test_batch_lines_report_the_prefix_the_cache_gave(engine):
    bodies = [body("Thanks."), body("Quickly!"), body("Thanks.")]
    lines = [json.dumps({"custom_id": str(i), "body": b}) for i, b in enumerate(bodies)]
    out = io.StringIO()
    run_batch(engine, lines, out, batch_size=1, progress=False)
    usage = {
        item["custom_id"]: item["response"]["body"]["usage"]
        for item in map(json.loads, out.getvalue().splitlines())
    }
    for i, later in enumerate(bodies):  # one slot: it holds the line before's prompt
        assert cached(usage[str(i)]) == expected(engine, bodies[i - 1 : i], later), i
    out = io.StringIO()
    run_batch(engine, lines, out, batch_size=1, progress=False, prefix_cache=False)
    assert all(
        cached(json.loads(t)["response"]["body"]["usage"]) == 0 for t in out.getvalue().splitlines()
    )

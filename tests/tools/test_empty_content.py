"""An answer without tool calls has a string `content`, `""` when it is empty (a regex or
grammar whose match is the empty string, an answer that ended at once): null is only for a
message whose tool calls come without text, as OpenAI's. The stream, joined as a client joins
it, gives the same content."""

from __future__ import annotations

import json
import re

import httpx
import pytest
from corral.tools.server import ServerConfig, background_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

ASK = [{"role": "user", "content": "hi"}]
PATTERNS = ["", "a*", "(ab)?", "x{0,3}", "[0-9]*", "(yes|)", "b+"]  # all but the last match ""


@pytest.fixture(scope="module")
def http():
    with (
        background_server(StandInModel(), ServerConfig(batch_size=4)) as (url, _),
        httpx.Client(base_url=url, timeout=60) as client,
    ):
        yield client


def streamed_contents(http: httpx.Client, body: dict) -> dict[int, str | None]:
    """Each choice's content as a client joins a stream's deltas (None: no delta carried a
    `content` member)."""
    contents: dict[int, str | None] = {}
    with http.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    piece = choice["delta"].get("content")
                    if piece is not None:
                        contents[choice["index"]] = contents.get(choice["index"], "") + piece
    return contents


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pattern=st.sampled_from(PATTERNS),
    seed=st.integers(0, 2**16),
    n=st.integers(1, 2),
    logprobs=st.booleans(),
)
def test_an_empty_match_is_an_empty_string_streamed_or_not(http, pattern, seed, n, logprobs):
    body = {
        "messages": ASK,
        "structured_outputs": {"regex": pattern},
        "seed": seed,
        "n": n,
        "max_tokens": 6,
        "logprobs": logprobs,
    }
    answer = http.post("/v1/chat/completions", json=body).json()
    contents = [choice["message"]["content"] for choice in answer["choices"]]
    for content, choice in zip(contents, answer["choices"], strict=True):
        assert isinstance(content, str), answer  # never null without tool calls
        if choice["finish_reason"] == "stop":
            assert re.fullmatch(pattern, content), (pattern, content)
    streamed = streamed_contents(http, body)
    assert [streamed.get(i) for i in range(n)] == contents


def test_an_answer_that_ends_at_once_is_an_empty_string():
    """Free text whose first token is EOS (the stand-in's EOS made certain)."""
    with (
        background_server(StandInModel(eos_bias=100.0)) as (url, _),
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        body = {"messages": ASK, "max_tokens": 4}
        answer = http.post("/v1/chat/completions", json=body).json()
        assert answer["choices"][0]["message"]["content"] == ""
        assert streamed_contents(http, body) == {0: ""}

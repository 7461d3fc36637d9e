"""A tool call opened under `auto` is finishable (corral.kernels.masks.trigger, through `corral
serve`): a stand-in model that wants to write `Sure. <tool_call>{...}` (byte tokens and a few
longer ones holding the trigger, some with bytes after it), with random small `max_tokens`,
never leaves call markup in the content, streamed or not; and every call it makes is complete."""

from __future__ import annotations

import hashlib
import json

import httpx
import numpy as np
import pytest
from corral.kernels import Vocabulary
from corral.tools.parser import OPENER
from corral.tools.server import ServerConfig, background_server
from hypothesis import given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

SCRIPT = b'Sure. <tool_call>{"name":"f","arguments":{"a":1}}</tool_call>'
WORDS = [
    b"<tool_call>",
    b"<tool",
    b"_call>",
    b">{",
    b'>{"name',
    b'l>{"',
    b"Sure. <",
    b"<tool_call>\n",
]
TOKENS = tuple(bytes([b]) for b in range(256)) + tuple(WORDS) + (None,)
EOS = len(TOKENS) - 1
TOOL = {
    "type": "function",
    "function": {
        "name": "f",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
    },
}


class ScriptedModel(StandInModel):
    """The byte-level stand-in with a few longer tokens, whose logits favour every token that
    continues `SCRIPT` from where the completion is (the longest suffix of the text that begins
    it; the chat template ends with `<a>`), with seeded noise: sampled answers take many
    spellings of the script, and write other text where a token is banned."""

    vocabulary = Vocabulary(TOKENS, (EOS,))

    def _logits(self, history: list[int]) -> np.ndarray:
        digest = hashlib.sha256(np.asarray(history, np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        logits = rng.normal(0, 1, len(TOKENS)).astype(np.float32)
        text = b"".join(TOKENS[t] or b"" for t in history)
        text = text[text.rindex(b"<a>") + 3 :] if b"<a>" in text else b""
        at = max((k for k in range(len(SCRIPT) + 1) if text.endswith(SCRIPT[:k])), default=0)
        rest = SCRIPT[at:]
        for t, data in enumerate(TOKENS[:-1]):
            if rest and rest.startswith(data):
                logits[t] += 8.0
        logits[EOS] += 8.0 if not rest else -4.0
        return logits


@pytest.fixture(scope="module")
def scripted():
    with (
        background_server(ScriptedModel(), ServerConfig(batch_size=2)) as (url, _),
        httpx.Client(base_url=url, timeout=60) as http,
    ):
        yield http


def streamed(http: httpx.Client, body: dict) -> tuple[str, dict]:
    """The content and the calls (index -> [name, arguments]) a streamed answer sends."""
    content, calls = [], {}
    with http.stream("POST", "/v1/chat/completions", json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:])["choices"]:
                delta = choice["delta"]
                content.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or []:
                    name, arguments = calls.setdefault(call["index"], ["", ""])
                    calls[call["index"]] = [
                        name + (call["function"].get("name") or ""),
                        arguments + call["function"]["arguments"],
                    ]
    return "".join(content), calls


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.integers(0, 2**32 - 1))
def test_under_auto_a_small_budget_never_leaves_call_markup_in_the_content(
    scripted, max_tokens, seed
):
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "call f"}],
        "tools": [TOOL],
        "max_tokens": max_tokens,
        "seed": seed,
    }
    answer = scripted.post("/v1/chat/completions", json=body).json()
    message = answer["choices"][0]["message"]
    content = message["content"] or ""
    assert OPENER not in content
    for call in message.get("tool_calls") or []:
        assert call["function"]["name"] == "f"
        assert isinstance(json.loads(call["function"]["arguments"]), dict)
    stream_content, stream_calls = streamed(scripted, body)
    assert OPENER not in stream_content
    assert stream_content == content
    calls = {i: [c["function"]["name"], c["function"]["arguments"]] for i, c in enumerate(
        message.get("tool_calls") or [])}  # fmt: skip
    assert stream_calls == calls


def test_with_a_budget_for_it_the_scripted_model_makes_its_call(scripted):
    """The stand-in does call when the tokens left allow it (the rule bans only what cannot
    finish)."""
    body = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": "call f"}],
        "tools": [TOOL],
        "max_tokens": 80,
        "seed": 1,
    }
    message = scripted.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["f"]

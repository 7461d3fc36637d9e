"""finish_reason when max_tokens ends a constrained answer (docs/tools.md, "finish_reason when
the token budget ends an answer"), OpenAI's and vLLM's rule: `length` when the answer used every
token of max_tokens in a state that could go on (the budget, not the model, ended it), `stop`
when it ended on its own (EOS, or a finished grammar: a closed JSON object). The oracle of
"could go on" is written per grammar here; every answer is valid whatever its finish_reason,
and the stream says the same as the plain answer."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import pytest
from corral.tools.server import ServerConfig, background_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stand_in_model import StandInModel

INTEGER = {"type": "integer"}
OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}


def could_go_on(kind: str, text: str) -> bool:
    """Whether the grammar allows more text after `text` (an answer it accepts)."""
    if kind == "integer":
        return text not in ("0", "-0")  # JSON allows no digit after a leading 0
    return kind != "object"  # a closing brace ends it; the regex [a-z]+ goes on


@pytest.fixture(scope="module")
def http():
    with (
        background_server(StandInModel(eos_bias=-2.0), ServerConfig(batch_size=4)) as (url, _),
        httpx.Client(base_url=url, timeout=120) as client,
    ):
        yield client


def body_of(kind: str, max_tokens: int, seed: int) -> dict:
    body = {"messages": [{"role": "user", "content": "x"}], "seed": seed, "max_tokens": max_tokens}
    if kind == "regex":
        return body | {"structured_outputs": {"regex": "[a-z]+"}}
    schema = INTEGER if kind == "integer" else OBJECT
    return body | {
        "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    }


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kind=st.sampled_from(["integer", "object", "regex"]),
    max_tokens=st.integers(1, 14),
    seed=st.integers(0, 2**16),
)
def test_length_says_the_budget_ended_a_constrained_answer(http, kind, max_tokens, seed):
    body = body_of(kind, max_tokens, seed)
    response = http.post("/v1/chat/completions", json=body)
    if response.status_code != 200:  # a budget below the grammar's shortest answer
        assert response.json()["error"]["param"] == "max_tokens"
        return
    answer = response.json()
    (choice,) = answer["choices"]
    text = choice["message"]["content"]
    if kind == "regex":
        assert re.fullmatch("[a-z]+", text)
    else:
        jsonschema.validate(json.loads(text), INTEGER if kind == "integer" else OBJECT)
    used_up = answer["usage"]["completion_tokens"] == max_tokens
    expected = "length" if used_up and could_go_on(kind, text) else "stop"
    assert choice["finish_reason"] == expected, (text, answer["usage"])
    with http.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as r:
        reasons = [
            c["finish_reason"]
            for line in r.iter_lines()
            if line.startswith("data: {")
            for c in json.loads(line[6:])["choices"]
            if c["finish_reason"]
        ]
    assert reasons == [expected]

"""Thinking budgets with a tiny random model of each thinking family (docs/tools.md, "Thinking
budgets"): for random budgets and max_tokens, the thinking block never takes more tokens than
its budget, the answer always completes (a call that validates, finish_reason `tool_calls`,
never `length`), and the stream of the answer folds to the same message."""

import io
import json

import httpx
import jsonschema
import pytest
from corral.model.generate import (
    BudgetTooSmallError,
    ThinkingBudgetTooSmallError,
    generate,
)
from corral.tools import parse_tool_request
from corral.tools.batch import run_batch
from corral.tools.completions import Completions
from corral.tools.events import collect_turn
from corral.tools.server import ServerConfig, background_server
from corral.tools.serving import ChoiceStream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_turn_formats_tiny import PARAMETERS, TEMPLATES, tiny_family_model

THINKING = ["qwen3", "deepseek-r1", "harmony"]
TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]


@pytest.fixture(scope="module")
def engines(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking")
    return {name: Completions(tiny_family_model(tiny, folder / name, TEMPLATES[name]), "tiny")
            for name in THINKING}  # fmt: skip


def body(**fields):
    return {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS} | fields


def thought_tokens(engine, result) -> int:
    """The tokens of the answer's thinking block, counted by re-reading its bytes: from the
    first token through the one that writes the closer's last byte (0: no block)."""
    fmt, vocabulary = engine.tool_format, engine.vocabulary
    close = fmt.thinking.close.encode()
    opener = b"" if fmt.thinking.prompt_opens else fmt.thinking.open.encode()
    written = b""
    for k, token in enumerate(result.token_ids):
        written += vocabulary.text_of_symbols(vocabulary.tokens[token])
        if written.startswith(opener) and close in written[len(opener) :]:
            return k + 1
        if not opener.startswith(written[: len(opener)]):
            return 0  # the block was left out (optional)
    return len(result.token_ids)


@pytest.mark.parametrize("name", THINKING)
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    budget=st.integers(1, 60),
    max_tokens=st.integers(60, 400),
    choice=st.sampled_from(["required", "named", "auto", "json", "none", "none-json"]),
    seed=st.integers(0, 2**16),
)
def test_the_thought_stays_within_its_budget_and_the_answer_completes(
    engines, name, budget, max_tokens, choice, seed
):
    engine = engines[name]
    fields = {"tool_choice": choice}
    if choice == "named":
        fields["tool_choice"] = {"type": "function", "function": {"name": "weather"}}
    if choice in ("json", "none-json"):  # a response format: the block in the grammar
        fields = {"tool_choice": "auto" if choice == "json" else "none"}
        fields["response_format"] = {"type": "json_object"}
    request = parse_tool_request(
        body(
            thinking_token_budget=budget,
            max_completion_tokens=max_tokens,
            seed=seed,
            temperature=1.5,
            # free text writes no byte 0xFF (the symbols' marker where the format has some)
            logit_bias={
                str(t): -100 for t, b in enumerate(engine.vocabulary.tokens) if b == b"\xff"
            },
            **fields,
        )
    )
    choices = engine.requests(request)
    try:
        results = generate(engine.model, choices, batch_size=1)
    except (BudgetTooSmallError, ThinkingBudgetTooSmallError):
        # refused up front, by name: only when no answer fits (checked against the brute force
        # in tests/kernels/test_thought_budget.py)
        return
    (result,) = results
    assert result.reasoning_tokens == thought_tokens(engine, result) <= budget
    answer = engine.completion(request, results)
    (out,) = answer["choices"]
    assert len(result.token_ids) <= max_tokens
    calls = out["message"].get("tool_calls") or []
    for call in calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMETERS)
    # complete, and `length` only when max_tokens ended it where it could go on (docs/tools.md)
    ended = ("length",) if len(result.token_ids) == max_tokens else ()
    if choice in ("required", "named"):  # the whole answer constrained: always completes
        assert out["finish_reason"] in ("tool_calls", *ended) and calls, result.data
    elif choice in ("json", "none-json"):
        assert out["finish_reason"] in ("tool_calls", "stop", *ended), result.data
        if not calls:
            json.loads(out["message"]["content"])
    elif calls:  # auto, none: free text after the thought may be cut by max_tokens
        assert out["finish_reason"] == "tool_calls"
    if result.reasoning_tokens:  # the block closed, within its budget (above)
        text = engine.vocabulary.text_of_symbols(result.data).decode(errors="replace")
        assert engine.tool_format.thinking.close in text
    # the stream folds to the same message
    syntax = engine.syntax(request)  # as the server streams a choice
    stream = ChoiceStream(None if syntax is None else "x", (), syntax, engine.vocabulary)
    events = [e for e, _ in stream.replay(result, engine.vocabulary.tokens) if e is not None]
    reasoning, content, streamed = collect_turn(events)
    assert reasoning == out["message"].get("reasoning_content")
    # as a client joins it: the stream's first delta carries content "" (`message_json`'s rule)
    assert (content or None if streamed else content or "") == out["message"]["content"]
    assert [(c.name, c.arguments) for c in streamed] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls
    ]


def thought_of(pieces, thinking) -> int:
    """The thinking block's token count re-read from the answer's token bytes `pieces` (each
    token's bytes, specials as their texts): through the token that writes the closer's last
    byte; 0 when the answer does not open the block (an optional one left out)."""
    close = thinking.close.encode()
    opener = b"" if thinking.prompt_opens else thinking.open.encode()
    written = b""
    for k, piece in enumerate(pieces):
        written += piece
        if written.startswith(opener) and close in written[len(opener) :]:
            return k + 1
        if not opener.startswith(written[: len(opener)]):
            return 0
    return len(pieces)


@pytest.mark.parametrize("name", [*THINKING, "hermes"])
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    budget=st.none() | st.integers(1, 60),
    max_tokens=st.integers(40, 160),
    choice=st.sampled_from(["required", "auto", "json", "none"]),
    n=st.integers(1, 2),
    seed=st.integers(0, 2**16),
)
def test_usage_reports_the_thoughts_tokens(
    engines, hermes, name, budget, max_tokens, choice, n, seed
):
    """`usage.completion_tokens_details.reasoning_tokens` is the tokens of every choice's
    thinking block, with a thinking budget or without (re-read from the token ids); 0 for a
    format that does not think, as OpenAI reports it for a model that does not reason."""
    engine = hermes if name == "hermes" else engines[name]
    fields = {"tool_choice": "auto" if choice == "json" else choice}
    if choice == "json":
        fields["response_format"] = {"type": "json_object"}
    if budget is not None and name != "hermes":
        fields["thinking_token_budget"] = budget
    no_marker = {str(t): -100 for t, b in enumerate(engine.vocabulary.tokens) if b == b"\xff"}
    request = parse_tool_request(
        body(max_completion_tokens=max_tokens, seed=seed, temperature=1.5, n=n, **fields)
        | {"logit_bias": no_marker}  # free text writes no byte 0xFF (the symbols' marker)
    )
    try:
        results = generate(engine.model, engine.requests(request), batch_size=2)
    except (BudgetTooSmallError, ThinkingBudgetTooSmallError):
        return
    thinking = engine.tool_format.thinking
    tokens = engine.vocabulary.tokens
    counts = [
        0
        if thinking is None
        else thought_of(
            [engine.vocabulary.text_of_symbols(tokens[t] or b"") for t in result.token_ids],
            thinking,
        )
        for result in results
    ]
    assert [result.reasoning_tokens for result in results] == counts
    usage = engine.completion(request, results)["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": sum(counts)}
    assert usage["completion_tokens"] == sum(len(result.token_ids) for result in results)


@pytest.fixture(scope="module")
def hermes(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("hermes")
    return Completions(tiny_family_model(tiny, folder, TEMPLATES["hermes"]), "tiny")


def test_streamed_and_batch_usage_report_the_thoughts_tokens(tiny, tmp_path):
    """The same count in every answer of `corral serve` and of a Batch line: the unstreamed
    answer's usage, the stream's last chunk (`stream_options.include_usage`) and the Batch
    output line's, each against the thought re-read from its own answer's token bytes
    (`logprobs`)."""
    model = tiny_family_model(tiny, tmp_path / "r1", TEMPLATES["deepseek-r1"])
    config = ServerConfig(max_len=512, data_dir=tmp_path / "data")
    with background_server(model, config) as (url, server), httpx.Client(timeout=120) as http:
        thinking = server.engine.tool_format.thinking
        tokens = server.engine.vocabulary.tokens
        no_marker = {str(t): -100 for t, b in enumerate(tokens) if b == b"\xff"}
        counts = []
        for seed in range(4):
            fields = body(tool_choice="auto", max_completion_tokens=60, seed=seed, logprobs=True)
            fields |= {"temperature": 1.5, "logit_bias": no_marker}
            answer = http.post(f"{url}/v1/chat/completions", json=fields).json()
            pieces = [bytes(e["bytes"] or b"") for e in answer["choices"][0]["logprobs"]["content"]]
            usage = answer["usage"]
            counts.append(thought_of(pieces, thinking))
            assert usage["completion_tokens_details"] == {
                "reasoning_tokens": thought_of(pieces, thinking)
            }
            streamed = fields | {"stream": True, "stream_options": {"include_usage": True}}
            with http.stream("POST", f"{url}/v1/chat/completions", json=streamed) as events:
                data = [line[6:] for line in events.iter_lines() if line.startswith("data: ")]
            assert data[-1] == "[DONE]"
            streamed_usage = json.loads(data[-2])["usage"]  # the same seed, the same answer
            del streamed_usage["prompt_tokens_details"], usage["prompt_tokens_details"]
            assert streamed_usage == usage  # (but for what the prefix cache held before)
            out = io.StringIO()
            line = json.dumps({"custom_id": "a", "body": fields})
            run_batch(Completions(model, "tiny"), [line], out, progress=False)
            batch = json.loads(out.getvalue())["response"]["body"]
            pieces = [bytes(e["bytes"] or b"") for e in batch["choices"][0]["logprobs"]["content"]]
            assert batch["usage"]["completion_tokens_details"] == {
                "reasoning_tokens": thought_of(pieces, thinking)
            }
    assert all(counts)  # DeepSeek R1's prompt opens the block: every answer thinks

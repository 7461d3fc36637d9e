"""Thinking budgets with a tiny random model of each thinking family (docs/tools.md, "Thinking
budgets"): for random budgets and max_tokens, the thinking block never takes more tokens than
its budget, the answer always completes (a call that validates, finish_reason `tool_calls`,
never `length`), and the stream of the answer folds to the same message."""

import json

import jsonschema
import pytest
from corral.model.generate import (
    BudgetTooSmallError,
    ThinkingBudgetTooSmallError,
    generate,
)
from corral.tools import parse_tool_request
from corral.tools.completions import Completions
from corral.tools.events import collect_turn
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
    if choice in ("required", "named"):  # the whole answer constrained: always completes
        assert out["finish_reason"] == "tool_calls" and calls, result.data
    elif choice in ("json", "none-json"):
        assert out["finish_reason"] in ("tool_calls", "stop"), result.data
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
    assert content == out["message"]["content"]
    assert [(c.name, c.arguments) for c in streamed] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls
    ]

"""What a request says about thinking (docs/tools.md, "Thinking budgets"): `reasoning_effort`'s
documented budgets and vLLM's `thinking_token_budget` reach the engine; a budget of 0 is
thinking off as the template writes it; a budget that cannot be held to is a 400 naming the
field that set it; and what a trigger written inside a thought does under `auto`."""

import pytest
from corral.model.generation_request import GenerationRequest
from corral.model.sequence import LiveSequence
from corral.tools import ToolError, parse_tool_request
from corral.tools.completions import Completions
from corral.tools.request import EFFORT_BUDGETS
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_turn_formats_tiny import PARAMETERS, TEMPLATES, tiny_family_model

TOOLS = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]


@pytest.fixture(scope="module")
def engines(tiny, tmp_path_factory):
    folder = tmp_path_factory.mktemp("thinking-requests")
    names = ["qwen3", "deepseek-r1", "hermes"]
    return {n: Completions(tiny_family_model(tiny, folder / n, TEMPLATES[n]), "t") for n in names}


def request(**fields):
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": TOOLS}
    return parse_tool_request(body | {"tool_choice": "required"} | fields)


@pytest.mark.parametrize("effort", list(EFFORT_BUDGETS))
def test_reasoning_effort_sets_its_documented_budget(engines, effort):
    engine = engines["qwen3"]
    (choice,) = engine.requests(request(reasoning_effort=effort, max_completion_tokens=300))
    (exact,) = engine.requests(
        request(thinking_token_budget=EFFORT_BUDGETS[effort], max_completion_tokens=300)
    )
    assert exact.prompt_ids == choice.prompt_ids
    if effort == "none":  # thinking off: the template's empty block, no thought in the grammar
        assert engine.model.tokenizer.decode(choice.prompt_ids).endswith("</think>\n\n")
        assert choice.thought is None and choice.thinking_budget is None
    else:
        assert choice.thinking_budget == exact.thinking_budget == EFFORT_BUDGETS[effort]
        assert choice.thought is not None and choice.thought.is_inside(0)


def test_a_request_without_a_budget_thinks_unbounded_but_by_max_tokens(engines):
    (choice,) = engines["qwen3"].requests(request(max_completion_tokens=300))
    assert choice.thinking_budget is None


@pytest.mark.parametrize(
    ("fields", "param", "code"),
    [
        ({"thinking_token_budget": -1}, "thinking_token_budget", "invalid_value"),
        ({"thinking_token_budget": 1.5}, "thinking_token_budget", "invalid_type"),
        ({"thinking_token_budget": True}, "thinking_token_budget", "invalid_type"),
        (
            {"thinking_token_budget": 10, "reasoning_effort": "low"},
            "thinking_token_budget",
            "invalid_parameter_combination",
        ),
    ],
)
def test_malformed_budgets_are_400s_naming_the_field(fields, param, code):
    with pytest.raises(ToolError) as caught:
        request(**fields)
    assert (caught.value.status, caught.value.param, caught.value.code) == (400, param, code)


@pytest.mark.parametrize(
    ("name", "fields", "param"),
    [
        ("hermes", {"reasoning_effort": "low"}, "reasoning_effort"),
        ("hermes", {"thinking_token_budget": 5}, "thinking_token_budget"),
    ],
)
def test_a_budget_for_a_format_that_does_not_think_is_refused_by_name(engines, name, fields, param):
    with pytest.raises(ToolError) as caught:
        engines[name].requests(request(**fields))
    assert (caught.value.status, caught.value.param) == (400, param)
    assert caught.value.code == "unsupported_parameter"


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("hermes", {"reasoning_effort": "none"}),
        ("hermes", {"thinking_token_budget": 0}),
        ("qwen3", {"tool_choice": "auto", "reasoning_effort": "none"}),
        ("qwen3", {"tool_choice": "auto", "reasoning_effort": "high"}),
        ("deepseek-r1", {"tool_choice": "auto", "thinking_token_budget": 9}),
        ("qwen3", {"tool_choice": "none", "thinking_token_budget": 9}),
        (
            "qwen3",
            {
                "tool_choice": "auto",
                "thinking_token_budget": 9,
                "response_format": {"type": "json_object"},
            },
        ),  # fmt: skip
    ],
)
def test_budgets_that_can_be_held_to_are_accepted(engines, name, fields):
    engines[name].requests(request(max_completion_tokens=300, **fields))


def test_the_markup_that_does_not_fit_the_budget_is_refused_naming_it(engines):
    """DeepSeek's prompt opens the block: its answer must write `</think>` (8 tokens of the
    tiny vocabulary), so a budget below that cannot be held to."""
    from corral.model.generate import generate
    from corral.model.generation_request import ThinkingBudgetTooSmallError

    engine = engines["deepseek-r1"]
    choices = engine.requests(request(thinking_token_budget=1, max_completion_tokens=300))
    with pytest.raises(ThinkingBudgetTooSmallError) as caught:
        generate(engine.model, choices, batch_size=1)
    assert caught.value.param == "thinking_token_budget"


THOUGHT = st.text(  # no whitespace or control characters: the parser strips the thought's ends
    st.characters(codec="utf-8", exclude_categories=("Cc", "Zs", "Zl", "Zp")), max_size=24
)


@pytest.mark.parametrize("name", ["qwen3", "deepseek-r1"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(before=THOUGHT, after=THOUGHT, budget=st.none() | st.integers(300, 500))
def test_a_trigger_inside_the_thought_starts_no_call_with_or_without_a_budget(
    engines, name, before, after, budget
):
    """Under `auto` (a text trigger) the answer is held to the thinking block's own grammar
    (the prelude) until the block closes, with a thinking budget or without: a trigger written
    anywhere inside the thought is thought and starts no call (the engine looks for it only
    after the block), the block's tokens are its reasoning tokens, and a trigger after the
    block starts the call. Forced token sequences: random thoughts around the trigger."""
    engine = engines[name]
    thinking = engine.tool_format.thinking
    fields = {} if budget is None else {"thinking_token_budget": budget}
    chat = request(tool_choice="auto", max_completion_tokens=600, **fields)
    (choice,) = engine.requests(chat)
    trigger = choice.trigger
    assert trigger is not None and choice.prelude is not None
    opener = "" if thinking.prompt_opens else thinking.open
    block = opener + before + trigger + after + thinking.close
    assume(thinking.close not in block[: -len(thinking.close)])
    vocabulary = engine.vocabulary
    seq = LiveSequence(0, choice, 0, vocabulary)
    spelled = vocabulary.spell(block.encode())
    for token in spelled:
        assert seq.waiting is not None  # the trigger has not fired
        seq.take_sampled(token, 0.0, None, vocabulary.eos_ids)
    assert seq.constraint is None and seq.waiting is not None  # free text after the block
    assert seq.result().reasoning_tokens == len(spelled)
    for token in vocabulary.spell(("\n\n" + trigger).encode()):
        seq.take_sampled(token, 0.0, None, vocabulary.eos_ids)
    assert seq.constraint is not None and seq.waiting is None  # the call started there
    (out,) = engine.completion(chat, [seq.result()])["choices"]
    assert out["message"]["reasoning_content"] == (before + trigger + after).strip()


def test_under_a_budget_a_trigger_inside_the_thought_starts_no_call(engines):
    """With a thinking budget the block is held to its own grammar (the prelude) until it
    closes, and the trigger is looked for only after it: a trigger written inside the thought
    is thought, and one after the block starts the call."""
    engine = engines["qwen3"]
    chat = request(tool_choice="auto", thinking_token_budget=200, max_completion_tokens=400)
    (choice,) = engine.requests(chat)
    assert choice.prelude is not None and choice.trigger == "<tool_call>"
    vocabulary = engine.vocabulary
    seq = LiveSequence(0, choice, 0, vocabulary)
    block = "<think>\nI could call <tool_call> now</think>"
    call = '<tool_call>{"name":"weather","arguments":{"city":"Oslo","days":2}}</tool_call>'
    for token in vocabulary.spell((block + "\n\n").encode()):
        seq.take_sampled(token, 0.0, None, vocabulary.eos_ids)
    assert seq.constraint is None and seq.waiting is not None  # free text, trigger not fired
    for token in vocabulary.spell(call.encode()):
        seq.take_sampled(token, 0.0, None, vocabulary.eos_ids)
    assert seq.constraint is not None and seq.constraint.done
    seq.finish(seq.need().reason)
    result = seq.result()
    assert result.reasoning_tokens == len(vocabulary.spell(block.encode()))
    (out,) = engine.completion(chat, [result])["choices"]
    assert out["message"]["reasoning_content"] == "I could call <tool_call> now"
    assert out["message"]["tool_calls"][0]["function"]["name"] == "weather"
    assert out["finish_reason"] == "tool_calls"


def test_generation_request_takes_the_budget(engines):
    assert GenerationRequest([1]).thinking_budget is None

"""An assistant turn sent back with its `reasoning_content` (the member corral answers a thought
in, which clients such as the openai package send back when they append the answer to the
conversation) is accepted and given to the chat template under the member the family's template
reads (`Thinking.history_key`), which writes it or leaves it out as its family does; a value
that is not a string or null is a 400 naming its path."""

import pytest
from corral.tools import ToolError, parse_tool_request
from corral.tools.formats import FORMATS
from corral.tools.render import render_request
from hypothesis import given, settings
from hypothesis import strategies as st

ECHO = (  # every member of every turn, in order: the template sees what corral gives it
    "{% for m in messages %}[{% for k in m %}{{ k }}={{ m[k] }};{% endfor %}]{% endfor %}"
)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
THINKING = [name for name, f in FORMATS.items() if f.thinking is not None]


def conversation(thought) -> list[dict]:
    """A tool loop as a client sends it back: the answer with its thought and call appended as
    the client received it, then the tool's result."""
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": thought,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]


@pytest.mark.parametrize("name", [*THINKING, "hermes", None])
@settings(max_examples=20, deadline=None)
@given(thought=st.text(alphabet=st.characters(blacklist_characters="[];="), max_size=20))
def test_a_past_thought_reaches_the_template_under_the_familys_member(name, thought):
    request = parse_tool_request({"messages": conversation(thought), "tools": [WEATHER]})
    turn_format = FORMATS[name] if name else None
    prompt = str(render_request(ECHO, request, turn_format=turn_format))
    key = turn_format.thinking.history_key if turn_format and turn_format.thinking else None
    key = key or "reasoning_content"
    assert f"{key}={thought};" in prompt
    other = {"reasoning_content", "thinking"} - {key}
    assert not any(f"{k}=" in prompt for k in other)


@pytest.mark.parametrize("bad", [1, ["a"], {"text": "a"}, True])
def test_a_past_thought_that_is_not_text_is_refused_by_path(bad):
    with pytest.raises(ToolError) as caught:
        parse_tool_request({"messages": conversation(bad)})
    error = caught.value
    assert (error.status, error.param) == (400, "messages[1].reasoning_content")


def test_a_null_past_thought_gives_the_template_none():
    request = parse_tool_request({"messages": conversation(None), "tools": [WEATHER]})
    prompt = str(render_request(ECHO, request, turn_format=FORMATS["qwen3"]))
    assert "reasoning_content=" not in prompt


def test_qwen3s_template_writes_the_thought_of_the_current_tool_loop(full_data):
    """Qwen3's own template shows a thought of the turns after the last user message (the tool
    loop under way) inside its `<think>` block."""
    template = (full_data / "llama.cpp" / "templates" / "Qwen-Qwen3-0.6B.jinja").read_text()
    request = parse_tool_request({"messages": conversation("Paris: call it."), "tools": [WEATHER]})
    prompt = str(render_request(template, request, turn_format=FORMATS["qwen3"], thinking=True))
    assert "<think>\nParis: call it.\n</think>" in prompt

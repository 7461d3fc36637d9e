"""Rendering conversations with tools (DESIGN.md section 5 "Rendering"; tool-calls-spec
section 4: render_messages_with_tools; vocab_bytes_marks_specials is in
tests/model/test_vocabulary_readers.py)."""

import pytest
from corral.tools import (
    ToolError,
    collect,
    message_json,
    parse_text,
    parse_tool_request,
    render_messages,
    render_prompt,
    render_request,
)
from corral.tools.render import tools_prompt
from example_schemas import WEATHER

WEATHER_LINE = (
    '{"type":"function","function":{"name":"get_weather","description":"Current weather in a '
    'city.","parameters":{"type":"object","properties":{"city":{"type":"string"},'
    '"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},'
    '"required":["city"]}}}'
)
CALL = '<tool_call>{"name":"get_weather","arguments":{"city":"Paris"}}</tool_call>'
CONVERSATION = [
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            },
            {  # arguments as an object, as some clients send them
                "id": "call_a_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a_0", "content": '{"temp":18}'},
    {"role": "tool", "tool_call_id": "call_a_1", "content": '{"temp":24}'},
    {"role": "assistant", "content": "Paris 18, Rome 24."},
]


def test_tools_are_described_in_a_new_system_message():
    turns = render_messages([{"role": "user", "content": "hi"}], [WEATHER])
    assert [t["role"] for t in turns] == ["system", "user"]
    system = turns[0]["content"]
    assert system == tools_prompt([WEATHER])
    assert f"<tools>\n{WEATHER_LINE}\n</tools>" in system
    assert (
        '<tool_call>{"name":<function-name>,"arguments":<args-json-object>}</tool_call>' in system
    )


def test_tools_are_appended_to_the_first_system_message():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    turns = render_messages(messages, [WEATHER])
    assert turns[0] == {"role": "system", "content": "Be brief.\n\n" + tools_prompt([WEATHER])}
    assert len(turns) == 2


def test_without_tools_nothing_is_added():
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert render_messages(messages, []) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]


def test_calls_and_results_are_rendered_back():
    turns = render_messages(CONVERSATION, [WEATHER])
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user", "assistant"]
    assert turns[2]["content"] == (
        CALL + "\n" + '<tool_call>{"name":"get_weather","arguments":{"city":"Rome"}}</tool_call>'
    )
    assert turns[3]["content"] == (
        '<tool_response>\n{"temp":18}\n</tool_response>\n<tool_response>\n{"temp":24}\n</tool_response>'
    )
    assert turns[4]["content"] == "Paris 18, Rome 24."


def test_assistant_content_missing_or_null_and_text_parts_render():
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}],
        },
        {"role": "tool", "content": "ok"},
        {"role": "assistant", "content": None},
    ]
    turns = render_messages(messages)
    assert turns[0]["content"] == "ab"
    assert turns[1]["content"] == '<tool_call>{"name":"f","arguments":{}}</tool_call>'
    assert turns[3]["content"] == ""


def test_invalid_arguments_are_a_400_naming_the_message_index():
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": "{"}}],
        },
    ]
    with pytest.raises(ToolError) as info:
        render_messages(messages)
    assert info.value.status == 400
    assert info.value.param == "messages[1].tool_calls[0].function.arguments"


@pytest.mark.parametrize(
    "generated",
    [
        CALL,
        "Sure." + CALL,
        "Let me look.\n" + CALL + "\n" + CALL.replace("Paris", "Rome"),
        "No call, just text.",
    ],
)
def test_a_conversation_renders_the_way_it_was_generated(generated):
    message = message_json(*collect(parse_text(generated, "r")))
    turns = render_messages([{"role": "user", "content": "x"}, message], [WEATHER])
    assert turns[-1] == {"role": "assistant", "content": generated}


def test_render_prompt_with_a_template_text():
    template = (
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}"
    )
    prompt = render_prompt(template, CONVERSATION[:2], [])
    assert (
        prompt
        == "[user]Weather in Paris and Rome?[assistant]"
        + CALL
        + "\n"
        + CALL.replace("Paris", "Rome")
        + "[assistant]"
    )


def test_a_template_that_refuses_the_conversation_is_a_400():
    template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ToolError) as info:
        render_prompt(template, [{"role": "user", "content": "x"}])
    assert (info.value.status, info.value.param) == (400, "messages")


@pytest.mark.slow
def test_render_messages_with_tools_through_smollm2s_chat_template(smollm2):
    request = parse_tool_request({"messages": CONVERSATION, "tools": [WEATHER]})
    prompt = render_request(smollm2, request)
    system = tools_prompt([WEATHER])
    assert prompt == (
        f"<|im_start|>system\n{system}<|im_end|>\n"
        "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
        f"<|im_start|>assistant\n{CALL}\n"
        '<tool_call>{"name":"get_weather","arguments":{"city":"Rome"}}</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\n"
        '{"temp":18}\n</tool_response>\n<tool_response>\n{"temp":24}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\nParis 18, Rome 24.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # The same through the template text itself, and without tools under tool_choice none.
    assert render_prompt(smollm2.chat_template, CONVERSATION, [WEATHER]) == prompt
    none = parse_tool_request(
        {"messages": CONVERSATION[:1], "tools": [WEATHER], "tool_choice": "none"}
    )
    assert "<tools>" not in render_request(smollm2, none)
    assert "You are a helpful AI assistant named SmolLM" in render_request(smollm2, none)
    # The rendered call tokenizes back to the same text.
    ids = smollm2.tokenizer.encode(prompt)
    assert smollm2.tokenizer.decode(ids) == prompt

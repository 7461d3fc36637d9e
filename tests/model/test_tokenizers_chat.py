"""Chat templates rendered as transformers renders them (docs/tokenizers.md): the real templates
of the full data's `llama.cpp/templates/` (Qwen2.5, Qwen3, Llama 3.1/3.2, Mistral, Gemma 2,
Hermes 3, DeepSeek R1, gpt-oss) and those inside its vocabulary GGUFs (Phi-3, Qwen2, Gemma 4),
with a conversation that calls a tool and `tools` given; against transformers'
`apply_chat_template` where transformers is installed (the `transformers` extra)."""

from __future__ import annotations

import pytest
from corral.model.chat import render_chat, takes_tools
from corral.model.errors import ChatTemplateError
from corral.model.gguf_tokenizer import load_gguf_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "the city"}},
                "required": ["city"],
            },
        },
    }
]
# Mistral's templates want 9 alphanumeric characters in a tool call id.
CALL = {"id": "abc123XYZ", "type": "function"}
CALL["function"] = {"name": "get_weather", "arguments": {"city": "Paris"}}
CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris? Grüße"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": '{"t": 21}'},
    {"role": "assistant", "content": "It is 21 degrees."},
    {"role": "user", "content": "Thanks!"},
]
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
TEMPLATES = [
    "Mistral-Small-3.2-24B-Instruct-2506",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
    "Qwen-Qwen2.5-7B-Instruct",
    "Qwen-Qwen3-0.6B",
    "Qwen3-Coder",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
    "google-gemma-2-2b-it",
    "meta-llama-Llama-3.1-8B-Instruct",
    "meta-llama-Llama-3.2-3B-Instruct",
    "mistralai-Mistral-Nemo-Instruct-2407",
    "openai-gpt-oss-120b",
]
# Gemma 2's template refuses a system turn and a tool turn (raise_exception): a plain one.
PLAIN = {"google-gemma-2-2b-it"}


def template_text(full_data, name: str) -> str:
    path = full_data / "llama.cpp" / "templates" / f"{name}.jinja"
    if not path.is_file():
        pytest.skip(f"{path} not found: the full data lacks llama.cpp's templates")
    return path.read_text(encoding="utf-8")


def conversation(name: str) -> list[dict]:
    return [CONVERSATION[i] for i in (1, 4, 5)] if name in PLAIN else CONVERSATION


def transformers_render(template: str, messages, tools, special_tokens) -> str:
    """transformers' `apply_chat_template(..., tokenize=False)` with these special tokens."""
    transformers = pytest.importorskip("transformers", reason="transformers is a test extra")
    from tokenizers import Tokenizer, models

    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE()), **special_tokens
    )
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True, chat_template=template
    )


@pytest.mark.parametrize("name", TEMPLATES)
def test_real_template_renders_a_tool_call(full_data, name):
    text = render_chat(
        template_text(full_data, name), conversation(name), True, SPECIAL, tools=TOOLS
    )
    assert "Paris" in text and "21 degrees" in text and "Thanks!" in text


@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no-tools"])
@pytest.mark.parametrize("name", TEMPLATES)
def test_real_template_renders_as_transformers(full_data, name, tools):
    """The same text, or the same refusal (Hermes 3's tool-use template needs `tools`)."""
    template = template_text(full_data, name)
    try:
        expected = transformers_render(template, conversation(name), tools, SPECIAL)
    except Exception as error:
        with pytest.raises(ChatTemplateError) as refused:
            render_chat(template, conversation(name), True, SPECIAL, tools=tools)
        assert str(error) in str(refused.value)
        return
    assert render_chat(template, conversation(name), True, SPECIAL, tools=tools) == expected


@pytest.mark.parametrize("name", ["phi-3", "qwen2", "gemma-4"])
def test_gguf_template_renders_as_transformers(full_data, name):
    """`tokenizer.chat_template` and the special tokens the metadata names."""
    path = full_data / "llama.cpp" / "vocab" / f"ggml-vocab-{name}.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not found: the full data lacks llama.cpp's vocabularies")
    loaded = load_gguf_tokenizer(path)
    assert loaded.chat_template
    args = (loaded.chat_template, CONVERSATION, True, loaded.special_tokens)
    text = render_chat(*args, tools=TOOLS)
    assert "Thanks!" in text
    assert text == transformers_render(
        loaded.chat_template, CONVERSATION, TOOLS, loaded.special_tokens
    )


# Templates that fail on the conversation in each way a template can: their own refusal, and
# errors Python raises inside them.
FAILING = {
    "{{ raise_exception('no system role') }}": "no system role",
    "{% for tool in tools %}{{ tool }}{% endfor %}": "TypeError",
    "{{ 1 / (messages | length - 1) }}": "ZeroDivisionError",
    "{{ messages[0].content.split(none, 1, 2) }}": "TypeError",
    "{{ '%d' % messages[0].content }}": "TypeError",
}


@pytest.mark.parametrize("template", FAILING)
def test_template_failures_are_chat_template_errors(template):
    with pytest.raises(ChatTemplateError, match=FAILING[template]):
        render_chat(template, [{"role": "user", "content": "x"}], tools=None)


GENERATION = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
    "{% endgeneration %}{% else %}{{ m.role }}: {{ m.content }}\n{% endif %}{% endfor %}"
    "{{ bos_token }}{{ strftime_now('%Y') }}"
)


def test_generation_block_renders_as_transformers():
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    text = render_chat(GENERATION, messages, True, SPECIAL)
    assert text.startswith("user: hi\nhello<s>")
    assert text == transformers_render(GENERATION, messages, None, SPECIAL)


TAKES_TOOLS = set(TEMPLATES) - {"google-gemma-2-2b-it", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"}


@pytest.mark.parametrize("name", TEMPLATES)
def test_takes_tools_iff_the_rendering_depends_on_tools(full_data, name):
    """`takes_tools` against the rendering itself: with and without `tools` the text differs
    exactly when the template reads them."""
    template = template_text(full_data, name)
    messages = conversation(name)[:2]
    try:
        without = render_chat(template, messages, True, SPECIAL)
    except ChatTemplateError:  # Hermes 3's tool-use template: tools required
        without = None
    with_tools = render_chat(template, messages, True, SPECIAL, tools=TOOLS)
    assert takes_tools(template) == (with_tools != without) == (name in TAKES_TOOLS)


def test_takes_tools_reads_the_template():
    assert not takes_tools(GENERATION)
    assert takes_tools("{% if tools %}{{ tools | tojson }}{% endif %}")
    assert not takes_tools("{% set tools = [] %}{{ tools }}")  # its own variable
    with pytest.raises(ChatTemplateError, match="syntax"):
        takes_tools("{% if tools %}")

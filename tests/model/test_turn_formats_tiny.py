"""A tiny random model makes a valid call in each turn format (docs/tools.md, "Turn formats"):
its chat template holds the family's markers, so the format is detected from it; under
`required` the answer parses to a call whose arguments validate with jsonschema, its thought
(for a family that thinks) comes back as `reasoning_content` and never as content, and the
answer completes within max_tokens; Mistral's calls carry the ids the model wrote. Mistral's
`[TOOL_CALLS]`, `[CALL_ID]` and `[ARGS]` and Harmony's `<|...|>` are special tokens of this
tokenizer: the grammar requires their symbols, and the answer reads them back as text."""

import json
import re

import jsonschema
import pytest
from corral.model import load_model
from corral.model.generate import generate
from corral.tools import ToolError, parse_tool_request
from corral.tools.completions import Completions
from corral.tools.formats import FORMATS

TOOLS = (
    "{%- if tools %}{{ '<|im_start|>system\\n' + (tools | tojson) + '<|im_end|>\\n' }}{% endif %}"
)
BODY = (
    TOOLS + "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TEMPLATES = {  # the family's markers, as its real template holds them
    "hermes": BODY.replace(TOOLS, ""),  # takes no tools: corral describes them
    "qwen3": BODY + "{# <tool_call> <think> #}{% if add_generation_prompt and enable_thinking"
    " is defined and not enable_thinking %}{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}",
    "qwen3-coder": BODY + "{# <tool_call> <function=name> #}",
    "harmony": BODY + "{# <|channel|> #}",
    "llama3": BODY + '{# <|start_header_id|> {"name": "parameters"} #}',
    "mistral-nemo": BODY + "{# [TOOL_CALLS] #}",
    "mistral-small": BODY + "{# [TOOL_CALLS] [CALL_ID] [ARGS] #}",
    "devstral": BODY + "{# [TOOL_CALLS] [ARGS] #}",
    "deepseek-r1": BODY + "{# <｜tool▁calls▁begin｜> #}{% if add_generation_prompt %}"
    "{{ '<think>\\n' }}{% if not enable_thinking %}{{ '</think>' }}{% endif %}{% endif %}",
}
EXTRA_SPECIALS = ["[TOOL_CALLS]", "[ARGS]", "<|channel|>", "<|message|>", "<|end|>", "<|start|>"]
EXTRA_SPECIALS += ["<|constrain|>", "[CALL_ID]"]
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"enum": [1, 2, 3]}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def tiny_family_model(tiny, folder, template: str):
    """The tiny random Llama with `template` and two more special tokens."""
    base = tiny.config()
    config = tiny.config(
        vocab_size=base["vocab_size"] + len(EXTRA_SPECIALS), max_position_embeddings=1024
    )
    tiny.write(folder, config)
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    for k, text in enumerate(EXTRA_SPECIALS):
        tokenizer["added_tokens"].append(
            {
                "id": base["vocab_size"] + k,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return load_model(folder)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_a_tiny_model_makes_a_valid_call_in_each_format(tiny, tmp_path, name):
    model = tiny_family_model(tiny, tmp_path / name, TEMPLATES[name])
    check_a_valid_call(model, name)


def check_a_valid_call(model, name: str) -> dict:
    """`model` under `required` with the weather tool: its format is `name`'s (detected), the
    answer parses to valid calls in it (ids, thought, special tokens as the format puts them).
    Returns the answer's message."""
    engine = Completions(model, "tiny")
    fmt = FORMATS[name]
    assert engine.tool_format is fmt  # detected from the template
    if fmt.specials:
        assert set(engine.specials) == set(fmt.specials)
    tools = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]
    body = {
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": tools,
        "tool_choice": "required",
        "max_completion_tokens": 300,
        "seed": 3,
    }
    request = parse_tool_request(body)
    results = generate(model, engine.requests(request), batch_size=1)
    answer = engine.completion(request, results)
    choice = answer["choices"][0]
    message = choice["message"]
    # `length` when max_tokens ended it after a whole call (docs/tools.md, "finish_reason ...")
    ended = ("length",) if len(results[0].token_ids) == body["max_completion_tokens"] else ()
    assert choice["finish_reason"] in ("tool_calls", *ended), (message, results[0].data)
    assert len(results[0].token_ids) <= 300
    assert message["content"] is None
    assert 1 <= len(message["tool_calls"]) <= fmt.max_calls
    written = model.vocabulary.text_of_symbols(results[0].data).decode()
    for call in message["tool_calls"]:
        assert call["function"]["name"] == "weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMETERS)
        if fmt.call_id:  # the id the model wrote, as its family writes it
            assert re.fullmatch(fmt.call_id, call["id"]) and call["id"] in written
    if fmt.thinking is not None:
        data = model.vocabulary.text_of_symbols(results[0].data).decode()
        inside, closed, _ = data.partition(fmt.thinking.close)
        thought = inside.removeprefix(fmt.thinking.open).strip(" \t\n\r") if closed else ""
        assert message.get("reasoning_content") == (thought or None)
    for text in fmt.specials:  # written as the special token, never as text
        assert model.vocabulary.tokens[engine.specials[text]] is not None
        assert results[0].token_ids.count(engine.specials[text]) == written.count(text) > 0
    return message


FAMILY_ARCHITECTURES = [  # (format, the architecture of the family's models: tests/model/
    ("hermes", "qwen2"),  # test_architectures.py's configs); Qwen2.5, Hermes on Qwen2
    ("hermes", "gemma3"),  # Gemma 3's template takes no tools: corral describes them
    ("qwen3", "qwen3"),
    ("qwen3-coder", "qwen3"),  # Qwen3-Coder's released models are MoE: its dense form here
    ("llama3", "llama3"),
    ("mistral-nemo", "mistral"),
    ("mistral-small", "ministral"),
    ("devstral", "mistral"),
    ("deepseek-r1", "qwen2"),  # the R1 distills are Qwen2.5 and Llama 3 models
    ("deepseek-r1", "llama3"),
    ("harmony", "llama3"),  # gpt-oss's own architecture (MoE, attention sinks) is refused
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "architecture"), FAMILY_ARCHITECTURES)
def test_a_tiny_model_of_the_familys_architecture_makes_a_valid_call(
    tiny, tmp_path, name, architecture
):
    """The same check on a tiny random model of the family's own architecture, built by
    transformers from a config (no download) beside the family's template and specials."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from test_architectures import ARCHITECTURES, COMMON, randomize_

    folder = tmp_path / f"{name}-{architecture}"
    tiny_family_model(tiny, folder, TEMPLATES[name])  # the tokenizer's files and template
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    config_class, fields = ARCHITECTURES[architecture]
    sizes = {"vocab_size": vocab, "max_position_embeddings": 1024}
    config = getattr(transformers, config_class)(**(COMMON | sizes), **fields)
    torch.manual_seed(0)
    weights = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize_(weights, architecture.startswith("gemma"), seed=0)
    weights.save_pretrained(folder)
    check_a_valid_call(load_model(folder), name)


def weather_request(**fields):
    tools = [{"type": "function", "function": {"name": "weather", "parameters": PARAMETERS}}]
    body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": tools}
    return parse_tool_request(body | {"tool_choice": "required", **fields})


@pytest.mark.parametrize("name", ["qwen3", "deepseek-r1"])
def test_thinking_off_is_the_empty_block_the_template_writes(tiny, tmp_path, name):
    model = tiny_family_model(tiny, tmp_path / name, TEMPLATES[name])
    engine = Completions(model, "tiny")
    request = weather_request(reasoning_effort="none", max_completion_tokens=300, seed=1)
    (choice,) = engine.requests(request)
    prompt = model.tokenizer.decode(choice.prompt_ids)
    assert prompt.endswith("<think>\n\n</think>\n\n" if name == "qwen3" else "<think>\n</think>")
    assert '"weather"' in prompt  # the template was given the tools
    answer = engine.completion(request, generate(model, [choice], batch_size=1))
    message = answer["choices"][0]["message"]
    assert "reasoning_content" not in message and message["tool_calls"]


def test_tools_sent_to_a_template_no_format_fits_are_refused_naming_it(tiny, tmp_path):
    template = BODY + "{# a family corral does not know #}"
    model = tiny_family_model(tiny, tmp_path / "unknown", template)
    engine = Completions(model, "tiny-unknown")
    assert engine.tool_format is None
    with pytest.raises(ToolError) as caught:
        engine.requests(weather_request())
    assert caught.value.status == 422 and "tiny-unknown" in caught.value.message
    assert "--tool-format" in caught.value.message
    no_tools = parse_tool_request({"messages": [{"role": "user", "content": "Hi"}]})
    assert engine.requests(no_tools)  # without tools, nothing to refuse
    forced = Completions(model, "tiny-unknown", tool_format="llama3")  # the override
    assert forced.tool_format is FORMATS["llama3"] and forced.requests(weather_request())


def test_a_hermes_template_that_takes_tools_renders_them_itself(tiny, tmp_path):
    """Hermes 3's template iterates `tools` unguarded and Qwen2.5's writes its own tool prompt:
    a Hermes-format template that takes tools is given them (never corral's description), and
    the model still makes a valid call in the Hermes syntax."""
    template = (
        "{{ '<|im_start|>system\\n<tools>' }}{% for tool in tools %}"
        "{{ tool.function.name + ':' + (tool.function.parameters | tojson) }}{% endfor %}"
        "{{ '</tools> Answer in <tool_call></tool_call> tags.<|im_end|>\\n' }}"
        + BODY.replace(TOOLS, "")
    )
    model = tiny_family_model(tiny, tmp_path / "hermes3", template)
    engine = Completions(model, "tiny")
    assert engine.tool_format.name == FORMATS["hermes"].name and engine.tool_format.renders_tools
    request = weather_request(max_completion_tokens=300, seed=2)
    (choice,) = engine.requests(request)
    prompt = model.tokenizer.decode(choice.prompt_ids)
    assert "weather:" in prompt and "You are provided with function signatures" not in prompt
    answer = engine.completion(request, generate(model, [choice], batch_size=1))
    (call,) = answer["choices"][0]["message"]["tool_calls"][:1]
    jsonschema.validate(json.loads(call["function"]["arguments"]), PARAMETERS)


def test_templates_that_take_no_tools_keep_corrals_description(tiny, tmp_path):
    model = tiny_family_model(tiny, tmp_path / "smol", TEMPLATES["hermes"])
    engine = Completions(model, "tiny")
    assert engine.tool_format is FORMATS["hermes"] and not engine.tool_format.renders_tools
    (choice,) = engine.requests(weather_request(max_completion_tokens=300))
    assert "You are provided with function signatures" in model.tokenizer.decode(choice.prompt_ids)


@pytest.mark.parametrize("name", [n for n in TEMPLATES if n != "hermes"])
def test_a_format_whose_template_would_not_show_the_tools_is_refused(tiny, tmp_path, name):
    """`--tool-format NAME` over a template that takes no tools: its prompt would not show them
    (accepted means honoured), so it is refused naming `tool_format`; hermes is not."""
    model = tiny_family_model(tiny, tmp_path / name, TEMPLATES["hermes"])
    with pytest.raises(ToolError) as caught:
        Completions(model, "tiny", tool_format=name)
    assert caught.value.param == "tool_format" and "hermes" in caught.value.message
    assert Completions(model, "tiny", tool_format="hermes").tool_format is FORMATS["hermes"]

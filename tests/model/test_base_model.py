"""A model without a chat template (a base model, as many GGUF files are): its raw prompts take
BOS where the model asks for it, chat messages are refused by name (never a traceback), and the
quick form of `corral generate` continues `--prompt` as raw text."""

import json
import re

import pytest
from corral.automata import regex_to_dfa
from corral.model import load_model
from corral.model.chat import ChatTemplateError
from corral.tools import ToolError, parse_tool_request
from corral.tools.cli import main
from corral.tools.completions import Completions
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def base_folder(tiny, tmp_path_factory):
    folder = tiny.write(tmp_path_factory.mktemp("base") / "model")
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    return folder


@pytest.fixture(scope="module")
def base_model(base_folder):
    return load_model(base_folder, progress=False)


@settings(max_examples=30, deadline=None)
@given(text=st.text(max_size=40), bos=st.booleans())
def test_raw_prompt_is_bos_then_the_tokenizers_ids(base_model, text, bos):
    base_model.add_bos_token = bos
    try:
        ids = base_model.raw_prompt(text)
    finally:
        base_model.add_bos_token = False
    expected = list(base_model.tokenizer.encode(text))
    first = base_model.config.bos_token_id
    assert ids == ([first, *expected] if bos and first is not None else expected)


def test_chat_messages_are_refused_by_name(base_model):
    assert base_model.chat_template is None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        base_model.render_chat([{"role": "user", "content": "hi"}])
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with pytest.raises(ToolError, match="no chat template") as error:
        Completions(base_model).requests(parse_tool_request(body))
    assert error.value.status == 400


def test_the_quick_form_continues_the_prompt(base_folder, capsys):
    pattern = r"[a-c]{2}\d"
    assert regex_to_dfa(pattern).n_states > 1
    code = main(["generate", "--model", str(base_folder), "--regex", pattern, "--prompt", "x",
                 "-n", "2", "--max-tokens", "8"])  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(out) == 2 and all(re.fullmatch(pattern, line) for line in out)

"""The llama-cpp-python logits processor on the default GGUF (corral's cached SmolLM2 file,
`corral.model.loading.default_gguf`): every output validates with `re.fullmatch` /
`jsonschema`, independent of corral's compiler, and ends with finish_reason `stop` (llama.cpp
sampled EOS) whenever max_tokens holds the grammar's shortest answer and its EOS."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
from corral.integrations.llamacpp import llama_vocabulary, logits_processor  # noqa: E402
from corral.integrations.rows import grammar_index  # noqa: E402
from corral.kernels import Constraint  # noqa: E402
from corral.model.loading import default_gguf  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
REGEX = r"(yes|no), [0-9]{1,2} (cats|dogs)"
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def llm():
    return llama_cpp.Llama(
        model_path=str(default_gguf()), n_ctx=512, n_threads=1, seed=0, verbose=False
    )


@pytest.fixture(scope="module")
def vocabulary(llm):
    return llama_vocabulary(llm)


def prompt(question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def complete(llm, vocabulary, question, max_tokens, temperature, seed, **grammar):
    """(text, finish_reason) of one constrained call, max_new_tokens = max_tokens."""
    processors = logits_processor(llm, max_new_tokens=max_tokens, vocabulary=vocabulary, **grammar)
    out = llm(prompt(question), logits_processor=processors, max_tokens=max_tokens,
              temperature=temperature, seed=seed)  # fmt: skip
    return out["choices"][0]["text"], out["choices"][0]["finish_reason"]


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_outputs_validate_and_stop(llm, vocabulary, temperature, seed):
    assert vocabulary.size == llm.n_vocab() and 2 in vocabulary.eos_ids
    text, finish_reason = complete(llm, vocabulary, "Plan a trip as JSON.", 30, temperature,
                                   seed, schema=SCHEMA)  # fmt: skip
    jsonschema.validate(json.loads(text), SCHEMA)
    assert finish_reason == "stop", text
    text, finish_reason = complete(llm, vocabulary, "Pets?", 12, temperature, seed, regex=REGEX)
    assert re.fullmatch(REGEX, text, re.ASCII), text
    assert finish_reason == "stop", text


@pytest.mark.slow
@settings(max_examples=10, deadline=None)
@given(slack=st.integers(0, 16), temperature=st.sampled_from([0.0, 1.0]), seed=st.integers(0, 99))
def test_every_budget_that_fits_stops(llm, vocabulary, slack, temperature, seed):
    """max_tokens from the shortest answer and its EOS up: llama.cpp ends with `stop`."""
    shortest = Constraint(grammar_index(vocabulary, schema=SCHEMA)).tokens_to_complete()
    max_tokens = shortest + 1 + slack
    text, finish_reason = complete(llm, vocabulary, "Plan a trip as JSON.", max_tokens,
                                   temperature, seed, schema=SCHEMA)  # fmt: skip
    jsonschema.validate(json.loads(text), SCHEMA)
    assert finish_reason == "stop", (max_tokens, text)


@pytest.mark.slow
def test_readme_example_runs_as_written():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    (code,) = [block for block in blocks if "from llama_cpp import Llama" in block]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(README), "exec"), {})
    finish_reason, text = printed.getvalue().split(" ", 1)
    jsonschema.validate(json.loads(text), {"type": "object", "required": ["city"]})
    assert finish_reason == "stop"

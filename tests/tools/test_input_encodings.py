"""A Batch input file in UTF-16 or UTF-32 (what Windows tools write by default: a byte-order
mark, then the text) is refused as a whole, naming its encoding: by `corral generate` in one
line with status 2 before the model loads, leaving no output; by the Files API's batch as
`invalid_encoding`. Read as UTF-8 each line was its own "not JSON" error (or "not UTF-8: byte
0"), saying nothing of the cause. UTF-8, with or without its mark, runs as before."""

from __future__ import annotations

import codecs
import json

import pytest
from corral.tools import cli
from corral.tools.batch_service import jsonl_problem
from corral.tools.cli import main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ENCODINGS = {
    "UTF-16": [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")],
    "UTF-32": [(codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be")],
}
MARKED = [(name, mark, codec) for name, pairs in ENCODINGS.items() for mark, codec in pairs]

contents = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


def batch_text(ids: list[str], contents: list[str]) -> str:
    return "".join(
        json.dumps({"custom_id": i, "body": {"messages": [{"role": "user", "content": c}]}}) + "\n"
        for i, c in zip(ids, contents, strict=True)
    )


@pytest.fixture
def model_never_loads(monkeypatch):
    def fail(*args, **kwargs):
        pytest.fail("the model was loaded for an input that is refused as a whole")

    monkeypatch.setattr(cli, "load_model", fail)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    encoding=st.sampled_from(MARKED),
    texts=st.lists(contents, min_size=0, max_size=3),
)
def test_a_utf16_or_utf32_file_is_refused_naming_its_encoding(
    tmp_path_factory, capsys, model_never_loads, encoding, texts
):
    name, mark, codec = encoding
    folder = tmp_path_factory.mktemp("enc")
    source = folder / "in.jsonl"
    data = mark + batch_text([f"r{k}" for k in range(len(texts))], texts).encode(codec)
    source.write_bytes(data)
    capsys.readouterr()
    assert main(["generate", str(source), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and name in err and "Traceback" not in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["in.jsonl"]  # no output left
    code, message = jsonl_problem(data)
    assert code == "invalid_encoding" and name in message


@given(texts=st.lists(contents, min_size=1, max_size=3), bom=st.booleans())
def test_utf8_with_or_without_its_mark_is_not_refused(texts, bom):
    data = batch_text([f"r{k}" for k in range(len(texts))], texts).encode("utf-8")
    assert jsonl_problem(codecs.BOM_UTF8 * bom + data) is None

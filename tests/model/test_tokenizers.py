"""Tokenizers and vocabularies rebuilt from GGUF metadata against references that are not corral
(docs/tokenizers.md):

- llama.cpp's tokenizer test vectors (`ggml-vocab-NAME.gguf` with `.inp` texts and `.out` ids,
  the ids of the model's own Hugging Face tokenizer): the real vocabularies in the full data's
  `llama.cpp/vocab/` (Llama 3, Qwen2, Gemma 4, Phi-3, Llama 2), and two toy vocabularies in the
  sample (tests/data/llama.cpp/make_toy_vocabs.py, whose vectors come from its own reference
  algorithms);
- those reference algorithms (llama.cpp's SentencePiece and BPE) on random texts;
- the `Vocabulary`'s bytes of the expected ids spell the text;
- token masks over each vocabulary against a brute-force walk of every token's bytes.

The full-data cases are skipped, with one line of reason, when the data is absent.
"""

from __future__ import annotations

import importlib.util
import unicodedata
from functools import cache
from pathlib import Path

import pytest
from corral.automata import regex_to_dfa
from corral.kernels import TokenIndex
from corral.model.errors import ModelLoadError
from corral.model.gguf_metadata import read_gguf_metadata
from corral.model.gguf_tokenizer import load_gguf_tokenizer
from corral.model.tokenizer import PromptText
from corral.model.vocabulary import GGUF_UNKNOWN, GGUF_UNUSED, vocabulary_from_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SEPARATOR = "\n__ggml_vocab_test__\n"
SAMPLE = ["toy-spm", "toy-bpe"]
# The real vocabularies: seconds to load each (Gemma 4: 262k tokens, 515k merges).
FULL = [
    pytest.param(name, marks=pytest.mark.slow)
    for name in ["llama-spm", "phi-3", "llama-bpe", "qwen2", "gemma-4"]
]
SENTENCEPIECE = {"toy-spm", "llama-spm", "phi-3"}  # tokenizer.ggml.model "llama"


TOYS = Path(__file__).resolve().parent.parent / "data" / "llama.cpp" / "make_toy_vocabs.py"
_FILES: dict[str, Path] = {}


@pytest.fixture(autouse=True)
def vocab_files(request):
    """Locate the vocabularies a test names (its `name` parameter, or the sample's): the sample's
    in tests/data, the real ones in the full data (the test skipped, one line, when absent)."""
    callspec = getattr(request.node, "callspec", None)
    names = {*SAMPLE, callspec.params.get("name") if callspec else None}
    for name in names - {None}:
        root = request.getfixturevalue("sample_data" if name in SAMPLE else "full_data")
        path = root / "llama.cpp" / "vocab" / f"ggml-vocab-{name}.gguf"
        if not path.is_file():
            pytest.skip(f"{path} not found: the full data lacks llama.cpp's vocabularies")
        _FILES[name] = path


def vocab_file(name: str) -> Path:
    """The vocabulary-only GGUF of `name` (located by the `vocab_files` fixture)."""
    return _FILES[name]


@cache
def loaded(name: str):
    return load_gguf_tokenizer(vocab_file(name))


@cache
def metadata(name: str) -> dict:
    return read_gguf_metadata(vocab_file(name), prefixes=("tokenizer.",))


def vectors(name: str) -> list[tuple[str, list[int]]]:
    """(text, expected ids) pairs: the texts are separated by llama.cpp's marker line, the ids
    are one line per text."""
    path = vocab_file(name)
    texts = path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split(SEPARATOR)
    lines = path.with_suffix(".gguf.out").read_text().splitlines()
    assert len(texts) in (len(lines), len(lines) + 1)  # the last text may end with the marker
    return [
        (text, [int(t) for t in line.split()]) for text, line in zip(texts, lines, strict=False)
    ]


@cache
def toys():
    """The reference algorithms of tests/data/llama.cpp/make_toy_vocabs.py."""
    spec = importlib.util.spec_from_file_location("make_toy_vocabs", TOYS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", SAMPLE + FULL)
def test_test_vectors(name):
    tokenizer = loaded(name).tokenizer
    cases = vectors(name)
    failed = [(text, ids) for text, ids in cases if tokenizer.encode(text) != ids]
    assert not failed, f"{name}: {len(failed)} of {len(cases)} vectors differ, first {failed[0]}"


@pytest.mark.parametrize("name", SAMPLE + FULL)
def test_vocabulary_bytes_spell_the_texts(name):
    """The bytes of the expected ids (not corral's) join to the text: SentencePiece's `▁` is a
    space (and a space is prefixed to the text), `<0xNN>` that byte, GPT-2's alphabet bytes; and
    `Tokenizer.decode` of them is the text."""
    tokenizer, vocabulary = loaded(name).tokenizer, loaded(name).vocabulary
    backend = tokenizer.backend
    added = [token.content for token in backend.get_added_tokens_decoder().values()]
    checked = 0
    for text, ids in vectors(name):
        if any(token in text for token in added):
            continue
        expected = text
        if backend.normalizer is not None:  # NFC (Qwen2); SentencePiece's spaces
            expected = backend.normalizer.normalize_str(text).replace("\u2581", " ")
        assert vocabulary.decode(ids) == expected.encode("utf-8"), text
        # and the tokenizer's decoder gives the text back (SentencePiece's prefix space dropped)
        assert tokenizer.decode(ids) in (text, unicodedata.normalize("NFC", text)), text
        checked += 1
    assert checked >= len(vectors(name)) - 3


@pytest.mark.parametrize("name", SAMPLE + FULL)
def test_tokenizer_json_and_gguf_readers_agree(name):
    """The bytes read from the rebuilt tokenizer.json (`vocabulary_from_tokenizer`, the reader of
    a model folder's tokenizer.json) equal those read from the GGUF token types, except for
    tokens llama.cpp marks unknown or unused (Phi-3's `[PAD32011]`...), which only GGUF says."""
    loaded_ = loaded(name)
    vocabulary = loaded_.vocabulary
    rebuilt = vocabulary_from_tokenizer(loaded_.tokenizer.backend, vocabulary.eos_ids)
    types = metadata(name)["tokenizer.ggml.token_type"]
    differ = [
        t
        for t, (a, b) in enumerate(zip(rebuilt.tokens, vocabulary.tokens, strict=True))
        if a != b and types[t] not in (GGUF_UNKNOWN, GGUF_UNUSED)
    ]
    assert not differ, [(t, rebuilt.tokens[t], vocabulary.tokens[t]) for t in differ[:5]]


def test_vocabulary_token_kinds():
    """Control tokens are None, user-defined ones their text, byte pieces their byte."""
    spm = loaded("toy-spm")
    ids = {token: i for i, token in enumerate(metadata("toy-spm")["tokenizer.ggml.tokens"])}
    tokens = spm.vocabulary.tokens
    assert tokens[ids["<s>"]] is None and tokens[ids["<|ctl|>"]] is None
    assert tokens[ids["<unk>"]] is None
    assert tokens[ids["<tool_call>"]] == b"<tool_call>"
    assert tokens[ids["<0x0A>"]] == b"\n" and tokens[ids["<0xFF>"]] == b"\xff"
    assert tokens[ids["\u2581the"]] == b" the"
    assert spm.vocabulary.eos_ids == (2,) and spm.add_bos_token
    assert spm.special_tokens == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    assert spm.chat_template.startswith("{% for m in messages %}")
    bpe = loaded("toy-bpe")
    assert bpe.vocabulary.tokens[:33] == tuple(bytes([b]) for b in range(33))  # GPT-2 alphabet
    assert bpe.vocabulary.tokens[ord("a")] == b"a" and not bpe.add_bos_token


# Texts for the reference algorithms: ASCII the BPE reference's regex reads as Hugging Face's does
# (no \x1c-\x1f, which Python's \s takes), and some multi-byte characters for SentencePiece.
ASCII = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzTHE0123456789 \n\t.,'\"{}:!-"), max_size=40
)
UNICODE = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz  THE0123456789\n\t.,'\"{}:éüß日本語😀▁"),
    max_size=40,
)
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@cache
def reference(name: str):
    """The reference tokenizer (make_toy_vocabs.py) over the vocabulary `name`."""
    fields = metadata(name)
    tokens = fields["tokenizer.ggml.tokens"]
    if name in SENTENCEPIECE:
        return toys().SentencePiece(tokens, fields["tokenizer.ggml.scores"])
    merges = [tuple(merge.split(" ", 1)) for merge in fields["tokenizer.ggml.merges"]]
    return toys().BytePairEncoding(tokens, merges)


@pytest.mark.parametrize("name", ["toy-spm", *FULL[:2]])
@PROPERTY
@given(text=UNICODE)
def test_sentencepiece_equals_reference(name, text):
    """llama.cpp's SentencePiece (highest-scoring pair first, byte pieces for the rest) and the
    BPE rebuilt from the scores agree."""
    assert loaded(name).tokenizer.encode(text) == reference(name).encode(text)


@pytest.mark.parametrize("name", ["toy-bpe", FULL[2]])
@PROPERTY
@given(text=ASCII)
def test_byte_level_bpe_equals_reference(name, text):
    """Llama 3's pre-tokenizer regex, then merges by rank (a piece in the vocabulary whole)."""
    assert loaded(name).tokenizer.encode(text) == reference(name).encode(text)


TOY_SPECIALS = st.sampled_from(["<|ctl|>", "<tool_call>"])


@PROPERTY
@given(pieces=st.lists(UNICODE | TOY_SPECIALS, max_size=5))
def test_special_tokens_cut_the_text_as_llama_cpp_does(pieces):
    """A control or user-defined token's text encodes to its id; SentencePiece prefixes a space
    to each text fragment after one."""
    text = "".join(pieces)
    assert loaded("toy-spm").tokenizer.encode(text) == reference("toy-spm").encode(text)
    ascii_text = "".join(piece for piece in pieces if piece.isascii())
    assert loaded("toy-bpe").tokenizer.encode(ascii_text) == reference("toy-bpe").encode(ascii_text)


@PROPERTY
@given(pieces=st.lists(UNICODE | st.just("<|ctl|>"), max_size=5), name=st.sampled_from(SAMPLE))
def test_special_token_text_in_a_literal_span_is_text(pieces, name):
    """A chat message's content (a `PromptText` literal span) never gives a control token's id,
    and its bytes are the content's (after SentencePiece's prefix space: one, the content being
    one text fragment)."""
    content = "".join(pieces)
    if name == "toy-bpe":
        content = "".join(piece for piece in pieces if piece.isascii())
    text = PromptText("<|ctl|>" + content + "<|ctl|>", [(7, 7 + len(content))])
    loaded_ = loaded(name)
    control = loaded_.tokenizer.token_id("<|ctl|>")
    ids = loaded_.tokenizer.encode(text)
    assert ids[0] == ids[-1] == control and control not in ids[1:-1]
    spelled = content.replace("\u2581", " ")
    if name == "toy-spm" and content:
        spelled = " " + spelled
    assert loaded_.vocabulary.decode(ids[1:-1]) == spelled.encode("utf-8")


# A JSON-ish pattern: an object of one key and a number, string or literal.
JSONISH = r'\{"[a-z_]+": ?(-?(0|[1-9][0-9]*)(\.[0-9]+)?|"([^"\\]|\\.)*"|true|false|null)\}'
PREFIXES = [b"", b'{"', b'{"na', b'{"name": ', b'{"name": "x', b'{"name": 1', b'{"a":true}']


@pytest.mark.parametrize("name", SAMPLE + FULL)
def test_masks_equal_brute_force_walk(name):
    """The mask of states along a JSON-ish answer equals every token's bytes walked through the
    DFA (EOS allowed exactly in accepting states; specials never)."""
    vocabulary = loaded(name).vocabulary
    dfa = regex_to_dfa(JSONISH)
    index = TokenIndex(dfa, vocabulary)
    eos = set(vocabulary.eos_ids)
    for prefix in PREFIXES:
        state = dfa.step(0, prefix)
        assert state >= 0
        expected = {
            t
            for t, data in enumerate(vocabulary.tokens)
            if (t in eos and dfa.accept[state])
            or (t not in eos and data and dfa.step(state, data) >= 0)
        }
        assert set(index.allowed(state).tolist()) == expected, prefix


def test_refusals_name_what_is_wrong(tmp_path):
    """An unknown pre-tokenizer or tokenizer model is refused naming it; so is a missing field."""
    from corral.model.gguf_tokenizer import tokenizer_json_from_gguf

    fields = dict(metadata("toy-bpe"))
    for key, value, named in [
        ("tokenizer.ggml.pre", "deepseek-llm", "'deepseek-llm'"),
        ("tokenizer.ggml.model", "t5", "'t5'"),
        ("tokenizer.ggml.model", "bert", "'bert'"),
    ]:
        with pytest.raises(ModelLoadError, match=named):
            tokenizer_json_from_gguf({**fields, key: value}, "x.gguf")
    with pytest.raises(ModelLoadError, match="merges"):
        tokenizer_json_from_gguf({k: v for k, v in fields.items() if "merges" not in k}, "x.gguf")
    spm = {k: v for k, v in metadata("toy-spm").items() if "scores" not in k}
    with pytest.raises(ModelLoadError, match="scores"):
        tokenizer_json_from_gguf(spm, "x.gguf")


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(min_value=0, max_value=5700), flip=st.integers(0, 255))
def test_damaged_gguf_is_refused_cleanly(tmp_path_factory, cut, flip):
    """A GGUF cut short anywhere, or with a byte changed in its header, either loads or raises
    `ModelLoadError` naming the file: never another exception."""
    data = bytearray(vocab_file("toy-bpe").read_bytes())
    data = data[: min(cut, len(data))] if cut < len(data) else data
    if cut >= len(data) and len(data) > 30:
        data[cut % 30] = flip
    path = tmp_path_factory.mktemp("damaged") / "damaged.gguf"
    path.write_bytes(bytes(data))
    try:
        load_gguf_tokenizer(path)
    except ModelLoadError as error:
        assert error.path == path


@pytest.mark.parametrize("name", [*SAMPLE, FULL[0]])
def test_metadata_reader_equals_gguf_reader(name):
    """`read_gguf_metadata` against `gguf`'s own reader, key by key."""
    from gguf import GGUFReader

    reader = GGUFReader(vocab_file(name))
    expected = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert read_gguf_metadata(vocab_file(name)) == expected
    prefixed = read_gguf_metadata(vocab_file(name), prefixes=("tokenizer.ggml.t",))
    assert prefixed == {k: v for k, v in expected.items() if k.startswith("tokenizer.ggml.t")}

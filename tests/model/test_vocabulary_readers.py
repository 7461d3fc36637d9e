"""Reading token bytes from tokenizer files (docs/design.md sections 4 and 6): GPT-2's byte table,
SentencePiece pieces, a tokenizers.Tokenizer / tokenizer.json, GGUF metadata, and the model's own
`Model.vocabulary`."""

from __future__ import annotations

import json

import pytest
from corral.kernels import Vocabulary, VocabularyError
from corral.model.vocabulary import (
    gpt2_token_bytes,
    sentencepiece_token_bytes,
    vocabulary_from_gguf,
    vocabulary_from_tokenizer,
)

TEXTS = ["hello world", "Grüße, 日本語 😀!", '{"city":"Paris"}', "a\nb\tc  d", "ÿ\x7f\x01€"]


def test_gpt2_byte_map_covers_all_bytes():
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    assert len(alphabet) == 256
    assert sorted(gpt2_token_bytes(ch)[0] for ch in alphabet) == list(range(256))
    assert gpt2_token_bytes("Ġhello") == b" hello"
    assert gpt2_token_bytes("Ċ") == b"\n"
    assert gpt2_token_bytes("Ã©") == "é".encode()
    assert gpt2_token_bytes("ĠÃ") == b" \xc3"  # half of a UTF-8 character


def test_sentencepiece_bytes():
    assert sentencepiece_token_bytes("<0x0A>") == b"\n"
    assert sentencepiece_token_bytes("<0xE2>") == b"\xe2"
    assert sentencepiece_token_bytes("▁hello") == b" hello"
    assert sentencepiece_token_bytes("日") == "日".encode()


def trained_byte_level_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(TEXTS * 20, trainer)
    return tokenizer


def test_from_byte_level_tokenizer_spells_every_text():
    tokenizer = trained_byte_level_tokenizer()
    im_end = tokenizer.token_to_id("<|im_end|>")
    vocabulary = vocabulary_from_tokenizer(tokenizer, eos_ids=[im_end])
    assert vocabulary.size == tokenizer.get_vocab_size()
    assert vocabulary.tokens[im_end] is None and vocabulary.eos_ids == (im_end,)
    assert vocabulary.tokens[tokenizer.token_to_id("<|endoftext|>")] is None
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert vocabulary.decode(ids) == text.encode("utf-8")
    padded = vocabulary_from_tokenizer(tokenizer, eos_ids=[im_end], size=512)
    assert padded.size == 512 and padded.tokens[-1] is None
    assert padded.tokens[: vocabulary.size] == vocabulary.tokens
    cut = vocabulary_from_tokenizer(tokenizer, eos_ids=[], size=3)  # a model with fewer logits
    assert cut.tokens == vocabulary.tokens[:3]
    with pytest.raises(VocabularyError):  # an EOS id past the model's logits
        vocabulary_from_tokenizer(tokenizer, eos_ids=[vocabulary.size - 1], size=3)


def test_from_tokenizer_json_path_reads_eos_from_config(tmp_path):
    tokenizer = trained_byte_level_tokenizer()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(VocabularyError):
        vocabulary_from_tokenizer(path)  # no tokenizer_config.json
    config = {"eos_token": {"content": "<|im_end|>"}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    vocabulary = vocabulary_from_tokenizer(path)
    assert vocabulary.eos_ids == (tokenizer.token_to_id("<|im_end|>"),)


def test_from_sentencepiece_style_tokenizer_json(tmp_path):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "▁hello": 5, "é": 6}
    spec = {
        "version": "1.0",
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, c in enumerate(["<unk>", "<s>", "</s>"])
        ] + [{"id": 7, "content": "<tool_call>", "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": False}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }  # fmt: skip
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec))
    vocabulary = vocabulary_from_tokenizer(path, eos_ids=[2])
    assert vocabulary.tokens == (
        None, None, None, b"\n", b"\xc3", b" hello", "é".encode(), b"<tool_call>",
    )  # fmt: skip


def write_gguf(path, model, tokens, types, eos, eot=None):
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_eos_token_id(eos)
    if eot is not None:
        writer.add_uint32("tokenizer.ggml.eot_token_id", eot)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_from_gguf_gpt2(tmp_path):
    path = tmp_path / "gpt2.gguf"
    tokens = ["<|endoftext|>", "<|im_end|>", "Ġhello", "Ċ", "Ã", "<tool_call>", "<unused>"]
    types = [3, 3, 1, 1, 1, 4, 5]
    write_gguf(path, "gpt2", tokens, types, eos=1, eot=0)
    vocabulary = vocabulary_from_gguf(path, size=8)
    assert vocabulary.tokens == (None, None, b" hello", b"\n", b"\xc3", b"<tool_call>", None, None)
    assert vocabulary.eos_ids == (0, 1)


def test_from_gguf_llama(tmp_path):
    path = tmp_path / "llama.gguf"
    tokens = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xFF>", "▁the", "é"]
    write_gguf(path, "llama", tokens, [2, 3, 3, 6, 6, 1, 1], eos=2)
    vocabulary = vocabulary_from_gguf(path)
    assert vocabulary.tokens == (None, None, None, b"\n", b"\xff", b" the", "é".encode())
    assert vocabulary.eos_ids == (2,)


def test_from_gguf_refuses_unknown_model(tmp_path):
    path = tmp_path / "t5.gguf"
    write_gguf(path, "t5", ["a"], [1], eos=0)
    with pytest.raises(VocabularyError):
        vocabulary_from_gguf(path)


@pytest.mark.slow
def test_model_vocabulary_marks_specials(model):
    """docs/design.md section 4, the vocabulary: the chat markers and EOS are None,
    text tokens spell their text; built once per model."""
    vocabulary = model.vocabulary
    assert isinstance(vocabulary, Vocabulary) and vocabulary is model.vocabulary
    assert vocabulary.size == model.vocab_size and vocabulary.eos_ids == model.eos_ids
    eos = model.tokenizer.token_id("<|im_end|>")
    start = model.tokenizer.token_id("<|im_start|>")
    assert vocabulary.tokens[eos] is None and vocabulary.tokens[start] is None
    hello = model.tokenizer.encode("Hello world")
    assert vocabulary.decode(hello) == b"Hello world"

"""The vocabulary constructors and the byte trie (DESIGN.md section 4): token ids to raw bytes
from a list, a tokenizers.Tokenizer / tokenizer.json, and GGUF metadata."""

from __future__ import annotations

import json

import numpy as np
import pytest
from corral.kernels import Vocabulary, VocabularyError, build_trie
from corral.kernels.trie import BYTE_CATEGORY
from corral.kernels.vocabulary import gpt2_token_bytes, sentencepiece_token_bytes
from hypothesis import given, settings
from kernel_strategies import random_vocabularies

TEXTS = ["hello world", "Grüße, 日本語 😀!", '{"city":"Paris"}', "a\nb\tc  d", "ÿ\x7f\x01€"]


def test_from_list():
    vocabulary = Vocabulary.from_list([b"a", "é", None, b""], eos_ids=[2])
    assert vocabulary.tokens == (b"a", b"\xc3\xa9", None, b"")
    assert vocabulary.eos_ids == (2,) and vocabulary.size == 4 and vocabulary.n_words == 1
    assert vocabulary.decode([0, 1, 2, 3]) == b"a\xc3\xa9"
    with pytest.raises(VocabularyError):
        Vocabulary.from_list([b"a"], eos_ids=[1])


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
    vocabulary = Vocabulary.from_tokenizer(tokenizer, eos_ids=[im_end])
    assert vocabulary.size == tokenizer.get_vocab_size()
    assert vocabulary.tokens[im_end] is None and vocabulary.eos_ids == (im_end,)
    assert vocabulary.tokens[tokenizer.token_to_id("<|endoftext|>")] is None
    for text in TEXTS:
        ids = tokenizer.encode(text).ids
        assert vocabulary.decode(ids) == text.encode("utf-8")
    padded = Vocabulary.from_tokenizer(tokenizer, eos_ids=[im_end], size=512)
    assert padded.size == 512 and padded.tokens[-1] is None
    with pytest.raises(VocabularyError):
        Vocabulary.from_tokenizer(tokenizer, eos_ids=[im_end], size=3)


def test_from_tokenizer_json_path_reads_eos_from_config(tmp_path):
    tokenizer = trained_byte_level_tokenizer()
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    with pytest.raises(VocabularyError):
        Vocabulary.from_tokenizer(path)  # no tokenizer_config.json
    config = {"eos_token": {"content": "<|im_end|>"}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    vocabulary = Vocabulary.from_tokenizer(path)
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
    vocabulary = Vocabulary.from_tokenizer(path, eos_ids=[2])
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
    vocabulary = Vocabulary.from_gguf(path, size=8)
    assert vocabulary.tokens == (None, None, b" hello", b"\n", b"\xc3", b"<tool_call>", None, None)
    assert vocabulary.eos_ids == (0, 1)


def test_from_gguf_llama(tmp_path):
    path = tmp_path / "llama.gguf"
    tokens = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xFF>", "▁the", "é"]
    write_gguf(path, "llama", tokens, [2, 3, 3, 6, 6, 1, 1], eos=2)
    vocabulary = Vocabulary.from_gguf(path)
    assert vocabulary.tokens == (None, None, None, b"\n", b"\xff", b" the", "é".encode())
    assert vocabulary.eos_ids == (2,)


def test_from_gguf_refuses_unknown_model(tmp_path):
    path = tmp_path / "t5.gguf"
    write_gguf(path, "t5", ["a"], [1], eos=0)
    with pytest.raises(VocabularyError):
        Vocabulary.from_gguf(path)


@settings(max_examples=100, deadline=None)
@given(vocabulary=random_vocabularies())
def test_trie_layout(vocabulary):
    """Depth-first order, subtree ranges, and every text token exactly once at its path."""
    trie = build_trie(vocabulary.tokens, exclude=vocabulary.eos_ids)
    assert trie is not None
    n = trie.n_nodes
    paths = [b""] * n
    stack = [b""]
    for i in range(1, n):
        d = int(trie.depth[i])
        assert 1 <= d <= len(stack)
        del stack[d:]
        paths[i] = stack[d - 1] + bytes([int(trie.byte[i])])
        stack.append(paths[i])
    assert paths[1:] == sorted(paths[1:]) and len(set(paths)) == n  # preorder, sorted children
    for i in range(n):
        inside = [j for j in range(i, n) if paths[j].startswith(paths[i])]
        assert inside == list(range(i, int(trie.end[i])))
    expected = {
        t: data for t, data in enumerate(vocabulary.tokens) if data and t not in vocabulary.eos_ids
    }
    seen = {}
    for i in range(n):
        for t in trie.token_ids[trie.token_start[i] : trie.token_start[i + 1]].tolist():
            assert t not in seen
            seen[t] = paths[i]
    assert seen == expected
    for i in range(n):
        below = set(b"".join(p[len(paths[i]) - 1 :] if i else p for p in paths[i : trie.end[i]]))
        expected_categories = np.bitwise_or.reduce(BYTE_CATEGORY[sorted(below)]) if below else 0
        assert trie.categories[i] == expected_categories
    assert trie.max_depth == max(map(len, expected.values()), default=0)
    assert trie.token_start.dtype == trie.token_ids.dtype == trie.end.dtype == np.int32
    assert vocabulary.trie is vocabulary.trie  # built once, cached

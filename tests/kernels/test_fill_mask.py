"""`fill_mask` (a mask written into the caller's buffer) equals a brute-force walk of every token's
bytes, in every index mode, through `TokenIndex`, `LazyTokenIndex` and `Constraint`; the walk's
start row (`Vocabulary.loop_row`) holds exactly the tokens whose bytes all fall in the given
categories; and the masks over the real Llama 3, Qwen2 and Gemma 4 vocabularies (llama.cpp's
vocabulary-only GGUF files) equal a vectorized brute-force walk of every token on a few schemas
(docs/design.md section 4)."""

from __future__ import annotations

import numpy as np
import pytest
from corral.automata import lazy_regex_dfa, lazy_schema_dfa, regex_to_dfa, schema_to_dfa
from corral.kernels import Constraint, LazyTokenIndex, TokenIndex, Vocabulary, unpack_ids
from corral.kernels.masks.trie import BYTE_CATEGORY
from hypothesis import given
from hypothesis import strategies as st
from kernel_strategies import SETTINGS, mask_ids, oracle_allowed, random_vocabularies
from test_index_oracle import patterns

MODES = ["auto", "eager", "visit", "lazy"]


@SETTINGS
@given(
    pattern=patterns,
    vocabulary=random_vocabularies(),
    mode=st.sampled_from(MODES),
    dtype=st.sampled_from([np.uint32, np.int32]),
)
def test_fill_mask_equals_brute_force_walk(pattern, vocabulary, mode, dtype):
    dfa = regex_to_dfa(pattern)
    index = TokenIndex(dfa, vocabulary, mode=mode)
    lazy = LazyTokenIndex(lazy_regex_dfa(pattern), vocabulary)
    out = np.zeros(vocabulary.n_words, dtype)
    stale = out.view(np.uint32)
    stale[:] = 0xFFFFFFFF  # stale bits the fill must clear
    for state in reversed(range(dfa.n_states)):  # first visits out of order
        expected = oracle_allowed(dfa, vocabulary, state)
        for _ in range(2):  # a first visit, then a stored row
            assert index.fill_mask(state, out) is out
            assert mask_ids(out.view(np.uint32)) == expected, f"state {state}"
            stale[:] = 0xFFFFFFFF
        if not Constraint(index, state).done:
            Constraint(index, state).fill_mask(out)
            assert mask_ids(out.view(np.uint32)) == expected
    # the lazy DFA numbers its states otherwise: follow the same bytes in both
    for data in {b"", *(t for t in vocabulary.tokens if t)}:
        state, made = dfa.step(0, data), lazy.step_bytes(0, data)
        if state >= 0:
            lazy.fill_mask(made, out)
            assert mask_ids(out.view(np.uint32)) == oracle_allowed(dfa, vocabulary, state)


def test_fill_mask_refuses_a_buffer_of_the_wrong_kind():
    index = TokenIndex(regex_to_dfa("ab*"), Vocabulary.from_list(["a", "b", "ab", None], [3]))
    n = index.n_words
    for bad in (np.zeros(n + 1, np.uint32), np.zeros(n, np.float32), np.zeros((1, n), np.uint32)):
        with pytest.raises(ValueError, match=rf"out must be a writable uint32 or int32 .*\({n},\)"):
            index.fill_mask(0, bad)
    frozen = np.zeros(n, np.uint32)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        index.fill_mask(0, frozen)
    with pytest.raises(ValueError, match="not list"):
        index.fill_mask(0, [0] * n)
    with pytest.raises(IndexError):
        index.fill_mask(99, np.zeros(n, np.uint32))


@SETTINGS
@given(vocabulary=random_vocabularies(), loops=st.integers(0, 0xFFFF))
def test_loop_row_holds_the_tokens_inside_the_categories(vocabulary, loops):
    inside = {
        t
        for t, data in enumerate(vocabulary.tokens)
        if data
        and t not in vocabulary.eos_ids
        and all(int(BYTE_CATEGORY[b]) & ~loops & 0xFFFF == 0 for b in data)
    }
    assert mask_ids(vocabulary.loop_row(loops)) == inside


# --- the vocabularies people use --------------------------------------------------------------

VOCABULARIES = {
    "llama3": "ggml-vocab-llama-bpe.gguf",
    "qwen2": "ggml-vocab-qwen2.gguf",
    "gemma4": "ggml-vocab-gemma-4.gguf",
}
SCHEMAS = {
    "strings": (
        {
            "type": "object",
            "properties": {"city": {"type": "string"}, "note": {"type": "string", "maxLength": 3}},
            "required": ["city"],
        },
        '{"city":"São Paulo, \\"the\\" 大城市 🌆","note":"añ"}',
    ),
    "numbers and enums": (
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": -5},
                "x": {"type": "number"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
            },
            "required": ["n", "unit"],
        },
        '{"n":-3,"x":1.5e3,"unit":"fahrenheit","tags":["a b","x\\ny"]}',
    ),
}


@pytest.fixture(scope="module", params=list(VOCABULARIES))
def real_vocabulary(request, full_data):
    from corral.model.gguf_tokenizer import load_gguf_tokenizer

    path = full_data / "llama.cpp" / "vocab" / VOCABULARIES[request.param]
    if not path.is_file():
        pytest.skip(f"{path} not found (llama.cpp's vocabulary-only GGUF files)")
    return load_gguf_tokenizer(path)


def brute_force_rows(dfa, vocabulary) -> dict[int, set[int]]:
    """state -> its allowed ids, walking every token's bytes at once (NumPy over the
    vocabulary, one byte position at a time): no trie, no loop rows."""
    eos = set(vocabulary.eos_ids)
    ids = [t for t, data in enumerate(vocabulary.tokens) if data and t not in eos]
    lengths = np.array([len(vocabulary.tokens[t]) for t in ids])
    table = np.zeros((len(ids), lengths.max()), np.uint8)
    for row, t in enumerate(ids):
        table[row, : lengths[row]] = np.frombuffer(vocabulary.tokens[t], np.uint8)
    ids = np.array(ids)
    trans = np.asarray(dfa.trans)
    out = {}
    for state in range(dfa.n_states):
        at = np.full(len(ids), state)
        for position in range(table.shape[1]):
            live = (position < lengths) & (at >= 0)
            at[live] = trans[at[live], table[live, position]]
        allowed = set(ids[at >= 0].tolist())
        out[state] = allowed | (eos if dfa.accept[state] else set())
    return out


@pytest.mark.parametrize("schema", list(SCHEMAS))
def test_masks_on_real_vocabularies_equal_brute_force_walk(real_vocabulary, schema):
    source, text = SCHEMAS[schema]
    vocabulary = real_vocabulary.vocabulary
    dfa = schema_to_dfa(source)
    expected = brute_force_rows(dfa, vocabulary)
    out = np.empty(vocabulary.n_words, np.uint32)
    for mode in ("auto", "eager", "visit"):
        index = TokenIndex(dfa, vocabulary, mode=mode)
        for state in reversed(range(dfa.n_states)):
            index.fill_mask(state, out)
            assert set(unpack_ids(out).tolist()) == expected[state], f"{mode} state {state}"
    # the lazy index along the example's tokens (its own state numbers)
    lazy = LazyTokenIndex(lazy_schema_dfa(source), vocabulary)
    state = made = 0
    for token in real_vocabulary.tokenizer.encode(text):
        lazy.fill_mask(made, out)
        assert set(unpack_ids(out).tolist()) == expected[state]
        state, made = dfa.step(state, vocabulary.tokens[token]), lazy.next_state(made, token)
        assert state >= 0 and made >= 0
    assert dfa.accept[state]

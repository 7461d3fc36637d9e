"""corral's masks inside llama-cpp-python: a `logits_processor` holding `Llama.__call__`,
`create_completion` or `create_chat_completion` to a regex or a JSON Schema (docs/design.md
sections 2-4).

    from corral.integrations.llamacpp import logits_processor
    llm = Llama(model_path="model.gguf")
    out = llm(prompt, logits_processor=logits_processor(llm, schema=schema, max_new_tokens=64),
              max_tokens=64)

This module imports `llama_cpp` (the optional extra `corral[llamacpp]`); nothing else in corral
imports it.

How it reads the vocabulary, EOS ids and rows: docs/integrations.md.
"""

from __future__ import annotations

import numpy as np
from corral.integrations.rows import (
    RowConstraints,
    check_grammars,
    check_max_new_tokens,
    check_vocabulary,
    grammar_index,
)
from corral.kernels import Vocabulary
from corral.model.vocabulary import vocabulary_from_gguf
from llama_cpp import Llama, LogitsProcessorList


def llama_vocabulary(llm) -> Vocabulary:
    """The `Vocabulary` of a `llama_cpp.Llama` (from its GGUF file's metadata).

    Raises VocabularyError: the metadata lacks the tokenizer or names an unknown model."""
    return vocabulary_from_gguf(llm.model_path, size=llm.n_vocab())


class CorralLlamaProcessor:
    """A llama-cpp-python logits processor: the scores of the tokens the grammar does not allow
    next become -inf.

    Args:
        index: the grammar's `TokenIndex` over `llama_vocabulary(llm)`.
        max_new_tokens: pass the call's max_tokens: the answer and its EOS then fit in it, so
            llama.cpp ends it with finish_reason `stop` whenever the grammar's shortest answer
            takes fewer than max_tokens tokens (`corral.integrations.rows`); None: no budget.

    Call: `(input_ids: int [length], scores: float32 [n_vocab]) -> float32 [n_vocab]`.
    """

    def __init__(self, index, max_new_tokens: int | None = None):
        self.rows = RowConstraints([index], max_new_tokens)

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        allowed = self.rows.allowed(np.asarray(input_ids)[None, :], scores.shape[-1])[0]
        return np.where(allowed, scores, np.float32(-np.inf)).astype(np.float32, copy=False)


def logits_processor(
    llm,
    regex: str | None = None,
    schema: dict | str | None = None,
    max_new_tokens: int | None = None,
    vocabulary: Vocabulary | None = None,
) -> LogitsProcessorList:
    """A `llama_cpp.LogitsProcessorList` holding a call of `llm` to a regex (docs/design.md section
    2) or a JSON Schema (section 3; dict or JSON text); exactly one is given. `vocabulary`: an
    earlier `llama_vocabulary(llm)`, to skip reading it.

    Every parameter is checked before the vocabulary is read or a grammar compiled.

    Raises:
        TypeError: `llm` is not a `llama_cpp.Llama`; a regex, schema, max_new_tokens or
            vocabulary of another type (`corral.integrations.rows`' checks), naming it.
        ValueError: neither or both of regex and schema; max_new_tokens below 1; a
            `vocabulary` whose size is not the model's.
        corral.automata.ConstrainError: a regex or schema outside the subset.
    """
    if not isinstance(llm, Llama):
        raise TypeError(f"llm must be a llama_cpp.Llama, not {type(llm).__name__}")
    check_grammars(regex, schema)
    check_max_new_tokens(max_new_tokens)
    if check_vocabulary(vocabulary) is None:
        vocabulary = llama_vocabulary(llm)
    elif vocabulary.size != llm.n_vocab():
        raise ValueError(
            f"vocabulary holds {vocabulary.size} tokens and the model {llm.n_vocab()}: pass "
            "llama_vocabulary(llm) of this model"
        )
    index = grammar_index(vocabulary, regex=regex, schema=schema)
    return LogitsProcessorList([CorralLlamaProcessor(index, max_new_tokens)])

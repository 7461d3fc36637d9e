"""corral's masks inside Hugging Face `transformers`: a `LogitsProcessor` holding
`model.generate(...)` to a regex or a JSON Schema (docs/design.md sections 2-4), in the manner of
outlines' and XGrammar's transformers processors.

    from corral.integrations.huggingface import logits_processor
    processors = logits_processor(tokenizer, schema=schema, max_new_tokens=64)
    out = model.generate(**inputs, logits_processor=processors, max_new_tokens=64)

This module imports `torch` and `transformers` (the optional extra `corral[transformers]`);
nothing else in corral imports it.

How it reads the vocabulary, EOS ids and rows: docs/integrations.md.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Iterable, Sequence

import torch
from corral.integrations.rows import (
    RowConstraints,
    check_grammars,
    check_max_new_tokens,
    check_vocabulary,
    checked_index,
)
from corral.kernels import TokenIndex, Vocabulary, VocabularyError
from corral.model.vocabulary import vocabulary_from_tokenizer
from transformers import LogitsProcessor, LogitsProcessorList, PreTrainedTokenizerBase


def hf_vocabulary(tokenizer, eos_token_id: int | Iterable[int] | None = None) -> Vocabulary:
    """The `Vocabulary` (token id -> raw bytes, EOS ids) of a Hugging Face fast tokenizer.

    Args:
        tokenizer: a `transformers.PreTrainedTokenizerFast` (or a `tokenizers.Tokenizer`).
        eos_token_id: the EOS id or ids; None for `tokenizer.eos_token_id`.

    Raises:
        TypeError: `tokenizer` is not a tokenizer; an `eos_token_id` that is not an id or ids.
        ValueError: an empty or negative `eos_token_id`.
        VocabularyError: a slow tokenizer, a vocabulary that is neither byte-level nor has byte
            fallback, or no EOS id.
    """
    backend = _backend(tokenizer)
    _check_eos(eos_token_id)
    spec = json.loads(backend.to_str())
    if not (_byte_level(spec) or spec.get("model", {}).get("byte_fallback")):
        kind = spec.get("model", {}).get("type")
        raise VocabularyError(
            f"a {kind} vocabulary that is neither byte-level nor has byte fallback: its tokens "
            "are not raw bytes, so corral cannot mask it"
        )
    if eos_token_id is None:
        eos_token_id = getattr(tokenizer, "eos_token_id", None)
    if eos_token_id is None:
        raise VocabularyError("the tokenizer names no EOS token: pass eos_token_id")
    eos = [eos_token_id] if isinstance(eos_token_id, numbers.Integral) else list(eos_token_id)
    return vocabulary_from_tokenizer(backend, eos_ids=eos)


def _backend(tokenizer):
    """The `tokenizers.Tokenizer` of a fast tokenizer (or the one given). Raises
    VocabularyError for a slow tokenizer, TypeError for what is not a tokenizer."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "to_str"):
        if isinstance(tokenizer, PreTrainedTokenizerBase):
            raise VocabularyError(
                f"{type(tokenizer).__name__} is a slow tokenizer: load it with use_fast=True"
            )
        raise TypeError(
            "tokenizer must be a transformers fast tokenizer or a tokenizers.Tokenizer, not "
            f"{type(tokenizer).__name__}"
        )
    return backend


def _check_eos(eos_token_id) -> None:
    """Refuse an `eos_token_id` that is neither None, an integer id (not a bool) nor a non-empty
    iterable of them (TypeError, ValueError for an empty one or a negative id), naming
    it; an id past the vocabulary is the `Vocabulary`'s VocabularyError."""
    if eos_token_id is None:
        return
    many = isinstance(eos_token_id, Iterable) and not isinstance(eos_token_id, str | bytes | dict)
    ids = list(eos_token_id) if many else [eos_token_id]
    if not ids:
        raise ValueError("eos_token_id holds no id: give at least one, or None")
    for e in ids:
        if isinstance(e, bool) or not isinstance(e, numbers.Integral):
            raise TypeError(
                "eos_token_id must be a token id, a list of them or None, not "
                f"{type(e).__name__} {e!r}"[:120]
            )
        if e < 0:
            raise ValueError(f"eos_token_id holds {e}, which is not a token id")


def _byte_level(spec: object) -> bool:
    """True when a tokenizer.json's pre-tokenizer or decoder is (or contains) ByteLevel."""
    return _mentions(spec.get("pre_tokenizer")) or _mentions(spec.get("decoder"))


def _mentions(component: object) -> bool:
    if isinstance(component, dict):
        return component.get("type") == "ByteLevel" or any(map(_mentions, component.values()))
    if isinstance(component, list):
        return any(map(_mentions, component))
    return False


class CorralLogitsProcessor(LogitsProcessor):
    """A `transformers.LogitsProcessor`: the logits of the tokens a row's grammar does not
    allow next become -inf.

    Args:
        indexes: one `TokenIndex` for every row, or one per batch item (`RowConstraints`).
        max_new_tokens: pass `generate`'s max_new_tokens to end every answer with EOS within
            it (the budget rule of docs/design.md section 4, a token kept for EOS, on which
            `generate` stops: `corral.integrations.rows`); None: no budget (an answer may be
            cut).

    Call: `(input_ids: LongTensor [rows, length], scores: FloatTensor [rows, V']) -> scores`
    (a new tensor; V' >= the tokenizer's V, ids past V never allowed).
    """

    def __init__(self, indexes: Sequence[TokenIndex], max_new_tokens: int | None = None):
        self.rows = RowConstraints(indexes, max_new_tokens)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        allowed = self.rows.allowed(input_ids.detach().cpu().numpy(), scores.shape[-1])
        allowed = torch.from_numpy(allowed).to(scores.device)
        return scores.masked_fill(~allowed, float("-inf"))


def logits_processor(
    tokenizer,
    regex: str | Sequence[str] | None = None,
    schema: dict | str | Sequence[dict] | None = None,
    max_new_tokens: int | None = None,
    eos_token_id: int | Iterable[int] | None = None,
    vocabulary: Vocabulary | None = None,
) -> LogitsProcessorList:
    """A `LogitsProcessorList` holding `generate` to a regex or a JSON Schema.

    Args:
        tokenizer: the model's fast tokenizer (`hf_vocabulary`).
        regex: a pattern (docs/design.md section 2), or a list of one per batch item.
        schema: a JSON Schema (section 3; dict or JSON text), or a list of one per batch item.
        max_new_tokens: as in `CorralLogitsProcessor` (pass the same value to `generate`).
        eos_token_id: as in `hf_vocabulary`.
        vocabulary: a `Vocabulary` from an earlier `hf_vocabulary` call, to skip reading it.

    Every parameter is checked before the vocabulary is read or a grammar compiled.

    Raises:
        TypeError: a tokenizer, regex, schema, max_new_tokens, eos_token_id or vocabulary of
            another type (`corral.integrations.rows`' checks), naming it.
        ValueError: neither or both of regex and schema, an empty list of them; max_new_tokens
            below 1; an empty or negative eos_token_id; eos_token_id given with a
            `vocabulary` (whose EOS ids are its own: pass it to `hf_vocabulary`); a
            `vocabulary` smaller than the tokenizer's (another model's).
        VocabularyError: as in `hf_vocabulary`.
        corral.automata.ConstrainError: a regex or schema outside the subset.
    """
    grammars = check_grammars(regex, schema, many=True)
    check_max_new_tokens(max_new_tokens)
    if check_vocabulary(vocabulary) is None:
        vocabulary = hf_vocabulary(tokenizer, eos_token_id)
    elif eos_token_id is not None:
        raise ValueError(
            "eos_token_id is not read when a vocabulary is given (its EOS ids are its own): "
            "pass it to hf_vocabulary"
        )
    elif vocabulary.size < (size := _backend(tokenizer).get_vocab_size(with_added_tokens=True)):
        raise ValueError(
            f"vocabulary holds {vocabulary.size} tokens and the tokenizer {size}: pass "
            "hf_vocabulary(tokenizer) of this tokenizer"
        )
    indexes = [checked_index(vocabulary, r, s) for r, s in grammars]
    return LogitsProcessorList([CorralLogitsProcessor(indexes, max_new_tokens)])


__all__ = ["CorralLogitsProcessor", "hf_vocabulary", "logits_processor"]

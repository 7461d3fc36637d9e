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
from collections.abc import Iterable, Sequence

import torch
from corral.integrations.rows import RowConstraints, grammar_index
from corral.kernels import TokenIndex, Vocabulary, VocabularyError
from corral.model.vocabulary import vocabulary_from_tokenizer
from transformers import LogitsProcessor, LogitsProcessorList


def hf_vocabulary(tokenizer, eos_token_id: int | Iterable[int] | None = None) -> Vocabulary:
    """The `Vocabulary` (token id -> raw bytes, EOS ids) of a Hugging Face fast tokenizer.

    Args:
        tokenizer: a `transformers.PreTrainedTokenizerFast` (or a `tokenizers.Tokenizer`).
        eos_token_id: the EOS id or ids; None for `tokenizer.eos_token_id`.

    Raises:
        VocabularyError: a slow tokenizer, a vocabulary that is neither byte-level nor has byte
            fallback, or no EOS id.
    """
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "to_str"):
        raise VocabularyError(
            f"{type(tokenizer).__name__} is a slow tokenizer: load it with use_fast=True"
        )
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
    eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    return vocabulary_from_tokenizer(backend, eos_ids=eos)


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

    Raises:
        ValueError: neither or both of regex and schema.
        VocabularyError: as in `hf_vocabulary`.
        corral.automata.ConstrainError: a regex or schema outside the subset.
    """
    if (regex is None) == (schema is None):
        raise ValueError("give exactly one of regex and schema")
    vocabulary = vocabulary or hf_vocabulary(tokenizer, eos_token_id)
    if regex is not None:
        patterns = [regex] if isinstance(regex, str) else list(regex)
        indexes = [grammar_index(vocabulary, regex=p) for p in patterns]
    else:
        schemas = [schema] if isinstance(schema, dict | str) else list(schema)
        indexes = [grammar_index(vocabulary, schema=s) for s in schemas]
    return LogitsProcessorList([CorralLogitsProcessor(indexes, max_new_tokens)])


__all__ = ["CorralLogitsProcessor", "hf_vocabulary", "logits_processor"]

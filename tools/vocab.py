"""The raw bytes of every token, for the token masks (DESIGN.md section 4; tool-calls-spec
section 4, `vocab_bytes_marks_specials`).

A thin adapter over what already exists: `corral.model`'s tokenizer (`Tokenizer.vocabulary()`,
also on `Model`) or `corral.kernels.Vocabulary.from_tokenizer` for a `tokenizers.Tokenizer` or
a `tokenizer.json` path. The ids in `specials` (chat markers such as `<|im_start|>`, EOS) map to
None, so a mask never allows them as text.
"""

from __future__ import annotations

from collections.abc import Iterable


def vocab_bytes(tokenizer, specials: Iterable[int] = ()) -> list[bytes | None]:
    """Token id -> raw bytes (None for specials), a list of length V.

    `tokenizer` is a `corral.model` tokenizer or model (anything with `vocabulary()`), a
    `corral.kernels.Vocabulary`, a `tokenizers.Tokenizer`, a `tokenizer.json` path, or a list of
    bytes / None. Raises IndexError for a special id outside the vocabulary.
    """
    if hasattr(tokenizer, "vocabulary") and callable(tokenizer.vocabulary):
        tokens = list(tokenizer.vocabulary())
    elif hasattr(tokenizer, "tokens"):
        tokens = list(tokenizer.tokens)
    elif isinstance(tokenizer, (list, tuple)):
        tokens = list(tokenizer)
    else:
        from corral.kernels import Vocabulary

        tokens = list(Vocabulary.from_tokenizer(tokenizer, eos_ids=()).tokens)
    for t in specials:
        if not 0 <= t < len(tokens):
            raise IndexError(f"special id {t} is outside the vocabulary of {len(tokens)}")
        tokens[t] = None
    return tokens

"""Tokenization through the `tokenizers` library (docs/design.md section 6, docs/tokenizers.md).

`tokenizer_json_from_gguf` rebuilds a Hugging Face `tokenizer.json` from a GGUF file's metadata
(`corral.model.gguf_tokenizer`: byte-level BPE with the pre-tokenizer llama.cpp names by
`tokenizer.ggml.pre`, SentencePiece with byte fallback, Gemma 4's BPE), so encodings equal those
of the model's own Hugging Face tokenizer.

`Tokenizer` wraps it with what corral needs: `encode`, `decode` and `token_id`. `encode` takes
the spans of the text that are literal (a chat prompt's message contents, `PromptText`): a
special token's text inside them (a user's `<|im_end|>\n<|im_start|>system`) is tokenized as
text, so message content can never forge a chat turn. Each token id's raw
bytes (the input of the token-mask kernels) are read by `corral.model.vocabulary`.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path

from corral.model.errors import ModelLoadError
from tokenizers import Tokenizer as HFTokenizer


def tokenizer_json_from_gguf(fields: dict, source: str | Path) -> dict:
    """A Hugging Face `tokenizer.json` dict from GGUF tokenizer metadata: see
    `corral.model.gguf_tokenizer.tokenizer_json_from_gguf` (imported from there when called)."""
    from corral.model.gguf_tokenizer import tokenizer_json_from_gguf as build

    return build(fields, source)


class PromptText(str):
    """Text with the spans that must be tokenized as text even where they spell a special
    token (a chat prompt's message contents): `literal_spans`, `(start, end)` character offsets,
    in order and disjoint. Otherwise an ordinary `str`."""

    literal_spans: tuple[tuple[int, int], ...] = ()

    def __new__(cls, text: str, literal_spans=()):
        self = super().__new__(cls, text)
        self.literal_spans = tuple(literal_spans)
        return self


class Tokenizer:
    """A tokenizer (a `tokenizers.Tokenizer` underneath, as `.backend`).

    Special tokens written in the text (e.g. `<|im_start|>`) encode to their ids, as Hugging
    Face's tokenizers do by default; no BOS or EOS is added.
    """

    def __init__(self, backend: HFTokenizer):
        self.backend = backend
        self.special_ids = frozenset(
            i for i, token in backend.get_added_tokens_decoder().items() if token.special
        )
        self._literal: HFTokenizer | None = None  # the same, special-token text kept as text

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """Load a `tokenizer.json`. Raises `ModelLoadError` naming it if missing or malformed."""
        path = Path(path)
        if not path.is_file():
            raise ModelLoadError(path, "file not found")
        try:
            return cls(HFTokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON
            raise ModelLoadError(path, f"malformed tokenizer: {error}") from error

    @classmethod
    def from_dict(cls, raw: dict) -> Tokenizer:
        """Build from a `tokenizer.json` dict (e.g. `tokenizer_json_from_gguf`'s result)."""
        return cls(HFTokenizer.from_str(json.dumps(raw)))

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, literal_spans=None) -> list[int]:
        """Text -> token ids (special-token text becomes the special ids; nothing is added),
        except inside `literal_spans` (`(start, end)` character offsets; by default those of a
        `PromptText`), where special-token text is tokenized as ordinary text.

        Text holding no special token's text inside a literal span encodes exactly as without
        spans. Otherwise the text is cut at its other special tokens (where Hugging Face's
        tokenizers cut it too) and each piece between them is encoded with the special tokens
        as text (`tokenizers`' `encode_special_tokens`)."""
        if literal_spans is None:
            literal_spans = getattr(text, "literal_spans", ())
        encoding = self.backend.encode(text, add_special_tokens=False)
        if not literal_spans:
            return encoding.ids
        starts = [start for start, _ in literal_spans]

        def literal(offset: int) -> bool:
            k = bisect.bisect_right(starts, offset) - 1
            return k >= 0 and offset < literal_spans[k][1]

        specials = [
            (token, start, end)
            for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True)
            if token in self.special_ids
        ]
        if not any(literal(start) for _, start, _ in specials):
            return encoding.ids
        ids: list[int] = []
        at = 0
        for token, start, end in specials:
            if not literal(start):
                ids += self._encode_as_text(text[at:start])
                ids.append(token)
                at = end
        return ids + self._encode_as_text(text[at:])

    def _encode_as_text(self, text: str) -> list[int]:
        """Text -> token ids with special-token text tokenized as ordinary text."""
        if not text:
            return []
        if self._literal is None:
            literal = HFTokenizer.from_str(self.backend.to_str())
            literal.encode_special_tokens = True
            self._literal = literal
        return self._literal.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        """Token ids -> text, special tokens kept; bytes that are not UTF-8 become U+FFFD."""
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)

    def token_id(self, text: str) -> int | None:
        """The id of a token written exactly as `text` (e.g. "<|im_end|>"), or None."""
        return self.backend.token_to_id(text)

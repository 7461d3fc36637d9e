"""The vocabulary of a model as raw bytes (DESIGN.md section 4).

A `Vocabulary` maps every token id to the bytes the token stands for, or to None for a special
(control) token that never stands for text. It also names the EOS ids: one or more tokens that end
an answer; all of them are masked alike (allowed exactly in accepting states). Several ids with
the same bytes are all kept: each is an allowed token wherever its bytes are.

Constructors read the usual sources:
- `from_list`: a plain list of bytes / str / None.
- `from_tokenizer`: a `tokenizers.Tokenizer` or a `tokenizer.json` path. Byte-level BPE vocabularies
  (GPT-2, SmolLM2, Llama 3, Qwen) have the GPT-2 byte-to-unicode map undone; SentencePiece-style
  ones have `▁` turned back into a space and byte-fallback tokens `<0xNN>` turned into that byte.
  Special added tokens become None; non-special added tokens (written verbatim by the tokenizer,
  e.g. Qwen's `<tool_call>`) keep their UTF-8 text.
- `from_gguf`: the `tokenizer.ggml.*` metadata of a GGUF file (llama.cpp's token types: control,
  unknown and unused tokens become None, byte tokens `<0xNN>` that byte, user-defined tokens their
  UTF-8 text, normal tokens are decoded per `tokenizer.ggml.model`: `gpt2` byte-level, `llama`
  SentencePiece).

The byte trie that the mask kernels walk (`corral.kernels.trie`) is built once per vocabulary, on
first use, and cached on the object (`Vocabulary.trie`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from corral.kernels.errors import VocabularyError
from corral.kernels.trie import Trie, build_trie

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"

# llama.cpp's token types (gguf.TokenType).
_GGUF_NORMAL, _GGUF_UNKNOWN, _GGUF_CONTROL, _GGUF_USER, _GGUF_UNUSED, _GGUF_BYTE = 1, 2, 3, 4, 5, 6


def _gpt2_unicode_to_byte() -> dict[int, int]:
    """GPT-2's byte-to-unicode map, inverted: code point -> byte. The printable bytes of Latin-1
    stand for themselves; the 68 others were shifted to U+0100 and up."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    table, shifted = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = b
        else:
            table[256 + shifted] = b
            shifted += 1
    return table


_GPT2_TABLE = str.maketrans({code: chr(b) for code, b in _gpt2_unicode_to_byte().items()})


def gpt2_token_bytes(text: str) -> bytes:
    """The bytes of a byte-level BPE token written in GPT-2's byte-to-unicode alphabet. A
    character outside that alphabet (never in a trained byte-level vocabulary) keeps its UTF-8."""
    mapped = text.translate(_GPT2_TABLE)
    try:
        return mapped.encode("latin-1")
    except UnicodeEncodeError:
        return b"".join(
            ch.encode("latin-1") if ord(ch) < 256 else ch.encode("utf-8") for ch in mapped
        )


def sentencepiece_token_bytes(text: str) -> bytes:
    """The bytes of a SentencePiece token: `<0xNN>` is byte NN, `▁` is a space."""
    fallback = _BYTE_FALLBACK.fullmatch(text)
    if fallback:
        return bytes([int(fallback.group(1), 16)])
    return text.replace(_SPIECE_SPACE, " ").encode("utf-8")


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> raw bytes, plus the EOS ids (DESIGN.md section 4).

    Attributes:
        tokens: length V; `tokens[t]` is the bytes of token t, or None for a special token. An
            empty `b""` token is kept but never allowed by a mask.
        eos_ids: the ids that end an answer (possibly none). They are masked as EOS whatever
            their bytes: allowed exactly in accepting states, never walked as text.

    Raises:
        VocabularyError: an EOS id out of range, or a token that is not bytes or None.
    """

    tokens: tuple[bytes | None, ...]
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "eos_ids", tuple(sorted({int(e) for e in self.eos_ids})))
        for e in self.eos_ids:
            if not 0 <= e < len(self.tokens):
                raise VocabularyError(f"EOS id {e} is outside the vocabulary of {self.size}")
        if not all(t is None or isinstance(t, bytes) for t in self.tokens):
            raise VocabularyError("every token must be bytes or None")

    @property
    def size(self) -> int:
        """V, the number of token ids (the width of the logits)."""
        return len(self.tokens)

    @property
    def n_words(self) -> int:
        """`ceil(V / 32)`: the length of a packed uint32 mask."""
        return (self.size + 31) // 32

    def __len__(self) -> int:
        return self.size

    @cached_property
    def trie(self) -> Trie:
        """The byte trie of every text token (not EOS, not special, not empty); built on first
        use in O(total bytes + V log V), then shared by every grammar's index."""
        return build_trie(self.tokens, exclude=self.eos_ids)

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of a sequence of token ids; special tokens and EOS contribute nothing."""
        eos = set(self.eos_ids)
        return b"".join(self.tokens[t] or b"" for t in ids if t not in eos)

    # ----------------------------------------------------------------------------------------
    # Constructors

    @classmethod
    def from_list(
        cls, tokens: Sequence[bytes | str | None], eos_ids: Iterable[int] = ()
    ) -> Vocabulary:
        """From a list: bytes as they are, str as UTF-8, None for specials."""
        return cls(
            tuple(t.encode("utf-8") if isinstance(t, str) else t for t in tokens), tuple(eos_ids)
        )

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: object,
        eos_ids: Iterable[int] | None = None,
        size: int | None = None,
    ) -> Vocabulary:
        """From a `tokenizers.Tokenizer` or the path of a `tokenizer.json`.

        Args:
            tokenizer: a `tokenizers.Tokenizer`, or a path to `tokenizer.json`.
            eos_ids: the EOS ids. When None and a path is given, the `eos_token` of the
                `tokenizer_config.json` beside it is used.
            size: pad the vocabulary with None up to this many ids (a model whose embedding has
                more rows than the tokenizer has tokens).

        Raises:
            VocabularyError: no EOS could be found, or `size` is smaller than the tokenizer.
        """
        from tokenizers import Tokenizer

        path = None
        if not isinstance(tokenizer, Tokenizer):
            path = Path(tokenizer)
            tokenizer = Tokenizer.from_file(str(path))
        spec = json.loads(tokenizer.to_str())
        byte_level = _mentions_byte_level(spec.get("pre_tokenizer")) or _mentions_byte_level(
            spec.get("decoder")
        )
        decode = gpt2_token_bytes if byte_level else sentencepiece_token_bytes
        n = tokenizer.get_vocab_size(with_added_tokens=True)
        tokens: list[bytes | None] = [None] * max(n, size or 0)
        for text, t in tokenizer.get_vocab(with_added_tokens=False).items():
            tokens[t] = decode(text)
        for t, added in tokenizer.get_added_tokens_decoder().items():
            tokens[t] = None if added.special else added.content.encode("utf-8")
        if size is not None and size < n:
            raise VocabularyError(f"size {size} is smaller than the tokenizer's {n} tokens")
        if eos_ids is None:
            eos_ids = _eos_from_config(path, tokenizer)
        return cls(tuple(tokens), tuple(eos_ids))

    @classmethod
    def from_gguf(cls, gguf: object, size: int | None = None) -> Vocabulary:
        """From the tokenizer metadata of a GGUF file (a path or a `gguf.GGUFReader`).

        Reads `tokenizer.ggml.tokens`, `tokenizer.ggml.token_type`, `tokenizer.ggml.model` and
        `tokenizer.ggml.eos_token_id` (plus `tokenizer.ggml.eot_token_id` when present and
        different: both end an answer).

        Raises:
            VocabularyError: the metadata is missing or names an unknown tokenizer model.
        """
        from gguf import GGUFReader

        reader = gguf if isinstance(gguf, GGUFReader) else GGUFReader(str(gguf))
        fields = reader.fields
        try:
            texts = _strings(fields["tokenizer.ggml.tokens"])
            kinds = [int(k) for k in _values(fields["tokenizer.ggml.token_type"])]
            model = bytes(fields["tokenizer.ggml.model"].parts[-1]).decode("utf-8")
        except KeyError as missing:
            raise VocabularyError(f"GGUF metadata lacks {missing}") from None
        if model == "gpt2":
            decode = gpt2_token_bytes
        elif model == "llama":
            decode = sentencepiece_token_bytes
        else:
            raise VocabularyError(f"unsupported GGUF tokenizer model {model!r}")
        tokens: list[bytes | None] = [None] * max(len(texts), size or 0)
        for t, (raw, kind) in enumerate(zip(texts, kinds, strict=True)):
            text = raw.decode("utf-8", errors="replace")
            if kind == _GGUF_NORMAL:
                tokens[t] = decode(text)
            elif kind == _GGUF_BYTE:
                tokens[t] = sentencepiece_token_bytes(text)
            elif kind == _GGUF_USER:
                tokens[t] = raw
        eos = []
        for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
            if key in fields:
                eos.append(int(fields[key].parts[-1][0]))
        return cls(tuple(tokens), tuple(eos))


def _strings(field: object) -> list[bytes]:
    """The items of a GGUF array-of-strings field, as bytes."""
    return [bytes(field.parts[i]) for i in field.data]


def _values(field: object) -> list:
    """The items of a GGUF array-of-numbers field."""
    return [field.parts[i][0] for i in field.data]


def _mentions_byte_level(component: object) -> bool:
    """True when a tokenizer.json pre-tokenizer or decoder is (or contains) ByteLevel."""
    if isinstance(component, dict):
        if component.get("type") == "ByteLevel":
            return True
        return any(_mentions_byte_level(v) for v in component.values())
    if isinstance(component, list):
        return any(_mentions_byte_level(v) for v in component)
    return False


def _eos_from_config(path: Path | None, tokenizer: object) -> list[int]:
    """The EOS id named by `tokenizer_config.json` beside `path`."""
    config = path.with_name("tokenizer_config.json") if path is not None else None
    if config is None or not config.is_file():
        raise VocabularyError("pass eos_ids: no tokenizer_config.json names the EOS token")
    eos = json.loads(config.read_text(encoding="utf-8")).get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    t = tokenizer.token_to_id(eos) if isinstance(eos, str) else None
    if t is None:
        raise VocabularyError(f"EOS token {eos!r} of {config} is not in the vocabulary")
    return [t]

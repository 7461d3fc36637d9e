"""Readers of a tokenizer's token bytes: a `corral.kernels.Vocabulary` from a tokenizer.json or a
GGUF file's metadata (docs/design.md sections 4 and 6).

- Byte-level BPE vocabularies (GPT-2, SmolLM2, Llama 3, Qwen) write each byte as a printable
  character (GPT-2's byte-to-unicode table, `bytes_to_unicode`); `gpt2_token_bytes` undoes it.
- SentencePiece-style vocabularies write a space as `▁` and unknown bytes as `<0xNN>`;
  `sentencepiece_token_bytes` undoes them.
- llama.cpp's token types (`GGUF_*`) say which GGUF tokens are text: control, unknown and
  unused tokens become None, byte tokens `<0xNN>` that byte, user-defined tokens their UTF-8
  text, normal tokens are decoded per `tokenizer.ggml.model` (`gpt2` byte-level, `llama`
  SentencePiece).

A `tokenizers` special added token becomes None; a non-special added token (written verbatim by the
tokenizer, e.g. Qwen's `<tool_call>`) keeps its UTF-8 text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from corral.kernels import Vocabulary, VocabularyError
from tokenizers import Tokenizer as HFTokenizer

# llama.cpp's token types (gguf.TokenType).
GGUF_NORMAL, GGUF_UNKNOWN, GGUF_CONTROL, GGUF_USER_DEFINED, GGUF_UNUSED, GGUF_BYTE = range(1, 7)

_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPIECE_SPACE = "\u2581"


@cache
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters: the printable
    bytes of Latin-1 stand for themselves, the 68 others are shifted to U+0100 and up."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\u00a1"), ord("\u00ac") + 1),
        *range(ord("\u00ae"), ord("\u00ff") + 1),
    ]
    chars, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + shifted)
            shifted += 1
    return chars


@cache
def _gpt2_table() -> dict[int, str]:
    """`str.translate` table: GPT-2 character -> the Latin-1 character of its byte."""
    return {ord(char): chr(byte) for byte, char in bytes_to_unicode().items()}


def gpt2_token_bytes(text: str) -> bytes:
    """The bytes of a byte-level BPE token written in GPT-2's byte-to-unicode alphabet. A
    character outside that alphabet (never in a trained byte-level vocabulary) keeps its UTF-8."""
    mapped = text.translate(_gpt2_table())
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


def _fit(tokens: list[bytes | None], size: int | None) -> list[bytes | None]:
    """`tokens` padded with None, or cut, to `size` ids (unchanged when None)."""
    if size is None:
        return tokens
    return tokens[:size] + [None] * (size - len(tokens))


def vocabulary_from_tokenizer(
    tokenizer: object, eos_ids: Iterable[int] | None = None, size: int | None = None
) -> Vocabulary:
    """A `Vocabulary` from a `tokenizers.Tokenizer` or the path of a `tokenizer.json`.

    Args:
        tokenizer: a `tokenizers.Tokenizer`, or a path to `tokenizer.json`.
        eos_ids: the EOS ids. When None and a path is given, the `eos_token` of the
            `tokenizer_config.json` beside it is used.
        size: the model's number of token ids (the width of its logits): the vocabulary is
            padded with None up to it, and ids past it (which the model never produces) dropped.

    Raises:
        VocabularyError: no EOS could be found.
    """
    path = None
    if not isinstance(tokenizer, HFTokenizer):
        path = Path(tokenizer)
        tokenizer = HFTokenizer.from_file(str(path))
    spec = json.loads(tokenizer.to_str())
    byte_level = _mentions_byte_level(spec.get("pre_tokenizer")) or _mentions_byte_level(
        spec.get("decoder")
    )
    decode = gpt2_token_bytes if byte_level else sentencepiece_token_bytes
    tokens: list[bytes | None] = [None] * tokenizer.get_vocab_size(with_added_tokens=True)
    for text, t in tokenizer.get_vocab(with_added_tokens=False).items():
        tokens[t] = decode(text)
    for t, added in tokenizer.get_added_tokens_decoder().items():
        tokens[t] = None if added.special else added.content.encode("utf-8")
    if eos_ids is None:
        eos_ids = _eos_from_config(path, tokenizer)
    return Vocabulary(tuple(_fit(tokens, size)), tuple(eos_ids))


def vocabulary_from_gguf(gguf: object, size: int | None = None) -> Vocabulary:
    """A `Vocabulary` from the tokenizer metadata of a GGUF file (a path or a `gguf.GGUFReader`).

    Reads `tokenizer.ggml.tokens`, `tokenizer.ggml.token_type`, `tokenizer.ggml.model` and
    `tokenizer.ggml.eos_token_id` (plus `tokenizer.ggml.eot_token_id` when present and
    different: both end an answer). A path is read by `corral.model.gguf_metadata` (seconds on a
    262k-token vocabulary, where `GGUFReader` takes minutes). `size` as in
    `vocabulary_from_tokenizer`.

    Raises:
        VocabularyError: the metadata is missing or names an unknown tokenizer model.
    """
    from gguf import GGUFReader  # deferred, as in corral.model.weights: a heavy import

    if isinstance(gguf, GGUFReader):
        fields = {}
        for key, field in gguf.fields.items():
            if key.startswith("tokenizer.ggml."):
                fields[key] = field.contents()
    else:
        from corral.model.gguf_metadata import read_gguf_metadata

        fields = read_gguf_metadata(gguf, prefixes=("tokenizer.ggml.",))
    return vocabulary_from_fields(fields, size)


def vocabulary_from_fields(fields: dict, size: int | None = None) -> Vocabulary:
    """A `Vocabulary` from GGUF tokenizer metadata, key -> Python value (as
    `vocabulary_from_gguf` describes). Per `tokenizer.ggml.token_type`: a normal token is decoded
    per `tokenizer.ggml.model` (`gpt2`: GPT-2's byte alphabet; `llama`, `gemma4`: SentencePiece,
    `▁` a space), a byte token `<0xNN>` is that byte, a user-defined token its UTF-8 text, a
    control, unknown or unused token None.

    Raises:
        VocabularyError: a field is missing, token types and tokens differ in length, or the
            tokenizer model is unknown.
    """
    try:
        texts = fields["tokenizer.ggml.tokens"]
        kinds = fields["tokenizer.ggml.token_type"]
        model = fields["tokenizer.ggml.model"]
    except KeyError as missing:
        raise VocabularyError(f"GGUF metadata lacks {missing}") from None
    if len(kinds) != len(texts):
        raise VocabularyError("tokenizer.ggml.token_type and .tokens differ in length")
    if model == "gpt2":
        decode = gpt2_token_bytes
    elif model in ("llama", "gemma4"):
        decode = sentencepiece_token_bytes
    else:
        raise VocabularyError(f"unsupported GGUF tokenizer model {model!r}")
    tokens: list[bytes | None] = [None] * len(texts)
    for t, (text, kind) in enumerate(zip(texts, kinds, strict=True)):
        if kind == GGUF_NORMAL:
            tokens[t] = decode(text)
        elif kind == GGUF_BYTE:
            tokens[t] = sentencepiece_token_bytes(text)
        elif kind == GGUF_USER_DEFINED:
            tokens[t] = text.encode("utf-8")
    eos = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        if key in fields:
            eos.append(int(fields[key]))
    return Vocabulary(tuple(_fit(tokens, size)), tuple(eos))


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

"""A model's tokenizer, token bytes and chat template from a GGUF file's metadata
(docs/tokenizers.md).

`load_gguf_tokenizer(path)` reads the `tokenizer.*` keys (`read_gguf_metadata`) and returns a
`GGUFTokenizer`: the `Tokenizer` (a `tokenizers.Tokenizer` rebuilt by
`tokenizer_json_from_gguf`), the `Vocabulary` the mask kernels read, the chat template and the
special tokens the template is given. The three tokenizer families of llama.cpp in use:

- `gpt2`: byte-level BPE over GPT-2's byte alphabet, with `tokenizer.ggml.merges`; the text is
  split first by the regex llama.cpp names by `tokenizer.ggml.pre` (`PRE_TOKENIZERS`; an unknown
  name is refused, naming it).
- `llama`: SentencePiece (Llama 2, Mistral 7B, Phi-3, Gemma 2/3) with byte fallback: a space is
  `▁`, prefixed to the text unless `tokenizer.ggml.add_space_prefix` is false, and a character
  missing from the vocabulary is spelled by its `<0xNN>` byte pieces. The merges are derived
  from the pieces' `tokenizer.ggml.scores` as transformers' `LlamaConverter` derives them: every
  split of a piece into two pieces, ranked by the score of the whole.
- `gemma4`: BPE over SentencePiece's alphabet (`▁`, `<0xNN>` byte fallback), with its merges.

Control tokens become special added tokens (their text in a prompt encodes to their id, outside
literal spans), user-defined tokens non-special added tokens; any other `tokenizer.ggml.model`
(`bert`, `t5`, `rwkv`, ...) is refused naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corral.kernels import Vocabulary
from corral.model.errors import ModelLoadError
from corral.model.gguf_metadata import read_gguf_metadata
from corral.model.tokenizer import Tokenizer
from corral.model.vocabulary import (
    GGUF_CONTROL,
    GGUF_NORMAL,
    GGUF_UNKNOWN,
    GGUF_USER_DEFINED,
    vocabulary_from_fields,
)

_SPACE = "\u2581"

# Hugging Face's pre-tokenizer regexes (those of the models' tokenizer.json files).
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_level(use_regex: bool) -> dict:
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": True,
        "use_regex": use_regex,
    }


def _split(regex: str) -> list[dict]:
    """Split by `regex` (matches kept as pieces), then bytes to GPT-2's alphabet."""
    split = {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}
    return [split, _byte_level(False)]


_GPT2 = (None, [_byte_level(True)], False)
_DIGITS_GPT2 = (None, [{"type": "Digits", "individual_digits": True}, _byte_level(True)], False)
_LLAMA3 = (None, _split(_LLAMA3_REGEX), True)
_QWEN2 = ({"type": "NFC"}, _split(_QWEN2_REGEX), False)

PRE_TOKENIZERS: dict[str, tuple[dict | None, list[dict], bool]] = {
    "default": _GPT2,
    "gpt2": _GPT2,
    "gpt-2": _GPT2,
    "smollm": _DIGITS_GPT2,
    "starcoder": _DIGITS_GPT2,
    "refact": _DIGITS_GPT2,
    "llama-bpe": _LLAMA3,
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "dbrx": _LLAMA3,
    "smaug-bpe": _LLAMA3,
    "qwen2": _QWEN2,
}
"""llama.cpp's `tokenizer.ggml.pre` name of a byte-level BPE -> (normalizer, pre-tokenizers,
ignore_merges) of the Hugging Face tokenizer it stands for (Llama 3 takes a word found whole in
the vocabulary without merging it; Qwen2 normalizes to NFC)."""


def tokenizer_json_from_gguf(fields: dict, source: str | Path) -> dict:
    """Build a Hugging Face `tokenizer.json` dict from GGUF metadata.

    Args:
        fields: GGUF key -> Python value (`tokenizer.ggml.model`: str, `.tokens`: list[str],
            `.token_type`: list[int], `.merges`: list[str] of "left right", `.scores`:
            list[float], `.pre`: str, `.add_space_prefix`: bool, `.unknown_token_id`: int).
        source: the GGUF file, named in errors.

    Raises:
        ModelLoadError: naming `source`, when the tokenizer model or the pre-tokenizer is one
            corral does not know (naming it), or a field it needs is missing or of the wrong
            length.
    """
    kind = fields.get("tokenizer.ggml.model")
    tokens = fields.get("tokenizer.ggml.tokens")
    if not tokens:
        raise ModelLoadError(source, "tokenizer.ggml.tokens is missing")
    types = fields.get("tokenizer.ggml.token_type") or [GGUF_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise ModelLoadError(source, "tokenizer.ggml.token_type and .tokens differ in length")
    unknown = fields.get("tokenizer.ggml.unknown_token_id")
    unk_token = tokens[unknown] if unknown is not None and 0 <= unknown < len(tokens) else None
    if kind == "gpt2":
        pre = fields.get("tokenizer.ggml.pre", "default")
        if pre not in PRE_TOKENIZERS:
            known = ", ".join(sorted(PRE_TOKENIZERS))
            raise ModelLoadError(
                source, f"pre-tokenizer (tokenizer.ggml.pre) {pre!r} is not supported: {known}"
            )
        normalizer, pre_tokenizers, ignore_merges = PRE_TOKENIZERS[pre]
        pre_tokenizer = {"type": "Sequence", "pretokenizers": pre_tokenizers}
        merges = _listed_merges(fields, source)
        decoder = _byte_level(True)
        bpe = {"byte_fallback": False, "fuse_unk": False, "unk_token": None}
    elif kind in ("llama", "gemma4"):
        if kind == "llama":
            scores = fields.get("tokenizer.ggml.scores")
            if scores is None or len(scores) != len(tokens):
                raise ModelLoadError(source, "tokenizer.ggml.scores is missing or of wrong length")
            merges = sentencepiece_merges(tokens, types, scores)
        else:
            merges = _listed_merges(fields, source)
        prefix = bool(fields.get("tokenizer.ggml.add_space_prefix", kind == "llama"))
        replace = {"type": "Replace", "pattern": {"String": " "}, "content": _SPACE}
        prepend = [{"type": "Prepend", "prepend": _SPACE}] if prefix else []
        normalizer = {"type": "Sequence", "normalizers": [*prepend, replace]}
        pre_tokenizer, ignore_merges = None, False
        strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if prefix else []
        decoder = {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": _SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                *strip,
            ],
        }
        bpe = {"byte_fallback": True, "fuse_unk": True, "unk_token": unk_token}
    else:
        raise ModelLoadError(
            source,
            f"tokenizer model (tokenizer.ggml.model) {kind!r} is not supported: "
            "gpt2 (byte-level BPE), llama (SentencePiece) and gemma4",
        )

    def added(index: int, kind_: int) -> dict:
        special = kind_ == GGUF_CONTROL or index == unknown
        return {
            "id": index,
            "content": tokens[index],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            added(index, kind_)
            for index, kind_ in enumerate(types)
            if kind_ in (GGUF_CONTROL, GGUF_USER_DEFINED)
            or (kind_ == GGUF_UNKNOWN and index == unknown)
        ],
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": decoder,
        "model": {
            "type": "BPE",
            "dropout": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "ignore_merges": ignore_merges,
            **bpe,
            "vocab": {token: index for index, token in enumerate(tokens)},
            "merges": merges,
        },
    }


def _listed_merges(fields: dict, source: str | Path) -> list[list[str]]:
    """`tokenizer.ggml.merges` ("left right" strings) as [left, right] pairs."""
    merges = fields.get("tokenizer.ggml.merges")
    if merges is None:
        raise ModelLoadError(source, "tokenizer.ggml.merges is missing")
    pairs = [merge.split(" ", 1) for merge in merges]
    for pair in pairs:
        if len(pair) != 2:
            raise ModelLoadError(source, f"merge {' '.join(pair)!r} is not 'left right'")
    return pairs


def sentencepiece_merges(
    tokens: list[str], types: list[int], scores: list[float]
) -> list[list[str]]:
    """BPE merges equivalent to a SentencePiece vocabulary's scores (transformers'
    `SentencePieceExtractor`): for each normal piece, each split into two pieces of the vocabulary
    is a merge; merges are ranked by the score of the whole piece, higher first (ties: by the
    whole piece's id, then the left and right pieces' ids).

    Complexity: O(sum of the pieces' lengths squared) string slices and look-ups."""
    ids = {token: index for index, token in enumerate(tokens)}
    merges = []
    for index, (piece, kind) in enumerate(zip(tokens, types, strict=True)):
        if kind != GGUF_NORMAL:
            continue
        for cut in range(1, len(piece)):
            left, right = ids.get(piece[:cut]), ids.get(piece[cut:])
            if left is not None and right is not None:
                merges.append((-scores[index], index, left, right))
    merges.sort()
    return [[tokens[left], tokens[right]] for _, _, left, right in merges]


@dataclass(frozen=True)
class GGUFTokenizer:
    """What a GGUF file's metadata says about its tokenizer.

    Attributes:
        tokenizer: encodes and decodes text (`Tokenizer`).
        vocabulary: token id -> raw bytes (None for control, unknown and unused tokens) and the
            EOS ids (`tokenizer.ggml.eos_token_id`, and `.eot_token_id` when present).
        chat_template: `tokenizer.chat_template`, or None.
        special_tokens: the chat template's `bos_token`, `eos_token`, `unk_token`, `pad_token`
            (those the metadata names).
        add_bos_token: whether the model expects a BOS id before a prompt
            (`tokenizer.ggml.add_bos_token`; llama.cpp's default for the tokenizer model when
            absent: true for `llama` and `gemma4`, false for `gpt2`).
    """

    tokenizer: Tokenizer
    vocabulary: Vocabulary
    chat_template: str | None
    special_tokens: dict[str, str] = field(default_factory=dict)
    add_bos_token: bool = False


def load_gguf_tokenizer(path: str | Path, size: int | None = None) -> GGUFTokenizer:
    """The tokenizer, vocabulary and chat template of a GGUF file (weights need not be present:
    llama.cpp's vocabulary-only files load too).

    Args:
        path: the GGUF file.
        size: the model's number of token ids (its logits' width): the vocabulary is padded
            with None, or cut, to it. None keeps the metadata's token count.

    Raises:
        ModelLoadError: naming the file, when it is not GGUF, lacks a tokenizer field, or holds
            a tokenizer model or pre-tokenizer corral does not support (naming it).
    """
    fields = read_gguf_metadata(path, prefixes=("tokenizer.",))
    try:
        tokenizer = Tokenizer.from_dict(tokenizer_json_from_gguf(fields, path))
    except ModelLoadError:
        raise
    except Exception as error:  # tokenizers raises a bare Exception (e.g. a merge of no token)
        raise ModelLoadError(path, f"malformed tokenizer metadata: {error}") from error
    try:
        vocabulary = vocabulary_from_fields(fields, size)
    except Exception as error:  # VocabularyError: a missing or inconsistent field
        raise ModelLoadError(path, str(error)) from error
    tokens = fields["tokenizer.ggml.tokens"]
    special_tokens = {}
    for name in ("bos", "eos", "unknown", "padding"):
        index = fields.get(f"tokenizer.ggml.{name}_token_id")
        if index is not None and 0 <= index < len(tokens):
            special_tokens[f"{name[:3]}_token"] = tokens[index]
    add_bos = fields.get("tokenizer.ggml.add_bos_token", fields["tokenizer.ggml.model"] != "gpt2")
    return GGUFTokenizer(
        tokenizer, vocabulary, fields.get("tokenizer.chat_template"), special_tokens, bool(add_bos)
    )

"""A lower bound on a prompt's token count from its text alone, so that a prompt far past the
model's context is refused before it is tokenized, in time and memory linear in its bytes
(docs/design.md section 7: a bad line gets its own error line).

The bound: a token stands for at most `max_token_bytes` bytes of text, and every byte of the
text is covered by some token except those with no token of their own, which a byte-level BPE
drops (`unspelled`: SmolLM2's vocabulary has no token for 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d).
So a text of B other bytes has at least ceil(B / max_token_bytes) tokens. A prompt under the
bound is checked exactly once tokenized (`corral.model.generate.Generator.submit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.model.generation_request import sequence_limit
from corral.tools.errors import ToolError


@dataclass(frozen=True)
class PromptBound:
    """What the bound needs of a model's tokenizer.

    Attributes:
        max_token_bytes: the most bytes of text one token stands for (an upper bound), or None
            when none is known (then nothing is refused early).
        unspelled: the byte values with no single-byte token (dropped by the tokenizer).
    """

    max_token_bytes: int | None
    unspelled: bytes

    @classmethod
    def of(cls, model) -> PromptBound:
        """The bound of `model` (`model.tokenizer`, `model.vocabulary`).

        A `corral.model.Tokenizer` over a byte-level BPE (its `backend`, without a normalizer,
        which could shorten the text): the longest entry of its vocabulary, added tokens
        included, in UTF-8 bytes (a byte-level entry spells each byte as one character of 1 or
        2 UTF-8 bytes, so this bounds the bytes it stands for). With a normalizer, None. A
        tokenizer without a `backend` (a stand-in whose tokens are the vocabulary's bytes): the
        longest token of `model.vocabulary`."""
        tokens = model.vocabulary.tokens
        single = set(tokens)
        unspelled = bytes(b for b in range(256) if bytes([b]) not in single)
        backend = getattr(model.tokenizer, "backend", None)
        if backend is None:
            longest = max((len(t) for t in tokens if t), default=None)
        elif backend.normalizer is not None:
            longest = None
        else:
            entries = backend.get_vocab(with_added_tokens=True)
            longest = max((len(entry.encode("utf-8")) for entry in entries), default=None)
        return cls(longest, unspelled)

    def at_least(self, text: str) -> int:
        """The fewest tokens `text` can have (0 when no bound is known). O(len(text))."""
        if self.max_token_bytes is None:
            return 0
        data = text.encode("utf-8", errors="surrogatepass").translate(None, self.unspelled)
        return -(-len(data) // self.max_token_bytes)

    def check(self, text: str, context_length: int, max_len: int | None = None) -> None:
        """Refuse a prompt `text` whose fewest tokens fill a sequence: the model's
        `context_length`, or an engine's smaller `max_len` (the limit it enforces).

        Raises ToolError: 400 `context_length_exceeded` (param `messages`) naming the limit
        (`sequence_limit`) and the figures."""
        at_least = self.at_least(text)
        limit, named = sequence_limit(context_length, max_len)
        if at_least >= limit:
            message = f"{named}; the prompt has at least {at_least} tokens ({len(text)} characters)"
            raise ToolError(400, "messages", "context_length_exceeded", message)

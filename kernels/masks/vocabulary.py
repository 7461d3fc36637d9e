"""The vocabulary of a model as raw bytes (docs/design.md section 4).

A `Vocabulary` maps every token id to the bytes the token stands for, or to None for a special
(control) token that never stands for text. It also names the EOS ids: one or more tokens that end
an answer; all of them are masked alike (allowed exactly in accepting states). Several ids with
the same bytes are all kept: each is an allowed token wherever its bytes are.

It is built once per model (`corral.model.Model.vocabulary`; the readers of tokenizer files live
in `corral.model.vocabulary`) and shared by every grammar's `TokenIndex`. The byte trie that the
mask kernels walk (`corral.kernels.masks.trie`) is built on first use and cached on the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from corral.kernels.errors import VocabularyError
from corral.kernels.masks.trie import Trie, build_trie


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> raw bytes, plus the EOS ids (docs/design.md section 4).

    Attributes:
        tokens: length V; `tokens[t]` is the bytes of token t, or None for a special token. An
            empty `b""` token is kept but never allowed by a mask.
        eos_ids: the ids that end an answer (possibly none), sorted. They are masked as EOS
            whatever their bytes: allowed exactly in accepting states, never walked as text.

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

    @classmethod
    def from_list(
        cls, tokens: Sequence[bytes | str | None], eos_ids: Iterable[int] = ()
    ) -> Vocabulary:
        """From a list: bytes as they are, str as UTF-8, None for specials."""
        return cls(
            tuple(t.encode("utf-8") if isinstance(t, str) else t for t in tokens), tuple(eos_ids)
        )

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

    @cached_property
    def _id_of_bytes(self) -> dict[bytes, int]:
        """Bytes -> the lowest id of a text token (not EOS, not special, not empty) with them."""
        eos = set(self.eos_ids)
        ids: dict[bytes, int] = {}
        for t, data in enumerate(self.tokens):
            if data and t not in eos:
                ids.setdefault(data, t)
        return ids

    @cached_property
    def single_byte_tokens(self) -> np.ndarray:
        """bool `[256]`: True for each byte b that some text token spells alone (`bytes([b])`):
        the bytes `spell` can always write, one token each."""
        ids = self._id_of_bytes
        return np.array([bytes([b]) in ids for b in range(256)], dtype=np.bool_)

    def spell(self, piece: bytes) -> list[int]:
        """Text token ids whose bytes concatenate to `piece` (non-empty): the one token holding
        all of it if there is one, else one token per byte (the lowest id for given bytes).
        O(len(piece)) after a first O(V) call.

        Raises:
            VocabularyError: a byte of `piece` has no single-byte token.
        """
        ids = self._id_of_bytes
        if piece in ids:
            return [ids[piece]]
        try:
            return [ids[bytes([b])] for b in piece]
        except KeyError:
            raise VocabularyError(f"the vocabulary cannot spell {piece!r}") from None

"""The vocabulary of a model as raw bytes (docs/design.md section 4).

A `Vocabulary` maps every token id to the bytes the token stands for, or to None for a special
(control) token that never stands for text. It also names the EOS ids: one or more tokens that end
an answer; all of them are masked alike (allowed exactly in accepting states). Several ids with
the same bytes are all kept: each is an allowed token wherever its bytes are.

Special tokens chosen by `Vocabulary.with_special_symbols` are spelled by their symbols instead
(`corral.automata.special`: byte 0xFF then the id, bytes UTF-8 text never holds), so a DFA that
reads a symbol allows its token there and nowhere else (docs/special-tokens.md).

It is built once per model (`corral.model.Model.vocabulary`; the readers of tokenizer files live
in `corral.model.vocabulary`) and shared by every grammar's `TokenIndex`. The byte trie that the
mask kernels walk (`corral.kernels.masks.trie`) is built on first use and cached on the object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from corral.automata.special import SYMBOL_MARKER, special_symbol, split_symbols
from corral.kernels.errors import VocabularyError
from corral.kernels.masks.trie import DECODES_UTF8, N_CATEGORIES, TokenGroups, Trie, build_trie

START_ROWS_LIMIT = 1024
"""The most start rows (`Vocabulary.run_row`) a vocabulary keeps: 32 MiB at 262k tokens."""


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """Token id -> raw bytes, plus the EOS ids (docs/design.md section 4).

    Attributes:
        tokens: length V; `tokens[t]` is the bytes of token t, or None for a special token. An
            empty `b""` token is kept but never allowed by a mask.
        eos_ids: the ids that end an answer (possibly none), sorted. They are masked as EOS
            whatever their bytes: allowed exactly in accepting states, never walked as text.
        special_texts: special token id -> its text (e.g. `b"[TOOL_CALLS]"`), for the special
            tokens spelled by their symbols (`with_special_symbols`); empty by default. When
            not empty, `tokens[t]` is `special_symbol(t)` for each of them and no other token
            holds byte 0xFF.

    Raises:
        VocabularyError: an EOS id out of range, a token that is not bytes or None, or a
            `special_texts` entry that breaks the rule above (naming the id).
    """

    tokens: tuple[bytes | None, ...]
    eos_ids: tuple[int, ...] = ()
    special_texts: Mapping[int, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens", tuple(self.tokens))
        object.__setattr__(self, "eos_ids", tuple(sorted({int(e) for e in self.eos_ids})))
        for e in self.eos_ids:
            if not 0 <= e < len(self.tokens):
                raise VocabularyError(f"EOS id {e} is outside the vocabulary of {self.size}")
        if not all(t is None or isinstance(t, bytes) for t in self.tokens):
            raise VocabularyError("every token must be bytes or None")
        object.__setattr__(self, "special_texts", dict(self.special_texts))
        if self.special_texts:
            self._check_symbols()

    def _check_symbols(self) -> None:
        """O(total bytes): the symbol rule of `special_texts` (class docstring)."""
        for t, text in self.special_texts.items():
            if not 0 <= t < self.size or t in self.eos_ids:
                raise VocabularyError(f"special token {t} is not a non-EOS id of the vocabulary")
            if not isinstance(text, bytes):
                raise VocabularyError(f"the text of special token {t} must be bytes")
            if self.tokens[t] != special_symbol(t):
                raise VocabularyError(f"special token {t} must be spelled by its symbol")
        marker = bytes([SYMBOL_MARKER])
        for t, data in enumerate(self.tokens):
            if data and marker in data and t not in self.special_texts:
                raise VocabularyError(f"text token {t} holds byte 0xFF, which marks a symbol")

    def with_special_symbols(self, specials: Mapping[int, str | bytes]) -> Vocabulary:
        """This vocabulary with the given special tokens spelled by their symbols, so that a
        DFA can require them (docs/special-tokens.md). O(total bytes), once per model.

        Args:
            specials: special token id -> its text (str as UTF-8), e.g.
                `{128010: "<|python_tag|>"}`; each id must be a special token here (None) and
                not EOS. Ids that already have a symbol may be given again.

        Returns:
            A new `Vocabulary`: the given ids spelled by `special_symbol(id)` (their masks,
            steps, `decode` and `spell` read those bytes), every text token holding byte 0xFF
            (a byte-fallback or byte-level token of invalid UTF-8, never text) made None, so
            no sequence of text tokens spells a symbol; other tokens and EOS as they were.

        Raises:
            VocabularyError: an id out of range, an EOS id, a token that is not special, or a
                text that is not str or bytes, naming the id.
            ValueError: an id above `MAX_SYMBOL_ID` (`special_symbol`).
        """
        texts = dict(self.special_texts)
        for t, text in specials.items():
            t = int(t)
            if not 0 <= t < self.size:
                raise VocabularyError(f"special token {t} is outside the vocabulary of {self.size}")
            if t in self.eos_ids:
                raise VocabularyError(f"special token {t} is an EOS id; EOS keeps its own rule")
            if self.tokens[t] is not None and t not in self.special_texts:
                raise VocabularyError(
                    f"token {t} is a text token ({self.tokens[t]!r}), not special"
                )
            if not isinstance(text, str | bytes):
                raise VocabularyError(f"the text of special token {t} is not str or bytes")
            texts[t] = text.encode("utf-8") if isinstance(text, str) else text
        marker = bytes([SYMBOL_MARKER])
        tokens = [None if data and marker in data else data for data in self.tokens]
        for t in texts:
            tokens[t] = special_symbol(t)
        return Vocabulary(tuple(tokens), self.eos_ids, texts)

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

    def loop_row(self, loops: int, decodes_utf8: bool = False) -> np.ndarray:
        """The packed mask (uint32 `[ceil(V / 32)]`, read-only, shared) of the text tokens all of
        whose bytes fall in the byte categories `loops` (bits past the 13 categories ignored):
        what a DFA state that loops to itself on those categories allows without leaving
        itself; with `decodes_utf8` (a state that also reads every UTF-8 character back to
        itself) also the tokens mixing those bytes with whole or partial valid UTF-8
        characters. The mask walks start from it (`corral.kernels.masks.index`). `run_row`
        with no bound on the length."""
        own = loops & ((1 << N_CATEGORIES) - 1) | (DECODES_UTF8 if decodes_utf8 else 0)
        return self.run_row(own, self.trie.max_depth)

    def run_row(self, own: int, length: int) -> np.ndarray:
        """The packed mask (uint32 `[ceil(V / 32)]`, read-only, shared) of the text tokens of at
        most `length` bytes all of which fall in the byte categories `own`
        (`TokenGroups.start_row`; with `DECODES_UTF8` in `own`, of at most `length` characters
        mixing those bytes with valid UTF-8): what a DFA state allows whose next `length` steps
        on those categories each go to one live state whatever the byte (a length-bounded
        string's counter). `length` >= the longest token gives `loop_row(own)`. Made from the
        vocabulary's token groups (built on the first call, O(trie nodes + groups * V / 32))
        in O(groups * V / 32 + tokens set) on the first call per (`own`, `length`), then kept
        (at most `START_ROWS_LIMIT` rows; emptied when full).

        Raises:
            ValueError: `length` is negative.
        """
        if length < 0:
            raise ValueError(f"length must be >= 0, not {length}")
        key = (own, min(length, self.trie.max_depth))
        rows = self._start_rows
        row = rows.get(key)
        if row is None:
            row = self._token_groups.start_row(own, length)
            row.setflags(write=False)
            if len(rows) >= START_ROWS_LIMIT:
                rows.clear()
            row = rows.setdefault(key, row)
        return row

    @cached_property
    def _token_groups(self) -> TokenGroups:
        """The text tokens by categories and UTF-8 validity (`Trie.token_groups`)."""
        return self.trie.token_groups(self.n_words)

    @cached_property
    def _start_rows(self) -> dict[tuple[int, int], np.ndarray]:
        """`run_row`'s rows by (own, length)."""
        return {}

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of a sequence of token ids; special tokens and EOS contribute nothing, but
        a special token with a symbol contributes its symbol (`text_of_symbols` reads it back)."""
        eos = set(self.eos_ids)
        return b"".join(self.tokens[t] or b"" for t in ids if t not in eos)

    def text_of_symbols(self, data: bytes) -> bytes:
        """`data` (generated bytes) with each special-token symbol replaced by the token's text
        (`special_texts`): `b"\\xff0000007{...}"` -> `b"[TOOL_CALLS]{...}"`. O(len(data)).

        Raises:
            VocabularyError: a symbol of a token without a symbol here, or a 0xFF byte that
                does not start a whole symbol, naming it.
        """
        try:
            pieces = split_symbols(data)
        except ValueError as error:
            raise VocabularyError(str(error)) from None
        out = []
        for piece in pieces:
            if isinstance(piece, int):
                if piece not in self.special_texts:
                    raise VocabularyError(f"token {piece} has no symbol in this vocabulary")
                piece = self.special_texts[piece]
            out.append(piece)
        return b"".join(out)

    @cached_property
    def _id_of_bytes(self) -> dict[bytes, int]:
        """Bytes -> the lowest id of a token spelled by them (not EOS, not None, not empty: a
        text token, or a special token by its symbol)."""
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
        """Token ids whose bytes concatenate to `piece` (non-empty): the one token holding all
        of it if there is one, else one token per byte (the lowest id for given bytes); each
        special-token symbol in `piece` is its special token, the text around it spelled as
        above. O(len(piece)) after a first O(V) call.

        Raises:
            VocabularyError: a byte of `piece` has no single-byte token, or a symbol no token.
        """
        ids = self._id_of_bytes
        if piece in ids:
            return [ids[piece]]
        if self.special_texts and SYMBOL_MARKER in piece:
            try:
                pieces = split_symbols(piece)
            except ValueError as error:
                raise VocabularyError(str(error)) from None
            out: list[int] = []
            for part in pieces:
                if isinstance(part, int) and part not in self.special_texts:
                    raise VocabularyError(f"token {part} has no symbol in this vocabulary")
                out.extend([part] if isinstance(part, int) else self.spell(part))
            return out
        try:
            return [ids[bytes([b])] for b in piece]
        except KeyError:
            raise VocabularyError(f"the vocabulary cannot spell {piece!r}") from None

"""Constraints for the rows of token ids an outside engine generates (transformers' `generate`,
llama-cpp-python): `RowConstraints`, the framework-free core of `corral.integrations`' logits
processors (docs/design.md section 4; why each rule: docs/integrations.md)."""

from __future__ import annotations

import json
import numbers
from collections.abc import Sequence

import numpy as np
from corral import automata
from corral.kernels import Constraint, TokenIndex, Vocabulary, VocabularyError

Key = tuple[int, tuple[int, ...]]
"""(grammar number, generated ids) of a row."""


def _kind(value) -> str:
    """A value named for an error message: its type and its repr cut to 40 characters."""
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def check_max_new_tokens(max_new_tokens) -> int | None:
    """`max_new_tokens` as an int: None, or an integer (Python's or NumPy's, not a bool) of at
    least 1. Raises TypeError (another type) or ValueError (below 1), naming `max_new_tokens`."""
    if max_new_tokens is None:
        return None
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral):
        raise TypeError(f"max_new_tokens must be an integer or None, not {_kind(max_new_tokens)}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, not {max_new_tokens}")
    return int(max_new_tokens)


def check_vocabulary(vocabulary) -> Vocabulary | None:
    """`vocabulary` when it is None or a `corral.kernels.Vocabulary`. Raises TypeError naming
    `vocabulary`."""
    if vocabulary is not None and not isinstance(vocabulary, Vocabulary):
        raise TypeError(
            f"vocabulary must be a corral.kernels.Vocabulary or None, not {_kind(vocabulary)}"
        )
    return vocabulary


def check_grammars(regex, schema, many: bool = False) -> list[tuple[str | None, object]]:
    """The grammars a processor is asked for, as `(regex, schema)` pairs (one None in each),
    checked before any is compiled: exactly one of `regex` (a str) and `schema` (a dict or a
    bool, or its JSON text as a str, parsed here); with `many`, either may be a non-empty list or
    tuple of such, one per batch item. Raises ValueError (neither or both given, an empty list,
    a schema's text that is not JSON, naming its line and column) or TypeError (a value of
    another type, naming the parameter and the item)."""
    if (regex is None) == (schema is None):
        raise ValueError("give exactly one of regex and schema")
    name, value = ("regex", regex) if regex is not None else ("schema", schema)
    kinds = (str,) if name == "regex" else (dict, bool, str)
    what = "a str" if name == "regex" else "a dict, a bool or its JSON text (a str)"
    if isinstance(value, kinds):
        items = [value]
    elif many and isinstance(value, list | tuple):
        if not value:
            raise ValueError(f"{name} is an empty {type(value).__name__}: give one per batch item")
        for i, item in enumerate(value):
            if not isinstance(item, kinds):
                raise TypeError(f"{name}[{i}] must be {what}, not {_kind(item)}")
        items = list(value)
    else:
        lists = ", or a list of them, one per batch item" if many else ""
        raise TypeError(f"{name} must be {what}{lists}, not {_kind(value)}")
    if name == "regex":
        return [(item, None) for item in items]
    listed = not isinstance(value, kinds)  # a list or tuple, one per batch item
    return [
        (None, _parsed(item, f"schema[{i}]" if listed else "schema"))
        for i, item in enumerate(items)
    ]


def _parsed(schema, name: str):
    """A schema given as JSON text parsed (any other value as it is). Raises ValueError naming
    `name` and json's position when the text is not JSON (or nests past Python's recursion
    limit)."""
    if not isinstance(schema, str):
        return schema
    try:
        return json.loads(schema)
    except RecursionError:
        raise ValueError(f"{name} is JSON text nested too deeply to read") from None
    except ValueError as error:  # json.JSONDecodeError, an integer of too many digits
        raise ValueError(f"{name} is not JSON text: {error}") from None


def grammar_index(
    vocabulary: Vocabulary, regex: str | None = None, schema: dict | str | None = None
) -> TokenIndex:
    """The token index of a regex (docs/design.md section 2) or a JSON Schema (section 3; a dict or
    its JSON text) over `vocabulary`; exactly one of `regex` and `schema` is given.

    Raises:
        ValueError: neither or both are given.
        TypeError: a vocabulary, regex or schema of another type (`check_grammars`).
        corral.automata.ConstrainError: the regex or schema is outside corral's subset, or its
            automaton passes a size limit (the error names the position or keyword).
    """
    if vocabulary is None:
        raise TypeError("vocabulary must be a corral.kernels.Vocabulary, not None")
    check_vocabulary(vocabulary)
    ((regex, schema),) = check_grammars(regex, schema)
    return checked_index(vocabulary, regex, schema)


def checked_index(vocabulary: Vocabulary, regex: str | None, schema) -> TokenIndex:
    """`grammar_index` of a pair `check_grammars` returned (its schema already read from its
    text: any JSON value, which the compiler refuses unless it is an object or a bool)."""
    dfa = automata.regex_to_dfa(regex) if regex is not None else automata.schema_to_dfa(schema)
    return TokenIndex(dfa, vocabulary)


def unpack_rows(masks: np.ndarray, width: int) -> np.ndarray:
    """Packed masks uint32 `[rows, ceil(V / 32)]` -> bool `[rows, width]`: token t is allowed
    when its bit is set; ids from V to `width` (logits past the tokenizer's vocabulary, which
    models pad to a round size) never are. O(rows * width), vectorized."""
    bits = np.unpackbits(
        np.ascontiguousarray(masks, dtype="<u4").view(np.uint8), axis=-1, bitorder="little"
    ).view(np.bool_)
    out = np.zeros((masks.shape[0], width), dtype=np.bool_)
    n = min(width, bits.shape[-1])
    out[:, :n] = bits[:, :n]
    return out


class RowConstraints:
    """The allowed tokens of each row of a batch at each step.

    - A row's state is found from its generated ids alone, keyed by them (a row's ids are its
      parent's plus one token), so rows may be reordered or copied between steps (beam search);
      a key not seen at the previous step is replayed from the start state.
    - The first call fixes the prompt length (those ids are not constrained); a call whose rows
      are not one token longer than the previous call's starts a new generation.
    - EOS (any of the vocabulary's EOS ids) is allowed exactly in accepting states. A finished
      row (EOS taken, or a complete answer with no text token left) allows only EOS; tokens an
      engine appends to a finished row (padding) are ignored.
    - With `max_new_tokens`, only tokens after which a complete answer and then EOS still fit in
      the tokens left are allowed, and on the last token only EOS once the answer is complete:
      an answer needing n text tokens ends with EOS whenever `max_new_tokens >= n + 1`.

    Args:
        indexes: one `TokenIndex` for every row, or one per batch item: with B indexes, the
            rows (B times the beams or returned sequences per item, contiguous, as
            transformers expands them) split into B equal groups, group i under index i. All
            share one vocabulary, which must name at least one EOS id.
        max_new_tokens: the generation's token budget, EOS included (the host engine's
            `max_new_tokens` / `max_tokens`), or None for none.

    Raises:
        ValueError: no index, or indexes over different vocabularies, or max_new_tokens < 1.
        TypeError: max_new_tokens is neither None nor an integer (`check_max_new_tokens`).
        VocabularyError: the vocabulary names no EOS id (a finished answer could not stop).
    """

    def __init__(self, indexes: Sequence[TokenIndex], max_new_tokens: int | None = None):
        self.indexes = tuple(indexes)
        if not self.indexes:
            raise ValueError("give at least one token index")
        self.vocabulary = self.indexes[0].vocabulary
        if any(index.vocabulary is not self.vocabulary for index in self.indexes):
            raise ValueError("every token index must be over the same vocabulary")
        if not self.vocabulary.eos_ids:
            raise VocabularyError("the vocabulary names no EOS id: an answer could not end")
        self.max_new_tokens = check_max_new_tokens(max_new_tokens)
        self._eos_mask = np.zeros(self.vocabulary.n_words, dtype=np.uint32)
        for e in self.vocabulary.eos_ids:
            self._eos_mask[e >> 5] |= np.uint32(1) << np.uint32(e & 31)
        self._prompt_length = 0
        self._last_length = -1
        self._states: dict[Key, Constraint] = {}

    def masks(self, input_ids: np.ndarray) -> np.ndarray:
        """The packed masks uint32 `[rows, ceil(V / 32)]` of the next token of each row.

        Args:
            input_ids: integer `[rows, length]`: each row's prompt and generated ids so far.

        Raises:
            ValueError: the rows do not split into one group per index.
            TokenNotAllowedError: a generated token the grammar refuses (another processor or
                the engine forced a token outside the mask).
        """
        input_ids = np.asarray(input_ids)
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be [rows, length], not shape {input_ids.shape}")
        rows, length = input_ids.shape
        if rows % len(self.indexes):
            raise ValueError(f"{rows} rows do not split into {len(self.indexes)} batch items")
        if length != self._last_length + 1:  # a new generation
            self._prompt_length, self._states = length, {}
        self._last_length = length
        per_item = rows // len(self.indexes)
        states: dict[Key, Constraint] = {}
        out = np.empty((rows, self.vocabulary.n_words), dtype=np.uint32)
        for r in range(rows):
            key = (r // per_item, tuple(int(t) for t in input_ids[r, self._prompt_length :]))
            constraint = self._constraint(key)
            states[key] = constraint
            out[r] = self._mask(constraint, len(key[1]))
        self._states = states
        return out

    def allowed(self, input_ids: np.ndarray, width: int) -> np.ndarray:
        """`masks(input_ids)` unpacked to bool `[rows, width]` (`width` the logits' width)."""
        if width < self.vocabulary.size:
            raise ValueError(
                f"{width} logits are fewer than the tokenizer's {self.vocabulary.size} tokens"
            )
        return unpack_rows(self.masks(input_ids), width)

    def _mask(self, constraint: Constraint, generated: int) -> np.ndarray:
        """The packed mask of a row's next token after `generated` tokens (module docstring):
        the text tokens left are the budget's but one, kept for EOS. O(1) but for the first
        budget mask of a (state, budget) pair (`Constraint.mask`)."""
        if constraint.done:
            return self._eos_mask
        if self.max_new_tokens is None:
            return constraint.mask()
        text_left = self.max_new_tokens - generated - 1  # this token included
        if text_left < 1 and constraint.is_complete():
            return self._eos_mask  # the last token: EOS ends the answer whole
        # text_left < 1: the budget was below the shortest answer and EOS; the answer is cut
        return constraint.mask(max(1, text_left))

    def _constraint(self, key: Key) -> Constraint:
        """The constraint after a row's generated ids: its parent's, advanced by one token, or
        replayed from the start. O(1) amortized per row and step (plus hashing the key)."""
        item, ids = key
        parent = self._states.get((item, ids[:-1])) if ids else None
        if parent is not None:
            start, constraint = len(ids) - 1, parent.copy()
        else:
            start, constraint = 0, Constraint(self.indexes[item])
        for token in ids[start:]:
            if constraint.done:
                break  # padding after the end of the answer
            constraint.advance(token)
        return constraint

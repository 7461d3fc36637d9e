"""The tokens of forced text, for jump-forward decoding (SGLang's "compressed FSM", the
jump-forward of XGrammar and llguidance): `ForcedTokenizer` says which tokens the engine writes for
the bytes a constraint forces (`Constraint.forced_bytes`), the model's own tokenizer's, minus the
tail whose tokens the bytes that follow could still change. Which tokens are final, and why:
docs/engine.md ("Jump-forward: which forced tokens are final").
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable

from corral.automata.special import SYMBOL_LENGTH, SYMBOL_MARKER
from corral.kernels import Constraint, TokenIndex, Vocabulary

CACHE_SIZE = 4096
"""How many forced texts a `ForcedTokenizer` remembers (the same keys recur in every answer)."""
STATE_CACHE_SIZE = 4096
"""How many states of one index a `ForcedTokenizer` remembers the jump of (`jump`); past it the
index's entries are dropped and rebuilt as they are met again."""


class ForcedTokenizer:
    """Forced bytes -> the token ids to commit for them (docs/engine.md).

    Args:
        tokenizer: the model's tokenizer: a `corral.model.Tokenizer` (its `backend`, a
            `tokenizers.Tokenizer`, gives the pre-tokens) or anything with `encode(text)`.
        vocabulary: the model's `Vocabulary`, whose token bytes the committed ids must spell.
    """

    def __init__(self, tokenizer, vocabulary: Vocabulary):
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary
        backend = getattr(tokenizer, "backend", None)
        self._backend = backend
        added = backend.get_added_tokens_decoder().values() if backend is not None else ()
        self._added = tuple(token.content for token in added if token.content)
        self._cached = functools.lru_cache(maxsize=CACHE_SIZE)(self._tokens)
        # per index, per state: (the committed ids, the (state, done) after each prefix of them)
        self._jumps: weakref.WeakKeyDictionary[
            TokenIndex, dict[int, tuple[tuple[int, ...], tuple[tuple[int, bool], ...]]]
        ] = weakref.WeakKeyDictionary()

    def tokens(self, forced: bytes, follow: bytes | None = None) -> tuple[int, ...]:
        """The token ids to commit for `forced` (the bytes a constraint forces next): the
        tokenizer's own tokens of a prefix of it whose boundaries no following byte can change,
        possibly none. Their bytes concatenate to a prefix of `forced`. `follow`: the bytes
        that may come right after `forced` (b"": none, the answer ends), or None (any); see
        docs/engine.md for when it lets the last pre-token be committed. O(len(forced)) tokenizer
        work plus one pre-tokenizer call per byte of `follow`, cached per instance
        (`CACHE_SIZE` texts)."""
        key = None if follow is None else bytes(sorted(set(follow)))
        return self._cached(bytes(forced), key)

    def jump(
        self,
        constraint: Constraint,
        tokens_left: int,
        budget_aware: bool = True,
        fits: Callable[[Constraint, list[int]], bool] | None = None,
    ) -> tuple[list[int], Constraint]:
        """The tokens to write now from `constraint` (those of its `forced_bytes`, see `tokens`)
        and the constraint after them (a new one; `constraint` itself when there are none). At
        most `tokens_left` tokens; when `budget_aware`, only as many as leave a complete answer
        within the tokens left after them (`Constraint.completes_within`, the engine's budget
        rule). The tokens of a state and the states after each prefix of them depend on the
        index and the state only: they are computed at a state's first jump (O(forced bytes),
        plus O(256) for the bytes allowed after them) and remembered per index and state
        (`STATE_CACHE_SIZE`), so a later jump from the same state, in any answer, costs
        O(tokens) for the budget.

        `fits(after, passed)`, when given, must also hold for the tokens to be written: `after`
        the constraint after them, `passed` the states each was written from (a thinking
        budget, `corral.kernels.masks.budget.ThoughtBudget`, counts those inside the block)."""
        if tokens_left <= 0 or constraint.done:
            return [], constraint
        ids, afters = self._jump_of(constraint)
        for count in range(min(len(ids), tokens_left), 0, -1):
            state, done = afters[count - 1]
            after = Constraint(constraint.index, state, done)
            if budget_aware and not after.completes_within(tokens_left - count):
                continue
            passed = [constraint.state] + [s for s, _ in afters[: count - 1]]
            if fits is None or fits(after, passed):
                return list(ids[:count]), after
        return [], constraint

    def _jump_of(self, constraint: Constraint):
        """(the ids `tokens` commits for `constraint`'s forced bytes, the (state, done) of the
        constraint after each prefix of them), remembered per index and state."""
        states = self._jumps.setdefault(constraint.index, {})
        known = states.get(constraint.state)
        if known is not None:
            return known
        forced = constraint.forced_bytes()
        ids: tuple[int, ...] = ()
        afters: list[tuple[int, bool]] = []
        if forced:
            end = constraint.copy()
            end.advance_bytes(forced)
            ids = self.tokens(forced, end.next_bytes())
            after = constraint.copy()
            for token in ids:  # inside forced text no state accepts: none is done before the end
                after.advance_bytes(self.vocabulary.tokens[token])
                afters.append((after.state, after.done))
        if len(states) >= STATE_CACHE_SIZE:
            states.clear()
        states[constraint.state] = (ids, tuple(afters))
        return states[constraint.state]

    def _tokens(self, forced: bytes, follow: bytes | None) -> tuple[int, ...]:
        at = forced.find(SYMBOL_MARKER) if self.vocabulary.special_texts else -1
        if at < 0:
            return self._text_tokens(forced, follow)
        ids = self._text_before_special(forced[:at]) if at else ()
        digits = forced[at + 1 : at + SYMBOL_LENGTH]
        whole = len(digits) == SYMBOL_LENGTH - 1 and digits.isdigit()
        if len(self.vocabulary.decode(ids)) < at or not whole:
            return ids  # the text before is left open, or a symbol cut short (several possible)
        if int(digits) not in self.vocabulary.special_texts:
            return ids
        return (*ids, int(digits), *self._tokens(forced[at + SYMBOL_LENGTH :], follow))

    def _text_before_special(self, head: bytes) -> tuple[int, ...]:
        """The tokens of `head`, text right before a special token: the tokenizer's tokens of
        the whole of it when they are text tokens spelling it exactly, else `_text_tokens`'."""
        text = _complete_characters(head)
        if text and len(text.encode("utf-8")) == len(head):
            if self._backend is not None:
                ids = self._backend.encode(text, add_special_tokens=False).ids
            else:
                ids = list(self.tokenizer.encode(text))
            pieces = [self.vocabulary.tokens[t] for t in ids]
            if all(pieces) and b"".join(pieces) == head:
                return tuple(int(t) for t in ids)
        return self._text_tokens(head, b"")

    def _text_tokens(self, forced: bytes, follow: bytes | None) -> tuple[int, ...]:
        text = _complete_characters(forced)
        if not text:
            return ()
        cut = self._open_added(text)
        whole = cut == len(text) and len(text.encode("utf-8")) == len(forced)
        text = text[:cut]
        if self._backend is None:
            ids = list(self.tokenizer.encode(text))[:-1]
        elif whole and follow is not None and self._ends_pre_token(text, follow):
            ids = self._backend.encode(text, add_special_tokens=False).ids
        else:
            ids = self._before_last_pre_token(text)
        if not ids:
            return ()
        spelled = [self.vocabulary.tokens[t] for t in ids]
        if any(not piece for piece in spelled) or not forced.startswith(b"".join(spelled)):
            return ()  # a special token, or bytes the vocabulary spells differently
        return tuple(int(t) for t in ids)

    def _before_last_pre_token(self, text: str) -> list[int]:
        """The ids of `text`'s tokens that lie before its last pre-token (an added token counts
        as a pre-token of its own)."""
        encoding = self._backend.encode(text, add_special_tokens=False)
        words = encoding.word_ids
        if not words:
            return []
        last = words[-1]
        cut = len(words) - 1
        if last is not None:
            while cut > 0 and words[cut - 1] == last:
                cut -= 1
        return encoding.ids[:cut]

    def _ends_pre_token(self, text: str, follow: bytes) -> bool:
        """True when no byte of `follow` can extend `text`'s last pre-token: each is ASCII and
        the pre-tokenizer keeps `text`'s pre-tokens and starts a new one after them."""
        pre = self._backend.pre_tokenizer
        if self._backend.normalizer is not None or text[-1].isspace():
            return False
        if pre is None or any(b >= 0x80 for b in follow):
            return False
        spans = [span for _, span in pre.pre_tokenize_str(text)]
        for b in follow:
            after = [span for _, span in pre.pre_tokenize_str(text + chr(b))]
            if after[:-1] != spans or after[-1][0] != len(text):
                return False
        return True

    def _open_added(self, text: str) -> int:
        """Where the longest suffix of `text` that is a proper prefix of an added token starts
        (len(text) when there is none)."""
        cut = len(text)
        for content in self._added:
            for length in range(min(len(content) - 1, len(text)), 0, -1):
                if text.endswith(content[:length]):
                    cut = min(cut, len(text) - length)
                    break
        return cut


def _complete_characters(data: bytes) -> str:
    """`data` decoded as UTF-8 without an incomplete character at its end; "" when it does not
    start on a character boundary (the text before it ended inside a character)."""
    for cut in range(len(data), max(len(data) - 4, -1), -1):
        try:
            return data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""

"""A stand-in for `corral.model.Model` in the batch and command-line tests: a byte-level
vocabulary (256 byte tokens, then EOS), a chat template that joins the messages, and logits that
are a pure function of each sequence's tokens, so runs are fast and repeatable. It can be told to
raise KeyboardInterrupt after some decode steps (Ctrl-C in the middle of a run)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
from corral.kernels import Vocabulary

EOS = 256
VOCABULARY = Vocabulary(tuple(bytes([b]) for b in range(256)) + (None,), (EOS,))


class _Tokenizer:
    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class _Cache:
    def __init__(self, n_slots: int, max_len: int):
        self.n_slots, self.max_len = n_slots, max_len
        self.history: list[list[int]] = [[] for _ in range(n_slots)]

    def reset(self, slot: int) -> None:
        self.history[slot] = []

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        assert 0 <= length <= len(self.history[source])
        self.history[target] = self.history[source][:length]


class StandInModel:
    """What `Completions` and `Generator` use of a model: `vocabulary`, `tokenizer.encode`,
    `render_chat`, `config.max_position_embeddings`, `new_cache`, `prefill_batch`, `decode`.

    Args:
        context: the context length (`config.max_position_embeddings`).
        interrupt_after: raise KeyboardInterrupt at this decode step (None: never).
        eos_bias: added to EOS's logit, so free text ends after a few tokens.
    """

    vocabulary = VOCABULARY
    tokenizer = _Tokenizer()

    def __init__(self, context: int = 4096, interrupt_after: int | None = None, eos_bias=2.0):
        # a tiny cache shape (8 bytes a token): the engine's memory check never matters here
        self.config = SimpleNamespace(
            max_position_embeddings=context,
            num_hidden_layers=1,
            num_key_value_heads=1,
            head_dim=1,
        )
        self.context_length = context
        self.interrupt_after = interrupt_after
        self.eos_bias = eos_bias
        self.steps = 0
        self.chat_template = "stand-in"  # render_chat below is its template
        self.caches: list[_Cache] = []

    def render_chat(self, messages, add_generation_prompt: bool = True, **extra) -> str:
        return "".join(f"<{m['role']}>{m.get('content') or ''}\n" for m in messages) + "<a>"

    def new_cache(self, n_slots: int, max_len: int) -> _Cache:
        self.caches.append(_Cache(n_slots, max_len))
        return self.caches[-1]

    def _logits(self, history: list[int]) -> np.ndarray:
        digest = hashlib.sha256(np.asarray(history, np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        logits = rng.normal(0, 1, len(VOCABULARY.tokens)).astype(np.float32)
        logits[EOS] += self.eos_bias
        return logits

    def prefill_batch(self, cache: _Cache, slots, sequences, last=None) -> np.ndarray:
        """As `Model.prefill_batch`: with `last`, each sequence's logits after each of its last
        k tokens."""
        rows = []
        last = [1] * len(slots) if last is None else last
        for slot, ids, k in zip(slots, sequences, last, strict=True):
            cache.history[slot] += [int(t) for t in ids]  # appended, as a prompt or a chunk
            history = cache.history[slot]
            assert len(history) <= cache.max_len and 1 <= k <= len(ids)
            rows += [self._logits(history[: len(history) - k + 1 + j]) for j in range(k)]
        return np.stack(rows)

    def decode(self, cache: _Cache, slots, tokens) -> np.ndarray:
        self.steps += 1
        if self.interrupt_after is not None and self.steps > self.interrupt_after:
            raise KeyboardInterrupt
        rows = []
        for slot, token in zip(slots, tokens, strict=True):
            cache.history[slot].append(int(token))
            assert len(cache.history[slot]) <= cache.max_len
            rows.append(self._logits(cache.history[slot]))
        return np.stack(rows)

"""A stand-in for `corral.model.Model` for the generation engine's tests: its logits depend only
on each sequence's own tokens (a hash of them), so batching, budgets, triggers, seeds, logprobs
and limits can be checked fast and exactly. The real model runs in tests/tools/test_batch.py."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
from corral.automata import regex_to_dfa, schema_to_dfa
from corral.kernels import TokenIndex, Vocabulary

# A byte-level vocabulary: every single byte, some multi-byte pieces, a special and EOS.
PIECES = [bytes([b]) for b in range(256)] + [
    b'{"', b'":', b'",', b'"}', b"city", b"Paris", b"true", b"false", b"null", b"12", b"<tool",
    b"_call>", b'>{"', b"</tool_call>", b"name", b"arguments", b"  ", b"\xc3\xa9t\xc3\xa9",
]  # fmt: skip
EOS = len(PIECES)
TOKENS = [*PIECES, None, None]  # EOS, then a special token
VOCABULARY = Vocabulary(tuple(TOKENS), (EOS,))

# SmolLM2-135M's cache shape (30 layers, 3 KV heads of 64): 46,080 bytes a cached token.
SMOLLM2_CACHE = SimpleNamespace(num_hidden_layers=30, num_key_value_heads=3, head_dim=64)
# A tiny cache shape (8 bytes a token), so memory checks never matter unless a test wants them.
TINY_CACHE = SimpleNamespace(num_hidden_layers=1, num_key_value_heads=1, head_dim=1)


class FakeCache:
    """Records each slot's tokens; allocates nothing."""

    def __init__(self, n_slots: int, max_len: int):
        self.n_slots, self.max_len = n_slots, max_len
        self.history: list[list[int]] = [[] for _ in range(n_slots)]

    def reset(self, slot: int) -> None:
        self.history[slot] = []

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        assert 0 <= length <= len(self.history[source])
        self.history[target] = self.history[source][:length]


class FakeModel:
    """Logits are a pure function of the sequence so far (prompt and generated tokens), plus
    `bias`. `caches` records the (n_slots, max_len) of every cache asked for."""

    vocabulary = VOCABULARY

    def __init__(
        self,
        bias: dict[int, float] | None = None,
        context_length: int = 4096,
        config=TINY_CACHE,
    ):
        self.bias = bias or {}
        self.context_length = context_length
        self.config = config
        self.decode_batches: list[int] = []
        self.caches: list[tuple[int, int]] = []

    def new_cache(self, n_slots, max_len):
        self.caches.append((n_slots, max_len))
        return FakeCache(n_slots, max_len)

    def _logits(self, history) -> np.ndarray:
        digest = hashlib.sha256(np.asarray(history, np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        logits = rng.normal(0, 3, len(TOKENS)).astype(np.float32)
        for token, value in self.bias.items():
            logits[token] += value
        return logits

    def prefill_batch(self, cache, slots, sequences):
        rows = []
        for slot, ids in zip(slots, sequences, strict=True):
            assert len(ids) >= 1 and len(cache.history[slot]) + len(ids) <= cache.max_len
            assert all(0 <= t < len(TOKENS) for t in ids)
            cache.history[slot] += [int(t) for t in ids]  # appended, as a prompt or a chunk
            rows.append(self._logits(cache.history[slot]))
        return np.stack(rows)

    def decode(self, cache, slots, tokens):
        assert list(slots) == sorted(slots) and len(set(slots)) == len(slots)
        self.decode_batches.append(len(slots))
        rows = []
        for slot, token in zip(slots, tokens, strict=True):
            cache.history[slot].append(int(token))
            assert len(cache.history[slot]) <= cache.max_len
            rows.append(self._logits(cache.history[slot]))
        return np.stack(rows)


class ScriptedModel(FakeModel):
    """Writes `script` (token ids) first, whatever the constraint, then random logits."""

    def __init__(self, prompt_len: int, script: list[int]):
        super().__init__()
        self.prompt_len, self.script = prompt_len, script

    def _logits(self, history):
        step = len(history) - self.prompt_len
        if step < len(self.script):
            logits = np.zeros(len(TOKENS), np.float32)
            logits[self.script[step]] = 100.0
            return logits
        return super()._logits(history)


def tokens(*pieces: bytes) -> list[int]:
    """The token ids of `pieces` (each one token of PIECES)."""
    return [PIECES.index(p) for p in pieces]


def index_of(schema=None, pattern=None) -> TokenIndex:
    """The token index of a schema or a pattern over the fake vocabulary."""
    dfa = schema_to_dfa(schema) if schema is not None else regex_to_dfa(pattern)
    return TokenIndex(dfa, VOCABULARY)


class TargetModel:
    """A model that wants to write given texts: request k's prompt is `[k]`, and its logits favour
    (by 100) the longest text token that continues `targets[k]` from the text written so far,
    then EOS. With any vocabulary and tokenizer (for jump-forward: the texts a grammar allows
    must stay writable, whatever the engine commits for forced bytes)."""

    def __init__(self, vocabulary: Vocabulary, tokenizer, targets: list[bytes], eos: int):
        self.vocabulary, self.tokenizer = vocabulary, tokenizer
        self.targets, self.eos = targets, eos
        self.context_length, self.config = 4096, TINY_CACHE
        self._ids = {piece: t for t, piece in enumerate(vocabulary.tokens) if piece}
        self._longest = max(len(piece) for piece in self._ids)
        self.decode_passes = self.prefill_passes = 0
        self.prefilled: list[list[int]] = []  # the sequences of every prefill pass

    def new_cache(self, n_slots, max_len):
        return FakeCache(n_slots, max_len)

    def _logits(self, history) -> np.ndarray:
        written = self.vocabulary.decode(history[1:])
        target = self.targets[history[0]]
        logits = np.zeros(self.vocabulary.size, np.float32)
        if not target.startswith(written):
            return logits  # the engine wrote something else: no preference
        rest = target[len(written) :]
        for n in range(min(len(rest), self._longest), 0, -1):
            if rest[:n] in self._ids:
                logits[self._ids[rest[:n]]] = 100.0
                return logits
        logits[self.eos] = 100.0
        return logits

    def prefill_batch(self, cache, slots, sequences):
        self.prefill_passes += 1
        for slot, ids in zip(slots, sequences, strict=True):
            self.prefilled.append([int(t) for t in ids])
            cache.history[slot] += [int(t) for t in ids]
        return np.stack([self._logits(cache.history[slot]) for slot in slots])

    def decode(self, cache, slots, tokens):
        self.decode_passes += 1
        for slot, token in zip(slots, tokens, strict=True):
            cache.history[slot].append(int(token))
        return np.stack([self._logits(cache.history[slot]) for slot in slots])

"""The KV cache: the keys and values of every layer for a fixed number of sequence slots
(DESIGN.md section 6).

One array per side, `[L, S, Hkv, T, hd]` (layers, slots, key/value heads, positions, head width):
one slot's keys for one layer are a contiguous `[Hkv, T, hd]` block, which `llama.attention`
reads in place. `lengths[slot]` counts the tokens a slot holds; the forward pass (`Model.prefill`,
`Model.decode`) writes keys and values and advances it, and this class only does the
bookkeeping between requests: reset, truncate, copy a prefix.
"""

from __future__ import annotations

import numpy as np
from corral.model.config import LlamaConfig
from corral.model.errors import CacheError


class KVCache:
    """Keys and values of up to `n_slots` sequences of up to `max_len` tokens each.

    Attributes:
        keys, values: float32 [L, n_slots, Hkv, max_len, hd]. Allocated with np.zeros, so pages
            are only committed as they are written: 46 KB per cached token for SmolLM2-135M.
        lengths: int64 [n_slots], tokens cached per slot (the next token's position).

    Raises:
        CacheError: n_slots or max_len below 1.
    """

    def __init__(self, config: LlamaConfig, n_slots: int, max_len: int):
        if n_slots < 1 or max_len < 1:
            raise CacheError(
                f"a KV cache needs n_slots >= 1 and max_len >= 1, got {n_slots}, {max_len}"
            )
        shape = (
            config.num_hidden_layers,
            n_slots,
            config.num_key_value_heads,
            max_len,
            config.head_dim,
        )
        self.keys = np.zeros(shape, np.float32)
        self.values = np.zeros(shape, np.float32)
        self.lengths = np.zeros(n_slots, np.int64)

    @property
    def n_slots(self) -> int:
        """S, the number of sequence slots."""
        return self.lengths.shape[0]

    @property
    def max_len(self) -> int:
        """T, the most tokens a slot can hold."""
        return self.keys.shape[3]

    def reset(self, slot: int | None = None) -> None:
        """Empty one slot (or all of them). Nothing is cleared: the length goes to 0.

        Raises:
            CacheError: the slot does not exist.
        """
        if slot is None:
            self.lengths[:] = 0
        else:
            self.lengths[self.check_slot(slot)] = 0

    def truncate(self, slot: int, length: int) -> None:
        """Forget a slot's tokens from position `length` on (e.g. to roll back forced tokens).

        Raises:
            CacheError: the slot does not exist, or holds fewer than `length` tokens.
        """
        slot = self.check_slot(slot)
        if not 0 <= length <= self.lengths[slot]:
            raise CacheError(f"slot {slot} holds {self.lengths[slot]} tokens, cannot keep {length}")
        self.lengths[slot] = length

    def copy_slot(self, source: int, target: int) -> None:
        """Make slot `target` hold a copy of slot `source`'s sequence (a shared prompt prefix).

        Raises:
            CacheError: either slot does not exist.
        """
        source, target = self.check_slot(source), self.check_slot(target)
        length = int(self.lengths[source])
        self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
        self.values[:, target, :, :length] = self.values[:, source, :, :length]
        self.lengths[target] = length

    def check_slot(self, slot) -> int:
        """`slot` as an int, checked to lie within 0..n_slots-1.

        Raises:
            CacheError: the slot does not exist.
        """
        slot = int(slot)
        if not 0 <= slot < self.n_slots:
            raise CacheError(f"slot {slot} does not exist (the cache has {self.n_slots} slots)")
        return slot

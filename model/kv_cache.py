"""The KV cache: the keys and values of every layer for a fixed number of sequence slots
(docs/design.md section 6).

One array per side, `[L, S, Hkv, T, hd]` (layers, slots, key/value heads, positions, head width):
one slot's keys for one layer are a contiguous `[Hkv, T, hd]` block, which the attention kernel
(`kernels.attention.ragged_attention`) streams in place. `lengths[slot]` counts the tokens a
slot holds; the forward pass (`Model.prefill`, `Model.decode`) writes keys and values and
advances it, and this class only does the bookkeeping between requests: reset, truncate, copy a
prefix.

The keys and values are float32 or float16 (a model's `ComputePlan.kv_dtype`; float16, as
llama.cpp's default cache, where the model runs on AMX): float16 takes half the memory of
float32 and half the bytes that decode attention streams. The kernels widen them to float32 in
registers and compute in float32, so a float16 cache computes what float32 arithmetic over the
rounded keys and values computes; tests/model/test_float16_cache.py holds it to the float32
cache's greedy tokens and log-likelihood (the bar of issue 15 for storing anything in fewer
bits). `KVCache(..., dtype=np.float32)` keeps them in float32, the reference path that
tests/model/test_reference.py compares with transformers at 1e-3.

Memory: a cache takes `KVCache.bytes_needed(config, n_slots, max_len, dtype)` bytes (23 KB a token
for SmolLM2-135M in float16, 46 KB in float32, so 189 MB or 377 MB a slot of its
8,192-token context). Before the engine allocates one it asks
`slots_that_fit` how many slots fit in `MEMORY_SHARE` (half) of the memory available now
(`available_memory`: /proc/meminfo's MemAvailable, else `os.sysconf`); the other half is left to
the activations, the token indexes and the rest of the machine. The pages are zeros until written,
so the check is conservative: it holds even when every slot fills to `max_len`. An allocation that
fails anyway is a `CacheError`, never a bare `MemoryError`.
"""

from __future__ import annotations

import os

import numpy as np
from corral.kernels.compute.attention import float16_supported
from corral.model.config import LlamaConfig
from corral.model.errors import CacheError

DTYPES = (np.dtype(np.float32), np.dtype(np.float16))
"""The dtypes a KV cache may hold."""

DEFAULT_DTYPE = np.float32
"""The dtype of a KV cache when none is given (`KVCache`, `bytes_needed`); a model's caches take
its plan's `kv_dtype` (`Model.new_cache`; docs/numerics.md, "The KV cache")."""


class KVCache:
    """Keys and values of up to `n_slots` sequences of up to `max_len` tokens each.

    Attributes:
        keys, values: `dtype` [L, n_slots, Hkv, max_len, hd]. Allocated with np.zeros, so pages
            are only committed as they are written: 23 KB per cached token for SmolLM2-135M in
            float16, 46 KB in float32.
        lengths: int64 [n_slots], tokens cached per slot (the next token's position).

    Args:
        dtype: np.float32 (the default, `DEFAULT_DTYPE`) or np.float16, the keys' and values'
            storage.

    Raises:
        CacheError: n_slots or max_len below 1.
        ValueError: dtype is neither float32 nor float16, or float16 where the kernels cannot
            take it (`kernels.attention.float16_supported`).
    """

    def __init__(self, config: LlamaConfig, n_slots: int, max_len: int, dtype=DEFAULT_DTYPE):
        if np.dtype(dtype) not in DTYPES:
            raise ValueError(f"a KV cache holds float32 or float16, not {np.dtype(dtype)}")
        if np.dtype(dtype) == np.float16 and not float16_supported():
            raise ValueError(
                "a float16 KV cache needs float16 conversions in registers (x86: F16C), which "
                "Numba's target CPU lacks here; use dtype=np.float32"
            )
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
        try:
            self.keys = np.zeros(shape, dtype)
            self.values = np.zeros(shape, dtype)
        except MemoryError:
            needed = self.bytes_needed(config, n_slots, max_len, dtype)
            raise CacheError(
                f"a KV cache of {n_slots} slots of {max_len} tokens needs {format_bytes(needed)}, "
                "more than this machine can allocate"
            ) from None
        self.lengths = np.zeros(n_slots, np.int64)

    @staticmethod
    def bytes_needed(config: LlamaConfig, n_slots: int, max_len: int, dtype=DEFAULT_DTYPE) -> int:
        """Bytes of the keys and values of a cache of `n_slots` slots of `max_len` tokens:
        layers x slots x KV heads x max_len x head_dim x 2 (keys, values) x 2 (float16) or 4
        (float32)."""
        width = 2 * np.dtype(dtype).itemsize
        per_token = config.num_hidden_layers * config.num_key_value_heads * config.head_dim * width
        return per_token * n_slots * max_len

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

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        """Make slot `target` hold the first `length` tokens of slot `source` (the prefix
        cache's copy of a shared prompt prefix; `source == target` keeps them in place).

        Raises:
            CacheError: either slot does not exist, or `source` holds fewer than `length` tokens.
        """
        source, target = self.check_slot(source), self.check_slot(target)
        if not 0 <= length <= self.lengths[source]:
            raise CacheError(f"slot {source} holds {self.lengths[source]} tokens, not {length}")
        if source != target:
            self.keys[:, target, :, :length] = self.keys[:, source, :, :length]
            self.values[:, target, :, :length] = self.values[:, source, :, :length]
        self.lengths[target] = length


MEMORY_SHARE = 0.5
"""The share of the available memory a KV cache may take (see the module docstring)."""


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now: MemAvailable from /proc/meminfo (Linux),
    else free pages times the page size from `os.sysconf`; None when neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the figure is in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def slots_that_fit(
    config: LlamaConfig,
    n_slots: int,
    max_len: int,
    available: int | None,
    share: float = MEMORY_SHARE,
    dtype=DEFAULT_DTYPE,
) -> int:
    """How many of `n_slots` slots of `max_len` tokens (of `dtype`, float16 or float32) fit in
    `share` of `available` bytes: `n_slots` itself when they all fit or `available` is None
    (unknown), else fewer, at least 1.

    Raises:
        CacheError: not even one slot fits; the message gives the figures and the longest
            `max_len` that would fit.
    """
    if available is None:
        return n_slots
    budget = int(available * share)
    per_slot = KVCache.bytes_needed(config, 1, max_len, dtype)
    fit = budget // per_slot
    if fit >= 1:
        return min(n_slots, fit)
    per_token = KVCache.bytes_needed(config, 1, 1, dtype)
    raise CacheError(
        f"one KV cache slot of {max_len} tokens needs {format_bytes(per_slot)}, more than the "
        f"{format_bytes(budget)} allowed ({share:.0%} of the {format_bytes(available)} "
        f"available); a slot of at most {budget // per_token} tokens (prompt plus max_tokens) fits"
    )


def format_bytes(n_bytes: int) -> str:
    """A byte count for people: `1.5 GiB`, `377.5 MiB`."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} bytes"

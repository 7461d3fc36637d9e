"""Whether Numba's on-disk cache holds a kernel yet.

Every kernel is `@numba.njit(cache=True)`: the first process on a machine compiles it (the
model's block products take the better part of a minute on 2 cores) and writes it beside its
source (`__pycache__`, or `NUMBA_CACHE_DIR`); later processes load it. A command line that is
about to run the model says so once when the cache is empty, so a first run's wait is not
mistaken for a hang.
"""

from __future__ import annotations

from pathlib import Path


def is_cached(kernel) -> bool:
    """True when Numba's cache index of `kernel` (a dispatcher made by `numba.njit(cache=True)`)
    exists on disk: some signature of it was compiled and cached before.

    Reads Numba's `FunctionCache` (the `_cache` of a dispatcher, numba 0.6x): False for a
    kernel without an on-disk cache or where Numba keeps it elsewhere, so the caller's note errs
    towards saying a compile may come.
    """
    try:
        index_path = kernel._cache._cache_file._index_path
    except AttributeError:
        return False
    return Path(index_path).is_file()

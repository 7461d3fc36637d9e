"""Whether Numba's on-disk cache holds a kernel yet, and the notice a first compile prints.

Every kernel is `@numba.njit(cache=True)`: the first process on a machine compiles it (the
model's block products take the better part of a minute on 2 cores) and writes it beside its
source (`__pycache__`, or `NUMBA_CACHE_DIR`); later processes load it. A command line that is
about to run the model says so once when the cache is empty (`is_cached`), so a first run's
wait is not mistaken for a hang; the token masks' kernels, which any constrained answer
compiles first whatever the entry point (the Python API, the integrations), say so at their
first compile (`announce_compiles`).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numba.core.event


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


class _CompileNotice(numba.core.event.Listener):
    """Prints `message` on stderr at the first `numba:compile` event (a compile Numba could
    not load from its cache) of a kernel defined in `package` or below, then never again."""

    def __init__(self, package: str, message: str):
        self.prefix, self.message = package + ".", message
        self.printed = False
        self.lock = threading.Lock()

    def on_start(self, event) -> None:
        dispatcher = (event.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", None) or ""
        if not (module + ".").startswith(self.prefix):
            return
        with self.lock:
            if self.printed:
                return
            self.printed = True
        print(self.message, file=sys.stderr, flush=True)

    def on_end(self, event) -> None:
        pass


_notices: dict[str, _CompileNotice] = {}


def announce_compiles(package: str, what: str) -> None:
    """From now on, in this process, the first kernel of `package` (a module name; its
    submodules' too) that Numba compiles rather than loads from its on-disk cache prints once
    on stderr "corral: compiling `what`: this first run on the machine waits for them once
    (later runs load them from Numba's cache)", before the compile starts. Registering the same
    package again does nothing. Costs one listener call per compile, none per kernel call."""
    if package in _notices:
        return
    message = (
        f"corral: compiling {what}: this first run on the machine waits for them once "
        "(later runs load them from Numba's cache)"
    )
    _notices[package] = notice = _CompileNotice(package, message)
    numba.core.event.register("numba:compile", notice)

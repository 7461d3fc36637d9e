"""One compile state for kernels compared bit for bit (or to an ulp) across their versions.

Numba's machine code for a kernel loaded from its cache and the same kernel compiled in the
running process were seen to compute differently by a float32 ulp: the same instructions and
constants in the object Numba caches, yet, for one `kernels.attention._attend` call, 26 of
1,440 outputs one ulp apart, every time, between a process that compiled it and one that
loaded it (session 11's check; the cause, somewhere between LLVM's JIT and Numba's object
cache, was not found). Two versions of one kernel (float16 and float32 caches) compared
closely must then come from one compile: after a run that compiled only the float16 versions
(`corral generate` on an AMX machine, the README's first command), a test would compile the
float32 ones and load the float16 ones, and a one-ulp difference, rounded to float16 in the
next layer's keys, grows through a model's layers.
"""

from __future__ import annotations

import numba


def compile_afresh(module) -> None:
    """Compile every signature of every Numba kernel of `module` again, in this process
    (`Dispatcher.recompile`, which also rewrites the kernel's cache entries): call it once
    every version a test compares has been called."""
    for kernel in vars(module).values():
        if isinstance(kernel, numba.core.registry.CPUDispatcher) and kernel.signatures:
            kernel.recompile()

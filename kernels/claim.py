"""Work handed out one item at a time from a shared counter, for parallel loops whose items cost
unequal times or whose threads start at unequal times (a sleeping OpenMP worker wakes tens of
microseconds late): a thread claims its next item when it is done with the last, so none waits
for a share fixed in advance. `masks.sample_rows` and `compute.attention` use it.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def claim(typingctx, counter):  # pragma: no cover - compiled
    """`counter[0] += 1` as one atomic add (LLVM's `atomicrmw add`, monotonic: every value is
    returned to exactly one caller, whichever thread calls); returns the value before. counter:
    int64 `[>= 1]`, C-contiguous. O(1)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", data, ir.Constant(ir.IntType(64), 1), "monotonic")

    return types.int64(counter), codegen

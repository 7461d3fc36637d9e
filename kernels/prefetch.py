"""A software prefetch for Numba kernels: `prefetch(array, i)` asks the CPU to bring the cache
line holding `array[i]` into its caches and returns at once (LLVM's `llvm.prefetch`: a read,
temporal locality 3, data cache; `prefetcht0` on x86, nothing where the target has none).

The sampler (`corral.kernels.sample_rows`) prefetches the next row's logits while it computes the
weights of the current one: its exp pass is bound by arithmetic, the next row's first pass by
memory (a forward pass has just written the logits, 196 KB a row, and evicted them from the core's
own caches), so the two overlap. A prefetch is a hint: it changes no value.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """`prefetch(array, index)`: hint that `array[index]` (a C-contiguous 1-d array, an integer
    index, never bounds-checked: any address may be prefetched, none is read) will be read
    soon. O(1), returns None."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and array.layout == "C"):
        return None  # a typing error: 1-d C-contiguous arrays only
    if not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        address = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = builder.module.declare_intrinsic(
            "llvm.prefetch",
            [address.type],
            ir.FunctionType(ir.VoidType(), [address.type, i32, i32, i32]),
        )
        builder.call(function, [address, i32(0), i32(3), i32(1)])  # read, locality 3, data
        return context.get_dummy_value()

    return types.void(array, index), codegen

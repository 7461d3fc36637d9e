"""Software prefetches for Numba kernels: `prefetch(array, i)` and `prefetch_l2(array, i)` ask the
CPU to bring the cache line holding `array[i]` into its caches and return at once (LLVM's
`llvm.prefetch`: a read of the data cache, temporal locality 3 or 2: `prefetcht0` into L1 or
`prefetcht1` into L2 on x86; nothing where the target has none). A prefetch is a hint: it
changes no value.

- The sampler (`masks.sample_rows`) prefetches the next row's logits while it computes
  the weights of the current one: its exp pass is bound by arithmetic, the next row's first pass
  by memory (a forward pass has just written the logits, 196 KB a row, and evicted them from the
  core's own caches), so the two overlap.
- The one-row block products (`corral.kernels.compute.quant`) fetch the columns of a tile ahead, and
  decode attention's four-key path (`corral.kernels.compute.attention`) fetches keys and values rows
  ahead into L2 (`prefetch_l2`), which `bench/attention.py` found quicker than `prefetcht0`.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def _prefetch_intrinsic(locality: int, name: str):
    """A Numba intrinsic `name(array, index)` prefetching for a read with LLVM's temporal
    `locality` (3: keep in every level, 2: from L2 out)."""

    def typer(typingctx, array, index):
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
            builder.call(function, [address, i32(0), i32(locality), i32(1)])  # read, data
            return context.get_dummy_value()

        return types.void(array, index), codegen

    typer.__name__ = name
    return intrinsic(typer)


prefetch = _prefetch_intrinsic(3, "prefetch")
"""`prefetch(array, index)`: hint that `array[index]` (a C-contiguous 1-d array, an integer index,
never bounds-checked: any address may be prefetched, none is read) will be read soon, into L1.
O(1), returns None."""

prefetch_l2 = _prefetch_intrinsic(2, "prefetch_l2")
"""`prefetch_l2(array, index)`: the same hint into L2 (`prefetcht1`). O(1), returns None."""

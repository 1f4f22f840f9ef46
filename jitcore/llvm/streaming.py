"""Streaming (non-temporal) stores for elementwise and depthwise conv kernels whose output does
not fit in cache.

A normal store first reads its cache line (read-for-ownership), so a kernel writing N bytes
moves 2N for its output; a non-temporal store writes whole lines straight to memory. That
pays when the output would not be in cache for its next reader anyway: the target's
`stream_bytes` threshold (llvm/target.py) says from which output size. The stores must be
aligned to the vector size: codegen peels the first elements of each run so that they are
(`PointwiseEmitter.elementwise_loop`); a depthwise conv streams the vectors of its rows that
are whole and aligned (`DepthwiseEmitter.finish`). Transposing (tiled) kernels keep normal
stores: streaming their aligned tile rows measured no gain (their transposed reads dominate).
Non-temporal stores are weakly ordered, so a kernel that made any ends with a store fence
before the thread pool reports it done (other threads then see every result).
"""
from __future__ import annotations

import math

from llvmlite import ir

from jitcore.passes.kernel import Kernel, Kind

from .irutil import memory_type_bytes


def streamed_slots(kernel: Kernel, threshold: int) -> frozenset:
    """The buffer slots a kernel writes with streaming stores: those of a vectorized
    elementwise kernel's (not a tiled one's) or a depthwise conv's outputs written
    contiguously along the vector loop, when they all
    have one element size (one alignment peel fits them all) and together take at least
    `threshold` bytes (0: never)."""
    if threshold <= 0 or kernel.kind not in (Kind.POINTWISE, Kind.DEPTHWISE) or \
            kernel.lanes == 1 or not kernel.loops or kernel.tile_var is not None:
        return frozenset()
    var = kernel.vector_var
    stores = [st for st in kernel.stores
              if st.buffer.kind == "output" and st.offset.coeff(var) == 1]
    if not stores or len({st.buffer.dtype.itemsize for st in stores}) != 1:
        return frozenset()
    iterations = math.prod(lp.var.extent for lp in kernel.loops)
    if iterations * stores[0].buffer.dtype.itemsize * len(stores) < threshold:
        return frozenset()
    return frozenset(st.buffer.slot for st in stores)


def store_nontemporal(b: ir.IRBuilder, value, ptr):
    """A vector store of `value` at `ptr` (aligned to the vector's size) that bypasses the
    caches (LLVM's !nontemporal: movntps/vmovntdq on x86, stnp on AArch64)."""
    size = value.type.count * memory_type_bytes(value.type.element)
    inst = b.store(value, ptr, align=size)
    node = b.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
    inst.set_metadata("nontemporal", node)       # (add_metadata gives one node per module)
    return inst


def store_fence(b: ir.IRBuilder):
    """Order the kernel's streaming stores before whatever follows (the thread pool's done
    flag): sfence on x86, a full fence elsewhere."""
    module = b.module
    if module.triple.startswith(("x86_64", "i686", "i386")):
        fn = module.globals.get("llvm.x86.sse.sfence") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
        b.call(fn, [])
    else:
        b.fence("seq_cst")


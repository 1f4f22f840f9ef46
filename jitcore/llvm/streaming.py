"""Streaming (non-temporal) stores for elementwise and depthwise conv kernels whose output does
not fit in cache.

A normal store first reads its cache line (read-for-ownership), so a kernel writing N bytes
moves 2N for its output; a non-temporal store writes whole lines straight to memory. That
pays when the output would not be in cache for its next reader anyway: the target's
`stream_bytes` threshold (llvm/target.py) says from which output size. The stores must be
aligned to the vector size: the loop peels the first elements of each run so that they are
(`StreamingLoop.elementwise_loop`, for pointwise kernels and the last part of a row kernel:
layer_norm's and softmax's output); a depthwise conv streams the vectors of its rows that
are whole and aligned (`DepthwiseEmitter.finish`); a transposing (tiled) kernel streams its
blocks whose output rows are aligned (`TilesEmitter.streamed_rows`; a + b.T 4096x4096 f32 on
an Intel Xeon Ice Lake-SP @2.8GHz: 1.07-1.15x with its tile blocks of 128x128, and what made
longer runs per block pay, tiles.py).
Non-temporal stores are weakly ordered, so a kernel that made any ends with a store fence
before the thread pool reports it done (other threads then see every result).
"""
from __future__ import annotations

import math

from llvmlite import ir

from jitcore.passes.kernel import Kernel, Kind

from . import irutil as u
from .row_scratch import scratch_rows
from .irutil import memory_type_bytes

STREAM_UNROLL = 1      # vectors per trip of a streaming (non-temporal) loop (2 and 4: within
                       # noise on chain and broadcast3)
# A row kernel streams its output from this many times the target's threshold. Zen 4 guest
# (4 MB threshold, 32 MB L3), 1 thread, fresh outputs called in a loop (each call's output
# reuses the last one's memory, still partly in L3), min and median of 81-201 interleaved
# calls: layer_norm x 768 streaming vs not 0.67-0.70x at 6 MB of output, 0.70-0.79x at
# 25 MB, 1.21-1.27x at 50 MB, 1.32-1.46x at 100 MB; softmax x 1024 0.81-0.85x at 8 MB,
# 0.96-0.98x at 32 MB, 1.25-1.27x at 64 MB.
ROW_STREAM_FACTOR = 10


def streamed_part(kernel: Kernel) -> Kernel:
    """The kernel whose stores may stream: the kernel itself, or a row kernel's last part
    when that part is pointwise over the row (no later part reads what it writes; the row
    loop is its first loop) and no earlier part writes its outputs (softmax's summands, when
    its rows are too long for a scratch row (row_scratch.py): streaming over lines just
    written in cache ran 1.7x slower)."""
    if kernel.kind != Kind.ROWS or not kernel.parts:
        return kernel
    *earlier, last = kernel.parts
    written = {st.buffer.slot for part in earlier for st in part.stores} - \
        scratch_rows(kernel).keys()
    if last.kind == Kind.POINTWISE and len(last.loops) > 1 and \
            not written & {st.buffer.slot for st in last.stores}:
        return last
    return kernel


def kernel_threshold(kernel: Kernel, threshold: int) -> int:
    """The output bytes from which `kernel` streams: the target's threshold, ROW_STREAM_FACTOR
    times that for a row kernel."""
    return threshold * ROW_STREAM_FACTOR if kernel.kind == Kind.ROWS else threshold


def streamed_slots(kernel: Kernel, threshold: int) -> frozenset:
    """The buffer slots a kernel writes with streaming stores: those of a vectorized
    elementwise (or tiled) kernel's, a row kernel's last pointwise part's or a
    depthwise conv's outputs written contiguously along the vector loop, when they all
    have one element size (one alignment peel fits them all) and together take at least
    kernel_threshold bytes (0: never)."""
    threshold = kernel_threshold(kernel, threshold)
    kernel = streamed_part(kernel)
    if threshold <= 0 or kernel.kind not in (Kind.POINTWISE, Kind.DEPTHWISE, Kind.TILES) or \
            kernel.lanes == 1 or not kernel.loops:
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



class StreamingLoop:
    """A kernel emitter's vector loop that stores its streamed outputs non-temporally (mixed
    into the emitters of pointwise and row kernels)."""

    def stream_threshold(self) -> int:
        """The output bytes from which this kernel streams (a row kernel overrides it)."""
        return self.stream_bytes

    def elementwise_loop(self, lp, first: bool):
        """The vector loop of an elementwise kernel (or row part): streaming when it has
        streamed outputs and their first elements of this run have a common alignment (else
        the plain loop). The elements up to the first vector-aligned one are peeled (fewer
        than a vector), the rest stored non-temporally with aligned vectors, the tail as
        usual."""
        stores = [st for st in self.kernel.stores if st.buffer.slot in self.streamed]
        if not stores:
            return self.vector_loop(lp, self.emit_point, first)
        b, lanes = self.b, self.kernel.lanes
        lo, hi = self.bounds(lp, first)
        item = stores[0].buffer.dtype.itemsize
        vector = lanes * item                   # bytes per vector store: its alignment
        self.env[lp.var] = lo
        addresses = [b.ptrtoint(b.gep(self.base_ptr(st.buffer), [self.index(st.offset)]), u.I64)
                     for st in stores]
        skew = b.and_(addresses[0], u.I64(vector - 1))
        aligned = b.icmp_unsigned("==", b.and_(skew, u.I64(item - 1)), u.I64(0))
        for address in addresses[1:]:
            same = b.icmp_unsigned("==", b.and_(address, u.I64(vector - 1)), skew)
            aligned = b.and_(aligned, same)
        if self.dims is not None:
            # run-time extents: streamed_slots saw placeholders, so the call's own output
            # size decides (below the threshold the plain loop keeps the output in cache)
            total = u.I64(item * len(stores))
            for loop in self.kernel.loops:
                total = b.mul(total, self.extent(loop.var.extent))
            aligned = b.and_(aligned, b.icmp_signed(">=", total, u.I64(self.stream_threshold())))
        peel = b.udiv(b.and_(b.sub(u.I64(vector), skew), u.I64(vector - 1)), u.I64(item))
        mid = b.select(b.icmp_signed("<", b.sub(hi, lo), peel), hi, b.add(lo, peel))
        with b.if_else(aligned, likely=True) as (then, otherwise):
            with then:
                self.vector_tail(lp, self.emit_point, lo, mid)
                self.streaming = True
                self.vector_loop(lp, self.emit_point, first, STREAM_UNROLL, bounds=(mid, hi))
                self.streaming = False
            with otherwise:
                self.vector_loop(lp, self.emit_point, first)

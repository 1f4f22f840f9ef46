"""Pointwise kernels (Kind.POINTWISE): parallel loops, the last one the vector loop; outputs
written contiguously and large enough are stored non-temporally (streaming.py)."""
from __future__ import annotations

from jitcore.passes.kernel import Kind

from . import irutil as u
from .codegen import KernelEmitter
from .registry import KindEntry, register

STREAM_UNROLL = 1      # vectors per trip of a streaming (non-temporal) loop (2 and 4: within
                       # noise on chain and broadcast3)


class PointwiseEmitter(KernelEmitter):
    """The loop nest, its vector loop with gathers' checked indices hoisted before it."""

    def body(self):
        k = self.kernel
        if not k.loops:
            return self.emit_point()
        self.nest(k.loops[:-1], lambda: self.hoisting_gathers(
            lambda: self.elementwise_loop(k.loops[-1], len(k.loops) == 1)), True)

    def elementwise_loop(self, lp, first: bool):
        """The vector loop of an elementwise kernel: streaming when it has streamed outputs
        and their first elements of this run have a common alignment (else the plain loop).
        The elements up to the first vector-aligned one are peeled (fewer than a vector),
        the rest stored non-temporally with aligned vectors, the tail as usual."""
        if not self.streamed:
            return self.vector_loop(lp, self.emit_point, first)
        b, lanes = self.b, self.kernel.lanes
        lo, hi = self.bounds(lp, first)
        stores = [st for st in self.kernel.stores if st.buffer.slot in self.streamed]
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
            aligned = b.and_(aligned, b.icmp_signed(">=", total, u.I64(self.stream_bytes)))
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



register(KindEntry(Kind.POINTWISE, PointwiseEmitter))

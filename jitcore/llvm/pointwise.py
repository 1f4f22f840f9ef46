"""Pointwise kernels (Kind.POINTWISE): parallel loops, the last one the vector loop; outputs
written contiguously and large enough are stored non-temporally (streaming.py)."""
from __future__ import annotations

from jitcore.passes.kernel import Kind

from .codegen import KernelEmitter
from .registry import KindEntry, register
from .streaming import StreamingLoop


class PointwiseEmitter(StreamingLoop, KernelEmitter):
    """The loop nest, its vector loop with gathers' checked indices hoisted before it."""

    def body(self):
        k = self.kernel
        if not k.loops:
            return self.emit_point()
        self.nest(k.loops[:-1], lambda: self.hoisting_gathers(
            lambda: self.elementwise_loop(k.loops[-1], len(k.loops) == 1)), True)


register(KindEntry(Kind.POINTWISE, PointwiseEmitter))

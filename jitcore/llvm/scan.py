"""Scan kernels (Kind.SCAN): a running sum along one loop."""
from __future__ import annotations

from jitcore.ir.ops import Op
from jitcore.passes.kernel import Kind, Load

from . import irutil as u
from .codegen import KernelEmitter
from .opemit import emit
from .registry import KindEntry, register


class ScanEmitter(KernelEmitter):
    """Each step of the scan loop adds its value to the previous step's output."""

    def body(self):
        """A running sum: the loops before the scan loop, then the scan loop in order, each
        step adding its value to the previous step's stored output (its first step stores
        the value itself), then the loops after it, the last one the vector loop. With no
        loop before the scan loop, a call covers a range of the vector loop instead."""
        k, b = self.kernel, self.b
        at = next(i for i, lp in enumerate(k.loops) if lp.scan)
        outer, scan, inner = k.loops[:at], k.loops[at], k.loops[at + 1:]
        st = k.stores[0]
        prev = Load(st.buffer, st.offset + (-st.offset.coeff(scan.var)))

        def step(first_row: bool):
            def body(lanes=1, part=0):
                val = self.value(st.value, lanes, {})
                if not first_row:
                    val = emit(b, Op.ADD, st.buffer.dtype, st.buffer.dtype,
                               [self.load(prev, lanes), val])
                self.store(st.buffer, st.offset, val, lanes)
            if not inner:
                return body()
            ranged = not outer and k.range_loop is inner[-1]
            self.nest(inner[:-1], lambda: self.vector_loop(inner[-1], body, ranged), False)

        def scan_rows():
            self.env[scan.var] = u.I64(0)
            step(True)
            with u.for_range(b, u.I64(1), u.I64(scan.var.extent), 1, name=scan.var.name) as i:
                self.env[scan.var] = i
                step(False)
        self.nest(outer, scan_rows, True)



register(KindEntry(Kind.SCAN, ScanEmitter))

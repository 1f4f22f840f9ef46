"""The fused epilogue of a matmul kernel (gemm and gemv): the store's expression of `Acc` (the
finished dot products) and loads, run on a vector of results along the output's vector axis
while they are still in registers, then stored."""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.kernel import Acc, walk

from . import irutil as u


class Epilogue:
    """Emits `store(expr(Acc = total))` through a KernelEmitter `ke` for `lanes` consecutive
    outputs along `var` (the kernel's vector variable; env[var] is the first of them)."""

    def __init__(self, ke, var, lanes: int):
        self.ke, self.var, self.lanes = ke, var, lanes
        self.store = ke.kernel.stores[0]
        self.acc_leaf = next((n for n in walk([self.store.value]) if isinstance(n, Acc)), None)
        # vector loads and stores need unit (or zero: a broadcast) steps along var; else the
        # expression runs once per element
        self.vector = all(ld.offset.coeff(var) in (0, 1) for ld in ke.kernel.loads()[2:]) \
            and self.store.offset.coeff(var) == 1

    def masked(self, count, fn):
        """Run fn with the lane mask for `count` valid lanes set on the emitter (None: all
        lanes): its vector loads and stores touch only those (LLVM's masked intrinsics,
        which every x86 target lowers)."""
        if count is None:
            return fn()
        return self.ke.masked(u.lane_mask(self.ke.b, count, self.lanes), fn)

    def emit(self, total, count):
        """Store the expression with Acc = total (a vector of `lanes` results; `count` valid
        lanes, None: all), as vectors along var, or per element when an access strides it."""
        b, ke, st, lanes = self.ke.b, self.ke, self.store, self.lanes
        if self.vector:
            memo = {} if self.acc_leaf is None else {id(self.acc_leaf): total}

            def run():
                ke.store(st.buffer, st.offset, ke.value(st.value, lanes, memo), lanes)
            return self.masked(count, run)
        spill = u.alloca_once(b, total.type, name="epilogue_row")
        b.store(total, spill)
        first = ke.env[self.var]
        valid = u.I64(lanes) if count is None else count
        elem_ptr = b.bitcast(spill, ir.PointerType(total.type.element))
        with u.for_range(b, u.I64(0), valid, 1, name="c") as c:
            ke.env[self.var] = b.add(first, c)
            lane = b.load(b.gep(elem_ptr, [c]))
            memo = {} if self.acc_leaf is None else {id(self.acc_leaf): lane}
            ke.store(st.buffer, st.offset, ke.value(st.value, 1, memo), 1)
        ke.env[self.var] = first

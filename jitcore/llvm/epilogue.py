"""The fused epilogue of a contraction kernel (gemm, gemv, conv): the store's expression of
`Acc` (the finished dot products) and loads, run on a vector of results along the output's
vector axis while they are still in registers, then stored."""
from __future__ import annotations

from llvmlite import ir

from jitcore.ir.ops import info
from jitcore.passes.kernel import Acc, Compute, walk

from . import irutil as u
from .codegen import KernelEmitter


# An epilogue of up to this many ops runs on each accumulator of a conv's register tile in
# place, unrolled; a longer one runs in a loop over the tile, spilled to the stack, one vector
# per iteration. Unrolled, the tile's vectors are independent chains the core overlaps; in the
# loop, one silu (an exp, a divide: a ~15-op dependency chain) per iteration left most of the
# FMA units idle. Measured (AMD EPYC Zen 4, 1 thread, interleaved, bitwise equal results),
# 1x1 conv + bias + silu: 24->144 at 56x56 0.508 -> 0.445 ms, 16->96 at 112x112 1.59 -> 1.30;
# + gelu 96->96 at 56x56 1.12 -> 0.99; EfficientNet-B0 16.4 -> 15.6 ms. (The limit was 3 ops
# without exp or divide.) Ops count as the graph has them, before vecmath expands them: an
# exp or an erf is ~20-30 instructions, so at most UNROLLED_EXPENSIVE_OPS of those (silu,
# gelu, mish's three) keep the unrolled tile's code size bounded.
UNROLLED_EPILOGUE_OPS = 12
UNROLLED_EXPENSIVE_OPS = 3


def short_epilogue(kernel) -> bool:
    """Whether the kernel's store expression is short enough to unroll over a register tile."""
    ops = [n for n in walk([kernel.stores[0].value]) if isinstance(n, Compute)]
    expensive = sum(bool(info(n.op).expensive) for n in ops)
    return len(ops) <= UNROLLED_EPILOGUE_OPS and expensive <= UNROLLED_EXPENSIVE_OPS


class EpilogueEmitter(KernelEmitter):
    """A kernel emitter whose store is an epilogue: `epilogue(total, count)` emits
    `store(expr(Acc = total))` for `lanes` consecutive outputs along `var` (the kernel's
    vector variable; env[var] is the first of them). `setup_epilogue` first."""

    def setup_epilogue(self, var, lanes: int):
        self.epilogue_var, self.epilogue_lanes = var, lanes
        self.epilogue_store = self.kernel.stores[0]
        self.acc_leaf = next((n for n in walk([self.epilogue_store.value])
                              if isinstance(n, Acc)), None)
        # vector loads and stores need unit (or zero: a broadcast) steps along var; else the
        # expression runs once per element
        self.epilogue_vector = all(ld.offset.coeff(var) in (0, 1)
                                   for ld in self.kernel.loads()[2:]) \
            and self.epilogue_store.offset.coeff(var) == 1

    @property
    def vector_var(self):
        """The epilogue's loads are vectors along its variable (the conv channel plan's
        runs along output channels, not along the kernel's last loop)."""
        return self.epilogue_var

    def lanes_masked(self, count, fn):
        """Run fn with the lane mask for `count` valid lanes set (None: all lanes): its vector
        loads and stores touch only those (LLVM's masked intrinsics, which every x86 target
        lowers)."""
        if count is None:
            return fn()
        return self.masked(u.lane_mask(self.b, count, self.epilogue_lanes), fn)

    def epilogue(self, total, count):
        """Store the expression with Acc = total (a vector of `lanes` results; `count` valid
        lanes, None: all), as vectors along var, or per element when an access strides it."""
        b, st, lanes = self.b, self.epilogue_store, self.epilogue_lanes
        if self.epilogue_vector:
            memo = {} if self.acc_leaf is None else {id(self.acc_leaf): total}

            def run():
                self.store(st.buffer, st.offset, self.value(st.value, lanes, memo), lanes)
            return self.lanes_masked(count, run)
        spill = u.alloca_once(b, total.type, name="epilogue_row")
        b.store(total, spill)
        first = self.env[self.epilogue_var]
        valid = u.I64(lanes) if count is None else count
        elem_ptr = b.bitcast(spill, ir.PointerType(total.type.element))
        with u.for_range(b, u.I64(0), valid, 1, name="c") as c:
            self.env[self.epilogue_var] = b.add(first, c)
            lane = b.load(b.gep(elem_ptr, [c]))
            memo = {} if self.acc_leaf is None else {id(self.acc_leaf): lane}
            self.store(st.buffer, st.offset, self.value(st.value, 1, memo), 1)
        self.env[self.epilogue_var] = first

    def epilogue_counted(self, acc, count, whole=None):
        """The epilogue on one vector with `count` (<= lanes) valid outputs (none: nothing):
        one masked epilogue where masks cost nothing, else whole vectors unmasked and the
        rest masked. `whole`: the i1 `count == lanes`, when the caller has it."""
        b = self.b
        if self.masked_tail:
            with b.if_then(b.icmp_signed(">", count, u.I64(0))):
                self.epilogue(acc, count)
            return
        if whole is None:
            whole = b.icmp_signed("==", count, u.I64(self.epilogue_lanes))
        with b.if_else(whole) as (then, otherwise):
            with then:
                self.epilogue(acc, None)
            with otherwise:
                with b.if_then(b.icmp_signed(">", count, u.I64(0))):
                    self.epilogue(acc, count)

"""The shared machinery of kernel emission: one kernel -> one LLVM function
`void k(i64 start, i64 stop, i8** bufs)` that runs iterations [start, stop) of the kernel's
range loop (so the parallel runtime can hand out any sub-range).

`KernelEmitter` holds one emission's state (the builder, the loop variables' values `env`,
the tail mask `mask`, the buffer pointers) and the machinery every kind uses: loads, stores,
index arithmetic, expressions, gathers, loops and vector loops. Each kernel kind subclasses
it with its own `body()` (pointwise.py, tiles.py, reduce.py, scan.py, rows.py, gemm.py,
gemv.py, conv.py, pool.py) and registers it (registry.py); `graph_module.py` gives each
kernel a module of its own and adds the graph's run function.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from jitcore.ir.ops import info
from jitcore.passes.kernel import Compute, Const, Extent, Gather, Kernel, Load, walk
from jitcore.passes.dynamic import DIMS_SLOT, uses_dynamic
from jitcore.passes.legality import varies
from jitcore.passes.symbolic import Div, Lin, Var, monomial
from jitcore.runtime import kernel_type

from . import bf16
from . import irutil as u
from .opemit import emit
from .streaming import store_fence, store_nontemporal, streamed_slots


BLOCK_TRIPS = 16       # trips of a float sum's main loop per pairwise block (pairwise.py)
CHEAP_BODY = 6         # a loop body costing at most this (see compute_cost) may be unrolled;
                       # a costlier body is throughput-bound and unrolling would only bloat it


def _may_run(lo, hi, step: int) -> bool:
    """Whether for_range(lo, hi, step) can run a trip (False only when both are constants)."""
    a, z = u.constant_int(lo), u.constant_int(hi)
    return a is None or z is None or a + step <= z



def compute_cost(value) -> int:
    """A rough instruction count of one evaluation of an expression."""
    return sum(info(n.op).cost for n in walk([value]) if isinstance(n, Compute))


def const_value(node: Const):
    """The value of an ir.Constant for a Const node: a bfloat16 constant (one that simplify
    folded from a cast, a pad's fill stored as it is) is its bits, as bf16 values are."""
    if node.dtype.name != "bfloat16":
        return node.value
    return int(bf16.bits(np.array([node.value], np.float32))[0])


class KernelEmitter:
    """Emits one kernel function: the shared machinery; a kind's subclass adds `body()`.
    Loop variables live in `self.env` (Var -> i64 value); `plan`: the kind's plan (its
    registry entry's plan builder), or None."""

    def __init__(self, module: ir.Module, kernel: Kernel, name: str, masked_tail: bool,
                 stream_bytes: int = 0, plan=None):
        self.kernel, self.module, self.plan = kernel, module, plan
        self.fn = ir.Function(module, kernel_type(), name=name)
        self.fn.attributes.add("nounwind")
        self.start, self.stop, self.bufs = self.fn.args
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.env, self.ptrs = {}, {}
        # the graph slots this kernel reads or writes, numbered in the order it first touches
        # them: `bufs` is the kernel's own array of those pointers (the run function builds
        # it), so equal kernels of different graphs or layers have equal code
        self.buffer_slots = []
        self.hoisted = {}        # id(gather) -> its checked index * stride, set for a loop
        self.row_values = {}     # id(load) -> its scalar, loaded once per row (emit_part)
        self.streams = {}        # id(load) -> its AlignedStream, in a loop of aligned lines
        # tails: one masked vector iteration (AVX-512 masks every element size) or scalar code
        self.masked_tail, self.mask = masked_tail, None
        # outputs written with non-temporal stores (streaming.py), where `self.streaming` says
        # the vector stores at hand are aligned; `self.streamed_any`: the kernel needs a fence
        self.streamed = streamed_slots(kernel, stream_bytes)
        self.streaming, self.streamed_any = False, False
        self.stream_bytes = stream_bytes
        # run-time extents (jc.jit(dynamic=True)): the call's i64 extent array is the
        # kernel's first pointer; loop bounds that are placeholders read it
        self.dims, self.dim_values = None, {}
        if uses_dynamic(kernel):
            self.buffer_slots.append(DIMS_SLOT)
            with self.b.goto_entry_block():
                raw = self.b.load(self.b.gep(self.bufs, [u.I64(0)]), name="dims")
                self.dims = self.b.bitcast(raw, u.I64.as_pointer())

    @property
    def vector_var(self):
        """The variable along which vector loads run: the kernel's vector loop's (an
        epilogue's emitter may run along another)."""
        return self.kernel.vector_var

    def extent(self, n: int):
        """An extent (or a stride) as an i64 value: a constant, or c times the product of
        the call's values of dynamic symbols (monomial), computed once at kernel entry."""
        found = monomial(n)
        if found is None:
            return u.I64(n)
        if found not in self.dim_values:
            with self.b.goto_entry_block():
                self.dim_values[found] = u.extent_value(
                    self.b, n, lambda k: self.b.load(self.b.gep(self.dims, [u.I64(k)]),
                                                     name=f"s{k}"))
        return self.dim_values[found]

    # -- memory ---------------------------------------------------------------------------
    def base_ptr(self, buf):
        """The buffer's typed pointer, loaded and cast once in the entry block."""
        key = (buf.slot, buf.dtype.name)
        if key not in self.ptrs:
            if buf.slot not in self.ptrs:
                local = len(self.buffer_slots)
                self.buffer_slots.append(buf.slot)
                with self.b.goto_entry_block():
                    self.ptrs[buf.slot] = self.b.load(self.b.gep(self.bufs, [u.I64(local)]),
                                                      name=f"buf{local}")
            with self.b.goto_entry_block():
                self.ptrs[key] = self.b.bitcast(self.ptrs[buf.slot],
                                                u.memory_type(buf.dtype).as_pointer())
        return self.ptrs[key]

    def index(self, e: Lin):
        """An index expression as i64 (its constant and coefficients may be multiples of a
        run-time extent: strides of the axes inside a dynamic one)."""
        acc = self.extent(e.const) if e.const else None     # (no `add 0, x`)
        for atom, coeff in e.terms:
            if isinstance(atom, Var):
                v = self.env[atom]
            else:
                v = self.floor_divmod(atom)
            term = v if coeff == 1 else self.b.mul(v, self.extent(coeff))
            acc = term if acc is None else self.b.add(acc, term)
        return u.I64(0) if acc is None else acc

    def floor_divmod(self, atom):
        """`e // d` or `e % d` with Python's (floor) meaning, as the symbolic pass assumes.
        The inner expression can be negative (a reversed slice of a reshape); it is shifted
        by a multiple of d that makes its lowest value >= 0, so unsigned ops (shifts and
        masks for powers of two) give the floor result."""
        lo, _ = atom.expr.bounds()
        shift = -(lo // atom.d) if lo < 0 else 0        # lo + shift*d >= 0
        x = self.index(atom.expr + shift * atom.d)
        d = self.extent(atom.d)                          # (a split of run-time extents)
        if isinstance(atom, Div):
            return self.b.sub(self.b.udiv(x, d), u.I64(shift))
        return self.b.urem(x, d)

    def load(self, node: Load, lanes: int, at=None):
        """Load `node` (a vector along the vector loop, or a splat); `at`: the element index
        to read instead of the node's offset (a gather's checked index)."""
        ptr = self.element_ptr(node.buffer, node.offset, False) if at is None else \
            self.b.gep(self.base_ptr(node.buffer), [at])
        contiguous = lanes > 1 and node.offset.coeff(self.vector_var) == 1
        if contiguous:
            vty = ir.VectorType(u.memory_type(node.dtype), lanes)
            vptr = self.b.bitcast(ptr, vty.as_pointer())
            stream = self.streams.get(id(node)) if at is None and self.mask is None else None
            if stream is not None:               # (aligned_loads.py)
                val = stream.load(ptr)
            else:
                val = self.b.load(vptr, align=1) if self.mask is None else \
                    u.masked_load(self.b, vptr, self.mask, vty)
        else:
            val = u.splat(self.b, self.b.load(ptr, align=1), lanes)
        if node.dtype.name == "bool":
            val = self.b.icmp_unsigned("!=", val, u.const(val.type, 0))
        return val

    def element_ptr(self, buf, offset: Lin, write: bool):
        """The address of the element at `offset` of `buf`, to read or `write`."""
        return self.b.gep(self.base_ptr(buf), [self.index(offset)])

    def store(self, buf, offset: Lin, value, lanes: int):
        ptr = self.element_ptr(buf, offset, True)
        if buf.dtype.name == "bool":
            value = self.b.zext(value, ir.VectorType(u.I8, lanes) if lanes > 1 else u.I8)
        if lanes > 1:
            ptr = self.b.bitcast(ptr, value.type.as_pointer())
            if self.mask is not None:
                return u.masked_store(self.b, value, ptr, self.mask)
            if self.streaming and buf.slot in self.streamed:
                self.streamed_any = True
                return store_nontemporal(self.b, value, ptr)
        self.b.store(value, ptr, align=1)

    # -- expressions ------------------------------------------------------------------------
    def value(self, root, lanes: int, memo: dict, load=None):
        """Emit the expression `root` (sources first, each node once per memo; nodes already
        in memo, such as a contraction's `Acc`, are taken from it). `load(node, lanes)`,
        when given, emits every load in place of the kernel's own (a pooling's per-tap
        reads)."""
        for node in walk([root]):
            if id(node) in memo:
                continue
            if load is not None and isinstance(node, Load):
                out = load(node, lanes)
            elif isinstance(node, Gather):
                out = self.gather(node, lanes, memo)
            elif isinstance(node, Load):
                out = self.load(node, lanes)
            elif isinstance(node, Extent):       # (a Const to the passes)
                out = u.splat(self.b, self.extent(node.value), lanes)
            elif isinstance(node, Const):
                out = u.const(u.value_type(node.dtype, lanes), const_value(node))
            else:
                args = [memo[id(s)] for s in node.src]
                in_dtype = node.src[-1].dtype if node.src else node.dtype
                out = emit(self.b, node.op, node.dtype, in_dtype, args, node.arg)
            memo[id(node)] = out
        return memo[id(root)]

    def gather(self, node: Gather, lanes: int, memo: dict):
        """A checked load at a run-time index. An index the same for every lane (what
        legality vectorizes) gives one checked base and a vector load; one that changes along
        the vector loop (inside a GEMM epilogue, say) is checked and loaded lane by lane."""
        if lanes > 1 and varies(node.index, self.vector_var):
            b, indices = self.b, memo[id(node.index)]
            out = ir.Constant(u.value_type(node.dtype, lanes), ir.Undefined)
            for lane in range(lanes):
                active = None if self.mask is None else b.extract_element(self.mask,
                                                                           u.I32(lane))
                at = self.checked_index(node, b.extract_element(indices, u.I32(lane)), active)
                val = u.const(u.value_type(node.dtype), 0) if at is None else \
                    self.load(node, 1, at)
                out = b.insert_element(out, val, u.I32(lane))
            return out
        if id(node) in self.hoisted:
            base = self.hoisted[id(node)]
            at = None if base is None else self.b.add(self.index(node.offset), base)
        else:
            scalar = memo if lanes == 1 else memo.setdefault("scalar", {})
            at = self.checked_index(node, self.value(node.index, 1, scalar))
        if at is None:
            return u.const(u.value_type(node.dtype, lanes), 0)
        return self.load(node, lanes, at)

    def hoisting_gathers(self, loop):
        """Run `loop` (the vector loop) with the checked index of every gather that does not
        change along it computed once before it: LLVM cannot hoist the index load itself
        (the kernel's stores might alias the index array, as far as it knows)."""
        var = self.vector_var
        for g in walk([s.value for s in self.kernel.stores]):
            if isinstance(g, Gather) and not varies(g.index, var):
                at = self.checked_index(g, self.value(g.index, 1, {}), offset=False)
                self.hoisted[id(g)] = at
        loop()
        self.hoisted = {}

    def checked_index(self, node: Gather, raw, active=None, offset: bool = True):
        """The element index of a gather at index value `raw`: wrapped if negative; one
        still outside [0, extent) is recorded in the status buffer (unless the lane is
        inactive, `active` false) and replaced by 0, so the address is always inside the
        buffer. None when the axis is empty: there is no element to read at all."""
        b = self.b
        idx = b.sext(raw, u.I64) if raw.type != u.I64 else raw
        ext = u.I64(node.extent)
        wrapped = b.select(b.icmp_signed("<", idx, u.I64(0)), b.add(idx, ext), idx)
        bad = b.icmp_unsigned(">=", wrapped, ext)     # (negative: huge unsigned)
        report = bad if active is None else b.and_(bad, active)
        with b.if_then(report, likely=False):
            self.record_index_error(node, idx)
        if node.extent == 0:
            return None
        safe = b.select(bad, u.I64(0), wrapped)
        moved = b.mul(safe, u.I64(node.stride))
        return b.add(self.index(node.offset), moved) if offset else moved

    def record_index_error(self, node: Gather, idx):
        """The first failed check of the call wins the status buffer: [site + 1, index]."""
        b = self.b
        status = self.base_ptr(node.status)       # the buffer's dtype is int64
        won = b.extract_value(b.cmpxchg(status, u.I64(0), u.I64(node.site + 1), "monotonic",
                                        "monotonic"), 1)
        with b.if_then(won):
            b.store(idx, b.gep(status, [u.I64(1)]))

    # -- loops ----------------------------------------------------------------------------
    def loop(self, lp, body, first: bool, step: int = 1):
        """A scalar loop over one variable; the kernel's first loop covers [start, stop)."""
        lo, hi = (self.start, self.stop) if first else (u.I64(0), self.extent(lp.var.extent))
        with u.for_range(self.b, lo, hi, step, name=lp.var.name) as i:
            self.env[lp.var] = i
            body()

    def nest(self, loops: list, body, first: bool):
        if not loops:
            return body()
        self.loop(loops[0], lambda: self.nest(loops[1:], body, False), first)

    def bounds(self, lp, first: bool) -> tuple:
        """[lo, hi) of a loop: the call's [start, stop) for the kernel's first loop."""
        return (self.start, self.stop) if first else (u.I64(0), self.extent(lp.var.extent))

    def vector_loop(self, lp, body, first: bool, unroll: int = 1, blocked: bool = False,
                    on_block=None, bounds=None):
        """body(lanes, part) over the loop: `unroll` vectors per trip (part 0..unroll-1), then
        single vectors, then the tail: one masked vector (self.mask set), or scalar code
        (lanes 1). With `blocked`, an unrolled trip is one call body(lanes, unroll) that
        handles the `unroll` vectors from env[var] on itself. With `on_block`, the main
        loop (unrolled, else single vectors, else scalar) calls on_block() after every
        BLOCK_TRIPS trips (pairwise summation pushes its block there). `bounds`: (lo, hi)
        values to run instead of the loop's own range."""
        lanes = self.kernel.lanes
        lo, hi = bounds or self.bounds(lp, first)
        single = 1 if blocked else 0          # blocked bodies get a vector count, not a part
        if lanes == 1:
            return self.trips(lo, hi, 1, lp.var.name, lambda i: self._at(lp, i, body, 1, single),
                              on_block)
        # (folded where the bounds are constants: loops and tails that cannot run are not
        # emitted, and LLVM does not spend time proving them dead)
        b = self.b
        n = u.sub(b, hi, lo)
        vec_end = u.add(b, lo, u.mul(b, u.sdiv(b, n, u.I64(lanes)), u.I64(lanes)))
        start = lo
        if unroll > 1:
            block = lanes * unroll
            start = u.add(b, lo, u.mul(b, u.sdiv(b, n, u.I64(block)), u.I64(block)))

            def trip(i):
                if blocked:
                    self.env[lp.var] = i
                    body(lanes, unroll)
                for part in range(0 if blocked else unroll):
                    self.env[lp.var] = self.b.add(i, u.I64(part * lanes)) if part else i
                    body(lanes, part)
            self.trips(lo, start, block, lp.var.name + "u", trip, on_block)
            on_block = None
        self.trips(start, vec_end, lanes, lp.var.name + "v",
                   lambda i: self._at(lp, i, body, lanes, single), on_block)
        self.vector_tail(lp, body, vec_end, hi, single)

    def vector_tail(self, lp, body, lo, hi, part: int = 0):
        """body over [lo, hi), fewer than a vector of elements: one masked vector iteration
        (self.mask set) or scalar code."""
        lanes = self.kernel.lanes
        if self.masked_tail:
            rest = u.sub(self.b, hi, lo)
            known = u.constant_int(rest)

            def masked():
                self.env[lp.var], self.mask = lo, u.lane_mask(self.b, rest, lanes)
                body(lanes, part)
                self.mask = None
            if known is None:
                with self.b.if_then(self.b.icmp_signed(">", rest, u.I64(0))):
                    masked()
            elif known > 0:
                masked()
            return
        with u.for_range(self.b, lo, hi, 1, name=lp.var.name + "t") as i:
            self.env[lp.var] = i
            body(1, part)

    def _at(self, lp, i, body, lanes: int, part: int):
        self.env[lp.var] = i
        body(lanes, part)

    def trips(self, lo, hi, step: int, name: str, trip, on_block=None):
        """trip(i) for i in range(lo, hi, step); with on_block, in blocks of BLOCK_TRIPS
        trips, each followed by on_block() (the trips left over run after the blocks; the
        blocks' loops stay rolled). LLVM may unroll the other loops only when the kernel's
        body is cheap: a costly one (vector math) is throughput-bound, and unrolling copies
        its math per trip."""
        unroll = self.cheap_body()
        if on_block is None:
            if _may_run(lo, hi, step):
                with u.for_range(self.b, lo, hi, step, name=name, unroll=unroll) as i:
                    trip(i)
            return
        span = step * BLOCK_TRIPS
        b = self.b
        blocks_end = u.add(b, lo, u.mul(b, u.sdiv(b, u.sub(b, hi, lo), u.I64(span)),
                                        u.I64(span)))
        if _may_run(lo, blocks_end, span):
            # neither loop is unrolled by LLVM: unrolling the blocks copies the whole inner
            # loop; unrolling a block's trips lets the scheduler interleave the accumulators'
            # chains of adds, reading the block's cache lines out of address order (a 4096-wide
            # row sum from memory ran at 0.77x the bandwidth of a max over the same rows)
            with u.for_range(self.b, lo, blocks_end, span, name=name + "b",
                             unroll=False) as i0:
                with u.for_range(self.b, i0, u.add(b, i0, u.I64(span)), step, name=name,
                                 unroll=False) as i:
                    trip(i)
                on_block()
        if _may_run(blocks_end, hi, step):
            with u.for_range(self.b, blocks_end, hi, step, name=name + "r",
                             unroll=unroll) as i:
                trip(i)

    def cheap_body(self) -> bool:
        """Whether every store's expression of the kernel (or row part) at hand costs at
        most CHEAP_BODY (compute_cost)."""
        return all(compute_cost(st.value) <= CHEAP_BODY for st in self.kernel.stores)


    def masked(self, mask, fn):
        """Run fn with the lane mask `mask` set (None: all lanes): its vector loads and
        stores touch only those lanes."""
        if mask is None:
            return fn()
        self.mask = mask
        try:
            return fn()
        finally:
            self.mask = None

    def emit_point(self, lanes: int = 1, part: int = 0):
        memo = {key: u.splat(self.b, v, lanes) for key, v in self.row_values.items()}
        for st in self.kernel.stores:
            self.store(st.buffer, st.offset, self.value(st.value, lanes, memo), lanes)

    # -- the kernel -------------------------------------------------------------------------
    def emit(self):
        """The kernel's function: the kind's body, a fence after streaming stores, return."""
        self.body()
        if self.streamed_any:
            store_fence(self.b)
        self.b.ret_void()

    def body(self):
        """The kernel's loops and stores (each kind's emitter defines it)."""
        raise NotImplementedError(type(self).__name__)

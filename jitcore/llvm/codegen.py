"""One kernel -> one LLVM function `void k(i64 start, i64 stop, i8** bufs)` that runs
iterations [start, stop) of the kernel's range loop (so the parallel runtime can hand out any
sub-range). `KernelEmitter` emits the loop nests, elementwise bodies, register tiles and
reductions itself, and hands GEMM, GEMV, conv and arg-reduction kernels to their own emitters.
`graph_module.py` gives each kernel a module of its own and adds the graph's run function.
"""
from __future__ import annotations

from llvmlite import ir

from jitcore.ir.ops import INDEX_REDUCE, REDUCE_COMBINE, Op, info
from jitcore.passes.kernel import Compute, Const, Extent, Gather, Kernel, Load, walk
from jitcore.passes.dynamic import DIMS_SLOT, uses_dynamic
from jitcore.passes.legality import varies
from jitcore.passes.symbolic import Div, Lin, Var, monomial
from jitcore.runtime import kernel_type

from . import irutil as u
from .argreduce import ArgReduce
from .conv import ConvEmitter
from .gemm import GemmEmitter
from .gemv import GemvEmitter
from .opemit import cast, emit
from .pairwise import PairwiseSum
from .pool import PoolEmitter
from .streaming import store_fence, store_nontemporal, streamed_slots



def _reduce_identity(op: Op, dtype):
    big = {8: 255, 32: 2**31 - 1, 64: 2**63 - 1}[dtype.bits] if dtype.is_int else None
    if op == Op.SUM:
        return 0.0 if dtype.is_float else 0
    if op == Op.PROD:
        return 1.0 if dtype.is_float else 1
    if op in (Op.MAX, Op.ARGMAX):
        if dtype.is_float:
            return float("-inf")
        return 0 if dtype.kind in "ub" else -big - 1
    if dtype.is_float:
        return float("inf")
    return 1 if dtype.kind == "b" else big


ACCUMULATORS = 4       # vector accumulators per horizontal reduction (a power of two)
BLOCK_TRIPS = 16       # trips of a float sum's main loop per pairwise block (pairwise.py)
PAIRWISE_GROUP = 16    # ...blocks added in sequence before a push into the binary counter
VERTICAL_BLOCK = 8     # vectors of the inner axis per pass of a vertical reduction
STREAM_MIN = 64        # a column reduction this wide accumulates into its output row by row,
STREAM_ROWS = 4        # ...this many rows per pass over the output
CHEAP_BODY = 6         # ...when the reduced expression costs at most this (see _compute_cost);
                       # a costlier body is throughput-bound and unrolling would only bloat it
STREAM_UNROLL = 1      # vectors per trip of a streaming (non-temporal) loop (2 and 4: within
                       # noise on chain and broadcast3)
TILE_BLOCK = 8         # tiles along the tile loop per column step of a transposing kernel
TILE_COLUMNS = 8       # ...and columns of tiles per block (tile_block)
def _may_run(lo, hi, step: int) -> bool:
    """Whether for_range(lo, hi, step) can run a trip (False only when both are constants)."""
    a, z = u.constant_int(lo), u.constant_int(hi)
    return a is None or z is None or a + step <= z


def streams_by_rows(kernel: Kernel) -> bool:
    """A column reduction with no outer loop accumulates into its output row by row."""
    return kernel.kind == "reduce_vertical" and kernel.range_loop is kernel.loops[-1] \
        and kernel.range_extent >= STREAM_MIN and kernel.reduction.op not in INDEX_REDUCE


def _compute_cost(value) -> int:
    """A rough instruction count of one evaluation of an expression."""
    return sum(info(n.op).cost for n in walk([value]) if isinstance(n, Compute))


class KernelEmitter:
    """Emits one kernel function. Loop variables live in `self.env` (Var -> i64 value)."""

    def __init__(self, module: ir.Module, kernel: Kernel, name: str, masked_tail: bool,
                 stream_bytes: int = 0):
        self.kernel, self.module = kernel, module
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
        ptr = self.b.gep(self.base_ptr(node.buffer), [self.index(node.offset) if at is None
                                                       else at])
        contiguous = lanes > 1 and node.offset.coeff(self.kernel.vector_var) == 1
        if contiguous:
            vty = ir.VectorType(u.memory_type(node.dtype), lanes)
            vptr = self.b.bitcast(ptr, vty.as_pointer())
            val = self.b.load(vptr, align=1) if self.mask is None else \
                u.masked_load(self.b, vptr, self.mask, vty)
        else:
            val = u.splat(self.b, self.b.load(ptr, align=1), lanes)
        if node.dtype.name == "bool":
            val = self.b.icmp_unsigned("!=", val, u.const(val.type, 0))
        return val

    def store(self, buf, offset: Lin, value, lanes: int):
        ptr = self.b.gep(self.base_ptr(buf), [self.index(offset)])
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
                out = u.const(u.value_type(node.dtype, lanes), node.value)
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
        if lanes > 1 and varies(node.index, self.kernel.vector_var):
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
        var = self.kernel.vector_var
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

    def _at(self, lp, i, body, lanes: int, part: int):
        self.env[lp.var] = i
        body(lanes, part)

    def trips(self, lo, hi, step: int, name: str, trip, on_block=None):
        """trip(i) for i in range(lo, hi, step); with on_block, in blocks of BLOCK_TRIPS
        trips, each followed by on_block() (the trips left over run after the blocks).
        LLVM may unroll these loops only when the kernel's body is cheap: a costly one
        (vector math) is throughput-bound, and unrolling copies its math per trip."""
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
            # (LLVM would unroll a few blocks, copying the whole inner loop each time)
            with u.for_range(self.b, lo, blocks_end, span, name=name + "b",
                             unroll=False) as i0:
                with u.for_range(self.b, i0, u.add(b, i0, u.I64(span)), step, name=name,
                                 unroll=unroll) as i:
                    trip(i)
                on_block()
        if _may_run(blocks_end, hi, step):
            with u.for_range(self.b, blocks_end, hi, step, name=name + "r",
                             unroll=unroll) as i:
                trip(i)

    def cheap_body(self) -> bool:
        """Whether every store's expression of the kernel (or row part) at hand costs at
        most CHEAP_BODY (_compute_cost)."""
        return all(_compute_cost(st.value) <= CHEAP_BODY for st in self.kernel.stores)

    # -- kernel shapes ----------------------------------------------------------------------
    def emit(self):
        k = self.kernel
        if k.parts:                              # row fusion: the parts, in order, per row
            self.nest(k.loops, lambda: [self.emit_part(p) for p in k.parts], True)
            self.b.ret_void()
            return
        if k.kind == "gemm":
            GemmEmitter(self, self.gemm_plan).emit()
        elif k.kind == "conv":
            ConvEmitter(self, self.conv_plan).emit()
        elif k.kind == "gemv":
            GemvEmitter(self, self.gemv_plan).emit()
        elif k.kind == "pool":
            PoolEmitter(self).emit()
        elif k.kind == "pointwise" and not k.loops:
            self.emit_point()
        elif k.kind == "pointwise" and k.tile_var is not None:
            self.tile_nest(0, scalar=False)
        elif k.kind == "pointwise":
            self.nest(k.loops[:-1], lambda: self.hoisting_gathers(
                lambda: self.elementwise_loop(k.loops[-1], len(k.loops) == 1)), True)
        elif k.kind == "reduce_vertical":
            self.nest([lp for lp in k.loops[:-1] if lp.kind == "parallel"], self.emit_vertical,
                      True)
        elif k.kind == "scan":
            self.emit_scan()
        else:
            outer = [lp for lp in k.loops if lp.kind == "parallel"]
            self.nest(outer, self.emit_horizontal, True)
        if self.streamed_any:
            store_fence(self.b)
        self.b.ret_void()

    def emit_scan(self):
        """A running sum: the loops before the scan loop, then the scan loop in order, each
        step adding its value to the previous step's stored output (its first step stores
        the value itself), then the loops after it, the last one the vector loop. With no
        loop before the scan loop, a call covers a range of the vector loop instead."""
        k, b = self.kernel, self.b
        at = next(i for i, lp in enumerate(k.loops) if lp.kind == "scan")
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

    def emit_part(self, part: Kernel):
        """One part of a row-fused kernel, inside the row loop (its first loop)."""
        fused, self.kernel = self.kernel, part
        inner = part.loops[1:]
        if part.kind == "reduce_horizontal":
            self.nest([lp for lp in inner if lp.kind == "parallel"], self.emit_horizontal, False)
        elif not inner:
            self.emit_point()
        else:
            self.row_values = self.per_row_loads(part)
            self.nest(inner[:-1], lambda: self.hoisting_gathers(
                lambda: self.vector_loop(inner[-1], self.emit_point, False)),
                      False)
            self.row_values = {}
        self.kernel = fused

    def per_row_loads(self, part: Kernel) -> dict:
        """The loads of a pointwise part that read one element per row (an earlier part's
        mean, 1 / sqrt(var + eps), 1 / sum), loaded once before the part's loops. LLVM
        would re-load them for every vector: the part's stores might alias them, as far as
        it knows. Not when this part writes the same buffer, nor when an inner loop is empty
        (the element might not exist; the load would not run)."""
        inner = {lp.var for lp in part.loops[1:]}
        written = {st.buffer.slot for st in part.stores}
        if any(v.extent <= 0 for v in inner):
            return {}
        return {id(n): self.load(n, 1) for n in walk([st.value for st in part.stores])
                if isinstance(n, Load) and not isinstance(n, Gather)
                and n.buffer.slot not in written and not n.offset.vars() & inner}

    # -- transposed reads through register tiles --------------------------------------------
    def tile_nest(self, i: int, scalar: bool):
        """Loops i.. of a tiled kernel (see passes/legality.py). The tile loop steps by a
        whole tile; the rows it leaves over (and, in tile_row, the columns) run scalar."""
        k, loops = self.kernel, self.kernel.loops
        lp, first = loops[i], i == 0
        if i == len(loops) - 1:
            return self.loop(lp, self.emit_point, first) if scalar else self.tile_row(lp)
        if scalar or lp.var != k.tile_var:
            return self.loop(lp, lambda: self.tile_nest(i + 1, scalar), first)
        lanes = k.lanes
        lo, hi = (self.start, self.stop) if first else (u.I64(0), self.extent(lp.var.extent))
        start = lo
        if i + 1 == len(loops) - 1 and TILE_BLOCK > 1:
            # blocks of TILE_BLOCK tiles per column step: the transposed source is read in
            # runs of TILE_BLOCK lines per row (fewer pages per line read)
            span = lanes * TILE_BLOCK
            start = self.b.add(lo, self.b.mul(self.b.sdiv(self.b.sub(hi, lo), u.I64(span)),
                                              u.I64(span)))
            with u.for_range(self.b, lo, start, span, name=lp.var.name + "block") as t0:
                self.env[lp.var] = t0
                self.tile_row(loops[i + 1], TILE_BLOCK)
        full_end = self.b.add(start, self.b.mul(self.b.sdiv(self.b.sub(hi, start),
                                                            u.I64(lanes)), u.I64(lanes)))
        with u.for_range(self.b, start, full_end, lanes, name=lp.var.name + "tile") as t0:
            self.env[lp.var] = t0
            self.tile_nest(i + 1, False)
        with u.for_range(self.b, full_end, hi, 1, name=lp.var.name + "rest") as t:
            self.env[lp.var] = t
            self.tile_nest(i + 1, True)

    def tile_row(self, vloop, tiles: int = 1):
        """The tiles of `tiles` rows of tiles from t0 = env[tile var], along the vector loop,
        in blocks of TILE_COLUMNS columns of tiles when tiles > 1 (see tile_block); the
        columns left over run scalar."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, vloop.var, k.lanes
        t0 = self.env[t]
        cols = TILE_COLUMNS if tiles > 1 else 1
        strided = [n for n in walk([s.value for s in k.stores])
                   if isinstance(n, Load) and n.offset.coeff(v) not in (0, 1)]
        stack = {id(ld): u.alloca_once(b, ir.ArrayType(ir.VectorType(
            u.memory_type(ld.dtype), lanes), lanes * tiles * cols), name="tile")
            for ld in strided}
        if monomial(v.extent) is None:
            full = v.extent // lanes * lanes
            blocks = v.extent // (lanes * cols) * (lanes * cols)
            extent = v.extent
        else:                   # a run-time vector axis: the same split, computed here
            extent = self.extent(v.extent)
            full = b.mul(b.sdiv(extent, u.I64(lanes)), u.I64(lanes))
            blocks = b.mul(b.sdiv(extent, u.I64(lanes * cols)), u.I64(lanes * cols))
        if not isinstance(blocks, int) or blocks:
            with u.for_range(b, u.I64(0), _i64(blocks), lanes * cols, name=v.name + "b") as v0:
                self.tile_block(strided, stack, t0, v0, tiles, cols)
        if not isinstance(blocks, int) or blocks < full:
            with u.for_range(b, _i64(blocks), _i64(full), lanes, name=v.name + "t") as v0:
                self.tile_block(strided, stack, t0, v0, tiles, 1)
        if not isinstance(full, int) or full < extent:
            with u.for_range(b, t0, b.add(t0, u.I64(lanes * tiles)), 1,
                             name=t.name + "rest") as tt, \
                    u.for_range(b, _i64(full), _i64(extent), 1, name=v.name + "rest") as j:
                self.env[t], self.env[v] = tt, j
                self.emit_point()

    def tile_block(self, strided: list, stack: dict, t0, v0, tiles: int, cols: int):
        """`tiles` x `cols` tiles of lanes x lanes from (t0, v0), in two passes: each strided
        load's tiles are read (`lanes` vectors along the tile loop each), transposed in
        registers and parked in its stack block; then the body runs once per row of the
        block, a vector per column of tiles. The transposed source is so read in runs of
        `tiles` lines per row, the other operands and the output in runs of `cols` lines."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, k.vector_var, k.lanes

        def transpose(tt0, vv0, first):
            for ld in strided:
                vty = ir.VectorType(u.memory_type(ld.dtype), lanes)
                rows = []
                for r in range(lanes):
                    self.env[t], self.env[v] = tt0, b.add(vv0, u.I64(r))
                    ptr = b.gep(self.base_ptr(ld.buffer), [self.index(ld.offset)])
                    rows.append(b.load(b.bitcast(ptr, vty.as_pointer()), align=1))
                for c, col in enumerate(u.transpose(b, rows)):
                    at = b.add(first, u.I64(c)) if c else first
                    b.store(col, b.gep(stack[id(ld)], [u.I64(0), at]))

        if tiles * cols == 1:
            transpose(t0, v0, u.I64(0))
        else:                      # tile (r, j) at vectors (j * tiles + r) * lanes + column
            with u.for_range(b, u.I64(0), u.I64(cols), 1, name="tj") as j, \
                    u.for_range(b, u.I64(0), u.I64(tiles), 1, name="tr") as r:
                transpose(b.add(t0, b.mul(r, u.I64(lanes))), b.add(v0, b.mul(j, u.I64(lanes))),
                          b.mul(b.add(b.mul(j, u.I64(tiles)), r), u.I64(lanes)))

        def row(c, j):
            self.env[t] = b.add(t0, c)
            self.env[v] = v0 if j is None else b.add(v0, b.mul(j, u.I64(lanes)))
            at = c if j is None else b.add(b.mul(j, u.I64(tiles * lanes)), c)
            memo = {}
            for ld in strided:
                col = b.load(b.gep(stack[id(ld)], [u.I64(0), at]))
                if ld.dtype.name == "bool":
                    col = b.icmp_unsigned("!=", col, u.const(col.type, 0))
                memo[id(ld)] = col
            for st in k.stores:
                self.store(st.buffer, st.offset, self.value(st.value, lanes, memo), lanes)

        with u.for_range(b, u.I64(0), u.I64(lanes * tiles), 1, name="c") as c:
            if cols == 1:
                row(c, None)
            else:
                with u.for_range(b, u.I64(0), u.I64(cols), 1, name="cj") as j:
                    row(c, j)

    def emit_point(self, lanes: int = 1, part: int = 0):
        memo = {key: u.splat(self.b, v, lanes) for key, v in self.row_values.items()}
        for st in self.kernel.stores:
            self.store(st.buffer, st.offset, self.value(st.value, lanes, memo), lanes)

    def _combine(self, acc, val):
        red = self.kernel.reduction
        if red.op in (Op.MAX, Op.MIN) and red.dtype.is_float:
            # NaN still propagates, but which of -0.0 and +0.0 a reduction returns is left
            # open (numpy's own answer depends on the order): `nsz` lets the x86 backend
            # drop the sign test and blends it needs for llvm.maximum (6 -> 3 ops a vector)
            name = "maximum" if red.op == Op.MAX else "minimum"
            fnty = ir.FunctionType(acc.type, [acc.type, val.type])
            fn = u.declare_intrinsic(self.module, name, [acc.type], fnty)
            return self.b.call(fn, [acc, val], fastmath=("nsz",))
        return emit(self.b, REDUCE_COMBINE[red.op], red.dtype, red.dtype, [acc, val])

    def _reduced_value(self, lanes: int):
        red, st = self.kernel.reduction, self.kernel.stores[0]
        val = self.value(st.value, lanes, {})
        for keep in self.kernel.stores[1:]:      # the summand, kept for a later row part
            self.store(keep.buffer, keep.offset, val, lanes)
        return cast(self.b, red.dtype, st.value.dtype, val)

    def emit_vertical(self):
        """Accumulators across the reduce loops, one per lane of the inner parallel loop."""
        k = self.kernel
        reduce_loops = [lp for lp in k.loops if lp.kind == "reduce"]
        first = not [lp for lp in k.loops[:-1] if lp.kind == "parallel"]
        red, st = k.reduction, k.stores[0]
        # a block of several vectors per pass over the reduced rows: each row is then read
        # in runs of VERTICAL_BLOCK vectors, not one (column sums, the matmul's N axis)
        width = VERTICAL_BLOCK if _compute_cost(st.value) <= CHEAP_BODY else 1
        if red.op in INDEX_REDUCE:
            identity = _reduce_identity(red.op, st.value.dtype)
            return ArgReduce(self, identity).vertical(width, first)
        if streams_by_rows(k):
            return self.emit_vertical_streaming(reduce_loops)
        var = k.loops[-1].var

        def block(lanes, count):
            base = self.env[var]
            identity = _reduce_identity(red.op, red.dtype)
            accs = [u.alloca_once(self.b, u.value_type(red.dtype, lanes), name="acc")
                    for _ in range(count)]
            for acc in accs:
                self.b.store(u.const(acc.type.pointee, identity), acc)

            def at(p):
                self.env[var] = self.b.add(base, u.I64(p * lanes)) if p else base

            def step():
                for p, acc in enumerate(accs):
                    at(p)
                    self.b.store(self._combine(self.b.load(acc), self._reduced_value(lanes)),
                                 acc)
            self.nest(reduce_loops, step, False)
            for p, acc in enumerate(accs):
                at(p)
                self.store(st.buffer, st.offset, self.b.load(acc), lanes)
        # with no outer parallel loop, the inner one is the range a call covers
        self.vector_loop(k.loops[-1], block, first, width, blocked=True)

    def emit_vertical_streaming(self, reduce_loops):
        """Column reductions (no outer loop): accumulate into the output itself, row after
        row, so the input is read in long contiguous runs (numpy's order for axis=0 sums)
        and the output part of this thread's column range stays in cache. Each column is
        still reduced in row order: the same results as the register-blocked form."""
        k = self.kernel
        red, st = k.reduction, k.stores[0]
        identity = _reduce_identity(red.op, red.dtype)
        acc = Load(st.buffer, st.offset)

        def init(lanes, part):
            self.store(st.buffer, st.offset, u.const(u.value_type(red.dtype, lanes), identity),
                       lanes)

        def rows(count):
            """Add `count` consecutive rows (from env[row]) to the output in registers, in
            row order: one load and store of the output per `count` rows."""
            def accumulate(lanes, part):
                first_row, total = self.env.get(row), self.load(acc, lanes)
                for r in range(count):
                    if r:
                        self.env[row] = self.b.add(first_row, u.I64(r))
                    total = self._combine(total, self._reduced_value(lanes))
                if count > 1:
                    self.env[row] = first_row
                self.store(st.buffer, st.offset, total, lanes)
            return accumulate

        def row_blocks():
            rows_n = self.extent(row.extent)
            full = self.b.mul(self.b.sdiv(rows_n, u.I64(STREAM_ROWS)), u.I64(STREAM_ROWS))
            for lo, hi, step in ((u.I64(0), full, STREAM_ROWS), (full, rows_n, 1)):
                with u.for_range(self.b, lo, hi, step, name=row.name) as i:
                    self.env[row] = i
                    self.vector_loop(k.loops[-1], rows(step), True)

        row = reduce_loops[-1].var if reduce_loops else None
        self.vector_loop(k.loops[-1], init, True)
        if row is None:                         # reduced axes of extent 1: a single row
            return self.vector_loop(k.loops[-1], rows(1), True)
        self.nest(reduce_loops[:-1], row_blocks, False)

    def emit_horizontal(self):
        k = self.kernel
        red, st = k.reduction, k.stores[0]
        reduce_loops = [lp for lp in k.loops if lp.kind == "reduce"]
        # several vector accumulators hide the latency of the combine op (4 cycles for fadd)
        n_acc = ACCUMULATORS if _compute_cost(st.value) <= CHEAP_BODY else 1
        if red.op in INDEX_REDUCE:
            return ArgReduce(self, _reduce_identity(red.op, st.value.dtype)).horizontal(n_acc)
        lanes = k.lanes
        identity = _reduce_identity(red.op, red.dtype)
        accs = [u.alloca_once(self.b, u.value_type(red.dtype, lanes), name=f"vacc{i}")
                for i in range(n_acc)]
        sacc = u.alloca_once(self.b, u.value_type(red.dtype), name="sacc")
        for acc in accs + [sacc]:
            self.b.store(u.const(acc.type.pointee, identity), acc)

        def inner(n, part):
            acc = accs[part] if n > 1 else sacc
            old = self.b.load(acc)
            new = self._combine(old, self._reduced_value(n))
            if self.mask is not None:         # lanes past the end keep their accumulator
                new = self.b.select(self.mask, new, old)
            self.b.store(new, acc)

        def vector_sum():                     # fixed combine order: deterministic results
            vecs = [self.b.load(a) for a in accs]
            while len(vecs) > 1:
                vecs = [self._combine(x, y) for x, y in zip(vecs[::2], vecs[1::2])]
            return vecs[0]

        # a float sum adds pairwise (see _PairwiseAccumulators); other reductions are exact
        pairs = _PairwiseAccumulators(self, accs, sacc, vector_sum, identity) \
            if red.op == Op.SUM and red.dtype.is_float and reduce_loops else None
        if reduce_loops:
            *outer, last = reduce_loops

            def run():
                self.vector_loop(last, inner, False, n_acc,
                                 on_block=pairs.block_of_trips if pairs else None)
            self.nest(outer, pairs.rows(last, run, n_acc) if pairs and outer else run, False)
        else:
            inner(1, 0)
        total = pairs.total_scalar() if pairs else self.b.load(sacc)
        if lanes > 1:
            vec = pairs.total_vector() if pairs else vector_sum()
            total = self._combine(self.horizontal(vec), total)
        self.store(st.buffer, st.offset, total, 1)

    def horizontal(self, vec):
        """Tree-combine the lanes of a vector (fixed order: deterministic results)."""
        return u.reduce_lanes(self.b, vec, self._combine)


class _PairwiseAccumulators:
    """A horizontal float sum's accumulators (vector `accs`, scalar `sacc`) emptied every
    block (BLOCK_TRIPS trips of the innermost loop; when it is short, enough of its runs to
    make about as many adds per accumulator) into a block accumulator, which is pushed into
    a binary counter of partial sums (pairwise.py) every PAIRWISE_GROUP blocks. Pushing
    every block would cost a mispredicted carry loop per block; a group costs one add."""

    def __init__(self, ke: "KernelEmitter", accs, sacc, vector_sum, identity):
        self.ke, self.accs, self.sacc, self.vector_sum = ke, accs, sacc, vector_sum
        self.identity = identity
        b, vec = ke.b, ke.kernel.lanes > 1
        self.vectors = PairwiseSum(b, accs[0].type.pointee, ke._combine, "vpairs") \
            if vec else None
        self.scalars = PairwiseSum(b, sacc.type.pointee, ke._combine, "spairs")
        self.vmid = u.alloca_once(b, accs[0].type.pointee, name="vblocks") if vec else None
        self.smid = u.alloca_once(b, sacc.type.pointee, name="sblocks")
        self.pending = u.alloca_once(b, u.I64, name="blocks")
        b.store(u.I64(0), self.pending)
        for counter, mid in ((self.vectors, self.vmid), (self.scalars, self.smid)):
            if counter is not None:
                counter.reset()
                self._zero(mid)

    def _zero(self, acc):
        self.ke.b.store(u.const(acc.type.pointee, self.identity), acc)

    def _add_to(self, mid, value):
        self.ke.b.store(self.ke._combine(self.ke.b.load(mid), value), mid)

    def block(self, vectors: bool = True, scalars: bool = True):
        """End a block: add the accumulators into the block accumulators (and zero them);
        every PAIRWISE_GROUP blocks, push those into the counters."""
        b = self.ke.b
        vectors = vectors and self.vectors is not None
        scalars = scalars or self.vectors is None
        if vectors:
            self._add_to(self.vmid, self.vector_sum())
            for acc in self.accs:
                self._zero(acc)
        if scalars:
            self._add_to(self.smid, b.load(self.sacc))
            self._zero(self.sacc)
        n = b.add(b.load(self.pending), u.I64(1))
        b.store(n, self.pending)
        with b.if_then(b.icmp_signed("==", n, u.I64(PAIRWISE_GROUP))):
            for on, counter, mid in ((vectors, self.vectors, self.vmid),
                                     (scalars, self.scalars, self.smid)):
                if on:
                    counter.push(b.load(mid))
                    self._zero(mid)
            b.store(u.I64(0), self.pending)

    def block_of_trips(self):
        """After BLOCK_TRIPS trips of the innermost loop: only its main loop's accumulators
        filled (in a scalar kernel, that is the scalar one)."""
        self.block(scalars=False)

    def total_vector(self):
        return self.vectors.fold(self.ke._combine(self.ke.b.load(self.vmid), self.vector_sum()))

    def total_scalar(self):
        return self.scalars.fold(self.ke._combine(self.ke.b.load(self.smid),
                                                  self.ke.b.load(self.sacc)))

    def rows(self, last, row, n_acc: int):
        """The body of the outer reduce loops: one run of the innermost loop, then the end
        of a block every `runs` runs, so that no accumulator adds more than about
        BLOCK_TRIPS values in sequence within a block."""
        ke, b = self.ke, self.ke.b
        extent, lanes = last.var.extent, ke.kernel.lanes
        if lanes == 1:
            vector_adds, scalar_adds = 0, extent
        else:
            vector_adds = -(-(extent // lanes) // n_acc) + (1 if ke.masked_tail else 0)
            scalar_adds = 0 if ke.masked_tail else extent % lanes
        per_run = max(min(vector_adds, BLOCK_TRIPS), scalar_adds, 1)
        runs = max(1, BLOCK_TRIPS // per_run)
        end_block = lambda: self.block(vector_adds > 0, scalar_adds > 0)  # noqa: E731
        done = u.alloca_once(b, u.I64, name="runs")
        b.store(u.I64(0), done)

        def body():
            row()
            if runs == 1:
                return end_block()
            n = b.add(b.load(done), u.I64(1))
            b.store(n, done)
            with b.if_then(b.icmp_signed("==", n, u.I64(runs))):
                end_block()
                b.store(u.I64(0), done)
        return body


def _i64(n):
    """An i64 value from an int or an i64 value (a bound known now or at run time)."""
    return u.I64(n) if isinstance(n, int) else n

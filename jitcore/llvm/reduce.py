"""Reduction kernels: horizontal (Kind.REDUCE_HORIZONTAL: the reduced axis is the vector
loop; several vector accumulators, float sums added pairwise) and vertical
(Kind.REDUCE_VERTICAL: a parallel axis is the vector loop; one accumulator per lane across
the reduce loops, or, for wide column reductions, accumulated into the output row by row).
Arg-reductions go to argreduce.py."""
from __future__ import annotations

import functools

from llvmlite import ir

from jitcore.ir.ops import INDEX_REDUCE, REDUCE_COMBINE, Op
from jitcore.passes.kernel import Kernel, Kind, Load
from jitcore.passes.legality import bytes_moved

from . import irutil as u
from .aligned_loads import aligned_or_plain
from .argreduce import ArgReduction
from .codegen import CHEAP_BODY, KernelEmitter, compute_cost
from .opemit import cast, emit
from .pairwise import PairwiseAccumulators
from .registry import KindEntry, register
from .target import cache_sizes
from .work import grain


def _reduce_identity(op: Op, dtype):
    """The value a reduction's accumulator starts at (what no value changes)."""
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
SUM_ACCUMULATORS = 8   # vector accumulators of a float sum kernel that reads from cache,
STREAM_SUM_BYTES = 128  # ...their bytes together when it reads more than the last-level cache
VERTICAL_BLOCK = 8     # vectors of the inner axis per pass of a vertical reduction
STREAM_MIN = 64        # a column reduction this wide accumulates into its output row by row,
STREAM_ROWS = 4        # ...this many rows per pass over the output


def streams_by_rows(kernel: Kernel) -> bool:
    """A column reduction with no outer loop accumulates into its output row by row."""
    return kernel.kind == Kind.REDUCE_VERTICAL and kernel.range_loop is kernel.loops[-1] \
        and kernel.range_extent >= STREAM_MIN and kernel.reduction.op not in INDEX_REDUCE


class ReductionEmitter(ArgReduction, KernelEmitter):
    """The reductions' shared code: the combine op and the reduced value (arg-reductions:
    argreduce.ArgReduction). `aligned_rows`: whether a horizontal reduction reads rows that
    start off a cache line from aligned lines (aligned_loads.py)."""

    aligned_rows = False

    def combine(self, acc, val):
        """acc combined with val by the reduction's op."""
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
        width = VERTICAL_BLOCK if compute_cost(st.value) <= CHEAP_BODY else 1
        if red.op in INDEX_REDUCE:
            identity = _reduce_identity(red.op, st.value.dtype)
            return self.arg_setup(identity).arg_vertical(width, first)
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
                    self.b.store(self.combine(self.b.load(acc), self._reduced_value(lanes)),
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
                    total = self.combine(total, self._reduced_value(lanes))
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
        lanes = k.lanes
        # a float sum adds pairwise (see pairwise.PairwiseAccumulators); other reductions are exact
        pairwise = red.op == Op.SUM and red.dtype.is_float and bool(reduce_loops)
        # several vector accumulators hide the latency of the combine op (4 cycles for fadd)
        n_acc = ACCUMULATORS if compute_cost(st.value) <= CHEAP_BODY else 1
        if pairwise and n_acc > 1 and lanes > 1:
            n_acc = self.sum_accumulators(lanes, red.dtype)
        if red.op in INDEX_REDUCE:
            return self.arg_setup(_reduce_identity(red.op, st.value.dtype)).arg_horizontal(n_acc)
        identity = _reduce_identity(red.op, red.dtype)
        accs = [u.alloca_once(self.b, u.value_type(red.dtype, lanes), name=f"vacc{i}")
                for i in range(n_acc)]
        sacc = u.alloca_once(self.b, u.value_type(red.dtype), name="sacc")
        for acc in accs + [sacc]:
            self.b.store(u.const(acc.type.pointee, identity), acc)

        def inner(n, part):
            acc = accs[part] if n > 1 else sacc
            old = self.b.load(acc)
            new = self.combine(old, self._reduced_value(n))
            if self.mask is not None:         # lanes past the end keep their accumulator
                new = self.b.select(self.mask, new, old)
            self.b.store(new, acc)

        def vector_sum():                     # fixed combine order: deterministic results
            vecs = [self.b.load(a) for a in accs]
            while len(vecs) > 1:
                vecs = [self.combine(x, y) for x, y in zip(vecs[::2], vecs[1::2])]
            return vecs[0]

        pairs = PairwiseAccumulators(self, accs, sacc, vector_sum, identity) \
            if pairwise else None
        if reduce_loops:
            *outer, last = reduce_loops

            def run():
                loop = lambda: self.vector_loop(  # noqa: E731
                    last, inner, False, n_acc, on_block=pairs.block_of_trips if pairs else None)
                if self.aligned_rows and red.op == Op.SUM and not from_memory(self.kernel):
                    return aligned_or_plain(self, last, [st.value], loop)
                loop()
            self.nest(outer, pairs.rows(last, run, n_acc) if pairs and outer else run, False)
        else:
            inner(1, 0)
        total = pairs.total_scalar() if pairs else self.b.load(sacc)
        if lanes > 1:
            vec = pairs.total_vector() if pairs else vector_sum()
            total = self.combine(self.horizontal(vec), total)
        self.store(st.buffer, st.offset, total, 1)

    def sum_accumulators(self, lanes: int, dtype) -> int:
        """Vector accumulators of a float sum (a power of two)."""
        return ACCUMULATORS

    def horizontal(self, vec):
        """Tree-combine the lanes of a vector (fixed order: deterministic results)."""
        return u.reduce_lanes(self.b, vec, self.combine)


class HorizontalEmitter(ReductionEmitter):
    """The parallel loops, then per output the reduction of its row. Rows off a cache line
    are read from aligned lines (aligned_loads.py) where the data fits in the last-level
    cache: float32 sums of 256x1024 and 16x16384 rows 16 bytes into a line (numpy's large
    arrays) ran 1.6-1.8x as fast, at the speed of rows on a line, and rows from L3 1.08-1.15x
    (Intel Xeon Ice Lake-SP @2.8GHz, 1 thread); from memory (4096x4096) aligned lines ran
    0.96-0.97x, and such data keeps plain loads (from_memory). Sums only: max rows, whose
    NaN-propagating combine takes the shuffle port too, ran alike (0.95-1.08x); and the row
    kernels (rows.py) only where the row is read once: softmax and layer_norm rows ran 4-14%
    slower with aligned lines."""

    aligned_rows = True

    def body(self):
        outer = [lp for lp in self.kernel.loops if lp.kind == "parallel"]
        self.nest(outer, self.emit_horizontal, True)

    def sum_accumulators(self, lanes: int, dtype) -> int:
        """SUM_ACCUMULATORS vectors at every width where the kernel's data fits in the
        last-level cache; where it does not, STREAM_SUM_BYTES of them (2 at 512 bits, 4 at
        256, 8 at 128). Zen 4, 1 thread, float32 rows, interleaved in one process: from
        cache (1-32 MB), 8 zmm read 1.05-1.18x as fast as 2 and 1.0-1.05x a plain
        8-accumulator loop with no pairwise blocks; from memory (48-64 MB on this 2-vCPU
        guest), 2 read 1.03-1.10x as fast as 8 (1.09-1.11x at 2 threads), level with or
        faster than the plain vector loops tried (4 or 8 chains, unrolled, prefetching). At
        256 and 128 bits the counts read alike. A run-time extent counts as large. Row
        kernels (rows.py) keep ACCUMULATORS."""
        if from_memory(self.kernel):
            return max(1, STREAM_SUM_BYTES * 8 // (lanes * dtype.bits))
        return SUM_ACCUMULATORS


def from_memory(kernel: Kernel) -> bool:
    """Whether a kernel's data is larger than the last-level cache (a run-time extent
    counts as large)."""
    return bytes_moved(kernel) > _last_level_cache()


@functools.lru_cache(maxsize=1)
def _last_level_cache() -> int:
    """Bytes of the host's last-level cache, as the OS reports it (a guest may report the
    whole socket's: its large sums then count as read from cache)."""
    sizes = cache_sizes()
    return sizes[max(sizes)]


class VerticalEmitter(ReductionEmitter):
    """The outer parallel loops, then accumulators across the reduce loops per lane of
    the inner parallel (vector) loop."""

    def body(self):
        k = self.kernel
        self.nest([lp for lp in k.loops[:-1] if lp.kind == "parallel"], self.emit_vertical,
                  True)


def _vertical_work(kernel: Kernel, plan) -> tuple:
    """A streaming column reduction is split in halves at most (see work.grain)."""
    return kernel.range_extent, grain(kernel, halves=streams_by_rows(kernel))


register(KindEntry(Kind.REDUCE_HORIZONTAL, HorizontalEmitter))
register(KindEntry(Kind.REDUCE_VERTICAL, VerticalEmitter, work=_vertical_work))

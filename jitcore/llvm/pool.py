"""Pooling kernels (kind "pool", see passes/pool.py): each call runs output rows
[start, stop) (batch, channel and output row merged), so every thread count computes each
output the same way: bitwise identical results.

A vectorized kernel runs each row `lanes` output columns at a time. The columns whose windows
lie wholly inside the input and whose reads stay inside the input row
(`Window1d.vector_range`) need no checks: each tap of a vector is one load of stride*lanes
consecutive input elements and a shuffle that keeps every stride-th (3x3 stride-2 pooling
reads two vectors and permutes them, never gathers); the taps of a window row are unrolled
and several vectors share a trip (independent accumulators). The last vector may overlap the
one before it (recomputing the same values), so there is no tail. The border columns run as
vectors too, their padding taps masked off (masked loads, the accumulator kept). Kernels that
are not vectorized run one output at a time over the valid taps only, read from per-output
tables. Padding is never read: for max it acts as -inf, for an average the divisor tables
count it or not. Max keeps `v > acc ? v : acc` per tap (torch's loop; one vmaxps) and a
NaN flag aside, so a NaN anywhere in the window gives NaN.
"""
from __future__ import annotations

from llvmlite import ir

from jitcore.ir.dtypes import bool_ as dt_bool
from jitcore.ir.ops import Op
from jitcore.passes.kernel import Acc, Gather, Kernel, Kind, Load, walk

from . import irutil as u
from .codegen import KernelEmitter
from .opemit import emit
from .registry import KindEntry, register

_FIELDS = ("first", "lo", "hi", "div")
VECTORS_PER_TRIP = 4     # independent accumulators per trip (the max/add chain's latency)


class PoolEmitter(KernelEmitter):
    """Emits one pooling kernel (Kind.POOL): output rows [start, stop), each a row of
    windows."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        self.pool = kernel.pool
        self.combine_op = Op.ADD         # of averages (max has its own, see _reduce_window)
        self.border = False      # vectors whose taps may fall outside the row (masked)
        self.identity = float("-inf") if self.pool.spec.kind == "max" else 0.0

    # -- window tables ------------------------------------------------------------------------
    def _table(self, name: str, values: tuple):
        ty = ir.ArrayType(u.I64, max(len(values), 1))
        g = ir.GlobalVariable(self.b.module, ty, name=f"{self.fn.name}.{name}")
        g.global_constant, g.linkage = True, "internal"
        g.initializer = ir.Constant(ty, [u.I64(v) for v in values] or [u.I64(0)])
        return g

    def _tables(self, prefix: str, window) -> dict:
        return {f: self._table(f"{prefix}_{f}", getattr(window, f)) for f in _FIELDS}

    def _read(self, tables: dict, i) -> dict:
        return {f: self.b.load(self.b.gep(t, [u.I64(0), i])) for f, t in tables.items()}

    # -- expressions ----------------------------------------------------------------------------
    def _load(self, node: Load, lanes: int):
        """A load at the env's coordinates; with lanes, consecutive output columns per lane.
        A gather adds its checked index (legality vectorizes only gathers whose index is
        the same for every lane: it is read once, as a scalar)."""
        b, p = self.b, self.pool
        if isinstance(node, Gather):
            at = self.checked_index(node, self.value(node.index, 1, {}, load=self._load))
            if at is None:                       # an empty gathered axis: nothing to read
                return u.const(u.value_type(node.dtype, lanes), 0)
        else:
            at = self.index(node.offset)
        ptr = b.gep(self.base_ptr(node.buffer), [at])
        elem = u.memory_type(node.dtype)
        step = node.offset.coeff(p.iw) * (p.cols.stride or 0) + node.offset.coeff(p.col) \
            if lanes > 1 else 0
        if step == 0:
            val = u.splat(b, b.load(ptr, align=1), lanes)
        else:
            run = ir.VectorType(elem, lanes * step)
            vptr = b.bitcast(ptr, run.as_pointer())
            if self.border and node.offset.coeff(p.iw):   # elements outside the row: not read
                inside = self._inside(lanes * step, 1)
                val = u.masked_load(b, vptr, inside, run)
            else:
                val = b.load(vptr, align=1)
            if step > 1:             # every step-th element of the run: one lane per column
                keep = ir.Constant(ir.VectorType(u.I32, lanes),
                                   [u.I32(j * step) for j in range(lanes)])
                val = b.shuffle_vector(val, ir.Constant(run, ir.Undefined), keep)
        if node.dtype.name == "bool":
            val = b.icmp_unsigned("!=", val, u.const(val.type, 0))
        return val

    def _inside(self, count: int, spacing: int):
        """<count x i1>: whether input column env[iw] + i*spacing is inside the row."""
        b, p = self.b, self.pool
        cols = b.add(u.splat(b, self.env[p.iw], count),
                     ir.Constant(ir.VectorType(u.I64, count),
                                 [u.I64(i * spacing) for i in range(count)]))
        low = b.icmp_signed(">=", cols, u.const(cols.type, 0))
        return b.and_(low, b.icmp_signed("<", cols, u.const(cols.type, p.cols.size)))

    def pooled(self, root, lanes: int, acc=None):
        """`root` with its loads read at the current tap and `Acc` = acc."""
        memo = {id(n): acc for n in walk([root]) if isinstance(n, Acc)}
        return super().value(root, lanes, memo, load=self._load)

    # -- the kernel -----------------------------------------------------------------------------
    def body(self):
        b, p = self.b, self.pool
        row_tables, col_tables = self._tables("rows", p.rows), self._tables("cols", p.cols)
        self.col_tables = col_tables
        width = p.col.extent
        with u.for_range(b, self.start, self.stop, 1, name="row") as r:
            self.env[p.row] = r
            self.row = self._read(row_tables, self.index(p.oh))
            if self.kernel.vectorized:
                self.vector_row(width)
            else:
                self.scalar_columns(0, width)

    def vector_row(self, width: int):
        """A row by vectors: the full windows (`vector_range`) unmasked, then the border
        columns by vectors whose padding taps are masked off: those covering [0, a), then
        those covering [e, width) (the last ending at width)."""
        lanes = self.kernel.lanes
        a, e = self.pool.cols.vector_range(lanes)
        self.vector_columns(a, e)
        self.border = True
        for ow0 in [min(x, width - lanes) for x in range(0, a, lanes)] + \
                [max(width - lanes - x, 0) for x in range(0, width - e, lanes)]:
            self.border_vector(ow0)
        self.border = False

    def _reduce_window(self, lanes: int, col_lo, col_hi, col_firsts: list, unrolled: bool):
        """The window's reduction at the current row, for each column start in `col_firsts`
        (independent accumulators: several vectors of columns hide the latency of the
        combine chain): the valid rows of taps (from the row tables), and the taps of each
        row: `unrolled` all of them (vectors of columns whose windows are full), else
        [col_lo, col_hi) from the column tables."""
        b, p = self.b, self.pool
        accs = [u.alloca_once(b, u.value_type(p.dtype, lanes), name="pacc") for _ in col_firsts]
        # max: a running `v > acc ? v : acc` (one vmaxps) and, aside, whether a NaN was seen
        # (cheaper than a NaN-propagating max per tap; the same result, as torch's loop)
        nans = [u.alloca_once(b, u.value_type(dt_bool, lanes), name="pnan") for _ in accs] \
            if p.spec.kind == "max" else []
        for acc in accs:
            b.store(u.const(acc.type.pointee, self.identity), acc)
        for nan in nans:
            b.store(u.const(nan.type.pointee, 0), nan)

        def tap(k):
            acc, v, old = accs[k], self.pooled(p.source, lanes), b.load(accs[k])
            inside = self._inside(lanes, p.cols.stride) if self.border else None
            if nans:
                new = b.select(b.fcmp_ordered(">", v, old), v, old)
                seen = b.fcmp_unordered("uno", v, v)
                seen = b.and_(seen, inside) if inside is not None else seen
                b.store(b.or_(b.load(nans[k]), seen), nans[k])
            else:
                new = emit(b, self.combine_op, p.dtype, p.dtype, [old, v])
            if inside is not None:   # lanes whose tap is padding keep their accumulator
                new = b.select(inside, new, old)
            b.store(new, acc)

        with u.for_range(b, self.row["lo"], self.row["hi"], 1, name="kh") as kh:
            self.env[p.ih] = b.add(self.row["first"], b.mul(kh, u.I64(p.rows.step)))
            if unrolled:
                for kw in range(p.cols.taps):
                    for k, first in enumerate(col_firsts):
                        self.env[p.iw] = b.add(first, u.I64(kw * p.cols.step))
                        tap(k)
            else:
                with u.for_range(b, col_lo, col_hi, 1, name="kw") as kw:
                    self.env[p.iw] = b.add(col_firsts[0], b.mul(kw, u.I64(p.cols.step)))
                    tap(0)
        totals = [b.load(acc) for acc in accs]
        nan = u.const(u.value_type(p.dtype, lanes), float("nan"))
        return [b.select(b.load(seen), nan, t) for seen, t in zip(nans, totals)] if nans \
            else totals

    def _finish(self, total, lanes: int, col_div):
        """Divide an average, run the epilogue, store. col_div: this column's divisor
        factor, or (border vectors) a vector of them."""
        b, p = self.b, self.pool
        if p.spec.kind == "avg":
            row_div = self.row["div"]
            if isinstance(col_div.type, ir.VectorType):
                row_div = u.splat(b, row_div, lanes)
            div = b.sitofp(b.mul(row_div, col_div), u.value_type(p.dtype, u.lanes_of(col_div)))
            total = b.fdiv(total, u.splat(b, div, lanes) if u.lanes_of(div) == 1 else div)
        st = self.kernel.stores[0]
        val = self.pooled(st.value, lanes, acc=total)
        ptr = b.gep(self.base_ptr(st.buffer), [self.index(st.offset)])
        if lanes > 1:
            ptr = b.bitcast(ptr, val.type.as_pointer())
        b.store(val, ptr, align=1)

    def scalar_columns(self, lo: int, hi: int):
        if lo >= hi:
            return
        b, p = self.b, self.pool
        with u.for_range(b, u.I64(lo), u.I64(hi), 1, name="ow") as ow:
            self.env[p.col] = ow
            col = self._read(self.col_tables, ow)
            total, = self._reduce_window(1, col["lo"], col["hi"], [col["first"]], False)
            self._finish(total, 1, col["div"])

    def border_vector(self, ow0: int):
        """The `lanes` columns from ow0, some of whose taps fall in the padding."""
        b, p, lanes = self.b, self.pool, self.kernel.lanes
        self.env[p.col] = u.I64(ow0)
        total, = self._reduce_window(lanes, None, None, [u.I64(ow0 * p.cols.stride - p.cols.pad)],
                                     True)
        divs = b.load(b.bitcast(b.gep(self.col_tables["div"], [u.I64(0), u.I64(ow0)]),
                                ir.VectorType(u.I64, lanes).as_pointer()), align=8)
        self._finish(total, lanes, divs)

    def vector_columns(self, a: int, e: int):
        """Columns [a, e) by vectors, VECTORS_PER_TRIP at a time; vectors that would pass e
        end at e instead (they overlap their predecessors and recompute the same values)."""
        if a >= e:
            return
        b, p, lanes = self.b, self.pool, self.kernel.lanes
        vectors = -(-(e - a) // lanes)
        per_trip = min(VECTORS_PER_TRIP, vectors)
        with u.for_range(b, u.I64(0), u.I64(-(-vectors // per_trip)), 1, name="ovec") as i:
            trip0 = b.mul(i, u.I64(per_trip * lanes))
            starts = [u.imin(b, b.add(trip0, u.I64(a + v * lanes)), u.I64(e - lanes))
                      for v in range(per_trip)]
            firsts = [b.sub(b.mul(ow0, u.I64(p.cols.stride)), u.I64(p.cols.pad))
                      for ow0 in starts]
            totals = self._reduce_window(lanes, None, None, firsts, True)
            for ow0, total in zip(starts, totals):
                self.env[p.col] = ow0
                self._finish(total, lanes, u.I64(p.cols.taps))


def report(kernel: Kernel) -> tuple:
    """The loop nest, then the window each output reduces."""
    spec = kernel.pool.spec
    window = "adaptive window" if spec.adaptive else \
        f"window {spec.kernel[0]}x{spec.kernel[1]} (reduce {spec.kind})"
    return None, f"{kernel.loop_nest}, {window}"


register(KindEntry(Kind.POOL, PoolEmitter, report=report))

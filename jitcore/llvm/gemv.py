"""GEMV kernels: a matrix times a vector, reading the matrix once at the memory bandwidth.

A matmul whose M or N is 1 (passes/kernel.py: `Gemm.matvec`, kernel kind "gemv") computes

    y[batch, i] = epilogue(sum over k of Mat[batch, i, k] * x[batch, k])

over its output axis i (`Gemm.out_var`): Mat is A and x is B's column when N is 1 (`A @ v`),
Mat is B transposed and x is A's row when M is 1 (`v @ A`). Each element of Mat is used once,
so the kernel streams Mat from memory and keeps everything else in registers or L1; packing
(as the GEMM does, and its weight prepacking) would only copy it. Two loop shapes, chosen by
the axis along which Mat is contiguous:

- "rows" (Mat contiguous along k: `A @ v`, `v @ A.T`): each output is the dot product of a
  row with x. GROUP rows at a time share each vector of x; every row has UNROLL vector
  accumulators (fused multiply-adds along k; the leftover whole vectors go to the first, a
  masked last vector to the last), summed in a fixed tree at the end. A work item is one
  vector of outputs (`lanes` rows), finished through the epilogue as one vector.
- "columns" (Mat contiguous along i: `v @ A`, `A.T @ v`): axpy. A work item is a block of
  outputs (up to COLUMN_BLOCK_BYTES, kept in a stack buffer in L1); the rows of Mat stream
  through it STEP at a time: y += (x[k] Mat[k] + x[k+1] Mat[k+1]) + (...), a pairwise sum of
  STEP products added to y (the rows left over are added one at a time).
Mat strided along both axes runs the rows shape with element-wise loads (correct, slower); so
does a strided x in the rows shape.

- "panels" (Mat a constant, prepacked by gemv_pack.py into [panel][k][P]): a work item is one
  panel of P = PANEL_VECTORS vectors of outputs; per k, one broadcast of x[k] and P/lanes
  contiguous loads feed P/lanes x K_ACCS vector accumulators (k alternating between the
  K_ACCS), so the matrix streams once, in memory order, with no horizontal sums. The sum
  runs in two levels: each chunk of CHUNK k's into the accumulators, summed in a fixed tree
  and added to the panel's totals (an error bound of about CHUNK / K_ACCS + K / CHUNK
  roundings, below the columns shape's K / STEP for K > 256).

Under matmul_precision="bf16" (jitcore/llvm/bf16.py: precision "bf16-emulated") both
operands are rounded to bf16 as they are loaded, and the products accumulate in float32.

Every output is computed by one work item, in an order that depends only on the shapes: the
result is the same for any thread count (work is split over outputs, never over k).

Run-time extents (jc.jit(dynamic=True): a decode step's attention, whose K or outputs are
the cache length): K's loop bounds are computed from the call's extent, in the same order as
at a static K, so the sums are bitwise those of a per-shape compile. A run-time output extent
gives one work item per batch entry (heads run in parallel), which loops over its outputs a
block at a time; the batch axes' extents may be run-time too. Panels (constant matrices)
have static extents.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from jitcore.passes.kernel import Kind
from jitcore.passes.symbolic import monomial

from . import bf16
from . import irutil as u
from .epilogue import EpilogueEmitter
from .registry import KindEntry, register
from .work import grain

GROUP = 4                  # rows: rows that share each load of x
UNROLL = 2                 # rows: vector accumulators per row
STEP = 8                   # columns: rows of Mat per pass over the block, summed pairwise
                           # (8: float32 errors as OpenBLAS's, 4 measured 1-3x larger)
PANEL_VECTORS = 2          # panels: vectors of outputs per panel (4 measured no faster)
K_ACCS = 2                 # panels: accumulators per vector of outputs, k alternating
CHUNK = 128                # panels: k's summed in registers before the totals take them
COLUMN_BLOCK_BYTES = 8 * 1024   # columns: the outputs one item accumulates (in L1)
MIN_COLUMN_BLOCK = 256     # columns: no narrower block (short rows defeat the prefetchers)...
                           # ...unless the threads need more items than that gives


@dataclass(frozen=True)
class GemvPlan:
    layout: str         # "rows" or "columns"
    lanes: int          # elements per vector
    block: int          # outputs per work item (a multiple of lanes)
    blocks: int         # work items per batch entry (1 at a run-time output extent)
    batch: int          # batch entries (c times run-time extents: jc.jit(dynamic=True))
    run_time_outputs: bool = False   # each item loops over its entry's outputs by blocks

    @property
    def items(self) -> int:
        return self.batch * self.blocks


def operands(g) -> tuple:
    """(Mat, x, i, other) of a matrix-vector Gemm: the loads read as Mat[i, k] and x[k], the
    output axis, and the axis of extent 1."""
    if g.out_var is g.m:
        return g.a, g.b, g.m, g.n
    return g.b, g.a, g.n, g.m


def layout(g) -> str:
    """"panels" when Mat is prepacked (gemv_pack.py); "columns" when it is contiguous along
    the outputs (and not along k); else "rows"."""
    if g.prepacked:
        return "panels"
    mat, _, i, _ = operands(g)
    if mat.offset.coeff(g.k) == 1:
        return "rows"
    return "columns" if mat.offset.coeff(i) == 1 else "rows"


def plan(kernel, vector_bits: int, threads: int) -> GemvPlan:
    """Rows: one vector of outputs per item. Columns: blocks of outputs as wide as L1 allows,
    narrower where `threads` need 2 items each (never below MIN_COLUMN_BLOCK outputs)."""
    g = kernel.gemm
    size = g.dtype.itemsize
    lanes = max(vector_bits // (8 * size), 1)
    batch = math.prod(v.extent for v in g.batch)
    outputs = g.out_var.extent
    shape = layout(g)
    widest = max(COLUMN_BLOCK_BYTES // size // lanes * lanes, lanes)
    if monomial(outputs) is not None:          # known at run time: one item per batch entry
        return GemvPlan(shape, lanes, lanes if shape == "rows" else widest, 1, batch, True)
    if shape == "rows":
        block = lanes
    elif shape == "panels":
        block = lanes * max(min(PANEL_VECTORS, -(-outputs // lanes)), 1)
    else:
        static_batch = batch if monomial(batch) is None else 0
        split = -(-2 * threads // static_batch) if threads > 1 and static_batch else 1
        block = max(-(-outputs // split), min(MIN_COLUMN_BLOCK, outputs), 1)
        block = min(-(-block // lanes) * lanes, widest)
    return GemvPlan(shape, lanes, block, -(-outputs // block), batch)


class GemvEmitter(EpilogueEmitter):
    """Emits one gemv kernel (Kind.GEMV) with its plan (`plan`: a GemvPlan)."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p = self.p = plan                  # the GemvPlan (registry: plan)
        self.g = kernel.gemm
        self.mat, self.x, self.i, self.other = operands(self.g)
        self.elem = u.value_type(self.g.dtype)
        self.vty = ir.VectorType(self.elem, p.lanes)
        self.setup_epilogue(self.i, p.lanes)
        # the operands' values as the products use them (bf16-rounded under the bf16 policy)
        emulated = self.g.precision == "bf16-emulated"
        self.operand = (lambda x: bf16.round_ir(self.b, x)) if emulated else (lambda x: x)

    def body(self):
        b, p, g = self.b, self.p, self.g
        self.env[self.other] = u.I64(0)
        item = {"rows": self.rows_item, "panels": self.panels_item,
                "columns": self.columns_item}[p.layout]
        outputs = self.extent(self.i.extent)
        with u.for_range(b, self.start, self.stop, 1, name="item") as t:
            blocks = u.I64(max(p.blocks, 1))                 # (no item runs when 0)
            flat, blk = b.sdiv(t, blocks), b.srem(t, blocks)
            for v in reversed(g.batch):                       # the batch index, last fastest
                extent = self.extent(v.extent)
                self.env[v] = b.srem(flat, extent)
                flat = b.sdiv(flat, extent)
            if p.run_time_outputs:
                with u.for_range(b, u.I64(0), outputs, p.block, name="block",
                                 partial=True) as lo:
                    item(lo, u.imin(b, u.I64(p.block), b.sub(outputs, lo)))
            else:
                lo = b.mul(blk, u.I64(p.block))
                item(lo, u.imin(b, u.I64(p.block), b.sub(outputs, lo)))

    def floor_to(self, n: int, unit: int):
        """The multiple of `unit` at or below extent n, as i64 (computed at run time where n
        is a run-time extent)."""
        if monomial(n) is None:
            return u.I64(n // unit * unit)
        return self.b.mul(self.b.sdiv(self.extent(n), u.I64(unit)), u.I64(unit))

    # -- element access -----------------------------------------------------------------------
    def pointer(self, load, k, i=None):
        """Address of load's element at k (and output i, if given; else env's)."""
        self.env[self.g.k] = k
        if i is not None:
            self.env[self.i] = i
        return self.b.gep(self.base_ptr(load.buffer), [self.index(load.offset)])

    def along_k(self, load, k0, count):
        """lanes elements of `load` at k0, k0+1, ... (env fixes the other vars); `count`: the
        valid ones (None: all), the rest zero and not read; as the products use them."""
        return self.operand(self.read_along_k(load, k0, count))

    def read_along_k(self, load, k0, count):
        """along_k's elements as stored."""
        b, p, k = self.b, self.p, self.g.k
        if load.offset.coeff(k) == 1:
            ptr = b.bitcast(self.pointer(load, k0), self.vty.as_pointer())
            if count is None:
                return b.load(ptr, align=1)
            return u.masked_load(b, ptr, u.lane_mask(b, count, p.lanes), self.vty)
        vec = u.const(self.vty, 0)
        last = u.I64(max(k.extent - 1, 0)) if monomial(k.extent) is None else \
            b.sub(self.extent(k.extent), u.I64(1))     # (count given: K > 0)
        for c in range(p.lanes):       # element by element; past `count`, the last element
            kc = b.add(k0, u.I64(c))
            if count is not None:
                kc = u.imin(b, kc, last)
            x = b.load(self.pointer(load, kc))
            if count is not None:
                x = b.select(b.icmp_signed(">", count, u.I64(c)), x, u.const(self.elem, 0))
            vec = b.insert_element(vec, x, u.I32(c))
        return vec

    # -- rows: dot products ---------------------------------------------------------------------
    def rows_item(self, lo, count):
        """Outputs lo .. lo+count (count <= lanes): GROUP rows at a time, then single rows;
        the sums go to a stack vector, finished by the epilogue as one vector."""
        b = self.b
        tile = u.alloca_once(b, self.vty, name="sums")
        tile.align = 64
        b.store(u.const(self.vty, 0), tile)
        sums = b.bitcast(tile, self.elem.as_pointer())
        hi = b.add(lo, count)
        grouped = b.add(lo, b.mul(b.sdiv(count, u.I64(GROUP)), u.I64(GROUP)))
        for start, stop, rows in ((lo, grouped, GROUP), (grouped, hi, 1)):
            with u.for_range(b, start, stop, rows, name=f"rows{rows}") as row0:
                for r, total in enumerate(self.dot_rows(row0, rows)):
                    slot = b.add(b.sub(row0, lo), u.I64(r))
                    b.store(total, b.gep(sums, [slot]))
        self.env[self.i] = lo
        self.finish(b.load(tile), count)

    def dot_rows(self, row0, rows: int) -> list:
        """The dot products of Mat rows row0 .. row0+rows with x, as scalars."""
        b, p, k = self.b, self.p, self.g.k
        lanes = p.lanes
        accs = [[u.alloca_once(b, self.vty, name=f"acc{r}_{a}") for a in range(UNROLL)]
                for r in range(rows)]
        for row in accs:
            for acc in row:
                b.store(u.const(self.vty, 0), acc)

        def step(k0, a, count=None):
            xv = self.along_k(self.x, k0, count)
            for r in range(rows):
                self.env[self.i] = b.add(row0, u.I64(r))
                mv = self.along_k(self.mat, k0, count)
                acc = accs[r][a]
                b.store(u.intrinsic(b, "fmuladd", [mv, xv, b.load(acc)]), acc)

        extent = self.extent(k.extent)
        unrolled = self.floor_to(k.extent, lanes * UNROLL)
        whole = self.floor_to(k.extent, lanes)
        with u.for_range(b, u.I64(0), unrolled, lanes * UNROLL, name="ku") as k0:
            for a in range(UNROLL):
                step(b.add(k0, u.I64(a * lanes)), a)
        with u.for_range(b, unrolled, whole, lanes, name="kv") as k0:
            step(k0, 0)
        if monomial(k.extent) is not None:
            with b.if_then(b.icmp_signed("<", whole, extent)):
                step(whole, UNROLL - 1, b.sub(extent, whole))
        elif k.extent % lanes:
            step(whole, UNROLL - 1, u.I64(k.extent % lanes))
        totals = []
        for row in accs:
            vecs = [b.load(acc) for acc in row]
            while len(vecs) > 1:                     # fixed tree: deterministic
                vecs = [b.fadd(x, y) for x, y in zip(vecs[::2], vecs[1::2])] + \
                    vecs[len(vecs) // 2 * 2:]
            totals.append(u.reduce_lanes(b, vecs[0], b.fadd))
        return totals

    # -- panels: prepacked -------------------------------------------------------------------------
    def panels_item(self, lo, count):
        """Outputs lo .. lo+count (count <= block): their panel, packed[lo / block][k][c],
        read front to back; each vector of totals finished by the epilogue."""
        b, p = self.b, self.p
        vectors = p.block // p.lanes
        extent = self.g.k.extent
        mat = self.base_ptr(self.mat.buffer)
        panel = b.mul(lo, u.I64(extent))             # the panel's first element
        totals = [u.alloca_once(b, self.vty, name=f"total{r}") for r in range(vectors)]
        accs = [[u.alloca_once(b, self.vty, name=f"acc{r}_{a}") for a in range(K_ACCS)]
                for r in range(vectors)]
        for t in totals:
            b.store(u.const(self.vty, 0), t)

        def step(kk, a):
            x = u.splat(b, self.operand(b.load(self.pointer(self.x, kk))), p.lanes)
            row = b.add(panel, b.mul(kk, u.I64(p.block)))
            for r in range(vectors):
                ptr = b.gep(mat, [b.add(row, u.I64(r * p.lanes))])
                w = b.load(b.bitcast(ptr, self.vty.as_pointer()), align=1)
                acc = accs[r][a]
                b.store(u.intrinsic(b, "fmuladd", [w, x, b.load(acc)]), acc)

        def chunk(k0, n: int):
            """k0 .. k0+n into zeroed accumulators, then their tree into the totals."""
            for row in accs:
                for acc in row:
                    b.store(u.const(self.vty, 0), acc)
            paired = n // K_ACCS * K_ACCS
            with u.for_range(b, k0, b.add(k0, u.I64(paired)), K_ACCS, name="kp",
                             unroll=False) as kk:
                for a in range(K_ACCS):
                    step(b.add(kk, u.I64(a)), a)
            for j in range(paired, n):
                step(b.add(k0, u.I64(j)), 0)
            for row, total in zip(accs, totals):
                vecs = [b.load(acc) for acc in row]
                while len(vecs) > 1:                 # fixed tree: deterministic
                    vecs = [b.fadd(x, y) for x, y in zip(vecs[::2], vecs[1::2])] + \
                        vecs[len(vecs) // 2 * 2:]
                b.store(b.fadd(b.load(total), vecs[0]), total)

        whole = extent // CHUNK * CHUNK
        with u.for_range(b, u.I64(0), u.I64(whole), CHUNK, name="kchunk", unroll=False) as k0:
            chunk(k0, CHUNK)
        if whole < extent:
            chunk(u.I64(whole), extent - whole)
        for r, total in enumerate(totals):
            left = b.sub(count, u.I64(r * p.lanes))
            self.env[self.i] = b.add(lo, u.I64(r * p.lanes))
            if r == 0:                               # (an item has at least one output)
                self.finish(b.load(total), u.imin(b, left, u.I64(p.lanes)))
                continue
            with b.if_then(b.icmp_signed(">", left, u.I64(0))):
                self.finish(b.load(total), u.imin(b, left, u.I64(p.lanes)))

    # -- columns: axpy ----------------------------------------------------------------------------
    def columns_item(self, lo, count):
        """Outputs lo .. lo+count (count <= block) accumulated in a stack buffer while the
        rows of Mat stream through, then finished by the epilogue vector by vector."""
        b, p, k = self.b, self.p, self.g.k
        lanes = p.lanes
        buf = u.alloca_once(b, ir.ArrayType(self.vty, p.block // lanes), name="ys")
        buf.align = 64
        ys = b.bitcast(buf, self.vty.as_pointer())
        whole = b.sdiv(count, u.I64(lanes))
        tail = b.sub(count, b.mul(whole, u.I64(lanes)))
        nvec = b.sdiv(b.add(count, u.I64(lanes - 1)), u.I64(lanes))
        with u.for_range(b, u.I64(0), nvec, 1, name="zero") as v:
            b.store(u.const(self.vty, 0), b.gep(ys, [v]), align=64)

        def rows_pass(k0, rows: int):
            """y += the pairwise sum of x[k0 + j] * Mat[k0 + j] over j < rows."""
            xs = [u.splat(b, self.operand(b.load(self.pointer(self.x, b.add(k0, u.I64(j))))),
                          lanes) for j in range(rows)]
            starts = [self.pointer(self.mat, b.add(k0, u.I64(j)), lo) for j in range(rows)]
            tail_mask = u.lane_mask(b, tail, lanes)

            def update(v, mask):
                col = b.mul(v, u.I64(lanes))
                loads = []
                for s in starts:
                    ptr = b.bitcast(b.gep(s, [col]), self.vty.as_pointer())
                    loads.append(self.operand(b.load(ptr, align=1) if mask is None else
                                              u.masked_load(b, ptr, mask, self.vty)))
                y_ptr = b.gep(ys, [v])
                y = b.load(y_ptr, align=64)
                if rows == 1:
                    y = u.intrinsic(b, "fmuladd", [xs[0], loads[0], y])
                else:
                    terms = [u.intrinsic(b, "fmuladd", [xs[j + 1], loads[j + 1],
                                                        b.fmul(xs[j], loads[j])])
                             for j in range(0, rows, 2)]
                    while len(terms) > 1:
                        terms = [b.fadd(x, z) for x, z in zip(terms[::2], terms[1::2])]
                    y = b.fadd(y, terms[0])
                b.store(y, y_ptr, align=64)
            with u.for_range(b, u.I64(0), whole, 1, name="v") as v:
                update(v, None)
            with b.if_then(b.icmp_signed(">", tail, u.I64(0))):
                update(whole, tail_mask)

        stepped = self.floor_to(k.extent, STEP)
        with u.for_range(b, u.I64(0), stepped, STEP, name="kstep") as k0:
            rows_pass(k0, STEP)
        with u.for_range(b, stepped, self.extent(k.extent), 1, name="krest") as k0:
            rows_pass(k0, 1)
        with u.for_range(b, u.I64(0), nvec, 1, name="out") as v:
            self.env[self.i] = b.add(lo, b.mul(v, u.I64(lanes)))
            valid = u.imin(b, u.I64(lanes), b.sub(count, b.mul(v, u.I64(lanes))))
            self.finish(b.load(b.gep(ys, [v]), align=64), valid)

    # -- the epilogue ------------------------------------------------------------------------
    def finish(self, total, count):
        """The epilogue of `total` at env[i]: whole (count == lanes) or masked."""
        b = self.b
        whole = b.icmp_signed("==", count, u.I64(self.p.lanes))
        with b.if_else(whole) as (then, otherwise):
            with then:
                self.epilogue(total, None)
            with otherwise:
                self.epilogue(total, count)


def _work(kernel, plan: GemvPlan) -> tuple:
    """Work items: blocks of outputs, chunked by their cost."""
    return plan.items, grain(kernel, plan.items)


def report(kernel) -> tuple:
    """The loop nest, and how the products compute under the matmul precision policy."""
    return None, kernel.loop_nest + bf16.describe(kernel.gemm.precision)


register(KindEntry(Kind.GEMV, GemvEmitter, plan=plan, work=_work, report=report))

"""Depthwise convolution kernels (kind "depthwise"): a conv whose groups have one input
channel each (`passes.kernel.Conv.depthwise`), computed one channel plane at a time in NCHW.

A work item is (image n, input channel g, block of output rows, block of output columns):

1. The input rows the block reads are copied once into a zero-padded stack buffer (at most
   half of L1). With a column stride s each buffer row is stored de-interleaved by phase:
   phase p holds padded input columns p, p + s, p + 2s, ... so the tap (kh, kw) of output
   columns ow..ow+lanes-1 reads lanes consecutive elements of phase (kw * dw) % s. Every tap
   of every vector is then one plain unaligned load: no masks, no tap tables. (A row is
   read as wide vectors of s * lanes elements, masked where they pass the row's ends, and
   split into its phases by shuffles.)
2. For each of the group's output channels (a channel multiplier m > 1 reuses the buffer),
   each register tile of `rows` output rows x `nv` vectors along them sums its taps,
   unrolled: each input vector loaded from the buffer feeds every output row of the tile
   that uses it (a 3x3 tile of 4 rows loads 6 input rows for 12 rows' worth of taps). The
   taps' weights are broadcast once per channel when they fit in registers beside the
   sums (3x3), else once per tile.
3. The fused epilogue of the conv family (bias, folded batch norm, activations, residual
   adds) runs on each vector as it leaves the registers.

Each output is summed over its taps in one order (kh, then kw) by one item, whatever the
blocking and the thread count: results are bitwise identical for any number of threads.
Weights are read through their strides (constant or not, never prepacked): a channel's
k*k scalars.

Measured on Zen 4 (1 thread, against torch eager's oneDNN, shared machine): MobileNetV2's
3x3 layers at 65-170% of the copy bandwidth's roofline at batch 1 (their data is in L3) and
72-114% at batch 8, 1.6-3.6x faster than torch; 5x5 and 7x7 layers are compute bound (30-60%
of the roofline), at 1.1-2.8x torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from jitcore.passes.kernel import Kernel, Kind

from . import irutil as u
from .conv_base import ConvKernelEmitter
from .epilogue import short_epilogue
from .gemm import cache_sizes
from .registry import KindEntry, plan_items, register
from .target import full_rate_vector_bits

BUFFER_BYTES = cache_sizes()[1] // 2   # the stack buffer of one item's input rows
MAX_TILE_FMAS = 1024      # unrolled FMAs of one register tile (code size)


@dataclass(frozen=True)
class DepthwisePlan:
    lanes: int          # vector lanes (narrow output rows take narrower vectors)
    rows: int           # output rows per register tile
    nv: int             # vectors per register tile along a row
    vpr: int            # vectors per row of an item (its output columns: vpr * lanes)
    col_blocks: int
    row_block: int      # output rows per item (a multiple of rows)
    row_blocks: int
    mult: int           # output channels per input channel
    channels: int       # input channels (= groups)
    batch: int
    buf_rows: int       # input rows in the buffer
    phase_width: int    # elements per phase of a buffer row (a multiple of lanes)
    hoist: bool         # the weights stay in registers across an item's tiles

    @property
    def items(self) -> int:
        return self.batch * self.channels * self.row_blocks * self.col_blocks


def _extents(variables) -> tuple:
    return tuple(v.extent for v in variables)


def _lanes(ow: int, most: int, full_rate: int, least: int) -> int:
    """The vector width along output rows, from `most` lanes down to `least` (256 bits, or
    `most` if narrower): the least work per row, counting a vector narrower than
    `full_rate` lanes (target.full_rate_vector_bits: 256 bits on Zen 4 and AVX2 cores,
    512 on Intel's server cores) as a full-rate one; ties take the fewer lanes past the
    row's end, then the widest. Zen 4: a 56-wide row takes 7 vectors of 8 lanes rather than
    4 of 16 (measured 10% faster), a 7-wide row 8 lanes, a 28-wide row 16 (4 lanes were
    1.6x slower than 8 or 16). Ice Lake-SP (1 thread, bn + silu fused, CPU-time medians):
    4 vectors of 16 along a 56-wide row, 96x112x112/s2 0.88 -> 0.73 ms and 144x56x56
    0.84 -> 0.71 ms against 7 of 8; a 7-wide row keeps 8 lanes (16 read and wrote twice
    the buffer: 1152x7x7 5x5 0.19 -> 0.24 ms)."""
    best, lanes = None, most
    while lanes >= min(least, most):
        vectors = -(-ow // lanes)
        key = (vectors * max(lanes, full_rate), vectors * lanes - ow)
        if best is None or key < best[0]:
            best = (key, lanes)
        lanes //= 2
    return best[1]


def _tile(vectors: int, oh: int, kernel_rows: int, taps: int, stride_h: int,
          regs: int) -> tuple:
    """(rows, nv): nv vectors along a row (4, or more for planes of fewer than 4 rows such
    as a conv1d's; a row's last vectors form a narrower tile, so nothing is wasted), and
    the rows that cost least per output: the buffer loads per FMA, the rows computed past
    the output's end, and too few independent sums to hide the FMA latency (measured on
    Zen 4, 7x7 over 96x56x56: 16 sums in 4 x 4 ran 1.5x faster than 2 x 2, and 8 rows x 2
    no faster than 4 x 4)."""
    accumulators = regs // 2
    nv = max(min(vectors, accumulators // min(oh, 4), MAX_TILE_FMAS // taps), 1)
    best = None
    for rows in range(1, min(oh, 8, accumulators // nv) + 1):
        if rows * nv * taps > MAX_TILE_FMAS and rows > 1:
            break
        loads = ((rows - 1) * stride_h + kernel_rows) / (rows * kernel_rows)
        waste = -(-oh // rows) * rows / oh
        cost = waste * (1 + loads) * (1 + 2 / (rows * nv))
        if best is None or cost < best[0] - 1e-9:
            best = (cost, rows)
    return best[1], nv


def plan(kernel: Kernel, vector_bits: int, threads: int) -> DepthwisePlan:
    c = kernel.conv
    n, o, oh, ow = _extents(c.out_vars)
    kh, kw = _extents(c.w_vars[2:])
    (sh, sw), (dh, dw) = c.attrs.stride, c.attrs.dilation
    size = c.dtype.itemsize
    most = max(vector_bits // c.dtype.bits, 2)
    lanes = _lanes(ow, most, max(full_rate_vector_bits() // c.dtype.bits, 2),
                   max(256 // c.dtype.bits, 2))
    vectors = -(-ow // lanes)
    regs = 32 if vector_bits >= 512 else 16
    rows, nv = _tile(vectors, oh, kh, kh * kw, sh, regs)

    def width(vpr):                  # elements per phase of a buffer row
        return -(-(vpr * lanes + (kw - 1) * dw // sw) // lanes) * lanes

    def buf_rows(block):
        return (block - 1) * sh + (kh - 1) * dh + 1

    def fits(vpr, block):
        return buf_rows(block) * sw * width(vpr) * size <= BUFFER_BYTES

    # whole rows when one register tile of them fits, else column blocks of nv vectors
    vpr = vectors
    while vpr > nv and not fits(vpr, rows):
        vpr = (vpr - 1) // nv * nv
    col_blocks = -(-vectors // vpr)
    vpr = -(-vectors // col_blocks)
    # as many rows as fit, split evenly; more blocks where threads would wait
    block, top = rows, -(-oh // rows) * rows
    while block + rows <= top and fits(vpr, block + rows):
        block += rows
    row_blocks = -(-oh // block)
    while threads > 1 and n * c.attrs.groups * row_blocks * col_blocks < 4 * threads and \
            row_blocks < -(-oh // rows):
        row_blocks += 1
    per_block = -(-oh // row_blocks)
    block = -(-per_block // rows) * rows
    row_blocks = -(-oh // block)
    return DepthwisePlan(lanes, rows, nv, vpr, col_blocks, block, row_blocks,
                         o // c.attrs.groups, c.attrs.groups, n, buf_rows(block),
                         width(vpr), kh * kw + rows * nv + nv + 2 <= regs)


class DepthwiseEmitter(ConvKernelEmitter):
    """Emits one depthwise conv kernel (Kind.DEPTHWISE) with its plan (a DepthwisePlan)."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p, c = self.p, self.c
        self.ws = c.strides(c.w, c.w_vars)                       # o, c, kh, kw
        (self.sh, self.sw), pads, (self.dh, self.dw) = \
            c.attrs.stride, c.attrs.padding, c.attrs.dilation
        self.pt, self.pl = pads[0], pads[2]
        self.row_elems = self.sw * p.phase_width                 # one buffer row
        self.unrolled_epilogue = self.epilogue_vector and short_epilogue(kernel)

    def body(self):
        b, p = self.b, self.p
        buf = u.alloca_once(b, ir.ArrayType(self.elem, p.buf_rows * self.row_elems),
                            name="rows")
        buf.align = 64
        self.buf = b.bitcast(buf, self.elem.as_pointer())
        if not self.unrolled_epilogue:
            tile = u.alloca_once(b, ir.ArrayType(self.vty, p.rows * p.nv), name="tile")
            tile.align = 64
            self.tile = b.bitcast(tile, self.vty.as_pointer())
        with u.for_range(b, self.start, self.stop, 1, name="item", unroll=False) as t:
            col_block = b.srem(t, u.I64(p.col_blocks))
            t = b.sdiv(t, u.I64(p.col_blocks))
            row_block = b.srem(t, u.I64(p.row_blocks))
            t = b.sdiv(t, u.I64(p.row_blocks))
            g, n = b.srem(t, u.I64(p.channels)), b.sdiv(t, u.I64(p.channels))
            self.item(n, g, b.mul(row_block, u.I64(p.row_block)),
                      b.mul(col_block, u.I64(p.vpr * p.lanes)))

    def item(self, n, g, oh0, ow0):
        b, p = self.b, self.p
        self.fill(n, g, oh0, ow0)
        rows_here = u.imin(b, u.I64(p.row_block), b.sub(u.I64(self.oh), oh0))
        with u.for_range(b, u.I64(0), u.I64(p.mult), 1, name="mult", unroll=False) as j:
            oc = b.add(b.mul(g, u.I64(p.mult)), j)
            weights = self.weights(oc, [(i, j) for i in range(self.kh)
                                        for j in range(self.kw)]) if p.hoist else {}
            with u.for_range(b, u.I64(0), rows_here, p.rows, name="r", partial=True,
                             unroll=False) as r0:
                full = p.vpr // p.nv * p.nv
                with u.for_range(b, u.I64(0), u.I64(full), p.nv, name="v",
                                 unroll=False) as v0:
                    self.tile_sums(weights, n, oc, oh0, ow0, r0, v0, p.nv)
                if full < p.vpr:
                    self.tile_sums(weights, n, oc, oh0, ow0, r0, u.I64(full), p.vpr - full)

    # -- the input rows of an item --------------------------------------------------------
    def fill(self, n, g, oh0, ow0):
        """Buffer row r = padded input row oh0 * sh + r; phase q of it the padded columns
        (ow0 + i) * sw + q, i < phase_width: zero outside the input."""
        b, p = self.b, self.p
        wide = self.sw * p.lanes
        plane = b.add(u.I64(self.c.x.offset.const),
                      b.add(b.mul(n, u.I64(self.xs[0])), b.mul(g, u.I64(self.xs[1]))))
        ih0 = b.sub(b.mul(oh0, u.I64(self.sh)), u.I64(self.pt))
        col0 = b.sub(b.mul(ow0, u.I64(self.sw)), u.I64(self.pl))
        x_base = self.base_ptr(self.c.x.buffer)
        with u.for_range(b, u.I64(0), u.I64(p.buf_rows), 1, name="fr", unroll=False) as r:
            ih = b.add(ih0, r)
            row_ok = b.icmp_unsigned("<", ih, u.I64(self.h))
            row = b.add(plane, b.mul(ih, u.I64(self.xs[2])))
            dst = b.mul(r, u.I64(self.row_elems))
            with u.for_range(b, u.I64(0), u.I64(p.phase_width), p.lanes, name="fc",
                             unroll=False) as i0:
                col = b.add(col0, b.mul(i0, u.I64(self.sw)))
                data = self.read(x_base, row, col, row_ok, wide)
                for q in range(self.sw):
                    part = data if self.sw == 1 else b.shuffle_vector(
                        data, data, _indices(range(q, wide, self.sw)))
                    at = b.add(dst, b.add(u.I64(q * p.phase_width), i0))
                    b.store(part, b.bitcast(b.gep(self.buf, [at]), self.vty.as_pointer()),
                            align=min(64, p.lanes * self.c.dtype.itemsize))

    def read(self, base, row, col, row_ok, wide: int):
        """`wide` input elements of a row from column col on (zero outside the row, and
        everywhere when not row_ok): a plain load inside, a masked one at the edges."""
        b = self.b
        wty = ir.VectorType(self.elem, wide)
        ptr = b.gep(base, [b.add(row, b.mul(col, u.I64(self.xs[3])))])
        if self.xs[3] != 1:          # strided rows (a channels-last view): a gather
            step = self.xs[3] * self.c.dtype.itemsize
            addr = b.add(u.splat(b, b.ptrtoint(ptr, u.I64), wide),
                         _indices([e * step for e in range(wide)], u.I64))
            ptrs = b.inttoptr(addr, ir.VectorType(self.elem.as_pointer(), wide))
            mask = self.row_mask(col, row_ok, wide)
            fnty = ir.FunctionType(wty, [ptrs.type, u.I32, mask.type, wty])
            fn = u.declare_intrinsic(b.module, "masked.gather", [wty, ptrs.type], fnty)
            return b.call(fn, [ptrs, u.I32(self.c.dtype.itemsize), mask, u.const(wty, 0)])
        vptr = b.bitcast(ptr, wty.as_pointer())
        inside = b.and_(row_ok, b.and_(b.icmp_signed(">=", col, u.I64(0)),
                                       b.icmp_signed("<=", b.add(col, u.I64(wide)),
                                                     u.I64(self.w))))
        with b.if_else(inside, likely=True) as (then, otherwise):
            with then:
                plain = b.load(vptr, align=1)
                plain_bb = b.block
            with otherwise:
                masked = self.masked_read(ptr, col, row_ok, wide)
                masked_bb = b.block
        out = b.phi(wty)
        out.add_incoming(plain, plain_bb)
        out.add_incoming(masked, masked_bb)
        return out

    def masked_read(self, ptr, col, row_ok, wide: int):
        """`wide` elements from ptr (column col), the lanes outside the row zero: masked
        loads of one vector each, joined. (One masked load wider than the target's vectors
        read one element past the row at x86-64-v3, LLVM 22: a 16-wide read of a stride-2
        depthwise conv's padded row returned the next row's first element in lane 8.)"""
        b, lanes = self.b, self.p.lanes
        vty = ir.VectorType(self.elem, lanes)
        parts = []
        for k in range(0, wide, lanes):
            at = b.bitcast(b.gep(ptr, [u.I64(k)]), vty.as_pointer())
            mask = self.row_mask(b.add(col, u.I64(k)), row_ok, lanes)
            parts.append(u.masked_load(b, at, mask, vty))
        while len(parts) > 1:                  # joined in pairs (a zero vector pads)
            if len(parts) % 2:
                parts.append(u.const(parts[0].type, 0))
            half = parts[0].type.count
            parts = [b.shuffle_vector(parts[i], parts[i + 1], _indices(range(2 * half)))
                     for i in range(0, len(parts), 2)]
        whole = parts[0]
        return whole if whole.type.count == wide else \
            b.shuffle_vector(whole, whole, _indices(range(wide)))

    def row_mask(self, col, row_ok, wide: int):
        """The lanes of `wide` elements from column col that lie inside the input."""
        b = self.b
        # (i32 lanes: LLVM 22 lowered a <16 x i1> mask made from i64 lanes wrongly for the
        # AVX2 masked loads of a 16-wide read, lane 8 read past the row at x86-64-v3)
        cols = b.add(u.splat(b, b.trunc(col, u.I32), wide), _indices(range(wide), u.I32))
        inside = b.icmp_unsigned("<", cols, u.const(ir.VectorType(u.I32, wide), self.w))
        return b.and_(inside, u.splat(b, row_ok, wide))

    # -- sums ---------------------------------------------------------------------------------
    def weights(self, oc, taps) -> dict:
        """(kh, kw) -> the tap's weight of output channel oc, broadcast, for the taps given."""
        b, c = self.b, self.c
        so, _, skh, skw = self.ws
        base = b.add(u.I64(c.w.offset.const), b.mul(oc, u.I64(so)))
        w_base = self.base_ptr(c.w.buffer)
        out = {}
        for i, j in taps:
            at = b.add(base, u.I64(i * skh + j * skw))
            out[i, j] = u.splat(b, b.load(b.gep(w_base, [at])), self.p.lanes)
        return out

    def tile_sums(self, weights, n, oc, oh0, ow0, r0, v0, nv: int):
        """Output rows r0..r0+rows-1 (of the item) x vectors v0..v0+nv-1: the taps summed in
        registers, then the epilogue. `weights`: the taps' broadcast weights (those missing
        are loaded in the tile where first used)."""
        b, p = self.b, self.p
        weights = dict(weights)
        zero = u.const(self.vty, 0)
        accs = [[zero] * nv for _ in range(p.rows)]
        first = b.add(b.mul(b.mul(r0, u.I64(self.sh)), u.I64(self.row_elems)),
                      b.mul(v0, u.I64(p.lanes)))
        align = self.c.dtype.itemsize
        for ib in range((p.rows - 1) * self.sh + (self.kh - 1) * self.dh + 1):
            users = [(i, (ib - i * self.sh) // self.dh) for i in range(p.rows)
                     if 0 <= ib - i * self.sh < self.kh * self.dh and
                     (ib - i * self.sh) % self.dh == 0]
            if not users:
                continue
            weights.update(self.weights(oc, [(kh, kw) for _, kh in users for kw in range(self.kw)
                                             if (kh, kw) not in weights]))
            for kw in range(self.kw):
                phase, shift = (kw * self.dw) % self.sw, (kw * self.dw) // self.sw
                at = ib * self.row_elems + phase * p.phase_width + shift
                for j in range(nv):
                    ptr = b.gep(self.buf, [b.add(first, u.I64(at + j * p.lanes))])
                    x = b.load(b.bitcast(ptr, self.vty.as_pointer()), align=align)
                    for i, kh in users:
                        accs[i][j] = u.intrinsic(b, "fmuladd", [weights[kh, kw], x, accs[i][j]])
        _computed(b, [acc for row in accs for acc in row])
        self.store_tile(accs, n, oc, b.add(oh0, r0), b.add(ow0, b.mul(v0, u.I64(p.lanes))))

    # -- the epilogue -------------------------------------------------------------------------
    def store_tile(self, accs, n, oc, oh, ow):
        """The epilogue on each vector of the tile (rows oh.., vectors from column ow),
        masked to the lanes inside the output; rows past it are skipped."""
        b, p = self.b, self.p
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        self.env[n_var], self.env[oc_var] = n, oc
        nv = len(accs[0])
        if self.unrolled_epilogue:
            for i, row in enumerate(accs):
                at_row = b.add(oh, u.I64(i))
                with b.if_then(b.icmp_signed("<", at_row, u.I64(self.oh))):
                    for j, acc in enumerate(row):
                        self.env[oh_var] = at_row
                        self.env[ow_var] = b.add(ow, u.I64(j * p.lanes))
                        self.finish(acc, b.sub(u.I64(self.ow), self.env[ow_var]))
            return
        for i, row in enumerate(accs):        # a longer epilogue: emitted once, in a loop
            for j, acc in enumerate(row):
                b.store(acc, b.gep(self.tile, [u.I64(i * nv + j)]), align=64)
        rows = u.imin(b, u.I64(p.rows), b.sub(u.I64(self.oh), oh))
        with u.for_range(b, u.I64(0), rows, 1, name="er", unroll=False) as i:
            self.env[oh_var] = b.add(oh, i)
            with u.for_range(b, u.I64(0), u.I64(nv), 1, name="ej", unroll=False) as j:
                self.env[ow_var] = b.add(ow, b.mul(j, u.I64(p.lanes)))
                acc = b.load(b.gep(self.tile, [b.add(b.mul(i, u.I64(nv)), j)]), align=64)
                self.finish(acc, b.sub(u.I64(self.ow), self.env[ow_var]))

    def finish(self, acc, left):
        """The epilogue on one vector with `left` outputs left in its row (<= 0: none;
        fewer than lanes: masked). A whole vector at an aligned address of a streamed
        output (streaming.py: one too large for the caches) is stored non-temporally."""
        b, lanes = self.b, self.p.lanes
        count = u.imin(b, left, u.I64(lanes))
        whole = b.icmp_signed("==", count, u.I64(lanes))
        if self.streamed:
            st = self.epilogue_store
            ptr = b.gep(self.base_ptr(st.buffer), [self.index(st.offset)])
            size = lanes * st.buffer.dtype.itemsize
            aligned = b.icmp_unsigned("==", b.and_(b.ptrtoint(ptr, u.I64), u.I64(size - 1)),
                                      u.I64(0))
            with b.if_else(b.and_(whole, aligned), likely=True) as (then, otherwise):
                with then:
                    self.streaming = True
                    self.epilogue(acc, None)
                    self.streaming = False
                with otherwise:
                    self.epilogue_counted(acc, count, whole)
            return
        self.epilogue_counted(acc, count, whole)


def _computed(b: ir.IRBuilder, values: list):
    """An empty asm statement reading `values`: they are computed here, before the
    epilogue's branches. (Else LLVM sinks a sum used only under a branch, such as the
    epilogue of a row that may lie past the output, into that branch: below every other
    row's sums, with their loaded inputs kept live until then, and spilled.)"""
    fnty = ir.FunctionType(ir.VoidType(), [v.type for v in values])
    b.call(ir.InlineAsm(fnty, "", ",".join(["v"] * len(values)), side_effect=True), values)


def _indices(values, ty=u.I32):
    values = list(values)
    return ir.Constant(ir.VectorType(ty, len(values)), [ty(v) for v in values])


def report(kernel: Kernel) -> tuple:
    """A depthwise convolution computes channel planes in NCHW, pixels along the vectors
    (the report's layout); the loop nest, then its register tile (which the thread count
    does not change)."""
    p = plan(kernel, kernel.vector_bits, 1)
    tile = f"per channel plane {p.rows} rows x {p.nv} vectors of {p.lanes} in registers"
    return "NCHW, pixels along vectors", f"{kernel.loop_nest}, {tile}"


register(KindEntry(Kind.DEPTHWISE, DepthwiseEmitter, plan=plan, work=plan_items,
                   report=report))

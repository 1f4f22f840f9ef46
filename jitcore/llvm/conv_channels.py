"""Convolutions with output channels along the vectors: the conv kind's channel plan.

The pixel plan (conv.py) puts output pixels along the vectors, which wastes lanes where a
plane is small or its rows short (a 7x7 plane is 49 pixels: 4 vectors of 16 lanes, 77% used;
a 7-wide row of a stride-2 conv fills 7 of 16) and reads strided inputs through shuffles. This
plan is the GEMM micro-kernel with the roles turned: for a register tile of MR output pixels
x NV vectors of output channels,

    acc[r][h] += x[n, g*Cg_in + ci, ih_r, iw_r] (a broadcast)  *  w[tap][ci][h*lanes..]
                 (NV vector loads of the prepacked weights)

over taps and input channels, where pixel r's input address for a tap is computed once per
tap (a pointer and a step per input channel; a pixel whose tap reads the padding points at a
zero with step 0, so the inner loop has no masks and no branches). Channels fill the vectors
(64, 128, ... 512 of them: no lane is wasted), pixels fill the tile's rows. Only constant
weights take this plan: they are prepacked into [group x channel block][tap][C_in/g][NR]
(conv.packed_weights with NR = NV * lanes).

A conv that reads no padding and whose kernel rows are longer than its input channels (a
patchify stem: 16x16/s16 over 3 channels) runs the inner loop along kernel columns instead,
with the outer loop over (kernel row, input channel) and weights packed
[block][KH][C_in/g][KW][NR]: the inner loop then has 16 steps, not 3.

When one channel block's weights exceed a quarter of L2 (512 input channels x 3x3 taps), the
outer steps run in blocks whose weights stay in L2 while every pixel tile of the work item
uses them; the tiles' partial sums wait in a stack buffer between blocks. Every element's
sum runs in one order (blocks, outer steps, inner steps) whatever the thread count: results
are bitwise identical for any number of threads.

The epilogue (bias, folded batch norm, activations, residual adds) runs per output vector
along channels; an NCHW output strides that axis, so it runs element by element (EpilogueEmitter's
strided form): cheap beside the K = taps x C_in products of each output, which is why the
plan is taken only where K is large (`MIN_PRODUCTS`).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from jitcore.passes.kernel import Kernel

from . import irutil as u
from .conv_base import ConvKernelEmitter
from .gemm import cache_sizes

MAX_MR = 12              # pixels per register tile
MIN_PRODUCTS = 256       # taps x C_in / groups per output at least (the epilogue's share)
# ... where the epilogue runs along the pixels. Measured (AMD Zen 4, 1 thread, + silu, against
# the pixel plan): 1x1 192->1152 and 160->960 at 7x7 (K 192, 160) 1.18x; 64->384 at 14x14
# 0.90x (the pixel plan keeps it: 196 pixels fill 94% of its lanes)
# ResNet's 7x7/s2 stem (K 147 over 3 input channels) ran 2.63 ms on the pixel plan's im2col
# variant, 3.60 on this plan: its inner loop of 3 channels is too short, so the lower bound
# needs at least MIN_CHANNELS_FLAT input channels per group (3x3 24->48/s2 at 28x28, K 216:
# 0.058 -> 0.047 ms)
MIN_PRODUCTS_FLAT = 128
MIN_CHANNELS_FLAT = 16
MAX_PARTIAL_BYTES = 32 * 1024   # partial sums of one work item's pixel tiles
PANEL_SHARE = 4          # a block's weights take at most this share of L2


@dataclass(frozen=True)
class ChannelPlan:
    lanes: int
    mr: int               # output pixels per register tile
    nv: int               # channel vectors per register tile
    ocb: int              # channel blocks (of NR channels) per group
    blocks: int           # groups * ocb
    pixels: int           # output pixels per image (OH * OW)
    tiles: int            # pixel tiles per image: ceil(pixels / MR)
    group_tiles: int      # pixel tiles per work item
    pixel_groups: int     # work items per image and channel block
    columns_inner: bool   # the inner loop runs over kernel columns (else input channels)
    outer: int            # outer steps: taps, or kernel rows x input channels
    inner: int            # inner steps: input channels, or kernel columns
    outer_per_block: int  # outer steps whose weights stay in L2 while the tiles use them
    k_blocks: int
    batch: int
    cout_g: int           # output channels per group
    pairs: bool = False   # inner steps are pairs of input channels in bf16 (conv_pairs.py)
    region_rows: int = 0  # pairs plan: input rows of a work item's packed input region
    region_width: int = 0  # pairs plan: its row length (the input's, rounded up to lanes)
    region_step: int = 1   # pairs plan: input rows between its rows (a 1xK strided conv
    #                        reads every stride-th row only)
    chunk_blocks: int = 1  # channel blocks per work item (each item's input work is shared
    #                        by its blocks: the pairs plan packs its input once)

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def chunks(self) -> int:
        """Work items per image and pixel group: runs of chunk_blocks channel blocks."""
        return -(-self.blocks // self.chunk_blocks)

    @property
    def items(self) -> int:
        return self.batch * self.chunks * self.pixel_groups

    @property
    def efficiency(self) -> float:
        """Useful products / computed ones: channel rows past the group's channels and
        pixel rows past the plane are computed and dropped."""
        c_out = self.ocb * self.nr
        used = self.pixels / (self.tiles * self.mr)
        return used * self.cout_g / c_out


def eligible(kernel: Kernel, vector_bits: int) -> bool:
    """Static extents, and enough products per output that the epilogue is cheap: fewer
    where it runs as vectors along the pixels (AVX-512's masks, `flat_accesses`)."""
    c = kernel.conv
    extents = [v.extent for v in c.out_vars + c.x_vars + c.w_vars]
    flat = vector_bits >= 512 and c.cin_group >= MIN_CHANNELS_FLAT and flat_accesses(kernel)
    least = MIN_PRODUCTS_FLAT if flat else MIN_PRODUCTS
    return all(isinstance(e, int) for e in extents) and c.taps * c.cin_group >= least \
        and c.out_vars[2].extent * c.out_vars[3].extent > 0 and c.out_vars[1].extent > 0


def plan(kernel: Kernel, vector_bits: int, threads: int, pairs: bool = False) -> ChannelPlan:
    """`pairs`: the inner steps are pairs of input channels (4 bytes of weights per pair and
    output channel: conv_pairs.py), never kernel columns."""
    c = kernel.conv
    n, cout, oh, ow = (v.extent for v in c.out_vars)
    size = c.dtype.itemsize
    lanes = max(vector_bits // (8 * size), 1)
    regs = 32 if vector_bits >= 512 else 16
    cout_g = cout // c.attrs.groups
    pixels = oh * ow
    mr, nv = choose_tile(pixels, cout_g, lanes, regs)
    nr = nv * lanes
    ocb = -(-cout_g // nr)
    blocks = c.attrs.groups * ocb
    tiles = max(-(-pixels // mr), 1)
    kh, kw = c.w_vars[2].extent, c.w_vars[3].extent
    # a conv that reads no padding (a patchify stem: 16x16/s16 over 3 channels) runs the
    # inner loop along the longer of a kernel row and the input channels: every pixel's
    # address then advances by one common step
    columns_inner = not pairs and not any(c.attrs.padding) and kw > c.cin_group
    outer, inner = (kh * c.cin_group, kw) if columns_inner else (c.taps, c.cin_group)
    if pairs:
        inner = -(-c.cin_group // 2)
    per_outer = inner * nr * size
    outer_per_block = min(outer, max(1, cache_sizes()[2] // PANEL_SHARE // per_outer))
    k_blocks = -(-outer // outer_per_block)
    group_tiles = tiles
    if k_blocks > 1:
        group_tiles = max(1, min(tiles, MAX_PARTIAL_BYTES // (mr * nr * size)))
    want = 4 * threads if threads > 1 else 1        # enough work items for the pool
    if n * blocks * -(-tiles // group_tiles) < want:
        group_tiles = max(1, min(group_tiles, -(-tiles * n * blocks // want)))
    pixel_groups = -(-tiles // group_tiles)
    return ChannelPlan(lanes, mr, nv, ocb, blocks, pixels, tiles, group_tiles, pixel_groups,
                       columns_inner, outer, inner, outer_per_block, k_blocks, n, cout_g, pairs)


def choose_tile(pixels: int, cout_g: int, lanes: int, regs: int) -> tuple:
    """(MR, NV): the register tile (MR x NV accumulators, NV weight vectors and a broadcast
    in the registers) with the least cost per useful product: pixel rows past the plane,
    channel lanes past the group's channels, and the loads of a step (MR broadcasts and NV
    vectors) per its MR x NV FMAs."""
    best = None
    for nv in range(1, (4 if regs == 32 else 2) + 1):
        for mr in range(2, min(MAX_MR, (regs - nv - 1) // nv) + 1):
            waste = -(-pixels // mr) * mr / pixels * \
                -(-cout_g // (nv * lanes)) * nv * lanes / cout_g
            cost = waste * (1 + 0.5 * (mr + nv) / (mr * nv))
            if best is None or cost < best[0] - 1e-9:
                best = (cost, mr, nv)
    return best[1], best[2]


def flat_accesses(kernel: Kernel) -> bool:
    """Whether the output and every epilogue operand are linear in the flat pixel index
    (oh * OW + ow: an NCHW output, per-channel operands such as a bias, a folded batch norm
    or a residual), so a tile's MR consecutive pixels of a channel are one vector."""
    _, _, oh, ow = kernel.conv.out_vars
    accesses = [ld.offset for ld in kernel.loads()[2:]] + [kernel.stores[0].offset]
    return all(a.coeff(oh) == ow.extent * a.coeff(ow) for a in accesses)


class ChannelConvEmitter(ConvKernelEmitter):
    """Emits one conv kernel (Kind.CONV) with a ChannelPlan.

    Its epilogue runs along the output pixels where the accesses allow (`flat_accesses`) and
    masks are free (AVX-512): each register tile's channel vectors are transposed (16 x 16
    shuffles) into one vector of its MR pixels per channel. Else it runs along the channels,
    element by element where the output strides them (NCHW)."""

    epilogue_axis = 1            # vectors of output channels

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        self.flat_epilogue = masked_tail and self.p.mr <= self.p.lanes and flat_accesses(kernel)
        if self.flat_epilogue:                   # (the base class set it up along channels)
            self.setup_epilogue(self.c.out_vars[3], self.p.lanes)
            self.flat_epilogue = self.epilogue_vector
            if not self.flat_epilogue:
                self.setup_epilogue(self.c.out_vars[1], self.p.lanes)

    @property
    def x_elem(self):
        """The type of the values the micro-kernel broadcasts (a pixel's input)."""
        return self.elem

    def body(self):
        b, p = self.b, self.p
        self.alloc_sums()
        self.ctile = u.alloca_once(b, ir.ArrayType(self.vty, p.mr * p.nv), name="ctile")
        self.ctile.align = 64
        if self.flat_epilogue:         # the tile by channel: lanes along its pixels
            self.ttile = u.alloca_once(b, ir.ArrayType(self.vty, p.nv * p.lanes), name="ttile")
            self.ttile.align = 64
        self.zero = u.alloca_once(b, self.x_elem, name="zero")
        with b.goto_entry_block():
            b.store(ir.Constant(self.x_elem, 0), self.zero)
        if p.k_blocks > 1:
            self.partial = u.alloca_once(
                b, ir.ArrayType(self.vty, p.group_tiles * p.mr * p.nv), name="partial")
            self.partial.align = 64
        with b.goto_entry_block():    # a loop bound hidden from the full unroller
            self.n_inner = u.opaque(b, p.inner)
        per_image = p.chunks * p.pixel_groups
        with u.for_range(b, self.start, self.stop, 1, name="item") as t:
            n = b.sdiv(t, u.I64(per_image))
            rem = b.srem(t, u.I64(per_image))
            ch, pg = b.sdiv(rem, u.I64(p.pixel_groups)), b.srem(rem, u.I64(p.pixel_groups))
            self.chunk(n, ch, pg)

    def chunk(self, n, ch, pg):
        """Work item (image n, chunk ch of channel blocks, pixel group pg)."""
        b, p = self.b, self.p
        if p.chunk_blocks == 1:
            return self.item(n, ch, pg)
        lo = b.mul(ch, u.I64(p.chunk_blocks))
        hi = u.imin(b, b.add(lo, u.I64(p.chunk_blocks)), u.I64(p.blocks))
        with u.for_range(b, lo, hi, 1, name="blk", unroll=False) as blk:
            self.item(n, blk, pg)

    def item(self, n, blk, pg):
        b, p, c = self.b, self.p, self.c
        g = b.sdiv(blk, u.I64(p.ocb))
        oc0 = b.mul(b.srem(blk, u.I64(p.ocb)), u.I64(p.nr))           # within the group
        t_lo = b.mul(pg, u.I64(p.group_tiles))
        t_hi = u.imin(b, b.add(t_lo, u.I64(p.group_tiles)), u.I64(p.tiles))
        x_image = b.add(b.add(u.I64(c.x.offset.const), b.mul(n, u.I64(self.xs[0]))),
                        b.mul(g, u.I64(self.cin_g * self.xs[1])))
        w_block = b.mul(blk, u.I64(p.outer * p.inner * p.nr))
        if p.k_blocks == 1:
            with u.for_range(b, t_lo, t_hi, 1, name="tile", unroll=False) as t:
                self.tile(n, g, oc0, t, x_image, w_block, u.I64(0), u.I64(p.outer), None)
            return
        with u.for_range(b, u.I64(0), u.I64(p.k_blocks), 1, name="kb", unroll=False) as kb:
            o_lo = b.mul(kb, u.I64(p.outer_per_block))
            o_hi = u.imin(b, b.add(o_lo, u.I64(p.outer_per_block)), u.I64(p.outer))
            with u.for_range(b, t_lo, t_hi, 1, name="tile", unroll=False) as t:
                saved = b.gep(b.bitcast(self.partial, self.vty.as_pointer()),
                              [b.mul(b.sub(t, t_lo), u.I64(p.mr * p.nv))])
                self.tile(n, g, oc0, t, x_image, w_block, o_lo, o_hi, (kb, saved))

    def pixel(self, t, r):
        """(valid, oh, ow) of pixel r of tile t."""
        b = self.b
        q = b.add(b.mul(t, u.I64(self.p.mr)), u.I64(r))
        valid = b.icmp_signed("<", q, u.I64(self.p.pixels))
        return valid, b.sdiv(q, u.I64(self.ow)), b.srem(q, u.I64(self.ow))

    def tile(self, n, g, oc0, t, x_image, w_block, o_lo, o_hi, blocked):
        """One register tile: sums over outer steps o_lo..o_hi (from zero or the partial
        sums of the earlier blocks), then the epilogue or the partial sums saved."""
        b, p, c = self.b, self.p, self.c
        pixels = [self.pixel(t, r) for r in range(p.mr)]
        if blocked is None:
            self.zero_sums()
        else:
            kb, saved = blocked
            self.start_sums(saved, b.icmp_signed("==", kb, u.I64(0)))
        x_base, w_base = self.base_ptr(c.x.buffer), self.base_ptr(c.w.buffer)
        with u.for_range(b, o_lo, o_hi, 1, name="outer", unroll=False) as o:
            rows = self.column_rows(pixels, x_image, x_base, o) if p.columns_inner else \
                self.tap_rows(pixels, x_image, x_base, o)
            self.micro(rows, b.gep(w_base, [b.add(w_block, b.mul(o, u.I64(p.inner * p.nr)))]))
        if blocked is None:
            return self.store_tile(n, g, oc0, t)
        kb, saved = blocked
        last = b.icmp_signed("==", kb, u.I64(p.k_blocks - 1))
        with b.if_else(last) as (then, otherwise):
            with then:
                self.store_tile(n, g, oc0, t)
            with otherwise:
                self.save_sums(saved)

    def tap_rows(self, pixels, x_image, x_base, tap) -> list:
        """Per pixel: (pointer to its input at channel 0 of the tap, step per input channel);
        a pixel whose tap reads the padding (or past the plane) reads a zero, step 0."""
        b = self.b
        step, rows = u.I64(self.xs[1]), []
        for ok, ih, iw in self.tap_inputs(pixels, tap):
            off = b.add(x_image, b.add(b.mul(ih, u.I64(self.xs[2])),
                                       b.mul(iw, u.I64(self.xs[3]))))
            ptr = b.select(ok, b.gep(x_base, [b.select(ok, off, u.I64(0))]), self.zero)
            rows.append((ptr, b.select(ok, step, u.I64(0))))
        return rows

    def tap_inputs(self, pixels, tap) -> list:
        """Per pixel (valid, oh, ow): (whether the tap reads inside the input, its input row,
        its input column)."""
        b, c = self.b, self.c
        (sh, sw), (pt, _, pl, _), (dh, dw) = c.attrs.stride, c.attrs.padding, c.attrs.dilation
        kh, kw = b.sdiv(tap, u.I64(self.kw)), b.srem(tap, u.I64(self.kw))
        dy = b.sub(b.mul(kh, u.I64(dh)), u.I64(pt))
        dx = b.sub(b.mul(kw, u.I64(dw)), u.I64(pl))
        out = []
        for valid, oh, ow in pixels:
            ih = b.add(b.mul(oh, u.I64(sh)), dy)
            iw = b.add(b.mul(ow, u.I64(sw)), dx)
            inside = b.and_(b.icmp_unsigned("<", ih, u.I64(self.h)),
                            b.icmp_unsigned("<", iw, u.I64(self.w)))
            out.append((b.and_(valid, inside), ih, iw))
        return out

    def column_rows(self, pixels, x_image, x_base, o) -> list:
        """Per pixel: (pointer to its input at kernel column 0 of outer step o = (kernel row,
        input channel), step per kernel column); no padding is read, so only pixels past
        the plane read a zero."""
        b, c = self.b, self.c
        (sh, sw), (dh, dw) = c.attrs.stride, c.attrs.dilation
        kh, ci = b.sdiv(o, u.I64(self.cin_g)), b.srem(o, u.I64(self.cin_g))
        common = b.add(x_image, b.add(b.mul(ci, u.I64(self.xs[1])),
                                      b.mul(b.mul(kh, u.I64(dh)), u.I64(self.xs[2]))))
        step, rows = u.I64(dw * self.xs[3]), []
        for valid, oh, ow in pixels:
            off = b.add(common, b.add(b.mul(b.mul(oh, u.I64(sh)), u.I64(self.xs[2])),
                                      b.mul(b.mul(ow, u.I64(sw)), u.I64(self.xs[3]))))
            ptr = b.select(valid, b.gep(x_base, [b.select(valid, off, u.I64(0))]), self.zero)
            rows.append((ptr, b.select(valid, step, u.I64(0))))
        return rows

    def micro(self, rows, w_outer):
        """accs += over the inner steps i: x(pixel r, i) * w[outer][i][NR]."""
        self.broadcast_micro(rows, w_outer, self.n_inner)

    def store_tile(self, n, g, oc0, t):
        """The epilogue on the tile's valid pixels and channels: per channel, one vector
        along the tile's pixels (flat_epilogue), else vector by vector along the channels
        (element by element where the output strides them)."""
        if self.flat_epilogue:
            return self.store_tile_flat(n, g, oc0, t)
        b, p = self.b, self.p
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        tile = b.bitcast(self.ctile, self.vty.as_pointer())
        for r in range(p.mr):
            for h in range(p.nv):
                b.store(b.load(self.accs[r][h]), b.gep(tile, [u.I64(p.nv * r + h)]), align=64)
        self.env[n_var] = n
        oc_base = b.add(b.mul(g, u.I64(self.cout_g)), oc0)
        left = b.sub(u.I64(self.cout_g), oc0)          # channels of the group from oc0
        q0 = b.mul(t, u.I64(p.mr))
        nrow = u.imin(b, u.I64(p.mr), b.sub(u.I64(p.pixels), q0))
        with u.for_range(b, u.I64(0), nrow, 1, name="r", unroll=False) as r:
            q = b.add(q0, r)
            self.env[oh_var] = b.sdiv(q, u.I64(self.ow))
            self.env[ow_var] = b.srem(q, u.I64(self.ow))
            with u.for_range(b, u.I64(0), u.I64(p.nv), 1, name="h") as h:
                first = b.mul(h, u.I64(p.lanes))
                self.env[oc_var] = b.add(oc_base, first)
                count = u.imin(b, u.I64(p.lanes), b.sub(left, first))
                acc = b.load(b.gep(tile, [b.add(b.mul(r, u.I64(p.nv)), h)]), align=64)
                self.epilogue_counted(acc, count)

    def store_tile_flat(self, n, g, oc0, t):
        b, p = self.b, self.p
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        zero = u.const(self.vty, 0)
        tile = b.bitcast(self.ttile, self.vty.as_pointer())
        for h in range(p.nv):
            rows = [b.load(self.accs[r][h]) for r in range(p.mr)]
            columns = u.transpose(b, rows + [zero] * (p.lanes - p.mr))
            for k, column in enumerate(columns):
                b.store(column, b.gep(tile, [u.I64(h * p.lanes + k)]), align=64)
        q0 = b.mul(t, u.I64(p.mr))
        self.env[n_var] = n
        self.env[oh_var] = u.I64(0)            # the flat pixel index along ow
        self.env[ow_var] = q0
        count = u.imin(b, u.I64(p.mr), b.sub(u.I64(p.pixels), q0))
        oc_base = b.add(b.mul(g, u.I64(self.cout_g)), oc0)
        channels = u.imin(b, u.I64(p.nr), b.sub(u.I64(self.cout_g), oc0))
        with u.for_range(b, u.I64(0), channels, 1, name="k", unroll=False) as k:
            self.env[oc_var] = b.add(oc_base, k)
            self.epilogue(b.load(b.gep(tile, [k]), align=64), count)

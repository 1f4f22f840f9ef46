"""Winograd convolutions: the conv kind's plan for 3x3 stride-1 float32 convs with constant
weights and enough channels (the 3x3 layers of ResNet, VGG, U-Nets).

Each m x m block of output pixels of one output channel (a "tile") is

    Y = AT [ sum over input channels c of  U_c (.) V_c ] AT^T,
    U_c = G w_c G^T     (c's 3x3 weights, transformed at compile time: alpha x alpha)
    V_c = BT d_c BT^T   (c's alpha x alpha input patch under the tile, alpha = m + 2)

with the matrices of `Transforms` (data: F2 and F4 below). F(2x2, 3x3), the default, spends 16
products per input channel on 4 outputs where the direct conv spends 36; F(4x4, 3x3) spends
36 on 16. The alpha^2 positions are independent GEMMs, M[pos] = V[pos] (tiles x C_in) @
U[pos] (C_in x C_out), each run by the channel plan's micro-kernel (conv_channels.py): a
register tile of MR tiles (broadcasts of V) x NV vectors of output channels (loads of U).

Per work item (group of tiles, numbered across the batch's images, and chunk of channel blocks
of NR = NV * lanes channels):
  1. the input transform of the group's tiles into a stack panel V[pos][c][tile], a vector
     of `lanes` tiles at a time, each input value a masked gather (zero in the padding);
  2. per channel block, per position, per register tile: the sums over the input channels,
     kept in a stack buffer M[tile][pos][NV] (the block's U[pos] stays in L2 meanwhile);
  3. per tile of the block, the output transform of its sums into its m x m pixels, each a
     vector along the output channels through the fused epilogue (bias, folded batch norm,
     activations, residual adds), as in the channel plan.
Every output's sum runs in one order (input channels, then the output transform) whatever
the thread count: results are bitwise identical for any number of threads.

Accuracy. The transforms add only their nonzero terms. F2's matrices hold 0, +-1/2 and +-1:
its error stays within gamma(C_in + 12) of the transformed magnitudes
|AT (sum_c |U_c| (.) |V_c|) AT^T| (tests/test_conv_winograd.py), about the direct conv's
(measured max error / max sum of |terms|: 8e-8 against 1e-7 direct, 64 channels at 56x56).
F4's hold up to 8 and 5: about 20x the error (1.6e-6), so it is opt-in
(JITCORE_WINOGRAD=4), for +9% (64 channels at 56x56) to +20% (128 at 28x28) more speed over
F2 (AMD Zen 4, 1 thread). F2 keeps non-finite inputs local: each output's terms with
nonzero coefficients read exactly its 3x3 window, so a NaN makes exactly the outputs NaN
that the direct conv makes NaN; an Inf makes the same outputs non-finite, but some NaN where
the direct sum gives +-Inf (the transforms subtract it from itself). F4's rows read a
whole 6x6 patch: a NaN or Inf reaches every output of the tiles over it.
JITCORE_WINOGRAD=0 (config.winograd = 0, which the compiler passes to conv.prepack) keeps
every conv direct.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from jitcore.ir import dtypes
from jitcore.passes.kernel import Kernel

from . import irutil as u
from .conv_base import ConvKernelEmitter
from .conv_channels import choose_tile
from .gemm import cache_sizes

MIN_CHANNELS = 32          # input and output channels at least (below, the transforms' share
                           # of the work outgrows what the 16/36 products save)
# tiles per image at least: each work item streams its blocks' transformed weights (16/9 of
# the direct conv's), so few tiles make the weights' bandwidth the bound. Measured (AMD Zen 4,
# 1 thread, ms, direct / Winograd): 512->512 at 7x7 (16 tiles) 2.2-2.5 / 2.1-2.8;
# 256->256 at 14x14 (49 tiles) 2.36 / 1.31-1.48; 128->128 at 28x28 2.48 / 1.29-1.59
MIN_TILES = {4: 32, 2: 32}
# the item's V panel stays in half of L2
MAX_PANEL_BYTES = min(cache_sizes()[2] // 2, 512 * 1024)
MAX_SUMS_BYTES = 64 * 1024                    # M of one channel block's tiles


@dataclass(frozen=True)
class Transforms:
    """Winograd F(m x m, 3x3): Y = AT [(G w G^T) (.) (BT d BT^T)] AT^T over alpha x alpha
    patches d (alpha = m + 2) giving m x m outputs (Lavin & Gray, "Fast Algorithms for
    Convolutional Neural Networks", 2015)."""
    m: int
    BT: tuple
    G: tuple
    AT: tuple

    @property
    def alpha(self) -> int:
        return self.m + 2

    @property
    def positions(self) -> int:
        return self.alpha ** 2


F2 = Transforms(2, BT=((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
                G=((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
                AT=((1, 1, 1, 0), (0, 1, -1, -1)))
# interpolation points 0, +-1, +-2
F4 = Transforms(4, BT=((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
                       (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1)),
                G=((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6),
                   (1 / 24, 1 / 12, 1 / 6), (1 / 24, -1 / 12, 1 / 6), (0, 0, 1)),
                AT=((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0),
                    (0, 1, -1, 8, -8, 1)))
VARIANTS = {2: F2, 4: F4}


@dataclass(frozen=True)
class WinogradPlan:
    m: int                # output tile size (VARIANTS[m] holds the transforms)
    rows: bool            # the input transform reads segments of tile rows (else gathers)
    lanes: int
    mr: int               # tiles per register tile
    nv: int               # channel vectors per register tile
    ocb: int              # channel blocks of NR output channels
    th: int               # tile rows and columns of the output plane
    tw: int
    group: int            # tiles per work item (a multiple of MR), numbered across the batch
    pixel_groups: int     # work items per channel chunk
    chunk_blocks: int     # channel blocks per work item
    chunks: int
    batch: int
    cin: int

    @property
    def nr(self) -> int:
        return self.nv * self.lanes

    @property
    def transforms(self) -> Transforms:
        return VARIANTS[self.m]

    @property
    def positions(self) -> int:
        return self.transforms.positions

    @property
    def tiles(self) -> int:
        """The batch's tiles."""
        return self.batch * self.th * self.tw

    @property
    def panel_width(self) -> int:
        """Tiles per panel row: the group rounded up to whole vectors (and a vector more that
        the row segments' last vectors may write)."""
        return (-(-self.group // self.lanes) + self.rows) * self.lanes

    @property
    def items(self) -> int:
        return self.pixel_groups * self.chunks


def variant(kernel: Kernel, largest: int = 2):
    """The output tile size m of the Winograd variant the conv takes (None: direct): the
    largest m <= `largest` (JITCORE_WINOGRAD) of which the batch holds MIN_TILES tiles.
    Only a 3x3 stride-1 undilated float32 conv of one group with static extents, at least
    MIN_CHANNELS input and output channels, and an input whose element offsets fit the
    gathers' 32-bit indices (its weights must be constant: prepack decides)."""
    c = kernel.conv
    extents = [v.extent for v in c.out_vars + c.x_vars + c.w_vars]
    if not all(isinstance(e, int) for e in extents) or c.dtype != dtypes.float32:
        return None
    _, cout, oh, ow = (v.extent for v in c.out_vars)
    kh, kw = (v.extent for v in c.w_vars[2:])
    if (kh, kw) != (3, 3) or c.attrs.stride != (1, 1) or c.attrs.dilation != (1, 1) or \
            c.attrs.groups != 1 or c.cin_group < MIN_CHANNELS or cout < MIN_CHANNELS or \
            not _plane_offsets_fit(c):
        return None
    n = c.out_vars[0].extent
    for m in sorted(VARIANTS, reverse=True):
        if m <= largest and n * -(-oh // m) * -(-ow // m) >= MIN_TILES[m]:
            return m
    return None


def _plane_offsets_fit(c) -> bool:
    """Every element offset within one input channel's planes of the batch fits an int32
    (the gathers' offsets; the channel's own is added to their base pointer)."""
    n, _, h, w = (v.extent for v in c.x_vars)
    sn, _, sh, sw = c.strides(c.x, c.x_vars)
    return n * abs(sn) + (h + 1) * abs(sh) + (w + 1) * abs(sw) < 2 ** 31


def plan(kernel: Kernel, vector_bits: int, threads: int, m: int = 0) -> WinogradPlan:
    """The plan of F(m x m, 3x3) (m = 0: the variant prepacking chose, kernel.conv.winograd)."""
    c = kernel.conv
    n, cout, oh, ow = (v.extent for v in c.out_vars)
    m = m or c.winograd
    positions = VARIANTS[m].positions
    size = c.dtype.itemsize
    lanes = max(vector_bits // (8 * size), 1)
    regs = 32 if vector_bits >= 512 else 16
    th, tw = -(-oh // m), -(-ow // m)
    tiles = n * th * tw                 # the batch's tiles: a group may span images
    mr, nv = choose_tile(tiles, cout, lanes, regs)
    nr = nv * lanes
    ocb = -(-cout // nr)
    cin = c.cin_group
    # the group's V panel in half of L2, its sums of one block in MAX_SUMS_BYTES
    fit = min(MAX_PANEL_BYTES // (positions * cin * size),
              MAX_SUMS_BYTES // (positions * nr * size))
    group = max(mr, min(fit, -(-tiles // mr) * mr) // mr * mr)
    pixel_groups = -(-tiles // group)
    chunks = 1
    want = 4 * threads if threads > 1 else 1
    if 0 < pixel_groups < want:                # too few items: split the channel blocks
        chunks = min(ocb, -(-want // pixel_groups))
    chunk_blocks = -(-ocb // chunks)
    chunks = -(-ocb // chunk_blocks)
    # row segments where a tile row fills at least half a vector and input rows are contiguous
    rows = 2 * tw >= lanes and c.strides(c.x, c.x_vars)[3] == 1
    return WinogradPlan(m, rows, lanes, mr, nv, ocb, th, tw, group, pixel_groups, chunk_blocks,
                        chunks, n, cin)


def packed_weights(dense: np.ndarray, m: int, nr: int) -> np.ndarray:
    """OIHW 3x3 weights -> U = G w G^T (in float64, rounded once) packed
    [block][position][C_in][NR], zero channels past C_out."""
    o, cin = dense.shape[:2]
    g = np.array(VARIANTS[m].G)
    positions = VARIANTS[m].positions
    u = np.einsum("ij,ocjk,lk->ocil", g, dense.astype(np.float64), g)   # (O, C, alpha, alpha)
    blocks = -(-o // nr)
    out = np.zeros((blocks * nr, cin, positions), dtype=np.float64)
    out[:o] = u.reshape(o, cin, positions)
    out = out.reshape(blocks, nr, cin, positions).transpose(0, 3, 2, 1)
    return np.ascontiguousarray(out, dtype=dense.dtype).ravel()


def report(kernel: Kernel) -> str:
    m = kernel.conv.winograd
    return f"NCHW, Winograd F({m}x{m},3x3): {m}x{m} tiles, output channels along vectors"


def _apply(b, coeffs, values):
    """sum of coeffs[k] * values[k], adding only the nonzero terms (so a NaN or Inf reaches
    only the outputs whose coefficients read it), +-1 as adds and subtractions."""
    acc = None
    for coeff, v in zip(coeffs, values):
        if coeff == 0:
            continue
        if acc is None:
            acc = v if coeff == 1 else b.fneg(v) if coeff == -1 else \
                b.fmul(v, u.const(v.type, coeff))
        elif coeff in (1, -1):
            acc = b.fadd(acc, v) if coeff == 1 else b.fsub(acc, v)
        else:
            acc = u.intrinsic(b, "fmuladd", [v, u.const(v.type, coeff), acc])
    return acc


def _transform(b, matrix, grid):
    """matrix @ grid @ matrix^T of a square grid of values (lists of rows)."""
    rows = [[_apply(b, row, [grid[k][j] for k in range(len(grid))])
             for j in range(len(grid[0]))] for row in matrix]
    return [[_apply(b, row, rows[i]) for row in matrix] for i in range(len(rows))]


class WinogradConvEmitter(ConvKernelEmitter):
    """Emits one conv kernel (Kind.CONV) with a WinogradPlan."""

    epilogue_axis = 1            # vectors of output channels

    def body(self):
        b, p = self.b, self.p
        self.alloc_sums()
        # the panel and the sums (up to MAX_PANEL_BYTES + MAX_SUMS_BYTES) on the heap, once per
        # call: no thread's stack needs to hold them
        self.panel, free_panel = u.heap_scratch(
            b, ir.ArrayType(self.elem, p.positions * p.cin * p.panel_width), "panel")
        self.sums, free_sums = u.heap_scratch(
            b, ir.ArrayType(self.vty, p.group * p.positions * p.nv), "sums")
        if p.rows:        # outputs by row segments: the epilogue runs along the output rows
            self.row_tile = u.alloca_once(b, ir.ArrayType(self.vty, p.lanes), name="row_tile")
            self.row_tile.align = 64
            self.setup_epilogue(self.c.out_vars[3], p.lanes)
        with b.goto_entry_block():    # a loop bound hidden from the full unroller
            self.n_inner = u.opaque(b, p.cin)
        with u.for_range(b, self.start, self.stop, 1, name="item") as t:
            self.item(b.sdiv(t, u.I64(p.chunks)), b.srem(t, u.I64(p.chunks)))
        free_panel()
        free_sums()

    def item(self, pg, ch):
        b, p, c = self.b, self.p, self.c
        t_lo = b.mul(pg, u.I64(p.group))
        count = u.imin(b, u.I64(p.group), b.sub(u.I64(p.tiles), t_lo))
        if p.rows:
            self.input_transform_rows(t_lo, count)
        else:
            self.input_transform(t_lo)
        blk_lo = b.mul(ch, u.I64(p.chunk_blocks))
        blk_hi = u.imin(b, b.add(blk_lo, u.I64(p.chunk_blocks)), u.I64(p.ocb))
        reg_tiles = b.sdiv(b.add(count, u.I64(p.mr - 1)), u.I64(p.mr))
        w_base = self.base_ptr(c.w.buffer)
        panel = b.bitcast(self.panel, self.elem.as_pointer())
        sums = b.bitcast(self.sums, self.vty.as_pointer())
        with u.for_range(b, blk_lo, blk_hi, 1, name="blk", unroll=False) as blk:
            w_block = b.mul(blk, u.I64(p.positions * p.cin * p.nr))
            with u.for_range(b, u.I64(0), u.I64(p.positions), 1, name="pos", unroll=False) as pos:
                w_pos = b.gep(w_base, [b.add(w_block, b.mul(pos, u.I64(p.cin * p.nr)))])
                v_pos = b.gep(panel, [b.mul(pos, u.I64(p.cin * p.panel_width))])
                with u.for_range(b, u.I64(0), reg_tiles, 1, name="rt", unroll=False) as rt:
                    first = b.mul(rt, u.I64(p.mr))
                    self.zero_sums()
                    self.micro(b.gep(v_pos, [first]), w_pos)
                    for r in range(p.mr):
                        tile = b.add(first, u.I64(r))
                        for h in range(p.nv):
                            at = b.add(b.mul(tile, u.I64(p.positions * p.nv)),
                                       b.add(b.mul(pos, u.I64(p.nv)), u.I64(h)))
                            b.store(b.load(self.accs[r][h]), b.gep(sums, [at]), align=64)
            if p.rows:
                self.output_rows(blk, t_lo, count, sums)
            else:
                with u.for_range(b, u.I64(0), count, 1, name="tile", unroll=False) as i:
                    self.output_transform(blk, b.add(t_lo, i),
                                          b.gep(sums, [b.mul(i, u.I64(p.positions * p.nv))]))

    def tile_at(self, q):
        """(image, tile row, tile column) of tile q of the batch."""
        b, p = self.b, self.p
        per_image = p.th * p.tw
        t = b.srem(q, u.I64(per_image))
        return b.sdiv(q, u.I64(per_image)), b.sdiv(t, u.I64(p.tw)), b.srem(t, u.I64(p.tw))

    def row_segments(self, t_lo, t_hi, most: int, body):
        """body(q, image, ty, tx0, seg) over the tiles t_lo .. t_hi of the batch in segments
        of at most `most` tiles that do not cross a tile row (nor so an image)."""
        b, p = self.b, self.p
        q_addr = u.alloca_once(b, u.I64, name="segment")
        b.store(t_lo, q_addr)
        cond_bb = b.function.append_basic_block("seg.cond")
        body_bb = b.function.append_basic_block("seg.body")
        end_bb = b.function.append_basic_block("seg.end")
        b.branch(cond_bb)
        b.position_at_end(cond_bb)
        q = b.load(q_addr)
        b.cbranch(b.icmp_signed("<", q, t_hi), body_bb, end_bb)
        b.position_at_end(body_bb)
        image, ty, tx0 = self.tile_at(q)
        seg = u.imin(b, u.imin(b, u.I64(most), b.sub(u.I64(p.tw), tx0)), b.sub(t_hi, q))
        body(q, image, ty, tx0, seg)
        b.store(b.add(q, seg), q_addr)
        b.branch(cond_bb)
        b.position_at_end(end_bb)

    # -- 1. the input transform ------------------------------------------------------------
    def store_transformed(self, d, ci, col, align):
        """panel[pos][ci][col..] = (BT d BT^T)[pos], d: alpha x alpha vectors of tiles."""
        b, p = self.b, self.p
        alpha = p.transforms.alpha
        panel = b.bitcast(self.panel, self.elem.as_pointer())
        v = _transform(b, p.transforms.BT, d)
        for i in range(alpha):
            for j in range(alpha):
                at = b.add(b.mul(b.add(b.mul(u.I64(alpha * i + j), u.I64(p.cin)), ci),
                                 u.I64(p.panel_width)), col)
                b.store(v[i][j], b.bitcast(b.gep(panel, [at]), self.vty.as_pointer()),
                        align=align)

    def input_transform_rows(self, t_lo, count):
        """The input transform of tiles t_lo .. t_lo + count in segments along tile rows (at
        most `lanes` tiles, not crossing a row): each patch row of a segment is m * lanes + 2
        adjacent input elements, read as a few masked vector loads (zero in the padding)
        and shuffled into the alpha vectors of its columns, where the gather variant pays a
        gather per vector. A segment's vectors may write past its tiles' columns: the next
        segment (or nothing: the panel has a vector of slack) overwrites them."""
        b, p, c = self.b, self.p, self.c
        lanes = p.lanes
        span = p.m * lanes + 2
        loads = -(-span // lanes)
        wide = 1
        while wide < loads:
            wide *= 2
        x_base = self.base_ptr(c.x.buffer)
        ity = ir.VectorType(u.I64, lanes)
        iota = [ir.Constant(ity, [u.I64(v * lanes + e) for e in range(lanes)])
                for v in range(loads)]
        zero = u.const(self.vty, 0)
        self.row_segments(t_lo, b.add(t_lo, count), lanes,
                          lambda q, image, ty, tx0, seg: self.segment_transform(
                              q, image, ty, tx0, t_lo, x_base, iota, loads, wide, zero))

    def segment_transform(self, q, image, ty, tx0, t_lo, x_base, iota, loads, wide, zero):
        """The input transform of one row segment from tile q = (image, ty, tx0) on."""
        b, p, c = self.b, self.p, self.c
        x_image = b.add(u.I64(c.x.offset.const), b.mul(image, u.I64(self.xs[0])))
        lanes, m, alpha = p.lanes, p.m, p.transforms.alpha
        pt, pl = c.attrs.padding[0], c.attrs.padding[2]
        c0 = b.sub(b.mul(tx0, u.I64(m)), u.I64(pl))             # the segment's first column
        in_row = []                                             # lanes inside the input row
        for v in range(loads):
            cols = b.add(u.splat(b, c0, lanes), iota[v])
            in_row.append(b.icmp_unsigned("<", cols, u.splat(b, u.I64(self.w), lanes)))
        rows = []                                               # (element offset, masks)
        for i in range(alpha):
            iy = b.sub(b.add(b.mul(ty, u.I64(m)), u.I64(i)), u.I64(pt))
            ok = b.icmp_unsigned("<", iy, u.I64(self.h))
            okv = u.splat(b, ok, lanes)
            off = b.add(b.mul(b.select(ok, iy, u.I64(0)), u.I64(self.xs[2])), c0)
            rows.append((off, [b.and_(mask, okv) for mask in in_row]))
        picks = [ir.Constant(ir.VectorType(u.I32, lanes), [u.I32(m * k + j) for k in range(lanes)])
                 for j in range(alpha)]
        col = b.sub(q, t_lo)
        with u.for_range(b, u.I64(0), self.n_inner, 1, name="ci", unroll=False) as ci:
            base = b.gep(x_base, [b.add(x_image, b.mul(ci, u.I64(self.xs[1])))])
            d = []
            for off, masks in rows:
                row = b.gep(base, [off])
                parts = [u.masked_load(b, b.bitcast(b.gep(row, [u.I64(v * lanes)]),
                                                    self.vty.as_pointer()), mask, self.vty)
                         for v, mask in enumerate(masks)] + [zero] * (wide - loads)
                while len(parts) > 2:           # concatenate pairwise into two halves
                    parts = [b.shuffle_vector(parts[k], parts[k + 1], ir.Constant(
                        ir.VectorType(u.I32, 2 * parts[k].type.count),
                        [u.I32(e) for e in range(2 * parts[k].type.count)]))
                        for k in range(0, len(parts), 2)]
                lo, hi = parts
                d.append([b.shuffle_vector(lo, hi, pick) for pick in picks])
            self.store_transformed(d, ci, col, align=4)

    def input_transform(self, t_lo):
        """panel[pos][c][i] = (BT d BT^T)[pos] of tile t_lo + i's input patch in channel c,
        for i up to the panel width (tiles past the plane: zeros). A vector of `lanes` tiles
        at a time; each d value a gather of 32-bit offsets within the image (`eligible`
        checks they fit), masked off in the padding."""
        b, p, c = self.b, self.p, self.c
        lanes = p.lanes
        ity = ir.VectorType(u.I32, lanes)

        def vec(v):
            return u.splat(b, u.I32(v), lanes)
        pt, pl = c.attrs.padding[0], c.attrs.padding[2]
        x_base = self.base_ptr(c.x.buffer)
        lane_ids = ir.Constant(ity, [ir.Constant(u.I32, k) for k in range(lanes)])
        with u.for_range(b, u.I64(0), u.I64(p.panel_width // lanes), 1, name="tv",
                         unroll=False) as tv:
            first = b.trunc(b.add(t_lo, b.mul(tv, u.I64(lanes))), u.I32)
            q = b.add(u.splat(b, first, lanes), lane_ids)
            valid = b.icmp_signed("<", q, vec(p.tiles))
            image, t = b.sdiv(q, vec(p.th * p.tw)), b.srem(q, vec(p.th * p.tw))
            ty, tx = b.sdiv(t, vec(p.tw)), b.srem(t, vec(p.tw))
            iy0 = b.sub(b.mul(ty, vec(p.m)), vec(pt))
            ix0 = b.sub(b.mul(tx, vec(p.m)), vec(pl))
            taps = []                     # (element offset vector, mask) of d[i][j]
            alpha = p.transforms.alpha
            for i in range(alpha):
                iy = b.add(iy0, vec(i))
                row_ok = b.and_(valid, b.icmp_unsigned("<", iy, vec(self.h)))
                for j in range(alpha):
                    ix = b.add(ix0, vec(j))
                    ok = b.and_(row_ok, b.icmp_unsigned("<", ix, vec(self.w)))
                    off = b.add(b.mul(image, vec(self.xs[0])),
                                b.add(b.mul(iy, vec(self.xs[2])), b.mul(ix, vec(self.xs[3]))))
                    taps.append((b.select(ok, off, vec(0)), ok))
            col = b.mul(tv, u.I64(lanes))
            with u.for_range(b, u.I64(0), self.n_inner, 1, name="ci", unroll=False) as ci:
                base = b.gep(x_base, [b.add(u.I64(c.x.offset.const),
                                            b.mul(ci, u.I64(self.xs[1])))])
                d = [u.gather(b, u.vector_gep(b, base, off), ok, self.vty) for off, ok in taps]
                self.store_transformed([d[k:k + alpha] for k in range(0, len(d), alpha)], ci,
                                       col, align=64)

    # -- 2. the sums of one position -------------------------------------------------------
    def micro(self, v_tiles, w_pos):
        """accs[r][h] += V[pos][ci][first + r] * U[block][pos][ci][h * lanes..] over ci."""
        b, p = self.b, self.p
        rows = [(b.gep(v_tiles, [u.I64(r)]), u.I64(p.panel_width)) for r in range(p.mr)]
        self.broadcast_micro(rows, w_pos, self.n_inner)

    # -- 3. the output transform and the epilogue -------------------------------------------
    def output_rows(self, blk, t_lo, count, sums):
        """The output transform of the group's tiles in segments of lanes / m tiles along a
        tile row: per channel vector and output row, the segment's lanes pixel vectors (each
        along the channels) are transposed into vectors along the output row, one per
        channel, each through the epilogue as vectors along the row (`epilogue_axis` 3)."""
        b, p = self.b, self.p
        most = p.lanes // p.m
        self.row_segments(t_lo, b.add(t_lo, count), most,
                          lambda q, image, ty, tx0, seg: self.segment_output(
                              blk, q, image, ty, tx0, seg, t_lo, count, sums))

    def segment_output(self, blk, q, n, ty, tx0, seg, t_lo, count, sums):
        b, p = self.b, self.p
        m, alpha, lanes = p.m, p.transforms.alpha, p.lanes
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        ox0 = b.mul(tx0, u.I64(m))
        pixels = u.imin(b, b.mul(seg, u.I64(m)), b.sub(u.I64(self.ow), ox0))
        last = b.sub(count, u.I64(1))
        tiles = [b.gep(sums, [b.mul(u.imin(b, b.add(b.sub(q, t_lo), u.I64(k)), last),
                                    u.I64(p.positions * p.nv))]) for k in range(lanes // m)]
        rows = b.bitcast(self.row_tile, self.vty.as_pointer())
        for h in range(p.nv):
            y = []
            for tile in tiles:
                mv = [b.load(b.gep(tile, [u.I64(pos * p.nv + h)]), align=64)
                      for pos in range(p.positions)]
                y.append(_transform(b, p.transforms.AT, [mv[k:k + alpha]
                                                         for k in range(0, len(mv), alpha)]))
            first = b.add(b.mul(blk, u.I64(p.nr)), u.I64(h * lanes))
            channels = u.imin(b, u.I64(lanes), b.sub(u.I64(self.cout), first))
            for a in range(m):
                oy = b.add(b.mul(ty, u.I64(m)), u.I64(a))
                with b.if_then(b.icmp_signed("<", oy, u.I64(self.oh))):
                    along = u.transpose(b, [yk[a][col] for yk in y for col in range(m)])
                    for k, v in enumerate(along):
                        b.store(v, b.gep(rows, [u.I64(k)]), align=64)
                    with u.for_range(b, u.I64(0), channels, 1, name="ch", unroll=False) as ch:
                        self.env[n_var], self.env[oh_var], self.env[ow_var] = n, oy, ox0
                        self.env[oc_var] = b.add(first, ch)
                        self.epilogue_counted(b.load(b.gep(rows, [ch]), align=64), pixels)

    def output_transform(self, blk, q, sums):
        """The m x m pixels of tile q of the batch (its sums at `sums`, [position][NV] vectors) for every
        channel vector of block blk, each through the epilogue where it lies inside the
        plane."""
        b, p = self.b, self.p
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        n, ty, tx = self.tile_at(q)
        self.env[n_var] = n
        alpha = p.transforms.alpha
        oy0, ox0 = b.mul(ty, u.I64(p.m)), b.mul(tx, u.I64(p.m))
        oc_block = b.mul(blk, u.I64(p.nr))
        for h in range(p.nv):
            mv = [b.load(b.gep(sums, [u.I64(pos * p.nv + h)]), align=64)
                  for pos in range(p.positions)]
            y = _transform(b, p.transforms.AT, [mv[k:k + alpha] for k in range(0, len(mv), alpha)])
            first = b.add(oc_block, u.I64(h * p.lanes))
            count = u.imin(b, u.I64(p.lanes), b.sub(u.I64(self.cout), first))
            for a in range(p.m):
                for col in range(p.m):
                    oy, ox = b.add(oy0, u.I64(a)), b.add(ox0, u.I64(col))
                    inside = b.and_(b.icmp_signed("<", oy, u.I64(self.oh)),
                                    b.icmp_signed("<", ox, u.I64(self.ow)))
                    with b.if_then(inside):
                        self.env[oh_var], self.env[ow_var], self.env[oc_var] = oy, ox, first
                        self.epilogue_counted(y[a][col], count)

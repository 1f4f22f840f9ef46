"""bf16 convolutions: the channel plan (conv_channels.py) on pairs of input channels, for
`vdpbf16ps` (AVX512_BF16) under matmul_precision="bf16" (bf16.py's policy).

vdpbf16ps adds to each float32 lane the dot product of a 32-bit pair of bf16 values from
each source. The channel plan's step, one broadcast input value per pixel times the weights
of NR output channels, becomes one broadcast pair (x[2j], x[2j+1]) of a pixel's input
channels times NR weight pairs (w[oc, 2j], w[oc, 2j+1]):

    acc[r][h] += x[n, pair j, ih_r, iw_r]  (a broadcast 32-bit pair)
                 . w[tap][j][h*lanes..]    (NV vector loads of prepacked weight pairs)

so each step does twice the products of the float32 plan's. Weights are rounded to bf16 and
prepacked at compile time into [group x channel block][tap][ceil(C_in/g / 2)][NR] int32
pairs, the even channel in the low half. NCHW keeps a pixel's two channels a plane apart, so
each work item first packs the input rows its pixels read, all channels of the group, into
a heap region [pair][row][width] of bf16 pairs (vcvtne2ps2bf16, round to nearest even, and a
vpermw interleave per 16 pixels; a 1xK strided conv packs only the rows it reads): one
pass over the input per item, shared by the item's channel blocks (as many of the group's
as leave enough items for the threads). An odd C_in's last pair holds a zero in its odd
half (in both operands); a pixel whose tap reads the padding broadcasts a zero pair, as in
the float32 plan. Sums accumulate in float32 in the same order for any thread count; the
epilogue (bias, folded batch norm, activations, residual) runs in float32, along the output
pixels where it can (conv_channels.ChannelConvEmitter).

vdpbf16ps treats bf16 denormal inputs as zero and vcvtne2ps2bf16 flushes float32 denormals
(as the bf16 GEMM, gemm_bf16.py, does); NaN and Inf propagate as in float32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from llvmlite import ir

from jitcore.passes.kernel import Kernel

from . import bf16, conv_channels
from . import irutil as u
from .conv_channels import ChannelConvEmitter, ChannelPlan

# input channels per group at least: a tap's few pairs do not hide its pointer arithmetic.
# Measured (AMD Zen 4, 1 thread, GFLOP/s, pairs / float32 kernels on rounded operands):
# 3x3 8->32 at 112x112 64 / 76, 16->16 at 112 60 / 60, 16->64 at 56 119 / 127 (noisy),
# 32->32 at 56 123 / 122; 1x1 32->64 at 56 58 / 54
MIN_CHANNELS = 16
MIN_PRODUCTS = 64       # taps x C_in / groups per output at least (the epilogue's share)


def eligible(kernel: Kernel) -> bool:
    """Whether a conv (constant weights, about to be prepacked) can take the pairs plan:
    static extents, float32, enough input channels and products per output, input rows
    contiguous (packed a vector at a time)."""
    c = kernel.conv
    extents = [v.extent for v in c.out_vars + c.x_vars + c.w_vars]
    if not all(isinstance(e, int) for e in extents) or c.dtype.name != "float32":
        return False
    _, cout, oh, ow = extents[:4]
    return c.cin_group >= MIN_CHANNELS and c.taps * c.cin_group >= MIN_PRODUCTS and \
        oh * ow > 0 and cout > 0 and c.strides(c.x, c.x_vars)[3] == 1


def plan(kernel: Kernel, vector_bits: int, threads: int) -> ChannelPlan:
    """The channel plan over pairs of input channels: a work item runs as many channel
    blocks of one group as leave enough items for the threads (they share its packed
    input), over the largest input region an item packs (rows, a row's length in whole
    vectors, and the input rows between its rows)."""
    c = kernel.conv
    p = conv_channels.plan(kernel, vector_bits, threads, pairs=True)
    want = 4 * threads if threads > 1 else 1
    chunk = max(d for d in range(1, p.ocb + 1) if p.ocb % d == 0 and
                (d == 1 or p.batch * p.pixel_groups * (p.blocks // d) >= want))
    (sh, _), (dh, _) = c.attrs.stride, c.attrs.dilation
    step = sh if c.w_vars[2].extent == 1 or dh % sh == 0 else 1
    p = replace(p, chunk_blocks=chunk, region_step=step)
    spans = [_rows(kernel, p, pg) for pg in range(p.pixel_groups)]
    rows = max(-(-(hi - lo) // step) for lo, hi in spans)
    width = -(-c.x_vars[3].extent // p.lanes) * p.lanes
    return replace(p, region_rows=max(rows, 1), region_width=width)


def _rows(kernel: Kernel, p: ChannelPlan, pg: int) -> tuple:
    """The input rows [lo, hi) the pixels of pixel group pg read, lo the first of them
    (at compile time; the emitter computes the same at run time)."""
    c = kernel.conv
    ow, h = c.out_vars[3].extent, c.x_vars[2].extent
    (sh, _), (pt, _, _, _), (dh, _) = c.attrs.stride, c.attrs.padding, c.attrs.dilation
    kh = c.w_vars[2].extent
    t_lo = pg * p.group_tiles
    t_hi = min(t_lo + p.group_tiles, p.tiles)
    first, last = t_lo * p.mr // ow, (min(t_hi * p.mr, p.pixels) - 1) // ow
    lo = first * sh - pt
    if lo < 0:                    # the first row read at or past 0 (every region_step-th)
        lo += -(-(-lo) // p.region_step) * p.region_step
    return lo, min(h, last * sh - pt + (kh - 1) * dh + 1)


def packed_weights(dense: np.ndarray, groups: int, nr: int) -> np.ndarray:
    """OIHW float32 weights -> [groups * blocks][KH * KW][ceil(C_in/g / 2)][NR] int32 bf16
    pairs (w[oc, 2j], w[oc, 2j+1]), rounded to nearest even, the even channel in the low
    half; zero past C_out and in an odd C_in's last odd half."""
    o, cg, kh, kw = dense.shape
    cout_g, pairs = o // groups, -(-cg // 2)
    ocb = -(-cout_g // nr)
    out = np.zeros((groups, ocb * nr, 2 * pairs, kh * kw), np.float32)
    out[:, :cout_g, :cg] = dense.reshape(groups, cout_g, cg, kh * kw)
    # (g, block, NR, pair, half, tap) -> (g, block, tap, pair, NR, half)
    out = out.reshape(groups, ocb, nr, pairs, 2, kh * kw).transpose(0, 1, 5, 3, 2, 4)
    return np.ascontiguousarray(bf16.bits(out)).view(np.int32).ravel()


def panel_weights(packed: np.ndarray, k: int, mr: int) -> np.ndarray:
    """The im2col variant's float32 weights [blocks][K][MR] (K = taps x C_in) -> [blocks]
    [ceil(K / 2)][MR] int32 bf16 pairs (w[oc, k], w[oc, k + 1]) along K, rounded to nearest
    even, the even k in the low half; an odd K's last odd half zero (conv_panel_pairs.py)."""
    halves = packed.reshape(-1, k, mr)
    if k % 2:
        halves = np.concatenate([halves, np.zeros((len(halves), 1, mr), halves.dtype)], axis=1)
    pairs = halves.reshape(len(halves), -1, 2, mr).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(bf16.bits(pairs)).view(np.int32).ravel()


class PairsConvEmitter(ChannelConvEmitter):
    """Emits one conv kernel (Kind.CONV) with a ChannelPlan of pairs (`plan.pairs`); its
    epilogue is the channel plan's (along the output pixels where the accesses allow)."""

    @property
    def x_elem(self):
        return u.I32                   # a pair of bf16 inputs

    def body(self):
        p = self.p
        self.pty = ir.VectorType(u.I32, p.lanes)
        self.region, release = u.heap_scratch(
            self.b, ir.ArrayType(u.I32, -(-self.cin_g // 2) * p.region_rows * p.region_width),
            "region")
        self.region = self.b.bitcast(self.region, u.I32.as_pointer())
        super().body()
        release()

    def chunk(self, n, ch, pg):
        """Pack the input rows the item's pixels read into the region, then the float32
        channel plan's blocks over it (the chunk's blocks are of one group)."""
        b, p, c = self.b, self.p, self.c
        (sh, _), (pt, _, _, _), (dh, _) = c.attrs.stride, c.attrs.padding, c.attrs.dilation
        t_lo = b.mul(pg, u.I64(p.group_tiles))
        t_hi = u.imin(b, b.add(t_lo, u.I64(p.group_tiles)), u.I64(p.tiles))
        first = b.sdiv(b.mul(t_lo, u.I64(p.mr)), u.I64(self.ow))
        last = b.sdiv(b.sub(u.imin(b, b.mul(t_hi, u.I64(p.mr)), u.I64(p.pixels)), u.I64(1)),
                      u.I64(self.ow))
        lo = b.sub(b.mul(first, u.I64(sh)), u.I64(pt))
        # below row 0: the first row read at or past it (rows lo + k * region_step)
        up = b.mul(b.sdiv(b.add(b.sub(u.I64(0), lo), u.I64(p.region_step - 1)),
                          u.I64(p.region_step)), u.I64(p.region_step))
        lo = b.select(b.icmp_signed("<", lo, u.I64(0)), b.add(lo, up), lo)
        hi = u.imin(b, b.add(b.mul(last, u.I64(sh)), u.I64((self.kh - 1) * dh + 1 - pt)),
                    u.I64(self.h))
        self.row_lo = lo
        g = b.sdiv(b.mul(ch, u.I64(p.chunk_blocks)), u.I64(p.ocb))
        x_group = b.add(b.add(u.I64(c.x.offset.const), b.mul(n, u.I64(self.xs[0]))),
                        b.mul(g, u.I64(self.cin_g * self.xs[1])))
        self.pack_region(x_group, lo, hi)
        super().chunk(n, ch, pg)

    def pack_region(self, x_group, lo, hi):
        """region[j][(row - lo) / step][col] = (x[2j, row, col], x[2j + 1, row, col])
        rounded to bf16, for rows lo, lo + step, .. below hi (step: region_step) and every
        column (lanes past the row are zeros, never read); the odd half of an odd C_in's
        last pair is zero."""
        b, p = self.b, self.p
        x_base = self.base_ptr(self.c.x.buffer)
        vptr = self.vty.as_pointer()
        plane = p.region_rows * p.region_width
        with u.for_range(b, u.I64(0), u.I64(-(-self.cin_g // 2)), 1, name="pj",
                         unroll=False) as j:
            odd_ok = b.icmp_signed("<", b.add(b.mul(j, u.I64(2)), u.I64(1)),
                                   u.I64(self.cin_g))
            even_at = b.add(x_group, b.mul(j, u.I64(2 * self.xs[1])))
            rows = b.sdiv(b.add(b.sub(hi, lo), u.I64(p.region_step - 1)),
                          u.I64(p.region_step))
            with u.for_range(b, u.I64(0), rows, 1, name="prow", unroll=False) as k:
                row = b.add(lo, b.mul(k, u.I64(p.region_step)))
                src = b.add(even_at, b.mul(row, u.I64(self.xs[2])))
                dst = b.add(b.mul(j, u.I64(plane)), b.mul(k, u.I64(p.region_width)))
                for v in range(p.region_width // p.lanes):
                    mask = u.lane_mask(b, u.I64(min(p.lanes, self.w - v * p.lanes)), p.lanes)
                    at = b.add(src, u.I64(v * p.lanes))
                    even = u.masked_load(b, b.bitcast(b.gep(x_base, [at]), vptr), mask,
                                         self.vty)
                    odd_at = b.select(odd_ok, b.add(at, u.I64(self.xs[1])), at)
                    odd = u.masked_load(b, b.bitcast(b.gep(x_base, [odd_at]), vptr),
                                        b.and_(mask, u.splat(b, odd_ok, p.lanes)), self.vty)
                    out = b.gep(self.region, [b.add(dst, u.I64(v * p.lanes))])
                    b.store(bf16.pairs_ir(b, even, odd), b.bitcast(out, self.pty.as_pointer()),
                            align=64)

    def tap_rows(self, pixels, x_image, x_base, tap) -> list:
        """Per pixel: (pointer to its pair 0 of the tap in the region, step per pair); a
        pixel whose tap reads the padding (or past the plane) reads a zero pair, step 0."""
        b, p = self.b, self.p
        step, rows = u.I64(p.region_rows * p.region_width), []
        for ok, ih, iw in self.tap_inputs(pixels, tap):
            row = b.sdiv(b.sub(ih, self.row_lo), u.I64(p.region_step))
            off = b.add(b.mul(row, u.I64(p.region_width)), iw)
            ptr = b.select(ok, b.gep(self.region, [b.select(ok, off, u.I64(0))]), self.zero)
            rows.append((ptr, b.select(ok, step, u.I64(0))))
        return rows

    def micro(self, rows, w_outer):
        """accs[r][h] += over the inner steps j (pairs): pixel r's pair j . the NR weight
        pairs w[outer][j][h * lanes ..] (vdpbf16ps)."""
        b, p = self.b, self.p
        with u.for_range(b, u.I64(0), self.n_inner, 1, name="inner") as j:
            wk = b.gep(w_outer, [b.mul(j, u.I64(p.nr))])
            # unaligned: a prepacked constant's array is only element-aligned
            wv = [b.load(b.bitcast(b.gep(wk, [u.I64(h * p.lanes)]), self.pty.as_pointer()),
                         align=4) for h in range(p.nv)]
            for r, (ptr, step) in enumerate(rows):
                x = u.splat(b, b.load(b.gep(ptr, [b.mul(j, step)])), p.lanes)   # {1to16}
                for h in range(p.nv):
                    acc = self.accs[r][h]
                    b.store(bf16.dot_pairs(b, b.load(acc), wv[h], x), acc)

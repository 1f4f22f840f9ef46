"""Convolution kernels (kind "conv"): a direct convolution in NCHW on a register tile of
output channels x vectors of output pixels, with the fused epilogue of the GEMM family.

For each output channel block of MR channels and each tile of NV pixel vectors

    acc[r][j] = sum over taps (kh, kw), then over input channels c of the group, of
                w[oc0 + r, c, kh, kw] (a broadcast)  *  x[n, c, pixels of vector j shifted
                by the tap] (a vector load, masked where the tap reads the padding)

which is the GEMM micro-kernel of gemm.py with A = the weights (rows = output channels,
broadcast) and B = the shifted input rows (the implicit im2col matrix, never built). Pixel
vectors run along a flattened output plane when the tap shift is the same for every pixel
(stride 1 and an output as wide as the input, as in a "same" conv or any 1x1 conv: no lane
is wasted at row ends) and along output rows otherwise (a stride-s row is read as s vectors
and a shuffle, other strides as a gather). So the
input is read and the output written in NCHW in place, with no layout conversion, and the
epilogue runs on vectors along the output's contiguous axis (a per-channel bias or folded
batch norm is a broadcast); a depthwise conv is the same kernel with MR = 1 and wider
pixel tiles.

Per work item (image n, pixel tile, chunk of channel blocks) the tap offsets and masks of
the tile are computed once into a small table. When the tile's input rows of all channels
exceed half of L1, the channels are summed in passes of `cc` (each pass walks every block
of the item over rows that stay in L1; the blocks' partial sums wait in a stack buffer).
Each element's sum runs in one fixed order (passes, taps, channels) whatever the thread
count, so results are bitwise identical for any number of threads. Constant weights are prepacked at compile time into
[group x channel block][tap][C_in / groups][MR] so the MR broadcasts of one step are
adjacent (`prepack`); otherwise they are read through their strides.

With few input channels (a stem's 3), constant weights and contiguous input rows, the
item's inputs are packed first (im2col): panel[(tap, c)][j] = pixel vector j's inputs at the
tap and channel, zeros in the padding, K = taps x C_in vectors per pixel vector in a stack
panel of at most 3/4 of L1; per kernel row the input span of all kernel columns is loaded
once (masked to the input) and each column's vector is a shuffle of it. Each channel block
then runs one loop over K, each step NV plain loads and MR broadcasts of adjacent prepacked
weights: the GEMM micro-kernel, with no tap loop (whose overhead a tap's 3 steps did not
hide) and no masked, strided reads per block. The sums run in the same order (taps, then
channels), so the variant gives the same bits as the direct one. Measured on Zen 4, 1
thread: ResNet's 7x7/s2 stem (3->64 at 224) 3.3 -> 2.2 ms (62% -> 90% of the FMA peak),
MobileNetV2's 3x3/s2 stem (3->32) 0.36 -> 0.26 ms.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from jitcore.ir import dtypes as dt
from jitcore.ir.graph import ConstArray
from jitcore.passes.kernel import Buffer, Kernel, Kind, Load
from jitcore.passes.symbolic import lin

from . import bf16, conv_channels, conv_pairs, conv_winograd
from . import irutil as u
from .conv_channels import ChannelPlan
from .conv_base import ConvKernelEmitter
from .conv_winograd import WinogradPlan
from .epilogue import short_epilogue
from .gemm import cache_sizes, loads_per_slot

MAX_NV = 8              # pixel vectors per tile
MAX_MR = 12             # output channels per tile (more: one broadcast load per FMA)
MAX_DEINTERLEAVE = 4    # a stride up to this reads whole vectors and shuffles (else gathers)
MAX_PARTIAL_BYTES = 16 * 1024   # partial sums of one item's channel blocks between passes
L1_BYTES = cache_sizes()[1]
MAX_TABLE = 4096        # tap x vector entries of the per-item offset/mask table
SHORT_CHANNEL_LOOP = 4   # input channels per group up to this: the channel loop unrolled
                         # (a stem's 3: the tap loop's overhead was a tap's 3 steps' share)
MAX_PANEL_BYTES = L1_BYTES * 3 // 4   # an item's im2col panel (K x its pixel vectors)
PANEL_LOAD_COST = 0.25  # a load's cost beside an FMA's in the im2col variant's steps
# the bf16 pairs panel (conv_panel_pairs.py) for more than a stem's channels: output channels
# per group at least, as its conversion of the panel to pairs is shared by them. Measured
# (AMD Zen 4, 1 thread, + batch norm + relu6, ms, float32 on exact operands / the panel):
# 1x1 16->96 at 112x112 0.85 / 0.60, 24->144 at 56 0.32 / 0.18, 32->192 at 28 0.15 / 0.09,
# 24->24 at 56 0.091 / 0.077, 3x3 8->64 at 56 0.35 / 0.20; but 1x1 32->16 at 112 0.19-0.26 /
# 0.18-0.30 and 48->8 at 56 0.054 / 0.056
MIN_PANEL_PAIRS_CHANNELS = 24
# ... and in place of the pairs channel plan up to this K (its tile has 3 or more pixel
# vectors; its epilogue runs along the pixels, no transposes). Measured as above, channel
# plan / panel: 1x1 64->384 at 14x14 0.110 / 0.081, 64->128 at 28 0.149 / 0.111, 96->576 at
# 14 0.214 / 0.180, 96->24 at 56 0.183 / 0.156, 80->480 at 14 0.160 / 0.132, 1x1/s2 64->128
# at 56 0.145 / 0.120, 128->256 at 28 0.140 / 0.117; about even from K = 144 to 192, and
# 256->512/s2 at 14 0.138 / 0.196 (one pixel vector per tile)
MAX_PANEL_PAIRS_K = 128
# the pixel plan's loss where a stride-s row is read as s vectors and a shuffle, or gathered
STRIDE_PENALTY = {"contiguous": 1.0, "deinterleave": 0.85, "gather": 0.5}
CHANNEL_PLAN_COST = 1.1   # the channel plan's extra cost per product (its broadcasts, the
                          # element-wise epilogue): it must save more lanes than this
# an input image past STREAMED_INPUT_L2S x L2 costs the channel plan this factor: it reads the
# image once per channel block, one broadcast per input channel a plane apart. Measured
# (AMD Zen 4, 1 MB L2, 1 thread): conv1d 512->512 k3/s2 over 1599 and 3199 samples (3.3 and
# 6.5 MB) ran at 69 and 51 GFLOP/s on the channel plan, 90 and 86 on the pixel plan; at 799
# (1.6 MB) the channel plan led (95 vs 88). ResNet's strided layers keep the channel plan
# (1x1 256->512/s2 at 56x56, 3.2 MB: 68 against the pixel plan's 60 GFLOP/s)
STREAMED_INPUT_L2S = 2
STREAMED_INPUT_COST = 0.9
# an output image past L2 is written back to L3 as MR store streams (the tile's channel
# planes), NV vectors per plane and visit. With few products per output (K = taps x C_in up
# to STREAMED_OUTPUT_K) the streams' misses outweigh the FMAs, so the tile writes at least
# STREAMED_OUTPUT_NV vectors (4 lines) per plane. Measured (AMD Zen 4, 1 MB L2, 1 thread, a
# loaded guest, 1x1 convs, interleaved): 16->96 at 112x112 + silu 12x2 1.26 ms, 6x4 0.97;
# 24->144 at 56x56 0.271 -> 0.242 (6x4); 64->256 at 56x56 1.70 -> 1.57. Outputs within L2
# keep the tile (40->240 at 28x28 + silu: 12x2 0.231, 6x4 0.253)
STREAMED_OUTPUT_K = 64
STREAMED_OUTPUT_NV = 4


@dataclass(frozen=True)
class ConvPlan:
    lanes: int
    mr: int             # output channels per register tile
    nv: int             # pixel vectors per tile
    flat: bool          # pixel vectors along the flattened output plane (else along rows)
    n_vec: int          # pixel vectors per output plane
    vpr: int            # vectors per output row (row mode)
    n_tiles: int        # the last one may have vectors past the plane (masked off)
    ocb: int            # channel blocks per group
    blocks: int         # groups * ocb
    chunk_blocks: int   # channel blocks per work item
    chunks: int
    batch: int
    table: bool         # the per-item tap table fits (else offsets are computed per block)
    cc: int             # input channels per pass (the tile's input rows of cc channels
                        # stay in L1 while every channel block of the item uses them)
    im2col: bool = False  # the item's input vectors of every (tap, channel) are packed
                          # once into a stack panel that each channel block reads
    pairs: bool = False   # the im2col panel in bf16 pairs along K (conv_panel_pairs.py)

    @property
    def items(self) -> int:
        return self.batch * self.n_tiles * self.chunks


def _extents(variables) -> tuple:
    return tuple(v.extent for v in variables)


def flat_ok(kernel: Kernel) -> bool:
    """Whether pixel vectors can run along the flattened output plane: one tap shift for
    every pixel (stride 1, the output as wide as the input, input rows adjacent in memory)
    and every epilogue access linear in the flat pixel index."""
    c = kernel.conv
    _, _, oh, ow = c.out_vars
    _, _, xh, xw = c.x_vars
    if c.attrs.stride != (1, 1) or ow.extent != xw.extent or ow.extent < 2:
        return False
    xs = c.strides(c.x, c.x_vars)
    if xs[3] != 1 or (oh.extent > 1 and xs[2] != xw.extent):
        return False
    accesses = [ld.offset for ld in kernel.loads()[2:]] + [kernel.stores[0].offset]
    return oh.extent == 1 or all(a.coeff(oh) == ow.extent * a.coeff(ow) for a in accesses)


def _choose_tile(cout_g: int, n_vec: int, regs: int, least_nv: int = 1) -> tuple:
    """(MR, NV): the register tile with the least cost per useful FMA: FMAs or loads per
    step (two of each per cycle), times the channel rows and pixel vectors wasted at the
    edges (the last tile of a plane computes NV vectors, whether they exist or not); NV at
    least `least_nv` (or the plane's vectors)."""
    best = None
    most = min(MAX_NV, max(n_vec, 1))
    for nv in range(min(least_nv, most), most + 1):
        for mr in range(1, max(min(cout_g, MAX_MR), 1) + 1):
            if mr * nv + nv + 1 > regs:
                break
            waste = -(-cout_g // mr) * mr / max(cout_g, 1) * \
                (-(-n_vec // nv) * nv / max(n_vec, 1))
            # (1 + 2 / tile): loop and address overhead per step, spread over the tile;
            # (1 + 4 / mr): the input vectors each step loads (from L2 when the tile's rows
            # of all channels exceed L1) are shared by mr channels (measured: 3x3 256->256 at
            # 14x14 runs 2x faster with 12x2 than with 8x3 or 6x4)
            cost = max(mr * nv, mr + nv) / (mr * nv) * waste * (1 + 2 / (mr * nv)) * \
                (1 + 4 / mr)
            key = (round(cost, 6), -mr * nv, -mr)
            if best is None or key < best[0]:
                best = (key, mr, nv)
    return best[1], best[2]


def _choose_panel_tile(cout_g: int, n_vec: int, regs: int, k: int, vector_bytes: int):
    """(MR, NV) for the im2col variant, or None where no tile's panel (K x NV vectors)
    fits MAX_PANEL_BYTES. Its steps load from L1 (the panel and one block's weights) with
    no tap overhead, so the cost is the rows and vectors wasted at the edges and, lightly,
    the loads per FMA (measured on Zen 4, % of the FMA peak: 7x7/s2 stem 3->64, 8x2, 8x3
    and 16x1 93%, 11x2 90%; 3x3/s2 stem 3->32, 4x6 and 16x1 84%, 8x2 and 8x3 80%)."""
    best = None
    for nv in range(1, min(MAX_NV, max(n_vec, 1)) + 1):
        if k * nv * vector_bytes > MAX_PANEL_BYTES:
            break
        for mr in range(1, max(min(cout_g, MAX_MR), 1) + 1):
            if mr * nv + nv + 1 > regs:
                break
            waste = -(-cout_g // mr) * mr / max(cout_g, 1) * \
                (-(-n_vec // nv) * nv / max(n_vec, 1))
            cost = waste * (1 + PANEL_LOAD_COST * (mr + nv) / (mr * nv))
            key = (round(cost, 6), -mr * nv, -mr)
            if best is None or key < best[0]:
                best = (key, mr, nv)
    return None if best is None else best[1:]


def plan(kernel: Kernel, vector_bits: int, threads: int):
    """The kernel's plan: pixels along the vectors (ConvPlan), or output channels along them
    (conv_channels.ChannelPlan) where `prepack` chose that."""
    if kernel.conv.winograd:
        return conv_winograd.plan(kernel, vector_bits, threads)
    if kernel.conv.channel_vectors:
        if kernel.conv.precision == bf16.BF16:
            return conv_pairs.plan(kernel, vector_bits, threads)
        return conv_channels.plan(kernel, vector_bits, threads)
    return pixel_plan(kernel, vector_bits, threads)


def choose_plan(kernel: Kernel, vector_bits: int, threads: int, winograd: int = 2):
    """For constant weights about to be prepacked: a bf16 pairs plan where the precision
    policy asks for bf16 (`bf16_plan`: the caller has made a conv that none takes float32);
    Winograd where it applies (with tiles up to `winograd`: JITCORE_WINOGRAD, 0 for none;
    never under a bf16 precision, whose products are of the rounded operands, not of
    transformed ones), else the channel plan where it wastes fewer lanes than the pixel plan
    by more than its extra cost, else the pixel plan."""
    precision = kernel.conv.precision
    if precision == bf16.BF16:
        return bf16_plan(kernel, vector_bits, threads)
    m = conv_winograd.variant(kernel, winograd) if precision == bf16.FP32 else 0
    if m:
        return conv_winograd.plan(kernel, vector_bits, threads, m)
    pixel = pixel_plan(kernel, vector_bits, threads, packing=True)
    if conv_channels.eligible(kernel, vector_bits):
        channel = conv_channels.plan(kernel, vector_bits, threads)
        efficiency = channel.efficiency
        if _image_bytes(kernel) > STREAMED_INPUT_L2S * cache_sizes()[2]:
            efficiency *= STREAMED_INPUT_COST
        if efficiency > pixel_efficiency(kernel, pixel) * CHANNEL_PLAN_COST:
            return channel
    return pixel


def bf16_plan(kernel: Kernel, vector_bits: int, threads: int):
    """The bf16 pairs plan of a conv with constant weights (precision BF16: the target has
    AVX512_BF16): the channel plan over pairs of input channels (conv_pairs.py), or the
    im2col panel in pairs along K (a stem's few channels; too few products per output for
    the channel plan; or a short K, up to MAX_PANEL_PAIRS_K: conv_panel_pairs.py); None where
    neither takes it."""
    c = kernel.conv
    channel = conv_pairs.eligible(kernel)
    wide = c.out_vars[1].extent // c.attrs.groups >= MIN_PANEL_PAIRS_CHANNELS
    if not channel or wide and c.taps * c.cin_group <= MAX_PANEL_PAIRS_K:
        pixel = pixel_plan(kernel, vector_bits, threads, packing=True, any_channels=wide)
        if pixel.pairs:
            return pixel
    return conv_pairs.plan(kernel, vector_bits, threads) if channel else None


def _image_bytes(kernel: Kernel) -> int:
    """The bytes of one input image (all its channels)."""
    c = kernel.conv
    _, cin, h, w = _extents(c.x_vars)
    return cin * h * w * c.dtype.itemsize


def pixel_efficiency(kernel: Kernel, p: ConvPlan) -> float:
    """Useful products / computed ones of a pixel plan, less its strided reads' cost."""
    c = kernel.conv
    _, cout, oh, ow = _extents(c.out_vars)
    cout_g = cout // c.attrs.groups
    lanes_used = oh * ow / max(p.n_vec * p.lanes, 1) if p.flat else ow / (p.vpr * p.lanes)
    tiles_used = p.n_vec / (p.n_tiles * p.nv)
    rows_used = cout_g / (p.ocb * p.mr)
    lane_step = 1 if p.flat else c.attrs.stride[1] * c.strides(c.x, c.x_vars)[3]
    reads = "contiguous" if lane_step == 1 else \
        "deinterleave" if lane_step <= MAX_DEINTERLEAVE else "gather"
    return lanes_used * tiles_used * rows_used * STRIDE_PENALTY[reads]


def pixel_plan(kernel: Kernel, vector_bits: int, threads: int,
               packing: bool = False, any_channels: bool = False) -> ConvPlan:
    """`packing`: for weights about to be prepacked, which decides the im2col variant (the
    kernel's Conv.im2col records it); `any_channels`: that variant for any number of input
    channels whose panel fits (the bf16 pairs panel: `bf16_plan`), not only a stem's few."""
    c = kernel.conv
    n, o, oh, ow = _extents(c.out_vars)
    lanes = max(vector_bits // c.dtype.bits, 1)
    groups = c.attrs.groups
    cout_g = o // groups
    flat = flat_ok(kernel)
    vpr = -(-ow // lanes)
    n_vec = -(-(oh * ow) // lanes) if flat else oh * vpr
    regs = 32 if vector_bits >= 512 else 16
    # few input channels (a stem's 3): a tap's steps were too few to hide the tap loop, and
    # every channel block read the (strided, masked) input again; im2col packs it once
    tile = _choose_panel_tile(cout_g, n_vec, regs, c.taps * c.cin_group,
                              lanes * c.dtype.itemsize) \
        if c.im2col or packing and groups == 1 and \
        (c.cin_group <= SHORT_CHANNEL_LOOP or any_channels) and \
        c.strides(c.x, c.x_vars)[3] == 1 else None
    im2col = tile is not None
    streamed = o * oh * ow * c.dtype.itemsize > cache_sizes()[2] and \
        c.taps * c.cin_group <= STREAMED_OUTPUT_K
    mr, nv = tile if im2col else _choose_tile(cout_g, n_vec, regs,
                                              STREAMED_OUTPUT_NV if streamed else 1)
    n_tiles = -(-n_vec // nv)
    ocb = -(-cout_g // mr)
    blocks = groups * ocb
    # the im2col variant's panel holds all of K: no passes
    cc = c.cin_group if im2col else _channels_per_pass(kernel, lanes, nv, flat)
    chunks = 1
    if threads > 1 and 0 < n * n_tiles < 4 * threads:        # too few items: split channels
        chunks = min(max(blocks, 1), -(-4 * threads // (n * n_tiles)))
    if cc < c.cin_group:          # partial sums of the item's blocks live in a stack buffer
        per_block = mr * nv * lanes * c.dtype.itemsize
        chunks = max(chunks, -(-blocks * per_block // MAX_PARTIAL_BYTES))
    chunk_blocks = max(-(-blocks // chunks), 1)
    chunks = max(-(-blocks // chunk_blocks), 1)
    # the precision policy's bf16 (a target with AVX512_BF16) runs the panel in bf16 pairs
    pairs = im2col and c.precision == bf16.BF16 and lanes == 16 and c.dtype.name == "float32"
    return ConvPlan(lanes, mr, nv, flat, n_vec, vpr, n_tiles, ocb, blocks,
                    chunk_blocks, chunks, n, not im2col and c.taps * nv <= MAX_TABLE, cc,
                    im2col, pairs)


def _channels_per_pass(kernel: Kernel, lanes: int, nv: int, flat: bool) -> int:
    """Input channels whose rows under one pixel tile (all taps) fit half of L1."""
    c = kernel.conv
    _, _, h, w = _extents(c.x_vars)
    kh, kw = _extents(c.w_vars[2:])
    sw, (dh, dw) = c.attrs.stride[1], c.attrs.dilation
    if flat:                          # one span of the flattened plane
        span = nv * lanes + (kh - 1) * dh * w + (kw - 1) * dw
    else:                             # up to nv rows of kh taps each, sw * lanes wide
        rows = min(nv, _extents(c.out_vars)[2]) * kh
        span = rows * min(w, sw * lanes + (kw - 1) * dw)
    per_channel = span * c.dtype.itemsize + 64 * nv      # + a line at each vector's edge
    cc = max(L1_BYTES // 2 // per_channel, 8)
    return c.cin_group if cc >= c.cin_group else cc


# ---- weight prepacking --------------------------------------------------------------------

def packed_weights(dense: np.ndarray, groups: int, mr: int,
                   columns_inner: bool = False) -> np.ndarray:
    """OIHW weights -> [groups * blocks][KH * KW][C_in / groups][MR], zero rows past C_out
    (MR: the pixel plan's channels per tile, or the channel plan's NR); with
    `columns_inner` (the channel plan's order for a conv without padding),
    [groups * blocks][KH][C_in / groups][KW][MR]."""
    o, cg, kh, kw = dense.shape
    cout_g = o // groups
    ocb = -(-cout_g // mr)
    out = np.zeros((groups, ocb * mr, cg, kh, kw), dtype=dense.dtype)
    out[:, :cout_g] = dense.reshape(groups, cout_g, cg, kh, kw)
    out = out.reshape(groups, ocb, mr, cg, kh, kw)
    order = (0, 1, 4, 3, 5, 2) if columns_inner else None
    if order is None:
        out = out.reshape(groups, ocb, mr, cg, kh * kw).transpose(0, 1, 4, 3, 2)
    else:
        out = out.transpose(order)
    return np.ascontiguousarray(out).ravel()


def _dense_weights(flat: np.ndarray, load: Load, variables) -> np.ndarray:
    """The (O, C_in/groups, KH, KW) array a load reads: flat[const + sum of coeff * index]."""
    shape = _extents(variables)
    flat = flat.ravel()
    coeffs = [load.offset.coeff(v) for v in variables]
    start = load.offset.const
    last = start + sum(c * (n - 1) for c, n in zip(coeffs, shape))
    if flat.size and min(coeffs) >= 0 and 0 <= start and last < flat.size:
        # a strided view (the packing copies it): a gather's index array cost ResNet-18's
        # prepacking ~0.45 s of its ~0.8 s
        return np.lib.stride_tricks.as_strided(
            flat[start:], shape, [c * flat.itemsize for c in coeffs], writeable=False)
    idx = np.full(shape, start, dtype=np.int64)
    for axis, v in enumerate(variables):
        ar = np.arange(v.extent).reshape([-1 if a == axis else 1 for a in range(4)])
        idx = idx + load.offset.coeff(v) * ar
    return flat[idx] if flat.size else np.zeros(shape, flat.dtype)


def prepack(lowered, vector_bits: int, threads: int, winograd: int = 2) -> int:
    """Pack constant conv weights for the kernels (in place in `lowered`, as gemm.prepack
    does for GEMM operands). Returns the bytes packed."""
    packed_bytes = 0
    const_bufs = lowered.buffers_of_kind("const")
    loads = loads_per_slot(lowered)
    for kernel in lowered.kernels:
        c = kernel.conv
        if kernel.kind != Kind.CONV or c.w.buffer.kind != "const":
            continue
        slot = c.w.buffer.slot
        if loads[slot] != 1:
            continue
        if c.precision == bf16.BF16 and bf16_plan(kernel, vector_bits, threads) is None:
            # no bf16 kernel takes it (too few products per output): float32 is exact, and
            # faster than rounding its inputs as read. Measured (AMD Zen 4, 1 thread, with
            # batch norm and relu6, ms, rounded / float32): MobileNetV2's 1x1 16->96 at
            # 112x112 1.00 / 0.56, 32->16 at 112 0.25 / 0.18, 24->144 at 56 0.39 / 0.33
            kernel.conv = c = replace(c, precision=bf16.FP32)
        p = choose_plan(kernel, vector_bits, threads, winograd)
        index = const_bufs.index(c.w.buffer)
        dense = _dense_weights(lowered.consts[index].array, c.w, c.w_vars)
        channel = isinstance(p, ChannelPlan)
        transformed = isinstance(p, WinogradPlan)
        pairs = not transformed and p.pairs
        precision = c.precision
        if precision == bf16.BF16_EMULATED:
            dense = bf16.rounded(dense)
        dtype = dt.int32 if pairs else c.w.buffer.dtype
        if transformed:
            panels = conv_winograd.packed_weights(dense, p.m, p.nr)
        elif pairs and channel:
            panels = conv_pairs.packed_weights(dense, c.attrs.groups, p.nr)
        elif pairs:
            panels = conv_pairs.panel_weights(packed_weights(dense, 1, p.mr),
                                              c.taps * c.cin_group, p.mr)
        else:
            panels = packed_weights(dense, c.attrs.groups, p.nr if channel else p.mr,
                                    columns_inner=channel and p.columns_inner)
        lowered.consts[index] = ConstArray.derived(panels, lowered.consts[index],
                                                   f"conv panels {p}")
        new = Buffer(c.w.buffer.name, "const", dtype, panels.shape, (1,), slot)
        lowered.buffers[slot] = new
        const_bufs[index] = new
        kernel.conv = replace(c, w=Load(new, lin(0)), prepacked=True, channel_vectors=channel,
                              im2col=isinstance(p, ConvPlan) and p.im2col,
                              winograd=p.m if transformed else 0, precision=precision)
        packed_bytes += panels.nbytes
    return packed_bytes


# ---- code ---------------------------------------------------------------------------------

def _vec_const(ty, values):
    return ir.Constant(ty, [ir.Constant(ty.element, v) for v in values])


class ConvEmitter(ConvKernelEmitter):
    """Emits one conv kernel (Kind.CONV) with its plan (`plan`: a ConvPlan)."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p, c = self.p, self.c
        self.addr_vty = ir.VectorType(u.I64, p.lanes)
        self.ws = None if c.prepacked else c.strides(c.w, c.w_vars)
        # pixel and tap coordinates per lane: i32 lanes (half the instructions of i64, so
        # less code and compile time) unless an image is too large for them
        reach = (max(self.oh * self.ow, self.h, self.w) + p.lanes) * \
            max(c.attrs.stride + c.attrs.dilation) + sum(c.attrs.padding) + \
            max(self.kh, self.kw) * max(c.attrs.dilation)
        self.lane_int = u.I32 if reach < 2**30 else u.I64
        self.ivty = ir.VectorType(self.lane_int, p.lanes)
        self.mask_int = ir.IntType(p.lanes)
        self.iota = _vec_const(self.ivty, range(p.lanes))
        # a tap's input vector is contiguous (masked load), or every s-th element of s
        # contiguous vectors (a stride-s conv of a row: s loads and a shuffle), else a gather
        self.lane_step = 1 if p.flat else c.attrs.stride[1] * self.xs[3]
        self.contiguous = self.lane_step == 1
        self.deinterleave = not self.contiguous and self.xs[3] == 1 and \
            self.lane_step <= MAX_DEINTERLEAVE
        # a short epilogue (epilogue.short_epilogue: a bias, silu, a residual) runs on each
        # accumulator in place, unrolled (with AVX-512 masks: one masked version); a longer
        # one once, in a loop over the tile spilled to the stack
        self.unrolled_epilogue = self.masked_tail and self.epilogue_vector and \
            short_epilogue(self.kernel)

    def body(self):
        b, p = self.b, self.p
        self.alloc_sums()
        self.ctile = u.alloca_once(b, ir.ArrayType(self.vty, p.mr * p.nv), name="ctile")
        self.ctile.align = 64
        self.passes = p.cc < self.cin_g
        if self.passes:
            self.partial = u.alloca_once(
                b, ir.ArrayType(self.vty, p.chunk_blocks * p.mr * p.nv), name="partial")
            self.partial.align = 64
        self.epi = {name: u.alloca_once(b, ir.ArrayType(u.I64, p.nv), name=f"epi_{name}")
                    for name in ("oh", "ow", "count")}
        if p.im2col:
            self.panel = u.alloca_once(
                b, ir.ArrayType(self.vty, self.c.taps * self.cin_g * p.nv), name="panel")
            self.panel.align = 64
        if p.table:
            entries = max(self.c.taps * p.nv, 1)
            self.tab_off = u.alloca_once(b, ir.ArrayType(u.I64, entries), name="tap_off")
            self.tab_mask = u.alloca_once(b, ir.ArrayType(self.mask_int, entries),
                                          name="tap_mask")
        with b.goto_entry_block():    # the loop bounds, hidden from the full unroller
            self.n_kh, self.n_kw, self.n_ci, self.n_mr, self.n_cc = (
                u.opaque(b, v) for v in (self.kh, self.kw, self.cin_g, p.mr, p.cc))
            self.n_nv = u.opaque(b, p.nv)
            self.n_k = u.opaque(b, self.c.taps * self.cin_g)
        # (the im2col variant never takes passes: its panel holds all of K)
        if self.cin_g <= SHORT_CHANNEL_LOOP and not self.passes:
            self.n_ci = u.I64(self.cin_g)     # unrolled: a stem's 3 channels per tap
        per_image = p.n_tiles * p.chunks
        with u.for_range(b, self.start, self.stop, 1, name="item") as t:
            n = b.sdiv(t, u.I64(per_image))
            rem = b.srem(t, u.I64(per_image))
            tile, chunk = b.sdiv(rem, u.I64(p.chunks)), b.srem(rem, u.I64(p.chunks))
            self.item(n, tile, chunk)

    def lane(self, value):
        """An i64 as a lane coordinate."""
        return value if self.lane_int is u.I64 else self.b.trunc(value, self.lane_int)

    def wide(self, value):
        return value if self.lane_int is u.I64 else self.b.sext(value, u.I64)

    # -- pixels of a tile -------------------------------------------------------------------
    def pixels(self, tile) -> list:
        """Per vector j of the tile: (lane oh, lane ow, valid lanes), and the epilogue's
        (oh, ow, count) stored in the epi arrays."""
        b, p = self.b, self.p
        out = []
        for j in range(p.nv):
            v = b.add(b.mul(tile, u.I64(p.nv)), u.I64(j))
            if p.flat:
                q0 = b.mul(v, u.I64(p.lanes))
                count = u.imin(b, u.I64(p.lanes), b.sub(u.I64(self.oh * self.ow), q0))
                q = b.add(u.splat(b, self.lane(q0), p.lanes), self.iota)
                lane_oh = b.udiv(q, u.const(self.ivty, self.ow))
                lane_ow = b.urem(q, u.const(self.ivty, self.ow))
                epi_oh, epi_ow = u.I64(0), q0
            else:
                oh = b.sdiv(v, u.I64(p.vpr))
                ow0 = b.mul(b.srem(v, u.I64(p.vpr)), u.I64(p.lanes))
                count = u.imin(b, u.I64(p.lanes), b.sub(u.I64(self.ow), ow0))
                lane_oh = u.splat(b, self.lane(oh), p.lanes)
                lane_ow = b.add(u.splat(b, self.lane(ow0), p.lanes), self.iota)
                epi_oh, epi_ow = oh, ow0
            count = b.select(b.icmp_signed("<", v, u.I64(p.n_vec)), count, u.I64(0))
            valid = b.icmp_signed("<", self.iota, u.splat(b, self.lane(count), p.lanes))
            for name, value in (("oh", epi_oh), ("ow", epi_ow), ("count", count)):
                b.store(value, b.gep(self.epi[name], [u.I64(0), u.I64(j)]))
            out.append((lane_oh, lane_ow, valid))
        return out

    def tap(self, pixels, kh, kw) -> list:
        """Per pixel vector: (input offset of lane 0 within a channel plane, lane mask) of
        tap (kh, kw); masked lanes read the padding (zero) or lie past the output's end."""
        b, c = self.b, self.c
        (sh, sw), (pt, _, pl, _), (dh, dw) = c.attrs.stride, c.attrs.padding, c.attrs.dilation
        dy = b.sub(b.mul(kh, u.I64(dh)), u.I64(pt))
        dx = b.sub(b.mul(kw, u.I64(dw)), u.I64(pl))
        out = []
        for lane_oh, lane_ow, valid in pixels:
            ih = b.add(b.mul(lane_oh, u.const(self.ivty, sh)),
                       u.splat(b, self.lane(dy), self.p.lanes))
            iw = b.add(b.mul(lane_ow, u.const(self.ivty, sw)),
                       u.splat(b, self.lane(dx), self.p.lanes))
            inside = b.and_(b.icmp_unsigned("<", ih, u.const(self.ivty, self.h)),
                            b.icmp_unsigned("<", iw, u.const(self.ivty, self.w)))
            mask = b.and_(valid, inside)
            ih0 = self.wide(b.extract_element(ih, u.I32(0)))
            iw0 = self.wide(b.extract_element(iw, u.I32(0)))
            off = b.add(b.mul(ih0, u.I64(self.xs[2])), b.mul(iw0, u.I64(self.xs[3])))
            out.append((off, mask))
        return out

    def fill_table(self, pixels):
        b = self.b
        with u.for_range(b, u.I64(0), self.n_kh, 1, name="tkh") as kh:
            with u.for_range(b, u.I64(0), self.n_kw, 1, name="tkw") as kw:
                base = b.mul(b.add(b.mul(kh, u.I64(self.kw)), kw), u.I64(self.p.nv))
                for j, (off, mask) in enumerate(self.tap(pixels, kh, kw)):
                    at = b.add(base, u.I64(j))
                    b.store(off, b.gep(self.tab_off, [u.I64(0), at]))
                    b.store(b.bitcast(mask, self.mask_int),
                            b.gep(self.tab_mask, [u.I64(0), at]))

    def table_tap(self, kh, kw) -> list:
        b = self.b
        base = b.mul(b.add(b.mul(kh, u.I64(self.kw)), kw), u.I64(self.p.nv))
        out = []
        for j in range(self.p.nv):
            at = b.add(base, u.I64(j))
            off = b.load(b.gep(self.tab_off, [u.I64(0), at]))
            bits = b.load(b.gep(self.tab_mask, [u.I64(0), at]))
            out.append((off, b.bitcast(bits, ir.VectorType(ir.IntType(1), self.p.lanes))))
        return out

    # -- one work item ------------------------------------------------------------------------
    def item(self, n, tile, chunk):
        b, p = self.b, self.p
        pixels = self.pixels(tile)
        x_image = b.add(u.I64(self.c.x.offset.const), b.mul(n, u.I64(self.xs[0])))
        if p.im2col:
            self.pack_panel(pixels, x_image)
        elif p.table:
            self.fill_table(pixels)
        lo = b.mul(chunk, u.I64(p.chunk_blocks))
        hi = u.imin(b, b.add(lo, u.I64(p.chunk_blocks)), u.I64(p.blocks))
        if not self.passes:
            self.blocks(pixels, x_image, n, lo, hi, u.I64(0), self.n_ci, None, None)
            return
        # passes over cc input channels at a time; the blocks' sums wait in `partial`
        with u.for_range(b, u.I64(0), self.n_ci, p.cc, name="cc", partial=True) as c0:
            count = u.imin(b, self.n_cc, b.sub(self.n_ci, c0))
            first = b.icmp_signed("==", c0, u.I64(0))
            last = b.icmp_signed(">=", b.add(c0, count), self.n_ci)
            self.blocks(pixels, x_image, n, lo, hi, c0, count, first, last)

    def blocks(self, pixels, x_image, n, lo, hi, c0, count, first, last):
        """Channel blocks lo..hi of the item over input channels c0..c0+count: start from
        zero (first pass) or the partial sums; end with the epilogue (last pass) or by
        saving the partial sums."""
        b, p = self.b, self.p
        with u.for_range(b, lo, hi, 1, name="blk") as blk:
            g = b.sdiv(blk, u.I64(p.ocb))
            ob = b.srem(blk, u.I64(p.ocb))
            oc0 = b.mul(ob, u.I64(p.mr))
            saved = None
            if first is not None:
                saved = b.gep(b.bitcast(self.partial, self.vty.as_pointer()),
                              [b.mul(b.sub(blk, lo), u.I64(p.mr * p.nv))])
            self.start_sums(saved, first)
            if p.im2col:
                self.micro_panel(blk)
            else:
                x_group = b.add(x_image, b.mul(b.add(b.mul(g, u.I64(self.cin_g)), c0),
                                               u.I64(self.xs[1])))
                with u.for_range(b, u.I64(0), self.n_kh, 1, name="kh") as kh:
                    with u.for_range(b, u.I64(0), self.n_kw, 1, name="kw") as kw:
                        taps = self.table_tap(kh, kw) if p.table else \
                            self.tap(pixels, kh, kw)
                        self.micro(taps, x_group, blk, g, oc0, kh, kw, c0, count)
            if last is None:
                self.store_tile(n, g, oc0)
            else:
                with b.if_else(last) as (then, otherwise):
                    with then:
                        self.store_tile(n, g, oc0)
                    with otherwise:
                        self.save_sums(saved)

    def weight_rows(self, blk, g, oc0, kh, kw) -> tuple:
        """Per tile row r: the offset of its weight at channel 0 of this tap; and the step
        per input channel."""
        b, p, c = self.b, self.p, self.c
        if c.prepacked:
            tap = b.add(b.mul(kh, u.I64(self.kw)), kw)
            base = b.mul(b.add(b.mul(blk, u.I64(c.taps)), tap), u.I64(self.cin_g * p.mr))
            return [b.add(base, u.I64(r)) for r in range(p.mr)], p.mr
        so, sc, skh, skw = self.ws
        common = b.add(u.I64(c.w.offset.const),
                       b.add(b.mul(kh, u.I64(skh)), b.mul(kw, u.I64(skw))))
        rows = []
        for r in range(p.mr):          # rows past the group's channels read its last, unused
            oc = u.imin(b, b.add(oc0, u.I64(r)), u.I64(self.cout_g - 1))
            oc = b.add(oc, b.mul(g, u.I64(self.cout_g)))
            rows.append(b.add(common, b.mul(oc, u.I64(so))))
        return rows, sc

    def micro(self, taps, x_group, blk, g, oc0, kh, kw, c0, count):
        """accs += the tap's products over input channels c0..c0+count of the group."""
        b, p = self.b, self.p
        rows, w_step = self.weight_rows(blk, g, oc0, kh, kw)
        rows = [b.add(r, b.mul(c0, u.I64(w_step))) for r in rows]
        x_base = self.base_ptr(self.c.x.buffer)
        w_base = self.base_ptr(self.c.w.buffer)
        starts = [b.add(x_group, off) for off, _ in taps]
        with u.for_range(b, u.I64(0), count, 1, name="ci") as ci:
            x_ci = b.mul(ci, u.I64(self.xs[1]))
            xv = [self.load_x(x_base, b.add(start, x_ci), mask)
                  for start, (_, mask) in zip(starts, taps)]
            w_ci = b.mul(ci, u.I64(w_step))
            for r in range(p.mr):
                w = b.load(b.gep(w_base, [b.add(rows[r], w_ci)]))
                if not self.c.prepacked:          # (prepacked weights were rounded then)
                    w = self.rounded(w)
                self.accumulate(r, u.splat(b, w, p.lanes), xv)

    def pack_panel(self, pixels, x_image):
        """The im2col panel of the item: panel[(tap * C_in + ci) * NV + j] = pixel vector j's
        inputs at tap and channel ci (zeros where the tap reads the padding), in the order
        of the prepacked weights [block][tap][C_in][MR]. Per pixel vector, kernel row and
        channel, the input span every kernel column reads is loaded once (masked to the
        input) and each column's vector is a shuffle of it."""
        b, p, c = self.b, self.p, self.c
        (sh, sw), (pt, _, pl, _), (dh, dw) = c.attrs.stride, c.attrs.padding, c.attrs.dilation
        step = 1 if p.flat else sw                  # input columns between adjacent lanes
        chunks = -(-((p.lanes - 1) * step + (self.kw - 1) * dw + 1) // p.lanes)
        x_base = self.base_ptr(c.x.buffer)
        panel = b.bitcast(self.panel, self.vty.as_pointer())
        # per pixel vector: its first lane's input row (at kernel row 0) and column
        firsts = []
        for lane_oh, lane_ow, _ in pixels:
            oh0 = self.wide(b.extract_element(lane_oh, u.I32(0)))
            ow0 = self.wide(b.extract_element(lane_ow, u.I32(0)))
            firsts.append((b.sub(b.mul(oh0, u.I64(sh)), u.I64(pt)),
                           b.sub(b.mul(ow0, u.I64(sw)), u.I64(pl))))
        with u.for_range(b, u.I64(0), self.n_kh, 1, name="pkh", unroll=False) as kh:
            dy = b.mul(kh, u.I64(dh))
            masks = [[m for _, m in self.tap(pixels, kh, u.I64(kw))]
                     for kw in range(self.kw)] if p.flat else None
            for j, (ih0, col0) in enumerate(firsts):
                ih = b.add(ih0, dy)
                first = b.add(b.mul(ih, u.I64(self.xs[2])), col0)
                if p.flat:      # a span of the flattened plane (rows wrap: the taps' masks)
                    end = (self.h - 1) * self.xs[2] + self.w
                    inside = [b.icmp_unsigned("<", self.lanes_from(b.add(
                        first, u.I64(k * p.lanes))), u.const(self.ivty, end))
                        for k in range(chunks)]
                else:           # a span of one input row
                    row_ok = u.splat(b, b.icmp_unsigned("<", ih, u.I64(self.h)), p.lanes)
                    inside = [b.and_(row_ok, b.icmp_unsigned("<", self.lanes_from(b.add(
                        col0, u.I64(k * p.lanes))), u.const(self.ivty, self.w)))
                        for k in range(chunks)]
                for ci in range(self.cin_g):
                    ptr = b.gep(x_base, [b.add(x_image, b.add(first, u.I64(ci * self.xs[1])))])
                    data = self.rounded(self.concat([u.masked_load(
                        b, b.bitcast(b.gep(ptr, [u.I64(k * p.lanes)]), self.vty.as_pointer()),
                        inside[k], self.vty) for k in range(chunks)]))
                    for kw in range(self.kw):
                        x = b.shuffle_vector(data, data, _vec_const(
                            ir.VectorType(u.I32, p.lanes),
                            [kw * dw + i * step for i in range(p.lanes)]))
                        if p.flat:
                            x = b.select(masks[kw][j], x, u.const(self.vty, 0))
                        row = b.add(b.mul(kh, u.I64(self.kw * self.cin_g)),
                                    u.I64(kw * self.cin_g + ci))
                        b.store(x, b.gep(panel, [b.add(b.mul(row, u.I64(p.nv)), u.I64(j))]),
                                align=64)

    def lanes_from(self, first):
        """The lane coordinates first, first + 1, ... (an i64 first)."""
        return self.b.add(u.splat(self.b, self.lane(first), self.p.lanes), self.iota)

    def concat(self, parts: list):
        """One vector of the parts' lanes in order (parts of equal type)."""
        b = self.b
        while len(parts) > 1:
            joined = []
            for k in range(0, len(parts) - 1, 2):
                n = 2 * parts[k].type.count
                joined.append(b.shuffle_vector(parts[k], parts[k + 1],
                                               _vec_const(ir.VectorType(u.I32, n), range(n))))
            if len(parts) % 2:                    # the odd one out, widened with undef lanes
                last, n = parts[-1], parts[-1].type.count
                joined.append(b.shuffle_vector(last, ir.Constant(last.type, ir.Undefined),
                                               _vec_const(ir.VectorType(u.I32, 2 * n),
                                                          range(2 * n))))
            parts = joined
        return parts[0]

    def micro_panel(self, blk):
        """accs += the block's products over the K = taps x C_in rows of the panel: one
        loop, each step NV plain vector loads and MR broadcasts of adjacent weights."""
        b, p = self.b, self.p
        k_all = self.c.taps * self.cin_g
        panel = b.bitcast(self.panel, self.vty.as_pointer())
        w_blk = b.gep(self.base_ptr(self.c.w.buffer), [b.mul(blk, u.I64(k_all * p.mr))])
        with u.for_range(b, u.I64(0), self.n_k, 1, name="k") as k:
            xv = [b.load(b.gep(panel, [b.add(b.mul(k, u.I64(p.nv)), u.I64(j))]), align=64)
                  for j in range(p.nv)]
            w_k = b.gep(w_blk, [b.mul(k, u.I64(p.mr))])
            for r in range(p.mr):
                self.accumulate(r, u.splat(b, b.load(b.gep(w_k, [u.I64(r)])), p.lanes), xv)

    def load_x(self, base, offset, mask):
        """The input vector at offset (masked lanes zero), bf16-rounded where the precision
        policy asks."""
        return self.rounded(self.load_input(base, offset, mask))

    def load_input(self, base, offset, mask):
        b = self.b
        ptr = b.gep(base, [offset])
        if self.contiguous:
            return u.masked_load(b, b.bitcast(ptr, self.vty.as_pointer()), mask, self.vty)
        if self.deinterleave:
            return self.load_every(ptr, mask)
        # strided along the row: a gather at lane_step elements apart
        step = self.lane_step * self.c.dtype.itemsize
        addr = b.add(u.splat(b, b.ptrtoint(ptr, u.I64), self.p.lanes),
                     _vec_const(self.addr_vty, [i * step for i in range(self.p.lanes)]))
        ptrs = b.inttoptr(addr, ir.VectorType(self.elem.as_pointer(), self.p.lanes))
        fnty = ir.FunctionType(self.vty, [ptrs.type, u.I32, mask.type, self.vty])
        fn = u.declare_intrinsic(b.module, "masked.gather", [self.vty, ptrs.type], fnty)
        return b.call(fn, [ptrs, u.I32(self.c.dtype.itemsize), mask, u.const(self.vty, 0)])

    def load_every(self, ptr, mask):
        """lanes elements s apart from ptr: one masked load of s * lanes contiguous elements
        (only the wanted ones enabled, so nothing outside the row is read) and a shuffle."""
        b, s, lanes = self.b, self.lane_step, self.p.lanes
        wide = s * lanes
        i32s = ir.VectorType(u.I32, wide)
        spread = b.shuffle_vector(mask, mask, _vec_const(i32s, [e // s for e in range(wide)]))
        every = _vec_const(ir.VectorType(ir.IntType(1), wide),
                           [int(e % s == 0) for e in range(wide)])
        wty = ir.VectorType(self.elem, wide)
        data = u.masked_load(b, b.bitcast(ptr, wty.as_pointer()), b.and_(spread, every), wty)
        return b.shuffle_vector(data, data, _vec_const(ir.VectorType(u.I32, lanes),
                                                       [i * s for i in range(lanes)]))

    # -- the epilogue -------------------------------------------------------------------------
    def store_tile(self, n, g, oc0):
        """Rows oc0.. of the block (those inside the group), vectors j < nv: the epilogue
        on each vector, masked to its valid lanes (vectors past the plane have none)."""
        b, p = self.b, self.p
        n_var, oc_var, oh_var, ow_var = self.c.out_vars
        nrow = u.imin(b, self.n_mr, b.sub(u.I64(self.cout_g), oc0))
        oc_base = b.add(b.mul(g, u.I64(self.cout_g)), oc0)
        self.env[n_var] = n
        if self.unrolled_epilogue:
            for j in range(p.nv):
                self.env[oh_var] = b.load(b.gep(self.epi["oh"], [u.I64(0), u.I64(j)]))
                self.env[ow_var] = b.load(b.gep(self.epi["ow"], [u.I64(0), u.I64(j)]))
                count = b.load(b.gep(self.epi["count"], [u.I64(0), u.I64(j)]))
                with b.if_then(b.icmp_signed(">", count, u.I64(0))):
                    for r in range(p.mr):
                        with b.if_then(b.icmp_signed("<", u.I64(r), nrow)):
                            self.env[oc_var] = b.add(oc_base, u.I64(r))
                            self.epilogue(b.load(self.accs[r][j]), count)
            return
        tile = b.bitcast(self.ctile, self.vty.as_pointer())
        for r in range(p.mr):
            for j in range(p.nv):
                b.store(b.load(self.accs[r][j]), b.gep(tile, [u.I64(p.nv * r + j)]),
                        align=64)
        with u.for_range(b, u.I64(0), nrow, 1, name="r") as r:
            self.env[oc_var] = b.add(oc_base, r)
            with u.for_range(b, u.I64(0), self.n_nv, 1, name="j") as j:
                self.env[oh_var] = b.load(b.gep(self.epi["oh"], [u.I64(0), j]))
                self.env[ow_var] = b.load(b.gep(self.epi["ow"], [u.I64(0), j]))
                count = b.load(b.gep(self.epi["count"], [u.I64(0), j]))
                acc = b.load(b.gep(tile, [b.add(b.mul(r, u.I64(p.nv)), j)]), align=64)
                self.epilogue_counted(acc, count)

"""1x1 convolutions over large planes as GEMMs.

A 1x1 conv of stride 1 without padding (one group) over NCHW images whose planes are
contiguous is a matrix product per image, with the plane flattened (p = oh * OW + ow):

    out[n, :, p] = epilogue(W[:, :, 0, 0] @ x[n, :, p])

The conv kernels' pixel plan reads such a layer's input as C_in separate rows of the plane
(one memory stream per input channel: 256 streams for a 256->64 layer, more than the
hardware prefetchers track) and its channel plan broadcasts one input per channel row. The
GEMM kernel (gemm.py) packs a KC x NR block of the image into contiguous panels once and
streams them through its micro-kernel, with the weights (A, read in place) broadcast along
the output channels. The epilogue (bias, folded batch norm, activation, residual add) moves
over unchanged: every access it makes is linear in the flattened pixel index (`_linear`).

Taken for float32 and float64 convs computed at full precision (a bf16 policy keeps its conv
plans: conv_pairs.py, conv_panel_pairs.py), where the rule below holds. Measured on Intel
Ice Lake-SP (1 thread, conv + bias + residual add + relu, CPU-time medians of 3 alternating
process pairs, conv plans / GEMM, ms): 64->64 at 56x56 0.33 / 0.27 (1.25x), 64->256 1.69 /
1.08 (1.56x), 256->64 1.26 / 0.96 (1.32x), 256->128 3.35 / 1.94 (1.73x); at 28x28 128->512
1.28 / 0.84 (1.52x), 512->128 1.37 / 0.80 (1.70x), 512->256 2.94 / 1.62 (1.81x); 16->96 at
112x112 + relu 1.32 / 0.85 (1.55x). Smaller layers went both ways (14x14 and 7x7: 0.81x to
1.44x between runs; MobileNet's narrow 1x1s at 28x28-56x56: 0.64x to 1.13x) and kept the
conv plans; since the GEMM writes short-K tiles row by row (gemm.ROWS_OUTER_MAX_K), those
to 24 or more channels over images past the L2 share take the GEMM too (MIN_CHANNELS).
"""
from __future__ import annotations

from dataclasses import replace

from jitcore.ir import dtypes as dt
from jitcore.passes.kernel import Gemm, Kernel, Kind, Load, Loop, substituted_stores
from jitcore.passes.symbolic import Var, floordiv, lin, mod, substitute

from . import bf16
from .gemm import cache_sizes

# Where the GEMM is taken: at least MIN_PIXELS output pixels per image (a 28x28 plane) and
# MIN_CHANNELS output channels, and an image's input and output too large for L2 (a share
# MIN_L2_SHARE of it): the conv plans keep smaller layers, where they measured as fast or
# faster (see the module doc). MIN_CHANNELS was 64 until the GEMM wrote short-K tiles row by
# row (gemm.ROWS_OUTER_MAX_K); then, in MobileNetV2 (perf samples of both variants in one
# process, Ice Lake-SP, 1 thread), 144->24 at 56x56 + residual ran 1.6-1.9x, 96->24 1.2x,
# and 32->16 at 112x112 0.8x (16 channels: three 6-row tiles for 16 rows)
MIN_PIXELS = 784
MIN_CHANNELS = 24
MIN_L2_SHARE = 0.75

# the layout `f.kernels()` and explain() report for such a kernel
LAYOUT = "NCHW, a 1x1 conv as a GEMM: output channels x the flattened plane"


def _linear(offset) -> bool:
    """Whether an offset is a plain sum of loop variables (no floor division or remainder
    left over from flattening the plane)."""
    return all(isinstance(atom, Var) for atom, _ in offset.terms)


def _eligible(kernel: Kernel) -> bool:
    c = kernel.conv
    if kernel.kind is not Kind.CONV or c.precision != bf16.FP32 or \
            c.dtype not in (dt.float32, dt.float64):
        return False
    a = c.attrs
    extents = [v.extent for v in c.out_vars + c.x_vars + c.w_vars]
    if not all(isinstance(e, int) for e in extents):
        return False
    _, _, kh, kw = (v.extent for v in c.w_vars)
    _, c_out, oh, ow = (v.extent for v in c.out_vars)
    pixels = oh * ow
    image_bytes = (c.cin_group + c_out) * pixels * c.dtype.itemsize
    return (kh, kw) == (1, 1) and a.groups == 1 and tuple(a.stride) == (1, 1) and \
        not any(a.padding) and pixels >= MIN_PIXELS and c_out >= MIN_CHANNELS and \
        image_bytes >= MIN_L2_SHARE * cache_sizes()[2]


def as_gemm(kernel: Kernel) -> Kernel | None:
    """The GEMM kernel computing `kernel` (a conv of Kind.CONV), or None where the conv does
    not qualify or an access is not linear in the flattened plane."""
    if not _eligible(kernel):
        return None
    c = kernel.conv
    n_out, oc, oh, ow = c.out_vars
    xn, xc, xh, xw = c.x_vars
    wo, wc, kh, kw = c.w_vars
    b = Var("b0", n_out.extent)
    m, k, p = Var("m", oc.extent), Var("k", c.cin_group), Var("n", oh.extent * ow.extent)
    row, col = floordiv(lin(p), ow.extent), mod(lin(p), ow.extent)
    a = Load(c.w.buffer, substitute(c.w.offset, {wo: lin(m), wc: lin(k), kh: lin(0),
                                                 kw: lin(0)}))
    x = Load(c.x.buffer, substitute(c.x.offset, {xn: lin(b), xc: lin(k), xh: row, xw: col}))
    stores = substituted_stores(kernel.stores, {n_out: lin(b), oc: lin(m), oh: row, ow: col})
    gemm = Gemm(a, x, m, p, k, (b,), c.dtype)
    loops = [Loop(b, "parallel"), Loop(m, "parallel"), Loop(k, "reduce"), Loop(p, "parallel")]
    converted = replace(kernel, loops=loops, stores=stores, conv=None, gemm=gemm,
                        kind=Kind.GEMM)
    offsets = [ld.offset for ld in converted.loads()] + [s.offset for s in stores]
    return converted if all(_linear(o) for o in offsets) else None


def apply(lowered) -> int:
    """Replace each qualifying conv kernel of `lowered` by its GEMM, in place (before
    prepacking: the GEMM reads the weights as they are); returns how many were replaced."""
    replaced = 0
    for i, kernel in enumerate(lowered.kernels):
        if kernel.conv is None:
            continue
        gemm = as_gemm(kernel)
        if gemm is not None:
            lowered.kernels[i] = gemm
            replaced += 1
    return replaced

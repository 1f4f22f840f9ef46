"""Convolution and batch-norm attributes and typing rules (torch.nn.functional semantics).

A CONV2D node reads x (N, C_in, H, W), weight (C_out, C_in / groups, KH, KW) and optionally a
bias (C_out,), all of one float dtype, and gives (N, C_out, OH, OW) with
    OH = (H + pad_top + pad_bottom - dilation_h * (KH - 1) - 1) // stride_h + 1
and the same along W. Padding is explicit per side (torch's "same" pads an even kernel more
at the bottom/right), so the front resolves "same" and "valid" before building the node.
"""
from __future__ import annotations

from typing import NamedTuple

from .errors import DTypeError, ShapeError


class ConvAttrs(NamedTuple):
    stride: tuple        # (sh, sw), >= 1
    padding: tuple       # (top, bottom, left, right), >= 0
    dilation: tuple      # (dh, dw), >= 1
    groups: int

    def __repr__(self):
        s, p, d = self.stride, self.padding, self.dilation
        return (f"stride={s[0]}x{s[1]} pad={p[0]},{p[1]},{p[2]},{p[3]} "
                f"dilation={d[0]}x{d[1]} groups={self.groups}")


def _shapes(src) -> str:
    return ", ".join(f"{s.dtype.name}{tuple(s.shape)}" for s in src)


def conv_out_extent(size: int, pad_lo: int, pad_hi: int, k: int, stride: int,
                    dilation: int) -> int:
    """Output extent along one axis; < 1 when the dilated kernel exceeds the padded input."""
    return (size + pad_lo + pad_hi - dilation * (k - 1) - 1) // stride + 1


def infer_conv2d(src: tuple, attrs) -> tuple:
    """(dtype, shape) of CONV2D, or a ShapeError/DTypeError naming the shapes."""
    op = "conv2d"
    if not isinstance(attrs, ConvAttrs) or len(src) not in (2, 3):
        raise ShapeError(f"{op}: needs x, weight[, bias] and ConvAttrs")
    x, w = src[0], src[1]
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"{op}: x must be (N, C, H, W) and weight (C_out, C_in/groups, KH, "
                         f"KW), got {_shapes(src)}")
    if not x.dtype.is_float or any(s.dtype != x.dtype for s in src):
        raise DTypeError(f"{op}: needs float32 or float64 arrays of one dtype, got "
                         f"{_shapes(src)}")
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    g = attrs.groups
    if g < 1 or c % g or o % g:
        raise ShapeError(f"{op}: groups={g} must divide the input channels ({c}) and the "
                         f"output channels ({o}); shapes {_shapes(src)}")
    if cg != c // g:
        raise ShapeError(f"{op}: weight expects {cg} input channels per group but x has "
                         f"{c} channels in {g} group(s); shapes {_shapes(src)}")
    if len(src) == 3 and src[2].shape != (o,):
        raise ShapeError(f"{op}: bias must have shape ({o},), got {_shapes(src)}")
    if min(attrs.stride) < 1 or min(attrs.dilation) < 1 or min(attrs.padding) < 0:
        raise ShapeError(f"{op}: stride and dilation must be >= 1 and padding >= 0, got "
                         f"{attrs!r}")
    pt, pb, pl, pr = attrs.padding
    oh = conv_out_extent(h, pt, pb, kh, attrs.stride[0], attrs.dilation[0])
    ow = conv_out_extent(wd, pl, pr, kw, attrs.stride[1], attrs.dilation[1])
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: the kernel ({kh}x{kw}, dilation {attrs.dilation[0]}x"
                         f"{attrs.dilation[1]}) is larger than the padded input "
                         f"({h + pt + pb}x{wd + pl + pr}); shapes {_shapes(src)}")
    return x.dtype, (n, o, oh, ow)


def infer_batch_norm(src: tuple, arg) -> tuple:
    """BATCH_NORM: x (N, C, ...) and per-channel (C,) arrays of x's float dtype."""
    x = src[0]
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: x must be (N, C, ...), got {_shapes(src[:1])}")
    if not x.dtype.is_float or any(s.dtype != x.dtype for s in src):
        raise DTypeError(f"batch_norm: needs float arrays of one dtype, got {_shapes(src)}")
    if not (isinstance(arg, tuple) and len(arg) == 3 and len(src) == 3 + arg[1] + arg[2]):
        raise ShapeError("batch_norm: arg must be (eps, has_weight, has_bias)")
    for p in src[1:]:
        if p.shape != (x.shape[1],):
            raise ShapeError(f"batch_norm: running stats, weight and bias must have shape "
                             f"({x.shape[1]},) for x {tuple(x.shape)}, got {_shapes(src[1:])}")
    return x.dtype, x.shape

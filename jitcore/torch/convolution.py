"""aten.convolution in every argument form models export, as jitcore ops.

torch hands aten.convolution per-axis lists that may be shorter than the spatial rank
(`padding=[0]` of a 2-d convolution: EfficientNet's padded stem), and a `transposed` flag.
`convolution` spells the lists out per axis and computes:
  - 1-d and 2-d convolutions with jc.conv1d / jc.conv2d (grouped and depthwise included);
  - transposed convolutions (ConvTranspose1d/2d, any stride, padding, output_padding,
    dilation and groups) as the plain convolution they equal: the input with stride - 1
    zeros between its elements, padded by dilation * (k - 1) - padding on each side (plus
    output_padding after), convolved at stride 1 with the weight flipped spatially and its
    two channel axes swapped within each group.
"""
from __future__ import annotations

import jitcore as jc
from jitcore.ir.errors import ShapeError


def per_axis(value, rank: int, name: str) -> tuple:
    """An int or a list of 1 or `rank` ints (torch's expand_param_if_needed) as `rank` ints."""
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) == 1:
        items = items * rank
    if len(items) != rank:
        raise ShapeError(f"convolution: {name} {value!r} for a {rank}-d convolution")
    return tuple(int(v) for v in items)


def unsupported(weight_rank: int) -> str | None:
    """Why a convolution whose weight has `weight_rank` axes is not lowered, or None."""
    rank = weight_rank - 2
    return None if rank in (1, 2) else f"{rank}-d convolution"


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    """aten.convolution.default with jitcore operands (x, weight, bias: Tracers or None)."""
    rank = weight.ndim - 2
    if isinstance(padding, str):                        # (conv2d.padding, when not decomposed)
        padding_axes = padding
    else:
        padding_axes = per_axis(padding, rank, "padding")
    stride, dilation = per_axis(stride, rank, "stride"), per_axis(dilation, rank, "dilation")
    if transposed:
        return _transposed(x, weight, bias, stride, padding_axes,
                           per_axis(output_padding, rank, "output_padding"), dilation, groups)
    if rank == 1:
        pad = padding_axes if isinstance(padding_axes, str) else padding_axes[0]
        return jc.conv1d(x, weight, bias, stride=stride[0], padding=pad, dilation=dilation[0],
                         groups=groups)
    return jc.conv2d(x, weight, bias, stride=stride, padding=padding_axes, dilation=dilation,
                     groups=groups)


def _transposed(x, weight, bias, stride, padding, output_padding, dilation, groups):
    """A transposed convolution as a stride-1 convolution of the zero-stuffed input."""
    if isinstance(padding, str):
        raise ShapeError(f"conv_transpose: padding {padding!r} (torch takes ints only)")
    if weight.ndim == 3:                                 # 1-d: a 2-d one of height 1
        one = (1,)
        x4 = jc.reshape(x, x.shape[:2] + one + x.shape[2:])
        w4 = jc.reshape(weight, weight.shape[:2] + one + weight.shape[2:])
        y = _transposed(x4, w4, bias, one + stride, (0,) + padding, (0,) + output_padding,
                        one + dilation, groups)
        return jc.reshape(y, y.shape[:2] + y.shape[3:])
    n, c_in, h, w = x.shape
    sh, sw = stride
    if sh > 1 or sw > 1:              # stride - 1 zeros after each element, the last ones cut
        x = jc.reshape(x, (n, c_in, h, 1, w, 1))
        x = jc.pad(x, [(0, 0)] * 3 + [(0, sh - 1), (0, 0), (0, sw - 1)])
        x = jc.reshape(x, (n, c_in, h * sh, w * sw))[:, :, :(h - 1) * sh + 1, :(w - 1) * sw + 1]
    widths = [(0, 0), (0, 0)]
    crops = [slice(None), slice(None)]
    for k, d, p, extra, size in zip(weight.shape[2:], dilation, padding, output_padding,
                                    x.shape[2:]):
        lo, hi = d * (k - 1) - p, d * (k - 1) - p + extra
        widths.append((max(lo, 0), max(hi, 0)))     # negative: cropped instead of padded
        crops.append(slice(max(-lo, 0), size - max(-hi, 0)))
    x = x[tuple(crops)]
    if any(lo or hi for lo, hi in widths):
        x = jc.pad(x, widths)
    # weight (C_in, C_out / g, kh, kw) -> (C_out, C_in / g, kh, kw), flipped spatially
    c_out_g = weight.shape[1]
    wg = jc.reshape(weight, (groups, c_in // groups, c_out_g) + weight.shape[2:])
    wg = jc.transpose(wg, (0, 2, 1, 3, 4))[:, :, :, ::-1, ::-1]
    w2 = jc.reshape(wg, (groups * c_out_g, c_in // groups) + weight.shape[2:])
    return jc.conv2d(x, w2, bias, stride=1, padding=0, dilation=dilation, groups=groups)

"""Pooling ops (`jc.max_pool2d`, `jc.avg_pool2d`, `jc.adaptive_avg_pool2d`) with
torch.nn.functional semantics, on (N, C, H, W) or (C, H, W) float arrays.

The arguments are checked here (errors name the op and the shapes); the window geometry
(padding, ceil_mode, divisors) is `jitcore.ir.pooling`'s. Global average pooling is a mean over
the two spatial axes (the reduction kernels), and an adaptive pooling whose output divides
its input is a plain strided average.
"""
from __future__ import annotations

import operator

import numpy as np

from jitcore.ir import build
from jitcore.ir.errors import DTypeError, ShapeError
from jitcore.ir.ops import Op
from jitcore.ir.pooling import Pool2d

from .core import op
from .tracer import node_of, wrap


def _pair(value, what: str, name: str, allow_none: bool = False) -> tuple:
    """An int or a pair of ints (None entries where allowed), as a pair of Python ints."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value, value)

    def as_int(v):
        if v is None and allow_none:
            return None
        if isinstance(v, (bool, np.bool_)):
            raise TypeError
        return operator.index(v)          # int and numpy integers; floats raise TypeError
    try:
        if len(items) != 2:
            raise TypeError
        return tuple(as_int(v) for v in items)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an int or a pair of ints, got {value!r}") \
            from None


def _source(x, name: str):
    """The (N, C, H, W) node of x (a (C, H, W) input gets a batch axis) and whether it did."""
    node = node_of(x)
    if not node.dtype.is_float:
        raise DTypeError(f"{name}: needs a float32 or float64 input, got {node.dtype.name}")
    if node.ndim not in (3, 4) or 0 in node.shape[-3:]:
        raise ShapeError(f"{name}: expects a 3-d (C, H, W) or 4-d (N, C, H, W) input with "
                         f"non-zero C, H, W, got shape {node.shape}")
    batched = node.ndim == 4
    return (node if batched else build.reshape(node, (1,) + node.shape)), batched


def _result(node, batched: bool):
    return wrap(node if batched else build.reshape(node, node.shape[1:]))


def _windowed(name, x, kernel_size, stride, padding, dilation, ceil_mode, **options):
    src, batched = _source(x, name)
    kernel = _pair(kernel_size, "kernel_size", name)
    stride = kernel if stride is None or stride == () or stride == [] else \
        _pair(stride, "stride", name)
    padding, dilation = _pair(padding, "padding", name), _pair(dilation, "dilation", name)
    shape = src.shape if batched else src.shape[1:]
    for what, v, least in (("kernel_size", kernel, 1), ("stride", stride, 1),
                           ("dilation", dilation, 1), ("padding", padding, 0)):
        if min(v) < least:
            raise ShapeError(f"{name}: {what} {v} must be >= {least} (input shape {shape})")
    if any(p > k // 2 for p, k in zip(padding, kernel)):
        raise ShapeError(f"{name}: padding {padding} must be at most half the kernel size "
                         f"{kernel} (input shape {shape})")
    spec = Pool2d(name.split("_")[0], kernel, stride, padding, dilation, bool(ceil_mode),
                  **options)
    out = spec.output_hw(*src.shape[2:])
    if min(out) < 1:
        raise ShapeError(f"{name}: kernel {kernel} with dilation {dilation} is larger than "
                         f"the padded input: input shape {shape}, padding {padding}, "
                         f"output would be {out}")
    return _result(build.node(Op.POOL2D, src, arg=spec), batched)


@op
def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """torch.nn.functional.max_pool2d: the max over each window of the last two axes of an
    (N, C, H, W) or (C, H, W) float array. `kernel_size`, `stride` (default: the kernel),
    `padding` (at most half the kernel; padding acts as -inf) and `dilation` are ints or pairs;
    with `ceil_mode` the output size rounds up (a last window must start inside the input
    or its left padding). NaN in a window gives NaN."""
    return _windowed("max_pool2d", x, kernel_size, stride, padding, dilation, ceil_mode)


@op
def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """torch.nn.functional.avg_pool2d: the mean over each window of the last two axes. With
    `count_include_pad` the divisor counts the zero padding (but not a ceil_mode window's
    part past the padding), else only the input elements in the window."""
    return _windowed("avg_pool2d", x, kernel_size, stride, padding, 1, ceil_mode,
                     count_include_pad=bool(count_include_pad))


@op
def adaptive_avg_pool2d(x, output_size):
    """torch.nn.functional.adaptive_avg_pool2d: output (.., out_h, out_w) where output row i
    averages input rows floor(i*H/out_h) to ceil((i+1)*H/out_h) (the same for columns).
    `output_size` an int or a pair; a None entry keeps that input size. `output_size=1` is
    global average pooling, computed as a mean over the spatial axes."""
    name = "adaptive_avg_pool2d"
    src, batched = _source(x, name)
    h, w = src.shape[2:]
    out = tuple(d if o is None else o
                for o, d in zip(_pair(output_size, "output_size", name, True), (h, w)))
    if min(out) < 1:
        raise ShapeError(f"{name}: output_size {output_size!r} must be >= 1 "
                         f"(input shape {node_of(x).shape})")
    if out == (1, 1):
        return _result(build.reduce(Op.MEAN, src, (2, 3), keepdims=True), batched)
    if h % out[0] == 0 and w % out[1] == 0:      # equal windows: a strided average
        k = (h // out[0], w // out[1])
        spec = Pool2d("avg", k, k)
    else:
        spec = Pool2d("avg", adaptive=out)
    return _result(build.node(Op.POOL2D, src, arg=spec), batched)

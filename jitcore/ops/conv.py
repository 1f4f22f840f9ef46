"""Convolution and inference batch norm (`jc.conv2d`, `jc.conv1d`, `jc.batch_norm`), with
torch.nn.functional's names, arguments and semantics (NCHW arrays, OIHW weights).

The tracing functions resolve the options (int or pair, "same"/"valid") into the explicit
`ConvAttrs` of a CONV2D node; the compiler decides how a kernel computes it.
"""
from __future__ import annotations

import operator

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.conv import ConvAttrs
from jitcore.ir.errors import ShapeError
from jitcore.ir.ops import Op

from .core import op
from .tracer import node_of, wrap


def _pair(value, name: str, op_name: str) -> tuple:
    """An int or a pair of ints (torch's `_pair`)."""
    items = value if isinstance(value, (tuple, list)) else (value, value)
    try:
        if len(items) != 2 or any(isinstance(v, bool) for v in items):
            raise TypeError
        return tuple(operator.index(v) for v in items)
    except TypeError:
        raise ShapeError(f"{op_name}: {name} must be an int or a pair of ints, "
                         f"got {value!r}") from None


def _float_operand(x, like=None):
    node = node_of(x, like)
    if not node.dtype.is_float:
        node = build.cast(node, dt.float64 if like is None else like.dtype)
    return node


def _padding(padding, x_shape, w_shape, dilation, stride, op_name) -> tuple:
    """(top, bottom, left, right) from an int, a pair, "same" or "valid"."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding != "same":
            raise ShapeError(f"{op_name}: padding must be an int, a pair, 'same' or 'valid', "
                             f"got {padding!r}")
        if stride != (1, 1):
            raise ShapeError(f"{op_name}: padding='same' needs stride 1, got {stride}")
        pads = []
        for k, d in zip(w_shape[2:], dilation):
            total = d * (k - 1)          # torch: the extra pad of an even kernel goes last
            pads += [total // 2, total - total // 2]
        return tuple(pads)
    ph, pw = _pair(padding, "padding", op_name)
    if ph < 0 or pw < 0:
        raise ShapeError(f"{op_name}: negative padding {padding!r} for x {tuple(x_shape)}, "
                         f"weight {tuple(w_shape)}")
    return (ph, ph, pw, pw)


def _conv2d_node(x, weight, bias, stride, padding, dilation, groups, op_name, rank_doc):
    xn = _float_operand(x)
    wn = _float_operand(weight, xn)
    common = dt.promote(xn.dtype, wn.dtype)
    xn, wn = build.cast(xn, common), build.cast(wn, common)
    if xn.ndim != 4 or wn.ndim != 4:
        raise ShapeError(f"{op_name}: x must be {rank_doc[0]} and weight {rank_doc[1]}, got "
                         f"x {tuple(x.shape)} and weight {tuple(weight.shape)}")
    stride = _pair(stride, "stride", op_name)
    dilation = _pair(dilation, "dilation", op_name)
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise ShapeError(f"{op_name}: groups must be an int, got {groups!r}")
    if min(stride) < 1 or min(dilation) < 1:
        raise ShapeError(f"{op_name}: stride {stride} and dilation {dilation} must be >= 1")
    pads = _padding(padding, xn.shape, wn.shape, dilation, stride, op_name)
    src = [xn, wn]
    if bias is not None:
        src.append(build.cast(_float_operand(bias, xn), common))
    attrs = ConvAttrs(stride, pads, dilation, groups)
    try:
        return build.node(Op.CONV2D, *src, arg=attrs)
    except ShapeError as e:     # the typing rule's message, under the public op's name
        raise ShapeError(str(e).replace("conv2d:", f"{op_name}:", 1)) from None


def _unbatched(x, weight_rank: int):
    """(x with a batch axis of 1, True) for an unbatched input (one axis fewer than the
    weight, as torch accepts), else (x's node, False)."""
    xn = node_of(x)
    if xn.ndim == weight_rank - 1:
        return wrap(build.reshape(xn, (1,) + xn.shape)), True
    return x, False


def _drop_batch(node, unbatched: bool):
    return build.reshape(node, node.shape[1:]) if unbatched else node


@op
def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution as torch.nn.functional.conv2d: x (N, C_in, H, W) or unbatched
    (C_in, H, W), weight (C_out, C_in / groups, KH, KW), bias (C_out,) or None; stride,
    padding and dilation an int or a pair; padding also "same" (stride 1) or "valid"; groups
    divides both channel counts (groups == C_in == C_out is a depthwise convolution)."""
    x, unbatched = _unbatched(x, node_of(weight).ndim)
    node = _conv2d_node(x, weight, bias, stride, padding, dilation, groups, "conv2d",
                        ("(N, C, H, W) or (C, H, W)", "(C_out, C_in/groups, KH, KW)"))
    return wrap(_drop_batch(node, unbatched))


def _single(value, name):
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ShapeError(f"conv1d: {name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return value


@op
def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution as torch.nn.functional.conv1d: x (N, C_in, L) or unbatched
    (C_in, L), weight (C_out, C_in / groups, K); computed as a conv2d of height 1."""
    x, unbatched = _unbatched(x, node_of(weight).ndim)
    xn, wn = node_of(x), node_of(weight)
    if xn.ndim != 3 or wn.ndim != 3:
        raise ShapeError(f"conv1d: x must be (N, C, L) or (C, L) and weight (C_out, "
                         f"C_in/groups, K), got x {tuple(xn.shape)} and weight "
                         f"{tuple(wn.shape)}")
    x4 = wrap(build.reshape(xn, xn.shape[:2] + (1,) + xn.shape[2:]))
    w4 = wrap(build.reshape(wn, wn.shape[:2] + (1,) + wn.shape[2:]))
    padding = _single(padding, "padding")
    pad2 = padding if isinstance(padding, str) else (0, padding)
    if not isinstance(padding, str) and isinstance(padding, int) and padding < 0:
        raise ShapeError(f"conv1d: negative padding {padding} for x {tuple(xn.shape)}, "
                         f"weight {tuple(wn.shape)}")
    node = _conv2d_node(x4, w4, bias, (1, _single(stride, "stride")), pad2,
                        (1, _single(dilation, "dilation")), groups, "conv1d",
                        ("(N, C, L)", "(C_out, C_in/groups, K)"))
    return wrap(_drop_batch(build.reshape(node, node.shape[:2] + node.shape[3:]), unbatched))


@op
def batch_norm(x, running_mean, running_var, weight=None, bias=None, eps=1e-5):
    """Inference batch norm over axis 1 (torch.nn.functional.batch_norm, training=False):
    (x - running_mean) / sqrt(running_var + eps) * weight + bias, the (C,) arrays broadcast
    along axis 1 of x (N, C, ...). With the arrays bound as jit constants and x a conv2d
    with a constant weight, the compiler folds it into the conv's weight and bias. The
    result dtype is the operands' promotion (numpy's rule: float32 x with float64
    statistics gives float64; torch refuses that mix)."""
    xn = _float_operand(x)
    params = [_float_operand(p, xn) for p in
              [running_mean, running_var] + [p for p in (weight, bias) if p is not None]]
    common = xn.dtype
    for p in params:
        common = dt.promote(common, p.dtype)
    src = [build.cast(n, common) for n in [xn] + params]
    return wrap(build.node(Op.BATCH_NORM, *src,
                           arg=(float(eps), weight is not None, bias is not None)))


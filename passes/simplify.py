"""Algebraic clean-up before lowering: constant folding, view chains, small powers, index
reductions over extent-1 axes, clamps moved after a max pooling.

CSE happens in the rewrite driver itself; dead code disappears because graphs are walked
from their outputs.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import Node
from jitcore.ir.ops import Op, info

from .rewrite import rewrite

def scalar_value(node: Node):
    """The value of a node that is a scalar constant seen through views, else None."""
    while info(node.op).view:
        node = node.src[0]
    return node.arg if node.op == Op.CONST and node.shape == () else None


def _fold(node: Node):
    """An elementwise op of scalar constants: its record's numpy function computes it."""
    rec = info(node.op)
    if not rec.elementwise:
        return None
    values = [scalar_value(s) for s in node.src]
    if any(v is None for v in values):
        return None
    if node.op == Op.CAST:      # numpy's astype, with jitcore's float -> int rule
        folded = dt.convert(np.asarray(values[0], node.src[0].dtype.np), node.dtype)
    elif rec.fold is not None:
        args = [np.asarray(v, dtype=s.dtype.np) for v, s in zip(values, node.src)]
        with np.errstate(all="ignore"):
            folded = rec.fold(*args)
    else:
        return None
    value = np.asarray(folded).astype(node.dtype.np).item()
    return build.broadcast_to(build.const(value, node.dtype), node.shape)


def _small_power(node: Node):
    if node.op != Op.POW:
        return None
    x, p = node.src[0], scalar_value(node.src[1])
    if p == 1:
        return x
    if p == 2:
        return build.node(Op.MUL, x, x)
    if p == 3 and x.dtype != dt.float32:    # float32 pow is exact to 0.5 ulp; x*x*x is not
        return build.node(Op.MUL, build.node(Op.MUL, x, x), x)
    if p == 0.5 and x.dtype.is_float:
        return build.node(Op.SQRT, x)
    return None


def _views(node: Node):
    if node.op == Op.RESHAPE:
        src = node.src[0]
        if src.shape == node.shape:
            return src
        if src.op == Op.RESHAPE:
            return build.reshape(src.src[0], node.shape)
    if node.op == Op.PERMUTE and node.arg == tuple(range(node.ndim)):
        return node.src[0]
    if node.op == Op.CAST and node.src[0].dtype == node.dtype:
        return node.src[0]
    return None


def _trivial_index_reduction(node: Node):
    """argmax/argmin over an axis of extent 1 is 0 everywhere (no loop is left to search)."""
    if info(node.op).index_reduction and all(node.src[0].shape[a] == 1 for a in node.arg):
        return build.broadcast_to(build.const(0, node.dtype), node.shape)
    return None


def _clamp_after_max_pool(node: Node):
    """max_pool(maximum(x, c)) is maximum(max_pool(x), c) for a scalar c (and the same for
    minimum: relu, relu6 and hardtanh before a max pooling), NaN included, when every window
    has a tap in the input (an all-padding window is -inf, not c): the clamp then runs once
    per output instead of once per tap."""
    if node.op != Op.POOL2D or node.arg.kind != "max" or not info(node.src[0].op).selects:
        return None
    clamp = node.src[0]
    windows = node.arg.windows(*clamp.shape[2:])
    if not all(lo < hi for w in windows for lo, hi in zip(w.lo, w.hi)):
        return None
    for x, c in (clamp.src, clamp.src[::-1]):
        if scalar_value(c) is not None and x.shape == clamp.shape:
            pooled = build.node(Op.POOL2D, x, arg=node.arg)
            bound = build.broadcast_to(build.const(scalar_value(c), c.dtype), pooled.shape)
            return build.node(clamp.op, pooled, bound)
    return None


def _elementwise_before_reshape(node: Node):
    """op(reshape(x), ...) is reshape(op(x, ...)) when every tensor operand is a reshape of a
    tensor of x's shape to the node's shape (the others scalar constants): element k of each
    operand is element k of its source. Then the op runs where x is computed: a GEMM's
    epilogue takes the GELU of `reshape(x @ W.T + b, (n, h, w, c))` (ConvNeXt's MLP) instead of
    a kernel of its own reading the GEMM's output back."""
    if not info(node.op).elementwise:
        return None
    tensors = [s for s in node.src if scalar_value(s) is None]
    if not tensors or any(t.op != Op.RESHAPE for t in tensors):
        return None
    shape = tensors[0].src[0].shape
    if any(t.src[0].shape != shape or t.shape != node.shape for t in tensors):
        return None
    srcs = [s.src[0] if scalar_value(s) is None else
            build.broadcast_to(build.const(scalar_value(s), s.dtype), shape) for s in node.src]
    return build.reshape(build.node(node.op, *srcs, arg=node.arg), node.shape)


def _rule(node: Node):
    for rule in (_views, _fold, _small_power, _trivial_index_reduction, _clamp_after_max_pool,
                 _elementwise_before_reshape):
        out = rule(node)
        if out is not None and out is not node:
            return out
    return None


def simplify(graph):
    return rewrite(graph, _rule)

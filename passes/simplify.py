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
from jitcore.ir.ops import ELEMENTWISE, INDEX_REDUCE, Op

from .rewrite import rewrite

# numpy functions that compute each primitive, for constant folding
_NUMPY = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.TANH: np.tanh, Op.SIN: np.sin, Op.COS: np.cos, Op.FLOOR: np.floor, Op.CEIL: np.ceil,
    Op.LOGICAL_NOT: np.logical_not, Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply,
    Op.DIV: np.divide, Op.POW: np.power, Op.FLOORDIV: np.floor_divide, Op.MOD: np.remainder,
    Op.MAXIMUM: np.maximum, Op.MINIMUM: np.minimum,
    Op.EQ: np.equal, Op.NE: np.not_equal, Op.LT: np.less, Op.LE: np.less_equal,
    Op.GT: np.greater, Op.GE: np.greater_equal, Op.LOGICAL_AND: np.logical_and,
    Op.LOGICAL_OR: np.logical_or, Op.WHERE: np.where, Op.BITWISE_AND: np.bitwise_and,
    Op.BITWISE_OR: np.bitwise_or, Op.BITWISE_XOR: np.bitwise_xor, Op.BITWISE_NOT: np.invert,
    Op.LEFT_SHIFT: np.left_shift, Op.RIGHT_SHIFT: np.right_shift, Op.ATAN: np.arctan,
    Op.CBRT: np.cbrt, Op.EXPM1: np.expm1, Op.LOG1P: np.log1p, Op.LOG2: np.log2,
    Op.LOG10: np.log10, Op.EXP2: np.exp2,
    Op.SINH: np.sinh, Op.COSH: np.cosh, Op.COPYSIGN: np.copysign,
}


def scalar_value(node: Node):
    """The value of a node that is a scalar constant seen through views, else None."""
    while node.op in (Op.RESHAPE, Op.EXPAND):
        node = node.src[0]
    return node.arg if node.op == Op.CONST and node.shape == () else None


def _fold(node: Node):
    if node.op not in ELEMENTWISE or not node.src:
        return None
    values = [scalar_value(s) for s in node.src]
    if any(v is None for v in values):
        return None
    if node.op == Op.CAST:
        folded = dt.convert(np.asarray(values[0], node.src[0].dtype.np), node.dtype)
    elif node.op in _NUMPY:
        args = [np.asarray(v, dtype=s.dtype.np) for v, s in zip(values, node.src)]
        with np.errstate(all="ignore"):
            folded = _NUMPY[node.op](*args)
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
    if node.op in INDEX_REDUCE and all(node.src[0].shape[a] == 1 for a in node.arg):
        return build.broadcast_to(build.const(0, node.dtype), node.shape)
    return None


def _clamp_after_max_pool(node: Node):
    """max_pool(maximum(x, c)) is maximum(max_pool(x), c) for a scalar c (and the same for
    minimum: relu, relu6 and hardtanh before a max pooling), NaN included, when every window
    has a tap in the input (an all-padding window is -inf, not c): the clamp then runs once
    per output instead of once per tap."""
    if node.op != Op.POOL2D or node.arg.kind != "max" or node.src[0].op not in (
            Op.MAXIMUM, Op.MINIMUM):
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


def _rule(node: Node):
    for rule in (_views, _fold, _small_power, _trivial_index_reduction, _clamp_after_max_pool):
        out = rule(node)
        if out is not None and out is not node:
            return out
    return None


def simplify(graph):
    return rewrite(graph, _rule)

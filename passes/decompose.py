"""Composite ops -> primitives. One rule per composite, registered with `@decomposes(op)`.

An op is a composite when its record says so (`ir.ops.info(op).composite`); its rule lives
here and `RULES` is the registry `decompose` applies (checked complete at import). Every
rule builds with `ir.build`, so the result is typed and verified like user graphs. The
composites stay visible in `f.graph(...)`; the kernels show what they became.
"""
from __future__ import annotations

import math

from jitcore.ir import build
from jitcore.ir.graph import Node
from jitcore.ir.ops import COMPOSITE, Op, info
from jitcore.ir.sizes import monomial

from .rewrite import rewrite, table_rule

# op -> rule(node) -> the node's value built from primitives
RULES: dict = {}


def decomposes(op: Op):
    """Register the decorated `rule(node) -> Node` as the decomposition of composite `op`."""
    def register(rule):
        assert info(op).composite, f"{op!r} is not a composite in its record"
        assert op not in RULES, f"{op!r} has two decompositions"
        RULES[op] = rule
        return rule
    return register


def E(op: Op, *src: Node, arg=None) -> Node:
    return build.elementwise(op, *src, arg=arg)


def c(value, like: Node) -> Node:
    return build.const(value, like.dtype)


def _relu(x):
    return E(Op.MAXIMUM, x, c(0, x))


def _clamp(x, lo, hi):
    return E(Op.MINIMUM, E(Op.MAXIMUM, x, c(lo, x)), c(hi, x))


@decomposes(Op.GELU)
def _gelu(n):
    x = n.src[0]
    half_x = E(Op.MUL, c(0.5, x), x)
    if n.arg == "tanh":
        cube = E(Op.MUL, E(Op.MUL, x, x), x)
        inner = E(Op.MUL, c(math.sqrt(2 / math.pi), x), E(Op.ADD, x, E(Op.MUL, c(0.044715, x), cube)))
        return E(Op.MUL, half_x, E(Op.ADD, c(1, x), E(Op.TANH, inner)))
    return E(Op.MUL, half_x, E(Op.ADD, c(1, x), E(Op.ERF, E(Op.MUL, x, c(math.sqrt(0.5), x)))))


def _hardsigmoid(x):
    return E(Op.DIV, _clamp(E(Op.ADD, x, c(3, x)), 0, 6), c(6, x))


@decomposes(Op.MEAN)
def _mean(n):
    """sum / count; over run-time axes the count is read from the call's extents (DIM)."""
    x = build.cast(n.src[0], n.dtype)
    count = math.prod(x.shape[a] for a in n.arg)
    divisor = c(count, x) if monomial(count) is None else build.cast(build.dim(count), x.dtype)
    return E(Op.DIV, build.node(Op.SUM, x, arg=n.arg), divisor)


def _shifted(n):
    """x - max(x, axis) for softmax and log_softmax (keeps exp from overflowing)."""
    x, axes = n.src[0], (n.arg,)
    if x.shape[n.arg] == 0:           # an empty row has no max (and no element to compute)
        return x
    return E(Op.SUB, x, build.node(Op.MAX, x, arg=axes))


def _reciprocal(x):
    return E(Op.DIV, c(1, x), x)


@decomposes(Op.SOFTMAX)
def _softmax(n):
    """e / sum(e) as e * (1 / sum(e)): one divide per row, not per element (a vector divide
    costs ~10 multiplies, enough to make the row pass compute-bound); the extra rounding
    is one ulp."""
    e = E(Op.EXP, _shifted(n))
    return E(Op.MUL, e, _reciprocal(build.node(Op.SUM, e, arg=(n.arg,))))


@decomposes(Op.LOG_SOFTMAX)
def _log_softmax(n):
    s = _shifted(n)
    return E(Op.SUB, s, E(Op.LOG, build.node(Op.SUM, E(Op.EXP, s), arg=(n.arg,))))


@decomposes(Op.LAYER_NORM)
def _layer_norm(n):
    x, params = n.src[0], n.src[1:]
    axes = (x.ndim - 1,)
    count = c(x.shape[-1], x)
    centered = E(Op.SUB, x, E(Op.DIV, build.node(Op.SUM, x, arg=axes), count))
    var = E(Op.DIV, build.node(Op.SUM, E(Op.MUL, centered, centered), arg=axes), count)
    # times 1 / sqrt(var + eps), computed once per row (see _softmax)
    y = E(Op.MUL, centered, _reciprocal(E(Op.SQRT, E(Op.ADD, var, c(n.arg, x)))))
    if len(params) >= 1:
        y = E(Op.MUL, y, params[0])
    if len(params) == 2:
        y = E(Op.ADD, y, params[1])
    return y


@decomposes(Op.BATCH_NORM)
def _batch_norm(n):
    """(x - mean) / sqrt(var + eps) * weight + bias, the (C,) arrays along axis 1."""
    x, (eps, has_weight, has_bias) = n.src[0], n.arg
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)

    def channel(p):
        return build.reshape(p, shape)
    mean, var, *rest = (channel(p) for p in n.src[1:])
    y = E(Op.DIV, E(Op.SUB, x, mean), E(Op.SQRT, E(Op.ADD, var, c(eps, x))))
    if has_weight:
        y = E(Op.MUL, y, rest.pop(0))
    if has_bias:
        y = E(Op.ADD, y, rest.pop(0))
    return y


@decomposes(Op.RSQRT)
def _rsqrt(n):
    return E(Op.DIV, c(1, n.src[0]), E(Op.SQRT, n.src[0]))


@decomposes(Op.RECIPROCAL)
def _reciprocal_node(n):
    return _reciprocal(n.src[0])


@decomposes(Op.RELU)
def _relu_node(n):
    return _relu(n.src[0])


@decomposes(Op.RELU6)
def _relu6(n):
    return _clamp(n.src[0], 0, 6)


@decomposes(Op.HARDTANH)
def _hardtanh(n):
    return _clamp(n.src[0], *n.arg)


@decomposes(Op.LEAKY_RELU)
def _leaky_relu(n):
    x = n.src[0]
    return E(Op.WHERE, E(Op.GT, x, c(0, x)), x, E(Op.MUL, x, c(n.arg, x)))


@decomposes(Op.SILU)
def _silu(n):
    return E(Op.MUL, n.src[0], E(Op.SIGMOID, n.src[0]))


@decomposes(Op.HARDSIGMOID)
def _hardsigmoid_node(n):
    return _hardsigmoid(n.src[0])


@decomposes(Op.HARDSWISH)
def _hardswish(n):
    return E(Op.MUL, n.src[0], _hardsigmoid(n.src[0]))


assert set(RULES) == COMPOSITE, f"composites without a rule: {COMPOSITE - set(RULES)}"


def decompose(graph):
    """Replace every composite by its rule's primitives."""
    return rewrite(graph, table_rule(RULES))

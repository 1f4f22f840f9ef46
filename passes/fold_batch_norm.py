"""Fold an inference batch norm (or a per-column scale) into the conv or matmul before it,
at compile time.

batch_norm(conv2d(x, W, b), mean, var, gamma, beta) with W, b (if any) and the batch norm's
arrays constant, and the conv read by nothing else, is conv2d(x, W * s, (b - mean) * s + beta)
with s = gamma / sqrt(var + eps) per output channel: the batch norm costs nothing at run time
and its kernel disappears. The folded arrays are computed in float64 and rounded once to the
conv's dtype. A conv1d's reshape between the two is seen through.

The same for a matmul with a constant right operand: batch_norm(x @ W [+ b]) over the columns
of a 2-D product is (x @ (W * s)) + ((b - mean) * s + beta), and (x @ W) * c with c a
constant that varies along the columns only is x @ (W * c): the scale disappears into the
(prepacked) weights and the shift is the GEMM's epilogue add.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir import build
from jitcore.ir.graph import ConstArray, Graph, Node
from jitcore.ir.ops import Op

from .rewrite import rewrite_once


def const_array(node: Node):
    """The value of a constant array seen through casts and reshapes, else None."""
    casts, shape = [], node.shape
    while node.op in (Op.CAST, Op.RESHAPE):
        if node.op == Op.CAST:
            casts.append(node.dtype)
        node = node.src[0]
    if node.op != Op.CONST or not isinstance(node.arg, ConstArray):
        return None
    arr = node.arg.array
    for dtype in reversed(casts):
        arr = arr.astype(dtype.np)
    return arr.reshape(shape)


def _scale_shift(bn: Node):
    """(mean, scale, beta) in float64 of a batch norm whose arrays are all constant (it
    computes (x - mean) * scale + beta), else None."""
    params = [const_array(p) for p in bn.src[1:]]
    if any(p is None for p in params):
        return None
    eps, has_weight, has_bias = bn.arg
    mean, var, *rest = (p.astype(np.float64) for p in params)
    gamma = rest.pop(0) if has_weight else 1.0
    beta = rest.pop(0) if has_bias else 0.0
    return mean, gamma / np.sqrt(var + eps), beta


def _folded(bn: Node, conv: Node):
    """The conv node with bn folded in, or None when an array is not constant."""
    weight = const_array(conv.src[1])
    bias = const_array(conv.src[2]) if len(conv.src) == 3 else np.zeros(conv.shape[1])
    found = _scale_shift(bn)
    if weight is None or bias is None or found is None:
        return None
    mean, scale, beta = found
    dtype = conv.dtype.np
    new_w = (weight.astype(np.float64) * scale[:, None, None, None]).astype(dtype)
    new_b = ((bias.astype(np.float64) - mean) * scale + beta).astype(dtype)
    return build.node(Op.CONV2D, conv.src[0], build.const_array(new_w), build.const_array(new_b),
                      arg=conv.arg)


def _column_vector(node: Node):
    """The (N,) values of a constant array that varies only along the last axis of `node`'s
    shape, seen through views and casts (a broadcast per-column scale), else None."""
    base, shape = node, node.shape
    while base.op in (Op.CAST, Op.RESHAPE, Op.EXPAND):
        base = base.src[0]
    if base.op != Op.CONST or not shape:
        return None
    if not isinstance(base.arg, ConstArray):     # a scalar: left to the epilogue
        return None
    while node.op == Op.EXPAND:
        node = node.src[0]
    value = const_array(node)
    if value is None:
        return None
    arr = np.broadcast_to(value.reshape((1,) * (len(shape) - value.ndim) + value.shape), shape)
    col = arr.reshape(-1, shape[-1])
    return col[0] if col.size and (col == col[0]).all() else None


def _matmul_weight(m: Node):
    """A 2-D matmul's constant right operand (as an array), else None."""
    if m.op != Op.MATMUL or m.ndim != 2:
        return None
    return const_array(m.src[1])


def _scaled_matmul(m: Node, scale: np.ndarray) -> Node:
    weight = _matmul_weight(m)
    new_w = (weight.astype(np.float64) * scale[None, :]).astype(m.dtype.np)
    return build.node(Op.MATMUL, m.src[0], build.const_array(new_w))


def _folded_matmul_bn(bn: Node, private):
    """batch_norm over the columns of x @ W (+ a constant bias), or None."""
    x = bn.src[0]
    bias = None
    if x.op == Op.ADD and private(x):
        m, bias_node = (x.src[0], x.src[1]) if x.src[0].op == Op.MATMUL else \
            (x.src[1], x.src[0])
        bias = _column_vector(bias_node)
        if bias is None:
            return None
        x = m
    if x.ndim != 2 or not private(x) or _matmul_weight(x) is None:
        return None
    found = _scale_shift(bn)
    if found is None:
        return None
    mean, scale, beta = found
    shift = ((0.0 if bias is None else bias.astype(np.float64)) - mean) * scale + beta
    shift = build.const_array(np.asarray(shift, dtype=bn.dtype.np).reshape(bn.shape[1]))
    return build.elementwise(Op.ADD, _scaled_matmul(x, scale), shift)


def _folded_column_scale(node: Node, private):
    """(x @ W) * c, c constant per column, as x @ (W * c); else None."""
    for m, c in ((node.src[0], node.src[1]), (node.src[1], node.src[0])):
        if m.op == Op.MATMUL and private(m) and m.shape == node.shape \
                and _matmul_weight(m) is not None:
            scale = _column_vector(c)
            if scale is not None and m.dtype.is_float:
                return _scaled_matmul(m, scale.astype(np.float64))
    return None


def fold_batch_norm(graph: Graph) -> Graph:
    """Fold every foldable batch norm (and column scale) in one pass over the graph.

    Whether a node is private (read by one node, not returned) is decided on the graph as it
    came, with equal nodes merged first: the pass rebuilds every node below a fold (and the
    merge, every node below two equal constants: a padding's zeros, equal statistics), so a
    rebuilt node is judged by the node it was rebuilt from; a node a fold made is read by
    that fold's result alone. Chains fold too: bn2(bn1(conv)) folds bn1, then bn2 into the
    folded conv."""
    graph, _ = rewrite_once(graph, lambda node: None)
    nodes = graph.nodes()
    if not any(n.op in (Op.BATCH_NORM, Op.MATMUL) for n in nodes):
        return graph
    readers = {}
    for n in nodes:
        for s in n.src:
            readers[id(s)] = readers.get(id(s), 0) + 1
    outputs = {id(o) for o in graph.outputs}
    origin = {}         # id(rebuilt node) -> (it, the graph's node); holding both keeps ids

    def private(n):
        found = origin.get(id(n))
        if found is None:                 # made by a fold: its result reads it, no one else
            return True
        old = found[1]
        return readers.get(id(old), 0) == 1 and id(old) not in outputs

    def rule(node: Node, original: Node):
        origin[id(node)] = (node, original)
        out = _fold(node, private)
        if out is not None:
            origin[id(out)] = (out, original)
        return out
    graph, _ = rewrite_once(graph, rule, with_original=True)
    return graph


def _fold(node: Node, private):
    """The node with a batch norm or column scale folded into its conv or matmul, or None."""
    if node.op == Op.MUL:
        return _folded_column_scale(node, private)
    if node.op != Op.BATCH_NORM:
        return None
    x = node.src[0]
    if x.ndim == 2:
        return _folded_matmul_bn(node, private)
    if x.op == Op.CONV2D and private(x):
        return _folded(node, x)
    if x.op == Op.RESHAPE and x.src[0].op == Op.CONV2D and private(x) \
            and private(x.src[0]) and x.shape[:2] == x.src[0].shape[:2]:
        conv = _folded(node, x.src[0])           # conv1d: (N, C, 1, L) -> (N, C, L)
        return build.reshape(conv, x.shape) if conv is not None else None
    return None

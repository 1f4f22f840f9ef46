"""Fold an inference batch norm into the convolution before it, at compile time.

batch_norm(conv2d(x, W, b), mean, var, gamma, beta) with W, b (if any) and the batch norm's
arrays constant, and the conv read by nothing else, is conv2d(x, W * s, (b - mean) * s + beta)
with s = gamma / sqrt(var + eps) per output channel: the batch norm costs nothing at run time
and its kernel disappears. The folded arrays are computed in float64 and rounded once to the
conv's dtype. A conv1d's reshape between the two is seen through.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir import build as b
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


def _folded(bn: Node, conv: Node):
    """The conv node with bn folded in, or None when an array is not constant."""
    weight = const_array(conv.src[1])
    bias = const_array(conv.src[2]) if len(conv.src) == 3 else np.zeros(conv.shape[1])
    params = [const_array(p) for p in bn.src[1:]]
    if weight is None or bias is None or any(p is None for p in params):
        return None
    eps, has_weight, has_bias = bn.arg
    mean, var, *rest = (p.astype(np.float64) for p in params)
    gamma = rest.pop(0) if has_weight else 1.0
    beta = rest.pop(0) if has_bias else 0.0
    scale = gamma / np.sqrt(var + eps)
    dtype = conv.dtype.np
    new_w = (weight.astype(np.float64) * scale[:, None, None, None]).astype(dtype)
    new_b = ((bias.astype(np.float64) - mean) * scale + beta).astype(dtype)
    return b.node(Op.CONV2D, conv.src[0], b.const_array(new_w), b.const_array(new_b),
                  arg=conv.arg)


def fold_batch_norm(graph: Graph) -> Graph:
    nodes = graph.nodes()
    if not any(n.op == Op.BATCH_NORM for n in nodes):
        return graph
    readers = {}
    for n in nodes:
        for s in n.src:
            readers[id(s)] = readers.get(id(s), 0) + 1
    outputs = {id(o) for o in graph.outputs}

    def private(n):                     # read by one node and not returned
        return readers.get(id(n), 0) == 1 and id(n) not in outputs

    def rule(node: Node):
        if node.op != Op.BATCH_NORM:
            return None
        x = node.src[0]
        if x.op == Op.CONV2D and private(x):
            return _folded(node, x)
        if x.op == Op.RESHAPE and x.src[0].op == Op.CONV2D and private(x) \
                and private(x.src[0]) and x.shape[:2] == x.src[0].shape[:2]:
            conv = _folded(node, x.src[0])           # conv1d: (N, C, 1, L) -> (N, C, L)
            return b.reshape(conv, x.shape) if conv is not None else None
        return None
    # reader counts are of the original graph: one pass (a fold never enables another)
    return rewrite_once(graph, rule)[0]

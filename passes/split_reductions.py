"""Split large full reductions into fixed blocks, so they run in parallel and still give
results that do not depend on the thread count.

A reduction to a single element has no parallel loop: one thread would do all of it. It is
rewritten as partial reductions over blocks that the graph alone decides (the rows of the
outermost axis, or fixed-size chunks of a 1-D input), followed by a reduction of the
partials in a fixed order:
    sum(x[R, C])  ->  sum(sum(x, axis=1))
    sum(x[N])     ->  sum(sum(x[:nb*B].reshape(nb, B), axis=1)) + sum(x[nb*B:])
"""
from __future__ import annotations

import math

from ir import build as b
from ir.graph import Node
from ir.ops import REDUCE_COMBINE, Op

from .rewrite import rewrite

SPLIT_MIN = 1 << 16          # elements below which one thread is fast enough anyway
BLOCK = 1 << 14              # elements per partial of a 1-D reduction


def _split(node: Node):
    if node.op not in REDUCE_COMBINE:
        return None
    src = node.src[0]
    if math.prod(node.shape) != 1 or src.ndim == 0 \
            or math.prod(src.shape) < SPLIT_MIN or node.arg != tuple(range(src.ndim)):
        return None
    if src.ndim >= 2 and src.shape[0] >= 2:
        partial = b.node(node.op, src, arg=tuple(range(1, src.ndim)))
        return b.node(node.op, partial, arg=node.arg)
    flat = b.reshape(src, (math.prod(src.shape),))
    n = flat.shape[0]
    blocks = n // BLOCK
    main = b.node(Op.SLICE, flat, arg=((0, blocks * BLOCK, 1),))
    partial = b.node(node.op, b.reshape(main, (blocks, BLOCK)), arg=(1,))
    total = b.reshape(b.node(node.op, partial, arg=(0, 1)), (1,))
    if blocks * BLOCK < n:
        tail = b.node(node.op, b.node(Op.SLICE, flat, arg=((blocks * BLOCK, n, 1),)), arg=(0,))
        total = b.node(REDUCE_COMBINE[node.op], total, tail)
    return b.reshape(total, node.shape)


def split_reductions(graph):
    return rewrite(graph, _split)

"""Split large reductions into fixed blocks: full reductions so they run in parallel (with
results that do not depend on the thread count), and float sums over a very long axis so
they accumulate in two levels.

A reduction to a single element has no parallel loop: one thread would do all of it. It is
rewritten as partial reductions over blocks that the graph alone decides (the rows of the
outermost axis, or fixed-size chunks of a 1-D input), followed by a reduction of the
partials in a fixed order:
    sum(x[R, C])  ->  sum(sum(x, axis=1))
    sum(x[N])     ->  sum(sum(x[:nb*B].reshape(nb, B), axis=1)) + sum(x[nb*B:])

A float sum over an axis of LONG_AXIS or more elements per output (x[R, N].sum(axis=1), or a
column sum over millions of rows) would otherwise add that many values into each vector lane
in sequence: float32 stops counting at 2**24 ones. It becomes block sums of BLOCK elements,
then the sum of the block sums (and of the tail), the same rewrite along that axis.
"""
from __future__ import annotations

import math

from ir import build as b
from ir.graph import Node
from ir.ops import REDUCE_COMBINE, Op

from .rewrite import rewrite

SPLIT_MIN = 1 << 16          # elements below which one thread is fast enough anyway
BLOCK = 1 << 14              # elements per partial of a 1-D reduction
LONG_AXIS = 1 << 20          # a float sum over this many elements per output: two levels


def _along(src: Node, axis: int, start: int, stop: int) -> Node:
    return b.node(Op.SLICE, src, arg=tuple((start, stop, 1) if k == axis else (0, d, 1)
                                           for k, d in enumerate(src.shape)))


def _split_long_axis(node: Node):
    """sum over one long axis -> sum of block sums (+ the tail's sum), keeping dims."""
    (axis,) = node.arg
    src = node.src[0]
    n = src.shape[axis]
    blocks = n // BLOCK
    main = b.reshape(_along(src, axis, 0, blocks * BLOCK),
                     src.shape[:axis] + (blocks, BLOCK) + src.shape[axis + 1:])
    partial = b.node(Op.SUM, main, arg=(axis + 1,))
    total = b.reshape(b.node(Op.SUM, partial, arg=(axis,)), node.shape)
    if blocks * BLOCK < n:
        tail = b.node(Op.SUM, _along(src, axis, blocks * BLOCK, n), arg=(axis,))
        total = b.node(Op.ADD, total, tail)
    return total


def _split(node: Node):
    if node.op not in REDUCE_COMBINE:
        return None
    if node.op == Op.SUM and node.dtype.is_float and len(node.arg) == 1 \
            and node.src[0].shape[node.arg[0]] >= LONG_AXIS and math.prod(node.shape) > 1:
        return _split_long_axis(node)
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

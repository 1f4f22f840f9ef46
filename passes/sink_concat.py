"""Elementwise ops move into the concatenations they read: `exp(concat(a, b)) + y` becomes
`concat(exp(a) + y[:n], exp(b) + y[n:])`.

A concatenation is lowered to one kernel per source writing its region of the result
(passes/lower.py), so after this rewrite the elementwise consumer is computed inside those
kernels: one pass over memory instead of a concatenation stored and read back. It applies
when the concatenation has no other reader (else the sources would be computed twice) and is
no graph output. The other operands are sliced to each region (views); a slice of another
concatenation within one of its sources is a slice of that source (`split` of a
concatenation reads the sources), and a slice of a broadcast along the axis is a smaller
broadcast.
"""
from __future__ import annotations

from jitcore.ir import build
from jitcore.ir.graph import Graph, Node
from jitcore.ir.ops import ELEMENTWISE, Op

from .rewrite import MAX_ROUNDS, rewrite_once


def _slice(node: Node, axis: int, lo: int, hi: int) -> Node:
    if (lo, hi) == (0, node.shape[axis]):
        return node
    if node.op == Op.CONCAT and node.arg == axis:
        start = 0
        for src in node.src:
            if (start, start + src.shape[axis]) == (lo, hi):
                return src
            start += src.shape[axis]
    if node.op == Op.EXPAND and node.src[0].shape[axis] == 1:
        return build.node(Op.EXPAND, node.src[0],
                          arg=node.shape[:axis] + (hi - lo,) + node.shape[axis + 1:])
    arg = tuple((lo, hi, 1) if k == axis else (0, d, 1) for k, d in enumerate(node.shape))
    return build.node(Op.SLICE, node, arg=arg)


def _slice_of_part(node: Node):
    """A slice of a concatenation that stays within one source: a slice of that source."""
    cat = node.src[0]
    axis = cat.arg
    start, stop, step = node.arg[axis]
    n = len(range(start, stop, step))
    if n == 0:
        return None
    first, last = start, start + (n - 1) * step
    lo = 0
    for part in cat.src:
        hi = lo + part.shape[axis]
        if lo <= min(first, last) and max(first, last) < hi:
            arg = tuple((start - lo, stop - lo, step) if k == axis else s
                        for k, s in enumerate(node.arg))
            full = tuple((0, d, 1) for d in part.shape)
            return part if arg == full else build.node(Op.SLICE, part, arg=arg)
        lo = hi
    return None


def _sunk(node: Node, users: dict, outputs: set):
    if node.op == Op.SLICE and node.src[0].op == Op.CONCAT:
        return _slice_of_part(node)
    if node.op not in ELEMENTWISE:
        return None
    cat = next((s for s in node.src if s.op == Op.CONCAT and users.get(id(s)) == 1
                and id(s) not in outputs), None)
    if cat is None:
        return None
    axis, parts, lo = cat.arg, [], 0
    for part in cat.src:
        hi = lo + part.shape[axis]
        srcs = [part if s is cat else _slice(s, axis, lo, hi) for s in node.src]
        parts.append(build.node(node.op, *srcs, arg=node.arg))
        lo = hi
    return build.node(Op.CONCAT, *parts, arg=axis)


def sink_into_concat(graph: Graph) -> Graph:
    """Rewrite to a fixed point (each round moves every op one level down)."""
    for _ in range(MAX_ROUNDS):
        if not any(n.op == Op.CONCAT for n in graph.nodes()):
            return graph
        users = {}
        for n in graph.nodes():
            for s in set(map(id, n.src)):
                users[s] = users.get(s, 0) + 1
        outputs = {id(o) for o in graph.outputs}
        graph, changed = rewrite_once(graph, lambda n: _sunk(n, users, outputs))
        if not changed:
            return graph
    return graph

"""Zero padding that a conv reads becomes the conv's own padding.

`jc.pad` with zeros (and what lowers to it: torch's constant_pad_nd, F.pad, nn.ZeroPad2d)
concatenates broadcast zeros to the array along each padded axis. A conv2d reading that
array reads its own padding as zeros too, so conv2d(pad(x), padding=p) is conv2d(x,
padding=p + the pad's widths) when the widths lie on the two spatial axes: the padded copy
is never made, and the conv kernel masks the padding as it does its own (EfficientNet pads
every stride-2 depthwise conv this way: a whole extra pass over the activation each).
"""
from __future__ import annotations

import math

from jitcore.ir import build
from jitcore.ir.graph import Graph, Node
from jitcore.ir.ops import VIEW, Op

from .rewrite import rewrite_once


def _is_zeros(node: Node) -> bool:
    """A broadcast scalar +0 (what jc.pad concatenates): any view of it is zeros."""
    while node.op in VIEW:
        node = node.src[0]
    return node.op == Op.CONST and node.shape == () and node.dtype.is_float and \
        node.arg == 0 and math.copysign(1.0, node.arg) > 0


def unpadded(node: Node) -> tuple:
    """(x, {axis: (lo, hi)}): the array a chain of zero-padding concatenations pads, and the
    widths per axis; ({} when `node` is no such chain)."""
    widths = {}
    while node.op == Op.CONCAT:
        parts, axis = node.src, node.arg
        data = [k for k, part in enumerate(parts) if not _is_zeros(part)]
        if len(data) != 1:
            break
        k = data[0]
        lo = sum(part.shape[axis] for part in parts[:k])
        hi = sum(part.shape[axis] for part in parts[k + 1:])
        before = widths.get(axis, (0, 0))
        widths[axis] = (before[0] + lo, before[1] + hi)
        node = parts[k]
    return node, widths


def absorb_padding(graph: Graph) -> Graph:
    """Every conv2d whose input is a zero padding of the spatial axes reads the unpadded
    array with its padding widened."""
    if not any(n.op == Op.CONV2D for n in graph.nodes()):
        return graph

    def rule(node: Node):
        if node.op != Op.CONV2D:
            return None
        x, widths = unpadded(node.src[0])
        if not widths or set(widths) - {2, 3} or x.dtype != node.src[0].dtype:
            return None
        (top, bottom), (left, right) = widths.get(2, (0, 0)), widths.get(3, (0, 0))
        pt, pb, pl, pr = node.arg.padding
        attrs = node.arg._replace(padding=(pt + top, pb + bottom, pl + left, pr + right))
        return build.node(Op.CONV2D, x, *node.src[1:], arg=attrs)
    graph, _ = rewrite_once(graph, rule)
    return graph

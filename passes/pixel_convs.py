"""One-pixel convolutions as matrix-vector products.

A 1x1 conv2d over a 1x1 plane (groups 1, no padding: the two small convs of a
squeeze-excitation block, on the pooled channel means) is (N, C_in) @ W.T (+ bias): a GEMV
for one image. The conv kernels vectorize along pixels (one lane of a vector busy here) or
need more products per output than such a layer has; the GEMV kernel vectorizes along
C_out over prepacked weights. Rewritten when the conv widens its channels (C_out > C_in:
the SE block's expanding conv), with constant float weights. Measured on Intel Ice Lake-SP,
1 thread, + sigmoid (CPU-time medians, conv / GEMV, us): 48->1152 66 / 7.3, 28->672
26 / 3.2, 10->240 6.7 / 1.6; the narrowing convs stay convs (1152->48 + silu 5.2 / 7.3,
240->10 1.5 / 1.4). Runs after fold_batch_norm, so a batch norm after such a conv has
folded into its weight and bias already.
"""
from __future__ import annotations

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import Graph, Node
from jitcore.ir.ops import Op

from .fold_batch_norm import const_array
from .rewrite import rewrite_once


def _as_matmul(node: Node):
    """The matmul form of a widening one-pixel 1x1 conv with constant weights, else None."""
    if node.op != Op.CONV2D or node.dtype not in (dt.float32, dt.float64):
        return None
    x, w = node.src[0], node.src[1]
    shapes = (x.shape, w.shape, node.shape)
    if any(not isinstance(d, int) for s in shapes for d in s):
        return None
    n, c_in, h, wd = x.shape
    c_out = w.shape[0]
    if (h, wd) != (1, 1) or w.shape[1:] != (c_in, 1, 1) or node.arg.groups != 1 or \
            any(node.arg.padding) or c_out <= c_in or x.dtype != node.dtype:
        return None
    weight = const_array(w)
    if weight is None:
        return None
    wt = build.const_array(weight.reshape(c_out, c_in).T.astype(node.dtype.np, order="C"))
    y = build.matmul(build.reshape(x, (n, c_in)), wt)
    if len(node.src) == 3:
        y = build.elementwise(Op.ADD, y, node.src[2])
    return build.reshape(y, node.shape)


def pixel_convs_as_matmuls(graph: Graph) -> Graph:
    """Every widening one-pixel 1x1 conv of the graph as a matmul (see the module doc)."""
    if not any(n.op == Op.CONV2D for n in graph.nodes()):
        return graph
    graph, _ = rewrite_once(graph, _as_matmul)
    return graph

"""Strided 1x1 convolutions over large images read a subsampled copy.

A 1x1 conv of stride (sh, sw) without padding reads only every sh-th row and sw-th column of
its input: it is the same conv at stride 1 over x[:, :, ::sh, ::sw]. Over an image larger
than a core's L2 (ResNet-50's downsampling convs: 256 x 56 x 56 floats in, stride 2), the
conv kernels' strided reads touch whole cache lines for half their elements, and a channel
plan reads the image once per channel block; a copy of the subsampled image (a pointwise
kernel reading each needed line once) then a stride-1 conv over a quarter of the pixels is
faster, and the stride-1 conv may run as a GEMM (jitcore/llvm/conv_gemm.py). The products
are the same and each output sums them over the input channels in order (a GEMM adds its k
blocks of a long K in turn).

Measured on Intel Ice Lake-SP (1 thread, CPU-time medians of 5 interleaved rounds, strided
conv / copy + stride-1 conv, ms): 256->512 at 56x56 2.96 / 0.15 + 1.61 (1.68x); 512->1024 at
28x28 3.28 / 0.08 + 2.08 (1.52x); 1024->2048 at 14x14 3.65 / 0.04 + 2.77 (1.30x); 64->128 at
56x56 0.247 / 0.038 + 0.165 (1.21x). Smaller images gained nothing (128->256 at 28x28: 0.96x,
256->512 at 14x14: 0.99x): the rewrite needs MIN_IMAGE_BYTES of input per image.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir import build
from jitcore.ir.graph import Graph, Node
from jitcore.ir.ops import Op

from .rewrite import rewrite_once

# input bytes per image from which a strided 1x1 conv reads a subsampled copy (between the
# 0.4 MB that gained nothing and the 0.8 MB that gained 1.21x above)
MIN_IMAGE_BYTES = 512 * 1024


def is_subsampled_input(conv: Node) -> bool:
    """Whether a 1x1 conv reads a subsampling view (a slice with steps along the plane: this
    pass's, or a user's `x[:, :, ::2, ::2]`); lowering copies it into a buffer of its own
    (passes/lower.py)."""
    x = conv.src[0]
    return conv.op == Op.CONV2D and x.op == Op.SLICE and \
        tuple(conv.src[1].shape[2:]) == (1, 1) and any(step > 1 for _, _, step in x.arg[2:])


def _stride_one(node: Node):
    """The stride-1 form of a strided 1x1 conv without padding over a large image, else None."""
    if node.op != Op.CONV2D:
        return None
    x, w = node.src[0], node.src[1]
    if any(not isinstance(d, int) for d in x.shape + w.shape):
        return None
    a = node.arg
    if tuple(w.shape[2:]) != (1, 1) or any(a.padding) or tuple(a.stride) == (1, 1):
        return None
    if int(np.prod(x.shape[1:])) * x.dtype.itemsize < MIN_IMAGE_BYTES:
        return None
    (sh, sw), (_, _, h, wd) = a.stride, x.shape
    sub = build.node(Op.SLICE, x, arg=((0, x.shape[0], 1), (0, x.shape[1], 1), (0, h, sh),
                                       (0, wd, sw)))
    return build.node(Op.CONV2D, sub, *node.src[1:],
                      arg=a._replace(stride=(1, 1), dilation=(1, 1)))


def subsample_strided_convs(graph: Graph) -> Graph:
    """Every strided 1x1 conv over a large image as a stride-1 conv of a subsampled copy."""
    if not any(n.op == Op.CONV2D for n in graph.nodes()):
        return graph
    graph, _ = rewrite_once(graph, _stride_one)
    return graph

"""Basic indexing of traced tensors (ints, slices with any step, None, Ellipsis) as views."""
from __future__ import annotations

import numbers

from jitcore.ir import build as b
from jitcore.ir.errors import ShapeError, TraceError
from jitcore.ir.graph import Node
from jitcore.ir.ops import Op


def _expand_ellipsis(index: tuple, ndim: int) -> tuple:
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if sum(1 for i in index if i is Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')")
    if used > ndim:
        raise ShapeError(f"too many indices: {used} for an array of rank {ndim}")
    out = []
    for i in index:
        out.extend([slice(None)] * (ndim - used) if i is Ellipsis else [i])
    if Ellipsis not in index:
        out.extend([slice(None)] * (ndim - used))
    return tuple(out)


def apply_index(node: Node, index) -> Node:
    """x[index] for basic indices. Integer indices are bounds-checked at trace time."""
    if not isinstance(index, tuple):
        index = (index,)
    for i in index:
        if not (i is None or i is Ellipsis or isinstance(i, slice)
                or isinstance(i, numbers.Integral) and not isinstance(i, bool)):
            raise TraceError(f"only basic indexing (ints, slices, None, ...) is supported, "
                             f"got {type(i).__name__} {i!r}")
    index = _expand_ellipsis(index, node.ndim)
    slices, final_shape, dim = [], [], 0
    for i in index:
        if i is None:
            final_shape.append(1)
            continue
        size = node.shape[dim]
        if isinstance(i, slice):
            rng = range(*i.indices(size))
            slices.append((rng.start, rng.stop, rng.step))
            final_shape.append(len(rng))
        else:
            k = int(i)
            if not -size <= k < size:
                raise ShapeError(f"index {k} is out of bounds for axis {dim} with size {size}")
            k %= size
            slices.append((k, k + 1, 1))
        dim += 1
    full = tuple((0, d, 1) for d in node.shape)
    if tuple(slices) != full:
        node = b.node(Op.SLICE, node, arg=tuple(slices))
    return b.reshape(node, tuple(final_shape))

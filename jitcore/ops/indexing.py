"""Indexing of traced tensors: basic indices (ints, slices with any step, None, Ellipsis) as
views, and one integer array among slices, None and Ellipsis (`W[ids]`, `x[:, ids]`) as a
checked gather (TAKE) along its axis, as numpy's integer array indexing."""
from __future__ import annotations

import numbers

import numpy as np

from jitcore.ir import build
from jitcore.ir.errors import ShapeError, TraceError
from jitcore.ir.graph import Node
from jitcore.ir import dtypes as dt
from jitcore.ir.ops import Op
from jitcore.ir.sizes import Size

from .tracer import Tracer, node_of


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


def _is_array(i) -> bool:
    return isinstance(i, (Tracer, list)) or isinstance(i, np.ndarray) and i.ndim > 0


def _integer_index(i) -> Node:
    idx = node_of(i)
    if idx.dtype == dt.bool_:
        raise TraceError("boolean mask indexing is not supported on traced tensors (its "
                         "result shape depends on the values); use jc.where")
    if idx.dtype == dt.uint8:
        idx = build.cast(idx, dt.int32)
    if idx.dtype not in (dt.int32, dt.int64):
        raise TraceError(f"arrays used as indices must be of integer type, got {idx.dtype.name}")
    return idx


def _array_index(node: Node, index: tuple, k: int) -> Node:
    """x[index] where index[k] is the one integer array: the rest applied as basic indices,
    then a gather along the axis the array indexes (its dims take that axis' place)."""
    rest = index[:k] + (slice(None),) + index[k + 1:]
    if any(isinstance(i, numbers.Integral) for i in rest):
        raise TraceError("an integer array index together with integer scalars is not "
                         "supported; index with slices, or in two steps")
    idx = _integer_index(index[k])
    view = apply_index(node, rest)
    used = sum(1 for i in rest if i is not None and i is not Ellipsis)
    axis = sum(node.ndim - used if i is Ellipsis else 1 for i in rest[:k])
    return build.node(Op.TAKE, view, idx, arg=axis)


def _static_bounds(i: slice, size: int) -> slice:
    """A slice whose bounds hold run-time sizes: x[:n] (or x[0:n:1]) of an axis whose extent
    is n is all of it; any other bound needs the size's value (clamping depends on it)."""
    sizes = [v for v in (i.start, i.stop, i.step) if isinstance(v, Size)]
    if not sizes:
        return i
    if i.start in (None, 0) and i.step in (None, 1) and isinstance(i.stop, Size) \
            and len(sizes) == 1 and i.stop == Size.of(size):
        return slice(None)
    sizes[0].needed("a slice bound other than the whole axis")


def apply_index(node: Node, index) -> Node:
    """x[index]. Integer indices are bounds-checked at trace time; the values of an integer
    array index are checked by the kernel (IndexError after the call)."""
    if not isinstance(index, tuple):
        index = (index,)
    index = tuple(int(i) if isinstance(i, np.ndarray) and i.ndim == 0
                  and i.dtype.kind in "iu" else i for i in index)
    arrays = [k for k, i in enumerate(index) if _is_array(i)]
    if len(arrays) > 1:
        raise TraceError("only one integer array index is supported on traced tensors")
    if arrays:
        return _array_index(node, index, arrays[0])
    for i in index:
        if not (i is None or i is Ellipsis or isinstance(i, slice)
                or isinstance(i, numbers.Integral) and not isinstance(i, bool)
                or isinstance(i, Size)):
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
            rng = range(*_static_bounds(i, size).indices(size))
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
        node = build.node(Op.SLICE, node, arg=tuple(slices))
    return build.reshape(node, tuple(final_shape))

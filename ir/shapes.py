"""Shapes, broadcasting and axis normalization (numpy's rules), as pure functions of tuples."""
from __future__ import annotations

import math
import operator

from .errors import ShapeError

Shape = tuple


# run-time extents: their placeholders and the Size type live in ir/sizes.py
from .sizes import (HUGE, MAX_SYMBOLS, PLACEHOLDERS, Size, dynamic_extent,  # noqa: F401
                    extent_text, shape_text, symbol_of)


def dim_text(d: int) -> str:
    """An extent as the graph text prints it: `s0` for dynamic symbol 0's placeholder."""
    return extent_text(d)


def as_dim(d) -> int:
    """An extent from an int, a numpy integer or a run-time Size (its placeholder form)."""
    if isinstance(d, Size):
        return d.extent
    return int(d)


def as_shape(shape) -> Shape:
    """A tuple of non-negative ints from an int or an iterable of ints."""
    if isinstance(shape, (int, Size)):
        shape = (shape,)
    try:
        out = tuple(as_dim(d) for d in shape)
    except TypeError:
        raise ShapeError(f"not a shape: {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"negative dimension in shape {shape_text(out)}")
    return out


def numel(shape: Shape) -> int:
    return math.prod(shape)


def broadcast_shapes(*shapes: Shape) -> Shape:
    """numpy broadcasting of several shapes; ShapeError names them all when they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(-ndim, 0):
        dims = {s[i] for s in shapes if len(s) >= -i} - {1}
        if len(dims) > 1:
            raise ShapeError("shapes " + ", ".join(shape_text(s) for s in shapes)
                             + " cannot be broadcast together")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def as_axis(axis, op: str = "op") -> int:
    """An int from anything numpy accepts as an axis (int, np.int64, ... but not bool)."""
    if isinstance(axis, bool):
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}")
    try:
        return operator.index(axis)
    except TypeError:
        raise ShapeError(f"{op}: axis must be an int, got {axis!r}") from None


def normalize_axis(axis, ndim: int, op: str = "op") -> int:
    axis = as_axis(axis, op)
    if not -ndim <= axis < ndim:
        raise ShapeError(f"{op}: axis {axis} is out of range for an array of rank {ndim}")
    return axis % ndim


def normalize_axes(axis, ndim: int, op: str = "op") -> tuple:
    """None -> all axes; int or sequence -> sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, (tuple, list)):
        axis = (axis,)
    axes = tuple(sorted(normalize_axis(a, ndim, op) for a in axis))
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: repeated axis in {axis}")
    return axes


def infer_reshape(src: Shape, shape) -> Shape:
    """numpy's reshape with at most one -1."""
    if isinstance(shape, (int, Size)):
        shape = (shape,)
    shape = tuple(as_dim(d) for d in shape)
    n = numel(src)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: can only specify one unknown dimension, got {shape}")
    if -1 in shape:
        known = numel(d for d in shape if d != -1)
        if known == 0 or n % known:
            raise ShapeError(f"reshape: cannot reshape array of shape {shape_text(src)} into "
                             f"{shape_text(shape)}")
        shape = tuple(n // known if d == -1 else d for d in shape)
    if any(d < 0 for d in shape) or numel(shape) != n:
        raise ShapeError(f"reshape: cannot reshape array of shape {shape_text(src)} into "
                         f"{shape_text(shape)}")
    return shape


def contiguous_strides(shape: Shape) -> tuple:
    """C-order strides in elements."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))

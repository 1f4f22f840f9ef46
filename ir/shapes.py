"""Shapes, broadcasting and axis normalization (numpy's rules), as pure functions of tuples."""
from __future__ import annotations

import math
import operator

from .errors import ShapeError

Shape = tuple


# Run-time extents (jc.jit(dynamic=True)): a graph is traced and lowered once with each
# dynamic extent k replaced by the placeholder `dynamic_extent(k)`, a prime far above any real
# extent, so the passes treat it as "large" and never simplify with it as a small bound (and,
# being prime, a multiple of it is divisible by a small number only when its cofactor is);
# the backend reads the actual value from the call's extent array wherever a loop bound or a
# buffer size is this placeholder. Any other integer this large in a lowered graph (a stride
# or an extent computed from a placeholder) means the graph needs that extent's value
# (jitcore.passes.dynamic then keeps it static).
PLACEHOLDERS = (1099511627791, 1103806595179, 1108101562427, 1112396529683, 1116691497029,
                1120986464327, 1125281431591, 1129576398859, 1133871366161, 1138166333443,
                1142461300817, 1146756268067, 1151051235337, 1155346202671, 1159641169927,
                1163936137249)          # the first prime above 2**40 + k * 2**32
MAX_SYMBOLS = len(PLACEHOLDERS)
_SYMBOL = {p: k for k, p in enumerate(PLACEHOLDERS)}
HUGE = 1 << 36                # real extents, strides and offsets stay below this


def dynamic_extent(k: int) -> int:
    """The placeholder extent of dynamic symbol k."""
    return PLACEHOLDERS[k]


def symbol_of(n) -> int | None:
    """k when `n` is the placeholder of dynamic symbol k, else None."""
    return _SYMBOL.get(n) if type(n) is int else None


def dim_text(d: int) -> str:
    """An extent as the graph text prints it: `s0` for dynamic symbol 0's placeholder."""
    k = symbol_of(d)
    return str(d) if k is None else f"s{k}"


def as_shape(shape) -> Shape:
    """A tuple of non-negative ints from an int or an iterable of ints."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        out = tuple(int(d) for d in shape)
    except TypeError:
        raise ShapeError(f"not a shape: {shape!r}") from None
    if any(d < 0 for d in out):
        raise ShapeError(f"negative dimension in shape {out}")
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
            raise ShapeError("shapes " + ", ".join(str(tuple(s)) for s in shapes)
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
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    n = numel(src)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape: can only specify one unknown dimension, got {shape}")
    if -1 in shape:
        known = numel(d for d in shape if d != -1)
        if known == 0 or n % known:
            raise ShapeError(f"reshape: cannot reshape array of shape {src} into {shape}")
        shape = tuple(n // known if d == -1 else d for d in shape)
    if any(d < 0 for d in shape) or numel(shape) != n:
        raise ShapeError(f"reshape: cannot reshape array of shape {src} into {shape}")
    return shape


def contiguous_strides(shape: Shape) -> tuple:
    """C-order strides in elements."""
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))

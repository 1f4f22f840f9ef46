"""Indexing and joining ops with numpy's names and semantics: `take`, `concatenate`, `stack`,
`split`, `pad`, `clip`, `cumsum` (API.md, "Indexing and joining").

They build on three IR ops: TAKE (a gather at run-time indices, checked in the kernel),
CONCAT (lowered to one region of the output per source, so fused producers are computed
straight into place) and CUMSUM (a scan kernel). `stack`, `split` and `pad` are views and
concatenations; `clip` is maximum/minimum.

Eager calls work as for the other ops: arguments that are shapes, axes or pad widths are
normalized to tuples of ints first, so they are baked into the compiled op, not inputs.
"""
from __future__ import annotations

import numbers
import operator

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError, ShapeError, TraceError
from jitcore.ir.graph import Node
from jitcore.ir.ops import Op
from jitcore.ir.shapes import normalize_axis
from jitcore.ir.sizes import Size

from .core import _tensors, maximum, minimum, op
from .tracer import Tracer, node_of, wrap


def _flat(node: Node) -> Node:
    return build.reshape(node, (int(np.prod(node.shape, dtype=np.int64)),))


# ---- take --------------------------------------------------------------------------------------

def _index_node(indices, op_name: str) -> Node:
    idx = node_of(indices)
    if idx.dtype in (dt.int32, dt.int64):
        return idx
    if idx.dtype == dt.uint8:
        return build.cast(idx, dt.int32)
    raise DTypeError(f"{op_name}: indices must be integers, got {idx.dtype.name}")


def take_node(x: Node, idx: Node, axis: int) -> Node:
    """x gathered along `axis` (normalized) at the indices `idx` (an integer node)."""
    return build.node(Op.TAKE, x, idx, arg=axis)


@op
def take(x, indices, axis=None, mode="raise"):
    """numpy.take: elements of x at `indices` along `axis` (None: of the flattened x).
    Negative indices count from the end; an index out of range raises IndexError after the
    call, naming the index and the extent (no element outside x is ever read)."""
    if mode != "raise":
        raise TraceError(f"take: mode={mode!r} is not supported (only 'raise')")
    node = node_of(x)
    idx = _index_node(indices, "take")
    if axis is None:
        node, ax = _flat(node), 0
    else:
        ax = normalize_axis(axis, node.ndim, "take")
    return wrap(take_node(node, idx, ax))


# ---- concatenate, stack, split -------------------------------------------------------------------

def concat_nodes(nodes: list, axis: int, name: str = "concatenate") -> Node:
    """Concatenate nodes along `axis` (normalized), promoted to one dtype as numpy does."""
    if not nodes:
        raise ShapeError(f"{name}: need at least one array to concatenate")
    common = nodes[0].dtype
    for n in nodes[1:]:
        common = dt.promote(common, n.dtype)
    nodes = [build.cast(n, common) for n in nodes]
    first = nodes[0]
    for n in nodes[1:]:
        if n.ndim != first.ndim or any(a != c for k, (a, c) in enumerate(zip(n.shape, first.shape))
                                       if k != axis):
            raise ShapeError(f"{name}: shapes {[list(m.shape) for m in nodes]} do not match "
                             f"off axis {axis}")
    parts = [n for n in nodes if n.shape[axis] != 0] or nodes[:1]
    return parts[0] if len(parts) == 1 else build.node(Op.CONCAT, *parts, arg=axis)


@op
def _concatenate(*xs, axis=0):
    nodes = _tensors(*xs)
    if axis is None:
        return wrap(concat_nodes([_flat(n) for n in nodes], 0))
    if any(n.ndim == 0 for n in nodes):
        raise ShapeError("concatenate: zero-dimensional arrays cannot be concatenated")
    return wrap(concat_nodes(nodes, normalize_axis(axis, nodes[0].ndim, "concatenate")))


def concatenate(xs, axis=0):
    """numpy.concatenate: join a sequence of arrays along an existing axis (None: flatten
    them first). dtypes promote as numpy; shapes must agree off the axis (ShapeError)."""
    return _concatenate(*_sequence(xs, "concatenate"), axis=axis)


@op
def _stack(*xs, axis=0):
    nodes = _tensors(*xs)
    shapes = {n.shape for n in nodes}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all input arrays must have the same shape, got "
                         f"{[list(n.shape) for n in nodes]}")
    ax = normalize_axis(axis, nodes[0].ndim + 1, "stack")
    grown = [build.reshape(n, n.shape[:ax] + (1,) + n.shape[ax:]) for n in nodes]
    return wrap(concat_nodes(grown, ax, "stack"))


def stack(xs, axis=0):
    """numpy.stack: join arrays of one shape along a new axis."""
    return _stack(*_sequence(xs, "stack"), axis=axis)


def _sequence(xs, name: str) -> tuple:
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{name}: expects a list or tuple of arrays, got {type(xs).__name__}")
    if not xs:
        raise ShapeError(f"{name}: need at least one array")
    return tuple(xs)


def slice_along(node: Node, axis: int, start: int, stop: int, step: int = 1) -> Node:
    """node[..., start:stop:step, ...] on `axis` (normalized bounds) as a SLICE view."""
    arg = tuple((start, stop, step) if k == axis else (0, d, 1) for k, d in enumerate(node.shape))
    if arg == tuple((0, d, 1) for d in node.shape):
        return node
    return build.node(Op.SLICE, node, arg=arg)


@op
def _split(x, sections, axis=0):
    node = node_of(x)
    ax = normalize_axis(axis, node.ndim, "split")
    n = node.shape[ax]
    if isinstance(sections, int):
        if sections <= 0:
            raise ValueError("split: number sections must be larger than 0.")
        if n % sections:
            raise ShapeError(f"split: array split does not result in an equal division "
                             f"({n} along axis {ax} into {sections})")
        bounds = [k * (n // sections) for k in range(sections + 1)]
    else:
        bounds = [0, *sections, n]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        start, stop, _ = slice(lo, hi).indices(n)
        stop = max(start, stop)
        out.append(wrap(slice_along(node, ax, start, stop)))
    return tuple(out)


def split(x, indices_or_sections, axis=0):
    """numpy.split: a tuple of views of x along `axis`, cut into equal sections (an int that
    must divide the extent) or at the given indices (Python slice rules)."""
    if isinstance(indices_or_sections, numbers.Integral):
        spec = operator.index(indices_or_sections)
    else:
        spec = tuple(operator.index(i) for i in np.asarray(indices_or_sections).ravel().tolist()) \
            if not isinstance(indices_or_sections, (list, tuple)) else \
            tuple(operator.index(i) for i in indices_or_sections)
    parts = _split(x, sections=spec, axis=axis)
    return parts if isinstance(parts, tuple) else (parts,)   # (an eager call of one part)


# ---- pad ------------------------------------------------------------------------------------------

def _pairs(value, ndim: int, name: str, what: str) -> tuple:
    """numpy's pad_width / constant_values forms (scalar, (v,), (before, after), per axis
    pairs) -> one (before, after) pair per axis."""
    arr = np.asarray(value, dtype=object)
    try:
        arr = np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ShapeError(f"{name}: {what} {value!r} cannot be broadcast to ({ndim}, 2)") from None
    return tuple((arr[k, 0], arr[k, 1]) for k in range(ndim))


@op
def _pad(x, widths, mode="constant", constant_values=0):
    node = node_of(x)
    if mode not in ("constant", "edge", "reflect"):
        raise TraceError(f"pad: mode {mode!r} is not supported (constant, edge, reflect)")
    values = _pairs(constant_values, node.ndim, "pad", "constant_values")
    for ax, (lo, hi) in enumerate(widths):
        if lo == hi == 0:
            continue
        n = node.shape[ax]
        if mode != "constant" and n == 0:
            raise ShapeError(f"pad: can't extend empty axis {ax} using modes other than "
                             "'constant' or 'empty'")
        if mode == "reflect" and n > 1 and max(lo, hi) >= n:
            node = _reflect_wide(node, ax, lo, hi)
            continue
        blocks = []
        for count, before in ((lo, True), (hi, False)):
            if not count:
                continue
            shape = node.shape[:ax] + (count,) + node.shape[ax + 1:]
            if mode == "constant":
                value = values[ax][0 if before else 1]
                block = build.broadcast_to(build.const(value, node.dtype), shape)
            elif mode == "edge" or n == 1:
                edge = slice_along(node, ax, 0, 1) if before else slice_along(node, ax, n - 1, n)
                block = build.node(Op.EXPAND, edge, arg=shape)
            else:
                if count >= n:
                    raise ShapeError(f"pad: reflect padding of {count} on axis {ax} of extent "
                                     f"{n} is not supported (at most {n - 1})")
                block = slice_along(node, ax, count, 0, -1) if before else \
                    slice_along(node, ax, n - 2, n - 2 - count, -1)
            blocks.append((before, block))
        parts = [blk for before, blk in blocks if before] + [node] + \
            [blk for before, blk in blocks if not before]
        node = concat_nodes(parts, ax, "pad")
    return wrap(node)


def _reflect_wide(node: Node, ax: int, lo: int, hi: int) -> Node:
    """A reflect pad wider than the axis: numpy reflects again and again (a pattern of period
    2 * (extent - 1)). The axis' source index of every output position is known at trace
    time, so the padded axis is a gather at those constant indices."""
    index = np.pad(np.arange(node.shape[ax], dtype=np.int64), (lo, hi), mode="reflect")
    return take_node(node, build.const_array(index), ax)


def pad(x, pad_width, mode="constant", constant_values=0):
    """numpy.pad with mode "constant" (constant_values: a scalar, or pairs per axis as
    numpy), "edge" or "reflect" (any width: a pad of extent or more reflects again)."""
    ndim = np.ndim(x) if not hasattr(x, "node") else x.ndim
    pairs = _pairs(pad_width, ndim, "pad", "pad_width")
    widths = []
    for lo, hi in pairs:
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (lo, hi)):
            raise TypeError(f"pad: pad_width must be integers, got {pad_width!r}")
        if lo < 0 or hi < 0:
            raise ValueError(f"pad: index can't contain negative values ({pad_width!r})")
        widths.append((int(lo), int(hi)))
    cv = constant_values
    if isinstance(cv, (list, np.ndarray)):
        cv = tuple(map(tuple, _pairs(cv, ndim, "pad", "constant_values")))
    elif isinstance(cv, tuple):
        cv = tuple(map(tuple, _pairs(cv, ndim, "pad", "constant_values")))
    return _pad(x, widths=tuple(widths), mode=mode, constant_values=cv)


# ---- clip, cumsum ------------------------------------------------------------------------------

def clip(x, a_min=None, a_max=None, **kwargs):
    """numpy.clip: minimum(maximum(x, a_min), a_max) elementwise, dtypes promoted as numpy's
    ufuncs; either bound may be None (both None: a copy, as numpy 2), bounds broadcast, NaN
    in x or a bound gives NaN, a_min > a_max gives a_max. numpy 2's `min=`/`max=` work too."""
    if "min" in kwargs:
        a_min = kwargs.pop("min")
    if "max" in kwargs:
        a_max = kwargs.pop("max")
    if "out" in kwargs and kwargs["out"] is None:      # (numpy's dispatch passes out=None)
        del kwargs["out"]
    if kwargs:
        raise TraceError(f"clip: arguments {sorted(kwargs)} are not supported")
    return _clip(x, a_min, a_max)


@op
def _clip(x, a_min, a_max):
    out = x if isinstance(x, Tracer) else wrap(node_of(x))
    if a_min is not None:
        out = maximum(out, a_min)
    if a_max is not None:
        out = minimum(out, a_max)
    return out


@op
def cumsum(x, axis=None, dtype=None):
    """numpy.cumsum along `axis` (None: of the flattened x). Integer and bool inputs sum in
    int64 (numpy's platform int; numpy gives uint64 for uint8, which jitcore does not have).
    Each running sum is accumulated in order in the result dtype, as numpy does: float32
    sums match numpy bit for bit, and their error grows like n * eps * sum(|x|)."""
    node = node_of(x)
    want = dt.as_dtype(dtype) if dtype is not None else \
        (node.dtype if node.dtype.is_float else dt.int64)
    if axis is None:
        node, ax = _flat(node), 0
    else:
        ax = normalize_axis(axis, node.ndim, "cumsum")
    node = build.cast(node, want)
    if node.shape[ax] <= 1 or 0 in node.shape:
        return wrap(node)
    return wrap(build.node(Op.CUMSUM, node, arg=ax))


def arange(start, stop=None, step=1, dtype=None) -> np.ndarray:
    """numpy.arange: the values as an array, a constant of the graph when a traced function
    uses it. Its length must be known while tracing: a run-time size among the bounds
    (dynamic=True) makes the compile specialize on that size (explain() says so), as
    np.arange(n) does."""
    for bound in (start, stop, step):
        if isinstance(bound, Size):
            bound.needed("jc.arange's bound (an arange's length is fixed when traced)")
    if stop is None:
        start, stop = 0, start
    return np.arange(start, stop, step, dtype=None if dtype is None else dt.as_dtype(dtype).np)

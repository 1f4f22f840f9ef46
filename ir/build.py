"""Node construction: the strict typing rule of every op, and numpy-style helpers on top.

`infer(op, src, arg)` is the one source of truth for an op's result dtype and shape; node
construction and the verifier both call it. Elementwise ops and reductions follow their
record's typing rule (`ir.ops.Typing`); the other ops have a rule each (`_OWN_RULES`). The helpers below (`elementwise`, `reduce`, ...)
apply numpy's broadcasting and promotion by inserting explicit EXPAND/CAST nodes first.
"""
from __future__ import annotations

import numpy as np

from . import dtypes as dt
from .conv import infer_batch_norm, infer_conv2d
from .errors import DTypeError, ShapeError
from .graph import ConstArray, Node
from .ops import Op, OpInfo, Typing, info
from .pooling import Pool2d
from .shapes import broadcast_shapes, numel
from .sizes import monomial


def _name(op: Op) -> str:
    return op.name.lower()


def _require(cond: bool, exc, msg: str):
    if not cond:
        raise exc(msg)


def _same(op, src, what="shape"):
    if len({getattr(s, what) for s in src}) != 1:
        raise (ShapeError if what == "shape" else DTypeError)(
            f"{_name(op)}: sources differ in {what}: "
            + ", ".join(f"{s.dtype.name}{list(s.shape)}" for s in src))


def _require_bitwise(op, dtype, bool_ok=True):
    """numpy's bitwise ufuncs take integers and bool, shifts integers only (numpy shifts
    bools as int8, a dtype jitcore does not have); floats are a type error."""
    ok = dtype.is_int or (bool_ok and dtype == dt.bool_)
    why = " (numpy shifts bools as int8, which jitcore does not have)" \
        if dtype == dt.bool_ else ""
    _require(ok, DTypeError, f"{_name(op)}: needs integer{' or bool' if bool_ok else ''} "
             f"operands, got {dtype.name}{why}")


def _check_typing(rec: OpInfo, dtype: dt.DType, arg):
    """Raise the DTypeError of `rec`'s typing rule for sources of `dtype`, if it has one."""
    rule = rec.typing
    if rule is Typing.CAST:
        _require(isinstance(arg, dt.DType), DTypeError, "cast: arg must be a DType")
        return
    if rule in (Typing.INTEGRAL, Typing.INT):
        _require_bitwise(rec.op, dtype, bool_ok=rule is Typing.INTEGRAL)
        return
    if rule.admits(dtype):
        return
    name, unary = rec.name, rec.arity == 1
    if rule is Typing.BOOL:
        raise DTypeError(f"{name}: source must be bool" if unary else
                         f"{name}: sources must be bool")
    if rule is Typing.NUMERIC:
        raise DTypeError(f"{name}: not defined for bool")
    if unary:
        raise DTypeError(f"{name}: needs a float source, got {dtype.name}")
    raise DTypeError(f"{name}: needs float sources")


def _infer_elementwise(rec: OpInfo, src, arg):
    """Sources of one shape and (the values of a SELECT) one dtype; the typing rule does
    the rest."""
    op = rec.op
    if len(src) != rec.arity:       # (no f-string on the hot path: this runs per node)
        raise ShapeError(f"{rec.name}: needs {rec.arity} sources, got {len(src)}")
    values = src
    if rec.typing is Typing.SELECT:
        if src[0].dtype != dt.bool_:
            raise DTypeError(f"{rec.name}: condition must be bool")
        values = src[1:]
    if len(src) > 1:
        _same(op, src)
    if len(values) > 1:
        _same(op, values, "dtype")
    x = values[0]
    _check_typing(rec, x.dtype, arg)
    return rec.typing.result(x.dtype, arg), x.shape


def _infer_reduce(rec: OpInfo, x, axes):
    op = rec.op
    _require(isinstance(axes, tuple) and list(axes) == sorted(set(axes))
             and all(0 <= a < x.ndim for a in axes), ShapeError,
             f"{_name(op)}: axes {axes!r} invalid for rank {x.ndim}")
    if rec.index_reduction:
        _require(len(axes) == 1, ShapeError, f"{_name(op)}: exactly one axis")
    # (a composite reduction, mean, is sum / count: empty, it is 0 / 0 = nan as in numpy)
    if rec.identity is None and not rec.composite:
        _require(all(x.shape[a] > 0 for a in axes), ShapeError,
                 f"{_name(op)}: zero-size reduction over axes {axes} of shape {x.shape} "
                 "has no identity")
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return rec.typing.result(x.dtype), shape


def _infer_reshape(op, src, arg):
    x = src[0]
    _require(numel(arg) == numel(x.shape), ShapeError,
             f"reshape: cannot reshape {x.shape} into {arg}")
    return x.dtype, tuple(arg)


def _infer_permute(op, src, arg):
    x = src[0]
    _require(sorted(arg) == list(range(x.ndim)), ShapeError,
             f"transpose: {arg} is not a permutation of the {x.ndim} axes")
    return x.dtype, tuple(x.shape[p] for p in arg)


def _infer_expand(op, src, arg):
    x = src[0]
    _require(len(arg) == x.ndim and all(s in (1, d) for s, d in zip(x.shape, arg)),
             ShapeError, f"broadcast_to: cannot broadcast {x.shape} to {arg}")
    return x.dtype, tuple(arg)


def _infer_slice(op, src, arg):
    """One normalized (start, stop, step) per dim."""
    x = src[0]
    _require(len(arg) == x.ndim, ShapeError, f"slice: {arg} does not match rank {x.ndim}")
    return x.dtype, tuple(len(range(*s)) for s in arg)


def _infer_matmul(op, src, arg):
    a, b = src
    _require(a.dtype == b.dtype and a.dtype.is_float, DTypeError,
             f"matmul: needs two sources of one float dtype, got {a.dtype.name}, {b.dtype.name}")
    _require(a.ndim == b.ndim >= 2 and a.shape[:-2] == b.shape[:-2]
             and a.shape[-1] == b.shape[-2], ShapeError,
             f"matmul: shapes {a.shape} and {b.shape} do not fit")
    return a.dtype, a.shape[:-1] + b.shape[-1:]


def _infer_layer_norm(op, src, arg):
    x = src[0]
    _require(x.dtype.is_float and x.ndim >= 1, DTypeError, "layer_norm: needs a float source")
    for p in src[1:]:
        _require(p.shape == x.shape[-1:] and p.dtype == x.dtype, ShapeError,
                 f"layer_norm: weight/bias must be {x.dtype.name}[{x.shape[-1]}]")
    return x.dtype, x.shape


def _infer_axis_op(op, src, axis):
    x = src[0]
    _require(isinstance(axis, int) and 0 <= axis < x.ndim, ShapeError,
             f"{_name(op)}: axis {axis!r} invalid for rank {x.ndim}")
    if op == Op.TAKE:
        _require(len(src) == 2, ShapeError, "take: needs an array and its indices")
        idx = src[1]
        _require(idx.dtype in (dt.int32, dt.int64), DTypeError,
                 f"take: indices must be int32 or int64, got {idx.dtype.name}")
        return x.dtype, x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if op == Op.CUMSUM:
        _require(len(src) == 1, ShapeError, "cumsum: needs one source")
        return x.dtype, x.shape
    _same(op, src, "dtype")
    for s in src[1:]:
        _require(s.ndim == x.ndim and all(a == c for k, (a, c) in enumerate(zip(s.shape, x.shape))
                                          if k != axis), ShapeError,
                 f"concatenate: shapes {[list(t.shape) for t in src]} differ off axis {axis}")
    total = sum(s.shape[axis] for s in src)
    return x.dtype, x.shape[:axis] + (total,) + x.shape[axis + 1:]


def _infer_rows(op, src, arg):
    """softmax and log_softmax: a float source, its shape."""
    _require(src[0].dtype.is_float, DTypeError, f"{_name(op)}: needs a float source")
    return src[0].dtype, src[0].shape


def _infer_pool(op, src, arg):
    x = src[0]
    _require(isinstance(arg, Pool2d), ShapeError, "pool2d: arg must be a Pool2d")
    _require(x.dtype.is_float, DTypeError, f"{arg.name}: needs a float source, got {x.dtype.name}")
    _require(x.ndim == 4 and x.shape[2] > 0 and x.shape[3] > 0, ShapeError,
             f"{arg.name}: needs an (N, C, H, W) source with H, W > 0, got {x.shape}")
    out = arg.output_hw(*x.shape[2:])
    _require(all(o > 0 for o in out), ShapeError,
             f"{arg.name}: {arg} gives an empty output {out} for input {x.shape}")
    return x.dtype, x.shape[:2] + out


# the ops that are neither elementwise, reductions nor task boundaries: one rule each (their
# records' typing says only what dtype they admit)
_OWN_RULES = {
    Op.RESHAPE: _infer_reshape, Op.PERMUTE: _infer_permute, Op.EXPAND: _infer_expand,
    Op.SLICE: _infer_slice, Op.MATMUL: _infer_matmul, Op.SOFTMAX: _infer_rows,
    Op.LOG_SOFTMAX: _infer_rows, Op.LAYER_NORM: _infer_layer_norm, Op.TAKE: _infer_axis_op,
    Op.CONCAT: _infer_axis_op, Op.CUMSUM: _infer_axis_op, Op.POOL2D: _infer_pool,
    Op.CONV2D: lambda op, src, arg: infer_conv2d(src, arg),
    Op.BATCH_NORM: lambda op, src, arg: infer_batch_norm(src, arg),
}


def infer(op: Op, src: tuple, arg) -> tuple:
    """(dtype, shape) of op applied to src with arg, or a ShapeError/DTypeError saying why not."""
    rec = info(op)
    if rec.elementwise:
        return _infer_elementwise(rec, src, arg)
    if rec.reduction:
        return _infer_reduce(rec, src[0], arg)
    if rec.task_boundary:
        _require(isinstance(arg, int) and len(src) == 1, ShapeError,
                 f"{_name(op)}: needs one source and a task number")
        return src[0].dtype, src[0].shape
    rule = _OWN_RULES.get(op)
    if rule is None:
        raise ShapeError(f"no typing rule for {_name(op)}")
    return rule(op, src, arg)


def node(op: Op, *src: Node, arg=None) -> Node:
    dtype, shape = infer(op, src, arg)
    return Node(op, dtype, shape, src, arg)


# ---- leaves ------------------------------------------------------------------------------

def input_node(name: str, shape: tuple, dtype) -> Node:
    return Node(Op.INPUT, dt.as_dtype(dtype), tuple(shape), (), name)


def const(value, dtype) -> Node:
    """A scalar constant of shape (), its value converted to the dtype as numpy would."""
    dtype = dt.as_dtype(dtype)
    return Node(Op.CONST, dtype, (), (), dtype.np.type(value).item())


def dim(extent: int) -> Node:
    """The run-time value of an extent (c times a product of placeholders) as an int64
    scalar: the backend reads it from the call's extents."""
    if monomial(extent) is None:
        raise ShapeError(f"dim: {extent} is not a run-time extent")
    return Node(Op.DIM, dt.int64, (), (), extent)


def const_array(array) -> Node:
    """A constant node of an array (copied), or of a ConstArray (shared: no copy, no rehash)."""
    held = array if isinstance(array, ConstArray) else None
    arr = held.array if held is not None else np.asarray(array)
    dtype = dt.as_dtype(arr.dtype)
    if arr.ndim == 0:
        return const(arr.item(), dtype)
    return Node(Op.CONST, dtype, arr.shape, (), held or ConstArray(arr))


# ---- numpy-style helpers -------------------------------------------------------------------

def cast(x: Node, dtype) -> Node:
    dtype = dt.as_dtype(dtype)
    return x if x.dtype == dtype else node(Op.CAST, x, arg=dtype)


def reshape(x: Node, shape: tuple) -> Node:
    return x if x.shape == tuple(shape) else node(Op.RESHAPE, x, arg=tuple(shape))


def broadcast_to(x: Node, shape: tuple) -> Node:
    shape = tuple(shape)
    if x.shape == shape:
        return x
    if x.ndim > len(shape):
        raise ShapeError(f"broadcast_to: cannot broadcast {x.shape} to {shape}")
    x = reshape(x, (1,) * (len(shape) - x.ndim) + x.shape)
    return node(Op.EXPAND, x, arg=shape)


def elementwise(op: Op, *src: Node, arg=None) -> Node:
    """Apply an elementwise op with numpy broadcasting and promotion of the sources: the
    op's typing rule says what the sources are converted to first."""
    rule = info(op).typing
    shape = broadcast_shapes(*(s.shape for s in src))
    if rule in (Typing.INTEGRAL, Typing.INT):
        # name the operands' own dtypes (the promoted one would hide which was a float)
        _require(not any(s.dtype.is_float for s in src), DTypeError,
                 f"{_name(op)}: needs integer or bool operands, got "
                 + ", ".join(s.dtype.name for s in src))
    if rule is Typing.SELECT:
        c, a, b = src
        common = dt.promote(a.dtype, b.dtype)
        src = (cast(c, dt.bool_), cast(a, common), cast(b, common))
    elif rule is Typing.BOOL:
        src = tuple(cast(s, dt.bool_) for s in src)
    elif len(src) == 2:
        common = dt.promote(src[0].dtype, src[1].dtype)
        if rule is Typing.FLOAT:
            common = dt.float_result(common)
        if rule is Typing.TRUE_DIVIDE:
            common = dt.float_result(common) if not common.is_float else common
            if not src[0].dtype.is_float and not src[1].dtype.is_float:
                common = dt.float64     # numpy: int / int -> float64
        src = tuple(cast(s, common) for s in src)
    elif rule is Typing.FLOAT:
        src = (cast(src[0], dt.float_result(src[0].dtype)),)
    src = tuple(broadcast_to(s, shape) for s in src)
    return node(op, *src, arg=arg)


def reduce(op: Op, x: Node, axes: tuple, keepdims: bool = False) -> Node:
    out = node(op, x, arg=tuple(axes))
    if keepdims:
        return out
    return reshape(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))


def matmul(a: Node, b: Node) -> Node:
    """numpy matmul: 1-D operands get a temporary axis, batch dims broadcast."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must not be scalars")
    common = dt.promote(a.dtype, b.dtype)
    common = common if common.is_float else dt.float64   # integer matmul computes in float64
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit "
                         f"(inner dims {a2.shape[-1]} != {b2.shape[-2]})")
    batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = broadcast_to(cast(a2, common), batch + a2.shape[-2:])
    b2 = broadcast_to(cast(b2, common), batch + b2.shape[-2:])
    out = node(Op.MATMUL, a2, b2)
    shape = batch + (a.shape[-2:-1] if a.ndim > 1 else ()) + (b.shape[-1:] if b.ndim > 1 else ())
    return reshape(out, shape)

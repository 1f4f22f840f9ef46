"""The op namespace (`jc.exp`, `jc.sum`, ...), with numpy's names and semantics.

The functions that record one elementwise op or reduction are generated from their rows of
the spelling table (jitcore/ops/spellings.py: names, aliases, docs); the rows marked custom that
record one op with logic of their own (true division, where, gelu, ...) are written here and
registered with `@implements`. Views, contractions and row-wise composites follow.

Inside a jitted function these record IR nodes on Tracers. Called on plain arrays they run
eagerly: the op is jitted once per signature and executed. Jitting is done by the layers above
this one, so `jitcore.eager` installs the runner here (`set_eager_runner`) when jitcore is
imported, and this module imports nothing of the compiler.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import ShapeError, TraceError
from jitcore.ir.ops import COMPARE, INDEX_REDUCE, Op
from jitcore.ir.shapes import as_shape, infer_reshape, normalize_axes, normalize_axis

from .spellings import SPELLINGS, Spelling, implements
from .tracer import Tracer, node_of, wrap


_eager_runner = None      # run(public_op, traced_fn, args, kwargs), set by jitcore.eager
# (public op, number of arguments) -> the jitted op, for calls whose arguments are all
# ndarrays and no keywords: filled by jitcore.eager, read without a lock (a dict lookup is
# atomic); the jitted op's own fast path checks the signature natively
EAGER_ARRAY_CALLS: dict = {}


def set_eager_runner(run) -> None:
    """Install how ops run on plain arrays (`jitcore.eager.run_eagerly`)."""
    global _eager_runner
    _eager_runner = run


def op(fn):
    """Make fn run eagerly (jitted) when none of its arguments is a Tracer."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not kwargs:            # the common eager call, `jc.exp(array)`: ~0.3 us to the code
            jitted = EAGER_ARRAY_CALLS.get((wrapper, len(args)))
            if jitted is not None:
                for a in args:
                    if type(a) is not np.ndarray:
                        break
                else:
                    return jitted(*args)
        if any(isinstance(a, Tracer) for a in args) or \
                any(isinstance(v, Tracer) for v in kwargs.values()):
            return fn(*args, **kwargs)
        if _eager_runner is None:
            raise RuntimeError(f"{fn.__module__}.{fn.__name__} on plain arrays needs the eager "
                               "runner: import jitcore first")
        return _eager_runner(wrapper, fn, args, kwargs)
    return wrapper


def _tensors(*xs, check: bool = True):
    """Nodes for the operands; Python scalars (constants, or Tracers of scalar arguments)
    are weak next to a tensor (NEP 50), and combine among themselves as Python's do."""
    like = next((x.node for x in xs if isinstance(x, Tracer) and x.weak is None), None)
    if like is None:
        like = next((node_of(x) for x in xs if not isinstance(x, (bool, int, float, Tracer))),
                    None)
    return [node_of(x, like, check) for x in xs]


def _is_weak_int(x) -> bool:
    if isinstance(x, Tracer):
        return x.weak is not None and x.weak.pytype is int
    return isinstance(x, int) and not isinstance(x, (bool, np.generic))


def float_operands(*xs, float_of) -> list:
    """Nodes for the operands of an op that computes integers in a float dtype (true
    division, arctan2, hypot...). A weak Python int next to an integer tensor becomes that
    float (`float_of(the tensor's dtype)`) directly, as numpy 2 converts it: `u8 / 300`
    and `i32 / 2**40` are float64 values, not an OverflowError (the out-of-bounds rule is
    for ints that must become the tensor's integer type)."""
    like = next((x.node for x in xs if isinstance(x, Tracer) and x.weak is None), None)
    if like is None or not like.dtype.is_int or not any(_is_weak_int(x) for x in xs):
        return _tensors(*xs)
    target = float_of(like.dtype)
    return [(build.cast(x.node, target) if isinstance(x, Tracer) else build.const(float(x), target))
            if _is_weak_int(x) else node_of(x, like) for x in xs]


def _elementwise(opcode: Op, *xs, arg=None):
    return wrap(build.elementwise(opcode, *_tensors(*xs), arg=arg))


def _fits(value: int, dtype: dt.DType) -> bool:
    info = np.iinfo(dtype.np)
    return info.min <= value <= info.max


def _widen_for_comparison(a, b_):
    """numpy compares an integer array with an out-of-range Python int exactly (uint8 < 300
    is all True); do the same by comparing in int64 (or float64 beyond int64)."""
    for x, y in ((a, b_), (b_, a)):
        if isinstance(x, Tracer) and x.weak is None and x.node.dtype.is_int and \
                isinstance(y, int) and not isinstance(y, bool) and not _fits(y, x.node.dtype):
            wide = dt.int64 if _fits(y, dt.int64) else dt.float64
            pair = (build.cast(x.node, wide), build.const(y, wide))
            return pair if x is a else pair[::-1]
        # an integer scalar argument's value is known only at run time: compare in int64
        if isinstance(x, Tracer) and x.weak is None and x.node.dtype.is_int and \
                isinstance(y, Tracer) and y.weak is not None and y.weak.pytype is int:
            pair = (build.cast(x.node, dt.int64), y.node)
            return pair if x is a else pair[::-1]
    return _tensors(a, b_)


# ---- the ops generated from the spelling table (jitcore/ops/spellings.py) --------------------

def _generated_unary(row: Spelling):
    opcode = row.op

    def f(x):
        return _elementwise(opcode, x)
    return f


def _generated_binary(row: Spelling):
    opcode = row.op
    if opcode in COMPARE:
        def f(a, b_):
            return wrap(build.elementwise(opcode, *_widen_for_comparison(a, b_)))
    else:
        def f(a, b_):
            return _elementwise(opcode, a, b_)
    return f


def _generated_reduction(row: Spelling):
    name, opcode = row.name, row.op

    def f(x, axis=None, keepdims=False, **kw):
        unsupported = set(kw) - {"dtype"}
        if unsupported:
            raise TraceError(f"{name}: arguments {sorted(unsupported)} are not supported")
        node = node_of(x)
        want = dt.as_dtype(kw["dtype"]) if kw.get("dtype") is not None else None
        if want is not None:
            node = build.cast(node, want)
        axes = normalize_axes(axis, node.ndim, name)
        if opcode in INDEX_REDUCE:
            return _arg_reduction(opcode, node, axis, keepdims)
        out = build.reduce(opcode, node, axes, keepdims)
        # sum(dtype=int32) accumulates in int64 here; wrapping back gives numpy's int32 result
        return wrap(build.cast(out, want) if want is not None else out)
    return f


def _arg_reduction(opcode, node, axis, keepdims):
    if axis is None:
        flat = build.reshape(node, (math.prod(node.shape),))
        out = build.reduce(opcode, flat, (0,), keepdims=False)
        return wrap(build.reshape(out, (1,) * node.ndim) if keepdims else out)
    ax = normalize_axis(axis, node.ndim, opcode.name.lower())
    return wrap(build.reduce(opcode, node, (ax,), keepdims))


def _generate(row: Spelling):
    make = _generated_reduction if row.reduction else \
        (_generated_unary if row.arity == 1 else _generated_binary)
    f = make(row)
    f.__name__ = f.__qualname__ = row.name
    f.__doc__ = row.doc
    return implements(row.name)(op(f))


# jc.exp, jc.add, jc.sum, ... and their aliases (jc.negative, jc.amax, ...): one function per
# row of the table that records its op as it is
for _row in SPELLINGS:
    if not _row.custom:
        globals().update(dict.fromkeys(_row.names, _generate(_row)))


# ---- ops with logic of their own (rows marked custom; their docs are in the table) -----------

@implements("div")
@op
def div(a, b_):
    # true division: integers give float64, and a weak Python int next to an integer tensor
    # becomes that float directly (numpy 2)
    return wrap(build.elementwise(Op.DIV, *float_operands(a, b_, float_of=lambda d: dt.float64)))


@implements("where")
@op
def where(condition, x, y):
    # a Python scalar is weak next to the other branch, converted without numpy's range
    # error (np.where(c, uint8_array, 300) wraps)
    a, b_ = _tensors(x, y, check=False)
    return wrap(build.elementwise(Op.WHERE, node_of(condition), a, b_))


@implements("gelu")
@op
def gelu(x, approximate: str = "none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _elementwise(Op.GELU, x, arg=approximate)


@implements("leaky_relu")
@op
def leaky_relu(x, negative_slope: float = 0.01):
    return _elementwise(Op.LEAKY_RELU, x, arg=float(negative_slope))


@implements("hardtanh")
@op
def hardtanh(x, min_val: float = -1.0, max_val: float = 1.0):
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val {min_val} > max_val {max_val}")
    return _elementwise(Op.HARDTANH, x, arg=(float(min_val), float(max_val)))


@implements("copysign")
@op
def copysign(x, y):
    # both made float first (numpy's float result of each), then promoted together
    a, s = (build.cast(n, dt.float_result(n.dtype)) for n in (node_of(x), node_of(y)))
    common = dt.promote(a.dtype, s.dtype)
    return wrap(build.elementwise(Op.COPYSIGN, build.cast(a, common), build.cast(s, common)))


@op
def astype(x, dtype):
    """Convert to another dtype (as numpy's astype, unsafe casting)."""
    return wrap(build.cast(node_of(x), dt.as_dtype(dtype)))


# ---- views -----------------------------------------------------------------------------------

@op
def reshape(x, shape):
    """numpy.reshape (one -1 allowed); never copies."""
    node = node_of(x)
    return wrap(build.reshape(node, infer_reshape(node.shape, shape)))


@op
def transpose(x, axes=None):
    """numpy.transpose: reverse the axes, or permute them as given."""
    node = node_of(x)
    if axes is None:
        axes = tuple(reversed(range(node.ndim)))
    axes = tuple(normalize_axis(a, node.ndim, "transpose") for a in axes)
    if sorted(axes) != list(range(node.ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {node.ndim} axes")
    return wrap(build.node(Op.PERMUTE, node, arg=axes) if axes != tuple(range(node.ndim)) else node)


@op
def broadcast_to(x, shape):
    """numpy.broadcast_to."""
    return wrap(build.broadcast_to(node_of(x), as_shape(shape)))


@op
def expand_dims(x, axis):
    """numpy.expand_dims (an int or a tuple of axes)."""
    node = node_of(x)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    ndim = node.ndim + len(axes)
    axes = normalize_axes(axes, ndim, "expand_dims")
    it = iter(node.shape)
    return wrap(build.reshape(node, tuple(1 if i in axes else next(it) for i in range(ndim))))


@op
def squeeze(x, axis=None):
    """numpy.squeeze: drop size-1 axes (all, or those given, which must have size 1)."""
    node = node_of(x)
    axes = tuple(i for i, d in enumerate(node.shape) if d == 1) if axis is None \
        else normalize_axes(axis, node.ndim, "squeeze")
    for a in axes:
        if node.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of shape {node.shape} does not have size 1")
    return wrap(build.reshape(node, tuple(d for i, d in enumerate(node.shape) if i not in axes)))


def getitem(x: Tracer, index) -> Tracer:
    """Basic indexing: ints, slices (any step), None and Ellipsis. No copies."""
    from .indexing import apply_index
    return wrap(apply_index(x.node, index))


# ---- contractions and row-wise composites ----------------------------------------------------

@implements("matmul")
@op
def matmul(a, b_):
    na, nb = _tensors(a, b_)
    return wrap(build.matmul(na, nb))


@op
def softmax(x, axis: int = -1):
    """exp(x - max) / sum(exp(x - max)) along axis."""
    node = node_of(x)
    node = build.cast(node, dt.float_result(node.dtype))
    return wrap(build.node(Op.SOFTMAX, node, arg=normalize_axis(axis, node.ndim, "softmax")))


@op
def log_softmax(x, axis: int = -1):
    """x - max - log(sum(exp(x - max))) along axis."""
    node = node_of(x)
    node = build.cast(node, dt.float_result(node.dtype))
    axis = normalize_axis(axis, node.ndim, "log_softmax")
    return wrap(build.node(Op.LOG_SOFTMAX, node, arg=axis))


@op
def layer_norm(x, weight=None, bias=None, eps: float = 1e-5):
    """Normalize over the last axis to zero mean and unit variance, then * weight + bias."""
    node = node_of(x)
    node = build.cast(node, dt.float_result(node.dtype))
    params = []
    if weight is not None or bias is not None:
        w = node_of(weight) if weight is not None else build.const_array(
            np.ones(node.shape[-1], node.dtype.np))
        params.append(build.cast(w, node.dtype))
    if bias is not None:
        params.append(build.cast(node_of(bias), node.dtype))
    for p in params:
        if p.shape != node.shape[-1:]:
            raise ShapeError(f"layer_norm: weight/bias must have shape ({node.shape[-1]},), "
                             f"got {p.shape}")
    return wrap(build.node(Op.LAYER_NORM, node, *params, arg=float(eps)))


for _row in SPELLINGS:                  # the custom rows' aliases of this module (jc.divide)
    if _row.custom and _row.name in globals():
        globals().update(dict.fromkeys(_row.aliases, globals()[_row.name]))

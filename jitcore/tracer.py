"""Tracer values: what a jitted function sees instead of arrays while it is traced.

A Tracer wraps one IR node. Its operators, methods, indexing and numpy's protocols
(`__array_ufunc__`, `__array_function__`) record ops through `jitcore.ops`; they are attached
by `jitcore.tensor_methods` (the op namespace is built on this module, so it cannot be imported
here), and `np.exp(x)`, `x.sum(axis=1)` and `jc.exp(x)` build the same graph. Anything that would need
a tensor's *value* at trace time (if/while on it, float(x), np.asarray(x)) raises TraceError.
"""
from __future__ import annotations

import threading

import numpy as np

from jitcore.ir import build as b
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import TraceError
from jitcore.ir.graph import Node


class TraceState(threading.local):
    """Per-thread facts about the trace in progress (jc.fork numbers its tasks with it)."""

    def __init__(self):
        self.forks = 0           # tasks forked so far in this trace
        self.fork_depth = 0      # > 0 while tracing the body of a forked function


TRACE = TraceState()

# a Python scalar of each weak kind, for dtypes.promote_with_weak
_SAMPLE = {bool: False, int: 0, float: 0.0}


class WeakScalar:
    """What a Tracer of a Python scalar knows: the scalar's Python type (NEP 50: it takes
    the dtype of the array it meets when its kind allows), and, for a scalar *argument*,
    the narrower integer dtypes it was converted to: a call whose value does not fit one
    of them raises OverflowError as numpy does (`uint8_array + 300`). Scalars computed
    inside the function (`2 * s`) record nothing (`narrowed` is None): they wrap."""
    __slots__ = ("pytype", "name", "narrowed")

    def __init__(self, pytype: type, name: str | None = None, narrowed: set | None = None):
        self.pytype, self.name, self.narrowed = pytype, name, narrowed

    def dtype_next_to(self, strong):
        return dt.promote_with_weak(strong, _SAMPLE[self.pytype])


class Tracer:
    __slots__ = ("node", "weak")
    __array_priority__ = 1000          # numpy defers binary operators to us

    def __init__(self, node: Node, weak: WeakScalar | None = None):
        self.node = node
        self.weak = weak               # set for a Python scalar (argument or computed)

    # -- static facts (known at trace time) -------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype.np

    @property
    def ndim(self) -> int:
        return self.node.ndim

    @property
    def size(self) -> int:
        return int(np.prod(self.node.shape, dtype=np.int64))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tracer({self.node.dtype.name}{list(self.shape)}, op={self.node.op.name.lower()})"

    # -- values are unknown while tracing -------------------------------------------------------
    def _no_value(self, what):
        if self.weak is not None and self.weak.name is not None:
            raise TraceError(
                f"{what} of Python {self.weak.pytype.__name__} argument "
                f"{self.weak.name!r}: it is a run-time value while tracing (one compile for "
                "all its values). To use it as a Python value (an axis, a shape, a flag, "
                f"float(...)), mark it static: jc.jit(fn, static_argnames=({self.weak.name!r},))")
        raise TraceError(
            f"{what} of a traced tensor {self.node.dtype.name}{list(self.shape)}: its value is "
            "not known while tracing. Use jc.where(...) instead of if/else on tensor values, "
            "and return arrays instead of converting them.")

    def __bool__(self):
        self._no_value("truth value (if/while/and/or)")

    def __float__(self):
        self._no_value("float()")

    def __int__(self):
        self._no_value("int()")

    def __index__(self):
        self._no_value("use as an index")

    def __array__(self, dtype=None, copy=None):
        self._no_value("conversion to a numpy array")

    def __iter__(self):
        self._no_value("iteration")

    def __hash__(self):
        return id(self)

    def __setitem__(self, index, value):
        raise TraceError("in-place assignment to a traced tensor is not supported; "
                         "use jc.where(mask, value, x) to build the updated tensor")


def is_weak(x) -> bool:
    """A Python scalar, or a Tracer standing for one."""
    if isinstance(x, Tracer):
        return x.weak is not None
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _weak_cast(x: "Tracer", like: Node, check: bool) -> Node:
    """A weak scalar tracer converted to its dtype next to `like` (NEP 50); a scalar
    argument narrowed to a smaller integer dtype records it for the call-time range check."""
    d = x.weak.dtype_next_to(like.dtype)
    if check and x.weak.narrowed is not None and x.weak.pytype is int and d.is_int \
            and d.bits < 64:
        x.weak.narrowed.add(d)
    return b.cast(x.node, d)


def node_of(x, like: Node | None = None, check: bool = True) -> Node:
    """The IR node for an operand: a Tracer's node, or a constant.

    Python scalars are weak (NEP 50): next to a tensor `like` they take its dtype when their
    kind allows; so are Tracers of Python scalar arguments (`check=False`: converted as
    astype would, without numpy's out-of-bounds error, as np.where does). numpy arrays and
    numpy scalars are strong constants.
    """
    if isinstance(x, Tracer):
        return x.node if x.weak is None or like is None else _weak_cast(x, like, check)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        d = dt.promote_with_weak(like.dtype, x) if like is not None else dt.weak_scalar_dtype(x)
        return b.const(x, d)
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        return b.const_array(arr)
    if x is None:
        raise TraceError("cannot use None as a tensor operand (a function without a "
                         "`return`, or one whose result is None, gives None)")
    raise TraceError(f"cannot use {type(x).__name__} {x!r} as a tensor operand")


def wrap(node: Node, weak: WeakScalar | None = None) -> Tracer:
    return Tracer(node, weak)

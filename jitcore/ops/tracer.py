"""Tracer values: what a jitted function sees instead of arrays while it is traced.

A Tracer wraps one IR node. Its operators, methods, indexing and numpy's protocols
(`__array_ufunc__`, `__array_function__`) record ops through `jitcore.ops.core`; they are
attached by `jitcore.ops.tensor_methods` (the op namespace is built on this module, so it
cannot be imported here), and `np.exp(x)`, `x.sum(axis=1)` and `jc.exp(x)` build the same
graph. Anything that would need a tensor's *value* at trace time (if/while on it, float(x),
np.asarray(x)) raises TraceError.
"""
from __future__ import annotations

import threading

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import TraceError
from jitcore.ir.graph import Node
from jitcore.ir.ops import Op
from jitcore.ir.sizes import (HUGE, Size, SizeValueNeeded, register_value_maker, symbolic_terms,
                              user_line)


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
        """The extents: ints, and in a dynamic trace a `Size` for each run-time one."""
        return tuple(d if -HUGE < d < HUGE else Size.of(d) for d in self.node.shape)

    @property
    def dtype(self) -> np.dtype:
        return self.node.dtype.np

    @property
    def ndim(self) -> int:
        return self.node.ndim

    @property
    def size(self):
        out = 1
        for d in self.shape:
            out = d * out
        return out

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        n = self.shape[0]
        if isinstance(n, Size):
            n.needed("len() (x.shape[0] stays a run-time size)")
        return n

    def __repr__(self) -> str:
        return f"Tracer({self.node.dtype.name}{list(self.shape)}, op={self.node.op.name.lower()})"

    # -- values are unknown while tracing -------------------------------------------------------
    def _no_value(self, what):
        if _from_sizes(self.node):
            raise SizeValueNeeded(f"Python needs the value of run-time sizes: {what} of a "
                                  "value computed from them" + user_line())
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


def _from_sizes(node: Node) -> bool:
    """Whether a scalar was computed from run-time sizes (an Op.DIM among its sources)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.op == Op.DIM:
            return True
        if n.shape == () and id(n) not in seen:
            seen.add(id(n))
            stack.extend(n.src)
    return False


def is_weak(x) -> bool:
    """A Python scalar, or a Tracer standing for one (a run-time size is a Python int)."""
    if isinstance(x, Tracer):
        return x.weak is not None
    if isinstance(x, Size):
        return True
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _weak_cast(x: "Tracer", like: Node, check: bool) -> Node:
    """A weak scalar tracer converted to its dtype next to `like` (NEP 50); a scalar
    argument narrowed to a smaller integer dtype records it for the call-time range check."""
    d = x.weak.dtype_next_to(like.dtype)
    if check and x.weak.narrowed is not None and x.weak.pytype is int and d.is_int \
            and d.bits < 64:
        x.weak.narrowed.add(d)
    return build.cast(x.node, d)


def node_of(x, like: Node | None = None, check: bool = True) -> Node:
    """The IR node for an operand: a Tracer's node, or a constant.

    Python scalars are weak (NEP 50): next to a tensor `like` they take its dtype when their
    kind allows; so are Tracers of Python scalar arguments (`check=False`: converted as
    astype would, without numpy's out-of-bounds error, as np.where does). numpy arrays and
    numpy scalars are strong constants. A run-time size (dynamic traces) is a weak int read
    from the call's extents.
    """
    if isinstance(x, Size):
        x = size_value(x)
    if isinstance(x, Tracer):
        return x.node if x.weak is None or like is None else _weak_cast(x, like, check)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        d = dt.promote_with_weak(like.dtype, x) if like is not None else dt.weak_scalar_dtype(x)
        return build.const(x, d)
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        return build.const_array(arr)
    if x is None:
        raise TraceError("cannot use None as a tensor operand (a function without a "
                         "`return`, or one whose result is None, gives None)")
    raise TraceError(f"cannot use {type(x).__name__} {x!r} as a tensor operand")


def wrap(node: Node, weak: WeakScalar | None = None) -> Tracer:
    return Tracer(node, weak)


def size_value(size: Size) -> Tracer:
    """A run-time size used as a value (`x / n`, `n * 0.5`): an int64 scalar of the graph
    read from the call's extents (Op.DIM per term), weak like a Python int."""
    plus, minus = [], []
    for c, extent in symbolic_terms(size):
        term = build.const(abs(c), dt.int64) if extent == 1 else build.dim(abs(c) * extent)
        (plus if c > 0 else minus).append(term)
    node = plus[0] if plus else build.const(0, dt.int64)
    for term in plus[1:]:
        node = build.elementwise(Op.ADD, node, term)
    for term in minus:
        node = build.elementwise(Op.SUB, node, term)
    return Tracer(node, WeakScalar(int))


register_value_maker(size_value)

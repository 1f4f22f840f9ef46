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
from jitcore.ir.errors import TraceError
from jitcore.ir.graph import Node


class TraceState(threading.local):
    """Per-thread facts about the trace in progress (jc.fork numbers its tasks with it)."""

    def __init__(self):
        self.forks = 0           # tasks forked so far in this trace
        self.fork_depth = 0      # > 0 while tracing the body of a forked function


TRACE = TraceState()


class Tracer:
    __slots__ = ("node",)
    __array_priority__ = 1000          # numpy defers binary operators to us

    def __init__(self, node: Node):
        self.node = node

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


def node_of(x, like: Node | None = None) -> Node:
    """The IR node for an operand: a Tracer's node, or a constant.

    Python scalars are weak (NEP 50): next to a tensor `like` they take its dtype when their
    kind allows. numpy arrays and numpy scalars are strong constants.
    """
    if isinstance(x, Tracer):
        return x.node
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        from jitcore.ir import dtypes as dt
        d = dt.promote_with_weak(like.dtype, x) if like is not None else dt.weak_scalar_dtype(x)
        return b.const(x, d)
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        arr = np.asarray(x)
        return b.const_array(arr)
    raise TraceError(f"cannot use {type(x).__name__} {x!r} as a tensor operand")


def wrap(node: Node) -> Tracer:
    return Tracer(node)

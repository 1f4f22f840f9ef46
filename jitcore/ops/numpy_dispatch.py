"""numpy functions applied to Tracers: `np.exp(x)`, `np.maximum(x, 0)`, `np.sum(x, axis=1)`...

Each numpy ufunc or function maps to the jc function with numpy's meaning: the op's row of
the spelling table (jitcore/ops/spellings.py) names the numpy spellings it answers to.
Anything unmapped raises a TraceError that names it, instead of silently computing eagerly.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir.errors import TraceError

from . import core, join
from . import math as m
from .spellings import SPELLINGS, implementation


def in_numpy_order(fn, row):
    """fn (a jc reduction: x, axis, keepdims, dtype=) called with numpy's positional order for
    the row (`x.sum(1, np.float64)` is a float64 sum over axis 1, as in numpy; jc.sum(x, 1,
    True) keeps dims). `out=` is refused: a traced value has no buffer to write."""
    params = row.numpy_params
    if not params:
        return fn

    def numpy_spelled(x, *args, **kwargs):
        if len(args) > len(params):
            raise TraceError(f"{row.name}: takes at most {len(params)} arguments after the "
                             f"array in numpy's order {params}, got {len(args)}")
        for name, value in zip(params, args):
            if name in kwargs:
                raise TraceError(f"{row.name}: got {name!r} twice")
            kwargs[name] = value
        if kwargs.pop("out", None) is not None:
            raise TraceError(f"{row.name}: out= is not supported on traced tensors")
        return fn(x, **kwargs)
    numpy_spelled.__name__ = fn.__name__
    numpy_spelled.__doc__ = fn.__doc__
    return numpy_spelled


def _from_spellings() -> tuple:
    """{numpy ufunc: jc function}, {ufunc: reduction} (ufunc.reduce) and {numpy function:
    jc function}, from the rows of the spelling table."""
    tables = ({}, {}, {})
    for row in SPELLINGS:
        fn = in_numpy_order(implementation(row.name), row)
        for table, names in zip(tables, (row.ufuncs, row.reduces, row.functions)):
            for name in names:
                spelled = getattr(np, name)
                if spelled in table:
                    raise ValueError(f"np.{name} is spelled by two rows of the spelling table")
                table[spelled] = fn
    return tables


UFUNCS, REDUCING_UFUNCS, FUNCTIONS = _from_spellings()
# numpy functions that are not one op's spelling: views, np.dot (checked below), norm
FUNCTIONS.update({
    np.reshape: core.reshape, np.transpose: core.transpose, np.broadcast_to: core.broadcast_to,
    np.expand_dims: core.expand_dims, np.squeeze: core.squeeze, np.dot: core.matmul,
    np.linalg.norm: m.norm,
})


def _name(f) -> str:
    module = "np.linalg." if getattr(f, "__module__", "").startswith("numpy.linalg") else "np."
    return module + f.__name__


def supported() -> dict:
    """The numpy surface inside a jitted function: {"ufuncs": [...], "functions": [...],
    "reductions": [...] (ufunc.reduce)}, each a sorted list of names."""
    return {"ufuncs": sorted({_name(u) for u in UFUNCS}),
            "ufunc reductions": sorted(f"{_name(u)}.reduce" for u in REDUCING_UFUNCS),
            "functions": sorted({_name(f) for f in FUNCTIONS})}


def supported_text() -> str:
    """supported() as the README lists it."""
    return "\n".join(f"- {kind}: " + ", ".join(f"`{n}`" for n in names)
                     for kind, names in supported().items())


def _unsupported(what: str) -> TraceError:
    return TraceError(f"{what} is not supported on traced tensors. Supported: "
                      + "; ".join(f"{kind}: {', '.join(names)}"
                                  for kind, names in supported().items()))

# indexing and joining (jitcore/ops/join.py)
FUNCTIONS.update({
    np.take: join.take, np.concatenate: join.concatenate, np.stack: join.stack,
    np.split: join.split, np.pad: join.pad, np.clip: join.clip,
    np.cumsum: join.cumsum,
})


def apply_ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TraceError(f"np.{ufunc.__name__}(..., out=) is not supported on traced tensors")
    extra = {k: v for k, v in kwargs.items() if k not in ("out",)}
    if method == "__call__" and ufunc in UFUNCS and not extra:
        return UFUNCS[ufunc](*inputs)
    if method == "reduce" and ufunc in REDUCING_UFUNCS:
        # numpy passes reduce's arguments by name (axis, dtype, keepdims, initial, where);
        # the reduction refuses the ones it does not support, by name
        extra.setdefault("axis", 0)
        return REDUCING_UFUNCS[ufunc](inputs[0], **extra)
    if method == "__call__" and ufunc in UFUNCS:
        raise TraceError(f"np.{ufunc.__name__}(...) with {sorted(extra)} is not supported on "
                         "traced tensors (only positional operands)")
    raise _unsupported(f"np.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}"))


def apply_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise _unsupported(_name(func))
    if func is np.where and len(args) + len(kwargs) != 3:
        raise TraceError("np.where needs three arguments on traced tensors")
    if func is np.dot and any(getattr(a, "ndim", 2) > 2 for a in args):
        raise TraceError("np.dot of arrays with more than 2 dims differs from matmul; use @")
    return fn(*args, **kwargs)

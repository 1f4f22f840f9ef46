"""numpy functions applied to Tracers: `np.exp(x)`, `np.maximum(x, 0)`, `np.sum(x, axis=1)`...

Each numpy ufunc or function maps to the `jitcore.ops` function with numpy's meaning.
Anything unmapped raises a TraceError that names it, instead of silently computing eagerly.
"""
from __future__ import annotations

import numpy as np

from jitcore.ir.errors import TraceError

from . import join_ops, ops
from . import math_ops as m

UFUNCS = {
    np.exp: ops.exp, np.log: ops.log, np.sqrt: ops.sqrt, np.absolute: ops.abs,
    np.negative: ops.neg, np.tanh: ops.tanh, np.sin: ops.sin, np.cos: ops.cos,
    np.floor: ops.floor, np.ceil: ops.ceil, np.reciprocal: ops.reciprocal,
    np.logical_not: ops.logical_not, np.add: ops.add, np.subtract: ops.sub,
    np.multiply: ops.mul, np.true_divide: ops.div, np.power: ops.pow,
    np.floor_divide: ops.floor_divide, np.remainder: ops.remainder,
    np.maximum: ops.maximum, np.minimum: ops.minimum, np.equal: ops.equal,
    np.not_equal: ops.not_equal, np.less: ops.less, np.less_equal: ops.less_equal,
    np.greater: ops.greater, np.greater_equal: ops.greater_equal,
    np.logical_and: ops.logical_and, np.logical_or: ops.logical_or, np.matmul: ops.matmul,
    np.bitwise_and: ops.bitwise_and, np.bitwise_or: ops.bitwise_or,
    np.bitwise_xor: ops.bitwise_xor, np.invert: ops.invert, np.left_shift: ops.left_shift,
    np.right_shift: ops.right_shift,
    np.positive: lambda x: x,
}
# numpy's other elementwise math (jitcore/math_ops.py)
UFUNCS.update({
    np.square: m.square, np.log1p: m.log1p, np.expm1: m.expm1, np.exp2: m.exp2,
    np.log2: m.log2, np.log10: m.log10, np.sign: m.sign, np.arctan: m.arctan,
    np.arcsin: m.arcsin, np.arccos: m.arccos, np.arctan2: m.arctan2, np.sinh: m.sinh,
    np.cosh: m.cosh, np.arcsinh: m.arcsinh, np.arccosh: m.arccosh, np.arctanh: m.arctanh,
    np.hypot: m.hypot, np.isnan: m.isnan, np.isinf: m.isinf, np.isfinite: m.isfinite,
    np.positive: m.positive, np.fmax: m.fmax, np.fmin: m.fmin, np.logaddexp: m.logaddexp,
    np.copysign: m.copysign, np.cbrt: m.cbrt, np.trunc: m.trunc, np.rint: m.rint,
    np.deg2rad: m.deg2rad, np.rad2deg: m.rad2deg, np.radians: m.deg2rad,
    np.degrees: m.rad2deg, np.signbit: m.signbit, np.conjugate: m.conj,
})
REDUCING_UFUNCS = {np.add: ops.sum, np.multiply: ops.prod, np.maximum: ops.max,
                   np.minimum: ops.min}

FUNCTIONS = {
    np.sum: ops.sum, np.prod: ops.prod, np.max: ops.max, np.min: ops.min, np.amax: ops.max,
    np.amin: ops.min, np.mean: ops.mean, np.argmax: ops.argmax, np.argmin: ops.argmin,
    np.reshape: ops.reshape, np.transpose: ops.transpose, np.broadcast_to: ops.broadcast_to,
    np.expand_dims: ops.expand_dims, np.squeeze: ops.squeeze, np.where: ops.where,
    np.matmul: ops.matmul, np.dot: ops.matmul,
}
FUNCTIONS.update({
    np.var: m.var, np.std: m.std, np.linalg.norm: m.norm, np.nan_to_num: m.nan_to_num,
    np.real: m.real, np.fix: m.trunc,
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

# indexing and joining (jitcore/join_ops.py)
FUNCTIONS.update({
    np.take: join_ops.take, np.concatenate: join_ops.concatenate, np.stack: join_ops.stack,
    np.split: join_ops.split, np.pad: join_ops.pad, np.clip: join_ops.clip,
    np.cumsum: join_ops.cumsum,
})


def apply_ufunc(ufunc, method, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TraceError(f"np.{ufunc.__name__}(..., out=) is not supported on traced tensors")
    extra = {k: v for k, v in kwargs.items() if k not in ("out",)}
    if method == "__call__" and ufunc in UFUNCS and not extra:
        return UFUNCS[ufunc](*inputs)
    if method == "reduce" and ufunc in REDUCING_UFUNCS:
        axis = extra.pop("axis", 0)
        keepdims = extra.pop("keepdims", False)
        if not extra:
            return REDUCING_UFUNCS[ufunc](inputs[0], axis, keepdims=keepdims)
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

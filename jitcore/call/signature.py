"""Call signatures: turning user arguments into arrays we can hand to native code.

`normalize(args)` makes every argument an aligned, native-byte-order ndarray of a supported
dtype whose strides are whole elements (copying only when one of these fails), and returns
its signature `(shape, dtype, strides in elements)`. `Spec` stands in for an array in the
inspection APIs (`f.graph(jc.spec((4, 8), jc.float32))`).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError, ShapeError
from jitcore.ir.shapes import as_shape, contiguous_strides

from . import foreign
from .foreign import is_foreign


@dataclass(frozen=True)
class Spec:
    """A placeholder for an array of this shape and dtype (C-contiguous unless strides given)."""
    shape: tuple
    dtype: dt.DType
    strides: tuple | None = None      # in elements


def spec(shape, dtype=dt.float32, strides=None) -> Spec:
    """An abstract argument for f.graph / f.kernels / f.llvm_ir / f.asm / f.explain."""
    shape = as_shape(shape)
    return Spec(shape, dt.as_dtype(dtype), tuple(strides) if strides else None)


_READY_DTYPES = frozenset(d.np for d in dt.ALL)     # supported, in native byte order


def to_array(x, position: int, name: str) -> np.ndarray:
    """An ndarray the kernels can read in place, converting (copying) only when needed.
    torch tensors, JAX arrays and other DLPack producers are viewed, never copied."""
    given = x
    if type(x) is not np.ndarray:
        if isinstance(x, np.ndarray):
            _refuse_subclass(x, position, name)
        if is_foreign(x):
            x = foreign.view(x, f"argument {position} ({name})")
        else:
            try:
                x = np.asarray(x)
            except Exception as e:
                raise DTypeError(f"argument {position} ({name}): cannot convert "
                                 f"{type(x).__name__} to an array: {e}"
                                 f"{_static_hint(name)}") from None
    if x.dtype not in _READY_DTYPES:          # (a set lookup: dtype.name is slow)
        x = _native_supported(x, given, position, name)
    if not x.flags.aligned or any(s % x.itemsize for s in x.strides):
        x = np.ascontiguousarray(x)
    return x


def _refuse_subclass(x: np.ndarray, position: int, name: str) -> None:
    """ndarray subclasses whose meaning np.asarray would drop: a masked array's mask, a
    matrix's `*` (a matrix product). Kernels compute on plain arrays, so these are refused."""
    ma = sys.modules.get("numpy.ma")                   # (no masked array without numpy.ma)
    if isinstance(x, np.matrix) or ma is not None and isinstance(x, ma.MaskedArray):
        raise DTypeError(f"argument {position} ({name}): {type(x).__module__}."
                         f"{type(x).__name__} is not supported (jitcore computes on plain "
                         f"arrays: a mask or matrix semantics would be lost); pass "
                         f"np.asarray(x), or x.filled(...) for a masked array")


def _native_supported(x: np.ndarray, given, position: int, name: str) -> np.ndarray:
    """x in native byte order (a copy if swapped), or DTypeError for an unsupported dtype
    (`given`: what the caller passed, for the message)."""
    if x.dtype.name == "bfloat16" and x.dtype.isnative:      # (ml_dtypes': numpy's kind V)
        return x
    if x.dtype.kind in "OUSVMmc" or x.dtype.fields is not None:
        what = f"dtype {x.dtype} is not supported; supported: {dt.SUPPORTED_NAMES}"
        if not isinstance(given, np.ndarray) and not is_foreign(given):
            what = (f"{type(given).__name__} {given!r:.60} is not an array or a Python "
                    f"scalar{_static_hint(name)}")
        raise DTypeError(f"argument {position} ({name}): {what}")
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    try:
        dt.as_dtype(x.dtype)
    except DTypeError:
        raise DTypeError(f"argument {position} ({name}): dtype {x.dtype} is not supported; "
                         f"supported: {dt.SUPPORTED_NAMES}") from None
    return x


def _static_hint(name: str) -> str:
    return ("; to pass it as a Python value baked into the trace, mark it static: "
            f"jc.jit(fn, static_argnames=({name!r},))")


def array_signature(x: np.ndarray) -> tuple:
    strides = tuple(s // x.itemsize for s in x.strides)
    if strides == contiguous_strides(x.shape) or x.size <= 1:
        strides = None               # the common case shares one compiled layout
    return x.shape, dt.as_dtype(x.dtype), strides


def signature_of(x, position: int, name: str) -> tuple:
    """(shape, DType, strides or None) for an array, array-like or Spec."""
    if isinstance(x, Spec):
        return x.shape, x.dtype, x.strides
    return array_signature(to_array(x, position, name))


def describe(sig) -> str:
    shape, dtype, strides = sig
    s = f"{dtype.name}{list(shape)}"
    return s + (f" strides={list(strides)}" if strides else "")


def check_out(out, expected: list) -> list:
    """Validate `out=` against the expected (shape, DType) of each output."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(expected):
        raise ShapeError(f"out= needs {len(expected)} array(s), got {len(outs)}")
    for i, (o, (shape, dtype)) in enumerate(zip(outs, expected)):
        if not isinstance(o, np.ndarray):
            raise DTypeError(f"out[{i}] must be a numpy array, got {type(o).__name__}")
        if o.shape != shape:
            raise ShapeError(f"out[{i}] has shape {o.shape}, expected {shape}")
        if o.dtype != dtype.np:
            raise DTypeError(f"out[{i}] has dtype {o.dtype}, expected {dtype.name}")
        if not o.flags.writeable:
            raise ValueError(f"out[{i}] is read-only")
    for i, o in enumerate(outs):
        for j in range(i):
            # numpy accepts ufunc(out=(a, a)) and keeps whichever store came last; here two
            # outputs written into the same memory would leave one of them wrong
            if o is outs[j] or np.shares_memory(o, outs[j]):
                raise ValueError(f"out[{j}] and out[{i}] share memory: each output needs "
                                 "an array of its own")
    return outs

"""The element types of the IR and numpy's promotion rules over them.

A `DType` is a small frozen value; the module-level constants are the only instances.
Promotion follows numpy 2 (NEP 50): arrays and numpy scalars are "strong", Python
scalars are "weak" and take the array's dtype when their kind allows it.

`bfloat16` is a storage dtype: numpy knows it through the optional package ml_dtypes
(JAX's), imported only when a bfloat16 is asked for, so jitcore imports without it. Its
promotions are ml_dtypes' (bf16 with bf16 -> bf16, with float32 -> float32, with int32 ->
float64, ...). The compiler computes it in float32 (passes/widen_bf16.py).
"""
from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass

import numpy as np

from .errors import DTypeError


@dataclass(frozen=True)
class DType:
    name: str
    short: str          # the spelling in the IR text form, e.g. "f32"
    kind: str           # "b" bool, "u" unsigned, "i" signed, "f" float
    bits: int

    @property
    def np(self) -> np.dtype:
        if self.name == "bfloat16":
            return bfloat16_np()
        return np.dtype(self.name)

    @property
    def itemsize(self) -> int:
        return max(self.bits // 8, 1)

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in "iu"

    def __repr__(self) -> str:
        return f"jc.{self.name}"


bool_ = DType("bool", "i1", "b", 8)
uint8 = DType("uint8", "u8", "u", 8)
int32 = DType("int32", "i32", "i", 32)
int64 = DType("int64", "i64", "i", 64)
float32 = DType("float32", "f32", "f", 32)
float64 = DType("float64", "f64", "f", 64)

# stored as 16 bits, computed as float32 (kind "f": it takes float ops; numpy says kind "V")
bfloat16 = DType("bfloat16", "bf16", "f", 16)

ALL = (bool_, uint8, int32, int64, float32, float64)     # the dtypes of numpy itself
STORAGE = (bfloat16,)                                    # computed in float32 (ml_dtypes)
_BY_NAME = {d.name: d for d in ALL + STORAGE}
_BY_SHORT = {d.short: d for d in ALL + STORAGE}
SUPPORTED_NAMES = ", ".join(d.name for d in ALL + STORAGE)


def bfloat16_np() -> np.dtype:
    """numpy's bfloat16 (ml_dtypes'; imported here, on first use: the import takes most of a
    second); DTypeError naming the package when it is missing."""
    try:
        import ml_dtypes
    except ImportError:
        raise DTypeError("bfloat16 needs the package ml_dtypes (pip install ml_dtypes), "
                         "which gives numpy its bfloat16 dtype") from None
    return np.dtype(ml_dtypes.bfloat16)


@functools.lru_cache(maxsize=None)
def available() -> tuple:
    """Every dtype usable in this process: ALL, and bfloat16 when ml_dtypes is installed
    (found, not imported)."""
    return ALL + STORAGE if importlib.util.find_spec("ml_dtypes") is not None else ALL


def as_dtype(x) -> DType:
    """Accept a DType, a numpy dtype/type, or a name; raise DTypeError for anything else."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_SHORT:
        return _BY_SHORT[x]
    if isinstance(x, str) and x in _BY_NAME:      # ("bfloat16": numpy does not know the name)
        return _BY_NAME[x]
    try:
        npd = np.dtype(x)
    except TypeError:
        raise DTypeError(f"not a dtype: {x!r}; supported: {SUPPORTED_NAMES}") from None
    d = _BY_NAME.get(npd.name)
    if d is None or not npd.isnative:
        raise DTypeError(f"dtype {npd} is not supported; supported: {SUPPORTED_NAMES}")
    return d


def promote(a: DType, b: DType) -> DType:
    """numpy's promotion of two strong dtypes (ml_dtypes' rules for bfloat16)."""
    r = np.promote_types(a.np, b.np)
    if r.name == "uint64":      # never arises from our six, kept for clarity
        raise DTypeError(f"no common dtype for {a.name} and {b.name}")
    return as_dtype(r)


def weak_scalar_dtype(value) -> DType:
    """The dtype a Python scalar would have on its own (bool, int64, float64)."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, int):
        return int64
    if isinstance(value, float):
        return float64
    raise DTypeError(f"unsupported Python scalar {value!r} of type {type(value).__name__}")


def promote_with_weak(strong: DType, value) -> DType:
    """Promotion of an array of dtype `strong` with a weak Python scalar (NEP 50)."""
    if isinstance(value, (bool, np.bool_)):
        return strong
    if isinstance(value, int):
        return strong if strong.kind != "b" else int64
    if isinstance(value, float):
        return strong if strong.is_float else float64
    raise DTypeError(f"unsupported Python scalar {value!r} of type {type(value).__name__}")


def float_result(d: DType) -> DType:
    """The dtype of a float-valued function (exp, sqrt, ...) of `d`.

    numpy gives float16 for bool/uint8 inputs; there is no float16 here, so those become float32.
    (bfloat16 stays bfloat16, as numpy with ml_dtypes gives.)
    """
    if d.is_float:
        return d
    return float32 if d.bits <= 8 else float64


def sum_result(d: DType) -> DType:
    """Accumulator dtype of sum/prod: ints widen to int64 (numpy widens uint8 to uint64; we use int64)."""
    return d if d.is_float else int64


def convert(values, dtype: DType) -> np.ndarray:
    """The IR's CAST applied to numpy values (for constant folding): numpy's astype, except
    float -> integer, which numpy leaves undefined out of range and jitcore defines as the
    kernels compute it: truncate toward zero, saturate at the target's bounds, NaN -> 0."""
    a = np.asarray(values)
    if a.dtype.name == "bfloat16":       # (numpy's kind "V"): exactly its float32 values
        a = a.astype(np.float32)
    if a.dtype.kind != "f" or not dtype.is_int:
        return a.astype(dtype.np)
    t = np.trunc(a.astype(np.float64))            # float32 -> float64 is exact
    t = np.where(np.isnan(t), 0.0, t)
    signed = dtype.kind == "i"
    above = t >= 2.0 ** (dtype.bits - signed)     # the bounds are powers of two: exact
    below = t < (-(2.0 ** (dtype.bits - 1)) if signed else 0.0)
    info = np.iinfo(dtype.np)
    inside = np.where(above | below, 0.0, t).astype(dtype.np)
    return np.where(above, info.max, np.where(below, info.min, inside)).astype(dtype.np)

"""numpy's other elementwise math and statistics (`jc.arctan2`, `jc.sign`, `jc.var`, ...):
the custom rows of the spelling table (jitcore/ops/spellings.py) that are not one IR op.

The ufuncs that are one kernel of the vector math (arctan, cbrt, expm1, log1p, log2, log10,
exp2, sinh, cosh: `jitcore/llvm/vecmath.py`) are generated in `jitcore.ops.core` from their
rows. The functions here are decompositions into them and the other ops of `jitcore.ops.core`,
chosen for accuracy rather than brevity:
arcsinh/arccosh/arctanh go through log1p where the naive formulas cancel, hypot scales.
Each evaluates one transcendental per element (the branches select its argument, not its
result), in the input's precision (float32 in float32 vectors), except hypot and logaddexp,
whose float32 inputs are computed in float64 and rounded once. The ulp bounds tested
against a long double reference (tests/test_tracing_numpy.py) are in `ULP_BOUNDS`.

Like every op, each runs eagerly (jitted once per signature) on plain arrays.
"""
from __future__ import annotations

import math

import numpy as np

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError, ShapeError, TraceError
from jitcore.ir.shapes import normalize_axes

from . import core
from .core import op
from .spellings import implements
from .tracer import Tracer, node_of, wrap

# max error in ulp against a long double reference, (float32, float64), measured over wide
# ranges with edge values (random bit patterns, dense sweeps, 0, +-inf, NaN, subnormals,
# huge) by tests/test_tracing_numpy.py, and once by denser scans (float32: every 64th bit
# pattern; 1M-point sweeps of the hard regions). Most are computed in the input's own
# precision from the vector math's kernels; hypot and logaddexp compute float32 in float64
# and round once (float32 logaddexp would cancel near 0). The reference is long double, not
# numpy's float64: numpy's own results are libm's on hosts without AVX-512 (glibc's cbrt is
# off by up to 3 ulp there, sinh by 2).
ULP_BOUNDS = {
    "log1p": (0.81, 0.8), "expm1": (1.0, 1.05), "exp2": (0.8, 0.76), "log2": (1.05, 1.0),
    "log10": (1.0, 1.0), "cbrt": (0.75, 0.75), "arctan": (0.85, 0.76),
    "arcsin": (2.4, 2.1), "arccos": (2.1, 2.1), "arctan2": (1.85, 1.6),
    "sinh": (1.6, 1.6), "cosh": (1.4, 1.4), "arcsinh": (1.8, 1.6),
    "arccosh": (2.45, 2.55), "arctanh": (1.7, 1.5), "hypot": (0.51, 1.85),
    # numpy's own product x * (pi/180), bit for bit in float64
    "deg2rad": (0.75, 0), "rad2deg": (0.75, 0),
    # float64 logaddexp is numpy's formula, max(x, y) + log1p(exp(-|x - y|)), which cancels
    # where the result is near 0: its bound is in ulp of max(|x|, |y|, |result|)
    "logaddexp": (0.51, 1),
}

_LN2 = math.log(2.0)


def _node(x) -> "Tracer":
    return x if isinstance(x, Tracer) else wrap(node_of(x))


def _float_tensor(x) -> Tracer:
    """x as a float tensor (numpy's float result dtype for ints; float32 for uint8/bool)."""
    t = _node(x)
    return wrap(build.cast(t.node, dt.float_result(t.node.dtype)))


def _in_float(fn, wide: bool):
    """Run a float decomposition in numpy's result dtype (the operands' promotion, Python
    scalars weak, made float), or, with `wide`, in float64 with float32 results rounded
    once (for the cheap ones whose float32 form would lose accuracy)."""
    def apply(*xs):
        nodes = core.float_operands(*xs, float_of=dt.float_result) if len(xs) > 1 \
            else [node_of(xs[0])]
        common = nodes[0].dtype
        for n in nodes[1:]:
            common = dt.promote(common, n.dtype)
        result = dt.float_result(common)
        work = [wrap(build.cast(n, dt.float64 if wide else result)) for n in nodes]
        return core.astype(fn(*work), result)
    apply.__name__ = fn.__name__
    return apply


def _c(value, like: Tracer) -> Tracer:
    """A scalar constant of like's dtype."""
    return wrap(build.const(value, like.node.dtype))


def _where(cond, x, y):
    return core.where(cond, x, y)


# the vector math's kernels and the sign copy, as jitcore.ops.core records them
_copysign, _atan, _log1p = core.copysign, core.arctan, core.log1p


# ---- decompositions (in the input's float dtype, or float64: see _in_float) -----------------

# Each decomposition below evaluates one transcendental per element: the branches pick the
# argument of a single log1p/atan instead of computing every branch's function and
# selecting the result (vectors run all branches).

_BIG = 2.0 ** 28                # asinh/acosh: past this, log(2|x|) (the 1/x terms are gone)


def _arcsinh(x):
    """log1p of one argument per element: |x| < 2: a + a^2/(1 + sqrt(1 + a^2)) (no
    cancellation); below 2^28: 2a + 1/(sqrt(a^2 + 1) + a) - 1 (exact subtraction);
    beyond: a - 1, plus ln 2. One sqrt, one division and one log1p."""
    a = core.abs(x)
    a2 = a * a
    q = core.sqrt(1.0 + a2)
    small = a < 2.0
    d = _where(small, a2, _c(1.0, a)) / _where(small, 1.0 + q, q + a)
    s = _where(small, a + d, _where(a < _BIG, (2.0 * a + d) - 1.0, a - 1.0))
    r = _log1p(s) + _where(a < _BIG, _c(0.0, a), _c(_LN2, a))
    return _copysign(r, x)


def _arccosh(x):
    """log1p of one argument per element: x < 2: t + sqrt(2t + t^2) with t = x - 1; below
    2^28: 2x - 1/(x + sqrt(x^2 - 1)) - 1; beyond: x - 1, plus ln 2. NaN below 1."""
    t = x - 1.0
    q = core.sqrt(t * (t + 2.0))                     # sqrt(x^2 - 1) without cancellation
    mid = (2.0 * x - 1.0 / (x + q)) - 1.0
    s = _where(x < 2.0, t + q, _where(x < _BIG, mid, t))
    r = _log1p(s) + _where(x < _BIG, _c(0.0, x), _c(_LN2, x))
    return _where(x < 1.0, _c(math.nan, x), r)


def _arctanh(x):
    """0.5 * log1p(2a/(1 - a)), with 2a + a*(2a/(1 - a)) below 0.5 (the same value, summed
    so that the small term comes last). One division and one log1p."""
    a = core.abs(x)
    d = (2.0 * a) / (1.0 - a)
    s = _where(a < 0.5, 2.0 * a + a * d, d)
    return _copysign(0.5 * _log1p(s), x)


def _arcsin(x):
    a = core.abs(x)
    return _copysign(_atan(a / core.sqrt((1.0 - a) * (1.0 + a))), x)


def _arccos(x):
    return 2.0 * _atan(core.sqrt((1.0 - x) / (1.0 + x)))


def _signbit(x: Tracer) -> Tracer:
    return _copysign(_c(1.0, x), x) < 0.0


def _arctan2(y, x):
    ax, ay = core.abs(x), core.abs(y)
    lo, hi = core.minimum(ax, ay), core.maximum(ax, ay)
    t = lo / hi
    t = _where(hi == 0.0, _c(0.0, t), _where(lo == math.inf, _c(1.0, t), t))
    r = _atan(t)
    r = _where(ay > ax, (math.pi / 2) - r, r)
    r = _where(_signbit(x), math.pi - r, r)
    return _copysign(r, y)


def _hypot(x, y):
    ax, ay = core.abs(x), core.abs(y)
    lo, hi = core.minimum(ax, ay), core.maximum(ax, ay)
    r = lo / hi
    h = hi * core.sqrt(1.0 + r * r)
    h = _where(hi == 0.0, hi, h)
    return _where((ax == math.inf) | (ay == math.inf), _c(math.inf, h), h)


def _logaddexp(x, y):
    m = core.maximum(x, y)
    r = m + _log1p(core.exp(-core.abs(x - y)))
    return _where(x == y, x + _LN2, r)             # equal infinities: x - y is NaN


# ---- the public ops ------------------------------------------------------------------------

def _float_op(name: str, fn, wide: bool = False):
    """The jc function of the row `name`: fn run in numpy's float result dtype."""
    wrapped = _in_float(fn, wide)

    def f(*xs):
        return wrapped(*xs)
    f.__qualname__ = name
    return implements(name)(op(f))


arcsinh = _float_op("arcsinh", _arcsinh)
arccosh = _float_op("arccosh", _arccosh)
arctanh = _float_op("arctanh", _arctanh)
arcsin = _float_op("arcsin", _arcsin)
arccos = _float_op("arccos", _arccos)
arctan2 = _float_op("arctan2", _arctan2)
hypot = _float_op("hypot", _hypot, wide=True)
# float32 logaddexp in float64: m + log1p(...) cancels where the result is near 0
logaddexp = _float_op("logaddexp", _logaddexp, wide=True)


@implements("deg2rad")
@op
def deg2rad(x):
    t = _float_tensor(x)
    return t * (math.pi / 180.0)


@implements("rad2deg")
@op
def rad2deg(x):
    t = _float_tensor(x)
    return t * (180.0 / math.pi)


def _numeric(x, name: str) -> Tracer:
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError(f"{name}: not defined for bool (numpy has no bool loop)")
    return t


@implements("square")
@op
def square(x):
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError("square: numpy squares bools as int8, which jitcore does not have; "
                         "use x.astype(jc.int32) first")
    return t * t


@implements("sign")
@op
def sign(x):
    t = _numeric(x, "sign")
    one, zero = _c(1, t), _c(0, t)
    if t.node.dtype.kind == "u":
        return _where(t > zero, one, zero)
    r = _where(t > zero, one, _where(t < zero, _c(-1, t), zero))
    return _where(t == t, r, t) if t.node.dtype.is_float else r


@implements("signbit")
@op
def signbit(x):
    t = _node(x)
    if t.node.dtype.is_float:
        return _signbit(t)
    return t < _c(0, t) if t.node.dtype.kind == "i" else t != t


@implements("isnan")
@op
def isnan(x):
    t = _node(x)
    return t != t


@implements("isinf")
@op
def isinf(x):
    t = _node(x)
    return core.abs(t) == math.inf if t.node.dtype.is_float else t != t


@implements("isfinite")
@op
def isfinite(x):
    t = _node(x)
    return core.abs(t) < math.inf if t.node.dtype.is_float else t == t


def _fminmax(name, pick):
    def f(x, y):
        a, c = core._tensors(x, y)
        a, c = wrap(a), wrap(c)
        common = dt.promote(a.node.dtype, c.node.dtype)
        a, c = core.astype(a, common), core.astype(c, common)
        m = pick(a, c)
        if not common.is_float:
            return m
        return _where(c != c, a, _where(a != a, c, m))
    f.__qualname__ = name
    return implements(name)(op(f))


fmax = _fminmax("fmax", core.maximum)
fmin = _fminmax("fmin", core.minimum)


@implements("trunc")
@op
def trunc(x):
    t = _node(x)
    if not t.node.dtype.is_float:
        return t
    return _copysign(core.floor(core.abs(t)), t)


@implements("rint")
@op
def rint(x):
    t = _float_tensor(x)                     # numpy: rint of integers is a float
    if not _node(x).node.dtype.is_float:
        return t
    big = 2.0 ** (52 if t.node.dtype == dt.float64 else 23)
    a = core.abs(t)
    # adding 2**mant pushes the fraction out with the FPU's round-half-even
    r = _where(a < big, (a + big) - big, a)
    return _copysign(r, t)


@implements("positive")
@op
def positive(x):
    return _numeric(x, "positive")


@implements("conj")
@op
def conj(x):
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError("conj: numpy conjugates bools as int8, which jitcore does not have")
    return t


@implements("real")
@op
def real(x):
    return _node(x)


@implements("nan_to_num")
@op
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    t = _node(x)
    if not t.node.dtype.is_float:
        return t
    info = np.finfo(t.node.dtype.np)
    hi = float(info.max) if posinf is None else posinf
    lo = float(info.min) if neginf is None else neginf
    r = _where(t == math.inf, hi, _where(t == -math.inf, lo, t))
    return _where(t != t, nan, r)


# ---- statistics ------------------------------------------------------------------------------

def _count(shape: tuple, axes: tuple) -> int:
    return math.prod(shape[a] for a in axes)


@implements("var")
@op
def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    if out is not None:
        raise TraceError("var: out= is not supported")
    t = _node(x)
    want = dt.as_dtype(dtype) if dtype is not None else \
        (t.node.dtype if t.node.dtype.is_float else dt.float64)
    t = core.astype(t, want)
    axes = normalize_axes(axis, t.node.ndim, "var")
    n = _count(t.node.shape, axes)
    d = t - core.mean(t, axes, keepdims=True)
    s = core.sum(d * d, axes, keepdims=keepdims)
    return s / float(max(n - ddof, 0))


@implements("std")
@op
def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    return core.sqrt(var(x, axis, dtype, out, ddof, keepdims))


@op
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 (numpy's name)
    """numpy.linalg.norm: vector norms over one axis (ord None/2, 1, inf, -inf, 0, any p),
    the Frobenius norm (ord None/'fro') and the 1/inf matrix norms over two axes."""
    t = _node(x)
    if not t.node.dtype.is_float:
        t = core.astype(t, dt.float64)                # numpy: integers in float64
    nd = t.node.ndim
    if axis is None:
        if ord is None or (ord == "fro" and nd == 2):
            r = core.sqrt(core.sum(t * t))
            return core.reshape(r, (1,) * nd) if keepdims else r
        axes = tuple(range(nd))
    else:
        axes = normalize_axes(axis, nd, "norm") if isinstance(axis, (tuple, list)) else \
            normalize_axes((axis,), nd, "norm")
    if len(axes) == 1:
        return _vector_norm(t, ord, axes, keepdims)
    if len(axes) == 2:
        return _matrix_norm(t, ord, axes, keepdims)
    raise ShapeError(f"norm: improper number of axes {len(axes)} (1 or 2)")


def _vector_norm(t, ord, axes, keepdims):  # noqa: A002
    a = core.abs(t)
    if ord is None or ord == 2:
        return core.sqrt(core.sum(t * t, axes, keepdims=keepdims))
    if ord == math.inf:
        return core.max(a, axes, keepdims=keepdims)
    if ord == -math.inf:
        return core.min(a, axes, keepdims=keepdims)
    if ord == 0:
        return core.sum(core.astype(t != 0.0, t.node.dtype), axes, keepdims=keepdims)
    if ord == 1:
        return core.sum(a, axes, keepdims=keepdims)
    if isinstance(ord, str):
        raise ShapeError(f"norm: ord {ord!r} is a matrix norm; a vector norm takes a number")
    p = float(ord)
    return core.pow(core.sum(core.pow(a, p), axes, keepdims=keepdims), 1.0 / p)


def _matrix_norm(t, ord, axes, keepdims):  # noqa: A002
    r_ax, c_ax = axes
    a = core.abs(t)
    if ord is None or ord == "fro":
        return core.sqrt(core.sum(t * t, axes, keepdims=keepdims))
    if ord in (1, -1):                 # max/min over columns of the column sums
        s = core.sum(a, (r_ax,), keepdims=True)
        pick = core.max if ord == 1 else core.min
    elif ord in (math.inf, -math.inf):
        s = core.sum(a, (c_ax,), keepdims=True)
        pick = core.max if ord == math.inf else core.min
    else:
        raise TraceError(f"norm: the matrix norm ord={ord!r} needs singular values, which "
                         "jitcore does not compute; supported: None, 'fro', 1, -1, inf, -inf")
    r = pick(s, axes, keepdims=True)
    if keepdims:
        return r
    return core.reshape(r, tuple(d for i, d in enumerate(t.node.shape) if i not in axes))

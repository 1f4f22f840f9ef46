"""numpy's other elementwise math and statistics (`jc.log1p`, `jc.arctan2`, `jc.var`, ...).

Each is a decomposition into the primitives of `jitcore.ops` (and two IR primitives of its
own: ATAN, from the vector math, and COPYSIGN), chosen for accuracy rather than brevity:
log1p and expm1 use Kahan's compensations, sinh/arcsinh/arctanh go through them where the
naive formulas cancel, hypot scales, cbrt takes a Newton step after pow. float32 inputs of
the transcendental ones are computed in float64 and rounded once (at most ~0.5 ulp beyond
the float64 error, which is tiny at float32's precision). The ulp bounds tested against
numpy (tests/test_tracing_numpy.py) are in `ULP_BOUNDS`.

Like every op, each runs eagerly (jitted once per signature) on plain arrays.
"""
from __future__ import annotations

import math

import numpy as np

from jitcore.ir import build as b
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError, ShapeError, TraceError
from jitcore.ir.ops import Op
from jitcore.ir.shapes import normalize_axes

from . import ops
from .ops import op
from .tracer import Tracer, node_of, wrap

# max error in ulp against numpy's float64 result, (float32, float64), measured over wide
# ranges with edge values (random bit patterns, dense sweeps, 0, +-inf, NaN, subnormals,
# huge) by tests/test_tracing_numpy.py. float32 is computed in float64 and rounded once;
# float64 is compared with numpy's own float64 result (itself within ~1 ulp), so the
# bounds there are whole ulps.
ULP_BOUNDS = {
    "log1p": (0.51, 2), "expm1": (0.51, 2), "exp2": (0.51, 1), "log2": (0.51, 2),
    "log10": (0.51, 3), "arctan": (0.51, 1), "arcsin": (0.51, 2), "arccos": (0.51, 2),
    "arctan2": (0.51, 2), "sinh": (0.51, 2), "cosh": (0.51, 1), "arcsinh": (0.51, 2),
    "arccosh": (0.51, 3), "arctanh": (0.51, 3), "hypot": (0.51, 2), "cbrt": (0.51, 1),
    "deg2rad": (0.75, 0), "rad2deg": (0.75, 0),
    # float64 logaddexp is numpy's formula, max(x, y) + log1p(exp(-|x - y|)), which cancels
    # where the result is near 0: its bound is in ulp of max(|x|, |y|, |result|)
    "logaddexp": (0.51, 2),
}

_LN2 = math.log(2.0)


def _node(x) -> "Tracer":
    return x if isinstance(x, Tracer) else wrap(node_of(x))


def _float_tensor(x) -> Tracer:
    """x as a float tensor (numpy's float result dtype for ints; float32 for uint8/bool)."""
    t = _node(x)
    return wrap(b.cast(t.node, dt.float_result(t.node.dtype)))


def _in_double(fn):
    """Run a float decomposition in float64 and round float32 results once. The result
    dtype is numpy's: the operands' promotion (Python scalars weak), made float."""
    def apply(*xs):
        nodes = ops.float_operands(*xs, float_of=dt.float_result) if len(xs) > 1 \
            else [node_of(xs[0])]
        common = nodes[0].dtype
        for n in nodes[1:]:
            common = dt.promote(common, n.dtype)
        wide = [wrap(b.cast(n, dt.float64)) for n in nodes]
        return ops.astype(fn(*wide), dt.float_result(common))
    apply.__name__ = fn.__name__
    return apply


def _c(value, like: Tracer) -> Tracer:
    """A scalar constant of like's dtype."""
    return wrap(b.const(value, like.node.dtype))


def _where(cond, x, y):
    return ops.where(cond, x, y)


def _copysign(mag: Tracer, sign: Tracer) -> Tracer:
    return wrap(b.elementwise(Op.COPYSIGN, mag.node, sign.node))


def _atan(x: Tracer) -> Tracer:
    return wrap(b.elementwise(Op.ATAN, x.node))


# ---- decompositions on float64 tensors -------------------------------------------------------

def _log1p(x):
    u = x + 1.0
    # log(u) * x / (u - 1) cancels the rounding of 1 + x (Goldberg/Kahan)
    r = _where(u == 1.0, x, ops.log(u) * (x / (u - 1.0)))
    return _where(x == math.inf, x, r)


def _expm1(x):
    u = ops.exp(x)
    um1 = u - 1.0
    # (u - 1) * x / log(u): the errors of u cancel (Kahan)
    r = _where(u == 1.0, x, _where(um1 == -1.0, _c(-1.0, x), um1 * (x / ops.log(u))))
    return _where(u == math.inf, u, r)


def _sinh(x):
    a = ops.abs(x)
    e = _expm1(a)
    small = 0.5 * (e + e / (e + 1.0))
    h = ops.exp(0.5 * a)
    big = (0.5 * h) * h                     # exp(a) / 2 past exp's overflow
    return _copysign(_where(a < 709.0, small, big), x)


def _cosh(x):
    a = ops.abs(x)
    e = ops.exp(a)
    h = ops.exp(0.5 * a)
    return _where(a < 709.0, 0.5 * (e + 1.0 / e), (0.5 * h) * h)


def _arcsinh(x):
    a = ops.abs(x)
    a2 = a * a
    small = _log1p(a + a2 / (1.0 + ops.sqrt(1.0 + a2)))
    mid = ops.log(2.0 * a + 1.0 / (ops.sqrt(a2 + 1.0) + a))
    big = ops.log(a) + _LN2
    r = _where(a < 2.0, small, _where(a < 2.0 ** 28, mid, big))
    return _copysign(r, x)


def _arccosh(x):
    t = x - 1.0
    small = _log1p(t + ops.sqrt(2.0 * t + t * t))
    mid = ops.log(2.0 * x - 1.0 / (x + ops.sqrt(x * x - 1.0)))
    big = ops.log(x) + _LN2
    r = _where(x < 2.0, small, _where(x < 2.0 ** 28, mid, big))
    return _where(x < 1.0, _c(math.nan, x), r)


def _arctanh(x):
    a = ops.abs(x)
    small = 0.5 * _log1p(2.0 * a + 2.0 * a * a / (1.0 - a))
    big = 0.5 * _log1p(2.0 * a / (1.0 - a))
    return _copysign(_where(a < 0.5, small, big), x)


def _arcsin(x):
    a = ops.abs(x)
    return _copysign(_atan(a / ops.sqrt((1.0 - a) * (1.0 + a))), x)


def _arccos(x):
    return 2.0 * _atan(ops.sqrt((1.0 - x) / (1.0 + x)))


def _signbit(x: Tracer) -> Tracer:
    return _copysign(_c(1.0, x), x) < 0.0


def _arctan2(y, x):
    ax, ay = ops.abs(x), ops.abs(y)
    lo, hi = ops.minimum(ax, ay), ops.maximum(ax, ay)
    t = lo / hi
    t = _where(hi == 0.0, _c(0.0, t), _where(lo == math.inf, _c(1.0, t), t))
    r = _atan(t)
    r = _where(ay > ax, (math.pi / 2) - r, r)
    r = _where(_signbit(x), math.pi - r, r)
    return _copysign(r, y)


def _hypot(x, y):
    ax, ay = ops.abs(x), ops.abs(y)
    lo, hi = ops.minimum(ax, ay), ops.maximum(ax, ay)
    r = lo / hi
    h = hi * ops.sqrt(1.0 + r * r)
    h = _where(hi == 0.0, hi, h)
    return _where((ax == math.inf) | (ay == math.inf), _c(math.inf, h), h)


def _logaddexp(x, y):
    m = ops.maximum(x, y)
    r = m + _log1p(ops.exp(-ops.abs(x - y)))
    return _where(x == y, x + _LN2, r)             # equal infinities: x - y is NaN


def _cbrt(x):
    a = ops.abs(x)
    y = ops.pow(a, 1.0 / 3.0)
    y = y - (y - a / (y * y)) / 3.0                  # one Newton step: pow(a, 1/3) is inexact
    y = _where((a == 0.0) | (a == math.inf), a, y)
    return _copysign(y, x)


def _log2(x):
    return ops.log(x) * (1.0 / _LN2)


def _log10(x):
    return ops.log(x) * (1.0 / math.log(10.0))


# ---- the public ops ------------------------------------------------------------------------

def _float_op(name: str, fn, doc: str):
    wrapped = _in_double(fn)

    def f(*xs):
        return wrapped(*xs)
    f.__name__, f.__doc__ = name, doc
    return op(f)


log1p = _float_op("log1p", _log1p, "log(1 + x), accurate for small x.")
expm1 = _float_op("expm1", _expm1, "exp(x) - 1, accurate for small x.")
log2 = _float_op("log2", _log2, "Base-2 logarithm.")
log10 = _float_op("log10", _log10, "Base-10 logarithm.")
sinh = _float_op("sinh", _sinh, "Hyperbolic sine.")
cosh = _float_op("cosh", _cosh, "Hyperbolic cosine.")
arcsinh = _float_op("arcsinh", _arcsinh, "Inverse hyperbolic sine.")
arccosh = _float_op("arccosh", _arccosh, "Inverse hyperbolic cosine (NaN below 1).")
arctanh = _float_op("arctanh", _arctanh, "Inverse hyperbolic tangent (+-inf at +-1).")
arcsin = _float_op("arcsin", _arcsin, "Inverse sine (NaN outside [-1, 1]).")
arccos = _float_op("arccos", _arccos, "Inverse cosine (NaN outside [-1, 1]).")
arctan2 = _float_op("arctan2", _arctan2, "atan(y / x) in the quadrant of (x, y), numpy's "
                    "signed zeros and infinities.")
hypot = _float_op("hypot", _hypot, "sqrt(x**2 + y**2) without overflow; inf if either is.")
logaddexp = _float_op("logaddexp", _logaddexp, "log(exp(x) + exp(y)) without overflow.")
cbrt = _float_op("cbrt", _cbrt, "Cube root (negative for negative x).")


@op
def arctan(x):
    """Inverse tangent (vector math: fdlibm's reduction and polynomial)."""
    return _atan(_float_tensor(x))


@op
def exp2(x):
    """2**x (float32: the correctly rounded-in-double float32 pow; float64: libm pow)."""
    t = _float_tensor(x)
    return ops.pow(_c(2.0, t), t)


@op
def copysign(x, y):
    """|x| with the sign bit of y (of -0.0 and NaN too)."""
    a, s = _float_tensor(x), _float_tensor(y)
    common = dt.promote(a.node.dtype, s.node.dtype)
    return _copysign(ops.astype(a, common), ops.astype(s, common))


@op
def deg2rad(x):
    """Degrees to radians: x * (pi / 180), as numpy computes it."""
    t = _float_tensor(x)
    return t * (math.pi / 180.0)


@op
def rad2deg(x):
    """Radians to degrees: x * (180 / pi), as numpy computes it."""
    t = _float_tensor(x)
    return t * (180.0 / math.pi)


def _numeric(x, name: str) -> Tracer:
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError(f"{name}: not defined for bool (numpy has no bool loop)")
    return t


@op
def square(x):
    """x * x (integers wrap as numpy)."""
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError("square: numpy squares bools as int8, which jitcore does not have; "
                         "use x.astype(jc.int32) first")
    return t * t


@op
def sign(x):
    """-1, 0 or 1 by the sign of x (NaN stays NaN; -0.0 gives 0.0)."""
    t = _numeric(x, "sign")
    one, zero = _c(1, t), _c(0, t)
    if t.node.dtype.kind == "u":
        return _where(t > zero, one, zero)
    r = _where(t > zero, one, _where(t < zero, _c(-1, t), zero))
    return _where(t == t, r, t) if t.node.dtype.is_float else r


@op
def signbit(x):
    """True where the sign bit is set (-0.0 and -nan included)."""
    t = _node(x)
    if t.node.dtype.is_float:
        return _signbit(t)
    return t < _c(0, t) if t.node.dtype.kind == "i" else t != t


@op
def isnan(x):
    """True where x is NaN (never for integers)."""
    t = _node(x)
    return t != t


@op
def isinf(x):
    """True where x is +-inf."""
    t = _node(x)
    return ops.abs(t) == math.inf if t.node.dtype.is_float else t != t


@op
def isfinite(x):
    """True where x is neither NaN nor +-inf."""
    t = _node(x)
    return ops.abs(t) < math.inf if t.node.dtype.is_float else t == t


def _fminmax(name, pick):
    def f(x, y):
        a, c = ops._tensors(x, y)
        a, c = wrap(a), wrap(c)
        common = dt.promote(a.node.dtype, c.node.dtype)
        a, c = ops.astype(a, common), ops.astype(c, common)
        m = pick(a, c)
        if not common.is_float:
            return m
        return _where(c != c, a, _where(a != a, c, m))
    f.__name__ = name
    f.__doc__ = f"Elementwise {name[1:]}imum that ignores NaN (NaN only if both are)."
    return op(f)


fmax = _fminmax("fmax", ops.maximum)
fmin = _fminmax("fmin", ops.minimum)


@op
def trunc(x):
    """Round toward zero (integers unchanged)."""
    t = _node(x)
    if not t.node.dtype.is_float:
        return t
    return _copysign(ops.floor(ops.abs(t)), t)


@op
def rint(x):
    """Round to the nearest integer, halves to even (numpy.rint)."""
    t = _float_tensor(x)                     # numpy: rint of integers is a float
    if not _node(x).node.dtype.is_float:
        return t
    big = 2.0 ** (52 if t.node.dtype == dt.float64 else 23)
    a = ops.abs(t)
    # adding 2**mant pushes the fraction out with the FPU's round-half-even
    r = _where(a < big, (a + big) - big, a)
    return _copysign(r, t)


@op
def positive(x):
    """+x."""
    return _numeric(x, "positive")


@op
def conj(x):
    """The complex conjugate: x itself for real dtypes (not bool: numpy gives int8)."""
    t = _node(x)
    if t.node.dtype == dt.bool_:
        raise DTypeError("conj: numpy conjugates bools as int8, which jitcore does not have")
    return t


@op
def real(x):
    """The real part: x itself for real dtypes."""
    return _node(x)


@op
def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default: the dtype's max), -inf -> neginf (its min)."""
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


@op
def var(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """Variance over axis (None: all), divided by n - ddof (numpy.var)."""
    if out is not None:
        raise TraceError("var: out= is not supported")
    t = _node(x)
    want = dt.as_dtype(dtype) if dtype is not None else \
        (t.node.dtype if t.node.dtype.is_float else dt.float64)
    t = ops.astype(t, want)
    axes = normalize_axes(axis, t.node.ndim, "var")
    n = _count(t.node.shape, axes)
    d = t - ops.mean(t, axes, keepdims=True)
    s = ops.sum(d * d, axes, keepdims=keepdims)
    return s / float(max(n - ddof, 0))


@op
def std(x, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
    """Standard deviation: sqrt(var(...)) (numpy.std)."""
    return ops.sqrt(var(x, axis, dtype, out, ddof, keepdims))


@op
def norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002 (numpy's name)
    """numpy.linalg.norm: vector norms over one axis (ord None/2, 1, inf, -inf, 0, any p),
    the Frobenius norm (ord None/'fro') and the 1/inf matrix norms over two axes."""
    t = _node(x)
    if not t.node.dtype.is_float:
        t = ops.astype(t, dt.float64)                # numpy: integers in float64
    nd = t.node.ndim
    if axis is None:
        if ord is None or (ord == "fro" and nd == 2):
            r = ops.sqrt(ops.sum(t * t))
            return ops.reshape(r, (1,) * nd) if keepdims else r
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
    a = ops.abs(t)
    if ord is None or ord == 2:
        return ops.sqrt(ops.sum(t * t, axes, keepdims=keepdims))
    if ord == math.inf:
        return ops.max(a, axes, keepdims=keepdims)
    if ord == -math.inf:
        return ops.min(a, axes, keepdims=keepdims)
    if ord == 0:
        return ops.sum(ops.astype(t != 0.0, t.node.dtype), axes, keepdims=keepdims)
    if ord == 1:
        return ops.sum(a, axes, keepdims=keepdims)
    if isinstance(ord, str):
        raise ShapeError(f"norm: ord {ord!r} is a matrix norm; a vector norm takes a number")
    p = float(ord)
    return ops.pow(ops.sum(ops.pow(a, p), axes, keepdims=keepdims), 1.0 / p)


def _matrix_norm(t, ord, axes, keepdims):  # noqa: A002
    r_ax, c_ax = axes
    a = ops.abs(t)
    if ord is None or ord == "fro":
        return ops.sqrt(ops.sum(t * t, axes, keepdims=keepdims))
    if ord in (1, -1):                 # max/min over columns of the column sums
        s = ops.sum(a, (r_ax,), keepdims=True)
        pick = ops.max if ord == 1 else ops.min
    elif ord in (math.inf, -math.inf):
        s = ops.sum(a, (c_ax,), keepdims=True)
        pick = ops.max if ord == math.inf else ops.min
    else:
        raise TraceError(f"norm: the matrix norm ord={ord!r} needs singular values, which "
                         "jitcore does not compute; supported: None, 'fro', 1, -1, inf, -inf")
    r = pick(s, axes, keepdims=True)
    if keepdims:
        return r
    return ops.reshape(r, tuple(d for i, d in enumerate(t.node.shape) if i not in axes))

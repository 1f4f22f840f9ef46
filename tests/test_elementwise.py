"""Elementwise ops: every unary and binary op x every dtype it applies to x sizes with vector
tails, through `jc.<op>`, numpy ufuncs on tracers and Python operators; dtype promotion (strong
and weak), NaN/Inf propagation, and astype between all dtype pairs."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import jitcore as jc
from helpers import (ALL_DTYPES, BOOL, F32, F64, FLOAT_DTYPES, I32, I64, NARROW_WIDTHS,
                     NUMERIC_DTYPES, SIZES, U8, WIDTHS, assert_close, assert_same, dtype_id, erf64, f64,
                     float_result, lanes, make, rng_for, target)

# Every compile costs ~20-30 ms (one kernel per size): float dtypes run all SIZES, the other
# dtypes a scalar-only size and one with a vector body plus a tail.
INT_SIZES = [7, 1023]


def sizes_for(dtype):
    return SIZES if np.dtype(dtype).kind == "f" else INT_SIZES

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _clip(lo, hi):
    return lambda x: np.clip(x, lo, hi)


# ---- unary ops -------------------------------------------------------------------------------
# name -> (jitcore function, numpy ufunc or None, reference on float64 values (or exact ints),
#          result kind, dtypes, float domain (low, high) or None,
#          integer domain (low, high) or None)
# result kind: "numpy" (numpy's own result dtype for the ufunc), "float" (float_result), "same".

def _gelu_ref(x):
    return 0.5 * x * (1.0 + erf64(x / math.sqrt(2.0)))


def _gelu_tanh_ref(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def _sigmoid_ref(x):
    return 1.0 / (1.0 + np.exp(-x))


UNARY = {
    "exp": (jc.exp, np.exp, np.exp, "numpy", ALL_DTYPES, (-30, 30), (-20, 20)),
    "log": (jc.log, np.log, np.log, "numpy", ALL_DTYPES, (1e-3, 1e3), (1, 1000)),
    "sqrt": (jc.sqrt, np.sqrt, np.sqrt, "numpy", ALL_DTYPES, (0.0, 1e3), (0, 1000)),
    "rsqrt": (jc.rsqrt, None, lambda x: 1.0 / np.sqrt(x), "float", ALL_DTYPES, (1e-3, 1e3),
              (1, 1000)),
    "abs": (jc.abs, np.abs, np.abs, "numpy", ALL_DTYPES, None, None),
    "neg": (jc.neg, np.negative, np.negative, "numpy", NUMERIC_DTYPES, None, None),
    "tanh": (jc.tanh, np.tanh, np.tanh, "numpy", ALL_DTYPES, (-10, 10), (-10, 10)),
    "sigmoid": (jc.sigmoid, None, _sigmoid_ref, "float", ALL_DTYPES, (-30, 30), (-30, 30)),
    "relu": (jc.relu, None, lambda x: np.maximum(x, 0), "same", NUMERIC_DTYPES, None, None),
    "gelu": (jc.gelu, None, _gelu_ref, "float", ALL_DTYPES, None, (-10, 10)),
    "gelu_tanh": (functools.partial(jc.gelu, approximate="tanh"), None, _gelu_tanh_ref, "float",
                  ALL_DTYPES, None, (-10, 10)),
    "erf": (jc.erf, None, erf64, "float", ALL_DTYPES, None, (-5, 5)),
    "sin": (jc.sin, np.sin, np.sin, "numpy", ALL_DTYPES, (-10, 10), (-10, 10)),
    "cos": (jc.cos, np.cos, np.cos, "numpy", ALL_DTYPES, (-10, 10), (-10, 10)),
    "floor": (jc.floor, np.floor, np.floor, "numpy", ALL_DTYPES, (-50, 50), None),
    "ceil": (jc.ceil, np.ceil, np.ceil, "numpy", ALL_DTYPES, (-50, 50), None),
    "reciprocal": (jc.reciprocal, np.reciprocal, np.reciprocal, "numpy", FLOAT_DTYPES,
                   "nonzero", None),
    "logical_not": (jc.logical_not, np.logical_not, np.logical_not, "numpy", ALL_DTYPES, None,
                    None),
    "silu": (jc.silu, None, lambda x: x * _sigmoid_ref(x), "float", ALL_DTYPES, None, (-10, 10)),
    # hardtanh / leaky_relu of integers: float results, as hardswish (float bounds and slope)
    "hardtanh": (jc.hardtanh, None, _clip(-1, 1), "float", NUMERIC_DTYPES, None, (-5, 5)),
    "hardtanh_custom": (functools.partial(jc.hardtanh, min_val=-2.5, max_val=0.5), None,
                        _clip(-2.5, 0.5), "same", FLOAT_DTYPES, None, None),
    "hardswish": (jc.hardswish, None, lambda x: x * np.clip(x + 3, 0, 6) / 6, "float",
                  ALL_DTYPES, (-8, 8), (-8, 8)),
    "hardsigmoid": (jc.hardsigmoid, None, lambda x: np.clip(x + 3, 0, 6) / 6, "float",
                    ALL_DTYPES, (-8, 8), (-8, 8)),
    "leaky_relu": (jc.leaky_relu, None, lambda x: np.where(x > 0, x, 0.01 * x), "float",
                   NUMERIC_DTYPES, None, (-100, 100)),
    "leaky_relu_0.2": (functools.partial(jc.leaky_relu, negative_slope=0.2), None,
                       lambda x: np.where(x > 0, x, 0.2 * x), "same", FLOAT_DTYPES, None, None),
    "relu6": (jc.relu6, None, _clip(0, 6), "same", NUMERIC_DTYPES, (-10, 10), (-10, 10)),
}


# Ops whose result cancels terms larger than itself: gelu(x) = 0.5x + 0.5x*erf(x/sqrt2) for
# x < 0 (likewise the tanh form). Their rounding errors are relative to |x|, not to the result.
UNARY_SCALE = {"gelu": np.abs, "gelu_tanh": np.abs}


def unary_input(name, dtype, size):
    _, _, _, _, _, fdom, idom = UNARY[name]
    rng = rng_for("unary", name, dtype_id(dtype), size)
    d = np.dtype(dtype)
    if d.kind == "f":
        if name == "logical_not":
            x = make(size, d, rng=rng)
            x[::4] = 0
            return x
        if fdom == "nonzero":
            return make(size, d, rng=rng, nonzero=True)
        if fdom is None:
            return make(size, d, rng=rng)
        return make(size, d, rng=rng, low=fdom[0], high=fdom[1])
    if d == BOOL or idom is None:
        x = make(size, d, rng=rng)
        if name == "logical_not" and d != BOOL:
            x[::4] = 0
        return x
    lo, hi = idom
    if d == U8:
        lo, hi = max(lo, 0), min(hi, 255)
    return make(size, d, rng=rng, low=lo, high=hi)


def unary_expected(name, x):
    """(reference values, numpy's result dtype) for op `name` on x."""
    _, ufunc, ref, kind, _, _, _ = UNARY[name]
    with np.errstate(all="ignore"):
        if kind == "numpy":
            dtype = ufunc(x[:1]).dtype
        elif kind == "float":
            dtype = float_result(x.dtype)
        else:
            dtype = x.dtype
        if np.dtype(dtype).kind == "f":
            values = ref(f64(x))
        else:
            values = ref(x)          # exact integer / bool semantics (incl. wrap-around)
    return values, dtype


@functools.lru_cache(maxsize=None)
def unary_fn(name, path, width=None):
    """One jitted function per op, path and vector width (None: the default), shared by all
    dtypes and sizes."""
    op = UNARY[name][0] if path == "jc" else UNARY[name][1]

    def fn(x):
        return op(x)
    return jc.jit(fn, vector_width=width)


def _unary_cases(path):
    for name, (_, ufunc, _, _, dtypes, _, _) in UNARY.items():
        if path == "ufunc" and ufunc is None:
            continue
        for d in dtypes:
            for n in sizes_for(d):
                yield pytest.param(name, d, n, id=f"{name}-{dtype_id(d)}-n{n}")


@pytest.mark.parametrize("name, dtype, size", list(_unary_cases("jc")))
def test_unary(name, dtype, size):
    x = unary_input(name, dtype, size)
    ref, want = unary_expected(name, x)
    got = unary_fn(name, "jc")(x)
    scale = UNARY_SCALE[name](f64(x)) if name in UNARY_SCALE else None
    assert_close(got, ref, want, scale=scale, msg=f"jc.{name}({dtype_id(dtype)}[{size}])")


# The narrower vector widths (an AVX-512 host also runs its AVX2 and SSE/NEON code): every op
# on float32, float64 and int32, at a size with a vector body and a tail at every width.
NARROW_SIZE = 1023


def _narrow_cases(table, dtypes_of):
    for width in NARROW_WIDTHS:
        for name, entry in table.items():
            for d in (F32, F64, I32):
                if d in dtypes_of(entry):
                    yield pytest.param(name, d, width, id=f"{name}-{dtype_id(d)}-w{width}")


@pytest.mark.parametrize("name, dtype, width", list(_narrow_cases(UNARY, lambda e: e[4])))
def test_unary_narrow_widths(name, dtype, width):
    x = unary_input(name, dtype, NARROW_SIZE)
    ref, want = unary_expected(name, x)
    f = unary_fn(name, "jc", width)
    got = f(x)
    scale = UNARY_SCALE[name](f64(x)) if name in UNARY_SCALE else None
    assert_close(got, ref, want, scale=scale, msg=f"jc.{name} at {width} bits")
    assert all(k.vector_width == min(width, target()["vector_bits"]) for k in f.kernels(x))


@pytest.mark.parametrize("name, dtype, size", list(_unary_cases("ufunc")))
def test_unary_numpy_ufunc_on_tracer(name, dtype, size):
    x = unary_input(name, dtype, size)
    ref, want = unary_expected(name, x)
    got = unary_fn(name, "ufunc")(x)
    assert_close(got, ref, want, msg=f"np.{UNARY[name][1].__name__}(tracer {dtype_id(dtype)})")
    # np.<ufunc>(tracer) records the same graph as jc.<op>(tracer)
    assert unary_fn(name, "ufunc").graph(x) == unary_fn(name, "jc").graph(x)


@pytest.mark.parametrize("name", ["abs", "logical_not", "exp"])
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_unary_eager(name, dtype):
    """The ops run eagerly on plain arrays too (jitted per signature)."""
    if dtype not in UNARY[name][4]:
        pytest.skip(f"{name} is not defined for {dtype_id(dtype)}")
    x = unary_input(name, dtype, 33)
    ref, want = unary_expected(name, x)
    assert_close(UNARY[name][0](x), ref, want)


@pytest.mark.parametrize("dtype", [F32, F64, U8], ids=dtype_id)
def test_large_arrays(dtype):
    """Big enough to be split across threads: every element written, none twice."""
    n = 1_000_003
    rng = rng_for("large-ew", dtype_id(dtype))
    a, b = make(n, dtype, rng=rng), make((7, 1), dtype, rng=rng)
    x = make((7, n // 7 + 1), dtype, rng=rng)
    f = jc.jit(lambda a, x, b: (a * 2 + 1, x - b))
    r1, r2 = f(a, x, b)
    if dtype.kind == "f":
        assert_close(r1, f64(a) * 2 + 1, dtype)
        assert_close(r2, f64(x) - f64(b), dtype)
    else:
        assert_close(r1, a * 2 + 1, dtype)
        assert_close(r2, x - b, dtype)


def test_unary_operators_on_tracers():
    @jc.jit
    def f(x, m):
        return -x, abs(x), +x, ~m

    x = make(37, F32, rng=rng_for("ops"))
    m = make(37, BOOL, rng=rng_for("ops-m"))
    neg, ab, pos, inv = f(x, m)
    assert_close(neg, -f64(x), F32, exact=True)
    assert_close(ab, np.abs(f64(x)), F32, exact=True)
    assert_close(pos, f64(x), F32, exact=True)
    assert_close(inv, ~m, BOOL)


@pytest.mark.parametrize("fn", [jc.neg, np.negative], ids=["jc.neg", "np.negative"])
def test_neg_of_bool_is_a_type_error(fn):
    """numpy refuses `-bool_array`; so does jitcore (DTypeError is a TypeError)."""
    jitted = jc.jit(lambda x: fn(x))
    with pytest.raises(TypeError):
        jitted(np.array([True, False]))


# ---- binary ops -----------------------------------------------------------------------------
# name -> (jc function, numpy ufunc, operator or None, dtypes)

BINARY = {
    "add": (jc.add, np.add, lambda a, b: a + b, ALL_DTYPES),
    "sub": (jc.sub, np.subtract, lambda a, b: a - b, NUMERIC_DTYPES),
    "mul": (jc.mul, np.multiply, lambda a, b: a * b, ALL_DTYPES),
    "div": (jc.div, np.true_divide, lambda a, b: a / b, ALL_DTYPES),
    "pow": (jc.pow, np.power, lambda a, b: a ** b, NUMERIC_DTYPES),
    "maximum": (jc.maximum, np.maximum, None, ALL_DTYPES),
    "minimum": (jc.minimum, np.minimum, None, ALL_DTYPES),
    "equal": (jc.equal, np.equal, lambda a, b: a == b, ALL_DTYPES),
    "not_equal": (jc.not_equal, np.not_equal, lambda a, b: a != b, ALL_DTYPES),
    "less": (jc.less, np.less, lambda a, b: a < b, ALL_DTYPES),
    "less_equal": (jc.less_equal, np.less_equal, lambda a, b: a <= b, ALL_DTYPES),
    "greater": (jc.greater, np.greater, lambda a, b: a > b, ALL_DTYPES),
    "greater_equal": (jc.greater_equal, np.greater_equal, lambda a, b: a >= b, ALL_DTYPES),
    "logical_and": (jc.logical_and, np.logical_and, None, ALL_DTYPES),
    "logical_or": (jc.logical_or, np.logical_or, None, ALL_DTYPES),
}
PATHS = {"jc": 0, "ufunc": 1, "operator": 2}


def binary_inputs(name, dtype, size):
    rng = rng_for("binary", name, dtype_id(dtype), size)
    d = np.dtype(dtype)
    if name == "pow":
        if d.kind == "f":
            a = make(size, d, rng=rng, low=0.1, high=5.0)
            b = make(size, d, rng=rng, low=-3.0, high=3.0)
            # negative bases with integral exponents are defined too
            a[::5] = -a[::5]
            b[::5] = np.round(b[::5])
        else:
            a = make(size, d, rng=rng, low=0 if d == U8 else -6, high=6)
            b = make(size, d, rng=rng, low=0, high=4)
        return a, b
    a = make(size, d, rng=rng)
    b = make(size, d, rng=rng)
    if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
                "maximum", "minimum"):
        b[::3] = a[::3]                    # ties
    if name in ("logical_and", "logical_or") and d != BOOL:
        a[::4] = 0
        b[1::3] = 0
    return a, b


def binary_expected(name, a, b):
    ufunc = BINARY[name][1]
    with np.errstate(all="ignore"):
        dtype = ufunc(a[:1], b[:1]).dtype
        if dtype.kind == "f":
            values = ufunc(f64(a), f64(b))
        else:
            values = ufunc(a, b)
    return values, dtype


@functools.lru_cache(maxsize=None)
def binary_fn(name, path, width=None):
    op = BINARY[name][PATHS[path]]

    def fn(a, b):
        return op(a, b)
    return jc.jit(fn, vector_width=width)


def _binary_cases(paths):
    for name, (_, _, operator, dtypes) in BINARY.items():
        for path in paths:
            if path == "operator" and operator is None:
                continue
            for d in dtypes:
                for n in sizes_for(d):
                    yield pytest.param(name, path, d, n, id=f"{name}-{path}-{dtype_id(d)}-n{n}")


@pytest.mark.parametrize("name, path, dtype, size", list(_binary_cases(["jc", "ufunc",
                                                                            "operator"])))
def test_binary(name, path, dtype, size):
    a, b = binary_inputs(name, dtype, size)
    ref, want = binary_expected(name, a, b)
    got = binary_fn(name, path)(a, b)
    assert_close(got, ref, want, msg=f"{name} via {path} on {dtype_id(dtype)}[{size}]")


@pytest.mark.parametrize("name, dtype, width", list(_narrow_cases(BINARY, lambda e: e[3])))
def test_binary_narrow_widths(name, dtype, width):
    a, b = binary_inputs(name, dtype, NARROW_SIZE)
    ref, want = binary_expected(name, a, b)
    f = binary_fn(name, "jc", width)
    assert_close(f(a, b), ref, want, msg=f"{name} at {width} bits on {dtype_id(dtype)}")
    # a level copy's target may be narrower than the width asked for: jc.jit caps it there
    assert all(k.vector_width == min(width, target()["vector_bits"]) for k in f.kernels(a, b))


def test_sub_of_bools_is_a_type_error():
    f = jc.jit(lambda a, b: a - b)
    with pytest.raises(TypeError):
        f(np.array([True]), np.array([False]))


def test_pow_of_bools_matches_numpy_or_raises_dtype_error():
    """numpy gives int8 for bool ** bool; jitcore has no int8: a DTypeError is acceptable,
    anything else (an internal LLVM error) is not."""
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    f = jc.jit(lambda a, b: a ** b)
    try:
        got = f(a, b)
    except jc.DTypeError:
        return
    assert_close(got, np.power(a, b), None)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("size", SIZES, ids=lambda n: f"n{n}")
def test_where(dtype, size):
    rng = rng_for("where", dtype_id(dtype), size)
    c = make(size, BOOL, rng=rng)
    x, y = make(size, dtype, rng=rng), make(size, dtype, rng=rng)
    for fn in (where_fn("jc"), where_fn("np")):
        assert_close(fn(c, x, y), np.where(c, x, y), dtype, exact=True)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_where_all_dtypes(dtype):
    rng = rng_for("where-all", dtype_id(dtype))
    c = make(1023, BOOL, rng=rng)
    x, y = make(1023, dtype, rng=rng), make(1023, dtype, rng=rng)
    assert_close(where_fn("jc")(c, x, y), np.where(c, x, y), dtype, exact=True)


@functools.lru_cache(maxsize=None)
def where_fn(path):
    w = jc.where if path == "jc" else np.where

    def fn(c, x, y):
        return w(c, x, y)
    return jc.jit(fn)


def test_where_with_scalars_and_non_bool_condition():
    x = make((5, 7), F32, rng=rng_for("where-s"))
    i = make((5, 7), I32, rng=rng_for("where-i"), low=-2, high=2)
    f = jc.jit(lambda x: jc.where(x > 0, x, 0.0))
    assert_close(f(x), np.where(x > 0, x, np.float32(0)), F32, exact=True)
    g = jc.jit(lambda c, x: jc.where(c, x, -x))        # int condition: nonzero is true
    assert_close(g(i, x), np.where(i, x, -x), F32, exact=True)
    h = jc.jit(lambda x: jc.where(x > 0, 1, 0))          # two Python ints: int64 as numpy
    assert_close(h(x), np.where(x > 0, 1, 0), np.where(x > 0, 1, 0).dtype)


# ---- promotion ----------------------------------------------------------------------------

MIXED_OPS = {"add": (np.add, lambda a, b: a + b), "sub": (np.subtract, lambda a, b: a - b),
             "div": (np.true_divide, lambda a, b: a / b),
             "maximum": (np.maximum, np.maximum), "less": (np.less, lambda a, b: a < b),
             "where": (None, None)}


def _mixed_cases():
    """add over all ordered pairs of distinct dtypes; the other ops over unordered pairs."""
    for i, da in enumerate(ALL_DTYPES):
        for j, db in enumerate(ALL_DTYPES):
            if da == db:
                continue
            for op in MIXED_OPS:
                if op != "add" and j < i:
                    continue
                yield pytest.param(da, db, op, id=f"{op}-{dtype_id(da)}-{dtype_id(db)}")


@functools.lru_cache(maxsize=None)
def mixed_fn(op):
    if op == "where":
        return jc.jit(lambda a, b: jc.where(a > b, a, b))
    f = MIXED_OPS[op][1]
    return jc.jit(lambda a, b: f(a, b))


@pytest.mark.parametrize("da, db, op", list(_mixed_cases()))
def test_mixed_dtype_promotion(da, db, op):
    rng = rng_for("mixed", dtype_id(da), dtype_id(db), op)
    a, b = (make(37, d, rng=rng, **({"low": 0, "high": 100} if d.kind == "u" else {}))
            for d in (da, db))
    with np.errstate(all="ignore"):
        if op == "where":
            expect = np.where(a > b, a, b)
            values = np.where(a > b, f64(a), f64(b)) if expect.dtype.kind == "f" else expect
        else:
            expect = MIXED_OPS[op][0](a, b)
            values = MIXED_OPS[op][0](f64(a), f64(b)) if expect.dtype.kind == "f" else expect
    got = mixed_fn(op)(a, b)
    assert_close(got, values, expect.dtype)


# (description, function of the tracer, input dtype)
WEAK_CASES = [
    ("f32*0.5", lambda x: x * 0.5, F32),
    ("f32+1", lambda x: x + 1, F32),
    ("f32+True", lambda x: x + True, F32),
    ("1.5**f32", lambda x: 1.5 ** x, F32),
    ("f32>0.5", lambda x: x > 0.5, F32),
    ("f64-2", lambda x: x - 2, F64),
    ("i32*0.5", lambda x: x * 0.5, I32),
    ("i32+1", lambda x: x + 1, I32),
    ("i32+True", lambda x: x + True, I32),
    ("i32**2", lambda x: x ** 2, I32),
    ("i32**3", lambda x: x ** 3, I32),
    ("i32>0.5", lambda x: x > 0.5, I32),
    ("i64/2", lambda x: x / 2, I64),
    ("u8+1", lambda x: x + 1, U8),
    ("u8-1", lambda x: x - 1, U8),
    ("2-u8", lambda x: 2 - x, U8),
    ("u8*0.5", lambda x: x * 0.5, U8),
    ("u8*3", lambda x: x * 3, U8),
    ("u8<300", lambda x: x < 300, U8),
    ("u8==-1", lambda x: x == -1, U8),
    ("bool+1", lambda x: x + 1, BOOL),
    ("bool*0.5", lambda x: x * 0.5, BOOL),
    ("bool&True", lambda x: np.logical_and(x, True), BOOL),
    ("maximum(f32,0)", lambda x: np.maximum(x, 0), F32),
    ("maximum(i32,0.5)", lambda x: np.maximum(x, 0.5), I32),
    ("f32+np.float64", lambda x: x + np.float64(0.5), F32),      # numpy scalars are strong
    ("f32+0d_f64", lambda x: x + np.array(0.5), F32),            # so are 0-d arrays
    ("i32+np.int64", lambda x: x + np.int64(3), I32),
    ("u8+np.int32", lambda x: x + np.int32(3), U8),
]


@pytest.mark.parametrize("desc, fn, dtype", WEAK_CASES, ids=[c[0] for c in WEAK_CASES])
def test_python_scalar_promotion(desc, fn, dtype):
    rng = rng_for("weak", desc)
    x = make(19, dtype, rng=rng, low=None if dtype.kind != "u" else 0,
             high=None if dtype.kind != "u" else 255)
    if dtype.kind == "u":
        x[:3] = [0, 1, 255]
    with np.errstate(all="ignore"):
        expect = fn(x)
        values = fn(f64(x)) if expect.dtype.kind == "f" and dtype.kind == "f" else expect
    got = jc.jit(fn)(x)
    assert_close(got, values, expect.dtype, msg=desc)


def test_out_of_range_python_int_for_uint8_is_rejected_like_numpy():
    """numpy 2 raises OverflowError for uint8_array + 300."""
    x = np.arange(5, dtype=np.uint8)
    with pytest.raises((OverflowError, jc.JitcoreError)):
        jc.jit(lambda x: x + 300)(x)


# ---- NaN / Inf -----------------------------------------------------------------------------

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -0.5]


def _special_pairs(dtype):
    s = np.array(SPECIALS, dtype)
    return np.repeat(s, len(s)), np.tile(s, len(s))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "pow", "maximum", "minimum",
                                  "equal", "not_equal", "less", "less_equal", "greater",
                                  "greater_equal", "logical_and", "logical_or"])
def test_binary_nan_inf(name, dtype):
    a, b = _special_pairs(dtype)
    ref, want = binary_expected(name, a, b)
    got = binary_fn(name, "jc")(a, b)
    assert_close(got, ref, want, msg=f"{name} on {list(zip(a.tolist(), b.tolist()))}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("size", [7, 1023], ids=lambda n: f"n{n}")
def test_maximum_minimum_propagate_nan_in_vector_body(dtype, size):
    rng = rng_for("nanmax", dtype_id(dtype), size)
    a, b = make(size, dtype, rng=rng), make(size, dtype, rng=rng)
    a[::5] = np.nan
    b[::7] = np.nan
    for name in ("maximum", "minimum"):
        ref, want = binary_expected(name, a, b)
        assert_close(binary_fn(name, "jc")(a, b), ref, want, exact=True, msg=name)


UNARY_SPECIAL_INPUTS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 88.0, 89.0, 100.0,
                        -100.0, -110.0, 1e-30, -1e-30]
UNARY_SPECIAL_OPS = ["exp", "log", "sqrt", "rsqrt", "abs", "neg", "tanh", "sigmoid", "relu",
                     "erf", "sin", "cos", "floor", "ceil", "reciprocal", "logical_not",
                     "hardtanh", "relu6", "leaky_relu"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name", UNARY_SPECIAL_OPS)
def test_unary_nan_inf(name, dtype):
    x = np.array(UNARY_SPECIAL_INPUTS, dtype)
    if name == "rsqrt":
        x = x[~((x == 0) & np.signbit(x))]      # the sign of rsqrt(-0.0) is not asserted
    ref, want = unary_expected(name, x)
    got = unary_fn(name, "jc")(x)
    assert_close(got, ref, want, msg=f"{name}({x.tolist()})")


@pytest.mark.parametrize("name", ["sin", "cos"])
@pytest.mark.parametrize("dtype, low, high", [
    (F32, 1e4, 1e6), (F32, 1e6, 1e8), (F32, 1e8, 3e38),
    (F64, 1e6, 1e15), (F64, 1e15, 1e20), (F64, 1e20, 1e300)],
    ids=["f32-1e4..1e6", "f32-1e6..1e8", "f32-1e8..max", "f64-1e6..1e15", "f64-1e15..1e20",
         "f64-1e20..1e300"])
def test_sin_cos_of_large_arguments(name, dtype, low, high):
    """numpy reduces any finite argument exactly (the input is an exact binary number)."""
    rng = rng_for("sincos-large", name, dtype_id(dtype), low)
    x = np.exp(rng.uniform(np.log(low), np.log(high), 1023)).astype(dtype)
    x[::2] *= -1
    ref = getattr(np, name)(f64(x))
    got = unary_fn(name, "jc")(x)
    assert_close(got, ref, dtype, msg=f"{name} of |x| in [{low:g}, {high:g}]")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("name, at_pos_inf, at_neg_inf", [
    ("gelu", np.inf, None), ("gelu_tanh", np.inf, None), ("silu", np.inf, None),
    ("hardswish", np.inf, None), ("sigmoid", 1.0, 0.0), ("hardsigmoid", 1.0, 0.0),
    ("erf", 1.0, -1.0), ("tanh", 1.0, -1.0)])
def test_composite_activations_at_infinity(name, at_pos_inf, at_neg_inf, dtype):
    """Limits at +-inf and NaN propagation. At -inf, x * (something -> 0) may be 0 (the limit)
    or NaN (inf * 0, as torch's formulas give): both are accepted (None)."""
    x = np.array([np.inf, -np.inf, np.nan], dtype)
    got = unary_fn(name, "jc")(x)
    assert got.dtype == dtype
    assert got[0] == at_pos_inf, f"{name}(+inf) = {got[0]}, expected {at_pos_inf}"
    if at_neg_inf is None:
        assert got[1] == 0 or np.isnan(got[1]), f"{name}(-inf) = {got[1]}, expected 0 or nan"
    else:
        assert got[1] == at_neg_inf, f"{name}(-inf) = {got[1]}, expected {at_neg_inf}"
    assert np.isnan(got[2]), f"{name}(nan) = {got[2]}, expected nan"


# ---- astype ----------------------------------------------------------------------------------

def astype_source(src, dst, size=67):
    rng = rng_for("astype", dtype_id(src), dtype_id(dst))
    s, d = np.dtype(src), np.dtype(dst)
    if s.kind == "f":
        if d == BOOL:
            x = make(size, s, rng=rng)
            x[:5] = [0.0, -0.0, np.nan, np.inf, -np.inf]
            return x
        if d.kind in "iu":
            # in-range values, where numpy is the reference (edges: tests/test_casts.py)
            lo, hi = {U8: (0.0, 255.9), I32: (-2.0e9, 2.0e9), I64: (-1e18, 1e18)}[d]
            x = make(size, s, rng=rng, low=lo, high=hi)
            x[:6] = np.array([0.0, -0.0, 0.5, 0.99, -0.99 if d != U8 else 1.5, 255.0 if d == U8
                              else -7.5], s)
            return x
        x = make(size, s, rng=rng) * s.type(1e3)
        x[:4] = [np.nan, np.inf, -np.inf, -0.0]
        if s == F64 and d == F32:
            x[4:8] = [1e300, -1e300, 1e-300, 3.4028235677973366e38]   # overflow, underflow
        return x
    if s == BOOL:
        return make(size, s, rng=rng)
    lo, hi = {U8: (0, 255), I32: (-2**31, 2**31 - 1), I64: (-2**63, 2**63 - 1)}[s]
    x = make(size, s, rng=rng, low=lo, high=hi)
    x[:4] = np.array([0, 1, lo, hi], dtype=s)
    return x


@functools.lru_cache(maxsize=None)
def astype_fn(dst, path):
    if path == "method":
        return jc.jit(lambda x: x.astype(dst))
    return jc.jit(lambda x: jc.astype(x, dst))


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=lambda d: f"to_{dtype_id(d)}")
@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: f"from_{dtype_id(d)}")
def test_astype(src, dst):
    x = astype_source(src, dst)
    with np.errstate(all="ignore"):
        ref = x.astype(dst)
    for path in ("method", "jc"):
        got = astype_fn(dst, path)(x)
        assert_close(got, ref, dst, exact=True, msg=f"{dtype_id(src)}->{dtype_id(dst)} ({path})")


NARROWING = [(F64, U8), (I64, U8), (I64, I32), (F64, I32), (I32, U8), (F32, U8)]


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("src, dst", NARROWING, ids=lambda d: dtype_id(d))
def test_narrowing_casts_write_nothing_past_the_end(src, dst, width):
    """A vector tail of one element stored to a narrower integer: the x86 backend turned
    trunc + masked store into a store of a whole wide element, 3-7 bytes past the end of the
    output (heap corruption; caught by JITCORE_VECTOR_WIDTH=128 runs aborting in malloc).
    Sizes with a one-element tail at 2..32 lanes, written into a guarded buffer."""
    f = jc.jit(lambda x: x.astype(dst), vector_width=width)
    for n in (3, 5, 9, 17, 33):
        x = make(n, src, rng=rng_for("narrow", dtype_id(src), n), low=0, high=100)
        guard = 64
        buf = np.full(n * dst.itemsize + 2 * guard, 0xAB, np.uint8)
        out = buf[guard:guard + n * dst.itemsize].view(dst)
        assert f(x, out=out) is out
        assert_same(out, x.astype(dst))
        assert (buf[:guard] == 0xAB).all() and (buf[guard + n * dst.itemsize:] == 0xAB).all(), \
            f"n={n}: bytes written outside the output"


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_every_tail_length(dtype, width):
    """Two vectors and a tail of every length 0..lanes-1 (the target's lanes for the dtype at
    each width): the tail (scalar code without masked tails, one masked vector with them)
    writes every element and nothing past the output's end. A scalar tail that stopped one
    element early passed a suite that only AVX-512 hosts ran."""
    op = (lambda x, y: x | y) if dtype == BOOL else (lambda x, y: x + y)
    f = jc.jit(op, vector_width=width)
    guard = 64
    for n in range(2 * lanes(dtype, width), 3 * lanes(dtype, width)):
        rng = rng_for("tails", dtype_id(dtype), width, n)
        x, y = make(n, dtype, rng=rng), make(n, dtype, rng=rng)
        buf = np.full(n * dtype.itemsize + 2 * guard, 0xAB, np.uint8)
        out = buf[guard:guard + n * dtype.itemsize].view(dtype)
        assert f(x, y, out=out) is out
        assert_same(out, op(x, y), msg=f"n={n}")
        assert (buf[:guard] == 0xAB).all() and (buf[guard + n * dtype.itemsize:] == 0xAB).all(), \
            f"n={n}: bytes written outside the output"


@pytest.mark.parametrize("dst", ALL_DTYPES, ids=lambda d: f"to_{dtype_id(d)}")
def test_astype_with_jc_dtype_constants_and_eagerly(dst):
    x = astype_source(F64, dst, size=1023)
    with np.errstate(all="ignore"):
        ref = x.astype(dst)
    jcd = {F32: jc.float32, F64: jc.float64, I32: jc.int32, I64: jc.int64, U8: jc.uint8,
           BOOL: jc.bool}[dst]
    assert_close(jc.jit(lambda x: x.astype(jcd))(x), ref, dst, exact=True)
    assert_close(jc.astype(x, jcd), ref, dst, exact=True)


# ---- floor division and remainder: numpy's results, no trap on zero or INT_MIN // -1 ------

@pytest.mark.parametrize("dtype", [I32, I64, U8], ids=dtype_id)
def test_integer_floor_divide_and_remainder_match_numpy_exactly(dtype):
    rng = rng_for("divmod", dtype.name)
    info = np.iinfo(dtype)
    low = -9 if info.min < 0 else 0
    a = np.concatenate([rng.integers(info.min, info.max, 3000, dtype=dtype, endpoint=True),
                        np.array([info.min, info.max, 0, 7, 7, 0, info.min], dtype)])
    b = np.concatenate([rng.integers(low, 9, 3000, dtype=dtype, endpoint=True),
                        np.array([-1 if low else 1, 0, 0, 0, 3, 5, info.max], dtype)])
    q, r = jc.jit(lambda a, b: (a // b, a % b))(a, b)
    with np.errstate(all="ignore"):
        assert_same(q, a // b)
        assert_same(r, a % b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_float_floor_divide_and_remainder_match_numpy(dtype):
    rng = rng_for("fdivmod", dtype.name)
    special = [0., -0., 1., -1., np.inf, -np.inf, np.nan, 5., -5., 7.5, 1e-30, 3.0]
    a = np.concatenate([(rng.standard_normal(3000) * 10).astype(dtype),
                        np.repeat(np.array(special, dtype), len(special))])
    b = np.concatenate([(rng.standard_normal(3000) * 3).astype(dtype),
                        np.tile(np.array(special, dtype), len(special))])
    q, r = jc.jit(lambda a, b: (jc.floor_divide(a, b), jc.remainder(a, b)))(a, b)
    with np.errstate(all="ignore"):
        want_q, want_r = np.floor_divide(a, b), np.remainder(a, b)
    for got, want in ((q, want_q), (r, want_r)):
        assert_same(got, want, exact=True)               # dtype, NaN-aware, exact
        finite = ~np.isnan(want)
        assert (np.signbit(got[finite]) == np.signbit(want[finite])).all()


def test_floor_divide_operators_and_numpy_functions_trace():
    x = np.arange(-6, 6, dtype=np.int64)
    f = jc.jit(lambda x: (x // 4, 7 // (x + 10), x % 3, np.floor_divide(x, 5), np.mod(x, 5)))
    for got, want in zip(f(x), (x // 4, 7 // (x + 10), x % 3, x // 5, x % 5)):
        np.testing.assert_array_equal(got, want)

"""Reductions (sum prod max min mean argmax argmin) over every axis, several axes, None, negative
axes, keepdims, all dtypes; NaN handling; empty reductions; softmax / log_softmax / layer_norm;
matmul with K-scaled tolerances."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest

import jitcore as jc
from helpers import (BOOL, EPS, F32, F64, FLOAT_DTYPES, I32, I64, NARROW_WIDTHS, TOL, U8,
                     assert_close, assert_same, dtype_id, f64, layer_norm_ref, log_softmax_ref,
                     make, reduction_tol, rng_for, softmax_ref)

OPS = ["sum", "prod", "max", "min", "mean", "argmax", "argmin"]
ARG_OPS = {"argmax", "argmin"}

# (shape, layout): "T" means the input is the transpose of a C-contiguous array
FLOAT_SHAPES = [((1,), "C"), ((7,), "C"), ((1023,), "C"), ((4097,), "C"), ((33, 65), "C"),
                ((33, 65), "T"), ((4, 5, 6), "C"), ((4, 5, 6), "T")]
F64_SHAPES = [(s, layout) for s, layout in FLOAT_SHAPES if layout == "C"]
INT_SHAPES = [((7,), "C"), ((1023,), "C"), ((4097,), "C"), ((33, 65), "C")]
AXES = {
    1: [None, 0, -1],
    2: [None, 0, 1, -1, (0, 1), (-1, -2)],
    3: [None, 0, 1, 2, -1, (0, 1), (0, 2), (1, 2), (-1, 0), (0, 1, 2)],
}


def _axis_id(axis):
    if axis is None:
        return "all"
    return "ax" + ("_".join(map(str, axis)) if isinstance(axis, tuple) else str(axis))


def _shape_id(shape, layout):
    return "x".join(map(str, shape)) + ("T" if layout == "T" else "")


def reduction_inputs(shape, layout, dtype):
    """(x, p): x for every reduction, p (values near +-1) for prod."""
    rng = rng_for("reduce", shape, layout, dtype_id(dtype))
    d = np.dtype(dtype)
    store = tuple(reversed(shape)) if layout == "T" else shape
    x = make(store, d, rng=rng)
    if d.kind == "f":
        p = make(store, d, rng=rng, low=0.9, high=1.1) * np.where(rng.random(store) < 0.5, -1, 1)
        p = p.astype(d)
    elif d == BOOL:
        p = rng.random(store) < 0.97
    else:
        p = np.where(rng.random(store) < 0.5, -1, 1) if d.kind == "i" else np.ones(store)
        flat = p.reshape(-1)
        flat[rng.integers(0, flat.size, min(5, flat.size))] = 2
        p = p.astype(d)
    if layout == "T":
        x, p = x.T, p.T
    return x, p


def numpy_reduce(op, x, axis, keepdims):
    """(values, numpy's result dtype) for the reduction."""
    fn = getattr(np, op)
    kw = {} if op in ARG_OPS and not keepdims else {"keepdims": keepdims}
    with np.errstate(all="ignore"):
        want = fn(x, axis=axis, **kw).dtype
        if op in ("sum", "mean", "prod") and x.dtype.kind == "f":
            values = fn(f64(x), axis=axis, **kw)
        elif op == "mean":
            values = fn(x, axis=axis, dtype=np.float64, **kw)
        else:
            values = fn(x, axis=axis, **kw)
    return values, want


def _call(op, t, axis, keepdims):
    return getattr(t, op)(axis=axis, keepdims=keepdims)


@functools.lru_cache(maxsize=None)
def grouped_results(shape, layout, dtype, axis, keepdims, width=None):
    """Every reduction of one (input, axis, keepdims) in one jitted function (compiling one
    graph with several kernels is cheaper than one graph each). A failing compile fails every
    test of the group: there is no per-op fallback that could hide it."""
    x, p = reduction_inputs(shape, layout, dtype)
    ops = [o for o in OPS if not (o in ARG_OPS and isinstance(axis, tuple))]

    def all_ops(x, p):
        return tuple(_call(o, p if o == "prod" else x, axis, keepdims) for o in ops)
    return dict(zip(ops, jc.jit(all_ops, vector_width=width)(x, p)))


def _cases(dtypes, shapes, keepdims_options):
    for d in dtypes:
        for shape, layout in shapes:
            for axis in AXES[len(shape)]:
                for kd in keepdims_options:
                    for op in OPS:
                        if op in ARG_OPS and isinstance(axis, tuple):
                            continue
                        yield pytest.param(op, d, shape, layout, axis, kd, id=(
                            f"{op}-{dtype_id(d)}-{_shape_id(shape, layout)}-{_axis_id(axis)}"
                            f"{'-keepdims' if kd else ''}"))


def check_reduction(op, dtype, shape, layout, axis, keepdims, width=None):
    """One reduction against numpy; width: the vector width in bits (None: the default)."""
    x, p = reduction_inputs(shape, layout, dtype)
    src = p if op == "prod" else x
    got = grouped_results(shape, layout, np.dtype(dtype), axis, keepdims, width)[op]
    ref, want = numpy_reduce(op, src, axis, keepdims)
    n = src.size // max(np.asarray(ref).size, 1) if src.size else 0
    rtol = atol = None
    if np.dtype(want).kind == "f":
        scale = float(np.max(np.abs(f64(src)))) if src.size else 1.0
        rtol, atol = reduction_tol(want, n, scale)
        if op == "mean":
            atol = atol / max(n, 1)
        if op == "prod":
            rtol, atol = TOL[np.dtype(want)][0] + 4 * n * EPS[np.dtype(want)], 0.0
    assert_close(got, ref, want, rtol=rtol, atol=atol,
                 msg=f"{op}(axis={axis}, keepdims={keepdims}) of {dtype_id(dtype)}{shape}")


# Each (input, axis, keepdims) is one compile (~0.15 s): float32 runs every layout and keepdims,
# float64 and the integer dtypes the C-contiguous inputs without keepdims.
@pytest.mark.parametrize("op, dtype, shape, layout, axis, keepdims",
                         list(_cases([F32], FLOAT_SHAPES, [False, True]))
                         + list(_cases([F64], F64_SHAPES, [False])))
def test_reduce_float(op, dtype, shape, layout, axis, keepdims):
    check_reduction(op, dtype, shape, layout, axis, keepdims)


def _narrow_cases():
    """The narrower vector widths: every float32 layout and axis, float64 and int32 over
    their C-contiguous inputs, without keepdims."""
    for width in NARROW_WIDTHS:
        for case in (list(_cases([F32], FLOAT_SHAPES, [False]))
                     + list(_cases([F64, I32], F64_SHAPES[1::2], [False]))):
            yield pytest.param(*case.values, width, id=f"{case.id}-w{width}")


@pytest.mark.parametrize("op, dtype, shape, layout, axis, keepdims, width",
                         list(_narrow_cases()))
def test_reduce_narrow_widths(op, dtype, shape, layout, axis, keepdims, width):
    check_reduction(op, dtype, shape, layout, axis, keepdims, width)


@pytest.mark.parametrize("op, dtype, shape, layout, axis, keepdims",
                         list(_cases([I32, I64, U8, BOOL], INT_SHAPES, [False])))
def test_reduce_int_and_bool(op, dtype, shape, layout, axis, keepdims):
    """Integer sums and products accumulate in int64 (uint8: int64 where numpy has uint64)."""
    check_reduction(op, dtype, shape, layout, axis, keepdims)


def test_uint8_and_bool_sums_do_not_wrap():
    x = np.full(4097, 255, np.uint8)
    m = np.ones((300, 3), bool)
    f = jc.jit(lambda x, m: (x.sum(), m.sum(axis=0), x.astype(np.int32).sum()))
    s, c, s32 = f(x, m)
    assert s == 255 * 4097 and s.dtype == np.int64
    assert_close(c, np.full(3, 300), np.int64)
    assert s32 == 255 * 4097 and s32.dtype == np.int64


def test_reductions_via_numpy_functions_and_methods():
    x = make((6, 7), F32, rng=rng_for("np-red"))
    f = jc.jit(lambda x: (np.sum(x, axis=0), np.max(x, axis=1), np.min(x), np.mean(x, axis=-1),
                          np.prod(x * 0.1 + 1.0, axis=0), np.argmax(x, axis=1), np.argmin(x),
                          np.amax(x, axis=0, keepdims=True), np.add.reduce(x, axis=1),
                          np.maximum.reduce(x, axis=0), jc.sum(x, axis=(0, 1)), jc.amin(x, 0)))
    got = f(x)
    x64 = f64(x)
    refs = [x64.sum(0), x.max(1), x.min(), x64.mean(-1), (x64 * 0.1 + 1.0).prod(0), x.argmax(1),
            x.argmin(), x.max(0, keepdims=True), x64.sum(1), x.max(0), x64.sum(), x.min(0)]
    wants = [F32, F32, F32, F32, F32, np.int64, np.int64, F32, F32, F32, F32, F32]
    a = np.abs(x64)                  # sums' rounding errors are relative to their |terms|
    scales = [a.sum(0), None, None, a.mean(-1), None, None, None, None, a.sum(1), None,
              a.sum(), None]
    rtol = reduction_tol(F32, x.size)[0]
    for i, (g, r, w, sc) in enumerate(zip(got, refs, wants, scales)):
        assert_close(g, r, w, rtol=rtol, scale=sc, msg=f"output {i}")


@pytest.mark.parametrize("src, acc", [(U8, F64), (U8, F32), (F32, F64), (I64, F32),
                                      (F32, I32), (I32, I32), (BOOL, I32)],
                         ids=lambda d: dtype_id(d))
def test_sum_with_dtype_argument(src, acc):
    """numpy: `dtype=` is the accumulator and the result dtype."""
    x = make(100, src, rng=rng_for("sum-dtype", dtype_id(src)), low=0 if src != BOOL else None,
             high=20 if src != BOOL else None)
    got = jc.jit(lambda x: x.sum(dtype=acc))(x)
    assert_close(got, x.sum(dtype=acc), x.sum(dtype=acc).dtype)


@pytest.mark.parametrize("axis", [np.int64(1), np.int32(0), (np.int64(0), np.intp(1)),
                                  np.int64(-1)], ids=lambda a: f"axis={a!r}")
def test_numpy_integer_axes(axis):
    """numpy accepts any integer (operator.index) as an axis, e.g. np.int64 from numpy code."""
    x = make((4, 5), F32, rng=rng_for("np-axes"))
    f = jc.jit(lambda x: (x.sum(axis=axis), x.max(axis=axis), x.mean(axis=axis)))
    for g, r in zip(f(x), (f64(x).sum(axis=axis), x.max(axis=axis), f64(x).mean(axis=axis))):
        assert_close(g, r, F32)
    if not isinstance(axis, tuple):
        g = jc.jit(lambda x: (x.argmax(axis=axis), jc.softmax(x, axis=axis)))(x)
        assert_close(g[0], x.argmax(axis=axis), np.int64)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("shape, axis", [((3, 1), 1), ((0, 1), 1), ((1, 40), 0),
                                         ((5, 1, 33), 1), ((1, 1), None)])
def test_arg_reduction_over_an_extent_one_axis(op, shape, axis):
    """Index 0 everywhere (the compiler crashed: no reduce loop was left; found by the fuzzer)."""
    x = make(shape, F32, rng=rng_for("arg-extent-1", shape))
    for keepdims in (False, True):
        got = jc.jit(lambda x: getattr(x, op)(axis=axis, keepdims=keepdims))(x)
        assert_close(got, getattr(x, op)(axis=axis, keepdims=keepdims), np.int64)


@pytest.mark.parametrize("shape", [(1, 0), (0, 3), (2, 0, 4)], ids=str)
def test_row_composites_of_empty_arrays(shape):
    """softmax / log_softmax / layer_norm of an empty array are empty (the softmax's internal
    max over an empty row raised; found by the fuzzer)."""
    x = np.zeros(shape, np.float32)
    for fn in (jc.softmax, jc.log_softmax, jc.layer_norm):
        got = jc.jit(fn)(x)
        assert got.shape == shape and got.dtype == np.float32


def test_reduction_axis_errors():
    x = np.ones((3, 4), np.float32)
    for fn in (lambda x: x.sum(axis=2), lambda x: x.max(axis=-3), lambda x: x.sum(axis=(0, 0)),
               lambda x: x.argmax(axis=(0, 1))):
        with pytest.raises((jc.ShapeError, jc.TraceError)):
            jc.jit(fn)(x)


@pytest.mark.parametrize("dtype", [F32, F64, I32, U8], ids=dtype_id)
def test_large_reductions(dtype):
    """Big enough to be split into several chunks / threads: the partial results must combine
    to numpy's result, and the arg-reductions must find the unique extremes wherever they are."""
    rng = rng_for("large", dtype_id(dtype))
    n = 2_000_003
    if dtype.kind == "f":
        x = make(n, dtype, rng=rng, low=0.0, high=1.0)
        x[n - 1], x[n // 2 + 1] = 2.0, -1.0
    else:
        x = make(n, dtype, rng=rng, low=0, high=100)
        x[n - 1], x[n // 2 + 1] = 101, 0
        x[x == 0] = 1
        x[n // 2 + 1] = 0
    f = jc.jit(lambda x: (x.sum(), x.max(), x.min(), x.argmax(), x.argmin(), x.mean()))
    s, mx, mn, amx, amn, mean = f(x)
    rtol, atol = reduction_tol(F64 if dtype.kind != "f" else dtype, n, 2.0)
    assert_close(s, f64(x).sum(), np.sum(x).dtype, rtol=rtol, atol=atol)
    assert_close(mean, f64(x).mean(), np.mean(x).dtype, rtol=rtol, atol=atol / n)
    assert mx == x.max() and mn == x.min()
    assert amx == n - 1 and amn == n // 2 + 1


@pytest.mark.parametrize("axis", [0, 1, None], ids=_axis_id)
def test_large_2d_reductions(axis):
    x = make((1001, 1003), F32, rng=rng_for("large2d", axis), low=0.0, high=1.0)
    f = jc.jit(lambda x: (x.sum(axis=axis), x.max(axis=axis), x.argmin(axis=axis)))
    s, mx, amn = f(x)
    n = x.size if axis is None else x.shape[axis]
    rtol, atol = reduction_tol(F32, n, 1.0)
    assert_close(s, f64(x).sum(axis=axis), F32, rtol=rtol, atol=atol)
    assert_close(mx, x.max(axis=axis), F32, exact=True)
    assert_close(amn, x.argmin(axis=axis), np.int64)


# ---- NaN / Inf --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("n", [7, 1023], ids=lambda n: f"n{n}")
def test_max_min_argmax_propagate_nan(dtype, n):
    rng = rng_for("nan-red", n, dtype_id(dtype))
    x = make((5, n), dtype, rng=rng)
    x[0, n // 2] = np.nan                      # in the vector body (or tail for n=7)
    x[1, n - 1] = np.nan                       # in the tail
    x[2, 0] = np.nan
    x[2, 3] = np.nan                           # two NaNs: argmax/argmin give the first
    x[3, :] = np.nan                           # all NaN
    f = jc.jit(lambda x: (x.max(axis=1), x.min(axis=1), x.argmax(axis=1), x.argmin(axis=1),
                          x.max(), x.argmin(), x.sum(axis=1)))
    mx, mn, amx, amn, gmax, gamin, s = f(x)
    assert_close(mx, np.max(x, axis=1), dtype, exact=True)
    assert_close(mn, np.min(x, axis=1), dtype, exact=True)
    assert_close(amx, np.argmax(x, axis=1), np.int64)
    assert_close(amn, np.argmin(x, axis=1), np.int64)
    assert np.isnan(gmax) and gamin == np.argmin(x)
    assert np.all(np.isnan(s[:4])) and not np.isnan(s[4])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_reductions_with_infinities(dtype):
    x = np.array([[1.0, np.inf, 2.0], [-np.inf, 1.0, 0.0], [np.inf, -np.inf, 1.0],
                  [-np.inf, -np.inf, -np.inf]], dtype)
    f = jc.jit(lambda x: (x.sum(axis=1), x.max(axis=1), x.min(axis=1), x.argmax(axis=1),
                          x.argmin(axis=1), x.prod(axis=1)))
    for g, op in zip(f(x), ["sum", "max", "min", "argmax", "argmin", "prod"]):
        ref, want = numpy_reduce(op, x, 1, False)
        assert_close(g, ref, want, msg=op)


def test_max_of_all_negative_and_min_of_all_positive():
    """The identity of max is -inf (or the first element), not 0."""
    x = -np.abs(make((4, 1023), F32, rng=rng_for("neg"))) - 1.0
    f = jc.jit(lambda x: (x.max(axis=1), (-x).min(axis=1), x.astype(np.int32).max(axis=1)))
    a, b, c = f(x)
    assert_close(a, x.max(axis=1), F32, exact=True)
    assert_close(b, (-x).min(axis=1), F32, exact=True)
    assert_close(c, x.astype(np.int32).max(axis=1), I32)


# ---- empty reductions -----------------------------------------------------------------------

def test_empty_sum_prod_mean():
    e = np.zeros((0,), np.float32)
    f = jc.jit(lambda x: (x.sum(), x.prod(), x.sum(axis=0, keepdims=True)))
    s, p, sk = f(e)
    assert s.shape == () and s.dtype == F32 and s == 0
    assert p.shape == () and p == 1
    assert sk.shape == (1,) and sk[0] == 0
    ei = np.zeros((0,), np.int32)
    si = jc.jit(lambda x: x.sum())(ei)
    assert si == 0 and si.dtype == np.int64
    with np.errstate(all="ignore"):
        ref = np.mean(e)
    m = jc.jit(lambda x: x.mean())(e)
    assert np.isnan(m) and np.isnan(ref)


def test_empty_axis_reductions():
    e = np.zeros((3, 0), np.float64)
    f = jc.jit(lambda x: (x.sum(axis=1), x.sum(axis=0), x.prod(axis=1), x.max(axis=0)))
    s1, s0, p1, m0 = f(e)
    assert_close(s1, np.zeros(3), F64, exact=True)
    assert s0.shape == (0,)
    assert_close(p1, np.ones(3), F64, exact=True)
    assert m0.shape == (0,)                    # nothing to reduce: no error, as numpy


@pytest.mark.parametrize("fn", [lambda x: x.max(), lambda x: x.min(axis=0),
                                lambda x: x.argmax(), lambda x: x.argmin(axis=0)],
                         ids=["max", "min-axis0", "argmax", "argmin-axis0"])
def test_empty_max_raises(fn):
    with pytest.raises(ValueError):           # jc.ShapeError is a ValueError, as numpy raises
        jc.jit(fn)(np.zeros((0,), np.float32))


def test_empty_max_over_axis_of_2d_raises():
    with pytest.raises(ValueError):
        jc.jit(lambda x: x.max(axis=1))(np.zeros((3, 0), np.float32))


# ---- softmax / log_softmax / layer_norm ----------------------------------------------------------

ROW_SHAPES = [(7,), (33, 65), (4, 5, 6), (2, 1023)]


def _softmax_cases():
    for name in ("softmax", "log_softmax"):
        for dtype, shapes in ((F32, ROW_SHAPES), (F64, [(33, 65)])):
            for shape in shapes:
                for axis in (-1, 0):
                    yield pytest.param(name, dtype, shape, axis, id=f"{name}-{dtype_id(dtype)}-"
                                       f"{'x'.join(map(str, shape))}-axis{axis}")


@pytest.mark.parametrize("name, dtype, shape, axis", list(_softmax_cases()))
def test_softmax(name, dtype, shape, axis):
    x = make(shape, dtype, rng=rng_for(name, shape, dtype_id(dtype), axis))
    ref = (softmax_ref if name == "softmax" else log_softmax_ref)(x, axis)
    fn = getattr(jc, name)
    got = jc.jit(lambda x: fn(x, axis=axis))(x)
    n = shape[axis]
    rtol, atol = reduction_tol(dtype, n, scale=1.0 if name == "softmax" else
                               float(np.max(np.abs(x))) / n)
    assert_close(got, ref, dtype, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_large_values_and_masking(name):
    rng = rng_for("sm-big", name)
    x = make((8, 33), F32, rng=rng) * np.float32(300)       # exp would overflow without max
    x[1, ::2] = -np.inf                                   # masked entries
    ref = (softmax_ref if name == "softmax" else log_softmax_ref)(x, -1)
    got = getattr(jc, name)(x)
    assert np.all(np.isfinite(got[:, 1::2]))
    assert_close(got, ref, F32, rtol=1e-4, atol=1e-5 if name == "softmax" else 1e-3)


def test_softmax_of_ints_is_float():
    x = make((3, 9), I32, rng=rng_for("sm-int"), low=-5, high=5)
    got = jc.jit(lambda x: jc.softmax(x))(x)
    assert_close(got, softmax_ref(x, -1), F64)
    u = make((3, 9), U8, rng=rng_for("sm-u8"), low=0, high=10)
    assert_close(jc.jit(lambda x: jc.softmax(x))(u), softmax_ref(u, -1), F32)


def _layer_norm_cases():
    for dtype, shapes, params in (
            (F32, [(7,), (1, 7), (33, 65), (4, 5, 6), (3, 1023)], ["none", "weight+bias"]),
            (F32, [(33, 65)], ["weight", "bias", "eps"]),
            (F64, [(33, 65), (3, 1023)], ["none", "weight+bias"])):
        for shape in shapes:
            for p in params:
                yield pytest.param(dtype, shape, p, id=f"{dtype_id(dtype)}-"
                                   f"{'x'.join(map(str, shape))}-{p}")


@pytest.mark.parametrize("dtype, shape, params", list(_layer_norm_cases()))
def test_layer_norm(dtype, shape, params):
    rng = rng_for("ln", shape, dtype_id(dtype), params)
    x = make(shape, dtype, rng=rng) + dtype.type(5)           # a non-zero mean
    w = make(shape[-1:], dtype, rng=rng)
    b = make(shape[-1:], dtype, rng=rng)
    args = {"none": (), "weight": (w,), "weight+bias": (w, b), "bias": (b,), "eps": ()}[params]
    if params == "bias":
        fn = jc.jit(lambda x, b: jc.layer_norm(x, bias=b))
        ref = layer_norm_ref(x, None, b)
    elif params == "eps":
        fn = jc.jit(lambda x: jc.layer_norm(x, eps=0.5))
        ref = layer_norm_ref(x, eps=0.5)
    else:
        fn = jc.jit(lambda x, *wb: jc.layer_norm(x, *wb))
        ref = layer_norm_ref(x, *args)
    got = fn(x, *args)
    n = shape[-1]
    rtol, atol = reduction_tol(dtype, n, scale=float(np.max(np.abs(ref))) / math.sqrt(n))
    assert_close(got, ref, dtype, rtol=rtol, atol=atol * 4)


def test_layer_norm_bad_weight_shape():
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x, w: jc.layer_norm(x, w))(np.ones((3, 4), np.float32),
                                                 np.ones(3, np.float32))


# ---- matmul ------------------------------------------------------------------------------

MATMUL_2D = [(1, 1, 1), (3, 17, 5), (17, 64, 65), (65, 65, 17), (64, 3, 64), (7, 1, 9),
             (1, 65, 1), (33, 17, 3)]


def matmul_check(got, a, b, want):
    ref = np.matmul(f64(a), f64(b))
    k = a.shape[-1]
    scale = float(np.max(np.abs(f64(a)))) * float(np.max(np.abs(f64(b))))
    rtol, atol = reduction_tol(want, k, scale)
    assert_close(got, ref, want, rtol=rtol, atol=atol, msg=f"{a.shape} @ {b.shape}")


@functools.lru_cache(maxsize=None)
def mm_fn(path):
    fns = {"@": lambda a, b: a @ b, "jc.matmul": lambda a, b: jc.matmul(a, b),
           "np.matmul": lambda a, b: np.matmul(a, b), "np.dot": lambda a, b: np.dot(a, b)}
    return jc.jit(fns[path])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("mkn", MATMUL_2D, ids=lambda s: "m{}k{}n{}".format(*s))
def test_matmul_2d(mkn, dtype):
    m, k, n = mkn
    rng = rng_for("mm", mkn, dtype_id(dtype))
    a, b = make((m, k), dtype, rng=rng), make((k, n), dtype, rng=rng)
    matmul_check(mm_fn("@")(a, b), a, b, dtype)


@pytest.mark.parametrize("path", ["@", "jc.matmul", "np.matmul", "np.dot"])
def test_matmul_paths(path):
    rng = rng_for("mm-path")
    a, b = make((5, 17), F32, rng=rng), make((17, 6), F32, rng=rng)
    matmul_check(mm_fn(path)(a, b), a, b, F32)


MATMUL_ND = [
    ((17,), (17, 5)), ((5, 17), (17,)), ((64,), (64,)), ((1,), (1,)), ((3,), (2, 3, 4)),
    ((2, 3, 17), (17, 5)), ((2, 3, 17), (2, 17, 5)), ((2, 1, 4, 17), (3, 17, 5)),
    ((1, 4, 65), (3, 65, 2)), ((2, 3, 4), (4,)), ((4, 1, 2, 3), (1, 5, 3, 2)),
]


@pytest.mark.parametrize("sa, sb", MATMUL_ND,
                         ids=[f"{a}@{b}".replace(" ", "") for a, b in MATMUL_ND])
def test_matmul_1d_and_batched(sa, sb):
    rng = rng_for("mm-nd", sa, sb)
    a, b = make(sa, F32, rng=rng), make(sb, F32, rng=rng)
    got = mm_fn("@")(a, b)
    assert got.shape == np.matmul(a, b).shape
    matmul_check(got, a, b, F32)


@pytest.mark.parametrize("layout", ["aT", "bT", "both", "strided"])
def test_matmul_non_contiguous_operands(layout):
    rng = rng_for("mm-nc", layout)
    a = {"aT": make((9, 17), F32, rng=rng).T, "both": make((9, 17), F32, rng=rng).T,
         "bT": make((17, 9), F32, rng=rng), "strided": make((17, 18), F32, rng=rng)[:, ::2]}
    b = {"aT": make((9, 5), F32, rng=rng), "bT": make((6, 9), F32, rng=rng).T,
         "both": make((6, 9), F32, rng=rng).T, "strided": make((18, 6), F32, rng=rng)[::-2]}
    a, b = a[layout], b[layout]
    assert not (a.flags.c_contiguous and b.flags.c_contiguous)
    matmul_check(mm_fn("@")(a, b), a, b, F32)


def test_matmul_transposes_inside_the_function():
    rng = rng_for("mm-T")
    a, b = make((17, 9), F32, rng=rng), make((5, 17), F32, rng=rng)
    got = jc.jit(lambda a, b: a.T @ b.T)(a, b)
    matmul_check(got, a.T, b.T, F32)


def test_matmul_mixed_and_integer_dtypes():
    rng = rng_for("mm-dt")
    a32, b64 = make((4, 17), F32, rng=rng), make((17, 3), F64, rng=rng)
    matmul_check(mm_fn("@")(a32, b64), a32, b64, F64)
    ai, bi = make((4, 17), I32, rng=rng, low=-50, high=50), make((17, 3), I32, rng=rng,
                                                                 low=-50, high=50)
    # documented deviation: integer matmul is computed in float64 and returns float64
    got = mm_fn("@")(ai, bi)
    assert_close(got, np.matmul(ai, bi), F64, exact=True)


def test_matmul_fused_with_elementwise():
    rng = rng_for("mm-fuse")
    x, w, bias = make((8, 64), F32, rng=rng), make((64, 65), F32, rng=rng), make(65, F32, rng=rng)
    got = jc.jit(lambda x, w, b: jc.relu(x @ w + b) * 0.5)(x, w, bias)
    ref = np.maximum(f64(x) @ f64(w) + f64(bias), 0) * 0.5
    rtol, atol = reduction_tol(F32, 64, 9.0 * 9.0)
    assert_close(got, ref, F32, rtol=rtol, atol=atol)


def test_matmul_errors():
    with pytest.raises(jc.ShapeError):
        mm_fn("@")(np.ones((3, 4), np.float32), np.ones((5, 6), np.float32))
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda a: jc.matmul(a, np.float32(2.0)))(np.ones((3, 4), np.float32))
    with pytest.raises(jc.ShapeError):
        mm_fn("@")(np.ones((2, 3, 4), np.float32), np.ones((3, 4, 5), np.float32))


@pytest.mark.parametrize("shape,axis", [((5, 1, 16), 1), ((1, 100), 0), ((3, 1, 200), 1),
                                        ((7, 300), 0), ((4, 5, 130), (0, 1))])
def test_column_sums_over_few_rows_and_extent_one_axes(shape, axis):
    x = np.arange(np.prod(shape), dtype=np.int32).reshape(shape) - 50
    f = jc.jit(lambda x: x.sum(axis=axis))
    assert_same(f(x), x.sum(axis=axis))
    y = make(shape, F32, rng=rng_for("colsum", shape))
    g = jc.jit(lambda y: y.sum(axis=axis))
    assert_same(g(y), y.sum(axis=axis), exact=True)   # numpy's row order, exactly


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_long_axis_sums_accumulate_in_two_levels(dtype):
    """2**25 + 7 ones per output (a broadcast view: no memory): one float32 accumulator lane
    stops counting at 2**24; the two-level split keeps the sum exact. Rows and columns."""
    n = 2**25 + 7
    rows = np.broadcast_to(np.asarray(1.0, dtype), (3, n))
    cols = np.broadcast_to(np.asarray(1.0, dtype), (n, 5))
    got_rows = jc.jit(lambda x: x.sum(axis=1))(rows)
    got_cols = jc.jit(lambda x: x.sum(axis=0))(cols)
    assert_same(got_rows, np.full(3, n, dtype), exact=True)
    assert_same(got_cols, np.full(5, n, dtype), exact=True)


def test_more_than_2_to_the_31_elements_index_with_int64():
    big = np.broadcast_to(np.float32(0.5), (2, 2**31 + 5))
    got = jc.jit(lambda x: x.sum(axis=1))(big)
    assert_same(got, np.full(2, np.float32((2**31 + 5) * 0.5)), exact=True)


# ---- rows off a cache line (jitcore/llvm/aligned_loads.py) --------------------------------------
# A sum of 512-bit vectors reads a row that starts off a 64-byte line from aligned lines, each
# vector rebuilt by a lane permute: the same lanes as plain loads, so the same bits at every
# start. Rows of fewer than MIN_VECTORS vectors, and rows off an element boundary, keep the
# plain loop. The lengths run around that threshold and around the sum's trips and pairwise
# blocks (one accumulator vector per trip each, BLOCK_TRIPS trips a block), with tails.

def _placed(x0, offset: int):
    """A copy of x0 whose data starts `offset` bytes past a 64-byte line."""
    raw = np.empty(x0.nbytes + 128, np.uint8)
    x = np.ndarray(x0.shape, x0.dtype, buffer=raw, offset=(-raw.ctypes.data) % 64 + offset)
    x[...] = x0
    return x


def _same_bits(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def _line_lengths(dtype) -> list:
    from jitcore.llvm.aligned_loads import MIN_VECTORS
    from jitcore.llvm.codegen import BLOCK_TRIPS
    from jitcore.llvm.reduce import SUM_ACCUMULATORS
    vec = max(jc.target_info()["vector_bits"] // (8 * np.dtype(dtype).itemsize), 1)
    short, trip = MIN_VECTORS * vec, SUM_ACCUMULATORS * vec
    block = BLOCK_TRIPS * trip
    return sorted({short - 1, short, short + 1, trip - 1, trip + vec + 1, block - 1, block,
                   block + 1, 3 * block + trip + vec + 3})


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("dtype", [F32, F64, I32, I64], ids=dtype_id)
def test_row_sums_off_a_cache_line_give_the_bits_of_rows_on_one(dtype, op):
    """5 rows at every element offset into a line and at an odd byte (the plain loop): the
    bits of the same rows on a line. Floats are within the pairwise bound of the correctly
    rounded sum, (log2(n) + 11) roundings of the summed magnitudes; integer sums are exact."""
    f = jc.jit(lambda v: getattr(v, op)(axis=1))
    size = np.dtype(dtype).itemsize
    for n in _line_lengths(dtype):
        rng = rng_for("lines", n, dtype_id(dtype))
        if dtype.kind == "f":
            x0 = (rng.standard_normal((5, n)) + 0.5).astype(dtype)
        else:
            x0 = rng.integers(-1000, 1000, (5, n)).astype(dtype)
        want = f(_placed(x0, 0))
        for offset in [*range(size, 64, size), 1]:
            _same_bits(f(_placed(x0, offset)), want)
        wide = x0.astype(np.float64)
        if dtype.kind == "f":
            exact = np.array([math.fsum(r) for r in wide])
            bound = (math.log2(n) + 11) * EPS[dtype] * np.abs(wide).sum(axis=1)
            if op == "mean":
                exact, bound = exact / n, bound / n
            err = np.abs(want.astype(np.float64) - exact)
            assert np.all(err <= bound), (n, err, bound)
        elif op == "sum":
            np.testing.assert_array_equal(want, x0.sum(axis=1), err_msg=f"n={n}")
        else:
            np.testing.assert_allclose(want, x0.mean(axis=1), rtol=1e-12, err_msg=f"n={n}")


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_row_sums_of_run_time_lengths_off_a_cache_line(dtype):
    """A run-time row length (the plain loop: its data counts as large), short rows down to
    none and long ones, at line offsets and an odd byte: the bits of the rows on a line."""
    f = jc.jit(lambda v: v.sum(axis=1), dynamic=True)
    size = np.dtype(dtype).itemsize
    for n in [0, 1, *_line_lengths(dtype)[:4]]:
        x0 = rng_for("dyn lines", n).standard_normal((3, n)).astype(dtype)
        want = f(_placed(x0, 0))
        np.testing.assert_allclose(want, x0.sum(axis=1), rtol=1e-5, atol=1e-5 * n)
        for offset in (size, 16, 64 - size, 3):
            _same_bits(f(_placed(x0, offset)), want)


def test_products_of_two_rows_off_different_lines():
    """(a * b).sum(axis=1) with a broadcast row b: each load has its own offset (the aligned
    loop needs both on an element; one odd start takes the plain loop)."""
    f = jc.jit(lambda a, b: (a * b).sum(axis=1))
    rng = rng_for("two lines")
    a0 = rng.standard_normal((9, 4100)).astype(np.float32)
    b0 = rng.standard_normal((1, 4100)).astype(np.float32)
    want = f(_placed(a0, 0), _placed(b0, 0))
    for oa, ob in [(16, 0), (0, 32), (4, 60), (16, 2), (1, 16)]:
        _same_bits(f(_placed(a0, oa), _placed(b0, ob)), want)


def test_sums_of_512_bit_vectors_read_aligned_lines():
    """The sum kernel at 512 bits has the permuting loop; at 256 and 128 bits none."""
    x = np.ones((4, 4096), np.float32)
    asm = jc.jit(lambda v: v.sum(axis=1)).asm(x)
    has = "vpermt2ps" in asm or "vpermi2ps" in asm
    assert has == (jc.target_info()["vector_bits"] == 512)
    for width in NARROW_WIDTHS:
        asm = jc.jit(lambda v: v.sum(axis=1), vector_width=width).asm(x)
        assert "vpermt2ps" not in asm and "vpermi2ps" not in asm

"""argmax / argmin, vectorized, against numpy exactly: every dtype x axis x shape class (vector
tails, size-1 axes, 3-D, full reductions) x layout (C, transposed, strided and reversed views)
x value pattern (ties, NaN first / middle / last / all / scattered, -0.0 vs 0.0, infinities,
integer extremes), keepdims, 1 and 2 threads; the result is int64 and the kernels are vector
code wherever the input walks memory contiguously along some axis."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import BOOL, F32, F64, I32, I64, U8, assert_vector_code, dtype_id, lanes, rng_for

DTYPES = [F32, F64, I32, I64, U8, BOOL]

# (shape, axis): vector tails (7, 17, 1000 elements per row at 4 to 16 lanes), rows shorter than
# a vector, size-1 axes that are not reduced, 3-D over each axis, full reductions
CASES = [((1,), None), ((7,), 0), ((17,), -1), ((1000,), None), ((33, 65), 0), ((33, 65), 1),
         ((33, 65), None), ((5, 3), 1), ((3, 5), 0), ((1, 40), 1), ((40, 1), 0), ((4, 5, 6), 0),
         ((4, 5, 6), 1), ((4, 5, 6), 2), ((4, 5, 6), None), ((3, 1, 70), 2), ((2, 130, 3), 1)]
LAYOUTS = ["C", "T", "strided", "reversed"]


def _case_id(case):
    shape, axis = case
    return "x".join(map(str, shape)) + f"-ax{axis}"


def _along(a, axis):
    """A view of `a` with the reduced axis last (all axes flattened for axis=None)."""
    return a.reshape(-1) if axis is None else np.moveaxis(a, axis, -1)


def patterns(shape, axis, dtype):
    """(name, array) pairs of values that probe the rules; patterns place values along the
    reduced axis (first / middle / last position of every reduced row)."""
    rng = rng_for("argred", shape, axis, dtype_id(dtype))
    d = np.dtype(dtype)
    if d == BOOL:
        yield "random", rng.random(shape) < 0.5
        yield "sparse", rng.random(shape) < 0.05
        yield "all-false", np.zeros(shape, d)
        yield "all-true", np.ones(shape, d)
        return
    if d.kind == "f":
        yield "random", (rng.standard_normal(shape) * 3).astype(d)
    else:
        info = np.iinfo(d)
        yield "random", rng.integers(info.min, info.max, shape, endpoint=True, dtype=d)
        extremes = np.array([info.min, info.max, 0, 1, info.max - 1, info.min + 1], d)
        yield "extremes", rng.choice(extremes, shape)
        yield "all-min", np.full(shape, info.min, d)
        yield "all-max", np.full(shape, info.max, d)
    yield "ties", rng.integers(0, 3, shape).astype(d)
    yield "constant", np.full(shape, 7, d)
    if d.kind != "f":
        return
    n = 1 if axis is None and shape == () else (int(np.prod(shape)) if axis is None
                                                  else shape[axis])
    for name, pos in (("nan-first", 0), ("nan-middle", n // 2), ("nan-last", n - 1)):
        a = (rng.standard_normal(shape) * 3).astype(d)
        _along(a, axis)[..., pos] = np.nan
        if name == "nan-middle" and n > 3:       # a second, later NaN: the first one wins
            _along(a, axis)[..., n - 1] = np.nan
        yield name, a
    yield "all-nan", np.full(shape, np.nan, d)
    a = (rng.standard_normal(shape) * 3).astype(d)
    a[rng.random(shape) < 0.1] = np.nan
    yield "nan-scattered", a
    yield "signed-zero", rng.choice(np.array([-0.0, 0.0], d), shape)
    yield "signed-zero-neg", rng.choice(np.array([-0.0, 0.0, -1.0, 1.0], d), shape)
    yield "infinities", rng.choice(np.array([-np.inf, np.inf, 0.0, np.nan], d)[:3], shape)
    yield "tiny", rng.choice(np.array([np.finfo(d).tiny, np.finfo(d).smallest_subnormal,
                                       -np.finfo(d).smallest_subnormal, 0.0], d), shape)


def laid_out(a, layout):
    """An array equal to `a` with the given memory layout."""
    if layout == "C":
        return np.ascontiguousarray(a)
    if layout == "T":
        return np.ascontiguousarray(a.T).T
    if layout == "strided":               # every other element of the last axis
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    return np.ascontiguousarray(a[..., ::-1])[..., ::-1]


def _fn(axis):
    return jc.jit(lambda x: (x.argmax(axis=axis), x.argmin(axis=axis),
                             np.argmax(x, axis=axis, keepdims=True),
                             np.argmin(x, axis=axis, keepdims=True)))


def arg_lanes(dtype) -> int:
    """Lanes of an arg-reduction of `dtype`: values and running indices are 32 bits at least
    (passes/legality.py lanes_for), so uint8 and bool run int32's lanes."""
    return lanes(I32 if np.dtype(dtype).itemsize < 4 else dtype)


def _reference(x, axis):
    return (np.argmax(x, axis=axis), np.argmin(x, axis=axis),
            np.argmax(x, axis=axis, keepdims=True), np.argmin(x, axis=axis, keepdims=True))


def _check(got, ref, what):
    for g, r, name in zip(got, ref, ("argmax", "argmin", "argmax keepdims", "argmin keepdims")):
        assert isinstance(g, np.ndarray) and g.dtype == np.int64, (what, name, type(g))
        assert g.shape == r.shape, (what, name, g.shape, r.shape)
        np.testing.assert_array_equal(g, r, err_msg=f"{what}: {name}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_arg_reductions_match_numpy(dtype, case, layout):
    shape, axis = case
    if layout == "T" and len(shape) == 1:
        pytest.skip("the transpose of a 1-D array is itself")
    f = _fn(axis)
    for name, a in patterns(shape, axis, dtype):
        x = laid_out(a, layout)
        _check(f(x), _reference(x, axis), f"{dtype_id(dtype)} {shape} axis={axis} {layout} {name}")
    # vector code for C arrays and 2-D transposes, as the target promises it for rows shorter
    # than a vector (helpers.assert_vector_code). Left scalar: the full reduction of a
    # transpose (its flat C order walks memory with div/mod strides; numpy copies it first)
    # and 3-D transposes over an axis (the output is written with a stride, as for every
    # reduction)
    if layout == "C" or (layout == "T" and axis is not None and len(shape) == 2):
        for k in f.kernels(x):
            if k.reason != "no_loops":                                 # (1,): nothing to do
                arg = any(op.startswith("arg") for op in k.ops)        # else a keepdims copy
                assert_vector_code(k, arg_lanes(dtype) if arg else lanes(I64))


@pytest.mark.parametrize("axis", [0, 1, None], ids=lambda a: f"ax{a}")
@pytest.mark.parametrize("dtype", [F32, I32, U8], ids=dtype_id)
def test_arg_reductions_thread_count_independent(dtype, axis):
    """Large enough for several chunks: 1 and 2 threads give numpy's answer, with many ties
    (the first index must win across chunk and lane boundaries) and NaNs."""
    rng = rng_for("argred-threads", axis, dtype_id(dtype))
    x = rng.integers(0, 50, (301, 4099)).astype(dtype)
    if dtype == F32:
        x[rng.random(x.shape) < 1e-3] = np.nan
    f = _fn(axis)
    saved = jc.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            jc.set_num_threads(n)
            results.append(f(x))
    finally:
        jc.set_num_threads(saved)
    for got in results:
        _check(got, _reference(x, axis), f"{dtype_id(dtype)} axis={axis}")
    assert all(k.vectorized for k in f.kernels(x) if k.reason != "no_loops")


def test_arg_reduction_of_an_expression_is_vectorized():
    """argmax of a fused elementwise expression (values computed in the kernel), mixed dtypes."""
    rng = rng_for("argred-expr")
    a = (rng.standard_normal((64, 300)) * 3).astype(F32)
    b = rng.integers(-5, 5, (64, 300)).astype(I64)
    f = jc.jit(lambda a, b: (np.argmax(a * b, axis=1), np.argmin(a - 1.0, axis=0),
                             np.argmax(a > 0.5, axis=1)))
    got = f(a, b)
    ref = (np.argmax(a * b, axis=1), np.argmin(a - 1.0, axis=0), np.argmax(a > 0.5, axis=1))
    for g, r in zip(got, ref):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, r)
    assert all(k.vectorized for k in f.kernels(a, b) if "argm" in " ".join(k.ops))


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduction_of_an_empty_axis_raises(op):
    x = np.zeros((3, 0), F32)
    for axis in (1, None):
        with pytest.raises((ValueError, jc.ShapeError, jc.TraceError)):
            jc.jit(lambda x: getattr(x, op)(axis=axis))(x)

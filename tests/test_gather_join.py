"""Indexing and joining ops against numpy: take and integer-array indexing (checked gathers),
concatenate, stack, split, pad, clip, cumsum. Every dtype, shape classes (0-d where legal,
empty, 1-d, 3-d, non-contiguous and broadcast views), axes (negative too), fused with
elementwise ops before and after, eager and jitted, one and two threads bitwise; every error.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import (ALL_DTYPES, BOOL, F32, F64, I32, NUMERIC_DTYPES, assert_vector_code,
                     dtype_id, lanes, make, rng_for)

INT64_MIN = np.iinfo(np.int64).min


def _check(got, ref):
    """Exact equality, dtype included (these ops compute no new float values, except cumsum
    and clip, whose float results are numpy's to the bit as well)."""
    ref = np.asarray(ref)
    assert np.asarray(got).dtype == ref.dtype, (np.asarray(got).dtype, ref.dtype)
    np.testing.assert_array_equal(got, ref)


def _views(a):
    """The array as given, transposed, strided and broadcast (views read in place)."""
    yield a
    if a.ndim >= 2:
        yield a.T
        yield a[::2, ::-1]
    if a.ndim >= 1 and a.size:
        yield np.broadcast_to(a[..., :1], a.shape)


# ---- take and integer array indexing -----------------------------------------------------------

def _all(fn, cases, *args):
    """fn(case, *args) for every case, compiled once as one program (compiles dominate the
    time of these tests), checked against the same calls on numpy arrays: fn uses numpy's
    spellings, which on traced tensors are jitcore's ops."""
    got = jc.jit(lambda *a: tuple(fn(c, *a) for c in cases))(*args)
    for g, c in zip(got, cases):
        _check(g, fn(c, *args))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64], ids=dtype_id)
def test_take_matches_numpy_for_every_axis_and_index_shape(dtype, index_dtype):
    rng = rng_for("take", dtype, index_dtype)
    x = make((5, 6, 7), dtype, rng=rng)
    ishapes = ((), (4,), (2, 3), (0,))
    idx = [rng.integers(-5, 5, s).astype(index_dtype) for s in ishapes]
    cases = [(axis, k) for axis in (None, 0, 1, -1) for k in range(len(ishapes))]
    _all(lambda c, x, *i: np.take(x, i[c[1]], axis=c[0]), cases, x, *idx)
    _check(jc.take(x, idx[2], axis=1), np.take(x, idx[2], axis=1))       # eager


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_embedding_lookup_1d_and_2d_ids_fused_before_and_after(dtype):
    rng = rng_for("embed", dtype)
    W = make((97, 24), dtype, rng=rng)
    for ids in (rng.integers(-97, 97, 13), rng.integers(0, 97, (3, 5)).astype(np.int32)):
        _check(jc.jit(lambda W, ids: W[ids])(W, ids), W[ids])
        if dtype != BOOL:
            f = jc.jit(lambda W, ids: (W * 2)[(ids + 1) % 97] + 1)
            _check(f(W, ids), (W * 2)[(ids + 1) % 97] + 1)
    f = jc.jit(lambda W, ids: W[ids])
    k, = f.kernels(W, ids)
    # the row is contiguous: vector loads at a checked base (the int64 id, hoisted, does not
    # narrow the vectors); a 24-byte row of uint8/bool is shorter than an AVX2 vector
    assert_vector_code(k, lanes(dtype))


def test_integer_array_index_between_slices_none_and_ellipsis():
    rng = rng_for("fancy")
    x = make((4, 9, 6), F32, rng=rng)
    ids = rng.integers(-9, 9, (2, 3))
    cases = [lambda x, i: x[:, i], lambda x, i: x[..., i % 6], lambda x, i: x[None, 1:, i],
             lambda x, i: x[::-1, i, 2:5], lambda x, i: x[[1, 0, -1]] + i.sum(),
             lambda x, i: x[np.array([3, 1])][:, i], lambda x, i: x[:, x[0, :, 0].argmax()]]
    for fn in cases:
        _check(jc.jit(fn)(x, ids), fn(x, ids))


@pytest.mark.parametrize("view", range(4))
def test_take_from_views_and_with_indices_computed_in_the_kernel(view):
    rng = rng_for("take views", view)
    base = make((12, 10), F64, rng=rng)
    x = list(_views(base))[view]
    ids = rng.integers(0, x.shape[1], 8)
    _check(jc.jit(lambda x, i: x[:, i] * 3)(x, ids), x[:, ids] * 3)
    _check(jc.jit(lambda x, i: jc.take(x, (i * 7) % x.shape[0], axis=0))(x, ids),
           np.take(x, (ids * 7) % x.shape[0], axis=0))
    k = jc.jit(lambda x, i: x[:, i] * 3).kernels(x, ids)[-1]
    assert not k.vectorized and k.reason == "non_contiguous_load"


def test_take_of_0d_and_empty_arrays():
    x0 = np.array(5.0)
    _check(jc.jit(lambda x, i: jc.take(x, i))(x0, np.array([0, -1, 0])), np.take(x0, [0, -1, 0]))
    e = np.zeros((0, 3), np.float32)
    _check(jc.jit(lambda x, i: jc.take(x, i, axis=0))(e, np.zeros(0, np.int64)),
           np.take(e, np.zeros(0, np.int64), axis=0))
    _check(jc.jit(lambda x, i: jc.take(x, i, axis=1))(e, np.array([2, -3])),
           np.take(e, [2, -3], axis=1))


BAD_INDICES = [50, -51, 2**31 - 1, 2**40, -(2**62), 2**63 - 1, INT64_MIN]


@pytest.mark.parametrize("bad", BAD_INDICES)
@pytest.mark.parametrize("where", ["rows", "lanes"])
def test_out_of_range_index_raises_index_error_naming_op_index_and_extent(bad, where):
    W = np.arange(50 * 19, dtype=np.float32).reshape(50, 19)    # (19: a vector tail)
    ids = np.array([3, bad, 7], np.int64)
    f = jc.jit(lambda W, i: W[i] + 1) if where == "rows" else \
        jc.jit(lambda W, i: W.T[:, i] + 1)      # the index varies along the vector loop
    with pytest.raises(IndexError, match=rf"take: index {bad} is out of bounds for axis "
                                         r"[01] with size 50"):
        f(W, ids)
    np.testing.assert_array_equal(f(W, np.array([3, -50, 49])), W[[3, -50, 49]] + 1
                                  if where == "rows" else W.T[:, [3, -50, 49]] + 1)


@pytest.mark.parametrize("n", [40, 37])
def test_gather_in_a_gemm_epilogue_is_checked_lane_by_lane(n):
    """`A @ B + X[:, ids]`: the gather is part of the GEMM's vector epilogue, its index
    changing along the vector axis; each lane is checked (the masked tail's idle lanes not)."""
    rng = rng_for("gemm gather", n)
    A, B = make((24, 32), F32, rng=rng), make((32, n), F32, rng=rng)
    X = make((24, 90), F32, rng=rng)
    ids = rng.integers(-90, 90, n)
    f = jc.jit(lambda A, B, X, i: A @ B + X[:, i])
    np.testing.assert_allclose(f(A, B, X, ids), A.astype(F64) @ B + X[:, ids], rtol=1e-5,
                               atol=1e-4)
    assert f.kernels(A, B, X, ids)[0].kind == "gemm"
    ids[-1] = INT64_MIN
    with pytest.raises(IndexError, match=f"index {INT64_MIN} is out of bounds"):
        f(A, B, X, ids)


def test_index_checks_with_int32_indices_empty_axes_and_eagerly():
    W = np.ones((4, 3), np.int32)
    for bad in (np.iinfo(np.int32).min, np.iinfo(np.int32).max, 4, -5):
        with pytest.raises(IndexError, match=f"index {bad} is out"):
            jc.jit(lambda W, i: W[i])(W, np.array([bad], np.int32))
    with pytest.raises(IndexError, match="index 0 is out of bounds for axis 0 with size 0"):
        jc.jit(lambda x, i: jc.take(x, i, axis=0))(np.zeros((0, 3)), np.array([0]))
    with pytest.raises(IndexError, match="take: index 9"):
        jc.take(np.arange(4.0), np.array([1, 9]))
    with pytest.raises(IndexError):                # every call checks, fast path included
        f = jc.jit(lambda W, i: W[i])
        f(W, np.array([1]))
        f(W, np.array([INT64_MIN]))


def test_take_rejects_non_integer_indices_and_bad_axes():
    x = np.zeros((3, 4))
    with pytest.raises(jc.DTypeError, match="take"):
        jc.take(x, np.array([0.0]))
    with pytest.raises(jc.TraceError, match="boolean mask"):
        jc.jit(lambda x, m: x[m])(x, np.ones(3, bool))
    with pytest.raises(jc.ShapeError, match="take: axis 2"):
        jc.take(x, np.array([0]), axis=2)
    with pytest.raises(jc.TraceError, match="one integer array"):
        jc.jit(lambda x, i: x[i, i])(x, np.array([0]))


# ---- concatenate, stack, split ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_concatenate_every_axis_and_shape_class(dtype):
    rng = rng_for("concat", dtype)
    a = make((3, 4, 5), dtype, rng=rng)
    for axis in (0, 1, 2, -1, -2):
        shape = list(a.shape)
        shape[axis] = 2
        b_ = make(tuple(shape), dtype, rng=rng)
        shape[axis] = 0
        e = np.zeros(shape, dtype)
        _all(lambda c, a, b, e: np.concatenate([a, b, e, a][c:], axis=axis), [0, 1], a, b_, e)
    _check(jc.jit(lambda a, b: jc.concatenate((a, b), axis=None))(a, a[0]),
           np.concatenate((a, a[0]), axis=None))
    _check(jc.jit(lambda a: jc.concatenate([a]))(a[0]), a[0])
    v = make((7,), dtype, rng=rng)
    _check(jc.concatenate([v, v[::-2], v[:0]]), np.concatenate([v, v[::-2], v[:0]]))


@pytest.mark.parametrize("view", range(4))
def test_concatenate_views_and_promotion(view):
    rng = rng_for("concat views", view)
    a = list(_views(make((6, 8), F32, rng=rng)))[view]
    b_ = make(a.shape, np.int32, rng=rng)
    _check(jc.jit(lambda a, b: jc.concatenate([a, b], axis=1))(a, b_),
           np.concatenate([a, b_], axis=1))
    c = make(a.shape, np.uint8, rng=rng)
    _check(jc.jit(lambda a, c: np.concatenate([a > 0.5, c]))(a, c),
           np.concatenate([a > 0.5, c]))


def test_concatenate_of_elementwise_expressions_is_one_kernel_writing_both_halves():
    rng = rng_for("concat fused")
    a, b_, y = (make((64, 40), F32, rng=rng, positive=True) for _ in range(3))
    f = jc.jit(lambda a, b, y: jc.exp(jc.concatenate([a + 1, b * 2], axis=0)) * 2
               + jc.concatenate([y, y], axis=0))
    ref = np.exp(np.concatenate([a + 1, b_ * 2], axis=0).astype(np.float64)) * 2 \
        + np.concatenate([y, y], axis=0)
    np.testing.assert_allclose(f(a, b_, y), ref, rtol=4e-6)
    ks = f.kernels(a, b_, y)
    assert len(ks) == 1 and ks[0].vectorized, ks
    assert ks[0].ops.count("exp") == 2 and "concat" in ks[0].ops
    g = jc.jit(lambda a, b: jc.concatenate([a, jc.sqrt(b)], axis=1))
    ks = g.kernels(a, b_)
    assert len(ks) == 1 and ks[0].vectorized, ks


def test_concatenate_read_by_a_reduction_and_by_two_readers():
    rng = rng_for("concat readers")
    a, b_ = make((9, 5), F64, rng=rng), make((4, 5), F64, rng=rng)
    f = jc.jit(lambda a, b: (lambda c: (c.sum(axis=0), c * 2, jc.exp(c)))(
        jc.concatenate([a, b - 1])))
    c = np.concatenate([a, b_ - 1])
    for got, ref in zip(f(a, b_), (c.sum(axis=0), c * 2, np.exp(c))):
        np.testing.assert_allclose(got, ref, rtol=1e-14)


def test_concatenate_errors():
    a = np.zeros((2, 3))
    with pytest.raises(jc.ShapeError, match="concatenate"):
        jc.concatenate([a, np.zeros((2, 4))], axis=0)
    with pytest.raises(jc.ShapeError, match="concatenate"):
        jc.concatenate([a, np.zeros(3)])
    with pytest.raises(jc.ShapeError, match="axis 2"):
        jc.concatenate([a, a], axis=2)
    with pytest.raises(jc.ShapeError, match="zero-dimensional"):
        jc.concatenate([np.float64(1.0), np.float64(2.0)])
    with pytest.raises(jc.ShapeError):
        jc.concatenate([])
    with pytest.raises(ValueError):            # ShapeError is a ValueError, as numpy's
        jc.jit(lambda a: np.concatenate([a, a.T]))(a)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_stack_every_axis(dtype):
    rng = rng_for("stack", dtype)
    xs = [make((3, 4), dtype, rng=rng) for _ in range(3)]
    _all(lambda axis, a, b, c: np.stack([a, b, c], axis=axis), [0, 1, 2, -1, -3], *xs)
    _check(jc.jit(lambda a, b: jc.stack([a, b], axis=1))(*xs[:2]), np.stack(xs[:2], axis=1))
    s = [make((), dtype, rng=rng) for _ in range(2)]
    _check(jc.stack(s), np.stack(s))
    _check(jc.jit(lambda a, b: np.stack([a, b.T], axis=-1))(xs[0], xs[1].T),
           np.stack([xs[0], xs[1]], axis=-1))


def test_stack_errors():
    with pytest.raises(jc.ShapeError, match="same shape"):
        jc.stack([np.zeros(3), np.zeros(4)])
    with pytest.raises(jc.ShapeError, match="stack"):
        jc.stack([np.zeros(3), np.zeros(3)], axis=2)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_split_sections_and_indices(dtype):
    rng = rng_for("split", dtype)
    x = make((6, 8, 3), dtype, rng=rng)
    specs = ((2, 0), (4, 1), (1, -1), ([1, 4], 0), ([-2, 10, 3], 1), ([], 2), ([0, 0, 8], 1),
             (np.array([2, 5]), -2))
    flat = jc.jit(lambda x: [p for spec, axis in specs for p in jc.split(x, spec, axis=axis)])(x)
    flat = list(flat)
    for spec, axis in specs:
        ref = np.split(x, spec, axis=axis)
        parts, flat = flat[:len(ref)], flat[len(ref):]
        assert len(parts) == len(ref)
        for g, r in zip(parts, ref):
            _check(g, r)
    for spec, axis in specs[2:4]:
        ref = np.split(x, spec, axis=axis)
        eager = jc.split(x, spec, axis=axis)
        assert isinstance(eager, tuple) and len(eager) == len(ref)
        for g, r in zip(eager, ref):
            _check(g, r)
    parts = jc.jit(lambda x: [p * 2 for p in np.split(x, 3)])(x[:, 0, 0].astype(F64))
    for g, r in zip(parts, np.split(x[:, 0, 0].astype(F64) * 2, 3)):
        _check(g, r)


def test_split_errors():
    x = np.zeros((6, 4))
    with pytest.raises(jc.ShapeError, match="equal division"):
        jc.split(x, 4)
    with pytest.raises(ValueError, match="equal division"):
        jc.jit(lambda x: np.split(x, 3, axis=1))(x)
    with pytest.raises(ValueError, match="larger than 0"):
        jc.split(x, 0)
    with pytest.raises(jc.ShapeError, match="axis 2"):
        jc.split(x, 2, axis=2)


# ---- pad -------------------------------------------------------------------------------------------

PAD_WIDTHS = [1, (2,), (1, 3), ((0, 2), (3, 0), (1, 1)), ((0, 0), (0, 0), (0, 0))]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_pad_constant_every_width_form(dtype):
    rng = rng_for("pad", dtype)
    x = make((3, 4, 5), dtype, rng=rng)
    cases = [(w, 1) for w in PAD_WIDTHS] + [(w, ((1, 0), (1, 1), (0, 1))) for w in PAD_WIDTHS[2:4]]
    _all(lambda c, x: np.pad(x, c[0], constant_values=c[1]), cases, x)
    if dtype not in (F32, BOOL):
        return                         # eager calls, 0-d, empty and views: two dtypes
    _check(jc.pad(x, (1, 2), constant_values=3), np.pad(x, (1, 2), constant_values=3))
    _check(jc.pad(x[0, 0], 2, constant_values=7), np.pad(x[0, 0], 2, constant_values=7))
    e = np.zeros((0, 2), dtype)
    _check(jc.pad(e, 1), np.pad(e, 1))
    for v in (x.transpose(2, 0, 1)[::-1], np.broadcast_to(x[:1], x.shape)):
        _check(jc.pad(v, ((1, 0), (0, 2), (1, 1))), np.pad(v, ((1, 0), (0, 2), (1, 1))))


@pytest.mark.parametrize("mode", ["edge", "reflect"])
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_pad_edge_and_reflect(mode, dtype):
    rng = rng_for("pad", mode, dtype)
    x = make((4, 5, 6), dtype, rng=rng)
    _all(lambda width, x: np.pad(x, width, mode=mode),
         [(1, 3), ((0, 2), (3, 0), (1, 1)), ((3, 3), (4, 4), (5, 5))], x)
    _check(jc.pad(x[:1, :1, :1], 2, mode=mode), np.pad(x[:1, :1, :1], 2, mode=mode))


@pytest.mark.parametrize("dtype", [F32, I32], ids=dtype_id)
def test_reflect_pad_as_wide_as_the_axis_or_wider_reflects_again_as_numpy(dtype):
    """numpy reflects a pad of extent or more again and again (issue 27: it was refused)."""
    x = make((3, 4), dtype, rng=rng_for("wide reflect", dtype))
    _all(lambda width, x: np.pad(x, width, mode="reflect"),
         [3, ((5, 4), (0, 0)), ((1, 1), (7, 2)), ((2, 9), (3, 3)), ((0, 0), (4, 11))], x)
    f = jc.jit(lambda a: jc.pad(a * 2, ((4, 0), (9, 1)), mode="reflect") + 1)
    _check(f(x), np.pad(x * 2, ((4, 0), (9, 1)), mode="reflect") + 1)


def test_pad_fused_with_elementwise_before_and_after_in_one_pass():
    rng = rng_for("pad fused")
    x = make((30, 40), F32, rng=rng)
    f = jc.jit(lambda x: jc.pad(x * 2 + 1, ((1, 2), (3, 4))) * 3)
    _check(f(x), np.pad(x * 2 + 1, ((1, 2), (3, 4))) * 3)
    ks = f.kernels(x)
    # x * 2 + 1 computed once, in the kernel of x's region; the border is a constant fill
    # (its left and right runs of 3 and 4 columns are shorter than an AVX2 vector)
    assert sum("add" in k.ops for k in ks) == 1, ks
    for k in ks:
        assert_vector_code(k, lanes(F32))
    assert sum(k.bytes for k in ks) < 4 * (x.nbytes + 33 * 47 * 4)   # each region once


def test_pad_errors():
    x = np.zeros((3, 4))
    with pytest.raises(ValueError, match="negative"):
        jc.pad(x, -1)
    with pytest.raises(jc.ShapeError, match="pad_width"):
        jc.pad(x, ((1, 2, 3),))
    with pytest.raises(jc.ShapeError, match="empty axis"):
        jc.pad(np.zeros((0, 2)), 1, mode="edge")
    with pytest.raises(jc.TraceError, match="wrap"):
        jc.pad(x, 1, mode="wrap")


# ---- clip ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_clip_bounds_none_arrays_and_broadcasts(dtype):
    rng = rng_for("clip", dtype)
    x = make((5, 7), dtype, rng=rng)
    lo, hi = (int(np.percentile(x, 25)), int(np.percentile(x, 75)))
    lo_row = make((7,), dtype, rng=rng)
    hi_col = make((5, 1), dtype, rng=rng)
    cases = [(lo, hi), (lo, None), (None, hi), (hi, lo), (lo_row, hi_col), (lo_row, None)]
    if dtype.kind == "f":
        cases += [(0.25, 0.5), (np.float32(-0.5), np.float64(0.5))]
    _all(lambda c, x: np.clip(x, *c), cases, x)
    _all(lambda c, x: np.clip(x * 3, *c) + 1 if dtype != np.uint8 else np.clip(x, *c) + 1,
         cases[:2], x)
    for a_min, a_max in cases[-2:]:
        _check(jc.clip(x, a_min, a_max), np.clip(x, a_min, a_max))          # eager
    _check(jc.jit(lambda x, l, h: x.clip(l, h))(x, lo_row, hi_col), x.clip(lo_row, hi_col))
    _check(jc.jit(lambda x: x.clip(max=hi))(x), x.clip(max=hi))
    _check(jc.clip(x, None, None), np.clip(x, None, None))
    s = x[0, 0]
    _check(jc.clip(s, lo, hi), np.clip(s, lo, hi))
    for v in (x[:0], x.T[::2], np.broadcast_to(x[:1], x.shape)):       # empty, views
        _check(jc.clip(v, lo, hi), np.clip(v, lo, hi))


@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
def test_clip_nan_rules(dtype):
    x = np.array([np.nan, -1.0, 0.3, 2.0, np.inf, -np.inf], dtype)
    for a_min, a_max in ((0.0, 1.0), (np.nan, 1.0), (0.0, np.nan), (1.0, 0.0)):
        _check(jc.clip(x, a_min, a_max), np.clip(x, a_min, a_max))
    bounds = np.array([0.0, np.nan, 0.0, 0.0, np.nan, 0.0], dtype)
    _check(jc.clip(x, bounds, 1.0), np.clip(x, bounds, 1.0))


def test_clip_is_one_fused_vectorized_kernel():
    x = make((64, 64), F32, rng=rng_for("clip kernel"))
    ks = jc.jit(lambda x: jc.clip(x * 2, -0.5, 0.5) + 1).kernels(x)
    assert len(ks) == 1 and ks[0].vectorized and ks[0].ops.count("maximum") == 1, ks


# ---- cumsum ----------------------------------------------------------------------------------------

def _cumsum_dtype(dtype):
    """numpy's, with the documented uint8 -> uint64 -> int64 deviation."""
    return np.dtype(np.int64) if np.dtype(dtype) == np.uint8 else np.cumsum(np.zeros(1, dtype)).dtype


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
def test_cumsum_every_axis_exact(dtype):
    rng = rng_for("cumsum", dtype)
    x = make((4, 5, 37), dtype, rng=rng)
    axes = (None, 0, 1, 2, -1, -2)
    got = jc.jit(lambda x: [jc.cumsum(x, axis=axis) for axis in axes])(x)
    for g, axis in zip(got, axes):
        # floats too: each running sum adds in numpy's order
        _check(g, np.cumsum(x, axis=axis).astype(_cumsum_dtype(dtype)))
    shapes = ((), (0,), (3, 0), (1, 6), (6, 1))
    ys = [make(shape, dtype, rng=rng) for shape in shapes]
    got = jc.jit(lambda *ys: [z for y in ys for z in (jc.cumsum(y),
                                                      jc.cumsum(y, axis=-1) if y.ndim else y)])(*ys)
    for g, g_last, y in zip(got[::2], got[1::2], ys):
        _check(g, np.cumsum(y).astype(_cumsum_dtype(dtype)))
        if y.ndim:
            _check(g_last, np.cumsum(y, axis=-1).astype(_cumsum_dtype(dtype)))
    _check(jc.cumsum(x, axis=1), np.cumsum(x, axis=1).astype(_cumsum_dtype(dtype)))  # eager


@pytest.mark.parametrize("view", range(4))
def test_cumsum_of_views_fused_before_and_after(view):
    rng = rng_for("cumsum views", view)
    x = list(_views(make((40, 24), F64, rng=rng)))[view]
    for axis in (0, 1):
        f = jc.jit(lambda x: jc.cumsum(x * 2 - 1, axis=axis) * 0.5)
        _check(f(x), np.cumsum(x * 2 - 1, axis=axis) * 0.5)
        _check(jc.jit(lambda x: np.cumsum(x, axis=axis))(x), np.cumsum(x, axis=axis))
        _check(jc.jit(lambda x: x.cumsum(axis))(x), x.cumsum(axis))
    _check(jc.jit(lambda x: x.cumsum(dtype=np.float32))(x), x.cumsum(dtype=np.float32))


def test_cumsum_kernels_scan_in_order_and_vectorize_across_rows():
    x = make((64, 48), F32, rng=rng_for("cumsum kernels"))
    k0, = jc.jit(lambda x: jc.cumsum(x + 1, axis=0)).kernels(x)
    assert k0.kind == "scan" and k0.vectorized and "add" in k0.ops, k0
    k1, = jc.jit(lambda x: jc.cumsum(x, axis=1)).kernels(x)
    assert k1.kind == "scan" and not k1.vectorized and k1.reason == "sequential_scan"


def test_cumsum_float32_accuracy_against_float64():
    """float32 running sums accumulate in float32, in order, as numpy's: the error of the
    k-th sum is at most about k * eps * sum(|x[:k]|) (observed: far below)."""
    rng = rng_for("cumsum accuracy")
    x = rng.standard_normal((8, 4096)).astype(np.float32)
    for axis in (0, 1):
        got = jc.cumsum(x.T if axis == 0 else x, axis=axis)
        ref = np.cumsum((x.T if axis == 0 else x).astype(np.float64), axis=axis)
        bound = np.cumsum(np.abs(x.T if axis == 0 else x).astype(np.float64), axis=axis)
        n = np.arange(1, x.shape[1] + 1)
        n = n[:, None] if axis == 0 else n[None, :]
        assert np.all(np.abs(got - ref) <= n * np.finfo(np.float32).eps * bound)
        np.testing.assert_array_equal(got, np.cumsum(x.T if axis == 0 else x, axis=axis))


def test_cumsum_errors():
    with pytest.raises(jc.ShapeError, match="cumsum: axis 2"):
        jc.cumsum(np.zeros((2, 3)), axis=2)
    with pytest.raises(jc.ShapeError, match="cumsum"):
        jc.cumsum(np.float64(1.0), axis=0)


# ---- threads ---------------------------------------------------------------------------------------

def test_one_and_two_threads_give_identical_bits():
    rng = rng_for("threads")
    W = make((3000, 64), F32, rng=rng)
    ids = rng.integers(-3000, 3000, (40, 30))
    x = make((600, 300), F64, rng=rng)

    def program(W, ids, x):
        e = W[ids].sum(axis=1)
        c = jc.concatenate([x * 2, jc.exp(x)], axis=1)
        return (e, jc.cumsum(c, axis=0), jc.cumsum(x, axis=1), jc.pad(x, 3, mode="edge"),
                jc.clip(x, 0.2, 0.7), jc.split(c, 3, axis=0)[1] + 1)
    f = jc.jit(program)
    saved = jc.get_num_threads()
    try:
        outs = []
        for n in (1, 2):
            jc.set_num_threads(n)
            outs.append(f(W, ids, x))
    finally:
        jc.set_num_threads(saved)
    for a, b_ in zip(*outs):
        np.testing.assert_array_equal(a, b_)
    np.testing.assert_allclose(outs[0][0], W[ids].sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[0][1], np.cumsum(np.concatenate([x * 2, np.exp(x)],
                                                                    axis=1), axis=0), rtol=1e-13)

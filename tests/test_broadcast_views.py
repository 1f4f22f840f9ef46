"""Broadcasting, views (reshape, transpose, expand_dims, squeeze, broadcast_to, basic slicing),
non-contiguous inputs, empty arrays and size-1 dims, all compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import BOOL, F32, F64, I32, U8, assert_close, f64, make, rng_for


def shape_id(s):
    return "x".join(map(str, s)) if s else "scalar"


# ---- broadcasting ------------------------------------------------------------------------------

BROADCAST_PAIRS = [
    ((4, 1), (1, 5)),
    ((1, 5), (4, 1)),
    ((3, 1, 5), (4, 5)),
    ((4, 5), (3, 1, 5)),
    ((5,), (3, 1)),
    ((), (4, 3)),
    ((4, 3), ()),
    ((1,), (7,)),
    ((2, 3, 1, 4), (3, 5, 1)),
    ((1, 1), (1,)),
    ((33, 1), (1, 65)),
    ((1, 1, 5), (5, 1, 1)),
    ((17, 1, 3), (1, 9, 1)),
]


@jc.jit
def fma_like(a, b):
    return a * b + a - b


@pytest.mark.parametrize("dtype", [F32, I32], ids=lambda d: d.name)
@pytest.mark.parametrize("sa, sb", BROADCAST_PAIRS,
                         ids=[f"{shape_id(a)}+{shape_id(b)}" for a, b in BROADCAST_PAIRS])
def test_broadcast_binary(sa, sb, dtype):
    rng = rng_for("bcast", sa, sb, dtype.name)
    a, b = make(sa, dtype, rng=rng), make(sb, dtype, rng=rng)
    got = fma_like(a, b)
    if dtype.kind != "f":
        assert_close(got, a * b + a - b, dtype)
        return
    x, y = f64(a), f64(b)
    # a*b + a - b cancels: its rounding errors are relative to the terms
    assert_close(got, x * y + x - y, dtype, scale=np.abs(x * y) + np.abs(x) + np.abs(y))


def test_broadcast_three_way_where():
    rng = rng_for("where3")
    c = make((4, 1, 1), BOOL, rng=rng)
    x = make((1, 3, 1), F32, rng=rng)
    y = make((5,), F64, rng=rng)
    got = jc.jit(lambda c, x, y: jc.where(c, x, y))(c, x, y)
    assert_close(got, np.where(c, x, y), F64, exact=True)


def test_scalar_and_zero_d_inputs():
    x = make((3, 4), F32, rng=rng_for("0d"))
    f = jc.jit(lambda x, s: x * s + 2.0)
    got = f(x, np.array(1.5, np.float32))
    assert_close(got, f64(x) * 1.5 + 2.0, F32)
    # a 0-d array alone: 0-d result
    g = jc.jit(lambda s: s * 2 + 1)
    r = g(np.array(3.0))
    assert isinstance(r, np.ndarray) and r.shape == () and r.dtype == F64 and r == 7.0
    # numpy scalars and Python scalars as arguments become 0-d arrays (np.asarray)
    assert_close(g(np.float32(3.0)), np.array(7.0, np.float32), F32, exact=True)
    assert_close(g(3.0), np.array(7.0), F64, exact=True)
    assert_close(g(3), np.array(7), np.int64)


def test_incompatible_broadcast_is_a_shape_error():
    f = jc.jit(lambda a, b: a + b)
    with pytest.raises(jc.ShapeError):
        f(np.ones(3, np.float32), np.ones(4, np.float32))
    with pytest.raises(ValueError):          # ShapeError is a ValueError too, as in numpy
        f(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32))


# ---- reshape / transpose / expand_dims / squeeze / broadcast_to --------------------------------

RESHAPES = [
    ((24,), (2, 3, 4)),
    ((24,), (4, -1)),
    ((2, 3, 4), (6, 4)),          # merge
    ((2, 3, 4), (2, 12)),
    ((6, 4), (2, 3, 2, 2)),       # split
    ((2, 3, 4), (-1,)),
    ((2, 3, 4), (3, 2, 4)),       # neither a merge nor a split of axes
    ((1, 5, 1), (5,)),
    ((5,), (1, 5, 1)),
    ((7, 9), (9, 7)),
]


@pytest.mark.parametrize("src, dst", RESHAPES, ids=[f"{shape_id(a)}->{shape_id(b)}"
                                                    for a, b in RESHAPES])
def test_reshape(src, dst):
    x = make(src, F32, rng=rng_for("reshape", src, dst))
    ref = x.reshape(dst)
    for f in (jc.jit(lambda x: x.reshape(dst) * 2.0),
              jc.jit(lambda x: jc.reshape(x, dst) * 2.0),
              jc.jit(lambda x: np.reshape(x, dst) * 2.0)):
        assert_close(f(x), f64(ref) * 2.0, F32, exact=True)


def test_reshape_method_varargs_and_of_non_contiguous_views():
    x = make((6, 4), F32, rng=rng_for("reshape-va"))
    assert_close(jc.jit(lambda x: x.reshape(3, -1) + 0.0)(x), x.reshape(3, -1), F32, exact=True)
    # reshape of a transposed view: numpy copies; the values must be those of the copy
    assert_close(jc.jit(lambda x: x.T.reshape(-1) + 0.0)(x), x.T.reshape(-1), F32, exact=True)
    assert_close(jc.jit(lambda x: x[:, ::2].reshape(3, 4) + 0.0)(x), x[:, ::2].reshape(3, 4),
                 F32, exact=True)
    assert_close(jc.jit(lambda x: x[::-1].T.reshape(2, 12) + 0.0)(x),
                 x[::-1].T.reshape(2, 12), F32, exact=True)


def test_reshape_errors():
    x = np.ones(24, np.float32)
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: x.reshape(5, 5))(x)
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: x.reshape(-1, -1))(x)
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: x.reshape(7, -1))(x)


PERMS = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0), (-1, 0, 1)]


@pytest.mark.parametrize("perm", PERMS, ids=lambda p: "".join(map(str, p)))
def test_transpose_3d(perm):
    x = make((3, 4, 5), F32, rng=rng_for("perm", perm))
    ref = np.transpose(x, perm)
    for f in (jc.jit(lambda x: x.transpose(perm) + 1.0),
              jc.jit(lambda x: x.transpose(*perm) + 1.0),
              jc.jit(lambda x: jc.transpose(x, perm) + 1.0),
              jc.jit(lambda x: np.transpose(x, perm) + 1.0)):
        assert_close(f(x), f64(ref) + 1.0, F32)


@pytest.mark.parametrize("shape", [(1, 1), (5, 7), (33, 65), (1, 17), (16, 1)], ids=shape_id)
def test_transpose_2d(shape):
    x = make(shape, F64, rng=rng_for("t2", shape))
    for f in (jc.jit(lambda x: x.T * 3.0), jc.jit(lambda x: jc.transpose(x) * 3.0),
              jc.jit(lambda x: np.transpose(x) * 3.0), jc.jit(lambda x: x.transpose() * 3.0)):
        assert_close(f(x), x.T * 3.0, F64, exact=True)


def test_numpy_integer_axes_in_views():
    """np.int64 axes (from numpy code) work as Python ints do in numpy."""
    x = make((1, 3, 4), F32, rng=rng_for("np-int-axes"))
    i0, i1, i2 = np.int64(0), np.int64(1), np.int64(2)
    f = jc.jit(lambda x: (x.transpose(i2, i0, i1) + 0.0, jc.expand_dims(x, i1) + 0.0,
                          jc.squeeze(x, i0) + 0.0, np.transpose(x, (i1, i0, i2)) + 0.0))
    refs = (x.transpose(2, 0, 1), np.expand_dims(x, 1), np.squeeze(x, 0), x.transpose(1, 0, 2))
    for g, r in zip(f(x), refs):
        assert_close(g, r, F32, exact=True)


def test_transpose_bad_perm():
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: x.transpose(0, 0, 1))(x)
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: x.transpose(0, 1))(x)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, (0, 2), (0, 1), (-1, 0)], ids=str)
def test_expand_dims(axis):
    x = make((3, 4), F32, rng=rng_for("ed", axis))
    ref = np.expand_dims(x, axis)
    for f in (jc.jit(lambda x: jc.expand_dims(x, axis) - 1.0),
              jc.jit(lambda x: np.expand_dims(x, axis) - 1.0)):
        assert_close(f(x), f64(ref) - 1.0, F32)


@pytest.mark.parametrize("axis", [None, 0, 2, (0, 2), -1, (0, -1)], ids=str)
def test_squeeze(axis):
    x = make((1, 3, 1, 4, 1), F32, rng=rng_for("sq", axis))
    ref = np.squeeze(x, axis)
    for f in (jc.jit(lambda x: jc.squeeze(x, axis) * 2.0),
              jc.jit(lambda x: np.squeeze(x, axis) * 2.0)):
        assert_close(f(x), f64(ref) * 2.0, F32, exact=True)


def test_squeeze_of_non_unit_axis_is_a_shape_error():
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: jc.squeeze(x, 1))(np.ones((1, 3), np.float32))


@pytest.mark.parametrize("src, dst", [((5,), (3, 5)), ((3, 1), (3, 4)), ((1,), (2, 3)),
                                      ((), (4,)), ((2, 1, 3), (4, 2, 5, 3)), ((3, 4), (3, 4))],
                         ids=lambda s: shape_id(s))
def test_broadcast_to(src, dst):
    x = make(src, F32, rng=rng_for("bt", src, dst))
    ref = np.broadcast_to(x, dst)
    for f in (jc.jit(lambda x: jc.broadcast_to(x, dst) + 0.5),
              jc.jit(lambda x: x.broadcast_to(dst) + 0.5),
              jc.jit(lambda x: np.broadcast_to(x, dst) + 0.5)):
        assert_close(f(x), f64(ref) + 0.5, F32)
    # a broadcast view returned as is must be a real array with numpy's values
    got = jc.jit(lambda x: jc.broadcast_to(x, dst))(x)
    assert_close(got, ref, F32, exact=True)


def test_broadcast_to_errors():
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: jc.broadcast_to(x, (3, 4)))(np.ones(5, np.float32))
    with pytest.raises(jc.ShapeError):
        jc.jit(lambda x: jc.broadcast_to(x, (3,)))(np.ones((2, 3), np.float32))


# ---- basic slicing ---------------------------------------------------------------------------

class _Idx:
    def __getitem__(self, item):
        return item


IDX = _Idx()
INDICES_1D = [IDX[1:5], IDX[::2], IDX[::-1], IDX[5:1:-2], IDX[-3:], IDX[:-1], IDX[::-3],
              IDX[3], IDX[-1], IDX[None], IDX[None, ::2], IDX[...], IDX[3:3], IDX[100:],
              IDX[-100:2], IDX[1::7]]
INDICES_3D = [IDX[:, ::2], IDX[1], IDX[1, :], IDX[-1, ::-1], IDX[..., 1], IDX[1, ..., ::-1],
              IDX[:, None, 2:], IDX[None, ..., None], IDX[::-1, ::-2, ::3], IDX[1:, -2, 1:4],
              IDX[0, 0, 0], IDX[-1, -1], IDX[..., None], IDX[2:0:-1, :, -1:]]


def _idx_id(ix):
    def one(i):
        if isinstance(i, slice):
            return ":".join("" if v is None else str(v) for v in (i.start, i.stop, i.step))
        return {None: "None", Ellipsis: "..."}.get(i, str(i)) if not isinstance(i, int) else str(i)
    return "[" + ",".join(one(i) for i in (ix if isinstance(ix, tuple) else (ix,))) + "]"


@pytest.mark.parametrize("index", INDICES_1D, ids=_idx_id)
def test_slicing_1d(index):
    x = make(17, F32, rng=rng_for("s1"))
    got = jc.jit(lambda x: x[index] * 2.0)(x)
    assert_close(got, f64(x[index]) * 2.0, F32, exact=True)


@pytest.mark.parametrize("index", INDICES_3D, ids=_idx_id)
def test_slicing_3d(index):
    x = make((4, 5, 6), F64, rng=rng_for("s3"))
    got = jc.jit(lambda x: x[index] + 1.0)(x)
    assert_close(got, x[index] + 1.0, F64, exact=True)
    # returned without an op on top: the view materialized as an array
    assert_close(jc.jit(lambda x: x[index])(x), x[index], F64, exact=True)


def test_index_errors():
    x = np.ones((3, 4), np.float32)
    with pytest.raises((jc.ShapeError, IndexError)):
        jc.jit(lambda x: x[3])(x)
    with pytest.raises((jc.ShapeError, IndexError)):
        jc.jit(lambda x: x[0, 0, 0])(x)
    with pytest.raises(jc.TraceError):   # one integer array index is a gather; two are not
        jc.jit(lambda x: x[[0, 2], [1, 0]])(x)
    with pytest.raises(jc.TraceError):
        jc.jit(lambda x: x[x > 0])(x)


def test_setitem_is_a_trace_error():
    def f(x):
        x[0] = 1.0
        return x
    with pytest.raises(jc.TraceError):
        jc.jit(f)(np.ones(3, np.float32))


# ---- chains of views into elementwise ops ----------------------------------------------------

CHAINS = {
    "T-slice-add": lambda x, y: x.T[::2, 1:] + y[1:, ::-1].T[::2] + 1.0,
    "reshape-T-mul": lambda x, y: x.reshape(4, 3, 5).transpose(2, 0, 1)[::-1] * y.reshape(5, 4, 3),
    "slice-reshape-bcast": lambda x, y: x[:4, 1:4].reshape(12, 1) - y[0, :3],
    "expand-squeeze-T": lambda x, y: np.squeeze(np.expand_dims(x, 0)).T + y.T,
    "neg-step-reshape": lambda x, y: (x[::-1, ::-1].reshape(-1)[::3] + y.reshape(-1)[::3]),
    "bcast-then-slice": lambda x, y: np.broadcast_to(y[:1], (12, 5))[::2, ::-2] * x[::2, ::-2],
    "index-none-ellipsis": lambda x, y: x[None, ..., 2] + y[..., None, 2],
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_view_chains(name):
    fn = CHAINS[name]
    rng = rng_for("chain", name)
    x, y = make((12, 5), F32, rng=rng), make((12, 5), F32, rng=rng)
    ref = fn(f64(x), f64(y))
    assert_close(jc.jit(fn)(x, y), ref, F32, msg=name)


# a reversed or offset slice of a reshape: the index of the source element is a floor division
# / modulo of an expression that goes negative (found by the random integer programs)
RESHAPE_SLICES = [((2, 2, 2), (4, 2), (slice(2, None, -1), slice(0, 2))),
                  ((2, 2, 2), (4, 2), (slice(None, None, -1),)),
                  ((3, 4), (2, 6), (slice(None, None, -1), slice(None, None, -2))),
                  ((2, 3, 4), (6, 4), (slice(4, 0, -3), slice(3, None, -1))),
                  ((2, 3, 4), (4, 6), (slice(None, None, -1), slice(1, None, 2))),
                  ((12,), (3, 4), (slice(None, None, -1), slice(None, None, -1))),
                  ((5, 6), (3, 10), (slice(2, None, -2), slice(7, 1, -3)))]


@pytest.mark.parametrize("src, dst, index", RESHAPE_SLICES,
                         ids=[f"{shape_id(s)}-{shape_id(d)}" for s, d, _ in RESHAPE_SLICES])
def test_reversed_slice_of_reshape(src, dst, index):
    x = np.arange(np.prod(src), dtype=np.int32).reshape(src)
    fn = jc.jit(lambda a: a.reshape(dst)[index])
    assert_close(fn(x), x.reshape(dst)[index], I32, exact=True)
    assert_close(fn(x[::-1]), x[::-1].reshape(dst)[index], I32, exact=True)


# ---- non-contiguous inputs -----------------------------------------------------------------------

def _inputs(kind, shape=(9, 12)):
    base = make((shape[0] * 2, shape[1] * 2), F32, rng=rng_for("nc", kind))
    if kind == "contiguous":
        return np.ascontiguousarray(base[: shape[0], : shape[1]])
    if kind == "col-step":
        return base[: shape[0], ::2]
    if kind == "row-step":
        return base[::2, : shape[1]]
    if kind == "transposed":
        return np.ascontiguousarray(base[: shape[1], : shape[0]]).T
    if kind == "reversed":
        return base[: shape[0], : shape[1]][::-1]
    if kind == "both-reversed":
        return base[shape[0] - 1::-1, shape[1] * 2 - 1::-2]
    if kind == "fortran":
        return np.asfortranarray(base[: shape[0], : shape[1]])
    if kind == "broadcast-stride0":
        return np.broadcast_to(base[0, : shape[1]], shape)
    if kind == "readonly":
        a = np.ascontiguousarray(base[: shape[0], : shape[1]])
        a.flags.writeable = False
        return a
    raise ValueError(kind)


NONCONTIG = ["contiguous", "col-step", "row-step", "transposed", "reversed", "both-reversed",
             "fortran", "broadcast-stride0", "readonly"]

NC_FUNCS = {
    "elementwise": lambda x, y: np.maximum(x * 2.0 - y, 0.5),
    "transpose": lambda x, y: x.T * y.T,
    "slice": lambda x, y: x[1:, ::-2] + y[:-1, 1::2],
    "reshape": lambda x, y: x.reshape(-1) + y.reshape(-1),
    "reduce": lambda x, y: (x * y).sum(axis=1) + x.max(axis=0).sum(),
}
# The magnitude each result's rounding errors are relative to (the terms that cancel; sums of
# 12 terms times sqrt(12)), from |x| and |y|.
NC_SCALES = {
    "elementwise": lambda x, y: 2 * x + y,
    "transpose": lambda x, y: None,
    "slice": lambda x, y: x[1:, ::-2] + y[:-1, 1::2],
    "reshape": lambda x, y: x.reshape(-1) + y.reshape(-1),
    "reduce": lambda x, y: ((x * y).sum(axis=1) + x.max(axis=0).sum()) * np.sqrt(12),
}


@pytest.mark.parametrize("func", list(NC_FUNCS))
@pytest.mark.parametrize("kind", NONCONTIG)
def test_non_contiguous_inputs(kind, func):
    fn = NC_FUNCS[func]
    x = _inputs(kind)
    y = _inputs("contiguous")
    assert x.shape == (9, 12)
    ref = fn(f64(x), f64(y))
    scale = NC_SCALES[func](np.abs(f64(x)), np.abs(f64(y)))
    got = jc.jit(fn)(x, y)
    assert_close(got, ref, F32, scale=scale, msg=f"{func} on {kind}")
    # the same jitted function, called with another layout of the same shape
    f = jc.jit(fn)
    assert_close(f(y, x), fn(f64(y), f64(x)), F32,
                 scale=NC_SCALES[func](np.abs(f64(y)), np.abs(f64(x))))
    assert_close(f(np.ascontiguousarray(x), y), ref, F32, scale=scale)


def test_one_function_many_layouts():
    """One jitted function, called with several layouts of one shape, in turn and again."""
    f = jc.jit(lambda x: x * 2.0 + 1.0)
    kinds = ["contiguous", "transposed", "reversed", "col-step", "fortran", "contiguous",
             "reversed"]
    for kind in kinds:
        x = _inputs(kind)
        assert_close(f(x), f64(x) * 2.0 + 1.0, F32, msg=kind)


def test_non_contiguous_uint8_and_bool():
    base = make((10, 10), U8, rng=rng_for("u8nc"))
    m = make((10, 10), BOOL, rng=rng_for("bnc"))
    f = jc.jit(lambda x, m: jc.where(m, x, x + 1))
    got = f(base[::-2, 1::3], m.T[::-2, 1::3])
    assert_close(got, np.where(m.T[::-2, 1::3], base[::-2, 1::3], base[::-2, 1::3] + 1), U8)


# ---- empty arrays and size-1 dims ----------------------------------------------------------------

@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5), (2, 0, 3)], ids=shape_id)
def test_empty_elementwise(shape):
    x = np.zeros(shape, np.float32)
    got = jc.jit(lambda x: jc.exp(x) * 2.0 + x)(x)
    assert got.shape == shape and got.dtype == F32


@pytest.mark.parametrize("src, dst", [((0, 2), (0,)), ((2, 0), (0,)), ((0, 3), (3, 0)),
                                      ((2, 0, 3), (0, 2, 3)), ((0,), (0, 5))], ids=str)
def test_reshape_of_empty_arrays(src, dst):
    """The reshape index divided by a zero stride, loop merging by a zero extent (found by
    the fuzzer)."""
    x = np.zeros(src, np.float32)
    got = jc.jit(lambda a: a.reshape(dst) + 1)(x)
    assert got.shape == dst and got.dtype == np.float32
    assert_close(jc.jit(lambda a: a.reshape(dst).sum())(x), 0.0, F32, exact=True)
    assert_close(jc.jit(lambda a: a.reshape(dst).sum(axis=0))(x), x.reshape(dst).sum(axis=0),
                 F32, exact=True)


def test_empty_views_and_broadcast():
    x = np.zeros((3, 0), np.float32)
    f = jc.jit(lambda x: x.T[::-1] + 1.0)
    assert f(x).shape == (0, 3)
    g = jc.jit(lambda a, b: a + b)
    assert g(np.zeros((0, 1), np.float32), np.ones((1, 4), np.float32)).shape == (0, 4)
    h = jc.jit(lambda x: x[2:2] * 3.0)
    assert h(np.arange(5, dtype=np.float32)).shape == (0,)


@pytest.mark.parametrize("shape", [(1,), (1, 1), (1, 7), (7, 1), (1, 1, 1, 5), (5, 1, 1, 1)],
                         ids=shape_id)
def test_size_one_dims(shape):
    x = make(shape, F32, rng=rng_for("one", shape))
    f = jc.jit(lambda x: (x * 2.0 + x.T.T, x.T * 1.0, x.reshape(-1) + 1.0))
    a, b, c = f(x)
    assert_close(a, f64(x) * 3.0, F32)
    assert_close(b, f64(x).T, F32, exact=True)
    assert_close(c, f64(x).reshape(-1) + 1.0, F32)

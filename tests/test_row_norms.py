"""layer_norm / softmax / log_softmax as row kernels, over the row lengths the row kernel
treats differently (one element, a partial vector, one vector, the benchmark rows 768 and
1024, a length with a tail, one longer than L1's share), float32 and float64, against float64
references; rows with NaN / Inf, constant rows, rows with a large mean; axes that are not the
last one (vertical reductions, not rows); and the float max / min reductions the softmax's
shift uses (NaN anywhere in a row, signed zeros, infinities).

The row kernels multiply by a per-row reciprocal (1 / sum, 1 / sqrt(var + eps)) rather than
dividing every element: one extra rounding, inside the tolerances below.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitcore as jc
from jitcore.llvm.row_scratch import SCRATCH_BYTES
from jitcore.llvm.streaming import ROW_STREAM_FACTOR
from helpers import (EPS, FLOAT_DTYPES, assert_close, dtype_id, f64, layer_norm_ref,
                     log_softmax_ref, make, reduction_tol, rng_for, softmax_ref)

ROW_LENGTHS = [1, 7, 16, 768, 1000, 1024, 4097]
ROWS = 3


def _ln_tol(dtype, ref, n):
    """A two-pass variance of n terms; the output is scaled by up to max|ref| / sqrt(n)."""
    rtol, atol = reduction_tol(dtype, n, scale=float(np.nanmax(np.abs(ref))) / math.sqrt(n))
    return rtol, 4 * atol


# ---- row lengths x dtypes ---------------------------------------------------------------------

@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_softmax_rows(dtype, n):
    x = make((ROWS, n), dtype, rng=rng_for("rows-sm", n, dtype_id(dtype)))
    sm, lsm = jc.jit(lambda x: (jc.softmax(x), jc.log_softmax(x)))(x)
    rtol, atol = reduction_tol(dtype, n)
    assert_close(sm, softmax_ref(x), dtype, rtol=rtol, atol=atol)
    rtol, atol = reduction_tol(dtype, n, scale=float(np.max(np.abs(x))) / n)
    assert_close(lsm, log_softmax_ref(x), dtype, rtol=rtol, atol=atol)


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_layer_norm_rows(dtype, n):
    rng = rng_for("rows-ln", n, dtype_id(dtype))
    x = make((ROWS, n), dtype, rng=rng) + dtype.type(3)
    w, b = make((n,), dtype, rng=rng), make((n,), dtype, rng=rng)
    got, plain = jc.jit(lambda x, w, b: (jc.layer_norm(x, w, b), jc.layer_norm(x)))(x, w, b)
    ref = layer_norm_ref(x, w, b)
    assert_close(got, ref, dtype, rtol=_ln_tol(dtype, ref, n)[0], atol=_ln_tol(dtype, ref, n)[1])
    ref = layer_norm_ref(x)
    assert_close(plain, ref, dtype, rtol=_ln_tol(dtype, ref, n)[0],
                 atol=_ln_tol(dtype, ref, n)[1])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_layer_norm_large_mean(dtype):
    """The variance is taken about the mean (two passes over the row in L1), so a mean 1e4
    times the spread costs a few roundings of the mean, relative to the spread: the error
    is the mean's (sum and sum of squares in one pass would lose ~eps * (mean/spread)^2)."""
    rng = rng_for("ln-offset", dtype_id(dtype))
    offset = 3e4
    x = make((ROWS, 768), dtype, rng=rng) + dtype.type(offset)
    ref = layer_norm_ref(x)
    got = jc.jit(lambda x: jc.layer_norm(x))(x)
    spread = float(np.min(f64(x).std(axis=-1)))
    rtol, _ = _ln_tol(dtype, ref, 768)
    assert_close(got, ref, dtype, rtol=rtol, atol=16 * EPS[dtype] * offset / spread)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_layer_norm_constant_rows_give_the_bias(dtype):
    x = np.full((ROWS, 1000), 2.5, dtype)
    b = make((1000,), dtype, rng=rng_for("ln-const", dtype_id(dtype)))
    w = make((1000,), dtype, rng=rng_for("ln-const-w", dtype_id(dtype)))
    got = jc.jit(lambda x, w, b: jc.layer_norm(x, w, b))(x, w, b)
    assert_close(got, np.broadcast_to(f64(b), x.shape), dtype, exact=True)


# ---- NaN / Inf rows -------------------------------------------------------------------------

def _special_rows(dtype, n):
    """Row 0 ordinary; then a NaN (first, middle, last), +inf, -inf, a row of -inf, a row
    with masked (-inf) entries."""
    x = make((8, n), dtype, rng=rng_for("special", n, dtype_id(dtype)))
    x[1, 0] = np.nan
    x[2, n // 2] = np.nan
    x[3, -1] = np.nan
    x[4, n // 3] = np.inf
    x[5, n // 3] = -np.inf
    x[6, :] = -np.inf
    x[7, ::2] = -np.inf
    return x


@pytest.mark.parametrize("n", [7, 768, 1024, 4097])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_special_rows(dtype, n):
    x = _special_rows(dtype, n)
    with np.errstate(all="ignore"):
        want_sm, want_lsm, want_ln = softmax_ref(x), log_softmax_ref(x), layer_norm_ref(x)
    sm, lsm, ln = jc.jit(lambda x: (jc.softmax(x), jc.log_softmax(x), jc.layer_norm(x)))(x)
    # the same NaN pattern as numpy's, row by row: which rows are poisoned and which survive
    for got, want in ((sm, want_sm), (lsm, want_lsm), (ln, want_ln)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    assert np.isnan(sm[1:5]).all() and np.isnan(sm[6]).all()
    assert (sm[5, n // 3] == 0) and np.all(sm[7, ::2] == 0) and np.isfinite(sm[7]).all()
    rtol, atol = reduction_tol(dtype, n)
    assert_close(sm, want_sm, dtype, rtol=rtol, atol=atol)
    rtol, atol = reduction_tol(dtype, n, scale=float(np.max(np.abs(x[0]))) / n)
    assert_close(lsm, want_lsm, dtype, rtol=rtol, atol=atol)
    assert_close(ln[0], want_ln[0], dtype, rtol=_ln_tol(dtype, want_ln[0], n)[0],
                 atol=_ln_tol(dtype, want_ln[0], n)[1])


# ---- shapes that are not rows -----------------------------------------------------------------

@pytest.mark.parametrize("shape, axis", [((1000, 7), 0), ((5, 768, 3), 1), ((2, 3, 1024), -1),
                                         ((4, 16, 17), 0), ((1, 1), 0), ((4097,), 0)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_softmax_axes(dtype, shape, axis):
    x = make(shape, dtype, rng=rng_for("sm-axes", shape, axis, dtype_id(dtype)))
    got = jc.jit(lambda x: jc.softmax(x, axis=axis))(x)
    rtol, atol = reduction_tol(dtype, shape[axis])
    assert_close(got, softmax_ref(x, axis), dtype, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_row_kernels_on_strided_views(dtype):
    """A transposed input (rows not contiguous) and a sliced one (row stride > row length)."""
    rng = rng_for("views", dtype_id(dtype))
    base = make((64, 1030), dtype, rng=rng)
    for x in (base[:, 3:1027], base[::2, ::3], base[:40, :40].T):
        sm, ln = jc.jit(lambda x: (jc.softmax(x), jc.layer_norm(x)))(x)
        n = x.shape[-1]
        rtol, atol = reduction_tol(dtype, n)
        assert_close(sm, softmax_ref(x), dtype, rtol=rtol, atol=atol)
        ref = layer_norm_ref(x)
        assert_close(ln, ref, dtype, rtol=_ln_tol(dtype, ref, n)[0],
                     atol=_ln_tol(dtype, ref, n)[1])


# ---- float max / min reductions -------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 16, 17, 768, 1025])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_max_min_reductions_propagate_nan_anywhere(dtype, n):
    rng = rng_for("minmax-nan", n, dtype_id(dtype))
    positions = sorted({0, n // 2, n - 1, min(15, n - 1), min(16, n - 1)})
    x = make((len(positions) + 1, n), dtype, rng=rng)
    for row, at in enumerate(positions, start=1):
        x[row, at] = np.nan
    for axis, data in ((1, x), (0, np.ascontiguousarray(x.T))):
        mx, mn = jc.jit(lambda a: (a.max(axis=axis), a.min(axis=axis)))(data)
        assert_close(mx, np.max(f64(data), axis=axis), dtype, exact=True)
        assert_close(mn, np.min(f64(data), axis=axis), dtype, exact=True)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_max_min_reductions_of_zeros_and_infinities(dtype):
    """Signed zeros compare equal (numpy's own sign of the zero depends on the order);
    infinities are exact."""
    rng = rng_for("minmax-zero", dtype_id(dtype))
    z = rng.choice(np.array([-0.0, 0.0], dtype), (5, 37))
    got = jc.jit(lambda a: (a.max(axis=1), a.min(axis=1), a.max()))(z)
    for g in got:
        assert g.dtype == dtype and np.all(g == 0)
    x = make((4, 100), dtype, rng=rng)
    x[0, 7], x[1, 99], x[2, :] = np.inf, -np.inf, -np.inf
    x[3, 50] = -np.inf
    mx, mn = jc.jit(lambda a: (a.max(axis=1), a.min(axis=1)))(x)
    assert_close(mx, np.max(f64(x), axis=1), dtype, exact=True)
    assert_close(mn, np.min(f64(x), axis=1), dtype, exact=True)


# ---- streamed outputs (jitcore/llvm/streaming.py) ---------------------------------------------

STREAM_LOW = 256           # bytes: a threshold every output below streams from


def _jit_streaming(fn, threads: int):
    """`fn` jitted with streaming stores from STREAM_LOW bytes (at compile and call)."""
    f = jc.jit(fn, num_threads=threads)

    def call(*args, **kwargs):
        with jc.config.override(stream_stores=STREAM_LOW):
            return f(*args, **kwargs)
    call.llvm_ir = lambda *a: call_under(f.llvm_ir, *a)
    return call


def call_under(method, *args):
    with jc.config.override(stream_stores=STREAM_LOW):
        return method(*args)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 7, 16, 768, 1000])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_streamed_row_outputs(dtype, n, threads):
    """layer_norm's, log_softmax's and softmax's last part streams its output (peeled per
    row to the vector alignment; softmax keeps its summands in a scratch row): into views
    whose rows start at every alignment, rows with NaN and Inf, numpy's values and nothing
    written outside the view."""
    x = _special_rows(dtype, n) if n >= 7 else make((9, n), dtype, rng=rng_for("st", n))
    rows = x.shape[0]
    w, b = make((n,), dtype, rng=rng_for("st-w", n)), make((n,), dtype, rng=rng_for("st-b", n))
    ln = _jit_streaming(lambda x, w, b: jc.layer_norm(x, w, b), threads)
    lsm = _jit_streaming(jc.log_softmax, threads)
    sm = _jit_streaming(jc.softmax, threads)
    with np.errstate(all="ignore"):
        want_ln, want_lsm, want_sm = layer_norm_ref(x, w, b), log_softmax_ref(x), softmax_ref(x)
    for off in (0, 1, 3, 5):
        for f, args, want in ((ln, (x, w, b), want_ln), (lsm, (x,), want_lsm),
                              (sm, (x,), want_sm)):
            big = np.full((rows, n + 8), 7, dtype)
            out = big[:, off:off + n]
            f(*args, out=out)
            np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
            np.testing.assert_array_equal(np.isinf(out), np.isinf(want))
            fine = np.isfinite(want).all(axis=1)
            rtol, atol = _ln_tol(dtype, want[fine], n) if f is ln else \
                reduction_tol(dtype, n, scale=float(np.max(np.abs(x[fine]))) / n) \
                if f is lsm else reduction_tol(dtype, n)
            assert_close(out[fine], want[fine], dtype, rtol=rtol, atol=atol, msg=f"offset {off}")
            assert (big[:, :off] == 7).all() and (big[:, off + n:] == 7).all()
    if n >= 64:                 # whole vectors per row (at every width), output over the threshold
        assert all("!nontemporal" in f.llvm_ir(*args)
                   for f, args in ((ln, (x, w, b)), (lsm, (x,)), (sm, (x,))))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_softmax_rows_too_long_for_a_scratch_row(dtype):
    """Rows longer than SCRATCH_BYTES keep softmax's summands in the output: normal stores
    (streaming over lines just written ran slower), numpy's values."""
    n = SCRATCH_BYTES // np.dtype(dtype).itemsize + 1
    x = make((3, n), dtype, rng=rng_for("long-sm", dtype_id(dtype)))
    sm = _jit_streaming(jc.softmax, 1)
    rtol, atol = reduction_tol(dtype, n)
    assert_close(sm(x), softmax_ref(x), dtype, rtol=rtol, atol=atol)
    assert "!nontemporal" not in sm.llvm_ir(x)
    assert "!nontemporal" in sm.llvm_ir(x[:, :n - 1])


def test_row_outputs_stream_from_a_larger_threshold():
    """A row kernel streams from ROW_STREAM_FACTOR times the target's threshold (below it
    the recycled output is still partly in cache): not at one element less."""
    n = 64
    rows = -(-STREAM_LOW * ROW_STREAM_FACTOR // (4 * n))
    ln = _jit_streaming(lambda x: jc.layer_norm(x), 1)
    assert "!nontemporal" in ln.llvm_ir(jc.spec((rows, n), jc.float32))
    assert "!nontemporal" not in ln.llvm_ir(jc.spec((rows - 1, n), jc.float32))
    assert "!nontemporal" in _jit_streaming(lambda x: x + 1, 1).llvm_ir(
        jc.spec((rows - 1, n), jc.float32))


def test_streamed_rows_empty():
    """No rows, or rows of no elements: nothing to store, no error."""
    ln = _jit_streaming(lambda x: jc.layer_norm(x), 2)
    for shape in ((0, 768), (5, 0)):
        x = np.zeros(shape, np.float32)
        assert ln(x).shape == shape

"""Pooling (jc.max_pool2d, jc.avg_pool2d, jc.adaptive_avg_pool2d) against a direct float64
numpy reference written here with window loops (torch.nn.functional as a second opinion when
installed): a sampled grid of kernel, stride, padding, dilation, ceil_mode and
count_include_pad over shapes from 1x1 to 17x17, 1 to 65 channels and batches 0, 1, 3; NaN and
infinities; channels-last views; 3-d inputs; fusion with the elementwise ops around a pool;
vector code; one and two threads bit for bit; every error."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, NARROW_WIDTHS, ULP, assert_close, dtype_id, rng_for

FLOATS = [F32, F64]
GRID = 32               # sampled cases per kind and dtype


# ---- the reference ---------------------------------------------------------------------------

def out_size(n, k, s, p, d, ceil_mode):
    """torch's rule, written out: floor or ceil of the window count; with ceil_mode the last
    window must start inside the input or the left padding."""
    span = n + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def ref_pool(x, kind, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
             count_include_pad=True):
    """Pooling of x (N, C, H, W) in float64 by explicit windows."""
    x = np.asarray(x, np.float64)
    (kh, kw), (ph, pw), (dh, dw) = _pair(kernel), _pair(padding), _pair(dilation)
    sh, sw = _pair(stride) if stride is not None else (kh, kw)
    n, c, h, w = x.shape
    oh, ow = out_size(h, kh, sh, ph, dh, ceil_mode), out_size(w, kw, sw, pw, dw, ceil_mode)
    out = np.empty((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        h0, w0 = i * sh - ph, j * sw - pw
        rows = [h0 + a * dh for a in range(kh) if 0 <= h0 + a * dh < h]
        cols = [w0 + b * dw for b in range(kw) if 0 <= w0 + b * dw < w]
        window = x[:, :, rows][:, :, :, cols].reshape(n, c, len(rows) * len(cols))
        if kind == "max":       # a window wholly in the padding (dilated) is -inf, as torch
            out[:, :, i, j] = window.max(axis=2, initial=-np.inf)
        elif not rows or not cols:
            out[:, :, i, j] = 0
        else:
            if count_include_pad:       # clipped to the padded input, not to ceil_mode's overhang
                div = (min(h0 + kh, h + ph) - h0) * (min(w0 + kw, w + pw) - w0)
            else:
                div = len(rows) * len(cols)
            out[:, :, i, j] = window.sum(axis=2) / div
    return out


def ref_adaptive(x, output_size):
    x = np.asarray(x, np.float64)
    n, c, h, w = x.shape
    oh, ow = (output_size,) * 2 if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    out = np.empty((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        r0, r1 = i * h // oh, -(-(i + 1) * h // oh)
        c0, c1 = j * w // ow, -(-(j + 1) * w // ow)
        out[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean(axis=(2, 3))
    return out


def _check(got, x, kind, dtype, msg, **kw):
    ref = ref_pool(x, kind, **kw)
    if kind == "max":
        assert_close(got, ref, dtype, exact=True, msg=msg)
    else:               # a sum of up to k*k terms, rounded once per add
        k = np.prod(_pair(kw["kernel"]))
        scale = ref_pool(np.abs(np.nan_to_num(x, posinf=0, neginf=0)), kind, **kw)
        assert_close(got, ref, dtype, rtol=(k + 2) * ULP[dtype], atol=0, scale=scale, msg=msg)
    return ref


def _call(kind, x, kw):
    if kind == "max":
        return jc.max_pool2d(x, kw["kernel"], kw.get("stride"), kw.get("padding", 0),
                             kw.get("dilation", 1), kw.get("ceil_mode", False))
    return jc.avg_pool2d(x, kw["kernel"], kw.get("stride"), kw.get("padding", 0),
                         kw.get("ceil_mode", False), kw.get("count_include_pad", True))


def _grid(kind, count, seed):
    """A seeded sample of valid option combinations and shapes."""
    rng = rng_for("pool-grid", kind, seed)
    kernels = [1, 2, 3, 5, (2, 3), (3, 1), (5, 2)]
    cases = []
    while len(cases) < count:
        k = kernels[rng.integers(len(kernels))]
        kh, kw = _pair(k)
        s = [None, 1, 2, 3, (1, 2), (3, 2)][rng.integers(6)]
        p = [0, 1, 2, (1, 0), (0, 2)][rng.integers(5)]
        ph, pw = _pair(p)
        if ph > kh // 2 or pw > kw // 2:
            continue
        d = [1, 2, (2, 1)][rng.integers(3)] if kind == "max" else 1
        kw_ = dict(kernel=k, stride=s, padding=p, ceil_mode=bool(rng.integers(2)))
        if kind == "max":
            kw_["dilation"] = d
        else:
            kw_["count_include_pad"] = bool(rng.integers(2))
        h, w = int(rng.integers(1, 18)), int(rng.integers(1, 18))
        dh, dw = _pair(d)
        sh, sw = _pair(s) if s is not None else (kh, kw)
        if min(out_size(h, kh, sh, ph, dh, kw_["ceil_mode"]),
               out_size(w, kw, sw, pw, dw, kw_["ceil_mode"])) < 1:
            continue
        shape = ([0, 1, 3][rng.integers(3)], [1, 2, 5, 16, 65][rng.integers(5)], h, w)
        cases.append((shape, kw_))
    return cases


# ---- the grid ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_grid(kind, dtype):
    for i, (shape, kw) in enumerate(_grid(kind, GRID, dtype_id(dtype))):
        x = rng_for("pool", kind, i).standard_normal(shape).astype(dtype)
        got = _call(kind, x, kw)
        _check(got, x, kind, dtype, f"{kind} {shape} {kw}", **kw)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_resnet_shapes_vectorized(kind):
    """The ResNet layers: vector code (one kernel), and torch's answer when installed."""
    x = rng_for("pool-resnet", kind).standard_normal((2, 16, 56, 56)).astype(F32)
    kw = dict(kernel=3, stride=2, padding=1) if kind == "max" else dict(kernel=2)
    f = jc.jit(lambda a: _call(kind, a, kw))
    _check(f(x), x, kind, F32, kind, **kw)
    kernels = f.kernels(x)
    assert [k.kind for k in kernels] == ["pool"] and kernels[0].vectorized, kernels
    assert "x float>" in f.llvm_ir(x)


@pytest.mark.parametrize("shape", [(2, 3, 15, 14), (1, 3, 9, 70)])
def test_pool_nan_and_infinities(shape):
    """NaN anywhere in a window (interior vectors, border vectors, single columns) gives NaN;
    infinities pass through."""
    rng = rng_for("pool-nan", shape)
    x = rng.standard_normal(shape)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[rng.random(x.shape) < 0.05] = np.inf
    x[rng.random(x.shape) < 0.05] = -np.inf
    x[0, 1, :, 0] = x[0, 1, :, -1] = np.nan         # NaN only in the border columns
    x[-1, 2] = -np.inf                              # a plane of -inf: max is -inf everywhere
    for dtype in FLOATS:
        xd = x.astype(dtype)
        for kw in (dict(kernel=3, stride=2, padding=1), dict(kernel=2, stride=1, dilation=2),
                   dict(kernel=(3, 2), stride=1, padding=1, ceil_mode=True)):
            assert_close(jc.max_pool2d(xd, kw["kernel"], kw["stride"], kw.get("padding", 0),
                                       kw.get("dilation", 1), kw.get("ceil_mode", False)),
                         ref_pool(xd, "max", **kw), dtype, exact=True, msg=str(kw))
        got = jc.avg_pool2d(xd, 3, 2, 1)
        with np.errstate(invalid="ignore"):
            ref = ref_pool(xd, "avg", 3, 2, 1)
        assert_close(got, ref, dtype, rtol=10 * ULP[dtype], atol=1e-6)


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_adaptive_avg_pool(dtype):
    rng = rng_for("adaptive", dtype_id(dtype))
    for shape, out in [((2, 5, 7, 7), 1), ((3, 4, 9, 13), (4, 5)), ((1, 3, 10, 12), (5, 4)),
                       ((2, 2, 17, 6), (None, 4)), ((1, 65, 6, 17), (3, None)),
                       ((0, 3, 5, 5), 2), ((1, 2, 3, 4), 7), ((2, 16, 56, 56), 1),
                       ((1, 16, 40, 40), (5, 8)), ((1, 1, 1, 1), 1)]:
        x = rng.standard_normal(shape).astype(dtype)
        got = jc.adaptive_avg_pool2d(x, out)
        ref = ref_adaptive(x, out)
        scale = ref_adaptive(np.abs(x), out)
        n = max(shape[2], shape[3])
        assert_close(got, ref, dtype, rtol=2 * n * ULP[dtype], atol=0, scale=scale,
                     msg=f"{shape} {out}")


def test_global_pool_is_a_reduction():
    """output_size=1 is a mean over the spatial axes: one vectorized reduction kernel (row
    fused with its division), with a relu before it fused in."""
    x = rng_for("gap").standard_normal((4, 64, 7, 7)).astype(F32)
    f = jc.jit(lambda a: jc.adaptive_avg_pool2d(jc.relu(a), 1))
    assert_close(f(x), ref_adaptive(np.maximum(x, 0), 1), F32, rtol=60 * ULP[F32], atol=0)
    kernels = f.kernels(x)
    assert len(kernels) == 1 and kernels[0].kind in ("rows", "reduce_horizontal"), kernels
    assert kernels[0].vectorized


def test_three_d_input_and_batch_zero():
    x = rng_for("pool-3d").standard_normal((5, 9, 8)).astype(F32)
    for kind in ("max", "avg"):
        got = _call(kind, x, dict(kernel=3, stride=2, padding=1))
        assert got.shape == ref_pool(x[None], kind, 3, 2, 1)[0].shape
        _check(got[None], x[None], kind, F32, kind, kernel=3, stride=2, padding=1)
    assert_close(jc.adaptive_avg_pool2d(x, (2, 3)), ref_adaptive(x[None], (2, 3))[0], F32,
                 rtol=1e-6, atol=1e-7)
    empty = np.zeros((0, 4, 6, 6), F64)
    assert jc.max_pool2d(empty, 2).shape == (0, 4, 3, 3)
    assert jc.avg_pool2d(empty, 2).dtype == F64


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_channels_last_view(kind):
    """A transposed view of an NHWC array is read in place (and still gives the answer)."""
    base = rng_for("pool-nhwc", kind).standard_normal((2, 11, 13, 24)).astype(F32)
    x = base.transpose(0, 3, 1, 2)
    for kw in (dict(kernel=3, stride=2, padding=1), dict(kernel=2), dict(kernel=(1, 3))):
        _check(_call(kind, x, kw), x, kind, F32, str(kw), **kw)
    sliced = rng_for("pool-slice").standard_normal((1, 4, 20, 40)).astype(F32)[:, :, 1:, ::2]
    _check(_call(kind, sliced, dict(kernel=3)), sliced, kind, F32, "sliced", kernel=3)


def test_fusion_around_pools():
    """relu before and after a pool, and an epilogue reading another array: one kernel each."""
    rng = rng_for("pool-fuse")
    x = rng.standard_normal((2, 8, 30, 30)).astype(F32)
    y = rng.standard_normal((2, 8, 15, 15)).astype(F32)
    programs = [
        (lambda a, b: jc.max_pool2d(jc.relu(a), 3, 2, 1) + b,
         lambda a, b: ref_pool(np.maximum(a, 0), "max", 3, 2, 1) + b),
        (lambda a, b: jc.relu(jc.avg_pool2d(a * 2.0 + 1.0, 2)) * b,
         lambda a, b: np.maximum(ref_pool(a * 2.0 + 1.0, "avg", 2), 0) * b),
        (lambda a, b: jc.relu(jc.max_pool2d(a, 2)) - b,
         lambda a, b: np.maximum(ref_pool(a, "max", 2), 0) - b),
    ]
    for fn, ref in programs:
        f = jc.jit(fn)
        got = f(x, y)
        assert_close(got, ref(x.astype(F64), y.astype(F64)), F32, rtol=1e-6, atol=1e-6)
        kernels = f.kernels(x, y)
        assert len(kernels) == 1 and kernels[0].kind == "pool" and kernels[0].vectorized, \
            kernels
    # a clamp before a max pooling runs once per output, after it (NaN and -inf included),
    # except where a window lies wholly in the padding (-inf there, not the clamp's bound)
    z = x.copy()
    z[0, 0, 3:5, 3:5] = np.nan
    z[1, 1, :3] = -np.inf
    for clamp, ref_clamp in ((jc.relu, lambda v: np.maximum(v, 0)),
                             (lambda v: jc.hardtanh(v, -0.5, 0.5), lambda v: np.clip(v, -.5, .5))):
        f = jc.jit(lambda a: jc.max_pool2d(clamp(a), 3, 2, 1))
        assert f.kernels(z)[0].ops[0] == "max_pool2d"
        assert_close(f(z), ref_pool(ref_clamp(z), "max", 3, 2, 1), F32, exact=True)
    tall = rng.standard_normal((1, 2, 1, 6)).astype(F32)     # rows of padding only: -inf
    f = jc.jit(lambda a: jc.max_pool2d(jc.relu(a), 2, 1, 1, dilation=2))
    assert f.kernels(tall)[0].ops[0] == "maximum"
    assert_close(f(tall), ref_pool(np.maximum(tall, 0), "max", 2, 1, 1, 2), F32, exact=True)
    # a costly producer is stored once, not recomputed at every tap
    f = jc.jit(lambda a: jc.max_pool2d(jc.exp(a), 3))
    assert len(f.kernels(x)) == 2
    assert_close(f(x), ref_pool(np.exp(x.astype(F64)), "max", 3), F32, rtol=4 * ULP[F32],
                 atol=0)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("axis", [1, 2, 3])
def test_pool_of_a_gather(kind, axis):
    """A take (or an index computed at run time) read per tap: each tap reads the gathered
    element, the index's value included (the pool's loads once read a gather at its other
    axes' offset alone: every output of a take over the channels was the first channel's).
    A take along the batch, channel or row axis is the same for every lane of a vector (a
    vectorized pool, 64 columns); one along the columns is read per output column (scalar);
    negative indices count from the end; one out of range raises."""
    rng = rng_for("pool-take", axis)
    x = rng.standard_normal((2, 3, 9, 64)).astype(F32)
    idx = np.array([2, 0, -1, 1, 1] if axis != 3 else [5, 0, 63, -2, 7, 7])
    kw = dict(kernel=3, stride=2, padding=1) if kind == "max" else dict(kernel=2)
    f = jc.jit(lambda a: _call(kind, np.take(a, idx, axis=axis), kw))
    _check(f(x), np.take(x, idx, axis=axis), kind, F32, f"take axis {axis}", **kw)
    with pytest.raises(IndexError):
        bad = idx.copy()
        bad[1] = x.shape[axis]
        jc.jit(lambda a: _call(kind, np.take(a, bad, axis=axis), kw))(x)


@pytest.mark.parametrize("dtype", FLOATS, ids=dtype_id)
def test_threads_bitwise(dtype):
    """Rows split over the pool: 1 and 2 threads give the same bits."""
    x = rng_for("pool-threads", dtype_id(dtype)).standard_normal((2, 32, 33, 47)).astype(dtype)
    fns = [jc.jit(lambda a: jc.max_pool2d(a, 3, 2, 1)),
           jc.jit(lambda a: jc.avg_pool2d(a, 3, 2, 1, count_include_pad=False)),
           jc.jit(lambda a: jc.adaptive_avg_pool2d(a, (5, 7)))]
    saved = jc.get_num_threads()
    try:
        for f in fns:
            results = []
            for n in (1, 2):
                jc.set_num_threads(n)
                results.append(f(x))
            assert results[0].tobytes() == results[1].tobytes()
    finally:
        jc.set_num_threads(saved)


def test_torch_second_opinion():
    """The float32 grid again (its compiled ops are cached), now against torch."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for kind in ("max", "avg"):
        for i, (shape, kw) in enumerate(_grid(kind, GRID, dtype_id(F32))):
            x = rng_for("pool", kind, i).standard_normal(shape).astype(F32)
            t = torch.from_numpy(x)
            args = dict(kernel_size=kw["kernel"], stride=kw["stride"], padding=kw["padding"],
                        ceil_mode=kw["ceil_mode"])
            if kind == "max":
                want = F.max_pool2d(t, dilation=kw["dilation"], **args)
            else:
                want = F.avg_pool2d(t, count_include_pad=kw["count_include_pad"], **args)
            assert_close(_call(kind, x, kw), want.numpy().astype(F64), F32, rtol=1e-5,
                         atol=1e-6, msg=f"{kind} {shape} {kw}")
    x = rng_for("adaptive-torch").standard_normal((2, 3, 11, 13)).astype(F32)
    for out in (1, 3, (4, 6), (None, 5), (11, 13)):
        want = F.adaptive_avg_pool2d(torch.from_numpy(x), out).numpy()
        assert_close(jc.adaptive_avg_pool2d(x, out), want.astype(F64), F32, rtol=1e-5,
                     atol=1e-6, msg=str(out))


# ---- errors ------------------------------------------------------------------------------------

X4 = np.zeros((1, 2, 5, 5), F32)


@pytest.mark.parametrize("call, error, words", [
    (lambda: jc.max_pool2d(X4, 7), jc.ShapeError, ["larger than the padded input", "(1, 2, 5, 5)"]),
    (lambda: jc.avg_pool2d(X4, 6, padding=0), jc.ShapeError, ["larger", "avg_pool2d"]),
    (lambda: jc.max_pool2d(X4, 3, dilation=3), jc.ShapeError, ["larger", "dilation"]),
    (lambda: jc.max_pool2d(X4, 3, padding=2), jc.ShapeError, ["half the kernel"]),
    (lambda: jc.avg_pool2d(X4, 2, padding=(0, 2)), jc.ShapeError, ["half the kernel"]),
    (lambda: jc.max_pool2d(X4, 0), jc.ShapeError, ["kernel_size", ">= 1"]),
    (lambda: jc.max_pool2d(X4, (2, -1)), jc.ShapeError, ["kernel_size"]),
    (lambda: jc.avg_pool2d(X4, 2, stride=0), jc.ShapeError, ["stride"]),
    (lambda: jc.max_pool2d(X4, 2, dilation=0), jc.ShapeError, ["dilation"]),
    (lambda: jc.max_pool2d(X4, 3, padding=-1), jc.ShapeError, ["padding", ">= 0"]),
    (lambda: jc.max_pool2d(np.zeros((5, 5), F32), 2), jc.ShapeError, ["max_pool2d", "(5, 5)"]),
    (lambda: jc.avg_pool2d(np.zeros((1, 1, 1, 5, 5), F32), 2), jc.ShapeError, ["4-d"]),
    (lambda: jc.max_pool2d(np.zeros((1, 0, 5, 5), F32), 2), jc.ShapeError, ["non-zero"]),
    (lambda: jc.adaptive_avg_pool2d(np.zeros((2, 3, 0), F32), 1), jc.ShapeError,
     ["adaptive_avg_pool2d", "(2, 3, 0)"]),
    (lambda: jc.adaptive_avg_pool2d(X4, 0), jc.ShapeError, ["output_size", ">= 1"]),
    (lambda: jc.adaptive_avg_pool2d(X4, (3, -2)), jc.ShapeError, ["output_size"]),
    (lambda: jc.max_pool2d(X4.astype(np.int32), 2), jc.DTypeError, ["max_pool2d", "int32"]),
    (lambda: jc.avg_pool2d(X4 > 0, 2), jc.DTypeError, ["avg_pool2d", "bool"]),
    (lambda: jc.adaptive_avg_pool2d(X4.astype(np.int64), 2), jc.DTypeError, ["int64"]),
    (lambda: jc.max_pool2d(X4, 2.5), TypeError, ["kernel_size"]),
    (lambda: jc.max_pool2d(X4, (1, 2, 3)), TypeError, ["kernel_size"]),
])
def test_errors(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value), str(info.value)


def test_scalar_kernels_say_why():
    """Pool kernels that stay scalar name the reason from legality's vocabulary."""
    nhwc = np.zeros((1, 40, 40, 32), F32).transpose(0, 3, 1, 2)
    f = jc.jit(lambda a: jc.max_pool2d(a, 3, 2, 1))
    assert f.kernels(nhwc)[0].reason == "non_contiguous_load"
    g = jc.jit(lambda a: jc.adaptive_avg_pool2d(a, (5, 7)))
    x = np.zeros((1, 4, 40, 40), F32)
    assert g.kernels(x)[0].reason == "irregular_windows"
    h = jc.jit(lambda a: jc.avg_pool2d(a, 2))
    assert h.kernels(np.zeros((1, 4, 6, 6), F32))[0].reason == "short_inner_loop"
    assert h.kernels(x)[0].vectorized and h.kernels(x)[0].lanes in (4, 8, 16)


def test_numpy_integer_options():
    """Sizes may be numpy integers (a shape entry, say) inside a jitted function."""
    x = rng_for("pool-npint").standard_normal((1, 2, 9, 9)).astype(F32)
    f = jc.jit(lambda a: jc.max_pool2d(a, np.int64(3), (np.int32(2), 2), np.int64(1)))
    assert_close(f(x), ref_pool(x, "max", 3, 2, 1), F32, exact=True)


@pytest.mark.parametrize("width", NARROW_WIDTHS)
def test_narrower_vectors(width):
    """256- and 128-bit vectors (AVX2, SSE targets): other lane counts, the same answers."""
    rng = rng_for("pool-width", width)
    for dtype in FLOATS:
        x = rng.standard_normal((2, 3, 13, 29)).astype(dtype)
        x[0, 0, 0, 0] = np.nan
        for kind, kw in (("max", dict(kernel=3, stride=2, padding=1)),
                         ("max", dict(kernel=(2, 3), stride=1, padding=(1, 1), dilation=2)),
                         ("avg", dict(kernel=3, stride=2, padding=1, ceil_mode=True)),
                         ("avg", dict(kernel=2, stride=1, padding=1,
                                      count_include_pad=False))):
            f = jc.jit(lambda a: _call(kind, a, kw), vector_width=width)
            _check(f(x), x, kind, dtype, f"{width} {kind} {kw}", **kw)
            assert f.kernels(x)[0].vectorized

"""Matrix-vector products: matmuls with M or N of 1 compile to one `kind == "gemv"` kernel
(jitcore/llvm/gemv.py) in both of its loop shapes (dot products of contiguous rows: `A @ v`,
`v @ A.T`; axpy over contiguous rows: `v @ A`, `A.T @ v`), batched, for float32, float64 and
integer inputs, with tails, empty dims, strided views, fused epilogues, constants, and the
same bits for any thread count.

Tolerance rule (as tests/test_gemm.py): references are numpy's float64 matmul of float64 copies;
a product with inner dimension K is compared with `helpers.reduction_tol(dtype, K,
max|a| * max|b|)`, plus the post-op's own TOL where one follows (its atol doubled).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import (F32, F64, I32, TOL, assert_close, f64, make, reduction_tol, rng_for,
                     runnable_levels)

SIZES = [1, 17, 1003]          # tails at 4, 8 and 16 lanes (1000 had none at 4 or 8)


def _absmax(x) -> float:
    return float(np.max(np.abs(f64(x)), initial=0.0))


def terms(fn, a, b) -> int:
    """K, the products summed into each output of the matmul fn(a, b): fn of all-ones
    operands (a.T @ v sums over a's first extent, not its last)."""
    return int(np.max(fn(np.ones(np.shape(a)), np.ones(np.shape(b))), initial=0))


def tol(dtype, a, b, post: bool = False, k: int | None = None) -> dict:
    """Tolerances of a product of a and b over k terms (default: a's last extent, a being the
    left operand of a @ b)."""
    k = np.shape(a)[-1] if k is None else k
    rtol, atol = reduction_tol(dtype, k, _absmax(a) * _absmax(b))
    if post:
        prtol, patol = TOL[np.dtype(dtype)]
        rtol, atol = rtol + prtol, 2 * atol + patol
    return {"rtol": rtol, "atol": atol}


def result_dtype(a, b):
    d = np.result_type(a, b)
    return d if d.kind == "f" else F64          # integer matmul computes in float64


def kinds(f, *args) -> list:
    return [k.kind for k in f.kernels(*args)]


def assert_gemv(f, *args):
    ks = kinds(f, *args)
    assert ks.count("gemv") == 1 and "gemm" not in ks, ks


def check(fn, *args, ref_fn=None):
    """fn jitted on args against fn (or ref_fn) on float64 copies; one gemv kernel."""
    f = jc.jit(fn)
    got = f(*args)
    ref = (ref_fn or fn)(*(f64(a) for a in args))
    dtype = result_dtype(*args[:2])
    a, b = args[:2]
    assert_close(got, ref, dtype, **tol(dtype, a, b, k=terms(fn, a, b)),
                 msg=f"{[np.shape(x) for x in args]}")
    assert_gemv(f, *args)
    return got


def pair(shape_a, shape_b, dtype, key):
    rng = rng_for("gemv", key, shape_a, shape_b, str(dtype))
    return make(shape_a, dtype, rng=rng), make(shape_b, dtype, rng=rng)


def av(a, v):
    return a @ v


def at_v(a, v):
    return a.T @ v


def v_at(v, a):
    return v @ a.T


# ---- every layout, dtype and size --------------------------------------------------------------

LAYOUTS = {
    # name -> (function, operand shapes for (outputs N, inner K))
    "A@v": (av, lambda n, k: ((n, k), (k,))),
    "A@v(K,1)": (av, lambda n, k: ((n, k), (k, 1))),
    "v@A": (av, lambda n, k: ((k,), (k, n))),
    "v(1,K)@A": (av, lambda n, k: ((1, k), (k, n))),
    "A.T@v": (at_v, lambda n, k: ((k, n), (k,))),
    "v@A.T": (v_at, lambda n, k: ((k,), (n, k))),
    "batched(B,M,K)@(B,K,1)": (av, lambda n, k: ((3, n, k), (3, k, 1))),
    "batched(B,1,K)@(B,K,N)": (av, lambda n, k: ((3, 1, k), (3, k, n))),
    "broadcast(B,M,K)@(K,)": (av, lambda n, k: ((2, n, k), (k,))),
    "broadcast(K,)@(B,K,N)": (av, lambda n, k: ((k,), (2, k, n))),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [F32, F64, I32], ids=str)
def test_layouts_dtypes_and_tails(layout, dtype):
    fn, shapes = LAYOUTS[layout]
    for n in SIZES:
        for k in SIZES:
            a, b = pair(*shapes(n, k), dtype, layout)
            got = check(fn, a, b)
            assert got.shape == fn(f64(a), f64(b)).shape


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_dot_of_two_vectors(dtype):
    for k in (1, 17, 1000):
        a, b = pair((k,), (k,), dtype, "dot")
        got = check(av, a, b)
        assert got.shape == () and got.dtype == dtype


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_long_k_accuracy(dtype):
    """float32 over K = 4096 and 100,000: the error against float64, relative to
    sum |a_k x_k| of each output, stays within 2 * sqrt(K) * eps (rows use 2 x lanes
    accumulators per output, columns a pairwise sum of 8 rows per step)."""
    for shapes in (((8, 4096), (4096,)), ((4096,), (4096, 40)), ((2, 100_000), (100_000,)),
                   ((100_000,), (100_000, 3))):
        a, b = pair(*shapes, dtype, "long")
        got = jc.jit(av)(a, b)
        ref, scale = f64(a) @ f64(b), np.abs(f64(a)) @ np.abs(f64(b))
        k = shapes[0][-1]
        err = np.max(np.abs(got - ref) / scale)
        assert err <= 2 * np.sqrt(k) * np.finfo(dtype).eps, (shapes, err)


# ---- strided and transposed views -------------------------------------------------------------

def strided(x, steps):
    """A view of x with the given steps (negative included) into a NaN-filled buffer: a kernel
    that reads between the strides gets NaN."""
    big = np.full(tuple(abs(s) * d for s, d in zip(steps, x.shape)), np.nan, x.dtype)
    view = big[tuple(slice(None, None, s) for s in steps)]
    view[...] = x
    return view


VIEWS = {
    # name -> (function, build (a, b) from contiguous operands of A@v's shapes (N, K), (K,))
    "rows-stepped": (av, lambda a, v: (strided(a, (2, 1)), v)),
    "both-axes-stepped": (av, lambda a, v: (strided(a, (2, 3)), v)),
    "negative-steps": (av, lambda a, v: (strided(a, (-1, -1)), strided(v, (-1,)))),
    "stepped-vector": (av, lambda a, v: (a, strided(v, (3,)))),
    "column-of-a-matrix": (lambda a, w: a @ w[:, 2], lambda a, v: (a, np.repeat(v[:, None], 4,
                                                                                 axis=1))),
    "numpy-T-view": (av, lambda a, v: (np.ascontiguousarray(a.T).T, v)),
    "T-of-stepped": (lambda at, v: at.T @ v, lambda a, v: (strided(np.ascontiguousarray(a.T),
                                                                   (2, 2)), v)),
    "v@(stepped A.T)": (lambda v, a: v @ a, lambda a, v: (v, strided(np.ascontiguousarray(a.T),
                                                                     (1, 2)))),
}


@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_strided_and_transposed_views(view, dtype):
    fn, build = VIEWS[view]
    for n, k in ((17, 1000), (1000, 17), (33, 65)):
        a, v = pair((n, k), (k,), dtype, view)
        args = build(a, v)
        got = jc.jit(fn)(*args)
        assert_close(got, f64(a) @ f64(v), dtype, **tol(dtype, a, v), msg=f"{view} {n}x{k}")
        assert_gemv(jc.jit(fn), *args)


# ---- empty dims ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [
    ((0, 17), (17,)), ((17,), (17, 0)), ((0,), (0, 5)), ((5, 0), (0,)), ((0,), (0,)),
    ((0, 3, 4), (0, 4, 1)), ((0, 1, 4), (0, 4, 5)), ((2, 0, 4), (2, 4, 1)),
], ids=lambda s: f"{s[0]}@{s[1]}")
@pytest.mark.parametrize("threads", [1, 2])
def test_empty_dims(shapes, threads):
    a, b = np.ones(shapes[0], F32), np.ones(shapes[1], F32)
    f = jc.jit(lambda a, b: jc.relu(a @ b) + 1.0, num_threads=threads)
    ref = np.maximum(f64(a) @ f64(b), 0.0) + 1.0           # K = 0: relu(0) + 1 everywhere
    assert_close(f(a, b), ref, F32, exact=True)


# ---- epilogues -------------------------------------------------------------------------------

def sigmoid64(y):
    return 1.0 / (1.0 + np.exp(-y))


EPILOGUES = {
    # name -> (jitted, float64 reference, shapes (a, b, bias)): one gemv kernel each
    "relu(A@v+b)": (lambda a, v, c: jc.relu(a @ v + c),
                    lambda a, v, c: np.maximum(a @ v + c, 0.0),
                    ((1000, 65), (65,), (1000,))),
    "silu(v@A+b)": (lambda v, a, c: jc.silu(v @ a + c),
                    lambda v, a, c: (v @ a + c) * sigmoid64(v @ a + c),
                    ((65,), (65, 1000), (1000,))),
    "tanh(A.T@v)*s": (lambda a, v, c: jc.tanh(a.T @ v) * c,
                      lambda a, v, c: np.tanh(a.T @ v) * c, ((65, 33), (65,), (33,))),
    "batched gelu(A@v+b)": (lambda a, v, c: jc.gelu(a @ v + c, approximate="tanh"),
                            lambda a, v, c: 0.5 * (a @ v + c) * (1.0 + np.tanh(
                                np.sqrt(2.0 / np.pi) * ((a @ v + c) + 0.044715 *
                                                        (a @ v + c) ** 3))),
                            ((3, 17, 40), (3, 40, 1), (3, 17, 1))),
    "batched (v@A)+residual": (lambda v, a, c: v @ a + c, lambda v, a, c: v @ a + c,
                               ((4, 1, 33), (4, 33, 70), (4, 1, 70))),
    "strided bias": (lambda a, v, c: a @ v + c[::2], lambda a, v, c: a @ v + c[::2],
                     ((17, 30), (30,), (34,))),
}


@pytest.mark.parametrize("name", list(EPILOGUES))
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_fused_epilogues(name, dtype):
    fn, ref_fn, shapes = EPILOGUES[name]
    rng = rng_for("gemv-epilogue", name, str(dtype))
    args = [make(s, dtype, rng=rng, low=-1, high=1) for s in shapes]
    f = jc.jit(fn)
    got = f(*args)
    b = args[1]                  # every case's matmul has args[1] as its right operand
    k = b.shape[0] if b.ndim == 1 else b.shape[-2]
    assert_close(got, ref_fn(*(f64(x) for x in args)), dtype,
                 **tol(dtype, *args[:2], post=True, k=k))
    ks = f.kernels(*args)
    assert len(ks) == 1 and ks[0].kind == "gemv" and "matmul" in ks[0].ops, \
        "\n".join(map(str, ks))


# ---- threads, constants, NaN ------------------------------------------------------------------

@pytest.mark.parametrize("shapes", [((700, 300), (300,)), ((300,), (300, 3000)),
                                    ((8, 100, 257), (8, 257, 1)), ((8, 1, 257), (8, 257, 300)),
                                    ((300, 700), (300,))],
                         ids=lambda s: f"{s[0]}@{s[1]}")
def test_one_and_two_threads_give_the_same_bits(shapes):
    a, b = pair(*shapes, F32, "threads")
    fn = at_v if shapes == ((300, 700), (300,)) else av
    one = jc.jit(fn, num_threads=1)(a, b)
    two = jc.jit(fn, num_threads=2)(a, b)
    assert_close(one, two, F32, exact=True)


# ---- constant matrices: prepacked panels (jitcore/llvm/gemv_pack.py) --------------------------

LEVELS = runnable_levels()
# the constant matrix's product, by layout: (function of the vector and W, W's shape and the
# vector's for (outputs N, inner K)); W is bound with constants=
CONST_LAYOUTS = {
    "x@W": (lambda x, W: x @ W, lambda n, k: ((k, n), (1, k))),
    "x@W.T": (lambda x, W: x @ W.T, lambda n, k: ((n, k), (k,))),
    "W@v": (lambda v, W: W @ v, lambda n, k: ((n, k), (k,))),
    "W.T@v": (lambda v, W: W.T @ v, lambda n, k: ((k, n), (k, 1))),
    "batched(B,1,K)@W": (lambda x, W: x @ W, lambda n, k: ((k, n), (3, 1, k))),
}
# (N, K): outputs below a vector, a panel's second vector partly filled (33 at 16 lanes), many
# panels with a tail; K odd (the accumulator pairs), past one chunk of 128 k's and not whole
CONST_SIZES = [(1, 1), (33, 129), (1003, 300)]


def const_gemv(fn, W, **opts):
    return jc.jit(lambda x: fn(x, W), **opts)


@pytest.mark.parametrize("layout", list(CONST_LAYOUTS))
@pytest.mark.parametrize("level", LEVELS)
def test_constant_matrices_are_prepacked_into_panels(level, layout):
    """A constant matrix is packed once at compile time (explain() says so) and read as
    panels; values as numpy's float64 at every level, float32 and (native) float64."""
    fn, shapes = CONST_LAYOUTS[layout]
    for dtype in (F32, F64) if level == "native" else (F32,):
        for n, k in CONST_SIZES:
            w_shape, x_shape = shapes(n, k)
            W, x = pair(w_shape, x_shape, dtype, layout)
            f = const_gemv(fn, W, target=level)
            got = f(x)
            ref = fn(f64(x), f64(W))
            assert_close(got, ref, dtype, **tol(dtype, x, W, k=k), msg=f"{level} {n}x{k}")
            assert kinds(f, x) == ["gemv"]
            # (one output: a dot product, whose matrix operand may be the vector)
            assert n == 1 or "prepacked" in f.explain(x)


@pytest.mark.parametrize("level", LEVELS)
def test_constant_matrix_epilogue_empty_nan_and_inf(level):
    """The epilogue on each vector of a panel's outputs; K = 0 (the bias alone) and N = 0;
    NaN and infinities in the constant and in the vector reach the outputs they touch."""
    rng = rng_for("const-epilogue", level)
    W, c = make((70, 33), F32, rng=rng, low=-1, high=1), make((33,), F32, rng=rng)
    x = make((70,), F32, rng=rng, low=-1, high=1)
    got = const_gemv(lambda x, W: jc.relu(x @ W + c), W, target=level)(x)
    assert_close(got, np.maximum(f64(x) @ f64(W) + c, 0.0), F32, **tol(F32, x, W, post=True))
    for w_shape, x_shape in (((0, 5), (0,)), ((9, 0), (9,))):
        f = const_gemv(lambda x, W: jc.relu(x @ W) + 1.0, np.ones(w_shape, F32), target=level)
        assert_close(f(np.ones(x_shape, F32)), np.ones(w_shape[1]), F32, exact=True)
    W[3, 5] = np.nan                     # output 5 NaN
    W[7, 1], W[7, 2] = np.inf, -np.inf   # outputs 1 and 2 infinite
    f = const_gemv(lambda x, W: x @ W, W, target=level)
    with np.errstate(invalid="ignore"):
        ref = f64(x) @ f64(W)
    got = f(x)
    assert_close(np.isnan(got), np.isnan(ref), exact=True)
    assert_close(np.where(np.isnan(ref), 0, got), np.where(np.isnan(ref), 0, ref), F32,
                 **tol(F32, x, np.nan_to_num(W, posinf=1, neginf=1)))
    x[-1] = np.inf                       # every output inf or NaN
    with np.errstate(invalid="ignore"):
        ref = f64(x) @ f64(W)
    got = f(x)
    assert_close(np.isnan(got), np.isnan(ref), exact=True)
    assert np.array_equal(got[~np.isnan(ref)], ref[~np.isnan(ref)])


def test_constant_matrix_long_k_and_threads():
    """K = 100,000 within 2 sqrt(K) eps of float64 (relative to sum |x_k W_kn|: the panels
    sum chunks of 128 k's, then the chunks); 1 and 2 threads give the same bits."""
    W, x = pair((100_000, 3), (100_000,), F32, "const-long")
    got = const_gemv(lambda x, W: x @ W, W)(x)
    err = np.max(np.abs(got - f64(x) @ f64(W)) / (np.abs(f64(x)) @ np.abs(f64(W))))
    assert err <= 2 * np.sqrt(100_000) * np.finfo(F32).eps, err
    W, x = pair((300, 3000), (300,), F32, "const-threads")
    one = const_gemv(lambda x, W: x @ W, W, num_threads=1)(x)
    two = const_gemv(lambda x, W: x @ W, W, num_threads=2)(x)
    assert_close(one, two, F32, exact=True)


@pytest.mark.parametrize("fn, shapes", [(av, ((40, 70), (70,))), (av, ((70,), (70, 40)))],
                         ids=["rows", "columns"])
def test_nan_and_inf_propagate(fn, shapes):
    a, b = pair(*shapes, F32, "nan")
    mat = a if a.ndim == 2 else b
    vec = b if a.ndim == 2 else a
    mat[3, 5] = np.nan               # one output NaN (row 3 of A, or column 5 of A)
    mat[7, 1], mat[7, 2] = np.inf, -np.inf
    vec[-1] = np.inf                 # every output inf or NaN
    with np.errstate(invalid="ignore"):
        ref = fn(f64(a), f64(b))
    got = jc.jit(fn)(a, b)
    assert_close(np.isnan(got), np.isnan(ref), exact=True)
    assert_close(np.where(np.isnan(ref), 0, got), np.where(np.isnan(ref), 0, ref), F32,
                 exact=True)


def test_explain_names_the_gemv_kernel():
    a, v = pair((64, 65), (65,), F32, "explain")
    text = jc.jit(av).explain(a, v)
    assert "gemv" in text and "gemm" not in text

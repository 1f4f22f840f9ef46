"""Matrix multiplication: `x @ w` and `jc.matmul` against numpy, the fused GEMM kernel
(bias, activation, residual and scale post-ops compiled into one `kind == "gemm"` kernel),
weight prepacking of `constants=`, thread counts, empty dims, NaN/Inf and shape errors.

Tolerance rule. References are numpy's float64 matmul of float64 copies. A product with inner
dimension K is compared with `helpers.reduction_tol(dtype, K, max|a| * max|b|)`:
rtol = TOL rtol + 8 * eps * sqrt(K), atol = TOL atol + 4 * K * eps * max|a| * max|b| (eps the
unit roundoff of the result dtype). Where a post-op follows the product (bias, activation,
residual, scale, softmax), its own elementwise TOL is added to rtol and to atol, and the
product's atol is doubled (all the post-ops have a slope of at most ~1.13).
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import jitcore as jc
from helpers import (F32, F64, I32, NARROW_WIDTHS, TOL, assert_close, erf64, f64, fresh_compiles,
                     make, reduction_tol, rng_for)

DIMS = [1, 3, 17, 63, 64, 65, 255]


def _absmax(x) -> float:
    return float(np.max(np.abs(f64(x)), initial=0.0))


def mm_tol(dtype, a, b) -> dict:
    """rtol/atol for a @ b in dtype (the module docstring's rule), as assert_close kwargs."""
    k = np.shape(a)[-1]
    rtol, atol = reduction_tol(dtype, k, _absmax(a) * _absmax(b))
    return {"rtol": rtol, "atol": atol}


def post_tol(dtype, a, b) -> dict:
    """mm_tol with a post-op after the product: its TOL added, the product's atol doubled."""
    t = mm_tol(dtype, a, b)
    rtol, atol = TOL[np.dtype(dtype)]
    return {"rtol": t["rtol"] + rtol, "atol": 2 * t["atol"] + atol}


def operands(m, k, n, dtype, key="mm"):
    """x (m, k) in [-1, 1] and W (k, n) scaled so x @ W has a standard deviation near 1."""
    rng = rng_for(key, m, k, n, str(dtype))
    s = 3.0 / np.sqrt(max(k, 1))
    x = make((m, k), dtype, rng=rng, low=-1, high=1)
    return x, make((k, n), dtype, rng=rng, low=-s, high=s)


def bias(n, dtype, key="bias"):
    """A bias in [-4, 4], so that x @ W + b reaches every piece of the piecewise post-ops."""
    return make((n,), dtype, rng=rng_for(key, n, str(dtype)), low=-4, high=4)


def embed(x, step0, step1):
    """A view with steps (negative ones included) of a NaN-filled buffer, holding x's values:
    a kernel that reads an element between the strides gets NaN."""
    r, c = x.shape
    big = np.full((abs(step0) * r, abs(step1) * c), np.nan, x.dtype)
    view = big[::step0, ::step1]
    view[...] = x
    return view


def sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-x))


mm = jc.jit(lambda a, b: a @ b)


# ---- shapes --------------------------------------------------------------------------------

# Shapes are (M, K, N). Every (M, N) pair of DIMS once, with K from a Latin square: every
# (M, K) and (N, K) pair of DIMS occurs too (a pairwise covering set of 49 shapes).
GRID = [(m, DIMS[(i + j) % len(DIMS)], n)
        for i, m in enumerate(DIMS) for j, n in enumerate(DIMS)]
# long M, N and K; one square; and K * N large enough to need several blocks of each
LARGE = [(1000, 255, 65), (17, 64, 1000), (65, 1000, 17), (256, 256, 256), (33, 777, 700)]
GRID_F64 = GRID[::6] + LARGE[::2]


def _mkn_id(s):
    return "x".join(map(str, s))


def check_mm(m, k, n, dtype, key="grid", f=mm):
    x, w = operands(m, k, n, dtype, key)
    got = f(x, w)
    assert_close(got, f64(x) @ f64(w), dtype, **mm_tol(dtype, x, w), msg=f"{m}x{k} @ {k}x{n}")


@pytest.mark.parametrize("mkn", GRID + LARGE, ids=_mkn_id)
def test_matmul_shapes_float32(mkn):
    check_mm(*mkn, F32)


@pytest.mark.parametrize("mkn", GRID_F64, ids=_mkn_id)
def test_matmul_shapes_float64(mkn):
    check_mm(*mkn, F64)


# The narrower vector widths (other micro-kernel shapes and tails): every 4th grid shape and
# the large ones in float32, a few in float64, and a fused post-op.
NARROW_MM = [(s, F32) for s in GRID[::4] + LARGE[:2]] + [(s, F64) for s in GRID[::12]]


@functools.lru_cache(maxsize=None)
def _mm_at(width):
    return jc.jit(lambda a, b: a @ b, vector_width=width)


# (M, K, N, dtype, weights as constants): short and long k blocks, partial row tiles and
# panels, several column blocks
ORDER_CASES = [(1000, 64, 300, F32, False), (65, 255, 1000, F32, True), (40, 700, 333, F32, True),
               (37, 17, 129, F64, False), (130, 300, 70, F64, True)]


@pytest.mark.parametrize("width", [None, 256, 128], ids=lambda w: f"w{w}")
@pytest.mark.parametrize("m, k, n, dtype, const", ORDER_CASES, ids=str)
def test_micro_tile_orders_give_the_same_bits(m, k, n, dtype, const, width, monkeypatch):
    """Row tiles first (short k blocks: gemm.ROWS_OUTER_MAX_K) or column panels first, every
    element is the same sum in the same order: identical bits, with a bias + relu epilogue
    and a residual read beside it, at 512-, 256- and 128-bit vectors (the 6 x 2 tiles of
    AVX2 and SSE levels)."""
    from jitcore.llvm import gemm
    x, w = operands(m, k, n, dtype, "order")
    b, r = bias(n, dtype), make((m, n), dtype, rng=rng_for("order-r", m, n), low=-1, high=1)

    def f(x, w, b, r):
        return jc.relu(x @ w + b) + r
    outs = []
    for max_k in (0, 1 << 30):                   # panels first, then rows first
        fresh_compiles(monkeypatch)
        monkeypatch.setattr(gemm, "ROWS_OUTER_MAX_K", max_k)
        fn = jc.jit(f, constants=dict(w=w, b=b), vector_width=width) if const else \
            jc.jit(f, vector_width=width)
        outs.append(fn(x, r) if const else fn(x, w, b, r))
    ref = np.maximum(f64(x) @ f64(w) + f64(b), 0) + f64(r)
    assert_close(outs[1], ref, dtype, **post_tol(dtype, x, w))
    np.testing.assert_array_equal(outs[0], outs[1])


@pytest.mark.parametrize("width", NARROW_WIDTHS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("mkn, dtype", NARROW_MM, ids=lambda v: _mkn_id(v) if
                         isinstance(v, tuple) else str(v))
def test_matmul_narrow_widths(mkn, dtype, width):
    check_mm(*mkn, dtype, f=_mm_at(width))
    x, w = operands(*mkn, dtype, "grid")
    assert all(k.vector_width == width for k in _mm_at(width).kernels(x, w))


@pytest.mark.parametrize("width", NARROW_WIDTHS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_post_op_narrow_widths(dtype, width):
    x, w, b = _post_args(dtype)
    post, ref_fn = POST_OPS["gelu"]
    f = jc.jit(lambda x, w, b: post(x @ w + b), vector_width=width)
    assert_close(f(x, w, b), ref_fn(f64(x) @ f64(w) + f64(b)), dtype, **post_tol(dtype, x, w))


@pytest.mark.parametrize("post_name", ["gelu", "relu", "tanh"])
def test_post_op_of_a_reshaped_gemm_fuses_into_it(post_name):
    """`post(reshape(x @ w + b, (n, h, w, c)))`, as a Linear over a channels-last image
    (ConvNeXt's MLP): the post-op runs before the reshape (passes/simplify.py), so it is the
    GEMM's epilogue, with no kernel of its own; the values are numpy's."""
    x, w, b = _post_args(F32)
    m, n = x.shape[0], w.shape[1]
    image = (1, 2, m // 2, n) if m % 2 == 0 else (1, 1, m, n)
    post, ref_fn = POST_OPS[post_name]
    f = jc.jit(lambda x, w, b: jc.reshape(post(jc.reshape(x @ w + b, image)), (m, n)))
    assert_close(f(x, w, b), ref_fn(f64(x) @ f64(w) + f64(b)), F32, **post_tol(F32, x, w))
    kernels = f.kernels(x, w, b)
    assert len(kernels) == 1 and kernels[0].kind == "gemm", kernels


def test_matmul_function_and_eager():
    x, w = operands(33, 65, 17, F32, "fn")
    ref, tol = f64(x) @ f64(w), mm_tol(F32, x, w)
    assert_close(jc.jit(lambda a, b: jc.matmul(a, b))(x, w), ref, F32, **tol)
    assert_close(jc.jit(lambda a, b: np.matmul(a, b))(x, w), ref, F32, **tol)
    assert_close(jc.matmul(x, w), ref, F32, **tol)                     # eager


def test_integer_matmul_computes_in_float64():
    rng = rng_for("int-mm")
    a, b = make((17, 33), I32, rng=rng), make((33, 9), I32, rng=rng)
    ref = a.astype(np.int64) @ b.astype(np.int64)                # exact in float64
    assert_close(mm(a, b), ref, F64, exact=True)
    c = make((33, 9), F32, rng=rng)
    assert_close(mm(a, c), f64(a) @ f64(c), np.result_type(a, c), **mm_tol(F64, a, c))


@pytest.mark.parametrize("shapes", [
    ((65,), (65,)), ((64,), (64, 17)), ((17, 255), (255,)), ((1,), (1, 3)),
], ids=lambda s: f"{s[0]}@{s[1]}")
def test_one_dimensional_operands(shapes):
    rng = rng_for("1d", shapes)
    a, b = make(shapes[0], F32, rng=rng), make(shapes[1], F32, rng=rng)
    ref = np.matmul(f64(a), f64(b))
    assert_close(mm(a, b), ref, F32, **mm_tol(F32, a, b))


BATCHED = [
    ((3, 17, 65), (3, 65, 63)),
    ((2, 1, 17, 64), (1, 3, 64, 33)),
    ((4, 17, 65), (65, 63)),
    ((17, 65), (2, 65, 63)),
    ((1, 9, 5), (3, 5, 7)),
    ((65,), (3, 65, 17)),
    ((2, 17, 65), (65,)),
]


@pytest.mark.parametrize("shapes, dtype", [(s, F32) for s in BATCHED]
                         + [(s, F64) for s in BATCHED[:2]],
                         ids=lambda v: f"{v[0]}@{v[1]}" if isinstance(v, tuple) else str(v))
def test_batched_with_broadcasting(shapes, dtype):
    rng = rng_for("batched", shapes, str(dtype))
    a, b = make(shapes[0], dtype, rng=rng), make(shapes[1], dtype, rng=rng)
    assert_close(mm(a, b), np.matmul(f64(a), f64(b)), dtype, **mm_tol(dtype, a, b))


def _contiguous_t(x):
    return np.ascontiguousarray(x.T)


def _nan_padded_rows(x):
    big = np.full((2 * x.shape[0], x.shape[1] + 1), np.nan, x.dtype)
    big[::2, 1:] = x
    return big


# (jitted function, arguments built from the (M, K) and (K, N) operands); all compute x @ w
LAYOUTS = {
    "T-lhs-in-jit": (lambda at, w: at.T @ w, lambda x, w: (_contiguous_t(x), w)),
    "transpose-rhs-in-jit": (lambda x, wt: x @ jc.transpose(wt),
                             lambda x, w: (x, _contiguous_t(w))),
    "T-both-in-jit": (lambda at, wt: jc.matmul(at.T, wt.T),
                      lambda x, w: (_contiguous_t(x), _contiguous_t(w))),
    "numpy-T-views": (lambda x, w: x @ w,
                      lambda x, w: (_contiguous_t(x).T, _contiguous_t(w).T)),
    "stepped-views": (lambda x, w: x @ w, lambda x, w: (embed(x, 2, 3), embed(w, 3, 2))),
    "negative-steps": (lambda x, w: x @ w, lambda x, w: (embed(x, -1, -2), embed(w, 2, -1))),
    "slices-in-jit": (lambda big, w: big[::2, 1:] @ w, lambda x, w: (_nan_padded_rows(x), w)),
    "T-of-stepped-view": (lambda at, w: at.T @ w,
                          lambda x, w: (embed(_contiguous_t(x), 2, 2), w)),
}


@pytest.mark.parametrize("layout, dtype", [(n, F32) for n in LAYOUTS]
                         + [(n, F64) for n in ("T-both-in-jit", "negative-steps")], ids=str)
def test_transposed_and_strided_operands(layout, dtype):
    fn, build = LAYOUTS[layout]
    x, w = operands(17, 65, 63, dtype, "layout")
    got = jc.jit(fn)(*build(x, w))
    assert_close(got, f64(x) @ f64(w), dtype, **mm_tol(dtype, x, w))


# ---- fused post-ops --------------------------------------------------------------------------

# name -> (jitcore post-op, float64 reference)
POST_OPS = {
    "relu": (jc.relu, lambda y: np.maximum(y, 0.0)),
    "gelu": (jc.gelu, lambda y: 0.5 * y * (1.0 + erf64(y / np.sqrt(2.0)))),
    "gelu-tanh": (lambda y: jc.gelu(y, approximate="tanh"),
                  lambda y: 0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi)
                                                      * (y + 0.044715 * y ** 3)))),
    "sigmoid": (jc.sigmoid, sigmoid64),
    "tanh": (jc.tanh, np.tanh),
    "hardtanh": (lambda y: jc.hardtanh(y, -0.5, 2.0), lambda y: np.clip(y, -0.5, 2.0)),
    "hardswish": (jc.hardswish, lambda y: y * np.clip(y + 3.0, 0.0, 6.0) / 6.0),
    "hardsigmoid": (jc.hardsigmoid, lambda y: np.clip(y + 3.0, 0.0, 6.0) / 6.0),
    "leaky_relu": (lambda y: jc.leaky_relu(y, 0.1), lambda y: np.where(y > 0, y, 0.1 * y)),
    "silu": (jc.silu, lambda y: y * sigmoid64(y)),
    "relu6": (jc.relu6, lambda y: np.clip(y, 0.0, 6.0)),
}
POST_SHAPE = (37, 63, 65)                     # M, K, N: no dim a multiple of a vector


def _post_fn(name):
    post = POST_OPS[name][0]
    return jc.jit(lambda x, w, b: post(x @ w + b))


def _post_args(dtype, shape=POST_SHAPE):
    m, k, n = shape
    x, w = operands(m, k, n, dtype, "post")
    return x, w, bias(n, dtype)


@pytest.mark.parametrize("name", list(POST_OPS))
def test_post_op_values(name):
    x, w, b = _post_args(F32)
    ref = POST_OPS[name][1](f64(x) @ f64(w) + f64(b))
    assert_close(_post_fn(name)(x, w, b), ref, F32, **post_tol(F32, x, w))


@pytest.mark.parametrize("name", ["gelu", "hardswish"])
def test_post_op_values_float64_and_tails(name):
    x, w, b = _post_args(F64, shape=(65, 17, 255))
    ref = POST_OPS[name][1](f64(x) @ f64(w) + f64(b))
    assert_close(_post_fn(name)(x, w, b), ref, F64, **post_tol(F64, x, w))


def assert_one_gemm_kernel(f, args, *prims):
    ks = f.kernels(*args)
    assert len(ks) == 1, "expected one fused gemm kernel, got:\n" + \
        "\n".join(str(k) for k in ks)
    k = ks[0]
    assert k.kind == "gemm", str(k)
    for p in ("matmul",) + prims:
        assert p in k.ops, f"{p!r} not in {k.ops}"


def test_plain_matmul_is_one_gemm_kernel():
    x, w = operands(64, 65, 63, F32, "plain")
    assert_one_gemm_kernel(mm, (x, w))


@pytest.mark.parametrize("name", list(POST_OPS))
def test_post_op_fuses_into_one_gemm_kernel(name):
    assert_one_gemm_kernel(_post_fn(name), _post_args(F32), "add")


def _chain_args(dtype):
    x, w, b = _post_args(dtype)
    rng = rng_for("chain", str(dtype))
    m, n = x.shape[0], w.shape[1]
    return x, w, b, make((m, n), dtype, rng=rng), make((m, 1), dtype, rng=rng, low=-2, high=2)


def gelu_residual(x, w, b, r):
    return jc.gelu(x @ w + b) + r


def scaled_rows(x, w, s):
    return (x @ w) * s


def test_bias_gelu_residual_values():
    x, w, b, r, _ = _chain_args(F32)
    ref = POST_OPS["gelu"][1](f64(x) @ f64(w) + f64(b)) + f64(r)
    assert_close(jc.jit(gelu_residual)(x, w, b, r), ref, F32, **post_tol(F32, x, w))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_row_scale_values(dtype):
    x, w, _, _, s = _chain_args(dtype)
    ref = (f64(x) @ f64(w)) * f64(s)
    tol = post_tol(dtype, x, w)
    tol["atol"] *= _absmax(s)
    assert_close(jc.jit(scaled_rows)(x, w, s), ref, dtype, **tol)


def test_bias_gelu_residual_is_one_gemm_kernel():
    x, w, b, r, _ = _chain_args(F32)
    assert_one_gemm_kernel(jc.jit(gelu_residual), (x, w, b, r), "add")


def test_strided_residual_and_output():
    """A residual read across its rows (a transposed view) and an output written with a
    column stride: the epilogue's loads and the store are not contiguous along N."""
    x, w, b, r, _ = _chain_args(F32)
    rt = _contiguous_t(r).T
    out = np.asfortranarray(np.full(r.shape, np.nan, np.float32))
    ref = POST_OPS["gelu"][1](f64(x) @ f64(w) + f64(b)) + f64(r)
    f = jc.jit(gelu_residual)
    assert f(x, w, b, rt, out=out) is out
    assert_close(out, ref, F32, **post_tol(F32, x, w))
    out2 = embed(np.zeros(r.shape, np.float32), 1, 2)
    assert_close(mm(x, w, out=out2), f64(x) @ f64(w), F32, **mm_tol(F32, x, w))


def test_row_scale_is_one_gemm_kernel():
    x, w, _, _, s = _chain_args(F32)
    assert_one_gemm_kernel(jc.jit(scaled_rows), (x, w, s), "mul")


def test_batched_bias_activation_values():
    rng = rng_for("batched-post")
    x = make((3, 17, 64), F32, rng=rng, low=-1, high=1)
    w = make((64, 33), F32, rng=rng, low=-0.4, high=0.4)
    b = bias(33, F32, "batched-post")
    got = jc.jit(lambda x, w, b: jc.silu(x @ w + b))(x, w, b)
    y = f64(x) @ f64(w) + f64(b)
    assert_close(got, y * sigmoid64(y), F32, **post_tol(F32, x, w))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_matmul_feeding_a_softmax(dtype):
    rng = rng_for("attention", str(dtype))
    q = make((33, 64), dtype, rng=rng, low=-1, high=1)
    k = make((70, 64), dtype, rng=rng, low=-1, high=1)
    got = jc.jit(lambda q, k: jc.softmax((q @ k.T) * 0.125))(q, k)
    logits = (f64(q) @ f64(k).T) * 0.125
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    assert_close(got, e / e.sum(axis=-1, keepdims=True), dtype, **post_tol(dtype, q, k))


# ---- constants and weight prepacking ---------------------------------------------------------

def dense_gelu(x, W, b):
    return jc.gelu(x @ W + b)


def dense_relu(x, w, b):
    return jc.relu(x @ w + b)


def _dense_ref(x, W, b):
    return POST_OPS["gelu"][1](f64(x) @ f64(W) + f64(b))


def _dense_args(dtype=F32, m=37, k=65, n=63):
    x, W = operands(m, k, n, dtype, "dense")
    return x, W, bias(n, dtype, "dense")


@pytest.mark.parametrize("w_layout", ["contiguous", "transposed-view", "stepped-view"])
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_constants_prepacked_and_not_agree_with_numpy(dtype, w_layout):
    x, W, b = _dense_args(dtype)
    const = {"contiguous": W, "transposed-view": _contiguous_t(W).T,
             "stepped-view": embed(W, 2, -3)}[w_layout]
    ref, tol = _dense_ref(x, W, b), post_tol(dtype, x, W)
    packed = jc.jit(dense_gelu, constants={"W": const})(x, b)
    plain = jc.jit(dense_gelu, constants={"W": const}, prepack_weights=False)(x, b)
    assert_close(packed, ref, dtype, **tol, msg="prepacked")
    assert_close(plain, ref, dtype, **tol, msg="prepack_weights=False")
    assert_close(packed, f64(plain), dtype, **tol, msg="prepacked vs not")


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_prepacked_weights_of_several_blocks(dtype):
    """K and N large enough that the packed weights hold several blocks along both (K: two
    whole k blocks of this machine's plan and a partial one; M, N: partial micro-tiles)."""
    from jitcore.llvm.gemm import k_block
    bits = jc.target_info()["vector_bits"]
    nr = (4 if bits >= 512 else 2) * bits // (8 * dtype.itemsize)      # gemm.plan's NR
    k = 2 * k_block(nr, dtype.itemsize) + 37
    x, W = operands(13, k, 700, dtype, "blocks")
    b = bias(700, dtype, "blocks")
    ref, tol = np.maximum(f64(x) @ f64(W) + f64(b), 0.0), post_tol(dtype, x, W)
    for prepack in (True, False):
        f = jc.jit(dense_relu, constants={"w": W}, prepack_weights=prepack)
        assert_close(f(x, b), ref, dtype, **tol, msg=f"prepack_weights={prepack}")


def test_constants_serve_several_signatures():
    x, W, b = _dense_args()
    f = jc.jit(dense_gelu, constants={"W": W})
    for m in (1, 37, 200):
        xm = make((m, W.shape[0]), F32, rng=rng_for("sigs", m), low=-1, high=1)
        assert_close(f(xm, b), _dense_ref(xm, W, b), F32, **post_tol(F32, xm, W), msg=f"M={m}")
    assert_close(f(x, b), _dense_ref(x, W, b), F32, **post_tol(F32, x, W))


def test_explain_says_prepacked():
    x, W, b = _dense_args()
    assert "prepacked" in jc.jit(dense_gelu, constants={"W": W}).explain(x, b)
    off = jc.jit(dense_gelu, constants={"W": W}, prepack_weights=False)
    assert "prepacked" not in off.explain(x, b)


def test_env_var_disables_prepacking():
    code = ("import numpy as np, jitcore as jc\n"
            "W = np.ones((65, 63), np.float32)\n"
            "f = jc.jit(lambda x, W: x @ W, constants={'W': W})\n"
            "x = np.ones((37, 65), np.float32)\n"
            "print('prepacked' in f.explain(x), bool(np.all(f(x) == 65.0)))\n")
    env = {**os.environ, "JITCORE_PREPACK": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_constants_name_that_is_not_a_parameter_is_an_error():
    x, W, b = _dense_args()
    with pytest.raises((jc.JitcoreError, TypeError, ValueError), match=r"\bV\b"):
        jc.jit(dense_gelu, constants={"V": W})(x, W, b)


def test_constant_is_copied_at_jit():
    x, W, b = _dense_args()
    ref = _dense_ref(x, W, b)
    mine = W.copy()
    f = jc.jit(dense_gelu, constants={"W": mine})
    mine[...] = 7.0                                   # after jit, before the first call
    assert_close(f(x, b), ref, F32, **post_tol(F32, x, W))


def test_mutating_the_weights_after_a_call_changes_nothing():
    x, W, b = _dense_args()
    ref = _dense_ref(x, W, b)
    mine = W.copy()
    f = jc.jit(dense_gelu, constants={"W": mine})
    first = f(x, b)
    mine[...] = 7.0
    assert_close(f(x, b), first, F32, exact=True)
    x2 = make((5, W.shape[0]), F32, rng=rng_for("after-mutation"), low=-1, high=1)
    assert_close(f(x2, b), _dense_ref(x2, W, b), F32, **post_tol(F32, x2, W), msg="new M")
    assert_close(first, ref, F32, **post_tol(F32, x, W))


def test_shape_mismatch_with_a_constant_is_a_shape_error():
    x, W, b = _dense_args()
    f = jc.jit(dense_gelu, constants={"W": W})
    with pytest.raises(jc.ShapeError):
        f(x[:, :-1], b)


# ---- threads, empty dims, NaN/Inf, errors ----------------------------------------------------

def test_one_and_two_threads_agree():
    x, w = operands(300, 200, 500, F32, "threads")
    b = bias(500, F32, "threads")
    one = jc.jit(dense_relu, num_threads=1)(x, w, b)
    two = jc.jit(dense_relu, num_threads=2)(x, w, b)
    ref, tol = np.maximum(f64(x) @ f64(w) + f64(b), 0.0), post_tol(F32, x, w)
    assert_close(one, ref, F32, **tol, msg="1 thread")
    assert_close(two, ref, F32, **tol, msg="2 threads")
    assert_close(one, f64(two), F32, **tol, msg="1 vs 2 threads")


EMPTY_MN = [(0, 17, 65), (17, 65, 0), (0, 0, 3), (3, 17, 0)]


@pytest.mark.parametrize("mkn, dtype", [(s, F32) for s in EMPTY_MN] + [(EMPTY_MN[0], F64)],
                         ids=lambda v: _mkn_id(v) if isinstance(v, tuple) else str(v))
def test_empty_m_or_n(mkn, dtype):
    m, k, n = mkn
    x, w = np.ones((m, k), dtype), np.ones((k, n), dtype)
    got = mm(x, w)
    assert got.shape == (m, n) and got.dtype == dtype


@pytest.mark.parametrize("threads", [1, 2])
def test_empty_batch(threads):
    """A batch of zero matrices (the work split divided by the batch: found by the fuzzer)."""
    x, w = np.ones((0, 3, 4), F32), np.ones((0, 4, 5), F32)
    f = jc.jit(lambda a, b: jc.relu(a @ b) + 1.0, num_threads=threads)
    assert f(x, w).shape == (0, 3, 5)
    assert f(x, np.ones((4, 5), F32)).shape == (0, 3, 5)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_empty_k_gives_zeros(dtype):
    x, w = np.ones((17, 0), dtype), np.ones((0, 65), dtype)
    assert_close(mm(x, w), np.zeros((17, 65)), dtype, exact=True)
    b = bias(65, dtype, "empty-k")
    got = _post_fn("relu")(x, w, b)
    assert_close(got, np.broadcast_to(np.maximum(f64(b), 0.0), (17, 65)), dtype, exact=True)


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_nan_and_inf_propagate(dtype):
    x, w = operands(37, 65, 63, dtype, "nan")
    x[3, 10] = np.nan                # row 3 all NaN
    x[20, 0] = np.inf                # row 20 +-inf by the sign of w[0]
    x[30, 5], x[30, 6] = np.inf, -np.inf
    w[7, 40] = np.nan                # column 40 all NaN
    with np.errstate(invalid="ignore"):
        ref = f64(x) @ f64(w)
    got = mm(x, w)
    assert np.all(np.isnan(got[3])) and np.all(np.isnan(got[:, 40]))
    finite = np.isfinite(ref)
    assert_close(np.where(finite, 0, got), np.where(finite, 0, ref), dtype, exact=True)
    xs, ws = np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0), np.nan_to_num(w, nan=0.0)
    assert_close(got[finite], ref[finite], dtype, **mm_tol(dtype, xs, ws))


@pytest.mark.parametrize("shapes", [
    ((3, 4), (5, 6)), ((4,), (5,)), ((2, 3, 4), (3, 4, 5)), ((7,), (3, 6, 2)),
], ids=lambda s: f"{s[0]}@{s[1]}")
def test_shape_mismatch_is_a_shape_error_at_trace_time(shapes):
    specs = [jc.spec(s, jc.float32) for s in shapes]
    with pytest.raises(jc.ShapeError):
        mm.graph(*specs)
    with pytest.raises(jc.ShapeError):
        mm(*(np.ones(s, np.float32) for s in shapes))

"""matmul_precision="bf16": float32 matmuls on bf16-rounded operands, float32 accumulation
(jitcore/llvm/bf16.py, gemm_bf16.py), at every x86-64 level this host runs: the vdpbf16ps
kernel where the level has AVX512_BF16 (native on such a host), the float32-FMA fallback on
rounded operands elsewhere, and the GEMV (M or N = 1) rounding as it loads.

Tolerance rule. Two checks per product, both against numpy's float64 matmul:
- exact operands: the reference is computed FROM the bf16-rounded operands (this module's
  `rounded`, round to nearest even), so the only error left is float32 accumulation:
  test_gemm's rule, rtol = 8 eps sqrt(K) (+ TOL), atol = 4 K eps max|a| max|b| (+ TOL),
  eps = 2^-24 (and its post-op widening where an epilogue follows);
- the unrounded operands: the normwise error ||C - A B||_F is at most 2^-7 || |A| |B| ||_F
  (each operand carries bf16's unit roundoff 2^-8: |dC| <= (2u + u^2) |A| |B|, plus the
  accumulation's), and, for K >= 16 with random data, at least 2^-12 ||A B||_F: the bf16
  path was taken (random rounding errors give ~2^-8.5 ||A B||_F; a float32 product ~2^-23).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from jitcore import config
from jitcore.ir.errors import JitcoreError
from jitcore.llvm import bf16
from helpers import F32, assert_close, make, rng_for, runnable_levels
from test_gemm import mm_tol, post_tol


LEVEL_NAMES = runnable_levels()
SHAPES = [(1, 5, 7), (3, 1, 16), (3, 33, 64), (17, 64, 65), (17, 130, 1), (128, 257, 95),
          (128, 1024, 130), (6, 2051, 64)]


def rounded(x) -> np.ndarray:
    """float64 copy of x's values rounded to bf16."""
    return bf16.rounded(np.asarray(x, np.float32)).astype(np.float64)


def operands(m, k, n, key="bf16"):
    rng = rng_for(key, m, k, n)
    s = 3.0 / np.sqrt(max(k, 1))
    return make((m, k), F32, rng=rng, low=-1, high=1), make((k, n), F32, rng=rng, low=-s, high=s)


def check(got, a, b, *, post=None, msg=""):
    """Both checks of the module docstring for got = post(a @ b) (post: a function of the
    float64 product, None for the product itself)."""
    tol = (post_tol if post is not None else mm_tol)(F32, a, b)
    post = post or (lambda c: c)
    ref = post(rounded(a) @ rounded(b))
    assert_close(got, ref, F32, **tol, msg=msg)
    k = np.shape(a)[-1]
    exact = post(np.asarray(a, np.float64) @ np.asarray(b, np.float64))
    scale = np.linalg.norm(np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64)))
    if scale == 0 or not np.all(np.isfinite(exact)):
        return
    err = np.linalg.norm(got - exact)
    assert err <= 2.0 ** -7 * scale, f"{msg}: error {err:.2e} vs the unrounded product"
    if k >= 16:
        size = np.linalg.norm(exact)
        assert err >= 2.0 ** -12 * size, f"{msg}: error {err / size:.2e}: not in bf16?"


@pytest.mark.parametrize("level", LEVEL_NAMES)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_constant_and_argument_weights(level, m, k, n):
    """x @ W with W a constant (prepacked as bf16 pairs at compile time) and W an argument
    (packed at run time)."""
    x, w = operands(m, k, n)
    const = jc.jit(lambda x: x @ w, matmul_precision="bf16", target=level)
    arg = jc.jit(lambda x, w: x @ w, matmul_precision="bf16", target=level)
    check(const(x), x, w, msg=f"{level} constant W")
    check(arg(x, w), x, w, msg=f"{level} argument W")


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_epilogues(level):
    """relu(x @ W + b) and x @ W + r: the float32 epilogue after the bf16 product."""
    x, w = operands(17, 300, 70, "epi")
    b = make((70,), F32, rng=rng_for("bias"), low=-1, high=1)
    r = make((17, 70), F32, rng=rng_for("res"), low=-1, high=1)
    relu = jc.jit(lambda x: jc.relu(x @ w + b), matmul_precision="bf16", target=level)
    res = jc.jit(lambda x, r: x @ w + r, matmul_precision="bf16", target=level)
    check(relu(x), x, w, post=lambda c: np.maximum(c + b, 0), msg=f"{level} bias+relu")
    check(res(x, r), x, w, post=lambda c: c + r, msg=f"{level} residual")


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_batched_and_transposed(level):
    """Batched matmuls of two arguments, B transposed (packed column by column) and A
    transposed (A's pairs gathered along a stride)."""
    rng = rng_for("batched")
    a = make((3, 17, 40), F32, rng=rng, low=-1, high=1)
    b = make((3, 40, 33), F32, rng=rng, low=-1, high=1)
    bt = np.ascontiguousarray(b.swapaxes(1, 2))
    at = np.ascontiguousarray(a.swapaxes(1, 2))
    opts = dict(matmul_precision="bf16", target=level)
    check(jc.jit(lambda a, b: a @ b, **opts)(a, b), a, b, msg=f"{level} batched")
    check(jc.jit(lambda a, bt: a @ jc.transpose(bt, (0, 2, 1)), **opts)(a, bt), a, b,
          msg=f"{level} B transposed")
    check(jc.jit(lambda at, b: jc.transpose(at, (0, 2, 1)) @ b, **opts)(at, b), a, b,
          msg=f"{level} A transposed")


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_gemv(level):
    """M = 1 and N = 1 (the GEMV kernel) round their operands too."""
    x, w = operands(1, 300, 200, "gemv")
    v = make((300,), F32, rng=rng_for("v"), low=-1, high=1)
    opts = dict(matmul_precision="bf16", target=level)
    row = jc.jit(lambda x: x @ w, **opts)
    check(row(x), x, w, msg=f"{level} 1 x N")
    col = jc.jit(lambda m, v: m @ v, **opts)(np.ascontiguousarray(w.T), v)
    check(col[:, None], np.ascontiguousarray(w.T), v[:, None], msg=f"{level} N = 1")
    assert "bf16-rounded operands" in row.explain(x)


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_empty(level):
    """M, N or K of 0: empty results, or the bias alone when K = 0."""
    b = np.arange(5, dtype=np.float32)
    for m, k, n in ((0, 8, 5), (4, 8, 0), (4, 0, 5)):
        x, w = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
        got = jc.jit(lambda x, w: x @ w, matmul_precision="bf16", target=level)(x, w)
        assert got.shape == (m, n) and not got.any()
    x, w = np.ones((4, 0), np.float32), np.ones((0, 5), np.float32)
    got = jc.jit(lambda x, w: x @ w + b, matmul_precision="bf16", target=level)(x, w)
    assert_close(got, np.broadcast_to(b, (4, 5)).astype(np.float64), F32)


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_nan_inf(level):
    """A NaN or infinity in a row of A reaches that row's outputs, as in the reference."""
    x, w = operands(7, 40, 20, "naninf")
    x[2, 5], x[4, 39] = np.nan, np.inf
    x[5, 0] = -np.inf
    got = jc.jit(lambda x: x @ w, matmul_precision="bf16", target=level)(x)
    ref = rounded(x) @ rounded(w)
    assert_close(got, ref, F32, **mm_tol(F32, np.nan_to_num(x, posinf=1, neginf=1), w))
    assert np.isnan(got[2]).all() and np.isinf(got[4]).all() and np.isinf(got[5]).all()


def test_native_is_vdpbf16ps_and_levels_fall_back():
    """explain() names the path: vdpbf16ps where the target has AVX512_BF16, the fallback
    elsewhere, nothing when the policy is fp32."""
    x, w = operands(17, 64, 65)
    for level in LEVEL_NAMES:
        fn = jc.jit(lambda x: x @ w, matmul_precision="bf16", target=level)
        text = fn.explain(x)
        if bf16.native(jc.targetinfo.select_target(target=level)):
            assert "vdpbf16ps" in text and "vdpbf16ps" in fn.asm(x)
        else:
            assert "slower fallback" in text
    assert "bf16" not in jc.jit(lambda x: x @ w).explain(x)


def test_policy_default_and_setting():
    """Default and "highest" stay float32; JITCORE_MATMUL_PRECISION's setting applies when
    jit does not say; a float64 matmul never rounds; a bad name is refused."""
    x, w = operands(17, 256, 33)
    exact = x.astype(np.float64) @ w
    for fn in (jc.jit(lambda x: x @ w), jc.jit(lambda x: x @ w, matmul_precision="highest")):
        assert_close(fn(x), exact, F32, **mm_tol(F32, x, w))
    with config.override(matmul_precision="bf16"):
        check(jc.jit(lambda x: x @ w)(x), x, w, msg="setting")
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    got = jc.jit(lambda x, w: x @ w, matmul_precision="bf16")(x64, w64)
    assert_close(got, x64 @ w64, np.float64, **mm_tol(np.float64, x64, w64))
    with pytest.raises(JitcoreError, match="matmul_precision"):
        jc.jit(lambda x: x, matmul_precision="fp8")


def test_threads_and_dynamic():
    """Two threads (row groups packing A on their own) and run-time batch extents give the
    single-thread results."""
    x, w = operands(128, 200, 96, "threads")
    one = jc.jit(lambda x: x @ w, matmul_precision="bf16", num_threads=1)(x)
    two = jc.jit(lambda x: x @ w, matmul_precision="bf16", num_threads=2)(x)
    np.testing.assert_array_equal(one, two)
    dyn = jc.jit(lambda a, b: a @ b, matmul_precision="bf16", dynamic=True)
    for batch in (2, 5):
        rng = rng_for("dyn", batch)
        a = make((batch, 9, 40), F32, rng=rng, low=-1, high=1)
        b = make((batch, 40, 21), F32, rng=rng, low=-1, high=1)
        check(dyn(a, b), a, b, msg=f"dynamic batch {batch}")

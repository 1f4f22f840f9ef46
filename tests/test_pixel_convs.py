"""Widening 1x1 convs of one pixel as matmuls (passes/pixel_convs.py): a squeeze-excitation
block against its float64 reference, the expanding conv on the GEMV kernel and the
narrowing one on the conv kernel; a batch norm folded first; batches 1 and 3; float32 and
float64; and the convs left alone (non-constant weights, padding, planes past one pixel,
groups). Tolerance: a sum of C_in products and the bias is within gamma(C_in + 2) of the
sum of |terms| (helpers.conv_tol), then a few ulp per activation."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, conv_tol


def _sigmoid(y):
    return 1 / (1 + np.exp(-y))


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("batch", [1, 3])
def test_squeeze_excitation_expanding_conv_runs_as_gemv(dtype, batch):
    rng = np.random.default_rng(batch)
    c, r = 96, 8
    x = rng.standard_normal((batch, c, 5, 6)).astype(dtype)
    w1, b1 = rng.standard_normal((r, c, 1, 1)).astype(dtype), rng.standard_normal(r).astype(dtype)
    w2, b2 = rng.standard_normal((c, r, 1, 1)).astype(dtype), rng.standard_normal(c).astype(dtype)

    def se(x, w1, b1, w2, b2):
        s = jc.mean(x, axis=(2, 3), keepdims=True)
        s = jc.silu(jc.conv2d(s, w1, b1))
        return x * jc.sigmoid(jc.conv2d(s, w2, b2))
    f = jc.jit(se, constants=dict(w1=w1, b1=b1, w2=w2, b2=b2))
    got = f(x)
    kinds = [k.kind for k in f.kernels(x)]
    assert "gemv" in kinds or "gemm" in kinds, kinds
    assert "conv" in kinds, kinds               # the narrowing conv stays a conv
    x64 = x.astype(np.float64)
    m = x64.mean(axis=(2, 3))
    h = m @ w1[:, :, 0, 0].T.astype(np.float64) + b1
    mag1 = np.abs(m) @ np.abs(w1[:, :, 0, 0].T.astype(np.float64)) + np.abs(b1)
    h = h * _sigmoid(h)
    z = h @ w2[:, :, 0, 0].T.astype(np.float64) + b2
    mag2 = np.abs(h) @ np.abs(w2[:, :, 0, 0].T.astype(np.float64)) + np.abs(b2)
    want = x64 * _sigmoid(z)[:, :, None, None]
    eps = np.finfo(dtype).eps
    # the gate's error: its argument's (mag2, plus mag1 carried through silu and w2) times
    # sigmoid's slope (<= 1/4), plus its own ulps
    dz = conv_tol(dtype, r) * mag2 + (conv_tol(dtype, c) * mag1 + 8 * eps * np.abs(h) + 8 * eps) \
        @ np.abs(w2[:, :, 0, 0].T.astype(np.float64)) + 64 * eps * mag1.max()
    tol = np.abs(x64) * (dz[:, :, None, None] / 4 + 8 * eps) + 4 * eps * np.abs(want)
    assert np.all(np.abs(got - want) <= tol), float(np.abs(got - want).max())


@pytest.mark.parametrize("dtype", [F32, F64])
def test_batch_norm_folds_before_the_rewrite(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 12, 1, 1)).astype(dtype)
    w = rng.standard_normal((40, 12, 1, 1)).astype(dtype)
    mean, gamma, beta = (rng.standard_normal(40).astype(dtype) for _ in range(3))
    var = (rng.random(40) + 0.5).astype(dtype)
    f = jc.jit(lambda x, w, mean, var, gamma, beta: jc.relu(jc.batch_norm(
        jc.conv2d(x, w), mean, var, gamma, beta)),
        constants=dict(w=w, mean=mean, var=var, gamma=gamma, beta=beta))
    got = f(x)
    kinds = [k.kind for k in f.kernels(x)]
    assert "conv" not in kinds and "pointwise" not in kinds, kinds
    x64, w64 = x[:, :, 0, 0].astype(np.float64), w[:, :, 0, 0].astype(np.float64)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    y = (x64 @ w64.T - mean) * scale + beta
    mag = (np.abs(x64) @ np.abs(w64.T)) * np.abs(scale) + np.abs(mean * scale) + np.abs(beta)
    tol = conv_tol(dtype, 14) * mag + 4 * np.finfo(dtype).eps * np.abs(y)
    assert got.shape == (2, 40, 1, 1)
    assert np.all(np.abs(got[:, :, 0, 0] - np.maximum(y, 0)) <= tol)


@pytest.mark.parametrize("case", ["argument_weight", "padding", "plane", "groups", "narrowing"])
def test_other_convs_stay_convs(case):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 8, 2 if case == "plane" else 1, 1)).astype(F32)
    w = rng.standard_normal((4 if case == "narrowing" else 32, 4 if case == "groups" else 8,
                             1, 1)).astype(F32)
    kw = dict(padding=1 if case == "padding" else 0, groups=2 if case == "groups" else 1)
    if case == "argument_weight":
        f, args = jc.jit(lambda x, w: jc.conv2d(x, w, **kw)), (x, w)
    else:
        f, args = jc.jit(lambda x, w: jc.conv2d(x, w, **kw), constants=dict(w=w)), (x,)
    assert [k.kind for k in f.kernels(*args)] == ["conv"]

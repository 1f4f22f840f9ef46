"""Strided 1x1 convs over large images read a subsampled copy (passes/subsample_convs.py):
the rewrite happens exactly where the input image reaches MIN_IMAGE_BYTES (a pointwise copy
kernel appears before the conv), and the results match the float64 reference of
test_conv.py (gamma(K + 2) of the sum of |terms|) over strides along one or both axes,
planes the stride does not divide, groups, batches, both float dtypes and a fused
residual + relu epilogue; 1 and 2 threads agree bit for bit; every x86-64 level too.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, skip_unless_runnable
from test_conv import check_residual_relu

from jitcore.passes.subsample_convs import MIN_IMAGE_BYTES

# (input shape, output channels, stride, groups)
CASES = [((1, 256, 56, 56), 128, 2, 1), ((2, 64, 57, 55), 70, 2, 1),
         ((1, 64, 56, 56), 64, (2, 1), 1), ((1, 96, 40, 41), 64, (1, 3), 1),
         ((1, 128, 45, 45), 64, 3, 2), ((1, 64, 28, 28), 128, 2, 1), ((2, 130, 33, 20), 66, 2, 2)]


def rewritten(x_shape, dtype) -> bool:
    return int(np.prod(x_shape[1:])) * np.dtype(dtype).itemsize >= MIN_IMAGE_BYTES


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("x_shape, c_out, stride, groups", CASES)
def test_strided_pointwise_convs(x_shape, c_out, stride, groups, dtype):
    cfg = dict(x=x_shape, w=(c_out, x_shape[1] // groups, 1, 1), stride=stride, padding=0,
               dilation=1, groups=groups)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(cfg["w"]).astype(dtype)
    f = jc.jit(lambda x: jc.conv2d(x, w, stride=stride, groups=groups))
    kinds = [k.kind for k in f.kernels(x)]
    assert (kinds[0] == "pointwise") == rewritten(x_shape, dtype), kinds
    check_residual_relu(cfg, dtype, "", seed=1)


def test_padded_and_larger_kernels_are_left_alone():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 256, 56, 56)).astype(F32)
    for w_shape, padding in (((64, 256, 1, 1), 1), ((64, 256, 3, 3), 0)):
        w = rng.standard_normal(w_shape).astype(F32)
        f = jc.jit(lambda x: jc.conv2d(x, w, stride=2, padding=padding))
        assert [k.kind for k in f.kernels(x)] == ["conv"]


def test_one_and_two_threads_bit_for_bit():
    cfg = dict(x=(2, 256, 56, 56), w=(130, 256, 1, 1), stride=2, padding=0, dilation=1,
               groups=1)
    one, _ = check_residual_relu(cfg, F32, "", threads=1)
    two, _ = check_residual_relu(cfg, F32, "", threads=2)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2", "x86-64"])
def test_levels(target):
    skip_unless_runnable(target)
    for x_shape, c_out, stride, groups in CASES[:3]:
        cfg = dict(x=x_shape, w=(c_out, x_shape[1] // groups, 1, 1), stride=stride, padding=0,
                   dilation=1, groups=groups)
        check_residual_relu(cfg, F32, "", target=target)


def test_bf16_policy_and_integer_images():
    """Under matmul_precision="bf16" the copy feeds the bf16 conv plans (bf16-rounded
    products, float32 sums: the policy's tolerance); an integer image is converted to float64
    first and subsampled as such."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 64, 56, 56)).astype(F32)
    w = rng.standard_normal((96, 64, 1, 1)).astype(F32)
    f = jc.jit(lambda x: jc.conv2d(x, w, stride=2), matmul_precision="bf16")
    got = f(x)
    ref = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(F64), x[:, :, ::2, ::2].astype(F64))
    mag = np.einsum("oc,nchw->nohw", np.abs(w[:, :, 0, 0]).astype(F64),
                    np.abs(x[:, :, ::2, ::2]).astype(F64))
    assert [k.kind for k in f.kernels(x)][0] == "pointwise"
    assert np.all(np.abs(got - ref) <= 2 * 2.0 ** -8 * mag + 1e-6)
    xi = rng.integers(-50, 50, (1, 64, 40, 40)).astype(np.int32)
    wi = rng.standard_normal((32, 64, 1, 1))
    g = jc.jit(lambda x: jc.conv2d(x, wi, stride=2))
    got = g(xi)
    ref = np.einsum("oc,nchw->nohw", wi[:, :, 0, 0], xi[:, :, ::2, ::2].astype(F64))
    assert got.dtype == F64
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9)

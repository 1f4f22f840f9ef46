"""1x1 convs over large planes computed as GEMMs (jitcore/llvm/conv_gemm.py): which convs
qualify (stride 1, no padding, one group, full precision, a large plane and image, enough
output channels; every access linear in the flattened plane), and their results against the
float64 reference of test_conv.py (tolerance gamma(K + 2) of the sum of |terms|) over odd
channel counts and planes (partial register tiles and panels), batches, both float dtypes,
fused epilogues (bias, residual, relu, a folded batch norm), inputs read through strides
(channels-last views), weights passed as arguments, 1 vs 2 threads bit for bit, and the
x86-64-v3/v2/x86-64 levels.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, ref_conv2d, skip_unless_runnable
from test_conv import assert_conv_close, check_residual_relu, rand

from jitcore.llvm import conv_gemm
from jitcore.llvm.gemm import cache_sizes

AS_GEMM = conv_gemm.LAYOUT


def qualifies(x_shape, c_out, dtype) -> bool:
    """The rule of conv_gemm._eligible for a 1x1/s1 conv without padding."""
    _, c_in, h, w = x_shape
    image = (c_in + c_out) * h * w * np.dtype(dtype).itemsize
    return h * w >= conv_gemm.MIN_PIXELS and c_out >= conv_gemm.MIN_CHANNELS and \
        image >= conv_gemm.MIN_L2_SHARE * cache_sizes()[2]


def cfg(x_shape, c_out):
    return dict(x=x_shape, w=(c_out, x_shape[1], 1, 1), stride=1, padding=0, dilation=1,
                groups=1)


FAMILY = [((1, 64, 56, 56), 64), ((1, 67, 29, 31), 70), ((2, 130, 28, 28), 136),
          ((1, 16, 112, 112), 96), ((2, 64, 40, 33), 255), ((1, 256, 28, 28), 64),
          ((1, 32, 112, 112), 16), ((1, 1024, 14, 14), 256), ((3, 24, 30, 30), 64),
          ((2, 100, 57, 55), 30)]


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("x_shape, c_out", FAMILY)
def test_family_matches_the_reference(x_shape, c_out, dtype):
    """relu(conv + bias + residual): the GEMM exactly where the rule says, the conv plans
    elsewhere, both within the reference's bound."""
    _, as_gemm = check_residual_relu(cfg(x_shape, c_out), dtype, AS_GEMM)
    assert as_gemm == qualifies(x_shape, c_out, dtype), (x_shape, c_out)


def test_resnet_and_mobilenet_layers_qualify():
    """The rule's intent on this machine's L2 (any L2 up to 2 MiB): ResNet-50's 1x1s at
    56x56 and 28x28, MobileNetV2's first expansion and its projections to 24 channels at
    56x56 take the GEMM; narrower and small ones keep the conv plans."""
    assert cache_sizes()[2] <= 2 * 1024 * 1024 or pytest.skip("a larger L2 than the rule's data")
    for shape, c_out in [((1, 64, 56, 56), 256), ((1, 256, 56, 56), 64),
                         ((1, 512, 28, 28), 128), ((1, 16, 112, 112), 96),
                         ((1, 144, 56, 56), 24)]:
        assert qualifies(shape, c_out, F32)
    for shape, c_out in [((1, 32, 112, 112), 16), ((1, 192, 28, 28), 32),
                         ((1, 1024, 14, 14), 256), ((1, 2048, 7, 7), 512)]:
        assert not qualifies(shape, c_out, F32)


@pytest.mark.parametrize("kw", [dict(stride=2), dict(padding=1), dict(groups=2)])
def test_strided_padded_and_grouped_convs_stay_convs(kw):
    c = dict(cfg((1, 64, 56, 56), 128), **kw)
    c["w"] = (128, 64 // kw.get("groups", 1), 1, 1)
    _, as_gemm = check_residual_relu(c, F32, AS_GEMM)
    assert not as_gemm


@pytest.mark.parametrize("dtype", [F32, F64])
def test_channels_last_input_and_residual(dtype):
    """An NHWC array viewed as NCHW: its plane is still linear in the flattened pixel (stride
    C), so the GEMM reads it in place; a residual in the same layout too."""
    rng = np.random.default_rng(3)
    x = rand(rng, (2, 40, 30, 64), dtype).transpose(0, 3, 1, 2)
    r = rand(rng, (2, 40, 30, 80), dtype).transpose(0, 3, 1, 2)
    w, b = rand(rng, (80, 64, 1, 1), dtype), rand(rng, 80, dtype)
    f = jc.jit(lambda x, r: jc.relu(jc.conv2d(x, w, b) + r))
    got = f(x, r)
    ref, mag = ref_conv2d(x, w, b)
    assert_conv_close(got, np.maximum(ref + r, 0), mag + np.abs(r), dtype, 65)
    assert any(k.layout == AS_GEMM for k in f.kernels(x, r)) == qualifies(x.shape, 80, dtype)


def test_cropped_input_stays_a_conv():
    """A crop of a larger image: rows are not contiguous, the flattened plane is not linear,
    the conv plans keep it (and get it right)."""
    rng = np.random.default_rng(4)
    big = rand(rng, (1, 64, 60, 60), F32)
    w, b = rand(rng, (128, 64, 1, 1), F32), rand(rng, 128, F32)
    f = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, b)))
    x = big[:, :, 2:-2, 2:-2]
    got = f(x)
    ref, mag = ref_conv2d(np.ascontiguousarray(x), w, b)
    assert_conv_close(got, np.maximum(ref, 0), mag, F32, 65)
    assert not any(k.layout == AS_GEMM for k in f.kernels(x))


def test_weights_as_arguments():
    rng = np.random.default_rng(5)
    x, w = rand(rng, (1, 64, 56, 56), F32), rand(rng, (96, 64, 1, 1), F32)
    f = jc.jit(lambda x, w: jc.conv2d(x, w))
    got = f(x, w)
    ref, mag = ref_conv2d(x, w)
    assert_conv_close(got, ref, mag, F32, 64)
    assert any(k.layout == AS_GEMM for k in f.kernels(x, w))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv1d_of_kernel_one_over_a_long_sequence(dtype):
    """conv1d is a conv2d of one row: a kernel-1 conv1d over a long sequence is the same
    matrix product along the sequence."""
    rng = np.random.default_rng(9)
    x, w, b = rand(rng, (2, 64, 5000), dtype), rand(rng, (96, 64, 1), dtype), rand(rng, 96, dtype)
    f = jc.jit(lambda x: jc.relu(jc.conv1d(x, w, b)))
    got = f(x)
    ref, mag = ref_conv2d(x[:, :, None, :], w[:, :, None, :], b)
    assert_conv_close(got, np.maximum(ref[:, :, 0, :], 0), mag[:, :, 0, :], dtype, 65)
    assert any(k.layout == AS_GEMM for k in f.kernels(x))


def test_folded_batch_norm_and_relu6():
    """conv -> batch norm (folded into weights and bias at compile time) -> relu6 (clip)."""
    rng = np.random.default_rng(6)
    x, w = rand(rng, (1, 16, 112, 112), F32), rand(rng, (96, 16, 1, 1), F32)
    mean, var = rand(rng, 96, F32), rng.uniform(0.5, 2, 96).astype(F32)
    gamma, beta = rand(rng, 96, F32), rand(rng, 96, F32)
    f = jc.jit(lambda x: jc.clip(jc.batch_norm(jc.conv2d(x, w), mean, var, gamma, beta),
                                 0, 6))
    got = f(x)
    conv, mag = ref_conv2d(x, w)
    scale = gamma.astype(F64) / np.sqrt(var.astype(F64) + 1e-5)
    ref = conv * scale[:, None, None] + (beta - mean * scale)[:, None, None]
    mag = mag * np.abs(scale)[:, None, None] + np.abs(beta - mean * scale)[:, None, None]
    assert_conv_close(got, np.clip(ref, 0, 6), mag, F32, 18)
    assert any(k.layout == AS_GEMM for k in f.kernels(x))


def test_one_and_two_threads_bit_for_bit():
    c = cfg((2, 130, 56, 56), 136)
    one, g1 = check_residual_relu(c, F32, AS_GEMM, threads=1)
    two, g2 = check_residual_relu(c, F32, AS_GEMM, threads=2)
    assert g1 and g2
    np.testing.assert_array_equal(one, two)


def test_bf16_precision_keeps_the_conv_plans():
    rng = np.random.default_rng(7)
    x, w = rand(rng, (1, 64, 56, 56), F32), rand(rng, (128, 64, 1, 1), F32)
    f = jc.jit(lambda x: jc.conv2d(x, w), matmul_precision="bf16")
    f(x)
    assert not any(k.layout == AS_GEMM for k in f.kernels(x))


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2", "x86-64"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_levels(target, dtype):
    skip_unless_runnable(target)
    for x_shape, c_out in [((1, 67, 29, 31), 70), ((2, 64, 40, 33), 255)]:
        _, as_gemm = check_residual_relu(cfg(x_shape, c_out), dtype, AS_GEMM, target=target)
        assert as_gemm == qualifies(x_shape, c_out, dtype)

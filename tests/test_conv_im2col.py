"""The pixel plan's im2col variant (jitcore/llvm/conv.py): constant weights over few input
channels (a stem's 3), each pixel tile's inputs of every (tap, channel) packed into a stack
panel once, then one loop over K = taps x C_in per channel block. Checked against the float64
reference of test_conv.py (tolerance gamma(K + 2) of the sum of |terms|) over a family of
kernels, strides, paddings, dilations, batches (empty too), odd planes and channel counts
that leave partial tiles and blocks; NaN and Inf inputs; conv1d; the same bits as the
direct variant (weights passed as arguments: the same sum order) and on 1 and 2 threads; the
x86-64-v3, v2 and x86-64 levels (fewer lanes and registers, another tile). Which variant a
conv took is in `f.kernels()` (layout "..., inputs packed im2col").
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, pair, ref_conv2d, resolve_padding, skip_unless_runnable
from test_conv import assert_conv_close, check_residual_relu, rand

IM2COL = "inputs packed im2col"


def im2col_configs(count: int, seed: int) -> list:
    """Convs over 1-4 input channels, odd planes and output channel counts."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        kernel = rng.choice([(7, 7), (3, 3), (5, 5), (4, 4), (1, 1), (2, 3), (7, 1)])
        stride = rng.choice([1, 2, 2, 3, 4, (1, 2), (2, 1)])
        padding = rng.choice([0, 1, 3, (2, 0), (0, 1)])
        dilation = rng.choice([1, 1, 2])
        h, w = rng.randint(1, 37), rng.randint(1, 37)
        pads = resolve_padding(padding, kernel, pair(dilation))
        dh, dw = pair(dilation)
        if h + pads[0] + pads[1] < dh * (kernel[0] - 1) + 1 or \
                w + pads[2] + pads[3] < dw * (kernel[1] - 1) + 1:
            continue
        out.append(dict(x=(rng.choice([1, 1, 2, 3]), rng.randint(1, 4), h, w),
                        w=(rng.choice([1, 5, 16, 17, 33, 64]), None) + kernel, stride=stride,
                        padding=padding, dilation=dilation))
    for cfg in out:
        cfg["w"] = (cfg["w"][0], cfg["x"][1]) + cfg["w"][2:]
    return out


def check(cfg, dtype, seed=0, threads=None, target=None):
    """relu(conv + bias + residual) against the reference; returns (output, whether the conv
    took the im2col variant)."""
    return check_residual_relu(cfg, dtype, IM2COL, seed, threads, target)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("part", range(3))
def test_im2col_family(dtype, part):
    taken = 0
    for cfg in im2col_configs(8, seed=200 + part):
        _, im2col = check(cfg, dtype, seed=part)
        taken += im2col
    assert taken >= 6, "the family is meant to exercise the im2col variant"


@pytest.mark.parametrize("shape, wshape, kw", [
    ((2, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),   # ResNet's stem
    ((1, 3, 225, 223), (32, 3, 3, 3), dict(stride=2, padding=1)),   # MobileNetV2's, odd
    ((1, 3, 64, 64), (96, 3, 4, 4), dict(stride=4)),                 # ConvNeXt's patchify
    ((2, 3, 33, 31), (64, 3, 3, 3), dict(padding=1)),    # VGG's first: along the flat plane
    ((3, 1, 19, 21), (70, 1, 5, 5), dict(padding=2, dilation=(1, 2))),
])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_model_stems_take_the_im2col_variant(shape, wshape, kw, dtype):
    cfg = dict(x=shape, w=wshape, stride=kw.get("stride", 1), padding=kw.get("padding", 0),
               dilation=kw.get("dilation", 1))
    _, im2col = check(cfg, dtype)
    assert im2col


def test_same_bits_as_the_direct_variant_and_on_two_threads():
    """The panel holds what the direct variant loads, summed in its order (taps, then
    channels): weights passed as arguments (read through their strides, no panel) give the
    same bits, and so do 2 threads (work items split differently)."""
    rng = np.random.default_rng(4)
    x, w = rand(rng, (2, 3, 41, 39), F32), rand(rng, (40, 3, 7, 7), F32)
    b = rand(rng, 40, F32)
    opts = dict(stride=2, padding=3)
    packed = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), num_threads=1)
    two = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), num_threads=2)
    direct = jc.jit(lambda x, w, b: jc.conv2d(x, w, b, **opts), num_threads=1)
    one = packed(x)
    assert any(IM2COL in k.layout for k in packed.kernels(x) if k.layout)
    assert all(IM2COL not in k.layout for k in direct.kernels(x, w, b) if k.layout)
    np.testing.assert_array_equal(one, two(x))
    np.testing.assert_array_equal(one, direct(x, w, b))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_nan_and_inf_inputs(dtype):
    """NaN and Inf inputs reach exactly the outputs whose taps read them; zeros in the
    padding add nothing."""
    rng = np.random.default_rng(6)
    x, w = rand(rng, (1, 3, 23, 23), dtype), rand(rng, (17, 3, 5, 5), dtype)
    x[0, 1, 4, 7], x[0, 0, 20, 2], x[0, 2, 11, 22] = np.nan, np.inf, -np.inf
    f = jc.jit(lambda x: jc.conv2d(x, w, stride=2, padding=2))
    got = f(x)
    assert any(IM2COL in k.layout for k in f.kernels(x) if k.layout)
    ref, mag = ref_conv2d(x, w, stride=2, padding=2)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    finite = np.isfinite(mag)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])
    assert_conv_close(np.where(finite, got, 0), np.where(finite, ref, 0),
                      np.where(finite, mag, 0), dtype, 3 * 25)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_one_output_row_of_a_column_slice(dtype):
    """A kernel as tall as the input gives one output row, whose pixel vectors run along the
    flattened plane even though the input's rows (a column slice) are not adjacent."""
    rng = np.random.default_rng(10)
    big, w = rand(rng, (2, 3, 7, 40), dtype), rand(rng, (20, 3, 7, 1), dtype)
    f = jc.jit(lambda x: jc.conv2d(x, w))
    for x in (big[:, :, :, 3:30], big[:, :, :, :17]):
        got = f(x)
        assert any(IM2COL in k.layout for k in f.kernels(x) if k.layout)
        ref, mag = ref_conv2d(x, w)
        assert_conv_close(got, ref, mag, dtype, 21)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_empty_batch(dtype):
    rng = np.random.default_rng(7)
    x, w = rand(rng, (0, 3, 16, 16), dtype), rand(rng, (8, 3, 3, 3), dtype)
    got = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, stride=2, padding=1)))(x)
    assert got.shape == (0, 8, 8, 8) and got.dtype == dtype


@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv1d_front_end(dtype):
    """wav2vec2's first feature layer (1 channel, kernel 10, stride 5), shorter."""
    rng = np.random.default_rng(8)
    x, w = rand(rng, (2, 1, 1003), dtype), rand(rng, (48, 1, 10), dtype)
    f = jc.jit(lambda x: jc.conv1d(x, w, stride=5))
    got = f(x)
    assert any(IM2COL in k.layout for k in f.kernels(x) if k.layout)
    ref, mag = ref_conv2d(x[:, :, None], w[:, :, None], stride=(1, 5))
    assert_conv_close(got, ref[:, :, 0], mag[:, :, 0], dtype, 10)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2", "x86-64"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_levels(target, dtype):
    skip_unless_runnable(target)
    for cfg in im2col_configs(4, seed=9):
        check(cfg, dtype, target=target)
    for cfg in (dict(x=(2, 3, 45, 47), w=(64, 3, 7, 7), stride=2, padding=3, dilation=1),
                dict(x=(1, 3, 21, 23), w=(40, 3, 3, 3), stride=1, padding=1, dilation=1)):
        one, im2col = check(cfg, dtype, target=target, threads=1)
        two, _ = check(cfg, dtype, target=target, threads=2)
        assert im2col
        np.testing.assert_array_equal(one, two)

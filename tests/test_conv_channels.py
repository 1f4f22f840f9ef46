"""The conv kind's channel plan (jitcore/llvm/conv_channels.py: output channels along the
vectors, pixels in the register tile), taken for constant weights where it wastes fewer lanes
than the pixel plan: small planes, strided convs, many input channels. Checked against the
float64 reference of test_conv.py (same tolerance: gamma(K + 2) of the sum of |terms|) over a
family of shapes, strides, paddings, dilations, groups, batches and channel counts that leave
partial channel vectors and partial pixel tiles; fused epilogues (bias, residual, relu);
tap blocks with partial sums (a tiny L2); 1 vs 2 threads bit for bit; the x86-64-v3 and v2
levels (fewer lanes and registers, another tile); which plan each conv took is in
`f.kernels()` (layout "NCHW, output channels along vectors").
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import jitcore as jc
from helpers import (F32, F64, assert_close, pair, ref_conv2d, resolve_padding,
                     skip_unless_runnable)
from test_conv import assert_conv_close, check_residual_relu, conv_tol, rand

CHANNELS = "output channels along vectors"


def channel_configs(count: int, seed: int) -> list:
    """Convs with K = C_in/groups x taps >= 256 on small planes (where the channel plan
    wins), odd channel counts (partial vectors), and pixel counts that leave partial tiles."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        kernel = rng.choice([(1, 1), (3, 3), (3, 3), (5, 5), (2, 3)])
        stride = rng.choice([1, 2, 2, 3, (1, 2)])
        padding = rng.choice([0, 1, 2, (1, 0)])
        dilation = rng.choice([1, 1, 2])
        groups = rng.choice([1, 1, 1, 2, 4])
        cin_g = rng.choice([32, 48, 64, 130]) if kernel != (1, 1) else rng.choice([256, 300])
        cout_g = rng.choice([16, 24, 64, 70, 130])
        h, w = rng.randint(1, 13), rng.randint(1, 13)
        pads = resolve_padding(padding, kernel, pair(dilation))
        dh, dw = pair(dilation)
        if h + pads[0] + pads[1] < dh * (kernel[0] - 1) + 1 or \
                w + pads[2] + pads[3] < dw * (kernel[1] - 1) + 1:
            continue
        out.append(dict(x=(rng.choice([1, 1, 3]), cin_g * groups, h, w),
                        w=(cout_g * groups, cin_g) + kernel, stride=stride, padding=padding,
                        dilation=dilation, groups=groups))
    return out


def check(cfg, dtype, seed=0, target=None, threads=None):
    """relu(conv + bias + residual) against the reference; returns (output, whether it took
    the channel plan)."""
    return check_residual_relu(cfg, dtype, CHANNELS, seed, threads, target)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("part", range(3))
def test_channel_plan_family(dtype, part):
    taken = 0
    for cfg in channel_configs(8, seed=100 + part):
        _, channel = check(cfg, dtype, seed=part)
        taken += channel
    assert taken >= 4, "the family is meant to exercise the channel plan"


@pytest.mark.parametrize("shape, wshape, kw", [
    ((1, 512, 7, 7), (512, 512, 3, 3), dict(padding=1)),            # ResNet's last stage
    ((1, 256, 14, 14), (512, 256, 3, 3), dict(stride=2, padding=1)),
    ((2, 256, 14, 14), (130, 256, 1, 1), dict(stride=2)),             # partial vectors
    ((3, 64, 9, 11), (96, 64, 3, 3), dict(stride=2, padding=2, dilation=2)),
])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_model_shapes_take_the_channel_plan(shape, wshape, kw, dtype):
    cfg = dict(x=shape, w=wshape, stride=kw.get("stride", 1), padding=kw.get("padding", 0),
               dilation=kw.get("dilation", 1), groups=1)
    _, channel = check(cfg, dtype)
    assert channel


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape, wshape, stride, dilation", [
    ((1, 3, 64, 64), (96, 3, 16, 16), 16, 1),         # ViT's patch embedding, smaller
    ((2, 3, 75, 55), (70, 3, 10, 10), 10, 1),            # planes the patch does not divide
    ((1, 3, 40, 40), (64, 3, 9, 12), (3, 5), 1),
    ((1, 3, 30, 40), (64, 3, 7, 13), 2, (1, 2)),
])
def test_patchify_convs_run_along_kernel_columns(dtype, shape, wshape, stride, dilation):
    """No padding and kernel rows longer than the input channels: the inner loop runs along
    kernel columns (weights packed [block][KH][C_in][KW][NR])."""
    from jitcore.llvm import conv_channels
    cfg = dict(x=shape, w=wshape, stride=stride, padding=0, dilation=dilation, groups=1)
    _, channel = check(cfg, dtype)
    assert channel
    rng = np.random.default_rng(0)
    w = rand(rng, wshape, dtype)
    f = jc.jit(lambda x: jc.conv2d(x, w, stride=stride, dilation=dilation))
    x = rand(rng, shape, dtype)
    got = f(x)
    ref, mag = ref_conv2d(x, w, stride=stride, dilation=dilation)
    assert_conv_close(got, ref, mag, dtype, int(np.prod(wshape[1:])))
    assert conv_tol(dtype, 1) > 0 and conv_channels.PANEL_SHARE > 0


def test_one_and_two_threads_bit_for_bit():
    cfg = dict(x=(2, 96, 10, 10), w=(130, 96, 3, 3), stride=1, padding=1, dilation=1,
               groups=1)
    one, c1 = check(cfg, F32, threads=1)
    two, c2 = check(cfg, F32, threads=2)
    assert c1 and c2
    np.testing.assert_array_equal(one, two)


def test_tap_blocks_with_partial_sums_agree_bit_for_bit(monkeypatch):
    """A tiny L2 puts every tap in a block of its own, with the tiles' partial sums kept
    between blocks (and a small partial-sum budget, several pixel groups per image): the sum
    runs in the same order (taps, then channels), so the results are one block's bits."""
    from jitcore.llvm import conv_channels
    cfg = dict(x=(1, 64, 7, 7), w=(64, 64, 3, 3), stride=1, padding=1, dilation=1, groups=1)
    whole, channel = check(cfg, F32)
    assert channel
    monkeypatch.setattr(conv_channels, "cache_sizes", lambda: {1: 32 * 1024, 2: 64 * 1024})
    monkeypatch.setattr(conv_channels, "MAX_PARTIAL_BYTES", 4096)
    # compiled anew (no cached graph, kernel IR or object of the first compile)
    from collections import OrderedDict
    from jitcore import compiler
    from jitcore.cache.lru import LRU
    from jitcore.llvm import engine, graph_module
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", OrderedDict())
    monkeypatch.setattr(engine, "OBJECTS", type(engine.OBJECTS)())
    plans = []
    real = conv_channels.plan

    def spy(*args):
        plans.append(real(*args))
        return plans[-1]
    monkeypatch.setattr(conv_channels, "plan", spy)
    blocked, channel = check(cfg, F32)
    assert channel and plans and plans[-1].k_blocks == 9 and plans[-1].pixel_groups > 1
    np.testing.assert_array_equal(whole, blocked)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2", "x86-64"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_levels(target, dtype):
    skip_unless_runnable(target)
    for cfg in channel_configs(4, seed=7):
        check(cfg, dtype, target=target)
    cfg = dict(x=(1, 256, 14, 14), w=(70, 256, 3, 3), stride=2, padding=1, dilation=1,
               groups=1)
    _, channel = check(cfg, dtype, target=target)
    assert channel


def test_a_long_sequence_streams_on_the_pixel_plan():
    """conv1d 256->128 k3/s2 (a wav2vec2 feature layer, narrower): over a sequence whose input
    exceeds STREAMED_INPUT_L2S x L2 the pixel plan runs it (the channel plan would read the
    input back once per channel block); a short one keeps the channel plan. Both match the
    float64 reference."""
    from jitcore.llvm.conv import STREAMED_INPUT_L2S
    from jitcore.llvm.gemm import cache_sizes
    rng = np.random.default_rng(5)
    w = rand(rng, (128, 256, 3), F32)
    per_sample = 256 * 4
    long_n = 3 * STREAMED_INPUT_L2S * cache_sizes()[2] // (2 * per_sample) * 2 + 1
    for n, plan in ((33, CHANNELS), (long_n, "pixels along vectors")):
        x = rand(rng, (1, 256, n), F32)
        f = jc.jit(lambda x, w: jc.conv1d(x, w, stride=2), constants=dict(w=w))
        got = f(x)
        ref, mag = ref_conv2d(x[:, :, None, :], w[:, :, None, :], stride=(1, 2))
        assert_conv_close(got, ref[:, :, 0, :], mag[:, :, 0, :], F32, 256 * 3)
        assert plan in f.kernels(x)[0].layout, (n, f.kernels(x)[0].layout)


def test_plain_weights_keep_the_pixel_plan():
    """Weights passed as arguments are read through their strides: the pixel plan."""
    rng = np.random.default_rng(3)
    x, w = rand(rng, (1, 512, 7, 7), F32), rand(rng, (512, 512, 3, 3), F32)
    f = jc.jit(lambda x, w: jc.conv2d(x, w, padding=1))
    got = f(x, w)
    ref, mag = ref_conv2d(x, w, padding=1)
    assert_conv_close(got, ref, mag, F32, 512 * 9)
    assert all(CHANNELS not in k.layout for k in f.kernels(x, w) if k.layout)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("hw, k", [(1, 1), (3, 3), (7, 7)])
def test_one_pixel_planes_run_the_epilogue_along_channels(dtype, hw, k):
    """A 1x1 output plane makes the output contiguous along channels: the epilogue runs on
    channel vectors, its per-channel loads (a batch norm whose statistics are arguments, a
    residual) as vectors along the channels too."""
    rng = np.random.default_rng(5)
    cin, cout = 288 // (k * k) + 1, 70
    x, w = rand(rng, (2, cin, hw, hw), dtype), rand(rng, (cout, cin, k, k), dtype)
    mean, var = rand(rng, cout, dtype), (rng.random(cout) + 0.5).astype(dtype)
    gamma, beta = rand(rng, cout, dtype), rand(rng, cout, dtype)
    r = rand(rng, (2, cout, 1, 1), dtype)
    f = jc.jit(lambda x, mean, var, r: jc.clip(
        jc.batch_norm(jc.conv2d(x, w), mean, var, gamma, beta) + r, 0, 6))
    got = f(x, mean, var, r)
    assert any(CHANNELS in kern.layout for kern in f.kernels(x, mean, var, r) if kern.layout)
    ref, mag = ref_conv2d(x, w)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    s = scale[None, :, None, None]
    want = np.clip((ref - mean[None, :, None, None]) * s + beta[None, :, None, None] + r, 0, 6)
    bound = conv_tol(dtype, cin * k * k + 8) * (mag * np.abs(s) + np.abs(mean * s)[None, :, None, None]
                                                + np.abs(beta)[None, :, None, None] + np.abs(r))
    assert_close(got, want, dtype, rtol=0, atol=bound + 16 * np.finfo(dtype).eps * (np.abs(want) + 1))


@pytest.mark.parametrize("operand", ["channel", "row", "column", "pixel"])
@pytest.mark.parametrize("shape, channel_plan", [
    (((1, 192, 7, 7), (144, 192, 1, 1)), True),      # K 192: the channel plan only if flat
    (((2, 160, 5, 9), (70, 160, 1, 1)), False),
    (((1, 64, 7, 7), (40, 64, 3, 3)), False)])
def test_epilogue_along_pixels_or_channels(shape, channel_plan, operand):
    """silu(conv + b) * s + t: the epilogue runs as vectors along each channel's pixels where
    every operand is linear in the flat pixel index (per channel: `s` of shape (C, 1, 1); a
    full residual), and along the channels where one is not (an operand broadcast along the
    rows or the columns): both against the float64 reference. K = 192 takes the channel plan
    only where the epilogue can run along the pixels (AVX-512)."""
    xs, ws = shape
    rng = np.random.default_rng(7)
    x, w, b = rand(rng, xs, F32), rand(rng, ws, F32), rand(rng, ws[0], F32)
    ref, mag = ref_conv2d(x, w, b, padding=ws[2] // 2)
    oshape = {"channel": (ws[0], 1, 1), "row": (1, 1, ref.shape[3]),
              "column": (1, ref.shape[2], 1), "pixel": ref.shape}[operand]
    s, t = rand(rng, oshape, F32), rand(rng, ref.shape, F32)
    f = jc.jit(lambda x, s, t: jc.silu(jc.conv2d(x, w, b, padding=ws[2] // 2)) * s + t)
    got = f(x, s, t)
    silu = ref / (1 + np.exp(-ref))
    want = silu * s + t
    # the conv's bound through silu (slope <= 1.1) and the scale, plus a few roundings
    bound = 1.1 * conv_tol(F32, ws[1] * ws[2] * ws[3] + 2) * mag * np.abs(s)
    assert_close(got, want, F32, rtol=0,
                 atol=bound + 16 * np.finfo(F32).eps * (np.abs(silu * s) + np.abs(t) + 1))
    if channel_plan and jc.target_info()["vector_bits"] >= 512:
        took = any(CHANNELS in k.layout for k in f.kernels(x, s, t) if k.layout)
        assert took == (operand in ("channel", "pixel"))

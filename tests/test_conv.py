"""conv2d, conv1d and batch_norm against a direct float64 numpy convolution (and torch as a
second opinion when installed): a sampled grid of kernel sizes, strides, paddings,
dilations, groups, batch and image sizes and channel counts; bias; every post-op that fuses
into the conv's epilogue (and the kernel count that proves it fused); batch-norm folding of
constants; prepacked and plain weights; 1 vs 2 threads bit for bit; every bad input.

Tolerance (float32 and float64 alike): a conv output is a sum of K = C_in/groups * KH * KW
products plus the bias; any summation order is within gamma(K + 2) = (K + 2) u / (1 - (K + 2)
u) of the sum of |terms| (u = eps / 2 of the dtype; the standard bound for recursive and
blocked sums), so |got - ref| <= gamma(K + 2) * sum|terms| + 4 ulp of |ref| for the post-op.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import jitcore as jc
from helpers import (F32, F64, assert_close, assert_conv_close, conv_tol, fresh_compiles, pair,
                     ref_conv2d, resolve_padding)

# ---- the reference ---------------------------------------------------------------------------


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


# ---- a sampled grid of shapes and options ---------------------------------------------------

KERNELS = [(1, 1), (3, 3), (5, 5), (7, 7), (2, 3), (1, 5), (3, 1)]
STRIDES = [1, 2, 3, (1, 2), (2, 1)]
PADDINGS = [0, 1, 2, "same", "valid", (1, 0), (0, 2)]
DILATIONS = [1, 2, (2, 1)]


def sample_configs(count: int, seed: int) -> list:
    """Random valid configurations (the kernel fits the padded input; "same" has stride 1)."""
    rng, out = random.Random(seed), []
    while len(out) < count:
        kernel = rng.choice(KERNELS)
        stride, padding, dilation = rng.choice(STRIDES), rng.choice(PADDINGS), \
            rng.choice(DILATIONS)
        if padding == "same":
            stride = 1
        groups_kind = rng.choice(["1", "1", "2", "depthwise"])
        cin = rng.choice([1, 2, 3, 4, 8, 16, 17, 33, 65])
        if groups_kind == "2":
            cin = max(2, cin - cin % 2)
        groups = {"1": 1, "2": 2, "depthwise": cin}[groups_kind]
        cout = groups * rng.choice([1, 2, 3]) if groups > 1 else rng.choice([1, 4, 7, 16, 40, 65])
        h, w = rng.randint(1, 17), rng.randint(1, 17)
        n = rng.choice([0, 1, 1, 3])
        pads = resolve_padding(padding, kernel, pair(dilation))
        dh, dw = pair(dilation)
        if h + pads[0] + pads[1] < dh * (kernel[0] - 1) + 1 or \
                w + pads[2] + pads[3] < dw * (kernel[1] - 1) + 1:
            continue
        out.append(dict(x=(n, cin, h, w), w=(cout, cin // groups) + kernel, bias=rng.random() < 0.7,
                        stride=stride, padding=padding, dilation=dilation, groups=groups))
    return out


def _options(cfg):
    return {k: cfg[k] for k in ("stride", "padding", "dilation", "groups")}


def check_residual_relu(cfg, dtype, layout: str, seed=0, threads=None, target=None):
    """relu(conv + bias + residual) with constant weights (prepacked: the function closes over
    them), against the float64 reference within the conv's bound plus the add's rounding;
    returns (output, whether the conv kernel's layout names `layout`)."""
    rng = np.random.default_rng(seed)
    x, w, b = rand(rng, cfg["x"], dtype), rand(rng, cfg["w"], dtype), rand(rng, cfg["w"][0], dtype)
    opts = {k: cfg[k] for k in ("stride", "padding", "dilation", "groups") if k in cfg}
    ref, mag = ref_conv2d(x, w, b, **opts)
    r = rand(rng, ref.shape, dtype)
    kw = {} if threads is None else {"num_threads": threads}
    if target is not None:
        kw["target"] = target
    f = jc.jit(lambda x, r: jc.relu(jc.conv2d(x, w, b, **opts) + r), **kw)
    got = f(x, r)
    assert_conv_close(got, np.maximum(ref + r, 0), mag + np.abs(r), dtype,
                      int(np.prod(cfg["w"][1:])) + 1, msg=str(cfg))
    return got, any(layout in k.layout for k in f.kernels(x, r) if k.layout)


def check_configs(configs, dtype, seed=0, **jit_kw):
    """Compile the convs of several configs as one function (one compile) and check each."""
    rng = np.random.default_rng(seed)
    args, refs = [], []
    for cfg in configs:
        x, w = rand(rng, cfg["x"], dtype), rand(rng, cfg["w"], dtype)
        b = rand(rng, cfg["w"][0], dtype) if cfg["bias"] else None
        args += [x, w] + ([b] if b is not None else [])
        refs.append(ref_conv2d(x, w, b, **_options(cfg)))

    def many(*arrays):
        it, outs = iter(arrays), []
        for cfg in configs:
            x, w = next(it), next(it)
            b = next(it) if cfg["bias"] else None
            outs.append(jc.conv2d(x, w, b, **_options(cfg)))
        return tuple(outs)
    got = jc.jit(many, **jit_kw)(*args)
    for cfg, g, (ref, mag) in zip(configs, got, refs):
        k = cfg["w"][1] * cfg["w"][2] * cfg["w"][3]
        assert_conv_close(g, ref, mag, dtype, k, msg=str(cfg))
    return got, args


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("part", range(4))
def test_conv2d_sampled_grid(dtype, part):
    configs = sample_configs(24, seed=1234)[part * 6:(part + 1) * 6]
    check_configs(configs, dtype, seed=part)


def test_grid_covers_the_options():
    """The sampled grid reaches every listed kernel, stride, padding, dilation, group kind,
    batch size and bias setting (so the grid test is not silently narrow)."""
    configs = sample_configs(24, seed=1234)
    kernels = {c["w"][2:] for c in configs}
    assert {(1, 1), (3, 3), (5, 5), (7, 7)} <= kernels and any(a != b for a, b in kernels)
    assert {1, 2, 3} <= {c["stride"] for c in configs if isinstance(c["stride"], int)}
    assert {0, 1, 2, "same", "valid"} <= {c["padding"] for c in configs
                                          if not isinstance(c["padding"], tuple)}
    assert {1, 2} <= {c["dilation"] for c in configs if isinstance(c["dilation"], int)}
    groups = {"1" if c["groups"] == 1 else "dw" if c["groups"] == c["x"][1] else "g"
              for c in configs}
    assert groups == {"1", "dw", "g"}
    assert {0, 1, 3} <= {c["x"][0] for c in configs}
    assert {True, False} == {c["bias"] for c in configs}


@pytest.mark.parametrize("dtype", [F32, F64])
def test_resnet_like_shapes(dtype):
    """Shapes past one register tile in every direction: many channel blocks and tiles,
    a flattened plane (3x3 "same", 1x1) and rows (stride 2), a depthwise conv."""
    configs = [dict(x=(2, 24, 17, 15), w=(40, 24, 3, 3), bias=True, stride=1, padding=1,
                    dilation=1, groups=1),
               dict(x=(1, 33, 16, 16), w=(65, 33, 1, 1), bias=False, stride=1, padding=0,
                    dilation=1, groups=1),
               dict(x=(1, 16, 17, 17), w=(32, 16, 3, 3), bias=True, stride=2, padding=1,
                    dilation=1, groups=1),
               dict(x=(2, 48, 15, 13), w=(48, 1, 3, 3), bias=True, stride=1, padding=1,
                    dilation=1, groups=48),
               dict(x=(1, 3, 33, 30), w=(16, 3, 7, 7), bias=False, stride=2, padding=3,
                    dilation=1, groups=1)]
    check_configs(configs, dtype)


def test_torch_agrees():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    configs = sample_configs(24, seed=99)[:6]
    got, args = check_configs(configs, F64, seed=7)
    it = iter(args)
    for cfg, g in zip(configs, got):
        x, w = next(it), next(it)
        b = next(it) if cfg["bias"] else None
        ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w),
                       None if b is None else torch.from_numpy(b), **_options(cfg)).numpy()
        np.testing.assert_allclose(g, ref, rtol=1e-10, atol=1e-10, err_msg=str(cfg))


# ---- conv1d -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv1d(dtype):
    rng = np.random.default_rng(3)
    cases = [dict(x=(2, 4, 13), w=(6, 2, 3), stride=2, padding=1, dilation=1, groups=2),
             dict(x=(1, 5, 17), w=(3, 5, 5), stride=1, padding="same", dilation=2, groups=1),
             dict(x=(3, 6, 9), w=(6, 1, 4), stride=3, padding="valid", dilation=1, groups=6)]
    args = []
    for c in cases:
        args += [rand(rng, c["x"], dtype), rand(rng, c["w"], dtype), rand(rng, c["w"][0], dtype)]

    def f(*a):
        return tuple(jc.conv1d(a[3 * i], a[3 * i + 1], a[3 * i + 2],
                               **{k: c[k] for k in ("stride", "padding", "dilation", "groups")})
                     for i, c in enumerate(cases))
    for i, (c, got) in enumerate(zip(cases, jc.jit(f)(*args))):
        x, w, b = args[3 * i:3 * i + 3]
        pad = c["padding"] if isinstance(c["padding"], str) else (0, c["padding"])
        ref, mag = ref_conv2d(x[:, :, None], w[:, :, None], b, stride=(1, c["stride"]),
                              padding=pad, dilation=(1, c["dilation"]), groups=c["groups"])
        assert_conv_close(got, ref[:, :, 0], mag[:, :, 0], dtype, w.shape[1] * w.shape[2],
                          msg=str(c))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_unbatched_inputs_are_one_image_as_in_torch(dtype):
    """(C, H, W) for conv2d and (C, L) for conv1d, as torch accepts them (issue 27: refused):
    the batched convolution of that one image, bit for bit."""
    rng = np.random.default_rng(5)
    x, w, b = rand(rng, (3, 9, 7), dtype), rand(rng, (4, 3, 3, 3), dtype), rand(rng, 4, dtype)
    kw = dict(stride=(2, 1), padding=1, dilation=(1, 2))
    got = jc.conv2d(x, w, b, **kw)
    assert got.shape == (4, 5, 5)
    np.testing.assert_array_equal(got, jc.conv2d(x[None], w, b, **kw)[0])
    x1, w1 = x[:, 0], w[:, :, 0]
    got = jc.jit(lambda a, k: jc.relu(jc.conv1d(a, k, padding=2)))(x1, w1)
    np.testing.assert_array_equal(got, jc.relu(jc.conv1d(x1[None], w1, padding=2))[0])


def test_batch_norm_promotes_its_operands_as_numpy():
    """float32 x with float64 statistics computes and returns float64 (it returned float32)."""
    rng = np.random.default_rng(6)
    x = rand(rng, (2, 3, 4), F32)
    m, v, g, be = bn_params(rng, 3, F64)
    got = jc.batch_norm(x, m, v, g, be)
    assert got.dtype == F64
    ref = ref_batch_norm(x.astype(F64), m, v, g, be)
    assert_close(got, ref, F64, rtol=8 * np.finfo(F64).eps, atol=8 * np.finfo(F64).eps)
    assert jc.batch_norm(x, m.astype(F32), v.astype(F32)).dtype == F32


# ---- fused post-ops -----------------------------------------------------------------------

def _np_post(name):
    def sig(v):
        return 1 / (1 + np.exp(-v))
    from math import erf
    verf = np.vectorize(erf)
    return {
        "relu": lambda v: np.maximum(v, 0), "sigmoid": sig, "tanh": np.tanh,
        "hardtanh": lambda v: np.clip(v, -1, 1),
        "hardswish": lambda v: v * np.clip(v + 3, 0, 6) / 6,
        "hardsigmoid": lambda v: np.clip(v + 3, 0, 6) / 6,
        "leaky_relu": lambda v: np.where(v > 0, v, 0.01 * v),
        "gelu": lambda v: 0.5 * v * (1 + verf(v / np.sqrt(2))),
        "relu6": lambda v: np.clip(v, 0, 6), "silu": lambda v: v * sig(v),
    }[name]


POST_OPS = ["relu", "sigmoid", "tanh", "hardtanh", "hardswish", "hardsigmoid", "leaky_relu",
            "gelu", "relu6", "silu"]


@pytest.mark.parametrize("dtype", [F32, F64])
def test_every_post_op_fuses_into_one_conv_kernel(dtype):
    """Each unary post-op after a residual add, a residual sub and a broadcast per-channel
    bias run in their conv's epilogue: one kernel per conv, values as the reference."""
    rng = np.random.default_rng(5)
    count = len(POST_OPS) + 2
    x, ws = rand(rng, (2, 6, 9, 11), dtype), rand(rng, (count, 8, 6, 3, 3), dtype)
    b, r = rand(rng, 8, dtype), rand(rng, (2, 8, 9, 11), dtype)
    cb = rand(rng, (1, 8, 1, 1), dtype)

    def f(x, ws, b, r, cb):
        ys = [jc.conv2d(x, ws[i], b, padding=1) for i in range(count)]   # one conv each
        outs = [getattr(jc, name)(y + r) for name, y in zip(POST_OPS, ys)]
        return tuple(outs) + (jc.relu(ys[-2] - r), ys[-1] + cb)
    fn = jc.jit(f)
    kernels = fn.kernels(x, ws, b, r, cb)
    assert [k.kind for k in kernels] == ["conv"] * count, [str(k) for k in kernels]
    assert all(k.layout.startswith("NCHW") for k in kernels)
    got = fn(x, ws, b, r, cb)
    for i, name in enumerate(POST_OPS):
        ref, mag = ref_conv2d(x, ws[i], b, padding=1)
        want = _np_post(name)(ref + r)
        # the post-ops are at most 1.2-Lipschitz; their own rounding is a few ulp
        bound = 1.2 * conv_tol(dtype, 6 * 9) * (mag + np.abs(r)) + 8 * np.finfo(dtype).eps * (
            np.abs(want) + 1)
        assert_close(got[i], want, dtype, rtol=0, atol=bound, msg=name)
    ref, mag = ref_conv2d(x, ws[-2], b, padding=1)
    assert_conv_close(got[-2], np.maximum(ref - r, 0), mag + np.abs(r), dtype, 55,
                      msg="relu(y - r)")
    ref, mag = ref_conv2d(x, ws[-1], b, padding=1)
    assert_conv_close(got[-1], ref + cb, mag + np.abs(cb), dtype, 55, msg="y + channel bias")


def test_relu_of_conv_plus_residual_is_one_kernel():
    rng = np.random.default_rng(6)
    x, w = rand(rng, (1, 8, 10, 10), F32), rand(rng, (16, 8, 3, 3), F32)
    b, r = rand(rng, 16, F32), rand(rng, (1, 16, 10, 10), F32)
    f = jc.jit(lambda x, w, b, r: jc.relu(jc.conv2d(x, w, b, padding=1) + r))
    kernels = f.kernels(x, w, b, r)
    assert len(kernels) == 1 and kernels[0].kind == "conv"
    assert "layout NCHW" in str(kernels[0])
    ref, mag = ref_conv2d(x, w, b, padding=1)
    assert_conv_close(f(x, w, b, r), np.maximum(ref + r, 0), mag + np.abs(r), F32, 72)


# ---- weights: constants, prepacking, threads ------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_prepacked_and_plain_constant_weights(dtype, monkeypatch):
    rng = np.random.default_rng(8)
    x, w, b = rand(rng, (2, 10, 12, 9), dtype), rand(rng, (20, 5, 3, 2), dtype), \
        rand(rng, 20, dtype)

    def f(x, w, b):
        return jc.conv2d(x, w, b, stride=(1, 2), padding=(1, 0), groups=2)
    ref, mag = ref_conv2d(x, w, b, stride=(1, 2), padding=(1, 0), groups=2)
    packed = jc.jit(f, constants={"w": w, "b": b})
    assert "prepacked" in packed.explain(x)
    plain = jc.jit(f, constants={"w": w, "b": b}, prepack_weights=False)
    assert "prepacked" not in plain.explain(x)
    assert_conv_close(packed(x), ref, mag, dtype, 30, msg="prepacked")
    assert_conv_close(plain(x), ref, mag, dtype, 30, msg="prepack_weights=False")
    np.testing.assert_array_equal(packed(x), plain(x))     # same order of operations
    from jitcore import config               # JITCORE_PREPACK=0, as config.from_env reads it
    monkeypatch.setenv("JITCORE_PREPACK", "0")
    with config.override(prepack=config.from_env().prepack):
        off = jc.jit(f, constants={"w": w, "b": b})
        assert "prepacked" not in off.explain(x)
        assert_conv_close(off(x), ref, mag, dtype, 30, msg="JITCORE_PREPACK=0")


@pytest.mark.parametrize("shape, wshape, kw", [
    ((2, 16, 17, 17), (24, 16, 3, 3), dict(padding=1)),
    ((1, 32, 14, 14), (32, 1, 3, 3), dict(padding=1, groups=32)),
    ((1, 8, 17, 16), (40, 8, 3, 3), dict(stride=2)),
])
def test_one_and_two_threads_bit_for_bit(shape, wshape, kw):
    rng = np.random.default_rng(9)
    x, w = rand(rng, shape, F32), rand(rng, wshape, F32)
    r = rand(rng, (shape[0], wshape[0]) + ref_conv2d(x[:, :, :, :], w, **kw)[0].shape[2:], F32)

    def f(x, w, r):
        return jc.silu(jc.conv2d(x, w, **kw) + r)
    one = jc.jit(f, num_threads=1)(x, w, r)
    two = jc.jit(f, num_threads=2)(x, w, r)
    np.testing.assert_array_equal(one, two)
    ref, mag = ref_conv2d(x, w, **kw)
    want = (ref + r) / (1 + np.exp(-(ref + r)))
    assert_close(one, want, F32, rtol=0,
                 atol=1.2 * conv_tol(F32, w[0].size) * (mag + np.abs(r))
                 + 8 * np.finfo(F32).eps * (np.abs(want) + 1))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_input_channels_in_passes(dtype, monkeypatch):
    """With a tiny L1 the kernel sums 8 input channels per pass, keeping the partial sums of
    its channel blocks between passes (33 = 4 passes of 8 and one of 1): same results, one
    and two threads alike, prepacked or not (constant weights may take the channel plan,
    which sums taps, then all channels: within the bound, not the same bits)."""
    from jitcore.llvm import conv
    monkeypatch.setattr(conv, "L1_BYTES", 1024)
    rng = np.random.default_rng(15)
    x, w, b = rand(rng, (2, 66, 7, 9), dtype), rand(rng, (26, 33, 3, 3), dtype), \
        rand(rng, 26, dtype)

    def f(x, w, b):
        return jc.relu(jc.conv2d(x, w, b, padding=(1, 2), groups=2))
    ref, mag = ref_conv2d(x, w, b, padding=(1, 2), groups=2)
    results = [jc.jit(f, num_threads=t)(x, w, b) for t in (1, 2)]
    results.append(jc.jit(f, constants={"w": w})(x, b))
    for got in results:
        assert_conv_close(got, np.maximum(ref, 0), mag, dtype, 33 * 9)
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("dtype", [F32, F64])
def test_output_past_l2_takes_a_tile_of_four_vectors(dtype, monkeypatch):
    """A 1x1 conv with few products per output (K = 7) whose output exceeds L2 (a tiny L2
    here) writes at least 4 pixel vectors per channel plane and visit: the same sums in the
    same order as the default tile (bitwise equal), within the bound of float64; tails of
    channels (37) and of pixels (23 x 21) included."""
    from jitcore.llvm import conv
    rng = np.random.default_rng(21)
    x, w, b = rand(rng, (2, 7, 23, 21), dtype), rand(rng, (37, 7, 1, 1), dtype), \
        rand(rng, 37, dtype)

    def f(x):
        return jc.silu(jc.conv2d(x, w, b))
    tiles = []
    choose = conv._choose_tile
    monkeypatch.setattr(conv, "_choose_tile", lambda *a: tiles.append(choose(*a)) or tiles[-1])
    default = jc.jit(f)(x)
    monkeypatch.setattr(conv, "cache_sizes", lambda: {1: 32 * 1024, 2: 1024})
    fresh_compiles(monkeypatch)
    streamed = jc.jit(f)(x)
    assert tiles[0][1] < conv.STREAMED_OUTPUT_NV <= tiles[-1][1], tiles
    ref, mag = ref_conv2d(x, w, b)
    assert_conv_close(streamed, ref / (1 + np.exp(-ref)), mag, dtype, 7)
    np.testing.assert_array_equal(streamed, default)


def test_channels_last_input_read_in_place():
    """A transposed view of an NHWC array is an NCHW input with other strides."""
    rng = np.random.default_rng(10)
    nhwc = rand(rng, (2, 9, 11, 6), F32)
    x = nhwc.transpose(0, 3, 1, 2)
    w = rand(rng, (7, 6, 3, 3), F32)
    f = jc.jit(lambda x, w: jc.relu(jc.conv2d(x, w, padding=1)))
    ref, mag = ref_conv2d(x, w, padding=1)
    assert_conv_close(f(x, w), np.maximum(ref, 0), mag, F32, 54)


# ---- batch norm ----------------------------------------------------------------------------

def ref_batch_norm(x, mean, var, weight=None, bias=None, eps=1e-5):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x.astype(np.float64) - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def bn_params(rng, c, dtype):
    return (rand(rng, c, dtype), (np.abs(rand(rng, c, dtype)) + 0.5).astype(dtype),
            rand(rng, c, dtype), rand(rng, c, dtype))


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 7), (2, 3, 5, 6), (0, 3, 2, 2)])
def test_batch_norm_alone(dtype, shape):
    rng = np.random.default_rng(11)
    x = rand(rng, shape, dtype)
    m, v, g, be = bn_params(rng, shape[1], dtype)
    f = jc.jit(lambda x, m, v, g, be: (jc.batch_norm(x, m, v, g, be, eps=1e-3),
                                       jc.batch_norm(x, m, v)))
    full, plain = f(x, m, v, g, be)
    assert_close(full, ref_batch_norm(x, m, v, g, be, eps=1e-3), dtype, rtol=
                 8 * np.finfo(dtype).eps, atol=8 * np.finfo(dtype).eps * (
                     np.abs(ref_batch_norm(x, m, v, np.abs(g), np.abs(be), eps=1e-3)) + 1))
    assert_close(plain, ref_batch_norm(x, m, v), dtype, rtol=8 * np.finfo(dtype).eps,
                 atol=8 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_batch_norm_folded_into_constant_conv(dtype, with_bias):
    rng = np.random.default_rng(12)
    x, w, b = rand(rng, (2, 8, 10, 9), dtype), rand(rng, (12, 8, 3, 3), dtype), \
        rand(rng, 12, dtype)
    m, v, g, be = bn_params(rng, 12, dtype)

    def block(x, w, b, m, v, g, be):
        y = jc.conv2d(x, w, b if with_bias else None, padding=1)
        return jc.relu(jc.batch_norm(y, m, v, g, be))
    consts = dict(w=w, b=b, m=m, v=v, g=g, be=be)
    folded = jc.jit(block, constants=consts)
    kernels = folded.kernels(x)
    assert [k.kind for k in kernels] == ["conv"], [str(k) for k in kernels]
    assert "batch_norm" in folded.graph(x)          # the graph keeps it; the kernels do not
    unfolded = jc.jit(block)                        # arrays as inputs: nothing to fold
    assert len(unfolded.kernels(x, w, b, m, v, g, be)) >= 1
    conv, mag = ref_conv2d(x, w, b if with_bias else None, padding=1)
    scale = g.astype(np.float64) / np.sqrt(v.astype(np.float64) + 1e-5)
    ref = np.maximum(ref_batch_norm(conv, m, v, g, be), 0)
    bound_mag = (mag + np.abs(m)[None, :, None, None]) * np.abs(scale)[None, :, None, None] \
        + np.abs(be)[None, :, None, None]
    for got, msg in ((folded(x), "folded"), (unfolded(x, w, b, m, v, g, be), "not folded")):
        assert_close(got, ref, dtype, rtol=0, atol=conv_tol(dtype, 8 * 9 + 4) * 2 * bound_mag
                     + 8 * np.finfo(dtype).eps * np.abs(ref), msg=msg)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_batch_norms_fold_below_equal_constants(dtype):
    """A model with fresh statistics (every mean and beta zero, every var one) and a padding
    made of zeros has equal constants everywhere: every batch norm still folds (a fold
    round's rewrite merged them and rebuilt the convs below, which then never folded:
    EfficientNet's batch norms all ran at run time)."""
    rng = np.random.default_rng(13)
    x = rand(rng, (1, 4, 9, 9), dtype)
    ws = [rand(rng, (4, 4, 3, 3), dtype) for _ in range(3)]
    zeros, ones = np.zeros(4, dtype), np.ones(4, dtype)
    gammas = [rand(rng, 4, dtype) for _ in range(3)]

    def model(x):
        y = jc.concatenate([x, np.zeros((1, 4, 1, 9), dtype)], axis=2)    # a bottom padding
        for w, g in zip(ws, gammas):
            y = jc.relu(jc.batch_norm(jc.conv2d(y, w, padding=1), zeros.copy(), ones.copy(),
                                      g, zeros.copy(), eps=1e-3))
        return y
    f = jc.jit(model)
    kernels = f.kernels(x)
    assert [k.kind for k in kernels].count("conv") == 3
    assert not any("div" in k.ops or "sqrt" in k.ops for k in kernels), \
        [str(k) for k in kernels]
    ref = np.concatenate([x, np.zeros((1, 4, 1, 9), dtype)], axis=2).astype(np.float64)
    mag = np.abs(ref)
    for w, g in zip(ws, gammas):
        conv, m = ref_conv2d(ref, w, padding=1)
        _, m = ref_conv2d(mag, np.abs(w), padding=1)
        s = (g.astype(np.float64) / np.sqrt(1 + 1e-3))[None, :, None, None]
        ref, mag = np.maximum(conv * s, 0), m * np.abs(s)
    assert_close(f(x), ref, dtype, rtol=0, atol=conv_tol(dtype, 36 * 3 + 8) * 4 * mag
                 + 16 * np.finfo(dtype).eps * np.abs(ref))


def test_two_batch_norms_in_a_row_fold_into_the_conv():
    rng = np.random.default_rng(18)
    x, w = rand(rng, (1, 3, 8, 8), F64), rand(rng, (5, 3, 3, 3), F64)
    bn1, bn2 = bn_params(rng, 5, F64), bn_params(rng, 5, F64)
    f = jc.jit(lambda x: jc.batch_norm(jc.batch_norm(jc.conv2d(x, w), *bn1), *bn2))
    assert [k.ops for k in f.kernels(x)] == [("conv2d",)]
    conv, _ = ref_conv2d(x, w)
    np.testing.assert_allclose(f(x), ref_batch_norm(ref_batch_norm(conv, *bn1), *bn2),
                               rtol=1e-12, atol=1e-12)


def test_batch_norm_after_conv1d_folds():
    rng = np.random.default_rng(13)
    x, w = rand(rng, (2, 4, 15), F64), rand(rng, (6, 4, 3), F64)
    m, v, g, be = bn_params(rng, 6, F64)
    f = jc.jit(lambda x, w, m, v, g, be: jc.batch_norm(jc.conv1d(x, w, padding=1), m, v, g, be),
               constants=dict(w=w, m=m, v=v, g=g, be=be))
    assert [k.kind for k in f.kernels(x)] == ["conv"]
    conv, _ = ref_conv2d(x[:, :, None], w[:, :, None], padding=(0, 1))
    np.testing.assert_allclose(f(x), ref_batch_norm(conv[:, :, 0], m, v, g, be), rtol=1e-12,
                               atol=1e-12)


def test_batch_norm_not_folded_when_the_conv_is_also_returned():
    rng = np.random.default_rng(14)
    x, w = rand(rng, (1, 3, 6, 6), F64), rand(rng, (4, 3, 3, 3), F64)
    m, v, g, be = bn_params(rng, 4, F64)

    def f(x, w, m, v, g, be):
        y = jc.conv2d(x, w)
        return y, jc.batch_norm(y, m, v, g, be)
    y, z = jc.jit(f, constants=dict(w=w, m=m, v=v, g=g, be=be))(x)
    conv, _ = ref_conv2d(x, w)
    np.testing.assert_allclose(y, conv, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(z, ref_batch_norm(conv, m, v, g, be), rtol=1e-12, atol=1e-12)


# ---- bad input ------------------------------------------------------------------------------

X = np.zeros((2, 8, 10, 10), np.float32)
W = np.zeros((16, 8, 3, 3), np.float32)


@pytest.mark.parametrize("call, words", [
    (lambda: jc.conv2d(X, W[:, :4]), ["conv2d", "channels", "(16, 4, 3, 3)", "(2, 8, 10, 10)"]),
    (lambda: jc.conv2d(X, W, groups=3), ["conv2d", "groups=3", "(2, 8, 10, 10)"]),
    (lambda: jc.conv2d(X, W[:, :4], groups=2, bias=np.zeros(5, np.float32)),
     ["conv2d", "bias", "(5,)"]),
    (lambda: jc.conv2d(X[:, :, :2, :2], W), ["conv2d", "larger than the padded input",
                                             "(2, 8, 2, 2)"]),
    (lambda: jc.conv2d(X, np.zeros((16, 8, 5, 5), np.float32), dilation=3),
     ["conv2d", "dilation 3x3"]),
    (lambda: jc.conv2d(X, W, padding=-1), ["conv2d", "negative padding", "(2, 8, 10, 10)"]),
    (lambda: jc.conv2d(X, W, padding=(1, -2)), ["conv2d", "negative padding"]),
    (lambda: jc.conv2d(X[0, 0], W), ["conv2d", "(N, C, H, W) or (C, H, W)", "(10, 10)"]),
    (lambda: jc.conv2d(X, W[0]), ["conv2d", "(8, 3, 3)"]),
    (lambda: jc.conv2d(X, W, stride=0), ["conv2d", "stride"]),
    (lambda: jc.conv2d(X, W, stride=2, padding="same"), ["conv2d", "same", "stride 1"]),
    (lambda: jc.conv2d(X, W, padding="full"), ["conv2d", "'full'"]),
    (lambda: jc.conv1d(X, W), ["conv1d", "(N, C, L)", "(2, 8, 10, 10)"]),
    (lambda: jc.conv1d(X[:, :, 0], W[:, :, 0], padding=-1), ["conv1d", "negative padding"]),
    (lambda: jc.batch_norm(X, np.zeros(3, np.float32), np.ones(3, np.float32)),
     ["batch_norm", "(8,)"]),
    (lambda: jc.batch_norm(np.zeros(8, np.float32), np.zeros(8), np.ones(8)),
     ["batch_norm", "(N, C, ...)"]),
])
def test_bad_input_raises_shape_error(call, words):
    with pytest.raises(jc.ShapeError) as info:
        call()
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# ---- the same folding for a matmul ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_batch_norm_and_column_scale_fold_into_constant_matmul(dtype):
    """batch_norm over the columns of x @ W + b, and (x @ W) * s + t with s, t per column,
    become one GEMM on W scaled at compile time (prepacked), the shift its epilogue add; a
    scale that varies along rows is not folded. Values as numpy's."""
    rng = np.random.default_rng(16)
    x, w, bias = rand(rng, (40, 24), dtype), rand(rng, (24, 36), dtype), rand(rng, 36, dtype)
    m, v, g, be = bn_params(rng, 36, dtype)
    s, t, rows = rand(rng, 36, dtype), rand(rng, 36, dtype), rand(rng, (40, 1), dtype)
    tol = conv_tol(dtype, 24 + 4)
    mag = np.abs(x).astype(np.float64) @ np.abs(w)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)

    bn = jc.jit(lambda x, w, bias, m, v, g, be: jc.relu(jc.batch_norm(x @ w + bias, m, v, g, be)),
                constants=dict(w=w, bias=bias, m=m, v=v, g=g, be=be))
    assert [k.kind for k in bn.kernels(x)] == ["gemm"] and "prepacked" in bn.explain(x)
    scale = g.astype(np.float64) / np.sqrt(v.astype(np.float64) + 1e-5)
    want = np.maximum(ref_batch_norm(x64 @ w64 + bias, m, v, g, be), 0)
    bound = 2 * tol * ((mag + np.abs(bias) + np.abs(m)) * np.abs(scale) + np.abs(be)) \
        + 8 * np.finfo(dtype).eps * np.abs(want)
    assert_close(bn(x), want, dtype, rtol=0, atol=bound, msg="batch_norm(x @ W + b)")

    affine = jc.jit(lambda x, w, s, t: (x @ w) * s + t, constants=dict(w=w, s=s, t=t))
    kernels = affine.kernels(x)
    assert len(kernels) == 1 and kernels[0].ops == ("matmul", "add"), kernels
    want = (x64 @ w64) * s + t
    bound = 2 * tol * (mag * np.abs(s) + np.abs(t)) + 8 * np.finfo(dtype).eps * np.abs(want)
    assert_close(affine(x), want, dtype, rtol=0, atol=bound, msg="(x @ W) * s + t")

    by_row = jc.jit(lambda x, w, r: (x @ w) * r, constants=dict(w=w, r=rows))
    assert by_row.kernels(x)[0].ops == ("matmul", "mul")
    want = (x64 @ w64) * rows
    assert_close(by_row(x), want, dtype, rtol=0, atol=2 * tol * mag * np.abs(rows)
                 + 8 * np.finfo(dtype).eps * np.abs(want), msg="row scale, not folded")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_operand_views_that_strides_cannot_express_are_copied(dtype):
    """A conv2d input that merges axes a transpose separated (MobileViT folds its patches
    back so: reshape, transpose, reshape) is not a strided view of its array: the conv reads
    a copy; its weight, a grouped regrouping of a constant, likewise. Values as torch's."""
    rng = np.random.default_rng(17)
    x, w = rand(rng, (1, 4, 6, 4), dtype), rand(rng, (2, 2, 2, 3, 3), dtype)

    def fold(x, w):
        p = jc.transpose(jc.reshape(x, (1, 4, 3, 2, 2, 2)), (0, 1, 2, 4, 3, 5))
        w2 = jc.reshape(jc.transpose(w, (1, 0, 2, 3, 4)), (4, 2, 3, 3))
        return jc.conv2d(jc.reshape(p, (1, 4, 6, 4)), w2, padding=1, groups=2)

    xf = x.reshape(1, 4, 3, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 4, 6, 4)
    wf = w.transpose(1, 0, 2, 3, 4).reshape(4, 2, 3, 3)
    ref, mag = ref_conv2d(xf, wf, padding=1, groups=2)
    assert_conv_close(jc.jit(fold)(x, w), ref, mag, dtype, 18, "weight an input")
    assert_conv_close(jc.jit(fold, constants=dict(w=w))(x), ref, mag, dtype, 18,
                      "weight a constant")


@pytest.mark.parametrize("value", [0.0, 1.5])
def test_contraction_operands_that_simplify_to_a_broadcast_scalar(value):
    """A slice of a pad's constant border simplifies to a broadcast scalar, which has no
    memory: a conv2d or matmul reading it reads a materialized copy ('a matmul operand is not
    in memory' before; found by the random programs, randomized)."""
    rng = np.random.default_rng(3)
    x, w = rand(rng, (1, 3, 2, 5), F32), rand(rng, (2, 1, 1, 2), F32)
    pads = ((0, 0), (0, 0), (2, 2), (0, 1))

    def conv(a):
        border = jc.pad(a, pads, constant_values=value)[0:1, 0:1, 5:6, 3:5]
        return jc.conv2d(border, w, padding=(0, 1))

    def matmul(a):
        return jc.pad(a, pads, constant_values=value)[0, 0, 0:2, 0:2] @ a[0, 0]

    border = np.pad(x, pads, constant_values=value)
    ref, mag = ref_conv2d(border[0:1, 0:1, 5:6, 3:5], w, padding=(0, 1))
    assert_conv_close(jc.jit(conv)(x), ref, mag, F32, 2, "broadcast scalar input")
    assert_close(jc.jit(matmul)(x), border[0, 0, 0:2, 0:2] @ x[0, 0], F32)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("widths, value, absorbed", [
    (((0, 0), (0, 0), (0, 1), (0, 1)), 0.0, True),           # TF "same" for stride 2
    (((0, 0), (0, 0), (2, 1), (1, 3)), 0.0, True),
    (((0, 0), (1, 0), (1, 1), (1, 1)), 0.0, False),           # a channel pad stays a pad
    (((0, 0), (0, 0), (1, 1), (1, 1)), 1.5, False),           # not zeros
    (((0, 0), (0, 0), (1, 1), (1, 1)), -0.0, False),          # -0 is the conv's +0 but signed
])
def test_zero_padding_read_by_a_conv_becomes_its_padding(dtype, widths, value, absorbed):
    rng = np.random.default_rng(16)
    x = rand(rng, (2, 6, 9, 10), dtype)
    cin = 6 + sum(widths[1])
    w = rand(rng, (8, cin, 3, 3), dtype)
    pad = jc.jit(lambda x: jc.pad(x, widths, constant_values=value))
    f = jc.jit(lambda x: jc.relu(jc.conv2d(jc.pad(x, widths, constant_values=value), w,
                                           stride=2, padding=1)))
    padded = np.pad(x, widths, constant_values=value)
    ref, mag = ref_conv2d(padded, w, stride=2, padding=1)
    assert_conv_close(f(x), np.maximum(ref, 0), mag, dtype, cin * 9)
    np.testing.assert_array_equal(pad(x), padded)
    kinds = [k.kind for k in f.kernels(x)]
    assert (kinds == ["conv"]) == absorbed, kinds


def test_a_padding_also_returned_is_still_made():
    rng = np.random.default_rng(17)
    x, w = rand(rng, (1, 3, 7, 7), F32), rand(rng, (4, 3, 3, 3), F32)
    widths = ((0, 0), (0, 0), (1, 2), (0, 1))
    padded, y = jc.jit(lambda x: (lambda p: (p, jc.conv2d(p, w)))(jc.pad(x, widths)))(x)
    np.testing.assert_array_equal(padded, np.pad(x, widths))
    ref, mag = ref_conv2d(np.pad(x, widths), w)
    assert_conv_close(y, ref, mag, F32, 27)

"""Winograd F(2x2, 3x3) convolutions (jitcore/llvm/conv_winograd.py): 3x3 stride-1 float32
convs with constant weights and at least 32 input and output channels over planes of at
least 32 2x2 tiles. Checked against a float64 reference within the bound of the Winograd
sum: gamma(C_in + 12) (the products' sum over channels plus the input and output transforms'
additions, 4 levels of at most 4 terms) times the transformed magnitudes
|A^T (sum_c |G w_c G^T| (.) |B^T d_c B|) A|, plus the bias and residual terms; over a family
of batches, channel counts that leave partial register tiles and channel blocks, odd planes
(partial tiles), every padding form; NaN and Inf inputs; bitwise equality across thread
counts; the x86-64-v3, v2 and x86-64 levels; and the convs it must leave direct.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import jitcore as jc
from jitcore import config
from helpers import F32, F64, assert_close, conv_tol, ref_conv2d, resolve_padding
from test_conv import rand

WINOGRAD = "Winograd"
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]])
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]])


def winograd_magnitude(x, w, padding) -> np.ndarray:
    """|A^T (sum_c |G w_c G^T| (.) |B^T d_c B|) A| per output pixel (float64): the bound's
    scale, as the direct conv's is the sum of |terms|."""
    pt, pb, pl, pr = resolve_padding(padding, (3, 3), (1, 1))
    n, c, h, wd = x.shape
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    xp = np.zeros((n, c, 2 * th + 2, 2 * tw + 2))
    xp[:, :, pt:pt + h, pl:pl + wd] = np.abs(x.astype(np.float64))
    d = np.lib.stride_tricks.sliding_window_view(xp, (4, 4), axis=(2, 3))[:, :, ::2, ::2]
    v = np.einsum("ik,nctukl,jl->nctuij", np.abs(BT), d, np.abs(BT))
    u = np.einsum("ik,ockl,jl->ocij", np.abs(G), np.abs(w.astype(np.float64)), np.abs(G))
    m = np.einsum("nctuij,ocij->notuij", v, u)
    y = np.einsum("ai,notuij,bj->notuab", np.abs(AT), m, np.abs(AT))
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, 2 * th, 2 * tw)[:, :, :oh, :ow]


def check(cfg, seed=0, threads=None, target=None, residual=True):
    """relu(conv + bias + residual) against the reference within the Winograd bound;
    returns (output, whether the conv took Winograd)."""
    rng = np.random.default_rng(seed)
    x, w, b = rand(rng, cfg["x"], F32), rand(rng, cfg["w"], F32), rand(rng, cfg["w"][0], F32)
    pad = cfg["padding"]
    ref, _ = ref_conv2d(x, w, b, padding=pad)
    r = rand(rng, ref.shape, F32) if residual else np.zeros(ref.shape, F32)
    kw = {} if threads is None else {"num_threads": threads}
    if target is not None:
        kw["target"] = target
    if residual:
        f = jc.jit(lambda x, r: jc.relu(jc.conv2d(x, w, b, padding=pad) + r), **kw)
        got, args = f(x, r), (x, r)
    else:
        f = jc.jit(lambda x: jc.conv2d(x, w, b, padding=pad), **kw)
        got, args = f(x), (x,)
    want = np.maximum(ref + r, 0) if residual else ref
    mag = winograd_magnitude(x, w, pad) + np.abs(b)[:, None, None] + np.abs(r)
    bound = conv_tol(F32, cfg["w"][1] + 12) * mag + 4 * np.finfo(F32).eps * np.abs(want)
    assert_close(got, want, F32, rtol=0, atol=bound, msg=str(cfg))
    return got, any(WINOGRAD in k.layout for k in f.kernels(*args) if k.layout)


def winograd_configs(count: int, seed: int) -> list:
    rng, out = random.Random(seed), []
    while len(out) < count:
        padding = rng.choice([1, 1, 0, 2, (1, 0), (0, 2), "same"])
        h, w = rng.randint(11, 30), rng.randint(11, 30)
        cfg = dict(x=(rng.choice([1, 1, 2, 3]), rng.choice([32, 33, 48, 64, 67]), h, w),
                   padding=padding)
        cfg["w"] = (rng.choice([32, 40, 64, 65, 100]), cfg["x"][1], 3, 3)
        pt, pb, pl, pr = resolve_padding(padding, (3, 3), (1, 1))
        if -(-(h + pt + pb - 2) // 2) * -(-(w + pl + pr - 2) // 2) >= 32:
            out.append(cfg)
    return out


@pytest.mark.parametrize("part", range(3))
def test_winograd_family(part):
    for cfg in winograd_configs(5, seed=300 + part):
        _, taken = check(cfg, seed=part, residual=part != 1)
        assert taken, cfg


@pytest.mark.parametrize("shape, cout", [((1, 64, 56, 56), 64), ((2, 128, 28, 28), 128),
                                         ((1, 256, 14, 14), 256)])
def test_resnet_layers(shape, cout):
    _, taken = check(dict(x=shape, w=(cout, shape[1], 3, 3), padding=1))
    assert taken


def test_same_bits_on_one_and_two_threads():
    """Every output's sum runs in one order whatever the split of the work items."""
    cfg = dict(x=(2, 40, 23, 21), w=(72, 40, 3, 3), padding=1)
    one, taken = check(cfg, threads=1)
    two, _ = check(cfg, threads=2)
    assert taken
    np.testing.assert_array_equal(one, two)


def test_nan_and_inf_inputs():
    """A non-finite input makes exactly the outputs whose 3x3 window reads it non-finite (the
    transforms add only the terms with nonzero coefficients, which are the window's). NaN
    stays NaN; an Inf can come out NaN where the direct sum gives +-Inf (the transforms
    subtract it from itself), which the docstring of conv_winograd.py states."""
    rng = np.random.default_rng(6)
    x, w = rand(rng, (1, 32, 17, 19), F32), rand(rng, (48, 32, 3, 3), F32)
    x[0, 3, 4, 7], x[0, 0, 16, 2], x[0, 31, 9, 18] = np.nan, np.inf, -np.inf
    x[0, 5, 0, 0] = np.inf
    f = jc.jit(lambda x: jc.conv2d(x, w, padding=1))
    got = f(x)
    assert any(WINOGRAD in k.layout for k in f.kernels(x) if k.layout)
    ref, _ = ref_conv2d(x, w, padding=1)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
    assert np.isnan(got[np.isnan(ref)]).all()
    finite = np.isfinite(ref)
    xf = np.where(np.isfinite(x), x, 0)
    mag = winograd_magnitude(xf, w, 1)
    assert_close(got[finite], ref[finite], F32, rtol=0,
                 atol=(conv_tol(F32, 32 + 12) * mag)[finite] + 1e-30)


def test_empty_batch():
    x, w = np.zeros((0, 32, 16, 16), F32), rand(np.random.default_rng(1), (32, 32, 3, 3), F32)
    got = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, padding=1)))(x)
    assert got.shape == (0, 32, 16, 16)


@pytest.mark.parametrize("case", ["stride", "dilation", "groups", "float64", "channels",
                                  "plane", "weights", "disabled"])
def test_convs_left_direct(case):
    """What Winograd does not take stays direct (and correct: test_conv.py's families)."""
    rng = np.random.default_rng(2)
    dtype = F64 if case == "float64" else F32
    cin = 16 if case == "channels" else 32
    hw = 8 if case == "plane" else 20
    groups = 2 if case == "groups" else 1
    x, w = rand(rng, (1, cin, hw, hw), dtype), rand(rng, (32, cin // groups, 3, 3), dtype)
    opts = dict(padding=1, stride=2 if case == "stride" else 1,
                dilation=2 if case == "dilation" else 1, groups=groups)
    if case == "weights":
        f, args = jc.jit(lambda x, w: jc.conv2d(x, w, **opts)), (x, w)
    else:
        f, args = jc.jit(lambda x: jc.conv2d(x, w, **opts)), (x,)
    if case == "disabled":
        with config.override(winograd=False):
            got = f(*args)
            layouts = [k.layout for k in f.kernels(*args) if k.layout]
    else:
        got, layouts = f(*args), [k.layout for k in f.kernels(*args) if k.layout]
    assert not any(WINOGRAD in lay for lay in layouts), layouts
    ref, mag = ref_conv2d(x, w, **opts)
    assert_close(got, ref, dtype, rtol=0, atol=conv_tol(dtype, cin * 9) * mag + 1e-30)


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2", "x86-64"])
def test_levels(target):
    try:
        jc.target_info(target=target)
    except jc.TargetError:
        pytest.skip(f"the host cannot run {target}")
    for cfg in winograd_configs(2, seed=9):
        _, taken = check(cfg, target=target)
        assert taken
    cfg = dict(x=(2, 36, 19, 17), w=(40, 36, 3, 3), padding=1)
    one, _ = check(cfg, target=target, threads=1)
    two, _ = check(cfg, target=target, threads=2)
    np.testing.assert_array_equal(one, two)

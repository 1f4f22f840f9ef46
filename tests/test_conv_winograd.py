"""Winograd convolutions (jitcore/llvm/conv_winograd.py): 3x3 stride-1 float32 convs with
constant weights and at least 32 input and output channels over planes of at least 32
tiles; F(2x2, 3x3) by default, F(4x4, 3x3) opted into (JITCORE_WINOGRAD=4). Checked against a
float64 reference within the bound of the Winograd sum: gamma(C_in + 2 * alpha + 4) (the
products' sum over channels plus the input and output transforms' two levels of at most
alpha terms each) times the transformed magnitudes |AT (sum_c |G w_c G^T| (.) |BT d_c BT^T|)
AT^T|, plus the bias and residual terms; over a family of batches, channel counts that leave
partial register tiles and channel blocks, odd planes (partial tiles), every padding form;
NaN and Inf inputs; bitwise equality across thread counts; the x86-64-v3, v2 and x86-64
levels; and the convs it must leave direct.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import jitcore as jc
from jitcore import config
from jitcore.llvm.conv_winograd import VARIANTS
from helpers import (F32, F64, assert_close, conv_tol, ref_conv2d, resolve_padding,
                     skip_unless_runnable)
from test_conv import rand

WINOGRAD = "Winograd"


def winograd_magnitude(x, w, padding, m=2) -> np.ndarray:
    """|AT (sum_c |G w_c G^T| (.) |BT d_c BT^T|) AT^T| per output pixel (float64) for
    F(m x m, 3x3): the bound's scale, as the direct conv's is the sum of |terms|."""
    t = VARIANTS[m]
    at, bt, g = (np.abs(np.array(a, dtype=np.float64)) for a in (t.AT, t.BT, t.G))
    alpha = t.alpha
    pt, pb, pl, pr = resolve_padding(padding, (3, 3), (1, 1))
    n, c, h, wd = x.shape
    oh, ow = h + pt + pb - 2, wd + pl + pr - 2
    th, tw = -(-oh // m), -(-ow // m)
    xp = np.zeros((n, c, m * th + 2, m * tw + 2))
    xp[:, :, pt:pt + h, pl:pl + wd] = np.abs(x.astype(np.float64))
    d = np.lib.stride_tricks.sliding_window_view(xp, (alpha, alpha), axis=(2, 3))[:, :, ::m, ::m]
    v = np.einsum("ik,nctukl,jl->nctuij", bt, d, bt)
    u = np.einsum("ik,ockl,jl->ocij", g, np.abs(w.astype(np.float64)), g)
    mm = np.einsum("nctuij,ocij->notuij", v, u)
    y = np.einsum("ai,notuij,bj->notuab", at, mm, at)
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, -1, m * th, m * tw)[:, :, :oh, :ow]


def winograd_tol(cin: int, m: int) -> float:
    return conv_tol(F32, cin + 2 * VARIANTS[m].alpha + 4)


def check(cfg, seed=0, threads=None, target=None, residual=True, m=2):
    """relu(conv + bias + residual) against the reference within the bound of F(m x m, 3x3)
    (JITCORE_WINOGRAD=m); returns (output, whether the conv took that variant)."""
    with config.override(winograd=m):
        return _check(cfg, seed, threads, target, residual, m)


def _check(cfg, seed, threads, target, residual, m):
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
    mag = winograd_magnitude(x, w, pad, m) + np.abs(b)[:, None, None] + np.abs(r)
    bound = winograd_tol(cfg["w"][1], m) * mag + 4 * np.finfo(F32).eps * np.abs(want)
    assert_close(got, want, F32, rtol=0, atol=bound, msg=str(cfg))
    return got, any(f"{WINOGRAD} F({m}x{m}" in k.layout for k in f.kernels(*args) if k.layout)


def winograd_configs(count: int, seed: int, m: int = 2) -> list:
    rng, out = random.Random(seed), []
    while len(out) < count:
        padding = rng.choice([1, 1, 0, 2, (1, 0), (0, 2), "same"])
        n = rng.choice([1, 1, 2, 3])
        h, w = rng.randint(5 * m // n + 1, 15 * m), rng.randint(5 * m // n + 1, 15 * m)
        cfg = dict(x=(n, rng.choice([32, 33, 48, 64, 67]), h, w), padding=padding)
        cfg["w"] = (rng.choice([32, 40, 64, 65, 100]), cfg["x"][1], 3, 3)
        pt, pb, pl, pr = resolve_padding(padding, (3, 3), (1, 1))
        if n * -(-(h + pt + pb - 2) // m) * -(-(w + pl + pr - 2) // m) >= 32:
            out.append(cfg)
    return out


@pytest.mark.parametrize("m, part", [(2, 0), (2, 1), (2, 2), (4, 0)])
def test_winograd_family(m, part):
    for cfg in winograd_configs(5 if m == 2 else 4, seed=300 + part, m=m):
        _, taken = check(cfg, seed=part, residual=part != 1, m=m)
        assert taken, cfg


def test_f4_falls_back_to_f2_on_planes_too_small_for_its_tiles():
    """14x14 holds 16 4x4 tiles (fewer than 32) but 49 2x2 ones."""
    cfg = dict(x=(1, 64, 14, 14), w=(64, 64, 3, 3), padding=1)
    _, f2 = check(cfg, m=2)
    _, f4 = check(cfg, m=4)
    assert f2 and not f4
    with config.override(winograd=4):
        rng = np.random.default_rng(0)
        w = rand(rng, (64, 64, 3, 3), F32)
        f = jc.jit(lambda x: jc.conv2d(x, w, padding=1))
        x = rand(rng, (1, 64, 14, 14), F32)
        f(x)
        assert any("Winograd F(2x2" in k.layout for k in f.kernels(x) if k.layout)


@pytest.mark.parametrize("shape, cout, m", [((1, 64, 56, 56), 64, 2), ((2, 128, 28, 28), 128, 2),
                                            ((1, 256, 14, 14), 256, 2), ((1, 64, 56, 56), 64, 4),
                                            ((1, 128, 28, 28), 128, 4)])
def test_resnet_layers(shape, cout, m):
    _, taken = check(dict(x=shape, w=(cout, shape[1], 3, 3), padding=1), m=m)
    assert taken


def test_small_planes_take_winograd_over_a_batch():
    """A work item's tiles may span images: 7x7 planes (16 tiles each) take Winograd from
    batch 2 on, and a group that ends inside an image (9x11: 30 tiles) continues in the
    next."""
    for shape in ((2, 64, 7, 7), (3, 40, 9, 11), (8, 48, 7, 7)):
        _, taken = check(dict(x=shape, w=(56, shape[1], 3, 3), padding=1))
        assert taken, shape
    _, taken = check(dict(x=(1, 64, 7, 7), w=(56, 64, 3, 3), padding=1))
    assert not taken


@pytest.mark.parametrize("m", [2, 4])
def test_same_bits_on_one_and_two_threads(m):
    """Every output's sum runs in one order whatever the split of the work items."""
    cfg = dict(x=(2, 40, 23, 21), w=(72, 40, 3, 3), padding=1) if m == 2 else \
        dict(x=(2, 40, 31, 33), w=(72, 40, 3, 3), padding=1)
    one, taken = check(cfg, threads=1, m=m)
    two, _ = check(cfg, threads=2, m=m)
    assert taken
    np.testing.assert_array_equal(one, two)


def test_nan_and_inf_inputs():
    """F(2x2, 3x3): a non-finite input makes exactly the outputs whose 3x3 window reads it
    non-finite (the transforms add only the terms with nonzero coefficients, which are the
    window's). NaN stays NaN; an Inf can come out NaN where the direct sum gives +-Inf (the
    transforms subtract it from itself), which the docstring of conv_winograd.py states."""
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
                 atol=(winograd_tol(32, 2) * mag)[finite] + 1e-30)


def test_f4_nan_reaches_the_tiles_over_it():
    """F(4x4, 3x3): a NaN input makes every output of the 4x4 tiles whose 6x6 patch holds it
    NaN (their transforms' rows read the whole patch); the other outputs are finite and
    within the bound."""
    rng = np.random.default_rng(7)
    x, w = rand(rng, (1, 32, 30, 30), F32), rand(rng, (40, 32, 3, 3), F32)
    x[0, 3, 13, 6] = np.nan
    with config.override(winograd=4):
        f = jc.jit(lambda x: jc.conv2d(x, w, padding=1))
        got = f(x)
        assert any("Winograd F(4x4" in k.layout for k in f.kernels(x) if k.layout)
    # input row 13 is padded row 14: patches of tile rows ty with 4ty <= 14 < 4ty + 6
    rows = [ty for ty in range(8) if 4 * ty <= 14 < 4 * ty + 6]
    cols = [tx for tx in range(8) if 4 * tx <= 7 < 4 * tx + 6]
    nan = np.zeros((30, 30), bool)
    for ty in rows:
        for tx in cols:
            nan[4 * ty:4 * ty + 4, 4 * tx:4 * tx + 4] = True
    np.testing.assert_array_equal(np.isnan(got[0]), np.broadcast_to(nan, got[0].shape))
    ref, _ = ref_conv2d(np.where(np.isnan(x), 0, x), w, padding=1)
    mag = winograd_magnitude(np.where(np.isnan(x), 0, x), w, 1, m=4)
    keep = ~np.isnan(got)
    assert_close(got[keep], ref[keep], F32, rtol=0, atol=(winograd_tol(32, 4) * mag)[keep])


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
        with config.override(winograd=0):
            got = f(*args)
            layouts = [k.layout for k in f.kernels(*args) if k.layout]
    else:
        got, layouts = f(*args), [k.layout for k in f.kernels(*args) if k.layout]
    assert not any(WINOGRAD in lay for lay in layouts), layouts
    ref, mag = ref_conv2d(x, w, **opts)
    assert_close(got, ref, dtype, rtol=0, atol=conv_tol(dtype, cin * 9) * mag + 1e-30)


@pytest.mark.parametrize("target, m", [("x86-64-v3", 2), ("x86-64-v2", 2), ("x86-64", 2),
                                       ("x86-64-v3", 4)])
def test_levels(target, m):
    skip_unless_runnable(target)
    for cfg in winograd_configs(2 if m == 2 else 1, seed=9, m=m):
        _, taken = check(cfg, target=target, m=m)
        assert taken
    cfg = dict(x=(2, 36, 19 * m // 2, 17 * m // 2), w=(40, 36, 3, 3), padding=1)
    one, _ = check(cfg, target=target, threads=1, m=m)
    two, _ = check(cfg, target=target, threads=2, m=m)
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("raw, want", [("0", 0), ("2", 2), ("4", 4), ("", 2)])
def test_setting(monkeypatch, raw, want):
    monkeypatch.setenv("JITCORE_WINOGRAD", raw)
    assert config.from_env().winograd == want


def test_bad_setting_warns_and_keeps_the_default(monkeypatch):
    monkeypatch.setenv("JITCORE_WINOGRAD", "3")
    with pytest.warns(RuntimeWarning, match="JITCORE_WINOGRAD"):
        assert config.from_env().winograd == 2


@pytest.mark.parametrize("m", [2, 4])
def test_row_segments_and_gathers_give_the_same_bits(m):
    """Contiguous input rows are read as row segments (vector loads and shuffles), strided
    ones gathered: the same values in the same panel, so the same bits."""
    rng = np.random.default_rng(11)
    wide = rand(rng, (2, 33, 27, 2 * 29), F32)
    x = np.ascontiguousarray(wide[..., ::2])
    w, b = rand(rng, (40, 33, 3, 3), F32), rand(rng, 40, F32)
    with config.override(winograd=m):
        f = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, b, padding=1)))
        rows, gathered = f(x), f(wide[..., ::2])
        assert all(f"Winograd F({m}x{m}" in k.layout for k in f.kernels(x) if k.layout)
    np.testing.assert_array_equal(rows, gathered)
    ref, _ = ref_conv2d(x, w, b, padding=1)
    mag = winograd_magnitude(x, w, 1, m) + np.abs(b)[:, None, None]
    assert_close(rows, np.maximum(ref, 0), F32, rtol=0, atol=winograd_tol(33, m) * mag)


def test_runs_on_a_thread_with_a_small_stack():
    """The panel (here 16 positions x 256 channels x 32 tiles: 512 KB) and the sums are on
    the heap: a thread with a 256 KB stack runs the conv (on its stack they overflowed it)."""
    import threading
    rng = np.random.default_rng(12)
    x, w = rand(rng, (1, 256, 14, 14), F32), rand(rng, (256, 256, 3, 3), F32)
    f = jc.jit(lambda x: jc.conv2d(x, w, padding=1), num_threads=1)
    want = f(x)
    assert any(WINOGRAD in k.layout for k in f.kernels(x) if k.layout)
    got = []
    old = threading.stack_size(256 * 1024)
    try:
        t = threading.Thread(target=lambda: got.append(f(x)))
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    np.testing.assert_array_equal(got[0], want)


def test_every_eligible_conv_of_a_graph_takes_winograd():
    """A graph whose first conv cannot (a stride-2 stem) and whose later ones can: each
    later one takes Winograd (prepacking once let the first conv's plan decide the rest's)."""
    rng = np.random.default_rng(13)
    stem, w1, w2 = (rand(rng, s, F32) for s in ((32, 3, 3, 3), (32, 32, 3, 3), (40, 32, 3, 3)))

    def net(x):
        y = jc.relu(jc.conv2d(x, stem, stride=2, padding=1))
        y = jc.relu(jc.conv2d(y, w1, padding=1))
        return jc.conv2d(y, w2, padding=1)
    x = rand(rng, (1, 3, 40, 40), F32)
    f = jc.jit(net)
    f(x)
    layouts = [k.layout for k in f.kernels(x) if k.layout]
    assert sum(WINOGRAD in lay for lay in layouts) == 2, layouts

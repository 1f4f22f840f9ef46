"""Depthwise convolutions (kind "depthwise", jitcore/llvm/depthwise.py) against the float64
reference of tests/helpers.py: a grid of kernel sizes 1/3/5/7, strides 1/2, dilations 1/2,
paddings 0/"same"/half, odd and 1x1 planes, channel multipliers 1/2, batches 0/1/3, with
and without bias, float32 and float64; fused epilogues (bias, relu, residual adds, a long
activation, folded batch norm) in one kernel; constant and argument weights; 1 and 2
threads bit for bit; the x86-64-v3 and x86-64-v2 levels; channels-last inputs; rows split
into column blocks; depthwise conv1d; and the convs that stay on the generic kernel.

Tolerance: each output sums K = KH * KW products and the bias, so |got - ref| is within
gamma(K + 2) of the sum of |terms| (helpers.assert_conv_close), plus a few ulp for a
post-op.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, F64, assert_close, assert_conv_close, conv_tol, ref_conv2d
from jitcore.llvm.target import host_target, level_target

SIZES = [(1, 1), (7, 9), (13, 17), (30, 31), (3, 40), (16, 16)]


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def grid() -> list:
    """Every kernel size x stride x dilation, each with a padding, a plane size, a channel
    multiplier, a batch and a bias setting taken in turn (every choice appears)."""
    configs, i = [], 0
    for k in (1, 3, 5, 7):
        for stride in (1, 2):
            for dilation in (1, 2):
                for padding in (("same", 0) if stride == 1 else (k // 2 * dilation, 0)):
                    reach = dilation * (k - 1) + 1
                    pad = 0 if padding == 0 else reach - 1
                    h, w = SIZES[i % len(SIZES)]
                    h, w = max(h, reach - pad), max(w, reach - pad)   # the kernel fits
                    c = (3, 8, 17)[i % 3]
                    mult = (1, 2)[i % 2]
                    configs.append(dict(x=(1 + 2 * (i % 2 == 1 and i % 4 == 1), c, h, w),
                                        w=(c * mult, 1, k, k), bias=i % 3 != 2, stride=stride,
                                        padding=padding, dilation=dilation, groups=c))
                    i += 1
    return configs


GRID = grid()
PARTS = 4


def _options(cfg):
    return {k: cfg[k] for k in ("stride", "padding", "dilation", "groups")}


def run_configs(configs, dtype, seed=0, constants=False, **jit_kw):
    """Compile the convs of several configs as one function; check each against the
    reference and that each ran on the depthwise kernel. Returns the results and inputs
    (x, w, b or None per config)."""
    rng = np.random.default_rng(seed)
    operands, args = [], []                  # per config (x, w, b); the arrays passed
    for cfg in configs:
        ops = (rand(rng, cfg["x"], dtype), rand(rng, cfg["w"], dtype),
               rand(rng, cfg["w"][0], dtype) if cfg["bias"] else None)
        operands.append(ops)
        args += [a for a in ops if a is not None]
    names = [f"a{i}" for i in range(len(args))]

    def many(*arrays):
        it, outs = iter(arrays), []
        for cfg in configs:
            x, w = next(it), next(it)
            outs.append(jc.conv2d(x, w, next(it) if cfg["bias"] else None, **_options(cfg)))
        return tuple(outs)
    fn = _named(many, names)
    inputs = args
    if constants:               # weights and biases bound as constants
        xs = {id(ops[0]) for ops in operands}
        consts = {n: a for n, a in zip(names, args) if id(a) not in xs}
        fn = jc.jit(fn, constants=consts, **jit_kw)
        inputs = [a for a in args if id(a) in xs]
    else:
        fn = jc.jit(fn, **jit_kw)
    got = fn(*inputs)
    kinds = [k.kind for k in fn.kernels(*inputs)]
    assert kinds == ["depthwise"] * len(configs), kinds
    for cfg, g, (x, w, b) in zip(configs, got, operands):
        ref, mag = ref_conv2d(x, w, b, **_options(cfg))
        assert_conv_close(g, ref, mag, dtype, cfg["w"][2] * cfg["w"][3], msg=str(cfg))
    return got, operands


def _named(fn, names):
    """fn(*arrays) as a function of parameters with these names (jit binds constants by
    name)."""
    scope = {"fn": fn}
    exec(f"def f({', '.join(names)}):\n    return fn({', '.join(names)})\n", scope)
    return scope["f"]


def test_grid_covers_the_options():
    kernels = {c["w"][2] for c in GRID}
    assert kernels == {1, 3, 5, 7}
    assert {c["stride"] for c in GRID} == {1, 2}
    assert {c["dilation"] for c in GRID} == {1, 2}
    assert {"same", 0} <= {c["padding"] for c in GRID} and any(
        isinstance(c["padding"], int) and c["padding"] > 0 for c in GRID)
    assert {c["w"][0] // c["groups"] for c in GRID} == {1, 2}
    assert {c["x"][0] for c in GRID} == {1, 3}
    assert {c["bias"] for c in GRID} == {True, False}
    assert any(c["x"][2:] == (1, 1) for c in GRID)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("part", range(PARTS))
def test_depthwise_grid(dtype, part):
    run_configs(GRID[part::PARTS], dtype, seed=part)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_constant_and_argument_weights_agree_bit_for_bit(dtype):
    """Constant weights (and biases) read as the same numbers in the same order as weights
    given as arguments: equal results."""
    configs = GRID[1::5]
    plain, _ = run_configs(configs, dtype, seed=4)
    bound, _ = run_configs(configs, dtype, seed=4, constants=True)
    for a, b in zip(plain, bound):
        np.testing.assert_array_equal(a, b)


def _host_runs(level: str) -> bool:
    try:
        level_target(level)
        return True
    except jc.TargetError:
        return False


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v2"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_instruction_set_levels(level, dtype):
    """AVX2 code (no mask registers: the row ends are masked loads and stores of AVX2) and
    SSE4.2 code (no masked loads at all: LLVM expands them)."""
    if not host_target().triple.startswith("x86_64") or not _host_runs(level):
        pytest.skip(f"{level} does not run here")
    configs = [c for c in GRID if c["x"][2] * c["x"][3] > 1][::3]
    run_configs(configs, dtype, seed=5, target=level)


@pytest.mark.parametrize("level", ["x86-64-v4", "x86-64-v3", "x86-64-v2", "x86-64"])
@pytest.mark.parametrize("stride", [2, 3])
def test_strided_row_ends_read_no_element_past_the_row(level, stride):
    """Rows whose padded span ends just past the input (7 wide, pad 1, 1-wide kernels): the
    buffer fill's edge read is one masked load per vector. A single 16-wide masked load of
    AVX2 code returned the next row's first element in lane 8 (x86-64-v3, stride 2: the last
    output column read the following row, or past the array in the last row)."""
    if not host_target().triple.startswith("x86_64") or not _host_runs(level):
        pytest.skip(f"{level} does not run here")
    configs = [dict(x=(3, 5, 11, width), w=(5 * mult, 1, 3, kw), stride=stride, padding=1,
                    dilation=1, groups=5, bias=False)
               for kw, width, mult in ((1, 7, 1), (1, 7, 3), (3, 9, 1), (1, 16, 1), (1, 33, 2))]
    run_configs(configs, F32, seed=11, target=level)


def test_empty_batch_and_unbatched_input():
    rng = np.random.default_rng(6)
    w = rand(rng, (4, 1, 3, 3), F32)
    out = jc.conv2d(np.zeros((0, 4, 5, 5), F32), w, padding=1, groups=4)
    assert out.shape == (0, 4, 5, 5)
    x = rand(rng, (4, 6, 5), F32)
    np.testing.assert_array_equal(jc.conv2d(x, w, padding=1, groups=4),
                                  jc.conv2d(x[None], w, padding=1, groups=4)[0])


# ---- fused epilogues ------------------------------------------------------------------------

def _silu(v):
    return v / (1 + np.exp(-v))


EPILOGUES = {      # name -> (jitcore post-op of (y, r), numpy of (y, r), Lipschitz bound)
    "relu_residual": (lambda y, r: jc.relu(y + r), lambda y, r: np.maximum(y + r, 0), 1),
    "relu6": (lambda y, r: jc.relu6(y), lambda y, r: np.clip(y, 0, 6), 1),
    "hardswish": (lambda y, r: jc.hardswish(y), lambda y, r: y * np.clip(y + 3, 0, 6) / 6,
                  1.5),
    "silu_residual": (lambda y, r: jc.silu(y) + r, lambda y, r: _silu(y) + r, 1.2),
    "sub_residual": (lambda y, r: y - r, lambda y, r: y - r, 1),
}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", list(EPILOGUES))
@pytest.mark.parametrize("stride", [1, 2])
def test_epilogue_fuses_into_one_depthwise_kernel(dtype, name, stride):
    jc_post, np_post, lip = EPILOGUES[name]
    rng = np.random.default_rng(7)
    x, w, b = rand(rng, (2, 6, 11, 13), dtype), rand(rng, (6, 1, 3, 3), dtype), \
        rand(rng, 6, dtype)
    ref, mag = ref_conv2d(x, w, b, stride=stride, padding=1, groups=6)
    r = rand(rng, ref.shape, dtype)

    def f(x, w, b, r):
        return jc_post(jc.conv2d(x, w, b, stride=stride, padding=1, groups=6), r)
    fn = jc.jit(f)
    assert [k.kind for k in fn.kernels(x, w, b, r)] == ["depthwise"]
    want = np_post(ref, r.astype(np.float64))
    bound = lip * conv_tol(dtype, 9) * (mag + np.abs(r)) + 8 * np.finfo(dtype).eps * (
        np.abs(want) + 1)
    assert_close(fn(x, w, b, r), want, dtype, rtol=0, atol=bound, msg=name)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_batch_norm_folds_into_a_constant_depthwise_conv(dtype):
    rng = np.random.default_rng(8)
    c = 12
    x, w = rand(rng, (2, c, 9, 10), dtype), rand(rng, (c, 1, 3, 3), dtype)
    m, g, be = rand(rng, c, dtype), rand(rng, c, dtype), rand(rng, c, dtype)
    v = (np.abs(rand(rng, c, dtype)) + 0.5).astype(dtype)

    def block(x, w, m, v, g, be):
        return jc.relu6(jc.batch_norm(jc.conv2d(x, w, padding=1, groups=c), m, v, g, be))
    f = jc.jit(block, constants=dict(w=w, m=m, v=v, g=g, be=be))
    assert [k.kind for k in f.kernels(x)] == ["depthwise"]
    conv, mag = ref_conv2d(x, w, padding=1, groups=c)
    scale = (g / np.sqrt(v.astype(np.float64) + 1e-5))[None, :, None, None]
    shift = be[None, :, None, None] - m[None, :, None, None] * scale
    want = np.clip(conv * scale + shift, 0, 6)
    bound = conv_tol(dtype, 11) * 2 * (mag * np.abs(scale) + np.abs(shift)) + \
        8 * np.finfo(dtype).eps * (np.abs(want) + 1)
    assert_close(f(x), want, dtype, rtol=0, atol=bound)


# ---- threads, blocking, layouts ------------------------------------------------------------

@pytest.mark.parametrize("shape, wshape, kw", [
    ((1, 3, 40, 37), (3, 1, 3, 3), dict(padding=1, groups=3)),           # few channels
    ((2, 5, 23, 21), (10, 1, 5, 5), dict(stride=2, padding=2, groups=5)),
    ((1, 8, 29, 30), (8, 1, 7, 7), dict(padding=3, groups=8)),
])
def test_one_and_two_threads_bit_for_bit(shape, wshape, kw):
    rng = np.random.default_rng(9)
    x, w = rand(rng, shape, F32), rand(rng, wshape, F32)
    ref, mag = ref_conv2d(x, w, **kw)
    r = rand(rng, ref.shape, F32)

    def f(x, w, r):
        return jc.silu(jc.conv2d(x, w, **kw) + r)
    one = jc.jit(f, num_threads=1)(x, w, r)
    two = jc.jit(f, num_threads=2)(x, w, r)
    np.testing.assert_array_equal(one, two)
    want = _silu(ref + r)
    assert_close(one, want, F32, rtol=0, atol=1.2 * conv_tol(F32, w[0].size) * (mag + np.abs(r))
                 + 8 * np.finfo(F32).eps * (np.abs(want) + 1))


@pytest.mark.parametrize("dtype", [F32, F64])
def test_small_buffer_splits_rows_and_columns(dtype, monkeypatch):
    """With a 2 KiB buffer the rows of an item are few and long rows are split into column
    blocks (each with its halo): the same results, 1 and 2 threads alike."""
    from jitcore.llvm import depthwise
    monkeypatch.setattr(depthwise, "BUFFER_BYTES", 2048)
    rng = np.random.default_rng(10)
    x, w, b = rand(rng, (2, 3, 27, 133), dtype), rand(rng, (6, 1, 5, 3), dtype), \
        rand(rng, 6, dtype)
    kw = dict(stride=(1, 2), padding=(2, 1), dilation=(1, 2), groups=3)
    ref, mag = ref_conv2d(x, w, b, **kw)
    results = [jc.jit(lambda x, w, b: jc.conv2d(x, w, b, **kw), num_threads=t)(x, w, b)
               for t in (1, 2)]
    for got in results:
        assert_conv_close(got, ref, mag, dtype, 15)
    np.testing.assert_array_equal(results[0], results[1])


def test_channels_last_input_read_in_place():
    """A transposed view of an NHWC array: the input rows are gathered, not copied first."""
    rng = np.random.default_rng(11)
    nhwc = rand(rng, (2, 9, 11, 6), F32)
    x = nhwc.transpose(0, 3, 1, 2)
    w = rand(rng, (6, 1, 3, 3), F32)
    f = jc.jit(lambda x, w: jc.conv2d(x, w, stride=2, padding=1, groups=6))
    assert [k.kind for k in f.kernels(x, w)] == ["depthwise"]
    ref, mag = ref_conv2d(x, w, stride=2, padding=1, groups=6)
    assert_conv_close(f(x, w), ref, mag, F32, 9)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_depthwise_conv1d(dtype):
    """conv1d with groups == channels (wav2vec2-style) is a depthwise conv of height 1; a
    long signal is split into column blocks."""
    rng = np.random.default_rng(12)
    x, w, b = rand(rng, (2, 4, 9001), dtype), rand(rng, (4, 1, 5), dtype), rand(rng, 4, dtype)
    f = jc.jit(lambda x, w, b: jc.conv1d(x, w, b, stride=2, padding=2, groups=4))
    assert [k.kind for k in f.kernels(x, w, b)] == ["depthwise"]
    ref, mag = ref_conv2d(x[:, :, None], w[:, :, None], b, stride=(1, 2), padding=(0, 2),
                          groups=4)
    assert_conv_close(f(x, w, b), ref[:, :, 0], mag[:, :, 0], dtype, 5)


@pytest.mark.parametrize("wshape, kw", [
    ((32, 1, 3, 3), dict(padding=1, groups=4)),             # 8 outputs per input channel
    ((4, 1, 3, 3), dict(stride=(1, 5), groups=4)),          # a column stride past 4
    ((4, 2, 3, 3), dict(padding=1, groups=2)),              # two input channels per group
])
def test_other_grouped_convs_stay_on_the_conv_kernel(wshape, kw):
    rng = np.random.default_rng(13)
    x = rand(rng, (1, 4, 12, 16), F32)
    w = rand(rng, wshape, F32)
    f = jc.jit(lambda x, w: jc.conv2d(x, w, **kw))
    assert [k.kind for k in f.kernels(x, w)] == ["conv"]
    ref, mag = ref_conv2d(x, w, **kw)
    assert_conv_close(f(x, w), ref, mag, F32, w[0].size)


def test_explain_names_the_depthwise_path():
    x = np.zeros((1, 8, 14, 14), F32)
    w = np.ones((8, 1, 7, 7), F32)
    text = jc.jit(lambda x, w: jc.conv2d(x, w, padding=3, groups=8)).explain(x, w)
    assert ": depthwise layout NCHW" in text and "per channel plane" in text, text


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_large_outputs_stream_bit_for_bit(dtype, threads):
    """An output past the streaming threshold (lowered here) is written with non-temporal
    stores where a whole vector is aligned, normal ones elsewhere (row ends, an out= view
    one element off): the same bits as without streaming."""
    from jitcore import config
    rng = np.random.default_rng(14)
    x, w, b = rand(rng, (2, 5, 19, 64), dtype), rand(rng, (10, 1, 3, 3), dtype), \
        rand(rng, 10, dtype)

    def f(x, w, b):
        return jc.relu(jc.conv2d(x, w, b, padding=1, groups=5))
    plain = jc.jit(f, num_threads=threads)(x, w, b)
    fn = jc.jit(f, num_threads=threads)
    with config.override(stream_stores=256):
        assert "!nontemporal" in fn.llvm_ir(x, w, b)
        np.testing.assert_array_equal(fn(x, w, b), plain)
        shifted = np.empty(plain.size + 1, dtype)[1:].reshape(plain.shape)
        fn(x, w, b, out=shifted)
        np.testing.assert_array_equal(shifted, plain)
    ref, mag = ref_conv2d(x, w, b, padding=1, groups=5)
    assert_conv_close(plain, np.maximum(ref, 0), mag, dtype, 9)


def test_lanes_along_rows_follow_the_full_rate_width():
    """The vector width along output rows: 256-bit full rate (Zen 4, AVX2) packs a 56-wide
    row into 7 vectors of 8, 512-bit full rate (Intel server cores) into 4 of 16; a 7-wide
    row takes 8 lanes on both; never fewer than 256 bits' lanes where the target has them."""
    from jitcore.llvm.depthwise import _lanes
    zen = {ow: _lanes(ow, 16, 8, 8) for ow in (3, 7, 14, 28, 40, 56, 112)}
    intel = {ow: _lanes(ow, 16, 16, 8) for ow in (3, 7, 14, 28, 40, 56, 112)}
    assert zen == {3: 8, 7: 8, 14: 16, 28: 16, 40: 8, 56: 8, 112: 16}
    assert intel == {3: 8, 7: 8, 14: 16, 28: 16, 40: 16, 56: 16, 112: 16}
    assert _lanes(28, 8, 4, 4) == 4 and _lanes(28, 8, 8, 4) == 8     # float64
    assert _lanes(56, 4, 8, 8) == 4                                  # 128-bit vectors


@pytest.mark.parametrize("full_rate", [256, 512])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_full_rate_width_plans_agree_with_the_reference(full_rate, dtype, monkeypatch):
    """Both widths' plans (whatever the host) give the reference's results with a fused
    batch norm and silu, at stride 1 and 2, on rows they tile differently (40 and 56 wide)."""
    from collections import OrderedDict
    from jitcore import compiler
    from jitcore.cache.lru import LRU
    from jitcore.llvm import depthwise, engine, graph_module
    monkeypatch.setattr(depthwise, "full_rate_vector_bits", lambda: full_rate)
    # compiled anew: no graph, kernel IR or object of the other width's compile
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", OrderedDict())
    monkeypatch.setattr(engine, "OBJECTS", type(engine.OBJECTS)())
    rng = np.random.default_rng(11)
    for shape, stride in (((1, 5, 9, 40), 1), ((1, 4, 7, 112), 2), ((2, 3, 6, 56), 1)):
        c = shape[1]
        x, w = rand(rng, shape, dtype), rand(rng, (c, 1, 3, 3), dtype)
        m, v, g, b = (rand(rng, c, dtype) for _ in range(4))
        v = np.abs(v) + 0.5
        f = jc.jit(lambda x, w, m, v, g, b: jc.silu(jc.batch_norm(
            jc.conv2d(x, w, stride=stride, padding=1, groups=c), m, v, g, b)),
            constants=dict(w=w, m=m, v=v, g=g, b=b))
        got = f(x)
        (kernel,) = f.kernels(x)
        most = kernel.vector_width // (8 * np.dtype(dtype).itemsize)
        lanes = min(most, 8 if full_rate == 256 or dtype == F64 else 16)
        assert kernel.kind == "depthwise" and f"vectors of {lanes} " in kernel.loop_nest
        conv, mag = ref_conv2d(x, w, None, stride=stride, padding=1, groups=c)
        scale = np.abs(g.astype(np.float64) / np.sqrt(v.astype(np.float64) + 1e-5))
        y = (conv - m[:, None, None]) * scale[:, None, None] * np.sign(g)[:, None, None] \
            + b[:, None, None]
        want = y / (1 + np.exp(-y))
        tol = 1.2 * conv_tol(dtype, 9) * (mag + 1) * scale[:, None, None] + \
            16 * np.finfo(dtype).eps * (np.abs(want) + np.abs(y) + 1)
        assert np.all(np.abs(got - want) <= tol), float(np.abs(got - want).max())


@pytest.mark.parametrize("cpu, bits", [("icelake-server", 512), ("sapphirerapids", 512),
                                       ("znver4", 256), ("icelake-client", 256),
                                       ("x86-64-v4", 256)])
def test_full_rate_width_by_cpu_model(cpu, bits, monkeypatch):
    """512-bit vectors run at full rate on Intel's server cores only; target_info says it."""
    import dataclasses
    from jitcore.llvm import target
    host = target.host_target()
    monkeypatch.setattr(target, "host_target", lambda: dataclasses.replace(host, cpu=cpu))
    assert target.full_rate_vector_bits.__wrapped__() == bits
    assert jc.target_info()["full_rate_vector_bits"] == target.full_rate_vector_bits()

"""Convolutions under matmul_precision="bf16" (jitcore/llvm/conv_pairs.py,
conv_panel_pairs.py, bf16.py's policy): float32 convs of kind "conv" multiply bf16-rounded
operands and accumulate in float32, at every x86-64 level this host runs. Where the level
has AVX512_BF16 and the weights are constant: the vdpbf16ps pairs channel plan (at least 16
input channels per group, at least 64 products per output) or the im2col variant in pairs
along K (a stem's few channels); a conv with constant weights that neither takes computes
in float32 there (exact, and faster than rounding its inputs); elsewhere the float32 kernels
on rounded operands. Depthwise convs stay float32; Winograd is never taken under bf16 (its
products are of transformed operands).

Tolerance rule (as tests/test_gemm_bf16.py's): against the float64 conv OF THE bf16-ROUNDED
operands, the only error left is float32 accumulation: test_conv's bound, gamma(K + 2) of
the sum of |terms| (+ 4 ulp), K = C_in/groups x taps, plus the epilogue's rounding. And
against the unrounded operands the normwise error is at least 2^-12 of the result's norm
(random data, K >= 16): the operands were rounded (float32 products would give ~2^-23).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from jitcore.llvm import bf16
from helpers import F32, assert_conv_close, conv_tol, ref_conv2d, runnable_levels

PAIRS = "bf16 operands in pairs (vdpbf16ps)"
FALLBACK = "bf16-rounded operands, float32 FMA"


LEVEL_NAMES = runnable_levels()

# (x shape, w shape, options): odd C_in (the pair tail), strides (a 1x1/s2 packs every other
# row), padding, dilation, groups, partial channel vectors and pixel tiles, a 17-channel 1x1
# to 21 channels (too few products for the channel plan, too few outputs for the panel:
# float32 where the level has AVX512_BF16, the float32 kernels on rounded operands elsewhere),
# a stem's 3 channels (the im2col variant: in pairs along K, K = 75 odd, where the level has
# AVX512_BF16), the same panel for a 17-channel 1x1 to 40 channels (K = 17) and a 3x3 over
# 8 channels (K = 72, two images, odd C_out), a 1x1 to 16 channels (float32 at native),
# the panel over 33 channels (more than the direct variant's pass over the channels holds)
# and a 1x1/s2 over 64 (K <= MAX_PANEL_PAIRS_K: the panel, not the channel plan)
CONVS = [
    ((2, 33, 9, 10), (70, 33, 3, 3), dict(padding=1)),
    ((1, 64, 11, 11), (20, 64, 3, 3), dict(stride=2, padding=1)),
    ((1, 131, 13, 12), (40, 131, 1, 1), dict(stride=2, padding=1)),
    ((1, 32, 8, 9), (24, 16, 3, 3), dict(padding=(1, 0), dilation=2, groups=2)),
    ((1, 17, 6, 7), (21, 17, 1, 1), {}),
    ((1, 3, 12, 12), (16, 3, 5, 5), dict(stride=2, padding=2)),
    ((1, 17, 9, 11), (40, 17, 1, 1), {}),
    ((2, 8, 10, 9), (30, 8, 3, 3), dict(padding=1)),
    ((1, 32, 7, 7), (16, 32, 1, 1), {}),
    ((1, 33, 16, 15), (24, 33, 1, 1), {}),
    ((1, 64, 14, 13), (48, 64, 1, 1), dict(stride=2)),
]
FLOAT32_AT_NATIVE = (4, 8)     # CONVS that no pairs plan takes


def rounded(x) -> np.ndarray:
    return bf16.rounded(np.asarray(x, np.float32))


def operands(seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for xs, ws, opts in CONVS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(np.float32)
        b = rng.standard_normal(ws[0]).astype(np.float32)
        out.append((x, w, b, opts))
    return out


def check(got, x, w, b, opts, post=None, msg=""):
    """The module docstring's two checks for got = post(conv(x, w) + b)."""
    post = post or (lambda v: v)
    ref, mag = ref_conv2d(rounded(x), rounded(w), b, **opts)
    k = int(np.prod(w.shape[1:]))
    assert_conv_close(got, post(ref), mag, F32, k + 1, msg=msg)
    exact, _ = ref_conv2d(x, w, b, **opts)
    err, size = np.linalg.norm(got - post(exact)), np.linalg.norm(post(exact))
    if k >= 16 and size > 0:
        assert err >= 2.0 ** -12 * size, f"{msg}: error {err / size:.1e}: not in bf16?"


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_convs_and_paths(level):
    """Every conv of CONVS (one compiled function, bias and relu fused), and the path
    explain() names: pairs at native for the convs that take them, the fallback elsewhere."""
    ops = operands(1)

    def convs(*xs):
        return tuple(jc.relu(jc.conv2d(x, w, b, **opts))
                     for x, (_, w, b, opts) in zip(xs, ops))
    fn = jc.jit(convs, matmul_precision="bf16", target=level)
    xs = [x for x, *_ in ops]
    native = bf16.native(jc.targetinfo.select_target(target=level))
    relu = lambda v: np.maximum(v, 0)                       # noqa: E731
    for i, (got, (x, w, b, opts)) in enumerate(zip(fn(*xs), ops)):
        if native and i in FLOAT32_AT_NATIVE:   # test_conv's bound on the exact operands
            ref, mag = ref_conv2d(x, w, b, **opts)
            assert_conv_close(got, relu(ref), mag, F32, int(np.prod(w.shape[1:])) + 1,
                              msg=f"{level} conv {i}")
        else:
            check(got, x, w, b, opts, post=relu, msg=f"{level} conv {i}")
    kernels = [k.loop_nest for k in fn.kernels(*xs) if k.layout]
    assert len(kernels) == len(CONVS)
    pairs = [PAIRS in text for text in kernels]
    assert pairs == [native and i not in FLOAT32_AT_NATIVE for i in range(len(CONVS))], \
        (level, kernels)
    fallback = [FALLBACK in text for text in kernels]
    assert fallback == [not native] * len(CONVS), (level, kernels)


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_epilogues_residual_silu(level):
    """silu(conv + b + r): the float32 epilogue after the bf16 products."""
    x, w, b, opts = operands(2)[0]
    ref, _ = ref_conv2d(x, w, b, **opts)
    r = np.random.default_rng(3).standard_normal(ref.shape).astype(np.float32)
    fn = jc.jit(lambda x, r: jc.silu(jc.conv2d(x, w, b, **opts) + r),
                matmul_precision="bf16", target=level)
    got = fn(x, r)
    ref, mag = ref_conv2d(rounded(x), rounded(w), b, **opts)
    v = ref + r
    want = v / (1 + np.exp(-v))
    # silu's own float32 error: a few ulp of |v| beside the conv's bound
    assert_conv_close(got, want, mag + np.abs(r) + 8 * np.abs(v), F32,
                      int(np.prod(w.shape[1:])) + 2, msg=level)


def test_bf16_input_and_output():
    """A bfloat16 input (widened exactly) and a bfloat16 output (the float32 result rounded
    once, to nearest even: within half a bf16 ulp of it, plus the conv's bound)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x, w, b, opts = operands(12)[0]
    xb = x.astype(ml_dtypes.bfloat16)
    fn = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, b, **opts)).astype(jc.bfloat16),
                matmul_precision="bf16")
    got = fn(xb)
    assert got.dtype == ml_dtypes.bfloat16
    ref, mag = ref_conv2d(rounded(xb.astype(np.float32)), rounded(w), b, **opts)
    ref = np.maximum(ref, 0)
    k = int(np.prod(w.shape[1:]))
    bound = 2.0 ** -8 * np.abs(ref) + 2 * conv_tol(F32, k) * mag + np.finfo(np.float32).tiny
    assert (np.abs(got.astype(np.float64) - ref) <= bound).all()


def test_epilogue_operand_along_rows():
    """An epilogue operand broadcast along the output rows (shape (OH, 1)) is not linear in
    the flat pixel index: the epilogue runs along the channels instead, same results."""
    x, w, b, opts = operands(10)[1]
    ref, _ = ref_conv2d(x, w, b, **opts)
    s = np.random.default_rng(11).standard_normal((ref.shape[2], 1)).astype(np.float32)
    fn = jc.jit(lambda x: jc.conv2d(x, w, b, **opts) * s, matmul_precision="bf16")
    ref, mag = ref_conv2d(rounded(x), rounded(w), b, **opts)
    # the conv's bound scaled by |s|, and the product's rounding (+ 1 ulp: the K + 2 terms)
    assert_conv_close(fn(x), ref * s, mag * np.abs(s), F32, int(np.prod(w.shape[1:])) + 2)


def test_nan_inf_reach_their_windows():
    """A NaN or Inf input reaches exactly the outputs whose windows hold it (pairs plan at
    native: its pair partner's outputs are unaffected beyond the same windows)."""
    x, w, b, opts = operands(4)[0]
    x[0, 5, 2, 3], x[1, 32, 7, 8] = np.nan, np.inf        # channel 32: the odd C_in's tail
    got = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16")(x)
    ref, mag = ref_conv2d(rounded(x), rounded(w), b, **opts)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(ref))
    assert np.isnan(got[0, :, 1:4, 2:5]).all() and np.isinf(got[1, :, 6:9, 7:10]).all()
    finite = np.isfinite(ref)
    assert_conv_close(got[finite], ref[finite], np.nan_to_num(mag)[finite], F32,
                      int(np.prod(w.shape[1:])) + 1)


def test_threads_batches_and_empty():
    """Two threads (more work items, blocks chunked differently) give the one-thread bits;
    a batch of 0 gives an empty result."""
    x, w, b, opts = operands(5)[1]
    x = np.concatenate([x] * 3)
    one = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16",
                 num_threads=1)(x)
    two = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16",
                 num_threads=2)(x)
    np.testing.assert_array_equal(one, two)
    check(one, x, w, b, opts)
    empty = jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16")(x[:0])
    assert empty.shape == (0,) + one.shape[1:]


@pytest.mark.parametrize("level", LEVEL_NAMES)
def test_panel_nan_inf_and_threads(level):
    """The pairs panel past a stem's channels (CONVS 6 and 7 at native, rounded operands
    elsewhere): a NaN or Inf input reaches exactly the outputs whose windows hold it, and
    two threads give the one-thread bits."""
    for x, w, b, opts in operands(14)[6:8]:
        x[0, x.shape[1] - 1, 1, 2], x[-1, 0, 5, 4] = np.nan, -np.inf     # K's odd tail
        one, two = (jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16",
                           num_threads=t, target=level)(x) for t in (1, 2))
        np.testing.assert_array_equal(one, two)
        ref, mag = ref_conv2d(rounded(x), rounded(w), b, **opts)
        np.testing.assert_array_equal(np.isnan(one), np.isnan(ref))
        np.testing.assert_array_equal(np.isinf(one), np.isinf(ref))
        assert np.isnan(one[0, :, 1, 2]).all() and np.isinf(one[-1, :, 5, 4]).all()
        finite = np.isfinite(ref)
        assert_conv_close(one[finite], ref[finite], np.nan_to_num(mag)[finite], F32,
                          int(np.prod(w.shape[1:])) + 1, msg=level)


def test_tap_blocks_and_pixel_groups_agree_bit_for_bit(monkeypatch):
    """A tiny L2 (and partial-sum budget) splits the taps into blocks and each image into
    pixel groups, each packing its own input rows (a 1x1/s2 conv: every other row): the
    sums run in the same order, so the results are the unsplit plan's bits."""
    from collections import OrderedDict

    from jitcore import compiler
    from jitcore.cache.lru import LRU
    from jitcore.llvm import conv_channels, conv_pairs, engine, graph_module
    if not bf16.native(jc.targetinfo.select_target()):
        pytest.skip("no AVX512_BF16 here: no pairs plan")
    ops = operands(13)
    cases = [(x, w, b, opts) for x, w, b, opts in (ops[0], ops[2])]

    def run():
        return [jc.jit(lambda x: jc.conv2d(x, w, b, **opts), matmul_precision="bf16")(x)
                for x, w, b, opts in cases]
    whole = run()
    monkeypatch.setattr(conv_channels, "cache_sizes", lambda: {1: 32 * 1024, 2: 64 * 1024})
    monkeypatch.setattr(conv_channels, "MAX_PARTIAL_BYTES", 4096)
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")           # compiled anew
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", OrderedDict())
    monkeypatch.setattr(engine, "OBJECTS", type(engine.OBJECTS)())
    plans, real = [], conv_pairs.plan
    monkeypatch.setattr(conv_pairs, "plan", lambda *a: plans.append(real(*a)) or plans[-1])
    split = run()
    assert plans[0].k_blocks > 1 and plans[0].pixel_groups > 1, plans[0]
    assert plans[-1].pixel_groups > 1 and plans[-1].region_step == 2, plans[-1]
    for got, want, (x, w, b, opts) in zip(split, whole, cases):
        np.testing.assert_array_equal(got, want)
        check(got, x, w, b, opts)


def test_argument_weights_depthwise_and_default():
    """Weights passed as an argument (not prepacked) are rounded as read; a depthwise conv
    stays float32; without the setting convs stay float32 (Winograd where it applies)."""
    x, w, b, opts = operands(6)[0]
    fn = jc.jit(lambda x, w: jc.conv2d(x, w, b, **opts), matmul_precision="bf16")
    check(fn(x, w), x, w, b, opts, msg="argument weights")
    assert FALLBACK in fn.explain(x, w)
    dw = np.random.default_rng(7).standard_normal((33, 1, 3, 3)).astype(np.float32)
    depthwise = jc.jit(lambda x: jc.conv2d(x, dw, padding=1, groups=33),
                       matmul_precision="bf16")
    plain = jc.jit(lambda x: jc.conv2d(x, dw, padding=1, groups=33))
    np.testing.assert_array_equal(depthwise(x), plain(x))
    assert "bf16" not in depthwise.explain(x)
    x3 = np.random.default_rng(8).standard_normal((1, 64, 16, 16)).astype(np.float32)
    w3 = np.random.default_rng(9).standard_normal((64, 64, 3, 3)).astype(np.float32)
    fp32 = jc.jit(lambda x: jc.conv2d(x, w3, padding=1))
    fp32(x3)
    assert "Winograd" in str(fp32.kernels(x3)) and "bf16" not in fp32.explain(x3)


def test_torch_module_precision_bf16():
    """jitcore.torch.compile(precision="bf16") runs a conv net's convs (batch norm folded)
    in bf16 too: the normwise error against float64 is bf16's (between 2^-12 and 2^-6 of the
    result's norm), and explain() names the pairs plan where the CPU has AVX512_BF16."""
    torch = pytest.importorskip("torch")
    import jitcore.torch as jt
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.BatchNorm2d(64),
                              torch.nn.ReLU(), torch.nn.Conv2d(64, 48, 1, stride=2)).eval()
    x = torch.randn(2, 32, 10, 10)
    compiled = jt.compile(net, x, precision="bf16")
    with torch.inference_mode():
        got = compiled(x).double().numpy()
        exact = net.double()(x.double()).numpy()
    err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    assert 2.0 ** -12 <= err <= 2.0 ** -6, err
    if bf16.native(jc.targetinfo.select_target()):
        assert compiled.explain().count(PAIRS) == 2

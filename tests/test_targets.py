"""Instruction-set levels (JITCORE_TARGET, jit(target=); jitcore/llvm/target.py's LEVELS).

Code built for a level holds only that level's instructions (read from its assembly: no zmm
or k-mask registers below x86-64-v4, no ymm at 128 bits) and computes numpy's values, for
each kind of kernel: elementwise with tails, reductions, GEMM, conv, vector math, casts,
gathers. Levels the host cannot run are refused with a message that names what is missing.
The value suites run again at other levels through level_runs.py (conftest's plugin).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jitcore as jc
from jitcore import config
from jitcore.api import forget_plans
from jitcore.llvm.target import LEVELS, host_target, level_features, level_target

from helpers import F32, TOL, assert_close, f64

X86 = host_target().triple.startswith("x86_64")


def _host_runs(level: str) -> bool:
    try:
        level_target(level)
        return True
    except jc.TargetError:
        return False


RUNNABLE = [name for name in LEVELS if _host_runs(name)]
REFUSED = [name for name in LEVELS if name not in RUNNABLE]


def _lowest_runnable() -> str:
    if not RUNNABLE:
        pytest.skip("this host runs none of the levels (another architecture)")
    return RUNNABLE[-1]


# -- the table and the refusals -----------------------------------------------------------------
@pytest.mark.parametrize("level", RUNNABLE)
def test_level_target_has_its_features_and_nothing_above(level):
    t, row = level_target(level), LEVELS[level]
    assert (t.cpu, t.level, t.max_vector_bits, t.vector_bits) == \
        (row.cpu, level, row.vector_bits, row.vector_bits)
    enabled = {f[1:] for f in t.features.split(",") if f.startswith("+")}
    assert enabled <= set(row.features)
    host = {f[1:] for f in host_target().features.split(",") if f.startswith("+")}
    # every host feature the level lacks is turned off explicitly (LLVM's CPU name alone
    # would leave features like aes or avx512 to the host's defaults in some versions)
    for feature in host - set(row.features):
        assert f"-{feature}" in t.features.split(",")
    assert t.masked_tails == (row.vector_bits == 512)


def test_feature_string_keeps_the_level_and_turns_the_rest_off():
    host = {"sse2": True, "avx2": True, "avx512f": True, "aes": False, "fma": True}
    text = level_features(LEVELS["x86-64-v2"], host).split(",")
    assert "+sse2" in text and "-avx2" in text and "-avx512f" in text and "-fma" in text
    assert not any(f.endswith("aes") for f in text)        # absent on the host: not named


@pytest.mark.skipif(not REFUSED, reason="the host runs every level")
@pytest.mark.parametrize("level", REFUSED)
def test_a_level_above_the_host_is_refused_with_what_is_missing(level):
    with pytest.raises(jc.TargetError) as info:
        jc.jit(lambda a: a + 1, target=level)
    message = str(info.value)
    assert level in message and host_target().cpu in message
    missing = [f for f in LEVELS[level].features
               if f"+{f}" not in host_target().features.split(",")
               and f"-{f}" in host_target().features.split(",")]
    assert missing and all(f in message for f in missing)
    assert isinstance(info.value, ValueError)


def test_an_unknown_level_is_refused():
    with pytest.raises(jc.TargetError, match="x86-64-v3"):
        jc.jit(lambda a: a + 1, target="x86-64-v9")
    with pytest.raises(jc.TargetError, match="haswell"):
        jc.target_info(target="haswell")


def test_the_environment_variable_sets_the_level_in_a_fresh_process():
    level = _lowest_runnable()
    code = ("import numpy as np, jitcore as jc\n"
            "f = jc.jit(lambda a: a * 2.0)\n"
            "print(jc.target_info()['level'], jc.target_info()['vector_bits'],\n"
            "      float(f(np.arange(5, dtype=np.float32))[4]))\n")
    run = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, JITCORE_TARGET=level),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [level, str(LEVELS[level].vector_bits), "8.0"]
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, JITCORE_TARGET="x86-64-v9"))
    assert bad.returncode != 0 and "TargetError" in bad.stderr and "x86-64-v9" in bad.stderr


def test_target_info_names_the_level():
    info = jc.target_info()
    assert info["level"] == config.get().target and info["host_cpu"] == host_target().cpu
    for level in RUNNABLE:
        info = jc.target_info(target=level)
        assert info["level"] == level and info["cpu"] == LEVELS[level].cpu
        assert info["vector_bits"] == LEVELS[level].vector_bits
        assert info["lanes"]["float32"] == LEVELS[level].vector_bits // 32


def test_the_vector_width_is_capped_at_the_level():
    narrow = [n for n in RUNNABLE if LEVELS[n].vector_bits == 128]
    if not narrow:
        pytest.skip("no 128-bit level runs here")
    with pytest.warns(RuntimeWarning, match="exceeds"):
        info = jc.target_info(vector_width=256, target=narrow[0])
    assert info["vector_bits"] == 128


def test_levels_are_apart_in_the_cache_keys():
    keys = {level_target(n).key() for n in RUNNABLE} | {host_target().key()}
    assert len(keys) == len(RUNNABLE) + 1


def test_forget_plans_makes_a_function_compile_for_the_new_level():
    """A jitted function called at one level keeps its plan; after config.override(target=)
    and forget_plans() its next call runs code of the new level (the tests' level runs)."""
    narrow = [n for n in RUNNABLE if LEVELS[n].vector_bits == 128]
    if not narrow or host_target().max_vector_bits == 128:
        pytest.skip("needs a wider host and a 128-bit level")
    f = jc.jit(lambda a: a * 3.0 + 1.0625)      # a graph no other test compiles
    x = np.arange(100, dtype=np.float32)
    f(x)
    before = jc.cache_info()["compiles"]
    try:
        with config.override(target=narrow[0]):
            f(x)                                  # the plan of the first call
            assert jc.cache_info()["compiles"] == before
            forget_plans()
            np.testing.assert_array_equal(f(x), x * 3.0 + 1.0625)
            assert jc.cache_info()["compiles"] == before + 1
            assert f.kernels(x)[0].lanes == 4
    finally:
        forget_plans()


# -- code of each level: its instructions only, numpy's values ---------------------------------
def _registers(asm: str) -> set:
    """The register files the code uses: xmm, ymm, zmm, and k (AVX-512 mask registers)."""
    return set(re.findall(r"%([xyz]mm)\d+", asm)) | \
        ({"k"} if re.search(r"%k[0-7]\b", asm) else set())


def _rng(seed=0):
    return np.random.default_rng(seed)


def _conv_ref(x, w, b):
    """conv2d, stride 1, no padding, in float64."""
    win = np.lib.stride_tricks.sliding_window_view(f64(x), w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", win, f64(w)) + f64(b)[None, :, None, None]


def _softmax_ref(x):
    e = np.exp(f64(x) - f64(x).max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# name -> (function, inputs, float64 reference, result tolerance scale): one per kernel kind
R = _rng()
KERNELS = {
    "elementwise tail f32": (
        lambda a, b: jc.relu(a * b + 1.5) - a / 3,
        [R.standard_normal(1037, dtype=np.float32), R.standard_normal(1037, dtype=np.float32)],
        lambda a, b: np.maximum(f64(a) * f64(b) + 1.5, 0) - f64(a) / 3, 4),
    "elementwise tail f64 2-D": (
        lambda a, b: a * b - np.sqrt(np.abs(a)),
        [R.standard_normal((13, 71)), R.standard_normal(71)],
        lambda a, b: a * b - np.sqrt(np.abs(a)), 4),
    "exp tanh erf f32": (
        lambda a: np.exp(a) + np.tanh(a) * jc.erf(a),
        [R.uniform(-6, 6, 517).astype(np.float32)],
        lambda a: np.exp(f64(a)) + np.tanh(f64(a)) * _erf(f64(a)), 8),
    "sin cos f32 large arguments": (
        lambda a: np.sin(a) - np.cos(a),
        [R.uniform(-3e4, 3e4, 263).astype(np.float32)],
        lambda a: np.sin(f64(a)) - np.cos(f64(a)), 8),
    "log sigmoid f64": (
        lambda a: np.log(a) * jc.sigmoid(a),
        [R.uniform(0.01, 50, 301)],
        lambda a: np.log(a) / (1 + np.exp(-a)), 8),
    "row reduction": (
        lambda a: a.sum(axis=1) + a.max(axis=1),
        [R.standard_normal((37, 203), dtype=np.float32)],
        lambda a: f64(a).sum(axis=1) + f64(a).max(axis=1), 64),
    "column reduction f64": (
        lambda a: a.mean(axis=0),
        [R.standard_normal((129, 19))],
        lambda a: a.mean(axis=0), 64),
    "softmax": (
        lambda a: jc.softmax(a, axis=-1),
        [R.standard_normal((9, 77), dtype=np.float32)],
        _softmax_ref, 16),
    "gemm tails": (
        lambda a, b: a @ b,
        [R.standard_normal((67, 131), dtype=np.float32),
         R.standard_normal((131, 75), dtype=np.float32)],
        lambda a, b: f64(a) @ f64(b), 256),
    "gemv": (
        lambda a, x: a @ x,
        [R.standard_normal((83, 301), dtype=np.float32), R.standard_normal(301, dtype=np.float32)],
        lambda a, x: f64(a) @ f64(x), 256),
    "conv partial channel vector": (
        lambda x, w, b: jc.conv2d(x, w, b),
        [R.standard_normal((2, 5, 11, 13), dtype=np.float32),
         R.standard_normal((11, 5, 3, 3), dtype=np.float32),
         R.standard_normal(11, dtype=np.float32)],
        _conv_ref, 64),
}


def _erf(x):
    import math
    return np.vectorize(math.erf)(x)


def _exact_kernels():
    """Kernels whose result is exact: casts, integer and bitwise ops, gathers, comparisons."""
    r = _rng(1)
    ints = r.integers(-300, 300, 1031).astype(np.int32)
    floats = r.uniform(-200, 200, 1031).astype(np.float32)
    table = r.standard_normal((50, 7), dtype=np.float32)
    ids = r.integers(0, 50, 203)
    return {
        "casts": (lambda a, b: (a.astype(np.uint8), b.astype(np.int32), b.astype(np.float64),
                                a.astype(np.float32), (a > 0).astype(np.int64)),
                  [ints, floats],
                  lambda a, b: (a.astype(np.uint8), b.astype(np.int32), b.astype(np.float64),
                                a.astype(np.float32), (a > 0).astype(np.int64))),
        "bitwise and shifts u8/i64": (
            lambda a, b: ((a & b) ^ (a >> 2), (b.astype(np.int64) << 3) | 5),
            [r.integers(0, 256, 1027).astype(np.uint8), r.integers(0, 256, 1027).astype(np.uint8)],
            lambda a, b: ((a & b) ^ (a >> 2), (b.astype(np.int64) << 3) | 5)),
        "integer arithmetic": (
            lambda a: (a * 7 - a // 3, np.maximum(a, 11), a % 5),
            [ints], lambda a: (a * 7 - a // 3, np.maximum(a, 11), a % 5)),
        "bool where": (
            lambda a, b: np.where(a > b, a, -b),
            [floats, floats[::-1].copy()], lambda a, b: np.where(a > b, a, -b)),
        "gather rows": (
            lambda t, i: jc.take(t, i, axis=0) * 2.0,
            [table, ids], lambda t, i: np.take(t, i, axis=0) * 2.0),
        "argmax": (lambda a: a.reshape(29, 35).argmax(axis=1), [floats[:1015]],
                   lambda a: a.reshape(29, 35).argmax(axis=1)),
    }


EXACT = _exact_kernels()
LEVEL_IDS = RUNNABLE if X86 else []


def _check_registers(level: str, asm: str) -> None:
    regs = _registers(asm)
    bits = LEVELS[level].vector_bits
    if bits < 512:
        assert not regs & {"zmm", "k"}, f"{level}: AVX-512 registers {regs & {'zmm', 'k'}}"
    if bits < 256:
        assert "ymm" not in regs, f"{level}: ymm registers in 128-bit code"
    if "fma" not in LEVELS[level].features:
        assert not re.search(r"\bvfn?m(add|sub)", asm), f"{level}: FMA instructions"
    if "avx" not in LEVELS[level].features:
        assert not re.search(r"^\s+v[a-z]", asm, re.M), f"{level}: VEX-encoded instructions"


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("level", LEVEL_IDS)
def test_float_kernels_use_the_level_only_and_match_numpy(level, name):
    fn, args, ref, scale = KERNELS[name]
    f = jc.jit(fn, target=level)
    got = f(*args)
    want = ref(*args)
    rtol, _ = TOL[np.dtype(got.dtype)]
    np.testing.assert_allclose(got, want, rtol=rtol * scale, atol=rtol * scale,
                               err_msg=f"{name} at {level}")
    _check_registers(level, f.asm(*args))
    assert all(k.vector_width <= LEVELS[level].vector_bits for k in f.kernels(*args))


@pytest.mark.parametrize("name", list(EXACT))
@pytest.mark.parametrize("level", LEVEL_IDS)
def test_exact_kernels_use_the_level_only_and_match_numpy(level, name):
    fn, args, ref = EXACT[name]
    f = jc.jit(fn, target=level)
    got, want = f(*args), ref(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, f"{name} at {level}"
        np.testing.assert_array_equal(g, w, err_msg=f"{name} at {level}")
    _check_registers(level, f.asm(*args))


@pytest.mark.parametrize("level", LEVEL_IDS)
def test_lanes_follow_the_level(level):
    """Lanes per dtype and the tail kind come from the level, whatever the host has."""
    f = jc.jit(lambda a: a * 2 + 1, target=level)
    bits = LEVELS[level].vector_bits
    for dtype in (np.float32, np.float64, np.int32, np.uint8):
        x = np.arange(1031).astype(dtype)
        (kernel,) = f.kernels(x)
        assert kernel.lanes == bits // (8 * np.dtype(dtype).itemsize)
        np.testing.assert_array_equal(f(x), x * 2 + 1)


def test_a_compiled_graph_takes_a_target():
    level = _lowest_runnable()
    g = jc.Graph()
    x = g.input("x", (100,), jc.float32)
    g.output(jc.exp(x) * 2)
    f = jc.compile(g, target=level)
    a = np.linspace(-3, 3, 100, dtype=np.float32)
    assert_close(f(a), np.exp(f64(a)) * 2, F32)
    assert f.kernels(a)[0].lanes == LEVELS[level].vector_bits // 32
    if X86:
        _check_registers(level, f.asm(a))



def _double(a):
    return a * 2.0


def test_a_pickled_function_keeps_its_target():
    import pickle
    level = _lowest_runnable()
    g = pickle.loads(pickle.dumps(jc.jit(_double, target=level)))
    x = np.arange(37, dtype=np.float32)
    np.testing.assert_array_equal(g(x), x * 2)
    assert g.kernels(x)[0].lanes == LEVELS[level].vector_bits // 32

"""bfloat16 as a storage dtype (ml_dtypes' numpy dtype, torch.bfloat16 tensors).

The spec these tests hold the compiler to: bfloat16 values are widened to float32 exactly,
computed in float32, and rounded to nearest even once, on store (passes/widen_bf16.py,
jitcore/llvm/bf16_convert.py). References are computed in float64 from the bfloat16 inputs' values
and rounded to bfloat16 by ml_dtypes. Tolerance: 1 bfloat16 ulp of the rounded reference for
single ops and short chains (the float32 result is within a float32 ulp or so of the true
value, so its rounding may land on the neighbour of the correctly rounded bfloat16, never
further); conversions are bit-exact. Reductions accumulate in float32, so their error is
the final rounding plus float32's (far below a bfloat16 ulp at these sizes): also 1 ulp.

Conversions run at every instruction-set level this host can run ("native" uses
vcvtneps2bf16 where the CPU has AVX512_BF16, the x86-64 levels the integer sequence): both
must give the same bits. The op-family tests run at the default target, and a share of them
again at other levels (tests/level_runs.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitcore as jc
from jitcore.ir.dtypes import convert
from jitcore.ir.errors import TargetError
from jitcore.llvm.target import LEVELS, level_target
from helpers import F32, SIZES, WIDTHS, f64, make, rng_for, softmax_ref
import test_spellings as spellings
from test_elementwise import BINARY, UNARY, UNARY_SCALE, binary_inputs, unary_input

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def _runnable(name):
    try:
        level_target(name)
    except TargetError:
        return False
    return True


TARGETS = [t for t in ("native",) + tuple(LEVELS) if _runnable(t)]
HAS_BF16_INSN = "+avx512bf16" in level_target("native").features.split(",")


# ---- comparison ------------------------------------------------------------------------------

def bf16_ulp(v):
    """The spacing of bfloat16 numbers at |v| (v finite; subnormals: 2**-133)."""
    a = np.abs(np.asarray(v, np.float64))
    exp = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    return np.exp2(np.maximum(exp, -126) - 7)


def assert_bf16_close(got, ref64, ulps=1.0, msg="", scale=None):
    """got (bfloat16) within `ulps` bfloat16 ulps of ref64 rounded to bfloat16; NaN where
    the reference is NaN, infinities equal. `scale`: for results that cancel terms larger
    than themselves (gelu of negatives), the float32 computation's own error, a few float32
    ulps of those terms, is allowed on top."""
    assert got.dtype == BF16, f"{msg}: dtype {got.dtype}, expected bfloat16"
    want = np.asarray(ref64).astype(BF16).astype(np.float64)
    g = got.astype(np.float64)
    assert g.shape == want.shape, msg
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(g), nan), f"{msg}: NaN positions differ"
    inf = np.isinf(want)
    assert np.array_equal(g[inf], want[inf]), f"{msg}: infinities differ"
    fin = ~nan & ~inf
    err = np.abs(g[fin] - want[fin])
    bound = ulps * bf16_ulp(want[fin])
    if scale is not None:
        bound = bound + 4 * 2.0 ** -24 * np.broadcast_to(scale, want.shape)[fin]
    bad = err > bound
    assert not bad.any(), (f"{msg}: {bad.sum()} of {bad.size} beyond {ulps} ulp, e.g. got "
                           f"{g[fin][bad][:4]} want {want[fin][bad][:4]}")


def bf16_input(x):
    """x rounded to bfloat16 (the test's input) and its exact float64 values."""
    b = np.asarray(x).astype(BF16)
    return b, b.astype(np.float64)


# ---- the pass -----------------------------------------------------------------------------------

def test_widened_graph_holds_bf16_only_in_memory():
    """After passes/widen_bf16.py, bfloat16 is only an input, a rounding cast (a user's
    astype or a stored output), or the source of a widening cast."""
    from jitcore.ir import build
    from jitcore.ir.graph import Graph
    from jitcore.ir.ops import Op
    from jitcore.passes.widen_bf16 import widen_bf16
    a = build.input_node("a", (4, 8), jc.bfloat16)
    b = build.input_node("b", (4, 8), jc.bfloat16)
    prod = build.elementwise(Op.MUL, a, b)
    rounded = build.cast(build.elementwise(Op.EXP, prod), jc.bfloat16)     # (a no-op cast)
    user = build.cast(build.cast(prod, jc.float32), jc.bfloat16)          # a user's astype
    total = build.reduce(Op.SUM, build.elementwise(Op.ADD, rounded, user), (1,))
    graph = widen_bf16(Graph("g", [a, b], [total, prod, a]))
    for n in graph.nodes():
        if n.dtype == jc.bfloat16:
            assert n.op in (Op.INPUT, Op.CAST), n
        if n.op == Op.CAST and n.src[0].dtype == jc.bfloat16:
            assert n.dtype == jc.float32, n
    assert [o.dtype for o in graph.outputs] == [jc.bfloat16] * 3
    assert graph.outputs[2] is a                        # an input returned as it is
    assert widen_bf16(graph).text() == graph.text()     # nothing left to widen
    plain = Graph("p", [], [build.const(1.0, jc.float32)])
    assert widen_bf16(plain) is plain


# ---- conversions, bit-exact, at every level ---------------------------------------------------

ALL_BITS = np.arange(1 << 16, dtype=np.uint16)


def quieted(bits16):
    """What a float32 NaN becomes in bfloat16: its top half with the quiet bit set (the
    instruction's rule, and the integer sequence's)."""
    return bits16 | 0x40


@pytest.mark.parametrize("target", TARGETS)
def test_every_bf16_pattern_round_trips(target):
    x = ALL_BITS.view(BF16)
    wide = jc.jit(lambda a: a.astype(jc.float32), target=target)(x)
    assert np.array_equal(wide.view(np.uint32), ALL_BITS.astype(np.uint32) << 16)
    back = jc.jit(lambda a: a.astype(jc.bfloat16), target=target)(wide).view(np.uint16)
    nan = np.isnan(x.astype(np.float32))
    assert np.array_equal(back[~nan], ALL_BITS[~nan])
    assert np.array_equal(back[nan], quieted(ALL_BITS[nan]))   # signalling NaNs quieted
    # the same round trip fused in one kernel, through the graph's own casts
    both = jc.jit(lambda a: a.astype(jc.float32).astype(jc.bfloat16), target=target)(x)
    assert np.array_equal(both.view(np.uint16), back)


F32_EDGES = np.array([
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F817FFF,      # ties to even (down, up), near ties
    0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0xFF7FFFFF,      # overflow to inf / largest finite
    0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,      # inf, quiet NaN
    0x7F800001, 0xFF812345, 0x7FBFFFFF,                  # signalling NaNs with payloads
    0x00000001, 0x00008000, 0x00018000, 0x00007FFF,      # denormals: tiny, ties, below a tie
    0x807FFFFF, 0x00800000, 0x80000000, 0x00000000,      # largest denormal, min normal, +-0
], dtype=np.uint32)


def float32_cases(size, seed):
    """float32 bit patterns: the edge cases at the start and at the tail of random ones."""
    rng = rng_for("bf16-f32", size, seed)
    bits = rng.integers(0, 1 << 32, size, dtype=np.uint64).astype(np.uint32)
    k = min(size, len(F32_EDGES))
    bits[:k] = F32_EDGES[:k]
    bits[size - k:] = F32_EDGES[len(F32_EDGES) - k:]
    return bits


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size", [1, 7, 23, 1023, 100003])
def test_float32_to_bf16_rounds_to_nearest_even(target, size):
    bits = float32_cases(size, 0)
    x = bits.view(np.float32)
    got = jc.jit(lambda a: a.astype(jc.bfloat16), target=target)(x).view(np.uint16)
    nan = np.isnan(x)
    with np.errstate(all="ignore"):
        want = x.astype(BF16).view(np.uint16)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.array_equal(got[nan], quieted((bits[nan] >> 16).astype(np.uint16)))


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("size", [16, 1023, 100003])
def test_native_and_integer_sequences_agree(size, width):
    """vcvtneps2bf16 (512 and 256 bits; it flushes denormals: those lanes are redone)
    against the integer sequence, on every kind of float32."""
    x = float32_cases(size, 1).view(np.float32)
    native = jc.jit(lambda a: a.astype(jc.bfloat16), vector_width=width)(x)
    plain = jc.jit(lambda a: a.astype(jc.bfloat16), target="x86-64-v3")(x)
    assert np.array_equal(native.view(np.uint16), plain.view(np.uint16))


def test_native_conversion_is_the_instruction():
    x = np.ones(1024, np.float32)
    native = jc.jit(lambda a: a.astype(jc.bfloat16)).asm(x)
    assert ("vcvtneps2bf16" in native) == HAS_BF16_INSN
    # the redo branch is taken for denormals only (vfpclassps), not for zeros
    assert ("vfpclassps" in native) == HAS_BF16_INSN
    if _runnable("x86-64-v4"):     # the level does not promise AVX512_BF16
        assert "vcvtneps2bf16" not in jc.jit(lambda a: a.astype(jc.bfloat16),
                                             target="x86-64-v4").asm(x)


def _vectorized(f, *args):
    return all(k.vectorized for k in f.kernels(*args))


@pytest.mark.parametrize("target", TARGETS)
def test_casts_are_vectorized(target):
    b = np.ones(1024, BF16)
    for dtype in (jc.float32, jc.float64, jc.int32, jc.int64, jc.uint8, jc.bool):
        to = jc.jit(lambda a: a.astype(dtype), target=target)
        assert _vectorized(to, b), f"bf16 -> {dtype}"
        x = np.ones(1024, dtype.np)
        back = jc.jit(lambda a: a.astype(jc.bfloat16), target=target)
        assert _vectorized(back, x), f"{dtype} -> bf16"


def float64_cases(size):
    rng = rng_for("bf16-f64", size)
    x = rng.standard_normal(size) * np.exp2(rng.integers(-140, 130, size))
    edges = [1 + 2.0 ** -8 + 2.0 ** -30,     # above a bf16 tie by less than a float32 ulp
             1 + 2.0 ** -8 - 2.0 ** -30, 1 + 2.0 ** -8, 3.3961e38, 3.3962e38, 1e39, -1e300,
             1e-45, 2.0 ** -134, 2.0 ** -133 * 1.5, np.nan, np.inf, -np.inf, 0.0, -0.0]
    k = min(size, len(edges))
    x[size - k:] = edges[:k]
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("size", [5, 1023])
def test_float64_to_bf16_rounds_once(target, size):
    """float64 -> bf16 rounds once (as ml_dtypes), not through a rounded float32."""
    x = float64_cases(size)
    got = jc.jit(lambda a: a.astype(jc.bfloat16), target=target)(x)
    with np.errstate(all="ignore"):
        want = x.astype(BF16)
    nan = np.isnan(x)
    assert np.array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(got[nan].astype(np.float32)).all()


INT_SOURCES = {
    np.int32: lambda rng, n: rng.integers(-2**31, 2**31, n),
    np.int64: lambda rng, n: rng.integers(-2**62, 2**62, n),
    np.uint8: lambda rng, n: rng.integers(0, 256, n),
    np.bool_: lambda rng, n: rng.integers(0, 2, n),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src", list(INT_SOURCES), ids=lambda t: t.__name__)
def test_integers_to_bf16(target, src):
    rng = rng_for("bf16-int", src.__name__)
    v = INT_SOURCES[src](rng, 1021)
    if src is np.int32:
        v[-1] = 2**30 + 3 * 2**22 - 1     # rounds down; through float32 it would tie up
    v = v.astype(src)
    got = jc.jit(lambda a: a.astype(jc.bfloat16), target=target)(v)
    assert np.array_equal(got.view(np.uint16), v.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dst", [jc.float32, jc.float64, jc.int32, jc.int64, jc.uint8,
                                 jc.bool], ids=repr)
def test_bf16_to_every_dtype(target, dst):
    """bf16 -> d: as its exact float32 value converts (jitcore's float -> int rule:
    truncate, saturate, NaN -> 0)."""
    x = ALL_BITS.view(BF16)
    got = jc.jit(lambda a: a.astype(dst), target=target)(x)
    with np.errstate(invalid="ignore"):        # (NaN patterns)
        wide = x.astype(np.float32)
        want = convert(wide, dst) if dst.is_int else wide.astype(dst.np)
    assert got.dtype == dst.np
    assert np.array_equal(got, want, equal_nan=dst.is_float)


# ---- promotion ---------------------------------------------------------------------------------

OTHERS = [np.bool_, np.uint8, np.int32, np.int64, np.float32, np.float64]


@pytest.mark.parametrize("other", OTHERS, ids=lambda t: t.__name__)
def test_promotion_is_numpys_with_ml_dtypes(other):
    a = np.array([1.5, -2.25, 3.0], BF16)
    b = np.array([2, 0, 1], other)
    for x, y in ((a, b), (b, a)):
        got = jc.jit(lambda p, q: p + q)(x, y)
        want = np.result_type(x.dtype, y.dtype)
        assert got.dtype == want, f"{x.dtype} + {y.dtype}"
        np.testing.assert_array_equal(got.astype(np.float64),
                                      (f64(x) + f64(y)).astype(want).astype(np.float64))


@pytest.mark.parametrize("scalar", [2, 0.1, True, 1e30])
def test_python_scalars_stay_weak(scalar):
    a, a64 = bf16_input([1.5, -2.25, 3.0, 100.0])
    got = jc.jit(lambda x: x * scalar)(a)
    want = a * scalar                       # numpy with ml_dtypes: bfloat16
    assert got.dtype == want.dtype == BF16
    assert_bf16_close(got, a64 * float(np.asarray(scalar).astype(BF16)), msg=f"x * {scalar}")


# ---- elementwise op families -------------------------------------------------------------------

F32_UNARY = [n for n, e in UNARY.items() if F32 in e[4]]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", F32_UNARY)
def test_unary(name, size):
    x, x64 = bf16_input(unary_input(name, F32, size))
    got = jc.jit(lambda v: UNARY[name][0](v))(x)
    with np.errstate(all="ignore"):
        ref = UNARY[name][2](x64)
    if name == "logical_not":
        assert got.dtype == np.bool_ and np.array_equal(got, ref)
        return
    scale = UNARY_SCALE[name](x64) if name in UNARY_SCALE else None
    assert_bf16_close(got, ref, msg=f"jc.{name}(bf16[{size}])", scale=scale)


F32_BINARY = [n for n, e in BINARY.items() if F32 in e[3]]
NUMPY_BINARY = {"maximum": np.maximum, "minimum": np.minimum, "logical_and": np.logical_and,
                "logical_or": np.logical_or}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", F32_BINARY)
def test_binary(name, size):
    a32, b32 = binary_inputs(name, F32, size)
    (a, a64), (b, b64) = bf16_input(a32), bf16_input(b32)
    got = jc.jit(lambda p, q: BINARY[name][0](p, q))(a, b)
    ref_fn = BINARY[name][2] or NUMPY_BINARY[name]
    with np.errstate(all="ignore"):
        ref = ref_fn(a64, b64)
    if ref.dtype == np.bool_:
        assert got.dtype == np.bool_ and np.array_equal(got, ref), name
        return
    assert_bf16_close(got, ref, msg=f"jc.{name}(bf16[{size}])")


SPELLED = [r for r in spellings.ELEMENTWISE if "float32" in r.dtypes]


@pytest.mark.parametrize("row", SPELLED, ids=lambda r: r.name)
def test_every_spelling_row(row):
    """Every elementwise row of the spelling table (numpy's math included: arctan2, hypot,
    logaddexp, cbrt, ...) on bf16 operands: numpy's result dtype with ml_dtypes, values
    within 1 ulp of the float64 result rounded to bf16."""
    arrays = [a if a.dtype == np.bool_ else a.astype(BF16)
              for a in spellings._inputs(row.arity, "float32")]
    fn = spellings.implementation(row.name)
    f = [lambda x: fn(x), lambda x, y: fn(x, y), lambda c, x, y: fn(c, x, y)][row.arity - 1]
    got = np.asarray(jc.jit(f)(*arrays))
    ref = spellings._reference(row, arrays)
    with np.errstate(all="ignore"):
        want = np.asarray(ref(*[a if a.dtype == np.bool_ else f64(a) for a in arrays]))
        if row.name in spellings.REFERENCE:      # (a float64 formula: a float result)
            expected = np.dtype(np.bool_) if want.dtype == np.bool_ else BF16
        else:
            expected = np.asarray(ref(*arrays)).dtype
    if row.name == "matmul":
        # ml_dtypes' np.matmul gives float32; jitcore promotes (bf16), as np.dot and torch
        assert np.matmul(*arrays).dtype == np.float32 and np.dot(*arrays).dtype == BF16
        expected = BF16
    assert got.dtype == expected, (row.name, got.dtype, expected)
    if got.dtype == BF16:
        assert_bf16_close(got, want, msg=row.name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=row.name)


def test_where_clip_and_chains():
    rng = rng_for("bf16-chain")
    (a, a64), (b, b64), (c, c64) = (bf16_input(rng.standard_normal(1029)) for _ in range(3))
    assert_bf16_close(jc.jit(lambda x, y, z: x * y + z)(a, b, c), a64 * b64 + c64,
                      msg="a*b+c")
    assert_bf16_close(jc.jit(lambda x, y: jc.where(x > y, x, -y))(a, b),
                      np.where(a64 > b64, a64, -b64), msg="where")
    assert_bf16_close(jc.jit(lambda x: jc.clip(x, -0.5, 0.75))(a),
                      np.clip(a64, -0.5, 0.75), msg="clip")
    # rounded once, on store: the float32 chain is not rounded between its ops
    got = jc.jit(lambda x, y: (x * y + 1.0) * (x - y))(a, b)
    assert_bf16_close(got, (a64 * b64 + 1.0) * (a64 - b64), msg="chain")


def test_nan_inf_and_empty():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 3e38, -3e38], BF16)
    got = jc.jit(lambda v: v * 2 + 1)(x)
    with np.errstate(all="ignore"):
        assert_bf16_close(got, f64(x) * 2 + 1, msg="nan/inf")
        assert_bf16_close(jc.jit(jc.exp)(x), np.exp(f64(x)), msg="exp nan/inf")
    assert np.isnan(jc.jit(jc.max)(x).astype(np.float32))        # max propagates NaN
    empty = np.zeros((0, 3), BF16)
    assert jc.jit(lambda v: v + 1)(empty).shape == (0, 3)
    assert jc.jit(lambda v: v + 1)(empty).dtype == BF16
    assert jc.jit(lambda v: jc.sum(v, axis=0))(empty).astype(np.float32).tolist() == [0, 0, 0]


# ---- reductions: float32 accumulators -------------------------------------------------------

REDUCTIONS = {
    "sum": (jc.sum, np.sum), "mean": (jc.mean, np.mean), "max": (jc.max, np.max),
    "min": (jc.min, np.min), "prod": (jc.prod, np.prod), "var": (jc.var, np.var),
    "std": (jc.std, np.std),
}


@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (33, 1029)])
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reductions(name, shape, axis):
    jfn, nfn = REDUCTIONS[name]
    low, high = (0.9, 1.1) if name == "prod" else (-3, 3)
    x, x64 = bf16_input(make(shape, F32, rng=rng_for("bf16-red", name, shape), low=low,
                             high=high))
    got = jc.jit(lambda v: jfn(v, axis=axis))(x)
    assert got.dtype == nfn(x[:1, :1], axis=axis).dtype == BF16
    assert_bf16_close(np.asarray(got), nfn(x64, axis=axis), msg=f"{name} axis={axis}")


def test_sum_accumulates_in_float32():
    """A bfloat16 accumulator stops at 256 when adding ones; float32 counts on."""
    x = np.ones(100000, BF16)
    assert float(jc.jit(jc.sum)(x)) == float(np.float64(100000).astype(BF16))
    assert float(jc.jit(jc.mean)(x)) == 1.0


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions(name):
    x, x64 = bf16_input(make((17, 1031), F32, rng=rng_for("bf16-arg", name)))
    got = jc.jit(lambda v: getattr(jc, name)(v, axis=1))(x)
    assert np.array_equal(got, getattr(np, name)(x64, axis=1))


# ---- rows, gather, concat, pooling, scans -----------------------------------------------------

def test_softmax_and_layer_norm():
    x, x64 = bf16_input(make((9, 1027), F32, rng=rng_for("bf16-rows")))
    assert_bf16_close(jc.jit(jc.softmax)(x), softmax_ref(x64), msg="softmax")
    lsm = jc.jit(jc.log_softmax)(x)
    assert_bf16_close(lsm, np.log(softmax_ref(x64)), msg="log_softmax")
    w, w64 = bf16_input(make(1027, F32, rng=rng_for("bf16-w")))
    mu = x64.mean(-1, keepdims=True)
    ref = (x64 - mu) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5) * w64
    assert_bf16_close(jc.jit(lambda v, g: jc.layer_norm(v, g))(x, w), ref, msg="layer_norm")


def test_take_concat_cumsum_transpose():
    x, x64 = bf16_input(make((13, 37), F32, rng=rng_for("bf16-axis")))
    y, y64 = bf16_input(make((5, 37), F32, rng=rng_for("bf16-axis2")))
    idx = np.array([12, 0, 3, 3, 7], np.int64)
    assert np.array_equal(jc.jit(lambda v, i: jc.take(v, i, axis=0))(x, idx), x[idx])
    cat = jc.jit(lambda p, q: jc.concatenate([p, q], axis=0))(x, y)
    assert cat.dtype == BF16 and np.array_equal(cat.view(np.uint16),
                                                np.concatenate([x, y]).view(np.uint16))
    assert np.array_equal(jc.jit(lambda v: v.T + 0)(x).view(np.uint16), x.T.view(np.uint16))
    assert_bf16_close(jc.jit(lambda v: jc.cumsum(v, axis=1))(x), np.cumsum(x64, axis=1),
                      msg="cumsum")


@pytest.mark.parametrize("fill", [0.0, 1.5, -np.inf])
def test_constant_padding(fill):
    """np.pad with a constant (and a product after it): the padding is a bf16 constant
    stored as it is, its bits (it was emitted as a float literal into an i16 store, which
    LLVM rejected: a CompileError for any constant padding of a bf16 array)."""
    x = make((5, 37), F32, rng=rng_for("bf16-pad")).astype(BF16)
    widths = ((1, 0), (2, 3))
    want = np.pad(x, widths, constant_values=fill)
    got = jc.jit(lambda v: np.pad(v, widths, constant_values=fill))(x)
    assert got.dtype == BF16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))
    got = jc.jit(lambda v: np.pad(v, 1, constant_values=fill) * 2)(x)
    want = np.pad(x, 1, constant_values=fill) * 2
    assert got.dtype == BF16 and np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_pooling():
    x, x64 = bf16_input(make((2, 3, 17, 19), F32, rng=rng_for("bf16-pool")))
    got = jc.jit(lambda v: jc.max_pool2d(v, 3, stride=2))(x)
    windows = np.lib.stride_tricks.sliding_window_view(x64, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    assert_bf16_close(got, windows.max(axis=(-2, -1)), ulps=0, msg="max_pool2d")
    got = jc.jit(lambda v: jc.avg_pool2d(v, 2))(x)
    windows = np.lib.stride_tricks.sliding_window_view(x64, (2, 2), axis=(2, 3))[:, :, ::2, ::2]
    assert_bf16_close(got, windows.mean(axis=(-2, -1)), msg="avg_pool2d")


# ---- contractions: correct through float32, and said to be the slow path ---------------------

def test_matmul_and_conv_through_float32():
    a, a64 = bf16_input(make((33, 70), F32, rng=rng_for("bf16-mm-a")))
    b, b64 = bf16_input(make((70, 19), F32, rng=rng_for("bf16-mm-b")))
    f = jc.jit(lambda p, q: p @ q)
    assert_bf16_close(f(a, b), a64 @ b64, msg="matmul")
    assert "slow float32 path" in f.explain(a, b)
    x, x64 = bf16_input(make((1, 3, 12, 12), F32, rng=rng_for("bf16-conv-x")))
    w, w64 = bf16_input(make((8, 3, 3, 3), F32, rng=rng_for("bf16-conv-w")))
    conv = jc.jit(lambda p, q: jc.conv2d(p, q, padding=1))
    got = conv(x, w)
    xp = np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    ref = np.einsum("nchwij,ocij->nohw", windows, w64)
    assert_bf16_close(got, ref, msg="conv2d")
    assert "conv2d on bfloat16 operands: the slow float32 path" in conv.explain(x, w)
    mixed = jc.jit(lambda p, q: p @ q)(a, b64.astype(np.float32))    # bf16 @ f32 -> f32
    assert mixed.dtype == np.float32
    # matmul_precision="bf16" (vdpbf16ps, or its float32 fallback): the same products, as
    # bf16 operands are exact in bf16
    fast = jc.jit(lambda p, q: p @ q, matmul_precision="bf16")
    assert_bf16_close(fast(a, b), a64 @ b64, msg="matmul_precision=bf16")
    said = fast.explain(a, b)
    assert "how their bf16 operands multiply" in said
    if HAS_BF16_INSN:
        assert "bf16 operands in pairs (vdpbf16ps)" in said
    else:              # (Ice Lake, Zen 3: no AVX512_BF16)
        assert "no AVX512_BF16 here: the slower fallback" in said


def test_large_outputs_keep_their_dtype():
    """Outputs of 32 MB and more come from the output cache, built through the array
    interface, whose typestr cannot name bfloat16 ("|V2"): they are relabelled."""
    from jitcore.llvm.entry import LARGE_OUTPUT_BYTES
    x = np.full(LARGE_OUTPUT_BYTES // 2 + 3, 1.5, BF16)
    f = jc.jit(lambda v: v * 2)
    for _ in range(2):                       # a fresh block, then a cached one
        got = f(x)
        assert got.dtype == BF16 and float(got[-1]) == 3.0
        del got


def test_out_argument():
    a, a64 = bf16_input(np.linspace(-3, 3, 1001))
    out = np.empty_like(a)
    r = jc.jit(lambda v: v * 3)(a, out=out)
    assert r is out
    assert_bf16_close(out, a64 * 3, msg="out=")


# ---- torch: zero-copy in and out, modules in bfloat16 -----------------------------------------

def test_torch_tensors_in_place():
    torch = pytest.importorskip("torch")
    a = torch.randn(1000).to(torch.bfloat16)
    b = torch.randn(1000).to(torch.bfloat16)
    f = jc.jit(lambda p, q: p * q + 1)
    want = (a.double() * b.double() + 1).numpy()
    for _ in range(3):                         # the slow path, then the steady foreign path
        got = f(a, b)
        assert_bf16_close(got, want, msg="torch in")
    arrays = jc.call.foreign.views((a, b), None)[0]
    assert arrays[0].__array_interface__["data"][0] == a.data_ptr()     # a view, no copy
    out = torch.empty(1000, dtype=torch.bfloat16)
    pointer = out.data_ptr()
    assert f(a, b, out=out) is out and out.data_ptr() == pointer
    assert_bf16_close(out.view(torch.int16).numpy().view(BF16), want, msg="torch out=")


def test_torch_conversions_of_bfloat16():
    """torch's rules on bf16 values: float -> uint8 truncates and wraps (not jitcore's
    saturation), a bf16 sum stays bf16."""
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitcore.torch")

    class Convert(torch.nn.Module):
        def forward(self, x):
            return (x * 3).to(torch.uint8), x.sum(-1)

    x = torch.tensor([[1.5, 100.0, 300.0, -3.5, 0.0]]).to(torch.bfloat16)
    got, want = jt.compile(Convert(), x)(x), Convert()(x)
    assert torch.equal(got[0], want[0])
    assert got[1].dtype == torch.bfloat16 and torch.equal(got[1], want[1])


def _normwise(got, ref):
    got, ref = got.double(), ref.double()
    return float((got - ref).norm() / ref.norm())


class SmallCNN:
    @staticmethod
    def build(torch):
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = torch.nn.Conv2d(3, 16, 3, padding=1)
                self.bn = torch.nn.BatchNorm2d(16)
                self.c2 = torch.nn.Conv2d(16, 24, 3, stride=2, padding=1)
                self.fc = torch.nn.Linear(24, 10)

            def forward(self, x):
                x = torch.relu(self.bn(self.c1(x)))
                x = torch.nn.functional.max_pool2d(x, 2)
                x = torch.nn.functional.gelu(self.c2(x)) + x[:, :1, ::2, ::2]
                return torch.softmax(self.fc(x.mean((2, 3))), -1)
        return Net()


@pytest.mark.parametrize("model", ["mlp", "cnn", "bert"])
def test_torch_module_in_bfloat16(model):
    """model.to(torch.bfloat16) runs as given, all of it in jitcore (no fallback node); its
    error against float64 is below 1e-2 normwise (a bfloat16-sized bound) and at most 1.5x
    eager bf16's (measured here: about half of eager's)."""
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitcore.torch")
    torch.manual_seed(0)
    if model == "mlp":
        net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(),
                                  torch.nn.Linear(128, 32), torch.nn.LayerNorm(32))
        x = torch.randn(8, 64)
    elif model == "cnn":
        net = SmallCNN.build(torch)
        x = torch.randn(2, 3, 16, 16)
    else:
        transformers = pytest.importorskip("transformers")
        net = transformers.BertModel(transformers.BertConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=256, vocab_size=1000))
        x = torch.randint(0, 1000, (1, 32))
    net.eval()
    last = (lambda out: out.last_hidden_state) if model == "bert" else (lambda out: out)
    with torch.no_grad():
        ref = last(net.double()(x.double() if model != "bert" else x))
        net = net.to(torch.bfloat16)
        xb = x.to(torch.bfloat16) if model != "bert" else x
        eager = last(net(xb))
        compiled = jt.compile(net, xb)
        got = last(compiled(xb))
    assert "0 fallback node(s)" in compiled.explain()
    assert got.dtype == torch.bfloat16 and got.shape == eager.shape
    assert _normwise(got, ref) < 1e-2
    assert _normwise(got, ref) <= 1.5 * _normwise(eager, ref)
    assert _normwise(got, eager) < 1e-2


# ---- without ml_dtypes -------------------------------------------------------------------------

def test_jitcore_imports_and_runs_without_ml_dtypes():
    code = textwrap.dedent("""
        import sys
        sys.modules["ml_dtypes"] = None          # import ml_dtypes raises ImportError
        import numpy as np
        import jitcore as jc
        assert (jc.jit(lambda a: a * 2)(np.ones(3, np.float32)) == 2).all()
        try:
            jc.jit(lambda a: a.astype(jc.bfloat16))(np.ones(3, np.float32))
        except jc.DTypeError as e:
            assert "ml_dtypes" in str(e), e
        else:
            raise AssertionError("bfloat16 without ml_dtypes did not fail")
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-2000:]

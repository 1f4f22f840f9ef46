"""float -> integer and float -> bool casts at the edges: NaN, +-inf, values just inside and
just beyond every integer dtype's range, fractions that truncate (-1.5 -> uint8 is 0), for
float32 and float64 sources and every target, at sizes that exercise one element, a vector
and a tail, and many vectors, at every vector width the CPU has; through jc.jit (method and
jc.astype, alone and fused with integer arithmetic), eagerly, and constant-folded.

The README's rule: float -> int casts truncate toward zero and saturate at the target's
bounds, NaN -> 0 (numpy leaves out-of-range values undefined). `helpers.saturating_astype` is
the reference; float -> bool is numpy's (nonzero and NaN are True)."""
from __future__ import annotations

import functools
import re

import numpy as np
import pytest

import jitcore as jc
from helpers import (BOOL, F32, F64, I32, I64, U8, assert_close, dtype_id, jc_dtype, rng_for,
                     saturating_astype)

FLOATS = [F32, F64]
TARGETS = [I32, I64, U8, BOOL]
SIZES = [1, 17, 1000]
WIDTHS = [w for w in (128, 256, 512) if w <= jc.target_info()["max_vector_bits"]]


def edge_values(src) -> np.ndarray:
    """Specials, fractions and each integer dtype's bounds with their float neighbours,
    rounded to the source dtype."""
    s = np.dtype(src)
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.99, -0.99, 1.5, -1.5,
            -1.0, 254.5, 255.0, 255.5, 255.99, 256.0, 300.0, 1e10, -1e10, 3e9, -3e9, 1e19,
            -1e19, 1e20, -1e20, 3.4e38, -3.4e38, 1e-40, -1e-40]
    if s == F64:
        vals += [1e300, -1e300, 2.0 ** 31 - 0.5, -2.0 ** 31 - 0.5]
    for d in (I32, I64):
        info = np.iinfo(d)
        for bound in (float(info.min), float(info.max) + 1):      # powers of two: exact
            b = s.type(bound)
            vals += [b, np.nextafter(b, s.type(np.inf)), np.nextafter(b, s.type(-np.inf)),
                     bound - 1, bound + 1]
    with np.errstate(all="ignore"):
        return np.array(vals, np.float64).astype(s)


def cast_inputs(src, size: int) -> list:
    """Arrays of `size` that together put every edge value at every position class: for size
    1 one array per value; otherwise the edge values rolled through the array (so each lands
    in the vector body and in the tail) among random values across the integer ranges."""
    s = np.dtype(src)
    edges = edge_values(s)
    if size == 1:
        return [edges[i:i + 1] for i in range(edges.size)]
    rng = rng_for("casts", s.name, size)
    base = np.concatenate([rng.uniform(-3e9, 3e9, size), rng.uniform(-300, 300, size)])
    out = []
    step = max(1, size // 4)
    for shift in range(0, max(edges.size, size), step):
        x = rng.permutation(base)[:size].astype(s)
        pos = (np.arange(edges.size) + shift) % size
        x[pos[:size]] = edges[:size] if edges.size > size else edges
        out.append(x)
    return out


@functools.lru_cache(maxsize=None)
def cast_fn(dst, form, width):
    kw = {} if width is None else {"vector_width": width}
    if form == "method":
        return jc.jit(lambda x: x.astype(dst), **kw)
    return jc.jit(lambda x: jc.astype(x, dst), **kw)


def reference(x, dst):
    with np.errstate(all="ignore"):
        return saturating_astype(x, dst)


def test_reference_agrees_with_numpy_in_range():
    """The reference is numpy's astype wherever numpy's cast is defined."""
    for src in FLOATS:
        x = edge_values(src)
        x = x[np.isfinite(x)]
        for dst in (I32, I64, U8):
            info = np.iinfo(dst)
            inside = x[(x > float(info.min) - 1) & (x < float(info.max) + 1)
                       & (np.abs(x) < 2.0 ** 62 if dst == I64 else True)]
            np.testing.assert_array_equal(saturating_astype(inside, dst), inside.astype(dst))
    assert saturating_astype(np.array([np.nan, np.inf, -np.inf, -1.5, 1e10]), U8).tolist() \
        == [0, 255, 0, 0, 255]
    assert saturating_astype(np.array([np.nan, np.inf, -np.inf, 3e9, -1.5]), I32).tolist() \
        == [0, 2**31 - 1, -2**31, 2**31 - 1, -1]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dst", TARGETS, ids=dtype_id)
@pytest.mark.parametrize("src", FLOATS, ids=dtype_id)
def test_float_casts_saturate(src, dst, size):
    for form in ("method", "jc"):
        f = cast_fn(dst, form, None)
        for x in cast_inputs(src, size):
            assert_close(f(x), reference(x, dst), dst, msg=f"{form}: {x.tolist()[:8]}...")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("dst", TARGETS, ids=dtype_id)
@pytest.mark.parametrize("src", FLOATS, ids=dtype_id)
def test_float_casts_saturate_at_every_vector_width(src, dst, width):
    f = cast_fn(dst, "method", width)
    for size in (17, 1000):
        for x in cast_inputs(src, size)[:6]:
            assert_close(f(x), reference(x, dst), dst, msg=f"{width}-bit")
    x = cast_inputs(src, 1000)[0]
    assert all(k.vectorized for k in f.kernels(x))
    info = jc.target_info()
    packed = dst in (I32, U8) or dst == I64 and "avx512dq" in info["features"]
    if info["machine"] in ("x86_64", "AMD64") and packed:
        # a packed conversion (vcvttps2dq, ...): LLVM scalarizes vector llvm.fptosi.sat
        assert re.search(r"\bv?cvttp[sd]2", f.asm(x)), "the conversion is not vector code"


@pytest.mark.parametrize("dst", TARGETS, ids=dtype_id)
@pytest.mark.parametrize("src", FLOATS, ids=dtype_id)
def test_eager_casts_agree_with_jitted(src, dst):
    for size in SIZES:
        for x in cast_inputs(src, size)[:3]:
            ref = reference(x, dst)
            assert_close(jc.astype(x, dst), ref, dst, msg="eager")
            assert_close(jc.astype(x, jc_dtype(dst)), ref, dst, msg="eager, jc dtype")
            assert_close(cast_fn(dst, "jc", None)(x), ref, dst, msg="jitted")


@pytest.mark.parametrize("dst", [I32, I64, U8], ids=dtype_id)
def test_constant_folded_casts_saturate(dst):
    """A cast of a Python float is folded at compile time (passes.simplify) by the same rule;
    before, out-of-range constants raised numpy's OverflowError while compiling."""
    x = np.zeros(4, dst)
    for v in edge_values(F64).tolist():
        got = jc.jit(lambda x: x + jc.astype(v, dst))(x)
        with np.errstate(all="ignore"):
            want = x + reference(np.array([v]), dst)
        assert_close(got, want, dst, msg=f"astype({v!r})")


@pytest.mark.parametrize("dst", [I32, I64, U8], ids=dtype_id)
@pytest.mark.parametrize("src", FLOATS, ids=dtype_id)
def test_casts_fused_with_integer_arithmetic_and_reductions(src, dst):
    """The cast inside a multi-op kernel (its result wraps on + 1 at the bound, as the
    reference does) and feeding a reduction with dtype= (an implicit cast per element)."""
    f = jc.jit(lambda x: (x.astype(dst) + 1, x * 2, x.astype(dst) * 3))
    s = jc.jit(lambda x: x.sum(axis=-1, dtype=dst))
    for x in cast_inputs(src, 1000)[:4]:
        with np.errstate(all="ignore"):
            ints = reference(x, dst)
            want = (ints + dst.type(1), x * 2, ints * dst.type(3))
        for k, (g, w) in enumerate(zip(f(x), want)):
            assert_close(g, w, w.dtype, exact=True, msg=f"output {k}")
        m = x.reshape(8, 125)
        with np.errstate(all="ignore"):
            want = reference(m, dst).astype(np.int64).sum(axis=-1).astype(dst)
        assert_close(s(m), want, dst, msg="sum(dtype=)")


@pytest.mark.parametrize("dst", TARGETS, ids=dtype_id)
@pytest.mark.parametrize("src", FLOATS, ids=dtype_id)
def test_casts_of_non_contiguous_views(src, dst):
    x = cast_inputs(src, 1000)[1].reshape(20, 50)
    f = jc.jit(lambda x: (x[::-1, ::3].astype(dst), x.T.astype(dst)))
    a, b = f(x)
    assert_close(a, reference(x[::-1, ::3], dst), dst)
    assert_close(b, reference(x.T, dst), dst)

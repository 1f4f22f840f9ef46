"""Hostile inputs, each in its own interpreter: the right jitcore exception or numpy's result,
and never a crash (the test asserts the subprocess's exit status, so a segfault or an abort
fails here instead of killing the test run)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[1])

PRELUDE = """
import numpy as np, jitcore as jc
def expect(exc, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except exc:
        return
    raise AssertionError(f"{exc.__name__} not raised")
"""

CASES = {
    "wrong_rank_shape_dtype": """
        f = jc.jit(lambda a, b: a * b + 1.0)
        x = np.ones((4, 5), np.float32)
        f(x, x)
        expect(jc.ShapeError, f, x, np.ones((4, 6), np.float32))       # unbroadcastable
        assert f(x, np.ones((1, 5), np.float32)).shape == (4, 5)       # broadcasts: new plan
        expect(jc.DTypeError, f, x, np.ones((4, 5), np.complex64))
        expect(jc.DTypeError, f, x, np.array([["a"] * 5] * 4))
        expect(jc.DTypeError, f, x, object())
        assert f(x, np.ones((4, 5), np.float64)).dtype == np.float64   # promotes like numpy
    """,
    "strides": """
        f = jc.jit(lambda a: jc.exp(a) * 2.0)
        base = np.linspace(-3, 3, 4000, dtype=np.float32).reshape(40, 100)
        for view in (base[::-1], base[:, ::-3], base.T, base[5:35:2, 10:90:7], base[::-2, ::-1].T):
            got, want = f(view), np.exp(view.astype(np.float64)) * 2.0    # exp: <= 1.01 ulp
            assert got.dtype == np.float32 and got.shape == view.shape, view.strides
            assert np.allclose(got, want, rtol=2 * np.finfo(np.float32).eps, atol=0), view.strides
    """,
    "out_aliasing_and_read_only": """
        f = jc.jit(lambda a: a * 2.0 + 1.0)
        x = np.arange(10, dtype=np.float64)
        assert f(x, out=x) is x and np.array_equal(x, np.arange(10) * 2.0 + 1)  # as numpy
        buf, ref = np.arange(20, dtype=np.float64), np.arange(20, dtype=np.float64)
        f(buf[:10], out=buf[5:15])                            # partial overlap: as numpy
        np.add(ref[:10] * 2.0, 1.0, out=ref[5:15])
        assert np.array_equal(buf, ref)
        ro = np.empty(10); ro.flags.writeable = False
        expect(ValueError, f, x, out=ro)
        expect(jc.ShapeError, f, x, out=np.empty(9))
        expect(jc.DTypeError, f, x, out=np.empty(10, np.float32))
        ok = np.empty(10); assert f(x, out=ok) is ok and np.array_equal(ok, x * 2 + 1)
    """,
    "zero_size": """
        f = jc.jit(lambda a: (a * 2.0, a.sum(axis=0), a.max(axis=1) if a.shape[1] else a))
        e = np.ones((0, 5), np.float32)
        r = f(e)
        assert r[0].shape == (0, 5) and np.array_equal(r[1], np.zeros(5, np.float32))
        expect(jc.ShapeError, jc.jit(lambda a: a.max(axis=0)), e)   # numpy: ValueError too
        assert jc.jit(lambda a: a @ a.T)(e).shape == (0, 0)
    """,
    "nan_inf": """
        x = np.array([np.nan, 1.0, -np.inf, np.inf, -0.0, 3.0], np.float32)
        f = jc.jit(lambda a: (a.max(), a.min(), jc.maximum(a, 0.5), a.sum(), jc.exp(a)))
        got = f(x)
        want = (x.max(), x.min(), np.maximum(x, 0.5), x.sum())
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
            assert np.array_equal(np.asarray(g), np.asarray(w), equal_nan=True), (g, w)
        assert np.allclose(got[-1], np.exp(x), rtol=1e-6, equal_nan=True)   # 1 ulp
    """,
    "integer_division_and_overflow": """
        i32 = np.array([7, -7, 0, np.iinfo(np.int32).min, np.iinfo(np.int32).max], np.int32)
        z = np.array([0, 0, 0, -1, 2], np.int32)
        q, r = jc.jit(lambda a, b: (a // b, a % b))(i32, z)
        with np.errstate(all="ignore"):
            assert np.array_equal(q, i32 // z) and np.array_equal(r, i32 % z)
        big = np.array([np.iinfo(np.int32).max, np.iinfo(np.int32).min], np.int32)
        with np.errstate(all="ignore"):
            assert np.array_equal(jc.jit(lambda a: a + 1)(big), big + np.int32(1))   # wraps
            assert np.array_equal(jc.jit(lambda a: a * 3)(big), big * np.int32(3))
        u8 = np.array([250, 3], np.uint8)
        assert np.array_equal(jc.jit(lambda a: a + 10)(u8), u8 + np.uint8(10))
    """,
    "more_than_2_to_the_31_elements": """
        x = np.broadcast_to(np.float32(1.0), (2, 2**31 + 3))
        assert np.array_equal(jc.jit(lambda a: a.sum(axis=1))(x),
                              np.full(2, np.float32(2**31 + 3)))
        y = np.broadcast_to(np.int64(2), (2**31 + 1,))
        assert jc.jit(lambda a: (a * 3).sum())(y) == 6 * (2**31 + 1)
    """,
    "allocation_failure_then_recovery": """
        f = jc.jit(lambda a, b: a * b + 1.0)
        huge = (np.broadcast_to(np.float32(1), (2**20, 1)),
                np.broadcast_to(np.float32(1), (1, 2**21)))        # an 8 TiB result
        expect(MemoryError, f, *huge)
        x = np.ones((4, 5), np.float32)
        assert np.array_equal(f(x, x), x * x + 1)   # the failed signature is not the fast path
        expect(MemoryError, f, *huge)
        assert np.array_equal(f(x, x), x * x + 1)
    """,
    "unusual_arrays_and_arguments": """
        f = jc.jit(lambda a, b: a * b + 1.0)
        x = np.arange(20, dtype=np.float32).reshape(4, 5)
        want = x * x + 1
        unaligned = np.zeros(81, np.uint8)[1:].view(np.float32).reshape(4, 5)
        unaligned[:] = x
        for a in (x.astype(">f4"), unaligned, np.asfortranarray(x), x.tolist()):
            assert np.array_equal(f(a, x), want), type(a)
        # a matrix's * is a matrix product, a masked array's mask would be dropped: refused
        for bad in (x.astype(np.float16), x.astype(np.int8), x.astype(np.uint64),
                    x.astype(np.complex64), np.array(["2020-01-01"], "datetime64[D]"), None,
                    "abc", {"a": 1}, np.asmatrix(x), np.ma.masked_array(x, mask=x > 3)):
            expect(jc.DTypeError, f, bad, x)
        expect(TypeError, f, x)                                    # wrong arity
        expect(TypeError, f, x, x, x)
        expect(OverflowError, jc.jit(lambda a: a + 2**40), np.ones(3, np.int32))  # as numpy
        expect(jc.ShapeError, jc.jit(lambda a: (a + 1, a * 2)), x, out=(np.empty_like(x),))
    """,
    "tracing_errors": """
        expect(jc.TraceError, jc.jit(lambda a: a + 1 if a.sum() > 0 else a), np.ones(3))
        expect(jc.TraceError, jc.jit(lambda a: float(a)), np.ones(3))
        def setitem(a):
            a[0] = 1.0
            return a
        expect(jc.TraceError, jc.jit(setitem), np.ones(3))
        expect(jc.TraceError, jc.jit(lambda a: None), np.ones(3))
        try:
            jc.jit(lambda a: (a + 1, (a, a)))(np.ones(3))
            raise AssertionError("a nested tuple was accepted")
        except jc.TraceError as e:
            assert "output 1 is a tuple" in str(e), e
        expect(jc.TraceError, jc.jit(lambda a: {"y": a}), np.ones(3))
    """,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_input_never_crashes(name):
    code = PRELUDE + textwrap.dedent(CASES[name]) + "\nprint('survived')\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert proc.returncode == 0 and "survived" in proc.stdout, \
        f"exit {proc.returncode}\n{proc.stderr[-3000:]}"

"""The native fast call (llvm/entry.py emit_fastcall, call/plan.py native_fast_call): a builtin
that checks the input tuple, allocates the output with numpy and runs the graph. Every call
right under changing dtypes, shapes, strides, arities and out=, constants and Python scalars
included; whatever it refuses goes to the slow path; no reference leaks."""
from __future__ import annotations

import sys
import threading

import numpy as np
import pytest

import jitcore as jc
from helpers import ALL_DTYPES, F32, F64, I32, assert_close, f64, make, rng_for
from jitcore.ops import core
from jitcore.call.choice import NATIVE_EMPTY_OK
from jitcore.call.plan import MISMATCH

pytestmark = pytest.mark.skipif(not NATIVE_EMPTY_OK, reason="no native fast call here")


def _affine(a, b, c):
    return a * b + c


def _check(got, args):
    """float64 reference for floats, numpy's exact result (wrapping, bool logic) otherwise."""
    ref = args[0] * args[1] + args[2]
    if ref.dtype.kind == "f":
        a, b, c = (f64(v) for v in args)
        # a*b + c cancels where the terms have opposite signs: bound by the terms' size
        assert_close(got, a * b + c, ref.dtype, scale=np.abs(a * b) + np.abs(c))
    else:
        assert_close(got, ref, ref.dtype, exact=True)


class _Sub(np.ndarray):
    """A subclass: the fast call takes exactly ndarray."""


def _plans(f) -> list:
    return list(f._plans.values())


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (1023,), (33, 31), (2, 0, 3)])
def test_fresh_output_matches_numpy(dtype, shape):
    rng = rng_for("fastcall", dtype.name, shape)
    args = [make(shape, dtype, rng=rng) for _ in range(3)]
    f = jc.jit(_affine)
    for _ in range(3):                   # slow path, then the builtin's fast path
        got = f(*args)
        assert type(f._fast).__name__ == "builtin_function_or_method"
        _check(got, args)
        assert got.flags.c_contiguous and got.flags.writeable and got.flags.owndata


def test_the_builtin_refuses_every_other_signature():
    """Called directly with arguments of another signature it returns MISMATCH (never reads
    them as the compiled layout)."""
    f = jc.jit(_affine)
    a = make((8, 16), F32, rng=rng_for("refuse"))
    f(a, a, a)
    (plan,) = _plans(f)
    fast = plan.fast
    assert isinstance(fast((a, a, a)), np.ndarray)
    others = [
        (a, a),                                   # arity
        (a, a, a, a),
        (a.astype(F64), a, a),                    # dtype
        (a, a, a.astype(I32)),
        (a.reshape(16, 8), a, a),                 # shape
        (a[:4], a, a),
        (a.reshape(128), a, a),                   # rank
        (a, a.T.copy().T, a[:, ::-1]),            # strides (same shape)
        (np.asfortranarray(a), a, a),
        (a, a.astype(a.dtype.newbyteorder(">")), a),   # byte order
        (a, a.tolist(), a),                       # not arrays
        (a, 1.0, a),
        (a.view(_Sub), a, a),                     # a subclass: not exactly ndarray
    ]
    for args in others:
        assert fast(args) is MISMATCH, [getattr(x, "shape", type(x)) for x in args]
    assert fast([a, a, a]) is MISMATCH             # not a tuple


def test_changing_signatures_each_get_their_own_result():
    rng = rng_for("changing")
    f = jc.jit(_affine)
    base = make((12, 10), F32, rng=rng)
    variants = [
        (base, base, base),
        (base.astype(F64), base, base),
        (base.T, base.T, base.T),
        (base[::-1], base, base[:, ::-1]),
        (base[:6], base[6:], base[3:9]),
        (base.astype(I32), base.astype(I32), base.astype(I32)),
        (base.astype(F64), base.astype(F64), base),      # mixed: a*b in float64
        (base.reshape(120), base.reshape(120), base.reshape(120)),
    ]
    for _ in range(3):
        for args in variants + variants[::-1]:
            got = f(*args)
            _check(got, args)
            out = np.empty_like(got)
            assert f(*args, out=out) is out
            _check(out, args)


def test_constants_and_python_scalars_go_through_the_fast_call():
    rng = rng_for("consts")
    w = make((64,), F32, rng=rng)
    f = jc.jit(lambda x, w, s: (x - w) * s, constants={"w": w})
    x = make((64,), F32, rng=rng)
    for s in (2.0, -0.5, 3.0):
        got = f(x, s)
        assert_close(got, (f64(x) - f64(w)) * s, F32)
    assert type(_plans(f)[0].fast).__name__ == "function"    # the scalar wrapper ...
    g = jc.jit(lambda x, w: x * w + 1, constants={"w": w})
    for _ in range(3):
        assert_close(g(x), f64(x) * f64(w) + 1, F32)
    assert type(g._fast).__name__ == "builtin_function_or_method"   # ... around a builtin


def test_no_reference_leaks():
    f = jc.jit(_affine)
    a = make((256,), F32, rng=rng_for("leaks"))
    b = a.astype(F64)
    f(b, b, b), f(a, a, a), f(a, a, a)
    fast = f._fast                        # the float32 plan's builtin
    assert fast((a, a, a)) is not MISMATCH and fast((b, b, b)) is MISMATCH
    before = (sys.getrefcount(a), sys.getrefcount(MISMATCH), sys.getrefcount(F32),
              sys.getrefcount(fast))
    for _ in range(1000):
        r = f(a, a, a)
        fast((b, b, b))                   # a mismatch returns a new reference to MISMATCH
    assert sys.getrefcount(r) == 2       # only `r` and getrefcount's argument
    del r
    after = (sys.getrefcount(a), sys.getrefcount(MISMATCH), sys.getrefcount(F32),
             sys.getrefcount(fast))
    assert after == before


def test_the_fast_call_outlives_its_plan():
    """Evicting every plan leaves the function's last fast path (and its code) usable."""
    f = jc.jit(_affine)
    a = make((100,), F32, rng=rng_for("outlives"))
    f(a, a, a), f(a, a, a)
    fast = f._fast
    f._plans.clear()
    import gc
    gc.collect()
    assert_close(fast((a, a, a)), f64(a) * f64(a) + f64(a), F32)


def test_large_calls_release_the_gil():
    """A call that moves more than GIL_RELEASE_BYTES (the builtin releases the GIL around
    the run): two threads calling at once both get right results."""
    f = jc.jit(lambda x: (x * 1.5 + 2.0) * x * 0.25)
    x = make((1 << 20,), F32, rng=rng_for("gil"), positive=True)     # no cancellation
    f(x), f(x)
    assert type(f._fast).__name__ == "builtin_function_or_method"
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(f(x))
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 40
    ref = (f64(x) * 1.5 + 2.0) * f64(x) * 0.25
    for r in results[::7]:
        assert_close(r, ref, F32)


# -- eager ops: `jc.exp(array)` goes straight to the op's jitted function --------------------
def _unary_ref(name, x):
    return getattr(np, name)(f64(x))


@pytest.mark.parametrize("name", ["exp", "tanh", "sqrt", "abs"])
def test_eager_unary_under_changing_dtypes_shapes_and_strides(name):
    rng = rng_for("eager", name)
    base = make((24, 20), F64, rng=rng, positive=True)
    variants = [base.astype(F32), base, base.astype(F32).T, base[::2, ::-3],
                base.astype(F32)[3], base.astype(F32)[:0], np.asarray(base.astype(F32)[1, 1]),
                base.astype(F32).reshape(480)]
    op = getattr(jc, name)
    for _ in range(2):
        for x in variants + variants[::-1]:
            got = op(x)
            assert_close(got, _unary_ref(name, x), getattr(np, name)(x).dtype)
            assert got.shape == x.shape
    assert core.EAGER_ARRAY_CALLS.get((op, 1)) is not None


def test_eager_binary_ops_and_their_slow_cases():
    """Arrays only go direct; lists, Python and numpy scalars, keywords and Tracers take
    the general path, each with its own right result."""
    rng = rng_for("eager-binary")
    a, b = make((50,), F32, rng=rng), make((50,), F64, rng=rng)
    for x, y in [(a, a), (a, b), (b, a), (a[::2], b[1::2]), (a.reshape(5, 10), a[:10]),
                 (a, 2.0), (3, a), (a, np.float64(0.5)), (a.tolist(), a), (a, True)]:
        got = jc.add(x, y)
        want = np.add(x, y)
        assert_close(got, f64(np.asarray(x)) + f64(np.asarray(y)), want.dtype)
    assert_close(jc.sum(a.reshape(5, 10), axis=1), f64(a).reshape(5, 10).sum(1), F32,
                 scale=np.abs(f64(a)).reshape(5, 10).sum(1))
    traced = jc.jit(lambda x: jc.exp(x) * 2)        # the op on a Tracer records a node
    assert_close(traced(a), np.exp(f64(a)) * 2, F32)


def test_eager_fast_path_in_threads():
    a = make((300,), F32, rng=rng_for("eager-threads"))
    b = a.astype(F64)
    results, errors = [], []

    def work(x):
        try:
            for _ in range(200):
                results.append((x, jc.exp(x)))
        except Exception as e:       # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(x,)) for x in (a, b, a[::2], b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 800
    for x, r in results[::37]:
        assert_close(r, np.exp(f64(x)), x.dtype)


@pytest.mark.parametrize("n_inputs", [1, 8, 9, 25])
def test_graphs_with_many_inputs_call_through_the_entry(n_inputs):
    """The fast call is emitted for up to FASTCALL_MAX_INPUTS array inputs (its checks are
    IR of their own, compiled per graph); wider graphs give the same results via the entry."""
    from jitcore.llvm.entry import FASTCALL_MAX_INPUTS

    def total(*xs):
        acc = xs[0] * 1.0
        for k, x in enumerate(xs[1:]):
            acc = acc + x * float(k + 2)
        return acc
    rng = rng_for("many-inputs", n_inputs)
    xs = [make((37,), F32, rng=rng) for _ in range(n_inputs)]
    f = jc.jit(total)
    want = f64(xs[0]) + sum(f64(x) * (k + 2) for k, x in enumerate(xs[1:]))
    for _ in range(3):                                   # first call, then the steady path
        got = f(*xs)
        assert_close(got, want, F32, scale=sum(np.abs(f64(x)) * (k + 1) for k, x in enumerate(xs)))
    compiled = next(iter(f._plans.values())).compiled
    assert (compiled.fastcall_address is not None) == (n_inputs <= FASTCALL_MAX_INPUTS)

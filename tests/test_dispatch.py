"""Alternating signatures on one jitted function: every call right, whichever signature came
before it, from one thread or several; no compile after warm-up; the lookup that finds a
known signature's plan (jitcore/call/dispatch.py) tells every pair of known signatures apart and
only proposes: arguments that need normalizing still go through the slow path."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import jitcore as jc
from helpers import ALL_DTYPES, F32, F64, I32, assert_close, f64, make, rng_for
from jitcore.call.dispatch import Dispatch, plan_key


def _affine(a, b, c):
    return a * b + c


def _ref(a, b, c):
    """numpy on the original dtypes (result dtype and, for integers, exact values)."""
    return np.asarray(a) * np.asarray(b) + np.asarray(c)


def _check(got, args):
    want = _ref(*args)
    if want.dtype.kind == "f":
        a, b, c = (f64(v) for v in args)
        # a*b + c cancels where the terms have opposite signs: bound by the terms' size
        assert_close(got, _ref(a, b, c), want.dtype, scale=np.abs(a * b) + np.abs(c))
    else:
        assert_close(got, want, want.dtype)


def _triple(shape, dtype, key):
    rng = rng_for("dispatch", key, shape, str(dtype))
    return tuple(make(shape, dtype, rng=rng) for _ in range(3))


def _signature_families() -> dict:
    """name -> argument tuples of distinct signatures, one family per way to differ."""
    base = _triple((6, 10), F32, "base")
    big = make((12, 20), F32, rng=rng_for("dispatch big"))
    return {
        "dtypes": [_triple((6, 10), d, "dt") for d in ALL_DTYPES],
        "strides": [base, tuple(a.T.copy().T for a in base),          # Fortran order
                    (big[:6, :10], big[6:, :10], big[:6, 10:]),       # rows of 20
                    (big[::2, ::2], big[1::2, ::2], big[::2, 1::2]),  # stepped views
                    tuple(a[::-1] for a in base)],                    # reversed rows
        "shapes": [_triple(s, F32, "sh") for s in [(60,), (6, 10), (10, 6), (2, 3, 10), ()]],
        "one argument differs": [base, (base[0], base[1].astype(F64), base[2]),
                                 (base[0], base[1], base[2].T.copy().T),
                                 (base[0], base[1], base[2][:1])],  # broadcast c
        "mixed": [_triple((6, 10), F32, "m"), _triple((6, 10), I32, "m"),
                  tuple(a.T for a in _triple((10, 6), F64, "m")), _triple((7,), F32, "m")],
    }


@pytest.mark.parametrize("family", list(_signature_families()))
def test_alternating_signatures_give_each_its_own_result(family):
    sigs = _signature_families()[family]
    f = jc.jit(_affine)
    for args in sigs:                                   # warm-up: one compile each
        _check(f(*args), args)
    compiles = jc.cache_info()["compiles"]
    plans = len(f._plans)
    order = list(range(len(sigs))) * 3 + [0, 0, 1, 1, 0, 1, 1, 0] + \
        list(reversed(range(len(sigs)))) * 2
    for i in order:
        _check(f(*sigs[i]), sigs[i])
    assert jc.cache_info()["compiles"] == compiles
    assert len(f._plans) == plans == len(sigs)


def test_alternating_with_out():
    sigs = _signature_families()["mixed"]
    f = jc.jit(_affine)
    outs = [np.empty_like(_ref(*a)) for a in sigs]
    for _ in range(3):
        for args, o in zip(sigs, outs):
            assert f(*args, out=o) is o
            _check(o, args)
            _check(f(*args), args)                      # out= and fresh calls interleaved
    x = make((6, 10), F32, rng=rng_for("dispatch out alias"))
    y = x.copy()
    ref = _ref(f64(x), f64(x), f64(x))
    f(x, x, x, out=x)                                   # aliases the inputs: slow path, right
    assert_close(x, ref, F32, scale=np.abs(f64(y)) ** 2 + np.abs(f64(y)))
    _check(f(*sigs[1]), sigs[1])
    assert np.array_equal(f(y, y, y), f(y, y, y))


def test_alternating_with_arguments_that_need_normalizing():
    """Same shape and dtype as a known signature, but byte-swapped, unaligned, a subclass
    or a list: the lookup proposes that plan, its native entry refuses the array, and the
    slow path converts it."""
    f = jc.jit(lambda x: x * 2.0 + 1.0)
    x32 = make(8, F32, rng=rng_for("norm 32"))
    x64 = make(8, F64, rng=rng_for("norm 64"))
    swapped = x32.astype(">f4")
    unaligned = np.zeros(8 * 4 + 1, np.uint8)[1:].view(np.float32)
    unaligned[:] = x32[::-1]
    subclass = x32.view(type("Subclass", (np.ndarray,), {}))   # (masked arrays are refused)
    for _ in range(3):
        for arg, ref, dtype in [(x32, f64(x32), F32), (x64, x64, F64),
                                (swapped, f64(x32), F32), (unaligned, f64(x32)[::-1], F32),
                                (subclass, f64(x32), F32), (list(x64), x64, F64)]:
            r = f(arg)
            assert type(r) is np.ndarray
            assert_close(r, ref * 2.0 + 1.0, dtype)


def test_alternating_arities():
    f = jc.jit(lambda *xs: sum(xs[1:], xs[0]))
    a, b, c = _triple((5, 4), F32, "arity")
    calls = [(a,), (a, b), (a, b, c), (b.astype(F64), c)]
    for _ in range(3):
        for args in calls:
            ref = sum((f64(x) for x in args[1:]), f64(args[0]))
            assert_close(f(*args), ref, np.result_type(*args))


def test_two_threads_alternating_signatures():
    """Two threads call one function, each walking the signatures in its own order."""
    sigs = _signature_families()["mixed"] + _signature_families()["dtypes"][1:4]
    f = jc.jit(_affine)
    for args in sigs:
        f(*args)
    refs = [f(*args).copy() for args in sigs]
    compiles = jc.cache_info()["compiles"]
    errors, barrier = [], threading.Barrier(2)

    def worker(k):
        try:
            barrier.wait()
            order = list(range(len(sigs)))
            for r in range(300):
                i = order[(r * (k + 1) + k) % len(order)]
                got = f(*sigs[i])
                if not (got.dtype == refs[i].dtype and np.array_equal(got, refs[i])):
                    errors.append((k, r, i))
        except Exception as e:                        # noqa: BLE001 (reported below)
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:5]
    assert jc.cache_info()["compiles"] == compiles
    for args, ref in zip(sigs, refs):
        _check(ref, args)


def test_the_same_signature_twice_running_goes_back_to_the_direct_path():
    f = jc.jit(_affine)
    a, b = _triple((6, 10), F32, "direct"), _triple((6, 10), F64, "direct")
    for args in (a, b, a, b):
        f(*args)
    assert f._fast is not f._plans[plan_key(b)].fast       # alternating: look up first
    f(*a)
    f(*a)
    assert f._fast is f._plans[plan_key(a)].fast           # steady: no lookup


def test_evicted_signatures_alternate_correctly():
    """More alternating signatures than the signature LRU holds: evicted ones compile again,
    every result right, and the lookup never returns an evicted plan's stale result."""
    code = """
        import numpy as np, jitcore as jc
        f = jc.jit(lambda x: x * 3 - 1)
        xs = [np.arange(n, dtype=np.float32) for n in range(1, 7)]
        xs += [x.astype(np.int32) for x in xs[:3]]
        for _ in range(4):
            for x in xs:
                r = f(x)
                assert r.dtype == x.dtype and np.array_equal(r, x * 3 - 1), (x, r)
        assert len(f._plans) <= 3
        print("ok")
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300,
                          env={**os.environ, "JITCORE_CACHE_SIZE": "3", "JITCORE_DISK_CACHE": "0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_alternating_signatures_in_a_forked_child():
    code = """
        import os, numpy as np, jitcore as jc
        f = jc.jit(lambda a, b: a * b + 1)
        a32 = np.arange(12, dtype=np.float32).reshape(3, 4)
        a64, at = a32.astype(np.float64), np.asfortranarray(a32)
        for x in (a32, a64, at):
            f(x, x)
        pid = os.fork()
        if pid == 0:
            ok = all(np.array_equal(f(x, x), x * x + 1) and f(x, x).dtype == x.dtype
                     for _ in range(50) for x in (a32, a64, at))
            os._exit(0 if ok else 3)
        assert os.waitpid(pid, 0)[1] == 0
        print("ok")
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ok" in proc.stdout


# ---- the lookup table itself -----------------------------------------------------------------

def _keys(arg_lists):
    return [plan_key(args) for args in arg_lists]


@pytest.mark.parametrize("family", list(_signature_families()))
def test_dispatch_tells_known_signatures_apart(family):
    sigs = _signature_families()[family]
    plans = {k: i for i, k in enumerate(_keys(sigs))}
    d = Dispatch(plans)
    for i, args in enumerate(sigs):
        assert d.table.get(d.read(args)) == i
    assert len(d.features) <= len(sigs) - 1           # greedy: at least a pair per feature


def test_dispatch_reads_the_cheapest_attribute_that_suffices():
    a32, a64 = _triple((4, 4), F32, "cheap"), _triple((4, 4), F64, "cheap")
    assert Dispatch(dict.fromkeys(_keys([a32, a64]))).features in (
        [("dtype", 0)], [("strides", 0)])
    shapes = [_triple(s, F32, "cheap") for s in [(16,), (4, 4), (2, 8)]]
    assert Dispatch(dict.fromkeys(_keys(shapes))).features == [("shape", 0)]
    arities = [(a32[0],), a32[:2], a32]
    d = Dispatch({k: i for i, k in enumerate(_keys(arities))})
    assert d.features[0] == ("arity", None)
    assert [d.table.get(d.read(args)) for args in arities] == [0, 1, 2]


def test_dispatch_refuses_non_arrays_and_finds_nothing_for_unknown_values():
    """A list has no dtype or strides to read; a value no known signature has finds no
    plan (a value that one has proposes that plan, which its native entry then checks)."""
    a32, a64 = _triple((4, 4), F32, "unknown"), _triple((4, 4), F64, "unknown")
    d = Dispatch({plan_key(a32): "f32", plan_key(a64): "f64"})
    with pytest.raises((AttributeError, TypeError)):
        d.read(([1.0], 2.0, 3.0))
    assert d.table.get(d.read(tuple(x.astype(np.int8) for x in a32))) is None

"""The call path chooser (jitcore/call/choice.py): which of the three paths a call takes, that
plans build what it names, that explain() says it, and that a wrong CPython/numpy struct
offset refuses the native code (every call still right, through the Python slow path)
instead of crashing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import jitcore as jc
from jitcore.call import choice as callchoice
from jitcore.call.choice import ENTRY, NATIVE, SLOW
from jitcore.llvm import entry as abi

ROOT = Path(__file__).resolve().parents[1]
X = np.arange(32, dtype=np.float32).reshape(4, 8)


def _plan(f, *args):
    f(*args)
    (plan,) = f._plans.values()
    return plan


def _explained(f, *args) -> dict:
    lines = f.explain(*args).splitlines()
    return {k: v for k, _, v in (line.partition(": ") for line in lines)
            if k in ("call path", "call path with out=")}


CASES = {
    "one output": (lambda a, b: a * b + 1.0, (X, X), NATIVE, "1 output, 2 inputs"),
    "two outputs": (lambda a: (a + 1.0, a * 2.0), (X,), ENTRY, "2 outputs"),
    "ten inputs": (lambda *a: sum(a[1:], a[0]), (X,) * 10, ENTRY,
                   f"10 array inputs (the native fast call takes at most "
                   f"{abi.FASTCALL_MAX_INPUTS})"),
    "a gather": (lambda a, i: jc.take(a, i, axis=0), (X, np.array([3, 0, 1])), ENTRY,
                 "index checks"),
}


@pytest.mark.parametrize("case", CASES)
def test_explain_names_the_path_and_the_plan_takes_it(case):
    fn, args, path, why = CASES[case]
    if path == NATIVE and not callchoice.NATIVE_EMPTY_OK:
        pytest.skip("no native fast call here")
    f = jc.jit(fn)
    said = _explained(f, *args)["call path"]
    assert said.startswith(path + ": ") and why in said, said
    plan = _plan(f, *args)
    assert plan.path.name == path
    assert isinstance(plan.fast, type(len)) == (path == NATIVE)


def test_large_outputs_leave_the_fast_call_to_the_output_cache():
    f = jc.jit(lambda a: a + 1.0)
    big = jc.spec((abi.LARGE_OUTPUT_BYTES // 4,), jc.float32)
    said = _explained(f, big)["call path"]
    assert said.startswith(ENTRY) and "output buffer cache" in said, said


def test_out_path():
    one = _explained(jc.jit(lambda a: a + 1.0), X)["call path with out="]
    two = _explained(jc.jit(lambda a: (a + 1.0, a - 1.0)), X)["call path with out="]
    assert one.startswith(ENTRY) and two.startswith(SLOW + ": out= with 2 outputs"), (one, two)


@pytest.mark.parametrize("name", [n for n in dir(abi) if n.endswith("_OFFSET")])
def test_the_layout_check_catches_each_wrong_offset(name):
    """Each offset the native code reads, off by one word, fails the import-time check."""
    offsets = types.SimpleNamespace(**{n: getattr(abi, n) for n in dir(abi) if n.isupper()})
    assert callchoice.native_layout_ok(offsets) == callchoice.NATIVE_LAYOUT_OK
    setattr(offsets, name, getattr(abi, name) + 8)
    assert not callchoice.native_layout_ok(offsets)


def _every_path_still_right():
    """Calls of each kind of plan give numpy's results (shared with the subprocess below)."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    f = jc.jit(lambda a, b: a * b + 1.0)
    for _ in range(3):                                    # the steady call, too
        np.testing.assert_allclose(f(x, x), x * x + 1.0)
    np.testing.assert_allclose(f(x[:, ::2], x[:, ::2]), x[:, ::2] ** 2 + 1.0)
    two = jc.jit(lambda a: (a + 1.0, a * 2.0))
    r = two(x)
    np.testing.assert_allclose(r[0], x + 1.0)
    np.testing.assert_allclose(r[1], x * 2.0)
    out = np.empty_like(x)
    assert f(x, x, out=out) is out
    np.testing.assert_allclose(out, x * x + 1.0)
    scaled = jc.jit(lambda a, s: a * s)
    np.testing.assert_allclose(scaled(x, 3.0), x * 3.0)
    take = jc.jit(lambda a, i: jc.take(a, i, axis=0))
    np.testing.assert_allclose(take(x, np.array([3, 0])), x[[3, 0]])
    with pytest.raises(IndexError):
        take(x, np.array([4]))
    dyn = jc.jit(lambda a: a.sum(axis=-1), dynamic=True)
    for n in (2, 5, 3):
        np.testing.assert_allclose(dyn(x[:n]), x[:n].sum(axis=-1))
    for fn, args in ((f, (x, x)), (two, (x,)), (take, (x, np.array([1])))):
        assert all(path.name == SLOW for path in _plan_paths(fn, args))
        assert "call path: Python slow path: this interpreter's tuple layout" in \
            fn.explain(*args)


def _plan_paths(fn, args):
    key = jc.api.plan_key(fn._normalized(args))
    plan = fn._plans[key]
    return plan.path, plan.out_path


def test_a_refused_layout_sends_every_call_through_the_slow_path(monkeypatch):
    monkeypatch.setattr(callchoice, "NATIVE_LAYOUT_OK", False)
    monkeypatch.setattr(callchoice, "NATIVE_EMPTY_OK", False)
    _every_path_still_right()


def test_a_wrong_offset_before_the_check_is_refused_and_never_crashes(tmp_path):
    """A fresh interpreter whose llvm/entry.py says tuple items sit a word further than they
    do, from before jitcore's import-time check: the check refuses the native code (which,
    generated with that offset, would read garbage), and every call is right."""
    script = textwrap.dedent(f"""
        import importlib.abc, importlib.machinery, sys

        class WrongOffset(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "jitcore.llvm.entry":
                    return None
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                run = spec.loader.exec_module

                def exec_module(module):
                    run(module)
                    module.TUPLE_ITEMS_OFFSET += 8
                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, WrongOffset())
        sys.path.insert(0, {str(ROOT)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import jitcore.call.choice as callchoice
        assert not callchoice.NATIVE_LAYOUT_OK
        import test_callchoice
        test_callchoice._every_path_still_right()
        print("ok")
    """)
    env = {**os.environ, "JITCORE_DISK_CACHE": "0",          # keep its code off the disk
           "JITCORE_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), \
        done.stdout + done.stderr

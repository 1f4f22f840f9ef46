"""Compile workers (jitcore/llvm/compile_pool.py): kernels' machine code built in helper
processes is the machine code this process builds, byte for byte; results are numpy's with
and without workers; a worker that dies or a module a worker cannot build falls back to this
process (an invalid module still raises CompileError); no pool starts for a small compile
or with JITCORE_COMPILE_WORKERS=0."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, assert_close, make, rng_for
from jitcore import config
from jitcore.ir.errors import CompileError
from jitcore.llvm import compile_pool, engine
from jitcore.targetinfo import select_target


def _program(a, w, b):
    h = jc.relu(a @ w + b)                     # a GEMM with its epilogue
    s = jc.exp(h - h.max(axis=1, keepdims=True))
    return s / s.sum(axis=1, keepdims=True), jc.tanh(a).mean(axis=0)


def _reference(a, w, b):
    a, w, b = (x.astype(np.float64) for x in (a, w, b))
    h = np.maximum(a @ w + b, 0)
    s = np.exp(h - h.max(axis=1, keepdims=True))
    return s / s.sum(axis=1, keepdims=True), np.tanh(a).mean(axis=0)


def _inputs(m: int, k: int, n: int):
    rng = rng_for(f"compile pool {m} {k} {n}")
    small = np.float32(0.25)                   # logits of a few units: exp well conditioned
    return (make((m, k), F32, rng=rng) * small, make((k, n), F32, rng=rng) * small,
            make((n,), F32, rng=rng))


def _check(f, args):
    """float32 against float64: the GEMM's error (~k ulp of its terms) passes through exp."""
    k = args[0].shape[1]
    for got, want in zip(f(*args), _reference(*args)):
        assert_close(got, want, F32, rtol=4 * k * np.finfo(np.float32).eps)


def _compile_fresh(monkeypatch, shape, workers):
    """Compile _program at a shape no other test uses, with the disk cache off, recording
    the kernel modules' texts; returns (function, inputs, texts)."""
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    texts = []
    add = engine.Prebuilds.add
    monkeypatch.setattr(engine.Prebuilds, "add",
                        lambda self, text, cache: (texts.append(text), add(self, text, cache)))
    args = _inputs(*shape)
    with config.override(compile_workers=workers):
        f = jc.jit(_program)
        f(*args)
    return f, args, texts


def test_a_workers_machine_code_is_the_one_built_here(monkeypatch):
    _, _, texts = _compile_fresh(monkeypatch, (37, 53, 29), 1)
    assert len(texts) >= compile_pool.MIN_MODULES
    target = select_target()
    mach = engine.machine(target)
    pool = compile_pool.pool(1)
    futures = [pool.submit(t, target.triple, target.cpu, target.features) for t in texts]
    for text, future in zip(texts, futures):
        obj, optimized, stages, where = future.result(timeout=120)
        assert where == "worker" and set(stages) == {"parse", "optimize", "machine_code"}
        here, here_ir, _ = engine._machine_code_stages(text, mach)
        assert obj == here and optimized == here_ir


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_results_are_numpys_with_and_without_workers(monkeypatch, workers):
    before = dict(engine.STATS)
    shape = (41 + workers, 19, 23 + 2 * workers)
    f, args, texts = _compile_fresh(monkeypatch, shape, workers)
    _check(f, args)
    by_workers = engine.STATS["modules_built_by_workers"] - before["modules_built_by_workers"]
    built = engine.STATS["modules_compiled"] - before["modules_compiled"]
    assert built >= len(set(texts))
    if workers == 0:
        assert by_workers == 0
    # (with workers, this thread may take every module before a worker has started)
    assert by_workers <= built


def test_no_pool_without_workers_or_for_a_small_compile(monkeypatch):
    assert compile_pool.pool(0) is None
    target = select_target()
    prebuilds = engine.Prebuilds(target, workers=1)
    assert prebuilds.pool(compile_pool.MIN_MODULES - 1) is None
    assert prebuilds.pool(compile_pool.MIN_MODULES) is not None
    assert compile_pool.worker_count(None) <= compile_pool.MAX_AUTO_WORKERS


def test_a_dead_worker_leaves_the_build_to_this_process(monkeypatch):
    pool = compile_pool.pool(1)
    pool.workers[0].process.kill()
    pool.workers[0].process.wait()
    f, args, _ = _compile_fresh(monkeypatch, (43, 31, 17), 1)
    _check(f, args)
    compile_pool.pool(2)                    # (a pool of live workers for the next tests)


def test_a_module_no_worker_can_build_raises_compile_error_here(monkeypatch):
    target = select_target()
    prebuilds = engine.Prebuilds(target, workers=1)
    bad = "define void @f() {\n  ret i32 0\n}\n"
    modules = [(bad + f"; {k}\n", None) for k in range(compile_pool.MIN_MODULES)]
    for text, cache in modules:
        prebuilds.add(text, cache)
    assert prebuilds.futures                  # the workers took them, and could not build
    with pytest.raises(CompileError, match="LLVM rejected the generated IR"):
        engine.compile_modules(modules, [], target, prebuilds=prebuilds)


def test_the_setting_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("JITCORE_COMPILE_WORKERS", "2")
    assert config.from_env().compile_workers == 2
    monkeypatch.setenv("JITCORE_COMPILE_WORKERS", "-1")
    with pytest.warns(RuntimeWarning, match="one fewer than the usable CPUs"):
        assert config.from_env().compile_workers is None

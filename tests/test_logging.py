"""The "jitcore" logger: INFO per compile (graph, kernels, ms, memory/disk cache), DEBUG for
pass decisions, WARNING for fallbacks; silent by default; nothing on cached calls."""
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import jitcore as jc
from jitcore import compiler
from jitcore.llvm import engine, graph_module
from jitcore.cache.lru import LRU


@pytest.fixture
def fresh_caches(monkeypatch, tmp_path):
    """An empty disk cache and an empty in-memory cache for this test."""
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path / "cache"))
    as_a_new_process(monkeypatch)


def as_a_new_process(monkeypatch):
    """Empty in-memory caches: of compiled graphs, of kernels' IR and of LLVM objects."""
    monkeypatch.setattr(compiler, "_CACHE", LRU())
    monkeypatch.setattr(graph_module, "_EMITTED", type(graph_module._EMITTED)())
    monkeypatch.setattr(engine, "OBJECTS", engine.ObjectCache())


def records(caplog, level, logger="jitcore"):
    return [r for r in caplog.records if r.levelno == level and r.name.startswith(logger)]


def test_info_per_compile_with_cache_outcomes(caplog, fresh_caches, monkeypatch, tmp_path):
    caplog.set_level(logging.INFO, logger="jitcore")
    x = np.linspace(0, 1, 64, dtype=np.float32)

    def shifted_exp(a):
        return jc.exp(a) + 1.0
    jc.jit(shifted_exp)(x)
    (first,) = records(caplog, logging.INFO)
    text = first.getMessage()
    assert text.startswith("shifted_exp: compiled 1 kernel(s) in ")
    assert " ms (memory cache miss, disk cache miss)" in text

    caplog.clear()
    jc.jit(shifted_exp)(x)                        # another function, the same graph
    (second,) = records(caplog, logging.INFO)
    assert second.getMessage() == ("shifted_exp: compiled graph found in the memory cache "
                                   "(1 kernel(s))")

    caplog.clear()
    as_a_new_process(monkeypatch)                 # the disk has it, whole
    jc.jit(shifted_exp)(x)
    (third,) = records(caplog, logging.INFO)
    assert third.getMessage().endswith("(memory cache miss, whole graph from the disk cache)")

    caplog.clear()
    as_a_new_process(monkeypatch)                 # the disk has its modules only
    for path in (tmp_path / "cache").glob("*.jco"):
        if b'"kind": "graph"' in path.read_bytes():       # (the header says)
            path.unlink()
    jc.jit(shifted_exp)(x)
    (fourth,) = records(caplog, logging.INFO)
    assert "(memory cache miss, disk cache hit)" in fourth.getMessage()

    caplog.clear()
    monkeypatch.setattr(compiler, "_CACHE", LRU())   # the graph is gone, its modules are not
    monkeypatch.setenv("JITCORE_CACHE_DIR", str(tmp_path / "another_cache"))
    jc.jit(shifted_exp)(x)
    (fifth,) = records(caplog, logging.INFO)
    assert fifth.getMessage().endswith("(memory cache miss, disk cache not needed, 2 of 2 LLVM "
                                       "module(s) already built here)"), fifth.getMessage()


def test_disk_cache_off_is_said(caplog, fresh_caches, monkeypatch):
    monkeypatch.setenv("JITCORE_DISK_CACHE", "0")
    caplog.set_level(logging.INFO, logger="jitcore")
    jc.jit(lambda a: a * 3.0 - 2.0)(np.ones(5, np.float32))
    (rec,) = records(caplog, logging.INFO)
    assert rec.getMessage().endswith("(memory cache miss, disk cache off)")


def test_debug_pass_decisions(caplog, fresh_caches):
    caplog.set_level(logging.DEBUG, logger="jitcore")
    f = jc.jit(lambda a, n: (a ** n, jc.sum(a, axis=1) + 1.0))   # integer pow stays scalar
    f(np.arange(12, dtype=np.int32).reshape(3, 4), np.full((3, 4), 2, np.int32))
    debug = [r.getMessage() for r in records(caplog, logging.DEBUG)]
    assert any("legality: unsupported_op:pow" in m for m in debug), debug
    assert any(m.startswith("fuse_outputs: fusion stops before ") for m in debug), debug
    assert {r.name for r in records(caplog, logging.DEBUG)} >= {"jitcore", "jitcore.passes"}


def test_warning_for_copied_inputs_once_per_signature(caplog):
    caplog.set_level(logging.DEBUG, logger="jitcore")
    f = jc.jit(lambda a: a + 1.0)
    swapped = np.arange(6, dtype=">f4")
    np.testing.assert_array_equal(f(swapped), np.arange(6, dtype=np.float64) + 1.0)
    (warn,) = records(caplog, logging.WARNING)
    assert "argument 0 (a) is copied on every call" in warn.getMessage()
    caplog.clear()
    for _ in range(3):
        f(swapped)
    assert not caplog.records


def test_no_records_on_cached_calls(caplog):
    f = jc.jit(lambda a, b: a * b + 1.0)
    a = np.ones(32, np.float32)
    f(a, a)
    f(np.ones((2, 3), np.float64), np.ones((2, 3)))       # two plans: the lookup path too
    caplog.set_level(logging.DEBUG, logger="jitcore")
    caplog.clear()
    for _ in range(5):
        f(a, a)
        f(np.ones((2, 3)), np.ones((2, 3)))
        f(a, a, out=np.empty(32, np.float32))
    assert not caplog.records


def test_silent_by_default():
    """No logging configured: nothing on stderr, even for a warning; a NullHandler is set."""
    code = ("import numpy as np, logging, jitcore as jc\n"
            "jc.jit(lambda a: a + 1.0)(np.arange(4, dtype='>f4'))\n"
            "print(any(isinstance(h, logging.NullHandler) "
            "for h in logging.getLogger('jitcore').handlers))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ), check=True)
    assert done.stdout.strip() == "True"
    assert done.stderr == ""


def test_basic_config_shows_compiles():
    code = ("import logging, numpy as np, jitcore as jc\n"
            "logging.basicConfig(level=logging.INFO, format='%(name)s %(levelname)s %(message)s')\n"
            "jc.jit(lambda a: a * 2.0)(np.ones(3, np.float32))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ), check=True)
    assert "jitcore INFO <lambda>: compiled 1 kernel(s) in " in done.stderr

"""Memory: many calls and many compiles stay within a stated RSS bound, the compile caches are
bounded LRUs and the machine code of evicted graphs is freed. Each scenario runs in a fresh
process (examples/memory.py, settings are read once per process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Bounds (measured on 2-core Zen 5, llvmlite 0.50 / LLVM 22; see the README's memory section):
# calls allocate nothing that stays; besides what the bounded code caches hold (kernel IR and
# objects, reported and bounded separately) a compile leaves ~15-20 KB that LLVM never returns
# (an empty JITDylib per linked library: llvmlite cannot remove one), so 1,000 compiles < 40 MB.
CALLS_GROWTH_MB = 2.0
PER_COMPILE_KB = 40.0        # before the pass-manager fix: ~110 KB per compile
CODE_CACHES_MB = 16 + 64     # graph_module._EMITTED_MAX_BYTES + engine.ObjectCache's bound


def run_memory(*args: str, cache_size: int) -> dict:
    proc = subprocess.run([sys.executable, str(REPO / "examples" / "memory.py"), "--json",
                           "--cache-size", str(cache_size), *args],
                          capture_output=True, text=True, timeout=400,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_calls_and_distinct_compiles_stay_within_the_rss_bound():
    r = run_memory("--calls", "100000", "--compiles", "250", "--shapes", "40", cache_size=32)
    assert r["rss_after_calls_mb"] - r["rss_start_mb"] < CALLS_GROWTH_MB, r
    # large outputs: what stays is the output buffer cache's idle blocks, within its bound
    assert r["large_calls_growth_mb"] < CALLS_GROWTH_MB, r
    assert r["output_cache_mb"] <= r["output_cache_limit_mb"], r
    assert r["output_cache_mb"] > 0 or r["output_cache_limit_mb"] < 40, r    # (36 MB outputs)
    assert r["per_compile_kb"] < PER_COMPILE_KB, r
    assert 0 < r["code_cache_growth_mb"] <= CODE_CACHES_MB, r
    assert r["cache"]["size"] <= 32 and r["cache"]["max_size"] == 32
    # a live function called with 40 shapes keeps at most the LRU's worth of compiled graphs
    assert r["live_compiled_graphs"] <= 32 + 1, r


def run_with_cache_size(code: str, size: int) -> str:
    """Run code in a fresh interpreter with an in-memory LRU of `size` and no disk cache;
    its stdout (a crash or a failed assert fails the test)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "JITCORE_CACHE_SIZE": str(size), "JITCORE_DISK_CACHE": "0"})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_evicted_graphs_are_freed_and_recompiled_on_demand():
    out = run_with_cache_size("""
        import gc, weakref, numpy as np, jitcore as jc
        from jitcore.compiler import CompiledGraph
        f = jc.jit(lambda x: x * 3.0 - 1.0)
        first = None
        for n in range(1, 25):                      # 24 signatures through an LRU of 4
            x = np.arange(n, dtype=np.float32)
            assert np.array_equal(f(x), x * 3 - 1)
            if first is None:
                first = weakref.ref(f._plans[next(iter(f._plans))].compiled)
        gc.collect()
        live = [o for o in gc.get_objects() if isinstance(o, CompiledGraph)]
        assert first() is None, "the first compiled graph was not freed"
        assert len(live) <= 5, len(live)
        assert len(f._plans) <= 4
        x = np.arange(1, dtype=np.float32)           # evicted: compiled again, still right
        assert np.array_equal(f(x), x * 3 - 1)
        y = np.arange(24, dtype=np.float32)          # the last fast path still runs
        for _ in range(1000):
            assert np.array_equal(f(y), y * 3 - 1)
        print("compiles", jc.cache_info()["compiles"])
    """, size=4)
    assert "compiles 25" in out


def test_the_fast_path_keeps_the_code_it_calls_alive():
    """The last signature's fast path can outlive its plan: here the next signature's first
    call fails (a wrong out=) after its plan evicted the old one from both LRUs of size 1."""
    out = run_with_cache_size("""
        import gc, numpy as np, jitcore as jc
        f = jc.jit(lambda x: x * 3.0 - 1.0)
        a = np.arange(8, dtype=np.float32)
        assert np.array_equal(f(a), a * 3 - 1)       # the fast path: a's code
        try:
            f(np.arange(9, dtype=np.float32), out=np.empty(3, np.float32))
        except jc.ShapeError as e:
            assert "out" in str(e), e                 # the error is the wrong out=
        else:
            raise AssertionError("a wrong out= was accepted")
        gc.collect()
        for _ in range(100):
            assert np.array_equal(f(a), a * 3 - 1)
        print("ok")
    """, size=1)
    assert "ok" in out

"""Resident memory under many calls and many distinct compiles (issue 7's memory item).

Runs in a fresh process: N calls of one small jitted function, calls with large fresh
outputs (the output buffer cache holds freed ones for reuse, reported apart), then M
compiles of distinct graphs (a*b + k for M different constants k) with a small in-memory
LRU, so most compiled graphs are evicted and their machine code must be freed, then one
live function called with S different shapes. RSS is read from /proc/self/statm.

    python examples/memory.py [--calls 100000] [--compiles 1000] [--shapes 1000]
                              [--cache-size 64] [--json]

The disk cache is off for the run (every compile goes through LLVM); tests/test_memory.py
runs it with smaller numbers and asserts the bounds.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(calls: int, compiles: int, shapes: int) -> dict:
    import numpy as np
    import jitcore as jc

    a = np.linspace(-1, 1, 1024, dtype=np.float32)
    b = np.linspace(2, 3, 1024, dtype=np.float32)
    out = np.empty_like(a)
    f = jc.jit(lambda x, y: x * y + 1.0)
    f(a, b, out=out)
    for _ in range(1000):                   # warm: allocator pools, first-call paths
        f(a, b, out=out)
        f(a, b)
    gc.collect()
    r = {"rss_start_mb": rss_mb()}
    t0 = time.perf_counter()
    for i in range(calls):
        if i % 2:
            f(a, b, out=out)
        else:
            f(a, b)                         # a fresh output each time
    r["calls_s"] = time.perf_counter() - t0
    gc.collect()
    r["rss_after_calls_mb"] = rss_mb()

    # large fresh outputs: the output buffer cache keeps freed blocks for the next calls, up
    # to its bound (JITCORE_OUTPUT_CACHE_MB), by design: reported, like the code caches
    big = np.full(9 << 20, 0.5, np.float32)         # 36 MB: outputs this size are cached
    g = jc.jit(lambda x: x * 2.0)
    g(big)                                           # (freed at once: cached)
    gc.collect()
    rss0, held0 = rss_mb(), jc.cache_info()["output_cache_bytes"]
    for _ in range(max(calls // 5000, 4)):
        assert g(big)[-1] == 1.0
    gc.collect()
    r["output_cache_mb"] = jc.cache_info()["output_cache_bytes"] / 2**20
    r["output_cache_limit_mb"] = jc.cache_info()["output_cache_limit"] / 2**20
    r["large_calls_growth_mb"] = rss_mb() - rss0 - \
        (jc.cache_info()["output_cache_bytes"] - held0) / 2**20
    del big, g

    def compile_one(k: int):
        g = jc.jit(lambda x, y: x * y + float(k))
        assert g(a, b)[3] == np.float32(a[3] * b[3] + k)

    warm = min(50, compiles)                # LLVM's own one-time tables are not a leak
    for k in range(warm):
        compile_one(-1 - k)
    gc.collect()
    r["rss_before_compiles_mb"] = rss_mb()
    code_before = jc.cache_info()["code_cache_bytes"]
    steps, t0 = [], time.perf_counter()
    for k in range(compiles):
        compile_one(k)
        if (k + 1) % max(compiles // 4, 1) == 0:
            gc.collect()
            steps.append((k + 1, round(rss_mb(), 1)))
    r["compiles_s"] = time.perf_counter() - t0
    gc.collect()
    r["rss_after_compiles_mb"] = rss_mb()
    r["rss_steps"] = steps
    # the kernel-IR memo and the object cache keep every new kernel's code up to their byte
    # bounds (tens of MB): that is what they are for, so it is reported, not counted as a leak
    r["code_cache_growth_mb"] = (jc.cache_info()["code_cache_bytes"] - code_before) / 2**20
    r["per_compile_kb"] = 1024 * (r["rss_after_compiles_mb"] - r["rss_before_compiles_mb"]
                                  - r["code_cache_growth_mb"]) / max(compiles, 1)

    # one live function over ever new shapes: its own signature table is an LRU too
    h = jc.jit(lambda x: jc.tanh(x) * 2.0)
    t0 = time.perf_counter()
    for n in range(1, shapes + 1):
        x = np.full(n, 0.5, np.float32)
        assert abs(h(x)[-1] - 2 * np.tanh(np.float32(0.5))) < 1e-6
    r["shapes_s"] = time.perf_counter() - t0
    gc.collect()
    r["rss_after_shapes_mb"] = rss_mb()
    r["per_shape_kb"] = 1024 * (r["rss_after_shapes_mb"] - r["rss_after_compiles_mb"]) \
        / max(shapes, 1)
    r["live_compiled_graphs"] = sum(type(o).__name__ == "CompiledGraph"
                                    for o in gc.get_objects())
    r["cache"] = jc.cache_info()
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=100_000)
    ap.add_argument("--compiles", type=int, default=1000)
    ap.add_argument("--shapes", type=int, default=1000, help="shapes one function is called with")
    ap.add_argument("--cache-size", type=int, default=64, help="JITCORE_CACHE_SIZE for the run")
    ap.add_argument("--json", action="store_true",
                    help="print the figures and their stamp (jitcore/bench/stamp.py) as one "
                         "JSON line")
    opts = ap.parse_args()
    if "jitcore" in sys.modules or os.environ.get("_JITCORE_MEMORY_CHILD") != "1":
        # settings are read once per process: run the measurement in a child that has them
        import subprocess
        env = dict(os.environ, JITCORE_CACHE_SIZE=str(opts.cache_size),
                   JITCORE_DISK_CACHE="0", _JITCORE_MEMORY_CHILD="1")
        return subprocess.call([sys.executable, __file__, *sys.argv[1:]], env=env)
    r = measure(opts.calls, opts.compiles, opts.shapes)
    if opts.json:
        from jitcore.bench.stamp import stamp
        print(json.dumps({**r, "stamp": stamp({"command": " ".join(
            ["python examples/memory.py", *sys.argv[1:]]), **vars(opts)})}))
        return 0
    print(f"{opts.calls} calls of a*b+1 (1024 float32, half with out=): "
          f"RSS {r['rss_start_mb']:.1f} -> {r['rss_after_calls_mb']:.1f} MB "
          f"in {r['calls_s']:.2f} s")
    print(f"calls with fresh 36 MB outputs: RSS growth {r['large_calls_growth_mb']:.1f} MB "
          f"besides the output buffer cache, which holds {r['output_cache_mb']:.1f} MB of "
          f"freed outputs for reuse (bound {r['output_cache_limit_mb']:.0f} MB)")
    print(f"{opts.compiles} distinct compiles, LRU of {r['cache']['max_size']} "
          f"(holds {r['cache']['size']}): RSS {r['rss_before_compiles_mb']:.1f} -> "
          f"{r['rss_after_compiles_mb']:.1f} MB in {r['compiles_s']:.1f} s "
          f"({r['code_cache_growth_mb']:.1f} MB of it in the bounded code caches, "
          f"{r['per_compile_kb']:.1f} KB per compile besides)")
    print("  RSS after " + ", ".join(f"{n}: {mb} MB" for n, mb in r["rss_steps"]))
    print(f"one function over {opts.shapes} shapes: RSS -> {r['rss_after_shapes_mb']:.1f} MB "
          f"in {r['shapes_s']:.1f} s ({r['per_shape_kb']:.1f} KB per shape); "
          f"{r['live_compiled_graphs']} compiled graphs alive")
    return 0


if __name__ == "__main__":
    sys.exit(main())

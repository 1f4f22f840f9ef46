"""Races in the intra-op pool's protocol (runtime/pool_ir.py), made likely by widening their
window: the runtime module is built with sched_yield calls inserted at a chosen point, so a
thread stalled there (as the OS may stall it on a busy machine, for a whole time slice) lets
the other threads run through the interleaving that is otherwise a nanoseconds-wide window.

Each case runs in a fresh interpreter (the pool is built once per process) without the disk
cache (the widened module must not be stored), under a timeout: a hang fails the test."""
import os
import subprocess
import sys
import textwrap

import pytest

WIDEN = textwrap.dedent("""
    import os, re
    os.environ["JITCORE_DISK_CACHE"] = "0"
    import jitcore.parallel as parallel
    from jitcore.runtime import build_pool_module

    def widened(*args):
        text, n = re.subn({pattern!r}, r'%"widen.a" = call i32 @"sched_yield"()\\n'
                          r'  %"widen.b" = call i32 @"sched_yield"()\\n  \\g<0>',
                          build_pool_module(*args))
        assert n == 1, "the widened point is not in the runtime module any more"
        return text

    parallel.build_pool_module = widened
""")

# a region's publish, just before it stores its cursor: a worker still in the previous
# region's claim loop sees that region's cursor (all claimed) next to the new region's
# other fields, and must claim nothing from it
BEFORE_CURSOR = r'store atomic i64 %"?[\w.]+"?, i64\* @"jc_pool_job_cursor" release'

STRESS = textwrap.dedent("""
    import time
    import numpy as np
    import jitcore as jc
    jc.set_num_threads({threads})

    def graph(a, b, c):
        return jc.tanh(a) * 2.0, b + 1.0, jc.tanh(c) - 1.0, a * 3.0

    f, one = jc.jit(graph), jc.jit(graph, num_threads=1)
    rng = np.random.default_rng(0)
    # consecutive regions of different chunk counts and extents
    args = [tuple(rng.standard_normal(n).astype(np.float32) for n in sizes)
            for sizes in ((5000, 70000, 20000), (300000, 9000, 120000), (40000, 200000, 7000))]
    want = [one(*a) for a in args]
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < {seconds}:
        for a, w in zip(args, want):
            out = f(*a)
            calls += 1
            assert all(np.array_equal(o, x) for o, x in zip(out, w)), calls
    print(calls)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the pool needs Linux futexes")
@pytest.mark.parametrize("threads", [2, 4])
def test_a_late_worker_claims_nothing_from_a_half_published_region(threads):
    code = WIDEN.format(pattern=BEFORE_CURSOR) + STRESS.format(threads=threads, seconds=2.0)
    env = {k: v for k, v in os.environ.items()
           if k not in ("JITCORE_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{threads} threads: a parallel region hung (caller waiting for chunks "
                    "no thread runs)")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.split()[-1]) > 0

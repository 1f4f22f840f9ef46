"""Parallel regions with one core busy with another process: a region never waits for a
worker the OS has not run (runtime/pool_ir.py: chunks claimed by compare-and-swap, the
caller works through what is left and waits only for claimed chunks), so a 2-thread call is
not slower than the 1-thread call. examples/busy_core_bench.py reports the figures (target
1.1x); the bound here is loose, for noisy 2-core CI machines."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import jitcore as jc
from helpers import F32, assert_close, f64, make, rng_for

BOUND = 1.5

needs_two_cores = pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs 2 usable cores and sched_setaffinity")


def _chain(x):
    return jc.tanh(x * 1.1 + 0.2) * jc.tanh(x)


def _ref(x):
    x = f64(x)
    return np.tanh(x * 1.1 + 0.2) * np.tanh(x)


class _Spinner:
    """A process spinning on one core (the last this process may use)."""

    def __enter__(self):
        core = max(os.sched_getaffinity(0))
        code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
        self.proc = subprocess.Popen([sys.executable, "-c", code])
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def _per_call(fn, x, min_time=0.01) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        fn(x)
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / n


@needs_two_cores
@pytest.mark.parametrize("size", [1 << 14, 1 << 20])
def test_two_threads_are_not_slower_than_one_with_a_core_busy(size):
    x = make((size,), F32, rng=rng_for("busy", size), positive=True)
    one, two = jc.jit(_chain, num_threads=1), jc.jit(_chain, num_threads=2)
    assert_close(two(x), _ref(x), F32)
    assert np.array_equal(one(x), two(x))       # chunking never changes the result
    # up to three attempts: under `-n auto` another test worker may hold the other core
    # as well, which is not the situation measured (one core busy); one good attempt shows
    # the pool does not wait on the busy core, a real regression fails all three
    ratios = []
    with _Spinner():
        for _ in range(3):
            t1, t2 = [], []
            for _ in range(9):                   # interleaved samples
                t1.append(_per_call(one, x))
                t2.append(_per_call(two, x))
            ratios.append(np.median(t2) / np.median(t1))
            if ratios[-1] <= BOUND:
                break
        assert np.array_equal(one(x), two(x))
    assert min(ratios) <= BOUND, (f"{size} elements: 2 threads / 1 thread per call "
                                  f"{', '.join(f'{r:.2f}x' for r in ratios)}")


def test_many_regions_from_many_threads_with_a_core_busy():
    """Regions of every size, back to back from several Python threads (one region at a
    time takes the pool, the others run inline), late workers included: every result is
    bitwise the 1-thread result."""
    rng = rng_for("busy-regions")
    xs = [make((n,), F32, rng=rng, positive=True) for n in (1, 100, 5000, 1 << 14, 1 << 17, 300001)]
    one, two = jc.jit(_chain, num_threads=1), jc.jit(_chain, num_threads=2)
    want = [one(x) for x in xs]
    errors = []

    def work(k):
        try:
            for i in range(60):
                j = (i + k) % len(xs)
                if not np.array_equal(two(xs[j]), want[j]):
                    errors.append(f"size {xs[j].size}")
        except Exception as e:        # pragma: no cover - reported below
            errors.append(repr(e))
    context = _Spinner() if hasattr(os, "sched_getaffinity") else None
    if context is not None:
        context.__enter__()
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        if context is not None:
            context.__exit__(None, None, None)
    assert not errors, errors[:5]
    for x, w in zip(xs, want):
        assert_close(w, _ref(x), F32)

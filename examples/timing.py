"""The timing helper the example benchmarks share (they run as scripts: `examples/` is on
sys.path, so `from timing import median_time`)."""
from __future__ import annotations

import time

import numpy as np


def median_time(fn, repeat: int = 9, min_time: float = 0.0, clock=time.perf_counter) -> float:
    """Median seconds per call over `repeat` samples, after one warm-up call; each sample
    calls fn until at least `min_time` seconds have passed (one call when 0). `clock`:
    time.thread_time counts only this thread's CPU time (single-threaded code on a loaded
    machine: time spent waiting for a core is left out)."""
    fn()
    return float(np.median([time_per_call(fn, min_time, clock) for _ in range(repeat)]))


def time_per_call(fn, min_time: float = 0.0, clock=time.perf_counter) -> float:
    """One sample: seconds per call of fn, calling it until at least `min_time` seconds
    have passed (one call when 0)."""
    n, t0 = 0, clock()
    while True:
        fn()
        n += 1
        elapsed = clock() - t0
        if elapsed >= min_time:
            return elapsed / n

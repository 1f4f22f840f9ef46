"""Dispatch cost when one jitted function sees several signatures in turn.

`f = jc.jit(lambda a, b, c: a * b + c)` on small arrays (1,024 elements: the arithmetic is
a few hundred nanoseconds, the rest is the call path), called in a fixed cycle over

  - 1 signature                  float32 (32, 32), every call the same
  - 2 alternating dtypes         float32 / float64 (32, 32)
  - 2 alternating stride patterns  C-contiguous / transposed views, float32 (32, 32)
  - 4 alternating shapes         (1024,) (32, 32) (16, 64) (4, 256), float32

and numpy's `a * b + c` on the same arrays in the same orders, interleaved in one run.
Prints microseconds of CPU time per call (medians of --repeat samples): "steady" makes the same calls
grouped by signature (each signature's own steady cost), "alternating" in turn; their ratio
is the cost of switching signatures (target: within ~1.5x).

    python examples/dispatch_bench.py [--repeat N] [--calls N]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import jitcore as jc
from timing import median_time


def triples(shape, dtype, transposed=False, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.random(shape).astype(dtype) for _ in range(3))
    return (a.T, b.T, c.T) if transposed else (a, b, c)


def cases() -> dict:
    f32, f64 = np.float32, np.float64
    one = triples((32, 32), f32)
    return {
        "1 signature": [one] * 4,
        "2 alternating dtypes": [one, triples((32, 32), f64)] * 2,
        "2 alternating stride patterns": [one, triples((32, 32), f32, transposed=True)] * 2,
        "4 alternating shapes": [triples(s, f32) for s in [(1024,), (32, 32), (16, 64),
                                                           (4, 256)]],
    }


def alternating(fn, args_list: list, calls: int):
    """A sample: `calls` calls of fn, walking the argument list in turn (the signature
    changes at every call)."""
    rounds = max(calls // len(args_list), 1)

    def run():
        for _ in range(rounds):
            for args in args_list:
                fn(*args)
    return run, rounds * len(args_list)


def blocked(fn, args_list: list, calls: int):
    """The same calls grouped by argument tuple: each signature's steady cost, so that the
    difference to `alternating` is the cost of switching alone."""
    rounds = max(calls // len(args_list), 1)

    def run():
        for args in args_list:
            for _ in range(rounds):
                fn(*args)
    return run, rounds * len(args_list)


def sample_us(run, n: int) -> float:
    """One sample: microseconds per call over one run (n calls), after one warm-up run, in
    this thread's CPU time (the calls are single-threaded; on a shared machine, wall time
    would add whatever the other processes take)."""
    return median_time(run, repeat=1, clock=time.thread_time) / n * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--calls", type=int, default=1000, help="calls per sample")
    opts = ap.parse_args()
    f = jc.jit(lambda a, b, c: a * b + c)

    def numpy_fn(a, b, c):
        return a * b + c
    table = cases()
    for args_list in table.values():       # compile every signature, and check the values
        for args in args_list:
            got, ref = f(*args), numpy_fn(*args)
            assert got.dtype == ref.dtype and np.allclose(got, ref, rtol=1e-6)
    compiles = jc.cache_info()["compiles"]
    print(f"a * b + c, 1,024 elements per call, CPU us per call (medians of {opts.repeat} samples "
          f"of {opts.calls} calls, all columns interleaved)")
    print(f"{'case':30s} {'steady':>8s} {'alternating':>12s} {'ratio':>6s} "
          f"{'vs 1 sig':>9s} | {'numpy steady':>12s} {'alternating':>12s} {'ratio':>6s}")
    base = None
    for name, args_list in table.items():
        runs = [alternating(f, args_list, opts.calls), blocked(f, args_list, opts.calls),
                alternating(numpy_fn, args_list, opts.calls),
                blocked(numpy_fn, args_list, opts.calls)]
        samples = [[] for _ in runs]
        for _ in range(opts.repeat):       # interleaved: load on the machine hits all alike
            for run, sample in zip(runs, samples):
                sample.append(sample_us(*run))
        t_alt, t_steady, np_alt, np_steady = (float(np.median(s)) for s in samples)
        base = t_alt if base is None else base
        print(f"{name:30s} {t_steady:8.2f} {t_alt:12.2f} {t_alt / t_steady:5.2f}x "
              f"{t_alt / base:8.2f}x | {np_steady:12.2f} {np_alt:12.2f} "
              f"{np_alt / np_steady:5.2f}x")
    grew = jc.cache_info()["compiles"] - compiles
    print("ratio: alternating / steady on the same signatures (the cost of switching: for "
          "numpy, what alternating costs any code); vs 1 sig: alternating / the 1-signature case")
    print(f"compiles during the timed calls: {grew}")


if __name__ == "__main__":
    main()

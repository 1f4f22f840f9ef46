"""The numpy-surface ufunc table: jitcore's time / numpy's, 1 thread, 1M elements, float32
and float64, both measured in the same run (medians of several samples; outputs go to
preallocated arrays on both sides so that the allocator is out of the race).

    python examples/ufunc_bench.py [name ...] [--n N] [--repeat R]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import jitcore as jc
from timing import median_time

UNARY = ["cbrt", "sinh", "cosh", "tanh", "expm1", "log1p", "exp", "exp2", "log", "log2",
         "log10", "arcsinh", "arccosh", "arctanh", "arcsin", "arccos", "arctan", "sin", "cos",
         "sqrt"]
BINARY = ["arctan2", "hypot", "logaddexp", "power"]
# inputs inside each function's domain (a wide spread of magnitudes where it has one)
DOMAIN = {"arccosh": (1.0, 50.0), "arctanh": (-0.99, 0.99), "arcsin": (-1.0, 1.0),
          "arccos": (-1.0, 1.0), "log1p": (-0.9, 50.0), "log": (0.01, 100.0),
          "log2": (0.01, 100.0), "log10": (0.01, 100.0), "sqrt": (0.0, 100.0),
          "power": (0.1, 4.0)}


def _inputs(name, n, dtype, rng):
    lo, hi = DOMAIN.get(name, (-20.0, 20.0))
    args = [rng.uniform(lo, hi, n).astype(dtype)]
    if name in BINARY:
        args.append(rng.uniform(lo, hi, n).astype(dtype))
    return args


def row(name, n, repeat, rng):
    ratios = []
    for dtype in (np.float32, np.float64):
        args = _inputs(name, n, dtype, rng)
        fn = getattr(np, name)
        out_np, out_jc = np.empty(n, dtype), np.empty(n, dtype)
        jf = jc.jit(lambda *xs, _fn=fn: _fn(*xs))
        jf(*args, out=out_jc)                                # compile
        t_np = median_time(lambda: fn(*args, out=out_np), repeat, clock=time.thread_time)
        t_jc = median_time(lambda: jf(*args, out=out_jc), repeat, clock=time.thread_time)
        ratios.append((t_jc / t_np, t_jc, t_np))
    return ratios


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*")
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    jc.set_num_threads(1)
    rng = np.random.default_rng(0)
    names = a.names or UNARY + BINARY
    print(f"{'ufunc':10s} {'f32 jc/np':>9s} {'jc ms':>7s} {'np ms':>7s}   "
          f"{'f64 jc/np':>9s} {'jc ms':>7s} {'np ms':>7s}")
    for name in names:
        (r32, j32, n32), (r64, j64, n64) = row(name, a.n, a.repeat, rng)
        print(f"{name:10s} {r32:9.2f} {j32*1e3:7.3f} {n32*1e3:7.3f}   "
              f"{r64:9.2f} {j64*1e3:7.3f} {n64*1e3:7.3f}", flush=True)


if __name__ == "__main__":
    main()

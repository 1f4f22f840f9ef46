"""Fresh outputs from the output buffer cache against numpy's allocator (issue 21).

relu(a*b+c)*0.5 on float32 arrays of several sizes, three ways, samples interleaved in one
run: `out=` (no allocation at all), a fresh output from the cache (jitcore's default for
outputs of output_cache.MIN_BYTES and up) and a fresh output from numpy's allocator (the
cache off for that function). Prints median ms per call and the ratios to `out=` (target:
fresh output within 1.1x of `out=` for outputs >= 1 MB).

    python examples/output_cache_bench.py [--repeat N] [--threads N]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import jitcore as jc
from jitcore.cache import outputs as output_cache


def chain(a, b, c):
    return jc.maximum(a * b + c, 0) * 0.5


def sample(fn, min_time: float = 0.05) -> float:
    n, t0 = 0, time.perf_counter()
    while True:
        fn()                          # the result is freed at once (its block comes back)
        n += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / n


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=9)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sizes", default="1024,262144,1048576,16777216")
    args = p.parse_args()
    print(f"relu(a*b+c)*0.5, float32, {args.threads} thread(s); median ms per call")
    print(f"{'elements':>10} {'out=':>9} {'cache':>9} {'numpy':>9} {'cache/out':>10} "
          f"{'numpy/out':>10}")
    for n in (int(s) for s in args.sizes.split(",")):
        rng = np.random.default_rng(0)
        a, b, c = (rng.random(n, dtype=np.float32) for _ in range(3))
        out = np.empty(n, np.float32)
        cached = jc.jit(chain, num_threads=args.threads)
        cached(a, b, c)
        limit = output_cache.CACHE.limit
        output_cache.CACHE.limit = 0              # this function's plan: numpy's allocator
        plain = jc.jit(chain, num_threads=args.threads)
        plain(a, b, c)
        output_cache.CACHE.limit = limit
        ways = {"out": lambda: cached(a, b, c, out=out), "cache": lambda: cached(a, b, c),
                "numpy": lambda: plain(a, b, c)}
        times = {k: [] for k in ways}
        for _ in range(args.repeat):
            for k, fn in ways.items():
                times[k].append(sample(fn))
        m = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
        print(f"{n:>10} {m['out']:9.3f} {m['cache']:9.3f} {m['numpy']:9.3f} "
              f"{m['cache'] / m['out']:10.2f} {m['numpy'] / m['out']:10.2f}")


if __name__ == "__main__":
    main()

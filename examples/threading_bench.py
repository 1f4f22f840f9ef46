"""Thread benchmarks (ratios in one run): pool fork/join latency, intra-op speedups, and
the inter-op example of PyTorch's CPU threading note.

    python examples/threading_bench.py [--threads N]

1. Empty parallel region: fork/join cost of the native pool in microseconds (a region of
   one empty chunk per thread, minus the cost of the same call without the pool).
2. Intra-op speedup of N threads over 1: gelu (tanh form) on 16M floats (compute-bound) and
   a*b+c on 16M floats (memory-bound).
3. The note's example: `compute_z` forked while `y = x @ w_y` runs, then `y + z`, with 1
   intra-op thread and 2 inter-op threads, against running both in sequence.
"""
from __future__ import annotations

import argparse
import timeit

import numpy as np

import jitcore as jc
from timing import median_time
from jitcore.parallel import pool


def fork_join_latency(threads: int):
    jc.set_num_threads(threads)
    p = pool()
    n = 20000
    p.empty_region()
    region = np.median([min(timeit.repeat(p.empty_region, number=n, repeat=3)) / n
                        for _ in range(5)])
    base = min(timeit.repeat(p.noop_call, number=n, repeat=3)) / n
    print(f"empty parallel region, {threads} threads: {(region - base) * 1e6:.2f} us fork/join "
          f"(target <= 5 us)")


def speedups(threads: int):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(1 << 24).astype(np.float32) for _ in range(3))
    gelu = jc.jit(lambda x: jc.gelu(x, approximate="tanh"))
    triad = jc.jit(lambda a, b, c: a * b + c)
    for name, f, args, goal in (("gelu 16M (compute-bound)", gelu, (a,), " (target >= 1.8x)"),
                                ("a*b+c 16M (memory-bound)", triad, (a, b, c), "")):
        out = f(*args)
        times = {}
        for n in (1, threads):
            jc.set_num_threads(n)
            times[n] = median_time(lambda: f(*args, out=out))
        print(f"{name}: 1 thread {times[1] * 1e3:.2f} ms, {threads} threads "
              f"{times[threads] * 1e3:.2f} ms, speedup {times[1] / times[threads]:.2f}x{goal}")


@jc.jit
def compute_z(x, w_z):
    return x @ w_z


@jc.jit
def forward(x, w_y, w_z):
    """The note's example, compiled: the fork is a native task of this graph."""
    fut = jc.fork(compute_z, x, w_z)       # launch compute_z asynchronously
    y = x @ w_y                            # runs in parallel with compute_z
    z = jc.wait(fut)                       # wait for the result of compute_z
    return y + z


@jc.jit
def forward_sequential(x, w_y, w_z):
    return x @ w_y + x @ w_z


def seed_example():
    """PyTorch's example: fork compute_z, run y = x @ w_y meanwhile, then wait and add;
    natively inside one compiled graph, and from Python with jitted pieces."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    w_y = rng.standard_normal((1024, 512)).astype(np.float32)
    w_z = rng.standard_normal((1024, 512)).astype(np.float32)
    jc.set_num_threads(1)
    np.testing.assert_allclose(forward(x, w_y, w_z), forward_sequential(x, w_y, w_z),
                               rtol=1e-5, atol=1e-3)
    t_native = median_time(lambda: forward(x, w_y, w_z))
    t_seq = median_time(lambda: forward_sequential(x, w_y, w_z))

    def from_python(x):
        fut = jc.fork(compute_z, x, w_z)       # a jitted call on an inter-op thread
        y = compute_z(x, w_y)
        return y + jc.wait(fut)
    t_python = median_time(lambda: from_python(x))
    print(f"seed example (x @ w_y with compute_z forked), 1 intra-op + "
          f"{jc.get_num_interop_threads()} inter-op threads: sequential {t_seq * 1e3:.2f} ms; "
          f"fork inside @jc.jit {t_native * 1e3:.2f} ms ({t_seq / t_native:.2f}x); "
          f"fork from Python {t_python * 1e3:.2f} ms ({t_seq / t_python:.2f}x) (target >= 1.6x)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    jc.set_num_interop_threads(2)
    print(jc.parallel_info())
    fork_join_latency(args.threads)
    speedups(args.threads)
    seed_example()


if __name__ == "__main__":
    main()

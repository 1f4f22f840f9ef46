"""Parallel calls while another process keeps one core busy.

A child process spins on one core (pinned there with os.sched_setaffinity), the way another
program on the machine would. Then a tanh chain on 16K, 1M and 16M float32 elements runs at
1 and at 2 intra-op threads, interleaved (samples alternate between the two), and the
script prints the medians and their ratio: a parallel region must not wait for a worker the
OS has preempted, so the 2-thread call should be no slower than the 1-thread one (target:
ratio <= 1.1).

    python examples/busy_core_bench.py [--repeat N] [--sizes 16384,1048576,16777216]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

import jitcore as jc
from timing import time_per_call


def spin(core: int, stop) -> None:
    os.sched_setaffinity(0, {core})
    while not stop.is_set():
        for _ in range(10000):
            pass


class Spinner:
    """A process spinning on `core` while the `with` block runs."""

    def __init__(self, core: int):
        self.core = core

    def __enter__(self):
        ctx = mp.get_context("fork")
        self.stop = ctx.Event()
        self.proc = ctx.Process(target=spin, args=(self.core, self.stop), daemon=True)
        self.proc.start()
        time.sleep(0.2)                    # let it start spinning
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


def chain(x):
    return jc.tanh(x * 1.1 + 0.2) * jc.tanh(x)


def measure(size: int, repeat: int, min_time: float = 0.02) -> tuple:
    """(1-thread median s, 2-thread median s), samples interleaved."""
    x = np.random.default_rng(0).random(size, dtype=np.float32)
    one, two = jc.jit(chain, num_threads=1), jc.jit(chain, num_threads=2)
    one(x), two(x)
    t1, t2 = [], []
    for _ in range(repeat):
        t1.append(time_per_call(lambda: one(x), min_time))
        t2.append(time_per_call(lambda: two(x), min_time))
    return float(np.median(t1)), float(np.median(t2))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=11)
    p.add_argument("--sizes", default="16384,1048576,16777216")
    p.add_argument("--core", type=int, default=None, help="the core to keep busy "
                   "(default: the last one this process may use)")
    args = p.parse_args()
    core = args.core if args.core is not None else max(os.sched_getaffinity(0))
    print(f"spinning process pinned to core {core}; cores usable here: "
          f"{sorted(os.sched_getaffinity(0))}")
    with Spinner(core):
        for size in (int(s) for s in args.sizes.split(",")):
            t1, t2 = measure(size, args.repeat)
            print(f"{size:>9} elements: 1 thread {t1 * 1e6:9.1f} us   2 threads "
                  f"{t2 * 1e6:9.1f} us   2t/1t {t2 / t1:5.2f}")


if __name__ == "__main__":
    main()

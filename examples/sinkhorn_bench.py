"""Sinkhorn on a 512x512 float32 cost matrix: jitcore vs numpy, 1 thread each, per step count.

    python examples/sinkhorn_bench.py [--steps 10 20 40 80] [--n 512] [--repeat 5]
                                      [--programs normalize scaling scaling_matmul]

The programs are jitcore/bench/sinkhorn.py's (a step is one row or column normalisation).
Per program and step count it prints the graph's primitive ops in all kernels, the number of
kernels, the most ops in one kernel, the compile time (disk cache off), the median call
times of jitcore and of numpy written as a numpy user would (sinkhorn.NUMPY_PEERS: in place,
matrix-vector products through BLAS), their ratio (< 1: jitcore is faster) and jitcore's largest
error relative to a float64 numpy run. Timings alternate jitcore and numpy in `--rounds`
rounds of `median_time` and report the medians, so a load change on a shared machine hits
both. Goal (issue 12): ratio <= 1 at every step count, ops per kernel bounded, compile time
linear in the steps.
"""
from __future__ import annotations

import argparse
import os
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"                    # before numpy starts its BLAS threads
os.environ.setdefault("JITCORE_DISK_CACHE", "0")   # measure real compiles

import numpy as np  # noqa: E402

import jitcore as jc  # noqa: E402
from jitcore.bench import sinkhorn  # noqa: E402
from timing import median_time  # noqa: E402


def bench(program: str, steps: int, args: tuple, repeat: int, rounds: int) -> dict:
    fn = sinkhorn.PROGRAMS[program](steps)
    jf = jc.jit(fn)
    t0 = time.perf_counter()
    kernels = jf.kernels(*args)
    compile_s = time.perf_counter() - t0
    peer = sinkhorn.NUMPY_PEERS[program](steps)
    ref = fn(*(a.astype(np.float64) for a in args))
    err = float(np.max(np.abs(jf(*args) - ref)) / np.max(np.abs(ref)))
    t_jc, t_np = [], []
    for _ in range(rounds):
        t_jc.append(median_time(lambda: jf(*args), repeat=repeat))
        t_np.append(median_time(lambda: peer(*args), repeat=repeat))
    ms_jc, ms_np = 1e3 * float(np.median(t_jc)), 1e3 * float(np.median(t_np))
    return {"ops": sum(len(k.ops) for k in kernels), "kernels": len(kernels),
            "max_ops": max(len(k.ops) for k in kernels), "compile_s": compile_s,
            "ms_jc": ms_jc, "ms_np": ms_np, "ratio": ms_jc / ms_np, "err": err}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10, 20, 40, 80])
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--programs", nargs="+", default=list(sinkhorn.PROGRAMS),
                        choices=list(sinkhorn.PROGRAMS))
    opts = parser.parse_args()
    jc.set_num_threads(1)
    args = sinkhorn.inputs(opts.n)
    print(f"{'program':15s} {'steps':>5s} {'ops':>6s} {'kernels':>7s} {'max ops':>7s} "
          f"{'compile s':>9s} {'jitcore ms':>10s} {'numpy ms':>9s} {'ratio':>6s} {'rel err':>8s}")
    for program in opts.programs:
        for steps in opts.steps:
            r = bench(program, steps, args[program], opts.repeat, opts.rounds)
            print(f"{program:15s} {steps:5d} {r['ops']:6d} {r['kernels']:7d} {r['max_ops']:7d} "
                  f"{r['compile_s']:9.2f} {r['ms_jc']:10.2f} {r['ms_np']:9.2f} "
                  f"{r['ratio']:6.2f} {r['err']:8.1e}", flush=True)


if __name__ == "__main__":
    main()

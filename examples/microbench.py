"""Microbenchmarks: jitcore vs numpy (and numexpr, torch when installed), every system at the
same thread count (`--threads N`, default 1: the process is pinned to N cores and every
library's pools are sized to N before it loads; numpy's elementwise ufuncs run on one).

Prints compile time of a 10-op fused graph (with a fresh, empty disk cache: every compile
runs LLVM), the per-call cost of `a*b+c` on 1024 floats, and median times with ratios (peer
time / jitcore time: > 1 means jitcore is faster) for an elementwise chain, a row softmax and
a row sum at 1M-16M elements. Peers are written as a competent user would: numpy in place,
numexpr re_evaluate after a first evaluate, torch addcmul + in-place ops under one
inference_mode.

    python examples/microbench.py [--quick] [--repeat N] [--threads N]
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import tempfile
import time


def _threads_from_argv() -> int:
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=1)
    return early.parse_known_args()[0].threads


THREADS = _threads_from_argv()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "JITCORE_NUM_THREADS", "NUMEXPR_MAX_THREADS"):
    os.environ[_var] = str(THREADS)                  # before numpy and the peers load
# a fresh disk cache: the compile figure is LLVM's, not a load from an earlier run
os.environ["JITCORE_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitcore-microbench-")
atexit.register(shutil.rmtree, os.environ["JITCORE_CACHE_DIR"], True)
if hasattr(os, "sched_setaffinity"):                 # N threads = N cores, for everyone
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:THREADS])

import numpy as np                                   # noqa: E402

import jitcore as jc                                 # noqa: E402
from timing import median_time                       # noqa: E402

try:
    import numexpr
    numexpr.set_num_threads(THREADS)
except ImportError:
    numexpr = None
try:
    import torch
    torch.set_num_threads(THREADS)
    torch.set_num_interop_threads(THREADS)
    torch.inference_mode().__enter__()               # once for the script, not per call
except ImportError:
    torch = None


def ten_op_graph(k: float):
    def f(a, b, c):
        x = a * b + c                  # 2
        x = jc.maximum(x, k)           # 3
        x = x * 0.5 - a                # 5
        x = jc.abs(x) + b * c          # 8
        return jc.minimum(x, 4.0) / 3.0   # 10
    return f


def bench_compile(repeat: int):
    a = np.random.rand(4096).astype(np.float32)
    times, llvm = [], []
    for i in range(repeat):
        f = jc.jit(ten_op_graph(0.001 * (i + 1)))      # a new constant: a new graph
        t0 = time.perf_counter()
        f(a, a, a)
        times.append(time.perf_counter() - t0)
        llvm.append(f.explain(a, a, a).rsplit("LLVM ", 1)[1].split(")")[0])
    print(f"compile, 10-op fused elementwise graph (first call: trace + passes + LLVM + run): "
          f"median {np.median(times) * 1e3:.1f} ms over {repeat} fresh graphs "
          f"(LLVM part: {np.median([float(x) for x in llvm]):.1f} ms)")


def bench_call_overhead(repeat: int):
    a, b, c = (np.random.rand(1024).astype(np.float32) for _ in range(3))
    f = jc.jit(lambda a, b, c: a * b + c)
    out = np.empty_like(a)
    t_jc = median_time(lambda: f(a, b, c), repeat, 0.02)
    t_jc_out = median_time(lambda: f(a, b, c, out=out), repeat, 0.02)
    t_np = median_time(lambda: a * b + c, repeat, 0.02)
    print(f"per call, a*b+c on 1024 float32: jitcore {t_jc * 1e6:.2f} us "
          f"(out=: {t_jc_out * 1e6:.2f} us), numpy {t_np * 1e6:.2f} us, "
          f"jitcore/numpy = {t_jc / t_np:.2f}x (target <= 2x)")


def _row(name, n, t_jc, peers):
    cells = "  ".join(f"{p} {t * 1e3:8.3f} ms ({t / t_jc:5.2f}x)" for p, t in peers.items())
    print(f"{name:10s} {n:>10,}  jitcore {t_jc * 1e3:8.3f} ms  {cells}")


def bench_kernels(sizes, repeat: int):
    print("\nmedian time per call; (x) = peer time / jitcore time, > 1 means jitcore is faster")

    @jc.jit
    def chain(a, b, c):
        return jc.relu(a * b + c) * 0.5

    @jc.jit
    def softmax(x):
        return jc.softmax(x, axis=-1)

    @jc.jit
    def rowsum(x):
        return x.sum(axis=1)

    def np_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    def np_chain(a, b, c):
        t = np.multiply(a, b)
        t += c
        np.maximum(t, 0, out=t)
        t *= np.float32(0.5)
        return t

    for n in sizes:
        a, b, c = (np.random.rand(n).astype(np.float32) - 0.5 for _ in range(3))
        peers = {"numpy": median_time(lambda: np_chain(a, b, c), repeat)}
        if numexpr is not None:   # float32 constants, or numexpr computes in float64
            env = {"a": a, "b": b, "c": c, "zero": np.float32(0), "half": np.float32(0.5)}
            numexpr.evaluate("where(a*b+c > zero, a*b+c, zero) * half", local_dict=env)
            peers["numexpr"] = median_time(lambda: numexpr.re_evaluate(local_dict=env), repeat)
        if torch is not None:
            ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
            peers["torch"] = median_time(
                lambda: torch.addcmul(tc, ta, tb).relu_().mul_(0.5), repeat)
        _row("chain", n, median_time(lambda: chain(a, b, c), repeat), peers)

        x = np.random.rand(n // 1024, 1024).astype(np.float32)
        peers = {"numpy": median_time(lambda: np_softmax(x), repeat)}
        if torch is not None:
            tx = torch.from_numpy(x)
            peers["torch"] = median_time(lambda: torch.softmax(tx, dim=-1), repeat)
        _row("softmax", n, median_time(lambda: softmax(x), repeat), peers)
        peers = {"numpy": median_time(lambda: x.sum(axis=1), repeat)}
        if torch is not None:
            peers["torch"] = median_time(lambda: tx.sum(dim=1), repeat)
        _row("row sum", n, median_time(lambda: rowsum(x), repeat), peers)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1M only, fewer repeats")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1, help="threads (and cores) for every "
                    "system (read before anything loads)")
    args = ap.parse_args()
    jc.set_num_threads(args.threads)
    jc.set_num_interop_threads(args.threads)
    info = jc.target_info()
    print(f"jitcore {jc.__version__}, {info['brand']} ({info['cpu']}), {info['isa']}, "
          f"{info['vector_bits']}-bit vectors; numpy {np.__version__}; "
          f"numexpr {numexpr.__version__ if numexpr else 'not installed'}; "
          f"torch {'%s (eager)' % torch.__version__ if torch else 'not installed'}; "
          f"{os.cpu_count()} cpus; every system {args.threads} thread(s) on "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} "
          f"core(s); disk cache: fresh ({os.environ['JITCORE_CACHE_DIR']})")
    repeat = 5 if args.quick else args.repeat
    bench_compile(repeat)
    bench_call_overhead(repeat)
    sizes = [1 << 20] if args.quick else [1 << 20, 1 << 22, 1 << 24]
    bench_kernels(sizes, repeat)


if __name__ == "__main__":
    main()

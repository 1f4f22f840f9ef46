"""Matrix-vector benchmarks (issue 12 item 7): jitcore vs numpy (OpenBLAS) and torch, 1 thread.

A GEMV reads its matrix once and does 2 flops per element read, so it runs at the memory
bandwidth: GB/s here counts the bytes of every operand and the output once. The copy row
measures what this machine streams (np.copyto of the matrix's size, read + write counted),
the ceiling a GEMV can approach. ratio = numpy time / jitcore time (> 1: jitcore faster).

    python examples/gemv_bench.py [--repeat N] [--quick]

numpy runs on one OpenBLAS thread: threadpoolctl limits it when installed, else
OPENBLAS_NUM_THREADS=1 is set before numpy is imported (below). On machines where
OPENBLAS_CORETYPE is set (see the env notes), unset it and OPENBLAS_L2_SIZE together for the
benchmark command only: `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python ...`.
Each jitcore result is checked against a float64 numpy reference before timing.
"""
from __future__ import annotations

import argparse
import os
import sys

try:
    import threadpoolctl
except ImportError:
    threadpoolctl = None
    os.environ["OPENBLAS_NUM_THREADS"] = "1"      # before numpy is imported

import numpy as np  # noqa: E402

import jitcore as jc  # noqa: E402
from timing import median_time  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

MIN_SAMPLE_S = 0.05           # a timing sample repeats short calls up to this long


def cases(n: int, batch: int, bn: int) -> list:
    """(label, function (jitted, and run as is on numpy arrays and torch tensors), operand
    shapes, dtype)."""
    av = lambda a, v: a @ v                                     # noqa: E731
    va = lambda v, a: v @ a                                     # noqa: E731
    atv = lambda a, v: a.T @ v                                  # noqa: E731
    f32, f64 = np.float32, np.float64
    return [
        (f"A @ v  {n}^2 f32", av, ((n, n), (n,)), f32),
        (f"v @ A  {n}^2 f32", va, ((n,), (n, n)), f32),
        (f"A.T @ v {n}^2 f32", atv, ((n, n), (n,)), f32),
        (f"A @ v  {n}^2 f64", av, ((n, n), (n,)), f64),
        (f"v @ A  {n}^2 f64", va, ((n,), (n, n)), f64),
        (f"({batch},{bn},{bn}) @ ({batch},{bn},1) f32", av,
         ((batch, bn, bn), (batch, bn, 1)), f32),
        (f"({batch},1,{bn}) @ ({batch},{bn},{bn}) f32", av,
         ((batch, 1, bn), (batch, bn, bn)), f32),
    ]


def copy_gbps(nbytes: int, repeat: int) -> float:
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    t = median_time(lambda: np.copyto(dst, src), repeat, MIN_SAMPLE_S)
    return 2 * nbytes / t / 1e9


def check(label, fn, got, args, k):
    """Error against float64, relative to sum |a||v| per output: within a K-scaled bound."""
    ref = fn(*(a.astype(np.float64) for a in args))
    scale = fn(*(np.abs(a.astype(np.float64)) for a in args))
    err = np.abs(got - ref) / np.maximum(scale, 1e-300)
    assert got.dtype == args[0].dtype and got.shape == ref.shape, label
    assert err.max() <= 2 * np.sqrt(k) * np.finfo(got.dtype).eps, f"{label}: {err.max():.3g}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--quick", action="store_true", help="n = 1024, batch 64")
    opts = ap.parse_args()
    n, batch, bn = (1024, 64, 256) if opts.quick else (4096, 256, 512)
    jc.set_num_threads(1)
    limiter = threadpoolctl.threadpool_limits(1) if threadpoolctl else None
    if torch is not None:
        torch.set_num_threads(1)
    print(f"numpy {np.__version__}: {'threadpoolctl' if limiter else 'OPENBLAS_NUM_THREADS'}"
          f"=1, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; "
          f"jitcore 1 thread; torch {torch.__version__ + ' 1 thread' if torch else 'absent'}; "
          f"median of {opts.repeat}")
    print(f"copy bandwidth (np.copyto, {n * n * 4 >> 20} MB, read + write): "
          f"{copy_gbps(n * n * 4, opts.repeat):.1f} GB/s")
    head = (f"{'case':>34s} {'jitcore ms':>10s} {'GB/s':>6s} {'numpy ms':>9s} {'GB/s':>6s} "
            f"{'torch ms':>9s} {'np/jc':>6s} {'torch/jc':>8s}  kernel")
    print(head)
    print("-" * len(head))
    rng = np.random.default_rng(0)
    for label, fn, shapes, dtype in cases(n, batch, bn):
        args = [rng.standard_normal(s).astype(dtype) for s in shapes]
        f = jc.jit(fn)
        got = f(*args)
        check(label, fn, got, args, max(max(s) for s in shapes))
        kinds = ",".join(k.kind for k in f.kernels(*args))
        nbytes = sum(a.nbytes for a in args) + got.nbytes
        # interleaved: jitcore, numpy, torch, then again, medians of each
        times = {"jc": [], "np": [], "torch": []}
        targs = [torch.from_numpy(a) for a in args] if torch is not None else None
        for _ in range(3):
            times["jc"].append(median_time(lambda: f(*args), opts.repeat, MIN_SAMPLE_S))
            times["np"].append(median_time(lambda: fn(*args), opts.repeat, MIN_SAMPLE_S))
            if torch is not None:
                times["torch"].append(median_time(lambda: fn(*targs), opts.repeat,
                                                  MIN_SAMPLE_S))
        t = {k: float(np.median(v)) if v else float("nan") for k, v in times.items()}
        print(f"{label:>34s} {t['jc'] * 1e3:10.3f} {nbytes / t['jc'] / 1e9:6.1f} "
              f"{t['np'] * 1e3:9.3f} {nbytes / t['np'] / 1e9:6.1f} {t['torch'] * 1e3:9.3f} "
              f"{t['np'] / t['jc']:6.2f} {t['torch'] / t['jc']:8.2f}  {kinds}", flush=True)


if __name__ == "__main__":
    sys.exit(main())

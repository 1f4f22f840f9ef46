"""argmax/argmin and float32 pow: jitcore vs numpy at 1 thread (issue 12, items 6 and 8).

    PYTHONPATH=. python examples/argmax_pow_bench.py [--repeat N]

Prints, per case, the median ms of jitcore and of numpy (measured interleaved, in the same
run) and their ratio (jitcore / numpy; below 1 is faster). numpy runs these on one thread
anyway; the BLAS thread variables are pinned to 1 for good measure.
"""
from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
from timing import median_time  # noqa: E402

import jitcore as jc  # noqa: E402

N = 4096                 # argmax/argmin inputs are N x N
POW_SIZE = 8 << 20       # pow inputs: 8M float32


def _cases(rng):
    f32 = rng.standard_normal((N, N), dtype=np.float32)
    i32 = rng.integers(-2**31, 2**31 - 1, (N, N), dtype=np.int32)
    for name, x in (("float32", f32), ("int32", i32)):
        for fn in ("argmax", "argmin"):
            for axis in (1, 0):
                npf = getattr(np, fn)
                yield (f"{fn}(axis={axis}) {name} {N}^2",
                       jc.jit(lambda a, npf=npf, axis=axis: npf(a, axis=axis)),
                       lambda a, npf=npf, axis=axis: npf(a, axis=axis), (x,))
    x = rng.uniform(0.0, 4.0, POW_SIZE).astype(np.float32)
    y = rng.uniform(-3.0, 3.0, POW_SIZE).astype(np.float32)
    yield "x ** 2.5 float32 8M", jc.jit(lambda a: a ** 2.5), lambda a: a ** 2.5, (x,)
    yield "x ** y float32 8M", jc.jit(lambda a, b: a ** b), lambda a, b: a ** b, (x, y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    jc.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'case':32s} {'jitcore ms':>11s} {'numpy ms':>9s} {'ratio':>6s}")
    for name, jf, nf, inputs in _cases(rng):
        if args.only and args.only not in name:
            continue
        if "arg" in name:                  # same answer first
            np.testing.assert_array_equal(jf(*inputs), nf(*inputs))
        tj, tn = [], []
        for _ in range(3):                 # interleave the two, median of medians
            tj.append(median_time(lambda: jf(*inputs), args.repeat))
            tn.append(median_time(lambda: nf(*inputs), args.repeat))
        mj, mn = float(np.median(tj)) * 1e3, float(np.median(tn)) * 1e3
        print(f"{name:32s} {mj:11.2f} {mn:9.2f} {mj / mn:6.2f}", flush=True)


if __name__ == "__main__":
    main()

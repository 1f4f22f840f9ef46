"""Indexing and joining ops: jitcore vs numpy at 1 thread (issue 15, "Ops models need").

    PYTHONPATH=. python examples/gather_join_bench.py [--repeat N] [--only NAME]

Prints, per case, the median ms of jitcore and of numpy (measured interleaved, in the same
run) and their ratio (jitcore / numpy; below 1 is faster). Each jitcore function is what a
user writes; the numpy one is its numpy spelling. The fused cases show what fusion saves: the
numpy version makes its temporaries, jitcore computes into place.
"""
from __future__ import annotations

import argparse
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402
from timing import median_time  # noqa: E402

import jitcore as jc  # noqa: E402


def _cases(rng):
    W = rng.standard_normal((30522, 768), dtype=np.float32)
    ids = rng.integers(0, 30522, 128)
    yield ("embedding W[ids] 30522x768, 128 ids", jc.jit(lambda W, i: W[i]),
           lambda W, i: W[i], (W, ids))
    a = rng.standard_normal((4096, 1024), dtype=np.float32)
    b = rng.standard_normal((4096, 1024), dtype=np.float32)
    for axis in (0, 1):
        yield (f"concatenate 2x(4096,1024) f32 axis={axis}",
               jc.jit(lambda a, b, axis=axis: jc.concatenate([a, b], axis=axis)),
               lambda a, b, axis=axis: np.concatenate([a, b], axis=axis), (a, b))
    yield ("concatenate([a*2, b+1], 1) fused",
           jc.jit(lambda a, b: jc.concatenate([a * 2, b + 1], axis=1)),
           lambda a, b: np.concatenate([a * 2, b + 1], axis=1), (a, b))
    x = rng.standard_normal((1024, 1024), dtype=np.float32)
    for axis in (1, 0):
        yield (f"cumsum (1024,1024) f32 axis={axis}",
               jc.jit(lambda x, axis=axis: jc.cumsum(x, axis=axis)),
               lambda x, axis=axis: np.cumsum(x, axis=axis), (x,))
    y = rng.standard_normal(16 << 20, dtype=np.float32)
    yield ("clip 16M f32", jc.jit(lambda y: jc.clip(y, -0.5, 0.5)),
           lambda y: np.clip(y, -0.5, 0.5), (y,))
    img = rng.standard_normal((64, 56, 56), dtype=np.float32)
    yield ("pad (64,56,56) f32 by 1 (H, W)",
           jc.jit(lambda t: jc.pad(t, ((0, 0), (1, 1), (1, 1)))),
           lambda t: np.pad(t, ((0, 0), (1, 1), (1, 1))), (img,))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    args = ap.parse_args()
    jc.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'case':40s} {'jitcore ms':>11s} {'numpy ms':>9s} {'ratio':>6s}")
    for name, jf, nf, inputs in _cases(rng):
        if args.only and args.only not in name:
            continue
        np.testing.assert_allclose(jf(*inputs), nf(*inputs), rtol=1e-5, atol=1e-3)
        tj, tn = [], []
        for _ in range(3):                 # interleave the two, median of medians
            tj.append(median_time(lambda: jf(*inputs), args.repeat, min_time=0.02))
            tn.append(median_time(lambda: nf(*inputs), args.repeat, min_time=0.02))
        mj, mn = float(np.median(tj)) * 1e3, float(np.median(tn)) * 1e3
        print(f"{name:40s} {mj:11.3f} {mn:9.3f} {mj / mn:6.2f}", flush=True)


if __name__ == "__main__":
    main()

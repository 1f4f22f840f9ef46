"""Reduction benchmark (issue 12 items 4 and 5): full reductions and float32 sums over long
axes, jitcore against numpy, both at 1 thread, interleaved in one run.

    python examples/reduction_bench.py [--quick] [--only full|long]

Per case: kernel count, median ms of jitcore and numpy and their ratio, and for float32
results the relative error against a float64 reference (max over the outputs of
|r - ref| / max|ref|) for jitcore and for numpy. `--quick` shrinks the largest inputs.
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")     # before numpy loads
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import jitcore as jc  # noqa: E402
from timing import median_time  # noqa: E402


def _rms_norm(x):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float32(1e-6))


def _layer_norm_np(x):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + np.float32(1e-5))


def _layer_norm(x):
    """jc.layer_norm when traced, numpy's formula on arrays."""
    return _layer_norm_np(x) if isinstance(x, np.ndarray) else jc.layer_norm(x)


def _full_cases(quick: bool):
    big = 4_000_000 if quick else 20_000_000
    bcast = 10_000_000 if quick else 30_000_000
    x13 = np.random.default_rng(0).random((1_000_000, 3), dtype=np.float32)
    col = np.full((big, 1), 0.1, np.float32)
    u8 = np.broadcast_to(np.arange(3, dtype=np.uint8), (bcast, 3))
    return [
        ("sum (1_000_000, 3) f32", lambda x: x.sum(), (x13,)),
        ("max (1_000_000, 3) f32", lambda x: x.max(), (x13,)),
        ("min (1_000_000, 3) f32", lambda x: x.min(), (x13,)),
        ("mean (1_000_000, 3) f32", lambda x: x.mean(), (x13,)),
        (f"sum ({big:_}, 1) f32", lambda x: x.sum(), (col,)),
        (f"sum broadcast_to(arange(3) u8, ({bcast:_}, 3))", lambda x: x.sum(), (u8,)),
        ("sum (1_000_000, 3).T f32", lambda x: x.sum(), (x13.T,)),
        ("argmax (1_000_000, 3) f32", lambda x: x.argmax(), (x13,)),
    ]


def _long_cases(quick: bool):
    n10 = 2_000_000 if quick else 10_000_000
    rng = np.random.default_rng(1)
    a = rng.random((2000, 1), dtype=np.float32)     # the 70000 rows: numpy needs 11 GB
    b = rng.random((1, 40000), dtype=np.float32)
    row = rng.random((1, 4_000_000), dtype=np.float32)
    return [
        (f"sum (1, {n10:_}) of 0.1, axis=1", lambda x: x.sum(axis=1),
         (np.full((1, n10), 0.1, np.float32),)),
        ("sum (1, 1_000_000) of 0.1, axis=1", lambda x: x.sum(axis=1),
         (np.full((1, 1_000_000), 0.1, np.float32),)),
        ("sum (3_000_000, 1) of 0.1, axis=0", lambda x: x.sum(axis=0),
         (np.full((3_000_000, 1), 0.1, np.float32),)),
        ("sum (1, 1, 3_000_000) of 0.1, axis=-1", lambda x: x.sum(axis=-1),
         (np.full((1, 1, 3_000_000), 0.1, np.float32),)),
        ("mean (1, 4_000_000) of 0.1, axis=1", lambda x: x.mean(axis=1),
         (np.full((1, 4_000_000), 0.1, np.float32),)),
        ("sum (2, 1_000_000) of 0.1, axis=1", lambda x: x.sum(axis=1),
         (np.full((2, 1_000_000), 0.1, np.float32),)),
        ("sum (1000, 4096) of 0.1, axis=0", lambda x: x.sum(axis=0),
         (np.full((1000, 4096), 0.1, np.float32),)),
        ("sum ((2000,1)*(1,40000)), axis=1", lambda a, b: (a * b).sum(axis=1), (a, b)),
        ("rms_norm (1, 4_000_000)", _rms_norm, (row,)),
        ("layer_norm (1, 4_000_000)", _layer_norm, (row,)),
    ]


def _rel_err(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    scale = np.max(np.abs(ref)) or 1.0
    return float(np.max(np.abs(got - ref)) / scale)


def run(cases, repeat: int):
    print(f"{'case':48s} {'kernels':>7s} {'jc ms':>9s} {'np ms':>9s} {'ratio':>6s} "
          f"{'jc relerr':>10s} {'np relerr':>10s}")
    for name, fn, args in cases:
        f = jc.jit(fn)
        kernels = len(f.kernels(*args))
        got, want = f(*args), fn(*args)
        # interleave: alternate the two systems sample by sample
        t_jc, t_np = [], []
        for _ in range(repeat):
            t_jc.append(median_time(lambda: f(*args), repeat=1))
            t_np.append(median_time(lambda: fn(*args), repeat=1))
        ms_jc, ms_np = np.median(t_jc) * 1e3, np.median(t_np) * 1e3
        errs = ""
        if np.asarray(want).dtype == np.float32:
            ref = fn(*[np.asarray(x, np.float64) for x in args])
            errs = f"{_rel_err(got, ref):10.2e} {_rel_err(want, ref):10.2e}"
        else:
            assert np.array_equal(np.asarray(got), np.asarray(want)), name
        print(f"{name:48s} {kernels:7d} {ms_jc:9.3f} {ms_np:9.3f} {ms_jc / ms_np:6.2f} {errs}",
              flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs")
    ap.add_argument("--only", choices=("full", "long"))
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    jc.set_num_threads(1)
    if args.only in (None, "full"):
        run(_full_cases(args.quick), args.repeat)
    if args.only in (None, "long"):
        run(_long_cases(args.quick), args.repeat)


if __name__ == "__main__":
    main()

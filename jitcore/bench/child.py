"""One system at one thread count, in its own process: `python -m jitcore.bench.child`.

The parent (jitcore.bench.cli) starts it with the thread variables of every library set
(OPENBLAS/OMP/MKL/NUMBA/JITCORE_NUM_THREADS), so BLAS pools are sized before numpy loads.
It prints one JSON object: a result per workload, and for jitcore the machine's bandwidth
measured by a copy and a triad in the same process.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import numpy as np

from .workloads import BY_NAME, Workload

MIN_SAMPLE_S = 0.02        # a timed sample repeats a call until it lasts this long
CELL_BUDGET_S = 1.0        # slow cells take fewer samples (at least 3)


def time_calls(call, repeat: int) -> tuple:
    """(median, min) seconds per call over up to `repeat` samples."""
    t0 = time.perf_counter()
    call()
    once = max(time.perf_counter() - t0, 1e-9)
    per_sample = max(1, int(MIN_SAMPLE_S / once))
    samples = []
    for _ in range(min(repeat, max(3, int(CELL_BUDGET_S / (once * per_sample))))):
        t0 = time.perf_counter()
        for _ in range(per_sample):
            call()
        samples.append((time.perf_counter() - t0) / per_sample)
    return float(np.median(samples)), float(min(samples))


def max_error(got, want, w: Workload) -> float:
    """The largest |got - want| / (atol + rtol |want|): <= 1 passes."""
    got = np.asarray(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise ValueError(f"shape {got.shape}, expected {want.shape}")
    err = np.abs(got - want) / (w.atol + w.rtol * np.abs(want))
    both_nan = np.isnan(got) & np.isnan(want)
    err[both_nan] = 0.0
    err[np.isnan(err)] = np.inf
    return float(err.max(initial=0.0))


def run_one(w: Workload, system: str, threads: int, tiny: bool, repeat: int) -> dict:
    build = w.builders.get(system)
    if build is None:
        return {"status": "n/a"}
    sizes = w.shapes(tiny)
    args = w.inputs(sizes, np.random.default_rng(0))
    try:
        t0 = time.perf_counter()
        call = build(sizes, args, threads)
        got = call()
        first = time.perf_counter() - t0
        err = max_error(got, w.reference(*(a.astype(np.float64) for a in args)), w)
        if err > 1:
            return {"status": "wrong", "error": f"max error {err:.3g} x tolerance",
                    "first_call_s": first}
        median, best = time_calls(call, repeat)
    except Exception as e:                              # a peer that fails is reported
        return {"status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
                "trace": traceback.format_exc(limit=3)[-800:]}
    out = {"status": "ok", "median_s": median, "min_s": best, "first_call_s": first,
           "max_error": err, "sizes": sizes, "bytes": w.nbytes(sizes)}
    out["gbs"] = out["bytes"] / median / 1e9
    if w.flops is not None:
        out["flops"] = w.flops(sizes)
        out["gflops"] = out["flops"] / median / 1e9
    return out


def bandwidth(threads: int, tiny: bool, repeat: int) -> dict:
    """GB/s of np.copyto (read + write) and of jitcore's triad a + 3b into a fresh output."""
    import jitcore as jc
    n = 1 << (16 if tiny else 24)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    dst = np.empty_like(a)
    triad = jc.jit(lambda a, b: a + 3.0 * b, num_threads=threads)
    runs = {"copy": (2 * a.nbytes, lambda: np.copyto(dst, a)),
            "triad": (3 * a.nbytes, lambda: triad(a, b))}
    return {k: nbytes / time_calls(fn, repeat)[0] / 1e9 for k, (nbytes, fn) in runs.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jitcore.bench.child")
    ap.add_argument("--system", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--tiny", action="store_true")
    opts = ap.parse_args(argv)
    results = {}
    for name in opts.workloads.split(","):
        results[name] = run_one(BY_NAME[name], opts.system, opts.threads, opts.tiny, opts.repeat)
        print(json.dumps({"progress": name}), flush=True)
    report = {"system": opts.system, "threads": opts.threads, "results": results}
    if opts.system == "jitcore":
        report["bandwidth_gbs"] = bandwidth(opts.threads, opts.tiny, opts.repeat)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

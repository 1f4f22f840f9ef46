"""One system at one thread count, in its own process: `python -m jitcore.bench.child`.

The parent (jitcore.bench.cli) starts it pinned to as many cores as threads (CPU affinity,
inherited by every thread any library starts), with the thread variables of every library
and XLA_FLAGS set, and with the cache directories of this system and thread count. The child
imports the system and sizes its pools before anything is timed (systems.prepare), then per
workload: the first call (build + first call: trace and compile where the system compiles),
a check against the float64 reference, natural use timed, then compute only (output
preallocated) checked and timed. Every timed loop records CPU seconds per wall second, minor
page faults and system time per call (getrusage of the whole process). It prints one JSON
object; for jitcore also the bandwidth of a copy and a triad and the fp32 FMA peak of a core.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import traceback

import numpy as np

from .workloads import BY_NAME, F32, Workload

PINNABLE = hasattr(os, "sched_getaffinity")      # Linux: CPU affinity
MIN_SAMPLE_S = 0.02        # a timed sample repeats a call until it lasts this long
CELL_BUDGET_S = 1.0        # slow cells take fewer samples (at least 3)


def _usage() -> tuple:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), u.ru_utime + u.ru_stime, u.ru_stime, u.ru_minflt


def time_calls(call, repeat: int, budget_s: float = CELL_BUDGET_S) -> dict:
    """Median and min seconds per call over up to `repeat` samples, and per timed call: CPU
    seconds per wall second, system seconds and minor page faults of the process."""
    t0 = time.perf_counter()
    call()
    once = max(time.perf_counter() - t0, 1e-9)
    per_sample = max(1, int(MIN_SAMPLE_S / once))
    samples = []
    before = _usage()
    for _ in range(min(repeat, max(3, int(budget_s / (once * per_sample))))):
        t0 = time.perf_counter()
        for _ in range(per_sample):
            call()
        samples.append((time.perf_counter() - t0) / per_sample)
    after = _usage()
    wall, cpu, sys_s, minflt = (b - a for a, b in zip(before, after))
    calls = len(samples) * per_sample
    return {"median_s": float(np.median(samples)), "min_s": float(min(samples)),
            "cpu_per_wall": cpu / wall, "sys_s_per_call": sys_s / calls,
            "minflt_per_call": minflt / calls, "calls": calls}


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


def _failed(e: Exception) -> dict:
    return {"status": "failed", "error": f"{type(e).__name__}: {e}".splitlines()[0][:300],
            "trace": traceback.format_exc(limit=3)[-800:]}


def _compute_only(into, out: np.ndarray, want, w: Workload, repeat: int) -> dict:
    """Check that into() fills the preallocated output (NaN before), then time it."""
    if into is None:
        return {"status": "n/a"}
    try:
        out.fill(np.nan)
        into()
        err = max_error(out, want, w)
        if err > 1:
            return {"status": "wrong", "error": f"max error {err:.3g} x tolerance (out=)"}
        return {"status": "ok", "max_error": err, **time_calls(into, repeat)}
    except Exception as e:                              # a peer that fails is reported
        return _failed(e)


def inputs_and_reference(w: Workload, sizes: dict, data_dir=None) -> tuple:
    """The inputs and the float64 reference; with `data_dir`, computed by the first child
    that needs them and loaded by the others (the full-size references take seconds)."""
    key = "-".join(f"{k}{v}" for k, v in sorted(sizes.items()))
    path = os.path.join(data_dir, f"{w.name}-{key}.npz") if data_dir else None
    if path and os.path.exists(path):
        with np.load(path) as f:
            return tuple(f[f"arg{i}"] for i in range(len(f.files) - 1)), f["want"]
    args = w.inputs(sizes, np.random.default_rng(0))
    want = w.reference(*(a.astype(np.float64) for a in args))
    if path:
        tmp = path + f".{os.getpid()}.tmp.npz"
        np.savez(tmp, want=want, **{f"arg{i}": a for i, a in enumerate(args)})
        os.replace(tmp, path)
    return args, want


def run_one(w: Workload, calls_for, tiny: bool, repeat: int, first_only: bool = False,
            data_dir=None) -> dict:
    """One workload on one system; `calls_for(name, args, out)` as systems.prepare gives it."""
    sizes = w.shapes(tiny)
    args, want = inputs_and_reference(w, sizes, data_dir)
    out = np.empty(np.shape(want), F32)
    try:
        t0 = time.perf_counter()
        calls = calls_for(w.name, args, out)
        if calls is None:
            return {"status": "n/a"}
        natural, into = calls
        got = natural()
        first = time.perf_counter() - t0
        err = max_error(got, want, w)
    except Exception as e:                              # a peer that fails is reported
        return _failed(e)
    if err > 1:
        return {"status": "wrong", "error": f"max error {err:.3g} x tolerance",
                "first_call_s": first}
    if first_only:
        return {"status": "ok", "first_call_s": first}
    try:
        timed = time_calls(natural, repeat)
    except Exception as e:
        return _failed(e)
    cell = {"status": "ok", "first_call_s": first, "max_error": err, "sizes": sizes,
            "bytes": w.nbytes(sizes), **timed}
    if w.flops is not None:
        cell["flops"] = w.flops(sizes)
    cell["compute_only"] = _compute_only(into, out, want, w, repeat)
    return cell


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
    return {k: nbytes / time_calls(fn, repeat)["median_s"] / 1e9
            for k, (nbytes, fn) in runs.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jitcore.bench.child")
    ap.add_argument("--system", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--data-dir", help="where inputs and references are shared between "
                    "children")
    ap.add_argument("--first-calls-only", action="store_true",
                    help="first call and check only (the cold-cache child)")
    opts = ap.parse_args(argv)
    from .systems import prepare
    calls_for = prepare(opts.system, opts.threads)
    results = {}
    for name in opts.workloads.split(","):
        results[name] = run_one(BY_NAME[name], calls_for, opts.tiny, opts.repeat,
                                opts.first_calls_only, opts.data_dir)
        print(json.dumps({"progress": name}), flush=True)
    report = {"system": opts.system, "threads": opts.threads, "results": results,
              "affinity": sorted(os.sched_getaffinity(0)) if PINNABLE else None,
              "os_threads": len(os.listdir("/proc/self/task"))
              if os.path.isdir("/proc/self/task") else None}
    if opts.system == "jitcore":
        import jitcore as jc
        report["interop_threads"] = jc.get_num_interop_threads()
        report["target"] = jc.target_info()["level"]          # JITCORE_TARGET (bench --target)
    if opts.system.startswith("torch"):
        import torch
        report["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    if opts.system == "jitcore" and not opts.first_calls_only:
        from .peak import bf16_peak_gflops, fma_peak_gflops
        report["bandwidth_gbs"] = bandwidth(opts.threads, opts.tiny, opts.repeat)
        report["fma_peak_gflops_per_core"] = fma_peak_gflops()
        report["bf16_peak_gflops_per_core"] = bf16_peak_gflops()
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m jitcore bench`: the benchmark suite against peers, each system in its own process.

    python -m jitcore bench [--only chain,softmax] [--threads 1,2] [--systems jitcore,numpy]
                            [--runs R] [--repeat N] [--no-cold] [--json PATH] [--plot PATH]
                            [--tiny] [--target x86-64-v3]
    python -m jitcore bench --models [...]     whole PyTorch models (jitcore/bench/model_suite.py)
    python -m jitcore bench --generate [...]   a LLaMA generating with a KV cache (generate_suite.py)
    python -m jitcore bench --render RESULTS.json   the README's markdown tables of a saved run

For every run, thread count and system (jitcore and numpy always; numexpr, numba, torch,
torch.compile and jax when installed) one child process runs the selected workloads, pinned
to as many cores as threads (CPU affinity: every thread of every library shares them), with
the thread variables of every library and XLA_FLAGS set before they load; jitcore's and
torch's inter-op pools get the same count. Each cell is checked against a float64 numpy
reference, then timed in natural use (fresh outputs) and compute only (a preallocated
output), recording CPU seconds per wall second, minor page faults and system time per call.
First calls come cold (a child of its own with empty JITCORE/TORCHINDUCTOR/NUMBA/JAX cache
directories, in the first run) and warm (the timing child, whose caches the cold child
filled). --runs R repeats the whole suite R times interleaved, the system order rotated per
run; the tables show the median over runs and the spread (min-max) of the natural-use
medians. jitcore's child also measures the copy/triad bandwidth and a core's fp32 FMA peak
(and its vdpbf16ps peak, where the CPU has AVX512_BF16): the tables show jitcore's GB/s as a
share of that bandwidth and matmul GFLOP/s as a share of the peak times the threads (the bf16
matmul rows: of the bf16 peak). A missing, failing or wrong peer is reported as such. --json
writes every number; --plot a PNG of natural-use speedups over numpy (needs matplotlib).
Every JSON result carries a stamp (jitcore/bench/stamp.py): commit, date, CPU, every peer's
version and the run's settings, the peers' included (JAX's XLA_FLAGS and PJRT_NPROC,
torch.compile's modes, ONNX Runtime's graph optimization level); the tables' caption names the
machine, commit and date from it. --tiny runs small sizes and few repeats (the test suite
uses it). --target LEVEL holds every system to one instruction-set level: jitcore builds for
it (JITCORE_TARGET) and the peers are restricted alike through their own switches
(jitcore/bench/levels.py); the results record the level and the variables set.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from jitcore.llvm.target import LEVELS

from .levels import restriction
from .peers_runtimes import (OPENVINO_BF16_SETTINGS, OPENVINO_SETTINGS, ORT_BF16_CONFIG,
                             ORT_SETTINGS)
from .roofline import add_roofline, compute_cell, peak_of, roofline_text
from .stamp import caption, stamp
from .systems import COMPILE_SETTINGS, CONV_LAYOUTS, INTO_NOTES, SYSTEM_MODULES, SYSTEMS
from .workloads import BY_NAME, SUITE, WEIGHTS_AFTER_FIRST

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "JITCORE_NUM_THREADS", "NUMEXPR_MAX_THREADS")
CHILD_TIMEOUT_S = 900
TIMED = ("median_s", "min_s", "cpu_per_wall", "sys_s_per_call", "minflt_per_call")


def installed(system: str) -> bool:
    return importlib.util.find_spec(SYSTEM_MODULES[system]) is not None


def versions(modules=None) -> dict:
    """Python's version and each installed module's (default: the kernel suite's systems')."""
    out = {"python": platform.python_version()}
    for module in sorted(set(SYSTEM_MODULES.values() if modules is None else modules)):
        if importlib.util.find_spec(module) is not None:
            try:
                out[module] = __import__(module).__version__
            except Exception as e:                     # a broken install: say so
                out[module] = f"unimportable ({type(e).__name__})"
    return out


class Progress:
    """A one-line progress bar on stderr: cells done of all, and the running cell."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.perf_counter()

    def show(self, label: str):
        width = 30
        filled = width * self.done // max(self.total, 1)
        elapsed = time.perf_counter() - self.t0
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                         f"{elapsed:5.0f}s {label[:40]:40s}")
        sys.stderr.flush()

    def finish(self):
        sys.stderr.write("\n")


# ---- one child ---------------------------------------------------------------------------------
def cores_for(threads: int):
    """The first `threads` cores this process may run on (all of them if fewer); None where
    the OS has no CPU affinity call (the child then runs unpinned)."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    return sorted(os.sched_getaffinity(0))[:threads]


# glibc: keep freed large blocks in the heap (no mmap per output, no trimming), so a system
# that allocates a fresh output per call reuses mapped pages as numpy's allocator and
# jitcore's output cache do; torch's CPU allocator asks for transparent huge pages
FAIR_ALLOCATION = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 31),
                   "MALLOC_TOP_PAD_": str(256 << 20), "THP_MEM_ALLOC_ENABLE": "1"}


def jax_thread_env(threads: int) -> dict:
    """JAX's thread settings at `threads`, as XLA reads them. XLA_FLAGS takes only XLA's own
    flags, each with its leading `--`: its parser (xla/parse_flags_from_env.cc) stops silently
    at the first word without one, and dies on an unknown `--` flag. The folklore
    `intra_op_parallelism_threads=N` is no XLA flag (a TensorFlow session option): without
    dashes it was dropped, with every flag after it (bench --target's --xla_cpu_max_isa).
    The CPU client's thread pool is sized by PJRT_NPROC (NPROC in older jaxlibs), else by
    the CPUs this process may run on; Eigen's matmuls and convs use that pool only with
    --xla_cpu_multi_thread_eigen=true."""
    return {"XLA_FLAGS": f"--xla_cpu_multi_thread_eigen={'true' if threads > 1 else 'false'}",
            "PJRT_NPROC": str(threads), "NPROC": str(threads)}


def child_env(threads: int, cache_dir: str, own_allocators: bool = False,
              target: str | None = None) -> dict:
    """Each system's child: its thread settings at `threads`, its caches in `cache_dir`,
    (unless `own_allocators`) allocator settings under which no system page-faults the
    fresh outputs of a loop of calls (FAIR_ALLOCATION), and with `target` every system held
    to that instruction-set level (levels.restriction)."""
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARIABLES}}
    if not own_allocators:
        env.update(FAIR_ALLOCATION)
    env.pop("JITCORE_DISK_CACHE", None)                # warm first calls need the disk cache
    env.update(jax_thread_env(threads))
    env.update({
        "JITCORE_CACHE_DIR": os.path.join(cache_dir, "jitcore"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(cache_dir, "inductor"),
        "NUMBA_CACHE_DIR": os.path.join(cache_dir, "numba"),
        "JAX_COMPILATION_CACHE_DIR": os.path.join(cache_dir, "jax"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    })
    if target is not None:
        env.update(restriction(target, env["XLA_FLAGS"])["env"])
    return env


def peer_settings(threads_list: list, target=None, own_allocators: bool = False) -> dict:
    """How the children hold each system: the thread variables, JAX's environment per
    thread count (as child_env sets it), torch.compile's modes, ONNX Runtime's and
    OpenVINO's settings, the allocator variables (for a result's stamp)."""
    jax = {}
    for threads in threads_list:
        env = child_env(threads, "", own_allocators, target)
        jax[str(threads)] = {k: env[k] for k in jax_thread_env(threads)}
    return {"thread_variables": list(THREAD_VARIABLES), "jax": jax,
            "torch.compile": COMPILE_SETTINGS, "onnxruntime": ORT_SETTINGS,
            "openvino": OPENVINO_SETTINGS, "openvino-bf16": OPENVINO_BF16_SETTINGS,
            "onnxruntime-bf16": {**ORT_SETTINGS, "session_config": ORT_BF16_CONFIG,
                                 "machines": "Arm64 only (n/a elsewhere)"},
            "autocast": {"device_type": "cpu", "dtype": "bfloat16",
                         "systems": "torch-autocast, torch.compile-autocast (compiled and "
                                    "called under it)"},
            "allocation": "own" if own_allocators else FAIR_ALLOCATION}


def settings(opts, argv: list, command: str = "python -m jitcore bench") -> dict:
    """A run's settings for its stamp: the command line and the options that shape it."""
    found = {"command": " ".join([command, *map(shlex.quote, argv)]),
             "names": opts.names, "threads": opts.threads_list, "systems": opts.systems_list,
             "cold": not opts.no_cold, "repeat": opts.repeat, "tiny": opts.tiny,
             "target": opts.target or "native",
             "peers": peer_settings(opts.threads_list, opts.target,
                                    getattr(opts, "own_allocators", False))}
    for key in ("runs", "batches", "own_allocators"):
        if hasattr(opts, key):
            found[key] = getattr(opts, key)
    return found


def run_child(system: str, threads: int, names: list, opts, progress: Progress,
              cache_dir: str, first_calls_only: bool = False, data_dir=None) -> dict:
    cmd = [sys.executable, "-m", "jitcore.bench.child", "--system", system,
           "--threads", str(threads), "--workloads", ",".join(names),
           "--repeat", str(opts.repeat)] + (["--tiny"] if opts.tiny else []) + \
        (["--data-dir", data_dir] if data_dir else []) + \
        (["--first-calls-only"] if first_calls_only else [])
    label = f"{system} @ {threads}{' cold' * first_calls_only}"
    return spawn_child(cmd, threads, names, progress, cache_dir, label,
                       getattr(opts, "own_allocators", False), getattr(opts, "target", None))


def spawn_child(cmd: list, threads: int, names: list, progress: Progress, cache_dir: str,
                label: str, own_allocators: bool = False, target: str | None = None) -> dict:
    """Run one child pinned to `threads` cores with the thread variables and cache
    directories set; count its progress lines; return its final JSON report (every name
    failed, with the child's last stderr line, when it printed none)."""
    cores = cores_for(threads)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_env(threads, cache_dir, own_allocators, target),
                            preexec_fn=None if cores is None else
                            lambda: os.sched_setaffinity(0, cores))
    report = None
    watchdog = threading.Timer(CHILD_TIMEOUT_S, proc.kill)     # a hung child is killed
    watchdog.start()
    stderr = []
    drain = threading.Thread(target=lambda: stderr.append(proc.stderr.read()), daemon=True)
    drain.start()                                  # a chatty child must not block on stderr
    try:
        for line in proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:                     # a library printing on stdout
                continue
            if "progress" in msg:
                progress.done += 1
                progress.show(f"{label}: {msg['progress']}")
            else:
                report = msg
        proc.wait()
        drain.join()
    finally:
        watchdog.cancel()
    if report is None:
        why = ("".join(stderr).strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {"results": {n: {"status": "failed", "error": f"process: {why}"[:300]}
                            for n in names}}
    report["cores"] = cores
    return report


# ---- the suite: runs interleaved, then the median over runs -----------------------------------
def run_suite(names: list, systems: list, threads_list: list, opts) -> dict:
    present = [s for s in systems if installed(s)]
    runs = getattr(opts, "runs", 1)
    cold = not getattr(opts, "no_cold", False)
    progress = Progress(len(names) * len(present) * len(threads_list) * (runs + cold))
    root = tempfile.mkdtemp(prefix="jitcore-bench-")
    data_dir = os.path.join(root, "data")             # inputs + references, made once
    os.mkdir(data_dir)
    raw, colds = [], {}
    try:
        for r in range(runs):
            k = r % max(len(present), 1)
            order = present[k:] + present[:k]          # each run starts with another system
            for threads in threads_list:
                for system in order:
                    cache_dir = os.path.join(root, f"{system}-{threads}")
                    if r == 0 and cold:                # empty caches: cold first calls
                        colds[system, threads] = run_child(system, threads, names, opts,
                                                           progress, cache_dir, True, data_dir)
                    report = run_child(system, threads, names, opts, progress, cache_dir,
                                       data_dir=data_dir)
                    raw.append({"run": r, "system": system, "threads": threads, **report})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    progress.finish()
    merged = []
    for threads in threads_list:
        for system in systems:
            if system not in present:
                results = {n: {"status": "missing", "error": f"{SYSTEM_MODULES[system]} is not "
                               f"installed (pip install '.[bench]')"} for n in names}
                merged.append({"system": system, "threads": threads, "results": results})
                continue
            reports = [x for x in raw if x["system"] == system and x["threads"] == threads]
            merged.append(merge_runs(system, threads, names, reports,
                                     colds.get((system, threads))))
    add_roofline(merged)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(getattr(opts, "target", None)), "versions": versions(),
            "tiny": opts.tiny, "runs_count": runs, "cold": cold,
            "compute_only_means": {s: INTO_NOTES[s] for s in systems},
            "workloads": {n: BY_NAME[n].title for n in names}, "runs": merged, "raw": raw}


def _median_of(dicts: list, key: str):
    values = [d[key] for d in dicts if d.get(key) is not None]
    return float(statistics.median(values)) if values else None


def merge_timed(cells: list) -> dict:
    """The median over runs of each timed figure, with the spread of the medians."""
    bad = next((c for c in cells if c.get("status") != "ok"), None)
    if bad is not None:
        return dict(bad)
    out = dict(cells[0])
    for key in TIMED + ("first_call_s", "max_error"):
        if key in out:
            out[key] = _median_of(cells, key)
    medians = [c["median_s"] for c in cells]
    out["spread_s"] = [min(medians), max(medians)]
    out["per_run_s"] = medians
    return out


def merge_runs(system: str, threads: int, names: list, reports: list, cold) -> dict:
    results = {}
    for n in names:
        cells = [rep["results"][n] for rep in reports]
        cell = merge_timed(cells)
        if cell.get("status") == "ok":
            cell["compute_only"] = merge_timed([c["compute_only"] for c in cells])
            cell["gbs"] = cell["bytes"] / cell["median_s"] / 1e9
            if "flops" in cell:
                cell["gflops"] = cell["flops"] / cell["median_s"] / 1e9
        cold_cell = (cold or {}).get("results", {}).get(n, {})
        if cell.get("status") == "ok":
            cell["first_call_cold_s"] = cold_cell.get("first_call_s")
        results[n] = cell
    entry = {"system": system, "threads": threads, "results": results}
    for key in ("cores", "affinity", "interop_threads"):
        if reports and key in reports[0]:
            entry[key] = reports[0][key]
    threads_seen = [rep["os_threads"] for rep in reports if rep.get("os_threads")]
    if threads_seen:
        entry["os_threads"] = max(threads_seen)
    bws = [rep["bandwidth_gbs"] for rep in reports if "bandwidth_gbs" in rep]
    if bws:
        entry["bandwidth_gbs"] = {k: _median_of(bws, k) for k in bws[0]}
        entry["fma_peak_gflops_per_core"] = _median_of(reports, "fma_peak_gflops_per_core")
        entry["bf16_peak_gflops_per_core"] = _median_of(reports, "bf16_peak_gflops_per_core")
    return entry


def machine(target: str | None = None) -> dict:
    """The host and the level the systems ran at (with the variables that held the peers to
    it, and what could not be held)."""
    import jitcore as jc
    info = jc.target_info(target=target)
    found = {"cpu": info["host_cpu"], "brand": info["brand"], "isa": info["isa"],
             "vector_bits": info["vector_bits"], "cpus": os.cpu_count(),
             "target": info["level"]}
    if target is not None:
        found["restriction"] = restriction(target)
    return found


# ---- the report -------------------------------------------------------------------------------
def cell(run: dict, name: str) -> dict:
    return run["results"].get(name, {"status": "n/a"})


def status_text(c: dict) -> str:
    return {"n/a": "n/a", "missing": "missing"}.get(c.get("status"), c.get("status", "?"))


def fmt_seconds(s: float, unit: str = "ms") -> str:
    """Three significant digits, no exponent (12.3, 0.582, 4567)."""
    v = s * (1e6 if unit == "us" else 1e3)
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def time_cell(c: dict, base: dict, unit: str, spread: bool) -> str:
    """'median (speedup over numpy)' and, over several runs, the spread in % of the median."""
    if c.get("status") != "ok":
        return status_text(c)
    text = fmt_seconds(c["median_s"], unit)
    if spread and "spread_s" in c:
        lo, hi = c["spread_s"]
        text += f"±{50 * (hi - lo) / c['median_s']:.0f}%"
    if base.get("status") == "ok":
        text += f" ({base['median_s'] / c['median_s']:.2f}x)"
    return text


def cold_measured(data: dict) -> bool:
    """Whether the run had cold-cache children (not with --no-cold; older results: whether
    any cell has a cold first call)."""
    return data.get("cold", any(c.get("first_call_cold_s") is not None
                                for r in data["runs"] for c in r["results"].values()))


def first_call_title(data: dict, unit: str = "ms") -> str:
    """The first-call table's title: cold / warm only where cold was measured."""
    return (f"first call (build + first call, compile included), {unit}: "
            + ("cold cache / warm cache" if cold_measured(data) else
               "warm cache (no cold-cache child: --no-cold)"))


def first_call_cell(c: dict, cold: bool = True) -> str:
    """'cold / warm' first call, or only the warm one in a run without cold children."""
    if c.get("status") != "ok":
        return status_text(c)
    if not cold:
        return fmt_seconds(c["first_call_s"])
    cold_s = c.get("first_call_cold_s")
    cold_text = "-" if cold_s is None else fmt_seconds(cold_s)
    return f"{cold_text} / {fmt_seconds(c['first_call_s'])}"


def usage_cell(c: dict) -> str:
    if c.get("status") != "ok":
        return status_text(c)
    sys_pct = 100 * c["sys_s_per_call"] / c["median_s"]
    return f"{c['cpu_per_wall']:.2f} {c['minflt_per_call']:.0f} {sys_pct:.0f}%"


def print_table(title: str, names: list, systems: list, at: dict, text, extra=None,
                width: int = 18):
    extra_head, extra_cells = extra or ("", lambda name: "")
    width = max([width] + [len(s) + 2 for s in systems])      # a long system name stays apart
    print(f"\n{title}")
    head = f"{'workload':22s}" + "".join(f"{s:>{width}s}" for s in systems) + extra_head
    print(head)
    print("-" * len(head))
    for name in names:
        row = f"{name:22s}" + "".join(f"{text(name, s):>{width}s}" for s in systems)
        print(row + extra_cells(name))


def roofline_cell(c: dict) -> str:
    """'natural / compute only' as 'GB/s (% of copy)' each."""
    if c.get("status") != "ok":
        return status_text(c)
    return f"{roofline_text(c)} / {roofline_text(c.get('compute_only', {}))}"


def print_tables(data: dict):
    runs, names = data["runs"], list(data["workloads"])
    roofline_names = [n for n in names if BY_NAME[n].memory_bound]
    gemm_names = [n for n in names if BY_NAME[n].gemm and BY_NAME[n].flops is not None]
    several = data.get("runs_count", 1) > 1
    for threads in sorted({r["threads"] for r in runs}):
        at = {r["system"]: r for r in runs if r["threads"] == threads}
        systems = [s for s in SYSTEMS if s in at]
        jit = at.get("jitcore", {"results": {}})
        bws = jit.get("bandwidth_gbs") or {}
        peak = (jit.get("fma_peak_gflops_per_core") or 0) * threads
        bf16_peak = (jit.get("bf16_peak_gflops_per_core") or 0) * threads
        cores = next((r["cores"] for r in at.values() if r.get("cores")), "unpinned")
        measured = (f"; bandwidth measured in this run: copy {bws['copy']:.1f} GB/s, triad "
                    f"{bws.get('triad', 0):.1f} GB/s; fp32 FMA peak: {peak:.0f} GFLOP/s "
                    f"({peak / threads:.0f} per core)") if bws.get("copy") else ""
        if measured and bf16_peak:
            measured += f"; bf16 (vdpbf16ps) peak: {bf16_peak:.0f} GFLOP/s"
        print(f"\n=== {threads} thread(s), pinned to cores {cores}{measured} ===")
        numpy_at = at.get("numpy", {"results": {}})

        def base(name, column=None):
            c = cell(numpy_at, name)
            return c.get(column, {}) if column and c.get("status") == "ok" else c

        def jit_extra(name, column=None):
            """jitcore's GB/s, % of the copy bandwidth (memory-bound workloads) and, for
            matmuls, GFLOP/s and % of peak, of the natural-use cell or of `column`'s."""
            c = cell(jit, name)
            if c.get("status") != "ok":
                return ""
            c = c.get(column, {}) if column else c
            if c.get("status") != "ok":
                return f"{status_text(c):>10s}"
            gbs = cell(jit, name)["bytes"] / c["median_s"] / 1e9
            fraction = c.get("copy_fraction")
            text = f"{gbs:10.1f}" + (f"{fraction:7.0%}" if fraction is not None else f"{'-':>7s}")
            flops = cell(jit, name).get("flops")
            if BY_NAME[name].gemm and flops:
                gflops = flops / c["median_s"] / 1e9
                bound = peak_of(jit, threads, BY_NAME[name].precision) or 0
                text += f"{gflops:9.1f}{(gflops / bound if bound else 0):7.0%}"
            return text
        extra_head = f"{'jc GB/s':>10s}{'% copy':>7s}{'GFLOP/s':>9s}{'% peak':>7s}"
        spread = " (±half the min-max spread over runs)" if several else ""
        print_table(f"natural use (fresh outputs): median ms (us for dispatch){spread} and "
                    "speedup over numpy", names, systems, at,
                    lambda n, s: time_cell(cell(at[s], n), base(n), BY_NAME[n].unit, several),
                    (extra_head, jit_extra), width=22 if several else 18)
        print_table("compute only (every system writes into a preallocated output where it "
                    "can): median ms and speedup over numpy's compute only", names, systems, at,
                    lambda n, s: time_cell(cell(at[s], n).get("compute_only", cell(at[s], n)),
                                           base(n, "compute_only"), BY_NAME[n].unit, False),
                    (extra_head, lambda n: jit_extra(n, "compute_only")))
        if roofline_names:
            print_table("streaming roofline (memory-bound workloads): GB/s and % of the copy "
                        "bandwidth, natural use / compute only", roofline_names, systems, at,
                        lambda n, s: roofline_cell(cell(at[s], n)), width=26)
        if gemm_names:
            print_table(f"compute roofline (matmul and convolution workloads): GFLOP/s and % "
                        f"of the fp32 FMA peak of {threads} core(s) (bf16 rows: of the "
                        f"vdpbf16ps peak), natural use / compute only",
                        gemm_names, systems, at,
                        lambda n, s: compute_cell(cell(at[s], n),
                                                  peak_of(jit, threads, BY_NAME[n].precision)),
                        width=30)
        cold = cold_measured(data)
        print_table(first_call_title(data), names, systems, at,
                    lambda n, s: first_call_cell(cell(at[s], n), cold), width=20)
        print_table("natural use, per call: CPU-s per wall-s, minor page faults, system time "
                    "as % of wall", names, systems, at, lambda n, s: usage_cell(cell(at[s], n)),
                    width=20)
        problems = []
        for s in systems:
            for n in names:
                c = cell(at[s], n)
                for label, cc in (("", c), (" (compute only)", c.get("compute_only", {}))):
                    if cc.get("status") in ("failed", "wrong"):
                        problems.append(f"  {s} {n}{label}: {cc['status']}: "
                                        f"{cc.get('error', '')}")
        print("\n".join(problems))
    if any(n in WEIGHTS_AFTER_FIRST for n in names):
        print("\nconvolution layouts: " + "; ".join(f"{s}: {how}" for s, how in
                                                     CONV_LAYOUTS.items()))
    missing = sorted({r["system"] for r in runs
                      if any(c.get("status") == "missing" for c in r["results"].values())})
    if missing:
        print(f"\nnot installed: {', '.join(missing)} (pip install '.[bench]')")


def plot(data: dict, path: str) -> str:
    """A PNG of natural-use speedups over numpy per workload and system, one panel per thread
    count."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    runs = data["runs"]
    threads_list = sorted({r["threads"] for r in runs})
    names = list(data["workloads"])
    fig, axes = plt.subplots(len(threads_list), 1, figsize=(13, 4 * len(threads_list)),
                             squeeze=False)
    for ax, threads in zip(axes[:, 0], threads_list):
        at = {r["system"]: r for r in runs if r["threads"] == threads}
        systems = [s for s in SYSTEMS if s in at and s != "numpy"]
        width = 0.8 / max(len(systems), 1)
        for i, s in enumerate(systems):
            speedups = []
            for n in names:
                c, base = cell(at[s], n), cell(at.get("numpy", {"results": {}}), n)
                ok = c.get("status") == "ok" and base.get("status") == "ok"
                speedups.append(base["median_s"] / c["median_s"] if ok else 0)
            ax.bar([j + i * width for j in range(len(names))], speedups, width, label=s)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))])
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.set_ylabel("speedup over numpy (natural use)")
        ax.set_title(f"{threads} thread(s) - {data['machine']['brand']}, {data['date'][:10]}, "
                     f"median of {data.get('runs_count', 1)} run(s)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot written to {path}"


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench", description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(BY_NAME))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--runs", type=int, default=1,
                    help="run the whole suite this many times, interleaved (default 1)")
    ap.add_argument("--repeat", type=int, default=None, help="timed samples (default 9, tiny 2)")
    ap.add_argument("--no-cold", action="store_true",
                    help="skip the cold-cache first-call children")
    ap.add_argument("--json", help="write all results to this JSON file")
    ap.add_argument("--plot", help="write a PNG bar chart to this path (needs matplotlib)")
    ap.add_argument("--tiny", action="store_true", help="small sizes, few repeats")
    add_target_option(ap)
    ap.add_argument("--own-allocators", action="store_true",
                    help="each system's default allocator settings in the natural-use column "
                         "(default: glibc and torch set so that no system page-faults its "
                         "fresh outputs)")
    opts = ap.parse_args(argv)
    names = opts.only.split(",") if opts.only else [w.name for w in SUITE]
    unknown = [n for n in names if n not in BY_NAME]
    systems = opts.systems.split(",")
    unknown += [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}; workloads: {', '.join(BY_NAME)}; "
                 f"systems: {', '.join(SYSTEMS)}")
    try:
        opts.threads_list = [int(t) for t in opts.threads.split(",")]
    except ValueError:
        ap.error("--threads takes comma-separated integers, e.g. 1,2")
    if opts.runs < 1:
        ap.error("--runs must be at least 1")
    if "numpy" not in systems:
        systems.insert(0, "numpy")                     # speedups are over numpy
    opts.names, opts.systems_list = names, systems
    opts.repeat = opts.repeat or (2 if opts.tiny else 9)
    check_target(ap, opts)
    return opts


def add_target_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--target", choices=list(LEVELS),
                    help="hold every system to this instruction-set level (jitcore's "
                         "JITCORE_TARGET; the peers' switches: jitcore/bench/levels.py)")


def check_target(ap: argparse.ArgumentParser, opts) -> None:
    """A level this host cannot run is a usage error, said before any child starts."""
    if opts.target is not None:
        import jitcore as jc
        try:
            jc.target_info(target=opts.target)
        except jc.TargetError as e:
            ap.error(str(e))


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts = parse(argv)
    data = run_suite(opts.names, opts.systems_list, opts.threads_list, opts)
    data["stamp"] = stamp(settings(opts, argv))
    print(caption(data))
    m = data["machine"]
    print(f"{m['brand']} ({m['cpu']}), target {m['target']}: {m['isa']}, {m['cpus']} cpus; "
          f"{data['date']}; "
          + ", ".join(f"{k} {v}" for k, v in data["versions"].items())
          + f"; median of {data['runs_count']} interleaved run(s)")
    print_tables(data)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"results written to {opts.json}")
    if opts.plot:
        print(plot(data, opts.plot))
    bad = [r for r in data["runs"] if r["system"] == "jitcore"
           for c in r["results"].values()
           if c.get("status") not in ("ok", "n/a")
           or c.get("compute_only", {"status": "ok"}).get("status") not in ("ok", "n/a")]
    return 1 if bad else 0

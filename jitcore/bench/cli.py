"""`python -m jitcore bench`: the benchmark suite against peers, each system in its own process.

    python -m jitcore bench [--only chain,softmax] [--threads 1,2] [--systems jitcore,numpy]
                            [--repeat N] [--json PATH] [--plot PATH] [--tiny]

For every thread count and system (jitcore and numpy always; numexpr, numba, torch and
torch.compile when installed) one child process runs the selected workloads with the thread
variables of every library set before they load. Each cell is checked against a float64
numpy reference, then timed (median and min); the table shows median times and the speedup
over numpy, jitcore's GB/s as a fraction of the bandwidth measured by a copy/triad in the same
run, and GFLOP/s where a workload multiplies matrices. A missing, failing or wrong peer is
reported as such. --json writes every number; --plot a PNG bar chart of speedups over numpy
(needs matplotlib). --tiny runs small sizes and few repeats (the test suite uses it).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys
import threading
import time

from .workloads import BY_NAME, SUITE, SYSTEM_MODULES, SYSTEMS

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "JITCORE_NUM_THREADS", "NUMEXPR_MAX_THREADS")
CHILD_TIMEOUT_S = 900


def installed(system: str) -> bool:
    return importlib.util.find_spec(SYSTEM_MODULES[system]) is not None


def versions() -> dict:
    out = {"python": platform.python_version()}
    for module in sorted(set(SYSTEM_MODULES.values())):
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


def run_child(system: str, threads: int, names: list, opts, progress: Progress) -> dict:
    env = {**os.environ, **{v: str(threads) for v in THREAD_VARIABLES}}
    cmd = [sys.executable, "-m", "jitcore.bench.child", "--system", system,
           "--threads", str(threads), "--workloads", ",".join(names),
           "--repeat", str(opts.repeat)] + (["--tiny"] if opts.tiny else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    report = None
    watchdog = threading.Timer(CHILD_TIMEOUT_S, proc.kill)     # a hung child is killed
    watchdog.start()
    try:
        for line in proc.stdout:
            msg = json.loads(line)
            if "progress" in msg:
                progress.done += 1
                progress.show(f"{system} @ {threads}: {msg['progress']}")
            else:
                report = msg
        stderr = proc.stderr.read()
        proc.wait()
    finally:
        watchdog.cancel()
    if report is None:
        why = (stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return {"results": {n: {"status": "failed", "error": f"process: {why}"[:300]}
                            for n in names}}
    return report


def run_suite(names: list, systems: list, threads_list: list, opts) -> dict:
    cells = len(names) * sum(installed(s) for s in systems) * len(threads_list)
    progress = Progress(cells)
    runs = []
    for threads in threads_list:
        for system in systems:
            if not installed(system):
                results = {n: {"status": "missing", "error": f"{SYSTEM_MODULES[system]} is not "
                               f"installed (pip install '.[bench]')"} for n in names}
                runs.append({"system": system, "threads": threads, "results": results})
                continue
            progress.show(f"{system} @ {threads}")
            report = run_child(system, threads, names, opts, progress)
            runs.append({"system": system, "threads": threads, **report})
    progress.finish()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "versions": versions(), "tiny": opts.tiny,
            "workloads": {n: BY_NAME[n].title for n in names}, "runs": runs}


def machine() -> dict:
    import jitcore as jc
    info = jc.target_info()
    return {"cpu": info["cpu"], "brand": info["brand"], "isa": info["isa"],
            "vector_bits": info["vector_bits"], "cpus": os.cpu_count()}


# ---- the report -------------------------------------------------------------------------------
def cell(run: dict, name: str) -> dict:
    return run["results"].get(name, {"status": "n/a"})


def fmt_time(c: dict, unit: str) -> str:
    if c.get("status") != "ok":
        return {"n/a": "n/a", "missing": "missing"}.get(c.get("status"), c.get("status", "?"))
    scale = 1e6 if unit == "us" else 1e3
    return f"{c['median_s'] * scale:.3g}"


def print_tables(data: dict):
    runs = data["runs"]
    for threads in sorted({r["threads"] for r in runs}):
        at = {r["system"]: r for r in runs if r["threads"] == threads}
        systems = [s for s in SYSTEMS if s in at]
        jit = at.get("jitcore", {})
        bw = max((jit.get("bandwidth_gbs") or {"-": 0}).values())
        print(f"\n=== {threads} thread(s); median time (ms, us for dispatch) and speedup "
              f"over numpy; bandwidth measured in this run: {bw:.1f} GB/s ===")
        head = f"{'workload':15s}" + "".join(f"{s:>16s}" for s in systems) + \
            f"{'jitcore GB/s':>14s}{'% bw':>7s}{'GFLOP/s':>9s}"
        print(head)
        print("-" * len(head))
        for name in data["workloads"]:
            w = BY_NAME[name]
            base = cell(at["numpy"], name) if "numpy" in at else {}
            row = f"{name:15s}"
            for s in systems:
                c = cell(at[s], name)
                text = fmt_time(c, w.unit)
                if c.get("status") == "ok" and base.get("status") == "ok":
                    text += f" ({base['median_s'] / c['median_s']:.2f}x)"
                row += f"{text:>16s}"
            c = cell(jit, name) if jit else {}
            if c.get("status") == "ok":
                row += f"{c['gbs']:14.1f}{(c['gbs'] / bw if bw else 0):7.0%}"
                row += f"{c['gflops']:9.1f}" if "gflops" in c else f"{'-':>9s}"
            print(row)
        problems = [(s, n, cell(at[s], n)) for s in systems for n in data["workloads"]
                    if cell(at[s], n).get("status") in ("failed", "wrong")]
        for s, n, c in problems:
            print(f"  {s} {n}: {c['status']}: {c.get('error', '')}")
    missing = sorted({r["system"] for r in runs
                      if any(c.get("status") == "missing" for c in r["results"].values())})
    if missing:
        print(f"\nnot installed: {', '.join(missing)} (pip install '.[bench]')")


def plot(data: dict, path: str) -> str:
    """A PNG of speedups over numpy per workload and system, one panel per thread count."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    runs = data["runs"]
    threads_list = sorted({r["threads"] for r in runs})
    names = list(data["workloads"])
    fig, axes = plt.subplots(len(threads_list), 1, figsize=(12, 4 * len(threads_list)),
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
        ax.set_ylabel("speedup over numpy")
        ax.set_title(f"{threads} thread(s) - {data['machine']['brand']}, {data['date'][:10]}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot written to {path}"


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench", description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(BY_NAME))
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=None, help="timed samples (default 9, tiny 2)")
    ap.add_argument("--json", help="write all results to this JSON file")
    ap.add_argument("--plot", help="write a PNG bar chart to this path (needs matplotlib)")
    ap.add_argument("--tiny", action="store_true", help="small sizes, few repeats")
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
    if "numpy" not in systems:
        systems.insert(0, "numpy")                     # speedups are over numpy
    opts.names, opts.systems_list = names, systems
    opts.repeat = opts.repeat or (2 if opts.tiny else 9)
    return opts


def main(argv=None) -> int:
    opts = parse(argv)
    data = run_suite(opts.names, opts.systems_list, opts.threads_list, opts)
    m = data["machine"]
    print(f"{m['brand']} ({m['cpu']}), {m['isa']}, {m['cpus']} cpus; {data['date']}; "
          + ", ".join(f"{k} {v}" for k, v in data["versions"].items()))
    print_tables(data)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"results written to {opts.json}")
    if opts.plot:
        print(plot(data, opts.plot))
    bad = [r for r in data["runs"] if r["system"] == "jitcore"
           for c in r["results"].values() if c.get("status") not in ("ok", "n/a")]
    return 1 if bad else 0

"""`python -m jitcore bench --models`: whole PyTorch models, jitcore.torch against torch eager
(inference_mode), torch.compile (Inductor, freezing on) and ONNX Runtime (CPU provider).

    python -m jitcore bench --models [--only mlp,bert] [--threads 1,2]
                                     [--systems jitcore,torch,torch.compile,onnxruntime]
                                     [--repeat N] [--no-cold] [--json PATH] [--plot PATH] [--tiny]

Each system and thread count runs in child processes of its own (jitcore/bench/model_child.py),
pinned to as many cores as threads, as the kernel suite's: a cold child (empty JITCORE and
TORCHINDUCTOR cache directories) times the first call, compile included; the timing child,
whose caches the cold child filled, times the warm first call and then the calls. Per model and
thread count: latency (median), speedup over eager, CPU time per call (median x CPU seconds
per wall second of the timed loop: on a loaded machine the scheduler's share distorts wall
times, less so CPU times), the normwise relative error against eager
(a system above 1e-4 is 'wrong'), cold and warm first calls, jitcore's fallback node count.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile

from .cli import (Progress, add_target_option, check_target, fmt_seconds, machine,
                  spawn_child, versions)
from .model_child import SYSTEM_MODULES, SYSTEMS

NAMES = ("mlp", "resnet18", "mobilenet_v2", "bert", "gpt2")
NEEDS = {"bert": "transformers", "gpt2": "transformers"}


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def run(names: list, systems: list, threads_list: list, opts) -> dict:
    present = [s for s in systems if installed(SYSTEM_MODULES[s])]
    names = [n for n in names if NEEDS.get(n) is None or installed(NEEDS[n])]
    progress = Progress(len(names) * len(present) * len(threads_list) * (2 - opts.no_cold))
    root = tempfile.mkdtemp(prefix="jitcore-models-")
    runs = []
    try:
        for threads in threads_list:
            for system in present:
                cache = os.path.join(root, f"{system}-{threads}")
                cmd = [sys.executable, "-m", "jitcore.bench.model_child", "--system", system,
                       "--threads", str(threads), "--models", ",".join(names),
                       "--repeat", str(opts.repeat)] + (["--tiny"] if opts.tiny else [])
                cold = None
                if not opts.no_cold:
                    cold = spawn_child(cmd + ["--first-calls-only"], threads, names, progress,
                                       cache, f"{system} @ {threads} cold", target=opts.target)
                report = spawn_child(cmd, threads, names, progress, cache, f"{system} @ {threads}",
                                     target=opts.target)
                for n, c in report["results"].items():
                    if cold is not None:
                        c["first_call_cold_s"] = cold["results"][n].get("first_call_s")
                runs.append({"system": system, "threads": threads, "cores": report.get("cores"),
                             "results": report["results"]})
            for system in systems:
                if system not in present:
                    runs.append({"system": system, "threads": threads, "results": {
                        n: {"status": "missing", "error": f"{SYSTEM_MODULES[system]} is not "
                            "installed"} for n in names}})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    progress.finish()
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(opts.target), "versions": versions(), "tiny": opts.tiny,
            "models": names, "runs": runs}


def _cell(runs: list, system: str, threads: int, name: str) -> dict:
    for r in runs:
        if r["system"] == system and r["threads"] == threads:
            return r["results"].get(name, {"status": "n/a"})
    return {"status": "n/a"}


def speedup(data: dict, system: str, threads: int, name: str):
    c, base = (_cell(data["runs"], s, threads, name) for s in (system, "torch"))
    if c.get("status") != "ok" or base.get("status") != "ok" or "median_s" not in c:
        return None
    return base["median_s"] / c["median_s"]


def cpu_s(c: dict):
    return c["median_s"] * c["cpu_per_wall"] if "cpu_per_wall" in c else None


def cpu_speedup(data: dict, system: str, threads: int, name: str):
    c, base = (_cell(data["runs"], s, threads, name) for s in (system, "torch"))
    if c.get("status") != "ok" or base.get("status") != "ok" or not cpu_s(c):
        return None
    return cpu_s(base) / cpu_s(c)


def geomean(values: list):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def print_tables(data: dict, systems: list) -> None:
    names = data["models"]
    for threads in sorted({r["threads"] for r in data["runs"]}):
        print(f"\n=== {threads} thread(s) ===")
        head = f"{'model':14s}" + "".join(f"{s:>22s}" for s in systems)
        for title, text in [
                ("latency, median ms (speedup over torch eager)", _latency),
                ("CPU ms per call (median x CPU-s per wall-s: what a loaded machine's "
                 "scheduler does not distort), speedup over eager's", _cpu),
                ("first call (compile + run), s: cold cache / warm cache", _first),
                ("relative error vs eager (normwise); jitcore: fallback nodes", _error)]:
            print(f"\n{title}\n{head}\n{'-' * len(head)}")
            for n in names:
                print(f"{n:14s}" + "".join(
                    f"{text(data, s, threads, n):>22s}" for s in systems))
        for label, fn in (("latency", speedup), ("CPU time", cpu_speedup)):
            print(f"geomean speedup over eager ({label}):" + "".join(
                f"  {s} {g:.2f}x" for s in systems
                if (g := geomean([fn(data, s, threads, n) for n in names])) is not None))
        for s in systems:
            for n in names:
                c = _cell(data["runs"], s, threads, n)
                if c.get("status") in ("failed", "wrong"):
                    print(f"  {s} {n}: {c['status']}: {c.get('error', '')}"
                          f"{' error %.2e' % c['rel_error'] if 'rel_error' in c else ''}")


def _latency(data, s, threads, n) -> str:
    c = _cell(data["runs"], s, threads, n)
    if "median_s" not in c:
        return c.get("status", "?")
    sp = speedup(data, s, threads, n)
    return fmt_seconds(c["median_s"]) + (f" ({sp:.2f}x)" if sp else "") + \
        ("" if c["status"] == "ok" else " WRONG")


def _cpu(data, s, threads, n) -> str:
    c = _cell(data["runs"], s, threads, n)
    if not cpu_s(c):
        return c.get("status", "?")
    sp = cpu_speedup(data, s, threads, n)
    return fmt_seconds(cpu_s(c)) + (f" ({sp:.2f}x)" if sp else "")


def _first(data, s, threads, n) -> str:
    c = _cell(data["runs"], s, threads, n)
    if "first_call_s" not in c:
        return c.get("status", "?")
    cold = c.get("first_call_cold_s")
    return f"{'-' if cold is None else f'{cold:.2f}'} / {c['first_call_s']:.2f}"


def _error(data, s, threads, n) -> str:
    c = _cell(data["runs"], s, threads, n)
    if "rel_error" not in c:
        return c.get("status", "?")
    text = f"{c['rel_error']:.1e}"
    if "fallbacks" in c:
        text += f"; {c['fallbacks']} fb"
    return text


def plot(data: dict, path: str, systems: list) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    threads_list = sorted({r["threads"] for r in data["runs"]})
    names = data["models"]
    fig, axes = plt.subplots(len(threads_list), 2, figsize=(14, 3.5 * len(threads_list)),
                             squeeze=False)
    shown = [s for s in systems if s != "torch"]
    width = 0.8 / max(len(shown), 1)
    for row, threads in zip(axes, threads_list):
        for ax, (label, fn) in zip(row, (("latency", speedup), ("CPU time", cpu_speedup))):
            for i, s in enumerate(shown):
                ax.bar([j + i * width for j in range(len(names))],
                       [fn(data, s, threads, n) or 0 for n in names], width, label=s)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))])
            ax.set_xticklabels(names)
            ax.set_ylabel(f"speedup over eager ({label})")
            ax.set_title(f"{threads} thread(s), {label} - {data['machine']['brand']}, "
                         f"{data['date'][:10]}", fontsize=9)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot written to {path}"


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench --models",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated models: " + ",".join(NAMES))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=None, help="timed samples (default 9, tiny 3)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache children")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--tiny", action="store_true", help="small models, few repeats")
    add_target_option(ap)
    opts = ap.parse_args(argv)
    opts.names = opts.only.split(",") if opts.only else list(NAMES)
    opts.systems_list = opts.systems.split(",")
    if "torch" not in opts.systems_list:
        opts.systems_list.insert(0, "torch")         # speedups are over eager
    unknown = [n for n in opts.names if n not in NAMES] + \
        [s for s in opts.systems_list if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}; models: {', '.join(NAMES)}; "
                 f"systems: {', '.join(SYSTEMS)}")
    opts.threads_list = [int(t) for t in opts.threads.split(",")]
    opts.repeat = opts.repeat or (3 if opts.tiny else 9)
    check_target(ap, opts)
    return opts


def report(data: dict, systems: list) -> None:
    """Print the tables of a saved run: `python -m jitcore.bench.model_suite RUN.json
    [PLOT.png]`."""
    m = data["machine"]
    print(f"{m['brand']} ({m['cpu']}), target {m.get('target', 'native')}: {m['isa']}, "
          f"{m['cpus']} cpus; {data['date']}; "
          + ", ".join(f"{k} {v}" for k, v in data["versions"].items()))
    print_tables(data, systems)


def main(argv=None) -> int:
    opts = parse(argv)
    data = run(opts.names, opts.systems_list, opts.threads_list, opts)
    report(data, opts.systems_list)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"results written to {opts.json}")
    if opts.plot:
        print(plot(data, opts.plot, opts.systems_list))
    bad = [c for r in data["runs"] if r["system"] == "jitcore" for c in r["results"].values()
           if c.get("status") != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        saved = json.load(f)
    present = [s for s in SYSTEMS if any(r["system"] == s for r in saved["runs"])]
    report(saved, present)
    if len(sys.argv) > 2:
        print(plot(saved, sys.argv[2], present))

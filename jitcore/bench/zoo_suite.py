"""`python -m jitcore bench --zoo`: the model zoo (jitcore/bench/zoo.py: transformers'
encoders, decoders, vision transformers, CNNs and speech models built offline, random
weights), each system against eager torch.

    python -m jitcore bench --zoo [--only bert,resnet] [--threads 1,2] [--full]
                                  [--systems jitcore,torch,torch.compile,onnxruntime,openvino]
                                  [--repeat N] [--chunk K] [--json PATH] [--plot PATH] [--tiny]

Each system and thread count runs the models in child processes (jitcore/bench/model_child.py
with --zoo; K models per child, default 6, so that one crash costs few cells), pinned to as
many cores as threads, with empty cache directories and JITCORE_DISK_CACHE=0: the first call
(build + compile + first run) is cold, up to the process-wide one-time setup that the child
does on a tiny module first. Per model and system: pass (normwise relative error against the
float64 eager output <= PASS_ERROR; eager float32's own error is the torch column's), the
cold first call, the median latency and the speedup over eager; jitcore's fallback nodes
with their reasons. A system that fails a model is recorded, not fatal. The summary line: the
pass rate (jitcore right and with no fallback node) and the geomean speedup over eager of
each system over the models it ran right. 2 transformer blocks per model (per stage for
staged models) by default, the real depth with --full; --tiny shrinks the widths too.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile

from .cli import Progress, fmt_seconds, machine, settings, spawn_child, versions
from .model_child import SYSTEM_MODULES, SYSTEMS
from .stamp import caption, stamp
from .zoo import ARCHS
from .model_suite import (VERSIONED, _cell, check_names, cpu_speedup, geomean, installed, plot,
                          save, speedup)

PASS_ERROR = 1e-4        # normwise, float32 systems against float64 eager (eager: ~1e-7)
LAYERS = 2


FAMILIES = {a.name: a.family for a in ARCHS}


def run(opts) -> dict:
    present = [s for s in opts.systems_list if installed(SYSTEM_MODULES[s])]
    names = opts.names
    chunks = [names[i:i + opts.chunk] for i in range(0, len(names), opts.chunk)]
    progress = Progress(len(names) * len(present) * len(opts.threads_list))
    root = tempfile.mkdtemp(prefix="jitcore-zoo-")
    data_dir = os.path.join(root, "references")
    os.mkdir(data_dir)
    runs = []
    try:
        for threads in opts.threads_list:
            for system in present:
                results, cores = {}, None
                for chunk in chunks:
                    report = _child(system, threads, chunk, opts, progress, root, data_dir)
                    results.update(report["results"])
                    cores = report.get("cores", cores)
                runs.append({"system": system, "threads": threads, "batch": 1, "cores": cores,
                             "results": results})
            runs += [{"system": s, "threads": threads, "batch": 1, "results": {
                n: {"status": "missing", "error": f"{SYSTEM_MODULES[s]} is not installed"}
                for n in names}} for s in opts.systems_list if s not in present]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    progress.finish()
    data = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "versions": versions(VERSIONED),
            "zoo": {"layers": "full" if opts.full else LAYERS, "tiny": opts.tiny,
                    "reference": "float64 eager", "pass_error": PASS_ERROR,
                    "first_call": "cold: empty cache directories, JITCORE_DISK_CACHE=0"},
            "models": names, "families": {n: FAMILIES[n] for n in names},
            "batches": [1], "runs": runs}
    data["summary"] = summary(data)
    return data


def _child(system, threads, names, opts, progress, root, data_dir) -> dict:
    cache = os.path.join(root, f"{system}-{threads}-{names[0]}")
    cmd = [sys.executable, "-m", "jitcore.bench.model_child", "--system", system,
           "--threads", str(threads), "--models", ",".join(names), "--repeat",
           str(opts.repeat), "--zoo", data_dir, "--layers", "0" if opts.full else str(LAYERS)]
    return spawn_child(cmd + (["--tiny"] if opts.tiny else []), threads, names, progress,
                       cache, f"{system} @ {threads}")


def passed(cell: dict) -> bool:
    """jitcore's pass: right (within PASS_ERROR of float64 eager) with no fallback node."""
    return cell.get("status") == "ok" and cell.get("fallbacks", 0) == 0


def summary(data: dict) -> list:
    """Per thread count: jitcore's pass count, and each system's geomean speedup over eager
    over the models it ran right (with how many)."""
    out = []
    for threads in sorted({r["threads"] for r in data["runs"]}):
        jit = [_cell(data["runs"], "jitcore", threads, n) for n in data["models"]]
        point = {"threads": threads, "models": len(data["models"]),
                 "passed": sum(passed(c) for c in jit),
                 "right": sum(c.get("status") == "ok" for c in jit), "geomean": {}}
        for s in sorted({r["system"] for r in data["runs"]} - {"torch"}):
            ups = [u for n in data["models"] if (u := speedup(data, s, threads, n))]
            cpu = [u for n in data["models"] if (u := cpu_speedup(data, s, threads, n))]
            if ups:
                point["geomean"][s] = {"speedup": geomean(ups), "cpu_speedup": geomean(cpu),
                                       "models": len(ups)}
        out.append(point)
    return out


def summary_line(point: dict) -> str:
    text = (f"zoo, {point['threads']} thread(s): jitcore passes {point['passed']}/"
            f"{point['models']} ({100 * point['passed'] / max(point['models'], 1):.0f}%: "
            f"within {PASS_ERROR:g} of float64 eager, no fallback node); geomean speedup "
            f"over eager:")
    return text + ",".join(f" {s} {g['speedup']:.2f}x (CPU time {g['cpu_speedup']:.2f}x, "
                           f"{g['models']} models)" for s, g in point["geomean"].items())


def _system_cell(data, s, threads, n) -> str:
    c = _cell(data["runs"], s, threads, n)
    if "median_s" not in c:
        return c.get("status", "?")
    sp, cpu = speedup(data, s, threads, n), cpu_speedup(data, s, threads, n)
    return fmt_seconds(c["median_s"]) + (f" ({sp:.2f}x {cpu:.2f}x)" if sp else "") + \
        ("" if c["status"] == "ok" else " WRONG")


def _jit_cell(data, threads, n) -> str:
    c = _cell(data["runs"], "jitcore", threads, n)
    if "rel_error" not in c:
        return c.get("status", "?")
    return (f"{'pass' if passed(c) else 'FAIL'} {c['rel_error']:.1e} {c.get('fallbacks', 0)}fb "
            f"{c['first_call_s']:.1f}s")


def print_tables(data: dict, systems: list) -> None:
    print(caption(data))
    m = data["machine"]
    print(f"{m['brand']} ({m['cpu']}): {m['isa']}, {m['cpus']} cpus; {data['date']}; "
          + ", ".join(f"{k} {v}" for k, v in data["versions"].items()))
    z = data["zoo"]
    print(f"zoo: {len(data['models'])} models, {z['layers']} layer(s){' tiny' * z['tiny']}; "
          f"pass: jitcore within {z['pass_error']:g} (normwise) of {z['reference']}, no "
          f"fallback node; first call {z['first_call']}")
    shown = [s for s in systems if any(r["system"] == s for r in data["runs"])]
    for threads in sorted({r["threads"] for r in data["runs"]}):
        head = (f"{'model':16s}{'family':>19s}{'jitcore: err, fallbacks, cold 1st':>36s}"
                + "".join(f"{s:>26s}" for s in shown))
        print(f"\n{threads} thread(s): median ms per call (speedup over eager: latency, CPU "
              f"time = median x CPU-s per wall-s, what a loaded machine distorts less)\n{head}\n"
              + "-" * len(head))
        for n in data["models"]:
            print(f"{n:16s}{data['families'][n]:>19s}{_jit_cell(data, threads, n):>36s}"
                  + "".join(f"{_system_cell(data, s, threads, n):>26s}" for s in shown))
        print("\ncold first call, s (build excluded: compile or export + first run)\n"
              + f"{'model':16s}" + "".join(f"{s:>20s}" for s in shown))
        for n in data["models"]:
            cells = [_cell(data["runs"], s, threads, n) for s in shown]
            print(f"{n:16s}" + "".join(f"{c['first_call_s']:20.2f}" if "first_call_s" in c
                                       else f"{c.get('status', '?'):>20s}" for c in cells))
        point = next(p for p in data["summary"] if p["threads"] == threads)
        print("\n" + summary_line(point))
        for s in shown:
            for n in data["models"]:
                c = _cell(data["runs"], s, threads, n)
                if c.get("status") in ("failed", "wrong"):
                    err = f" (error {c['rel_error']:.2e})" if "rel_error" in c else ""
                    print(f"  {s} {n}: {c['status']}{err}: {c.get('error', '')}")
                for why in c.get("fallback_reasons", []):
                    print(f"  {s} {n}: fallback {why}")


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench --zoo",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated models: " + ",".join(FAMILIES))
    ap.add_argument("--systems", default="jitcore,torch,torch.compile,onnxruntime,openvino")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--full", action="store_true", help="the real depth (default 2 blocks)")
    ap.add_argument("--repeat", type=int, default=None, help="timed samples (default 9, tiny 3)")
    ap.add_argument("--chunk", type=int, default=6, help="models per child process")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--tiny", action="store_true", help="small widths, few repeats")
    opts = ap.parse_args(argv)
    opts.names = opts.only.split(",") if opts.only else list(FAMILIES)
    opts.systems_list = opts.systems.split(",")
    check_names(ap, opts, FAMILIES)
    try:
        opts.threads_list = [int(t) for t in opts.threads.split(",")]
    except ValueError:
        ap.error("--threads takes comma-separated integers, e.g. 1,2")
    if min(opts.threads_list) < 1 or opts.chunk < 1:
        ap.error("--threads and --chunk must be at least 1")
    opts.repeat = opts.repeat or (3 if opts.tiny else 9)
    opts.no_cold, opts.target = False, None     # (the stamp's settings) every first call cold
    return opts


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts = parse(argv)
    data = run(opts)
    data["stamp"] = stamp({**settings(opts, argv, "python -m jitcore bench --zoo"),
                           "full": opts.full, "chunk": opts.chunk})
    print_tables(data, opts.systems_list)
    save(data, opts)
    return 0 if all(p["passed"] == p["models"] for p in data["summary"]) else 1


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        saved = json.load(f)
    saved["summary"] = summary(saved)             # (derived: recomputed by this version)
    print_tables(saved, [s for s in SYSTEMS if any(r["system"] == s for r in saved["runs"])])
    if len(sys.argv) > 2:
        print(plot(saved, sys.argv[2], list(SYSTEMS)))

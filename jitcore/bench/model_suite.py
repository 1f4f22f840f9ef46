"""`python -m jitcore bench --models`: whole PyTorch models, jitcore.torch against torch eager
(inference_mode), torch.compile (Inductor, freezing on), ONNX Runtime (CPU provider, graph
optimizations ORT_ENABLE_ALL) and OpenVINO (CPU plugin, fp32, latency hint); torch.compile also
with mode="max-autotune" (torch.compile-max-autotune).

    python -m jitcore bench --models [--only mlp,resnet50] [--threads 1,2] [--batch 1,8]
                                     [--systems jitcore,torch,torch.compile,onnxruntime,openvino]
                                     [--precision fp32|bf16|fp32,bf16]
                                     [--repeat N] [--no-cold] [--json PATH] [--plot PATH] [--tiny]

`--precision bf16` runs the bf16 systems instead (issue 30): jitcore-bf16
(precision="bf16"), torch-autocast (eager under CPU autocast to bf16), torch.compile-autocast,
openvino-bf16 (INFERENCE_PRECISION_HINT bf16) and onnxruntime-bf16 (n/a where ONNX Runtime
has no bf16 kernels: x86-64), beside float32 eager; `fp32,bf16` runs both sets. Every cell
reports its normwise error against float64 eager; a bf16 cell is 'wrong' above 5e-2 of it.
jitcore-bf16's ratio is to the best of the bf16 runtimes (issue 30's target: geomean >=
1.1x, no model below 1.0x), its error beside torch-autocast's (the target: no worse).

Each system, thread count and batch runs in child processes of its own
(jitcore/bench/model_child.py says how each system runs a model), pinned to as many cores as
threads, as the kernel suite's: a cold child (empty JITCORE and TORCHINDUCTOR cache
directories) times the first call, compile included; the timing child, whose caches the cold
child filled, times the warm first call and then the calls. The batch is the leading dimension
of every model's input (images, sequences, rows). Per model, thread count and batch: latency
(median), speedup over eager, jitcore's ratio to the best of ONNX Runtime and OpenVINO (their
latency / jitcore's: above 1.0 jitcore is faster; issue 29's target for the CNNs: each at
>= 1.0x, geomean >= 1.1x), CPU time per call (median x CPU seconds per wall second of the timed
loop: on a loaded machine the scheduler's share distorts wall times, less so CPU times), the
normwise relative error against eager (a system above 1e-4 is 'wrong'), first calls (cold
only where the cold child ran: not with --no-cold), jitcore's fallback node count.
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

from .cli import (Progress, add_target_option, check_target, cold_measured, fmt_seconds,
                  machine, settings, spawn_child, versions)
from .model_child import BF16_SYSTEMS, FP32_SYSTEMS, SYSTEM_MODULES, SYSTEMS
from .stamp import caption, stamp

NAMES = ("mlp", "resnet18", "mobilenet_v2", "resnet50", "efficientnet_b0", "convnext_tiny",
         "bert", "gpt2")
NEEDS = {n: "transformers" for n in ("resnet50", "efficientnet_b0", "convnext_tiny", "bert",
                                     "gpt2")}
CNNS = ("resnet18", "mobilenet_v2", "resnet50", "efficientnet_b0", "convnext_tiny")
RUNTIMES = ("onnxruntime", "openvino")       # jitcore's yardstick: the faster of the two
# per precision: jitcore's system and the runtimes it is measured against
YARDSTICKS = {"fp32": ("jitcore", RUNTIMES),
              "bf16": ("jitcore-bf16", ("onnxruntime-bf16", "openvino-bf16"))}
VERSIONED = ("jitcore", "torch", "transformers", "onnx", "onnxruntime", "openvino")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def run(names: list, systems: list, threads_list: list, opts) -> dict:
    present = [s for s in systems if installed(SYSTEM_MODULES[s])]
    names = [n for n in names if NEEDS.get(n) is None or installed(NEEDS[n])]
    progress = Progress(len(names) * len(present) * len(threads_list) * len(opts.batches)
                        * (2 - opts.no_cold))
    root = tempfile.mkdtemp(prefix="jitcore-models-")
    runs = []
    try:
        for batch in opts.batches:
            for threads in threads_list:
                for system in present:
                    runs.append(_measure(system, threads, batch, names, opts, progress, root))
                runs += [{"system": s, "threads": threads, "batch": batch, "results": {
                    n: {"status": "missing", "error": f"{SYSTEM_MODULES[s]} is not installed"}
                    for n in names}} for s in systems if s not in present]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    progress.finish()
    data = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(opts.target), "versions": versions(VERSIONED),
            "tiny": opts.tiny, "cold": not opts.no_cold, "models": names,
            "batches": list(opts.batches), "runs": runs}
    data["vs_best_runtime"] = summary(data)
    if "jitcore-bf16" in present:
        data["vs_best_runtime_bf16"] = summary(data, "bf16")
    return data


def _measure(system: str, threads: int, batch: int, names: list, opts, progress: Progress,
             root: str) -> dict:
    """One system at one thread count and batch: the cold child (unless --no-cold), then
    the timing child on the caches it filled."""
    cache = os.path.join(root, f"{system}-{threads}-{batch}")
    cmd = [sys.executable, "-m", "jitcore.bench.model_child", "--system", system,
           "--threads", str(threads), "--batch", str(batch), "--models", ",".join(names),
           "--repeat", str(opts.repeat), "--ref-dir", root] + \
        (["--tiny"] if opts.tiny else [])
    label = f"{system} @ {threads}, batch {batch}"
    cold = None
    if not opts.no_cold:
        cold = spawn_child(cmd + ["--first-calls-only"], threads, names, progress, cache,
                           f"{label} cold", target=opts.target)
    report = spawn_child(cmd, threads, names, progress, cache, label, target=opts.target)
    for n, c in report["results"].items():
        if cold is not None:
            c["first_call_cold_s"] = cold["results"][n].get("first_call_s")
    return {"system": system, "threads": threads, "batch": batch,
            "cores": report.get("cores"), "results": report["results"]}


def _cell(runs: list, system: str, threads: int, name: str, batch: int = 1) -> dict:
    for r in runs:
        if r["system"] == system and r["threads"] == threads and r.get("batch", 1) == batch:
            return r["results"].get(name, {"status": "n/a"})
    return {"status": "n/a"}


def speedup(data: dict, system: str, threads: int, name: str, batch: int = 1):
    c, base = (_cell(data["runs"], s, threads, name, batch) for s in (system, "torch"))
    if c.get("status") != "ok" or base.get("status") != "ok" or "median_s" not in c:
        return None
    return base["median_s"] / c["median_s"]


def cpu_s(c: dict):
    return c["median_s"] * c["cpu_per_wall"] if "cpu_per_wall" in c else None


def cpu_speedup(data: dict, system: str, threads: int, name: str, batch: int = 1):
    c, base = (_cell(data["runs"], s, threads, name, batch) for s in (system, "torch"))
    if c.get("status") != "ok" or base.get("status") != "ok" or not cpu_s(c):
        return None
    return cpu_s(base) / cpu_s(c)


def vs_best_runtime(data: dict, threads: int, name: str, batch: int = 1,
                    precision: str = "fp32", cpu: bool = False):
    """(the best runtime's latency / jitcore's, that runtime) of one model: the faster of
    ONNX Runtime and OpenVINO among those that ran it right (`precision` "bf16":
    jitcore-bf16 against their bf16 systems; `cpu`: of CPU time per call, which a loaded
    machine's scheduler distorts less); None where jitcore or both runtimes have no right
    answer timed."""
    system, runtimes = YARDSTICKS[precision]

    def time_of(c):
        return cpu_s(c) if cpu else c.get("median_s")
    jit = _cell(data["runs"], system, threads, name, batch)
    timed = [(time_of(c), s) for s in runtimes
             if (c := _cell(data["runs"], s, threads, name, batch)).get("status") == "ok"
             and time_of(c)]
    if jit.get("status") != "ok" or not time_of(jit) or not timed:
        return None
    best_s, best = min(timed)
    return best_s / time_of(jit), best


def error_vs_autocast(data: dict, threads: int, name: str, batch: int = 1):
    """jitcore-bf16's normwise error against float64 over torch-autocast's, same model and
    inputs (issue 30's target: <= 1); None where either has no float64 error."""
    jit, ac = (_cell(data["runs"], s, threads, name, batch).get("rel_error_f64")
               for s in ("jitcore-bf16", "torch-autocast"))
    return None if jit is None or not ac else jit / ac


def geomean(values: list):
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summary(data: dict, precision: str = "fp32") -> list:
    """jitcore against the best runtime per thread count and batch: each model's ratio and
    runtime, the geomean over all models and over the CNNs (the JSON's vs_best_runtime;
    `precision` "bf16": jitcore-bf16 against the bf16 runtimes, vs_best_runtime_bf16)."""
    out = []
    for threads, batch in _points(data):
        found = {n: r for n in data["models"]
                 if (r := vs_best_runtime(data, threads, n, batch, precision)) is not None}
        ratios = {n: r for n, (r, _) in found.items()}
        cpu = {n: r for n in data["models"]
               if (r := vs_best_runtime(data, threads, n, batch, precision, True)) is not None}
        out.append({"threads": threads, "batch": batch, "ratios": ratios,
                    "best": {n: s for n, (_, s) in found.items()},
                    "geomean": geomean(list(ratios.values())),
                    "geomean_cnns": geomean([r for n, r in ratios.items() if n in CNNS]),
                    "ratios_cpu": {n: r for n, (r, _) in cpu.items()},
                    "geomean_cpu": geomean([r for r, _ in cpu.values()])})
    return out


def _points(data: dict) -> list:
    """(threads, batch) of every measured table, in order."""
    return sorted({(r["threads"], r.get("batch", 1)) for r in data["runs"]})


def _ratio_columns(systems: list) -> list:
    """The precisions whose jitcore-to-runtime ratio column the latency table shows."""
    return [p for p, (jit, runtimes) in YARDSTICKS.items()
            if jit in systems and any(s in systems for s in runtimes)]


def print_tables(data: dict, systems: list) -> None:
    names = data["models"]
    cold = cold_measured(data)
    first_title = ("first call (compile + run), s: cold cache / warm cache" if cold else
                   "first call (compile + run), s: warm cache (no cold child: --no-cold)")
    ratios = _ratio_columns(systems)
    ratio_head = "".join(f"{'jc vs best runtime' + ('' if p == 'fp32' else ' ' + p):>24s}"
                         for p in ratios)
    tables = [("latency, median ms (speedup over torch eager)" + (
                  "; jitcore's ratio to the best of onnxruntime and openvino (their ms / "
                  "jitcore's; bf16: of their bf16 systems)" if ratios else ""),
               _latency, ratio_head),
              ("CPU ms per call (median x CPU-s per wall-s: what a loaded machine's "
               "scheduler does not distort), speedup over eager's", _cpu, ""),
              (first_title, _first if cold else _first_warm, ""),
              ("relative error vs eager (normwise); jitcore: fallback nodes", _error, "")]
    if any("rel_error_f64" in c for r in data["runs"] for c in r["results"].values()):
        tables.append(("relative error vs float64 eager (normwise): accuracy beside speed",
                       _error_f64, ""))
    for threads, batch in _points(data):
        print(f"\n=== {threads} thread(s), batch {batch} ===")
        width = max([22] + [len(s) + 2 for s in systems])
        head = f"{'model':16s}" + "".join(f"{s:>{width}s}" for s in systems)
        for title, text, extra in tables:
            print(f"\n{title}\n{head + extra}\n{'-' * len(head + extra)}")
            for n in names:
                row = "".join(f"{text(data, s, threads, n, batch):>{width}s}"
                              for s in systems)
                if extra:
                    row += "".join(f"{_ratio(data, threads, n, batch, p):>24s}"
                                   for p in ratios)
                print(f"{n:16s}{row}")
        for label, fn in (("latency", speedup), ("CPU time", cpu_speedup)):
            print(f"geomean speedup over eager ({label}):" + "".join(
                f"  {s} {g:.2f}x" for s in systems
                if (g := geomean([fn(data, s, threads, n, batch) for n in names])) is not None))
        for p in ratios:
            print(_summary_line(data, threads, batch, p))
        if "jitcore-bf16" in systems and "torch-autocast" in systems:
            print(_autocast_line(data, threads, batch))
        for s in systems:
            for n in names:
                c = _cell(data["runs"], s, threads, n, batch)
                if c.get("status") in ("failed", "wrong"):
                    print(f"  {s} {n}: {c['status']}: {c.get('error', '')}"
                          f"{' error %.2e' % c['rel_error'] if 'rel_error' in c else ''}")
            why = {c.get("error") for n in names
                   if (c := _cell(data["runs"], s, threads, n, batch)).get("status") == "n/a"
                   and c.get("error")}
            print("".join(f"  {s}: n/a: {w}\n" for w in sorted(why)), end="")


def _summary_line(data: dict, threads: int, batch: int, precision: str = "fp32") -> str:
    point = next((p for p in summary(data, precision)     # (a saved run's, recomputed)
                  if p["threads"] == threads and p["batch"] == batch), None)
    jit, runtimes = YARDSTICKS[precision]
    who = f"{jit} vs the best of {' and '.join(runtimes)}"
    if point is None or point["geomean"] is None:
        return f"{who}: neither ran right"
    text = f"{who}, geomean: {point['geomean']:.2f}x over {len(point['ratios'])} model(s)"
    if point["geomean_cnns"] is not None:
        text += f"; CNNs {point['geomean_cnns']:.2f}x"
    if point.get("geomean_cpu") is not None:
        text += f"; of CPU time {point['geomean_cpu']:.2f}x"
    if precision == "bf16":
        return text + (f"; lowest {min(point['ratios'].values()):.2f}x (issue 30's target: "
                       "the geomean >= 1.1x, no model below 1.0x)")
    return text + " (issue 29's target: each CNN >= 1.0x, the geomean >= 1.1x)"


def _autocast_line(data: dict, threads: int, batch: int) -> str:
    found = {n: r for n in data["models"]
             if (r := error_vs_autocast(data, threads, n, batch)) is not None}
    if not found:
        return "jitcore-bf16's error vs float64 against torch-autocast's: neither measured"
    worse = sorted(n for n, r in found.items() if r > 1.0)
    return ("jitcore-bf16's error vs float64 / torch-autocast's: "
            + ", ".join(f"{n} {r:.2f}" for n, r in found.items())
            + f" ({len(found) - len(worse)} of {len(found)} no worse"
            + (f"; worse: {', '.join(worse)}" if worse else "") + ")")


def _ratio(data, threads, n, batch, precision="fp32") -> str:
    found = vs_best_runtime(data, threads, n, batch, precision)
    return "-" if found is None else f"{found[0]:.2f}x {found[1]}"


def _latency(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    if "median_s" not in c:
        return c.get("status", "?")
    sp = speedup(data, s, threads, n, batch)
    return fmt_seconds(c["median_s"]) + (f" ({sp:.2f}x)" if sp else "") + \
        ("" if c["status"] == "ok" else " WRONG")


def _cpu(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    if not cpu_s(c):
        return c.get("status", "?")
    sp = cpu_speedup(data, s, threads, n, batch)
    return fmt_seconds(cpu_s(c)) + (f" ({sp:.2f}x)" if sp else "")


def _first(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    if "first_call_s" not in c:
        return c.get("status", "?")
    cold = c.get("first_call_cold_s")
    return f"{'-' if cold is None else f'{cold:.2f}'} / {c['first_call_s']:.2f}"


def _first_warm(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    return f"{c['first_call_s']:.2f}" if "first_call_s" in c else c.get("status", "?")


def _error(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    if "rel_error" not in c:
        return c.get("status", "?")
    text = f"{c['rel_error']:.1e}"
    if "fallbacks" in c:
        text += f"; {c['fallbacks']} fb"
    return text


def _error_f64(data, s, threads, n, batch) -> str:
    c = _cell(data["runs"], s, threads, n, batch)
    return f"{c['rel_error_f64']:.1e}" if "rel_error_f64" in c else c.get("status", "?")


def plot(data: dict, path: str, systems: list) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    points = _points(data)
    names = data["models"]
    fig, axes = plt.subplots(len(points), 2, figsize=(14, 3.5 * len(points)), squeeze=False)
    shown = [s for s in systems if s != "torch"]
    width = 0.8 / max(len(shown), 1)
    for row, (threads, batch) in zip(axes, points):
        for ax, (label, fn) in zip(row, (("latency", speedup), ("CPU time", cpu_speedup))):
            for i, s in enumerate(shown):
                ax.bar([j + i * width for j in range(len(names))],
                       [fn(data, s, threads, n, batch) or 0 for n in names], width, label=s)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xticks([j + 0.4 - width / 2 for j in range(len(names))])
            ax.set_xticklabels(names, rotation=20, ha="right")
            ax.set_ylabel(f"speedup over eager ({label})")
            ax.set_title(f"{threads} thread(s), batch {batch}, {label} - "
                         f"{data['machine']['brand']}, {data['date'][:10]}", fontsize=9)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return f"plot written to {path}"


def save(data: dict, opts) -> None:
    """The results as JSON (--json) and a plot (--plot), where the options ask for them."""
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(data, f, indent=1)
        print(f"results written to {opts.json}")
    if opts.plot:
        print(plot(data, opts.plot, opts.systems_list))


def check_names(ap, opts, models) -> None:
    """Eager torch first among opts.systems_list (speedups are over it); an unknown model of
    opts.names or system is the parser's error, listing the known ones."""
    if "torch" not in opts.systems_list:
        opts.systems_list.insert(0, "torch")
    unknown = [n for n in opts.names if n not in models] + \
        [s for s in opts.systems_list if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}; models: {', '.join(models)}; "
                 f"systems: {', '.join(SYSTEMS)}")


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m jitcore bench --models",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated models: " + ",".join(NAMES))
    ap.add_argument("--systems", help="comma-separated (default: those of --precision): "
                                      + ",".join(SYSTEMS))
    ap.add_argument("--precision", default="fp32",
                    help="fp32, bf16 or fp32,bf16: which systems run when --systems does not "
                         "say (torch eager always: speedups are over it)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--batch", default="1",
                    help="comma-separated batch sizes: the leading dimension of every model's "
                         "input (default 1)")
    ap.add_argument("--repeat", type=int, default=None, help="timed samples (default 9, tiny 3)")
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-cache children")
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--tiny", action="store_true", help="small models, few repeats")
    add_target_option(ap)
    opts = ap.parse_args(argv)
    opts.names = opts.only.split(",") if opts.only else list(NAMES)
    sets = {"fp32": FP32_SYSTEMS, "bf16": BF16_SYSTEMS}
    precisions = opts.precision.split(",")
    if any(p not in sets for p in precisions):
        ap.error(f"--precision takes fp32, bf16 or fp32,bf16, got {opts.precision}")
    opts.systems_list = opts.systems.split(",") if opts.systems else \
        [s for p in precisions for s in sets[p]]
    check_names(ap, opts, NAMES)
    try:
        opts.threads_list = [int(t) for t in opts.threads.split(",")]
        opts.batches = [int(b) for b in opts.batch.split(",")]
    except ValueError:
        ap.error("--threads and --batch take comma-separated integers, e.g. 1,8")
    if min(opts.threads_list + opts.batches) < 1:
        ap.error("--threads and --batch must be at least 1")
    opts.repeat = opts.repeat or (3 if opts.tiny else 9)
    check_target(ap, opts)
    return opts


def report(data: dict, systems: list) -> None:
    """Print the tables of a saved run: `python -m jitcore.bench.model_suite RUN.json
    [PLOT.png]`."""
    m = data["machine"]
    print(caption(data))
    print(f"{m['brand']} ({m['cpu']}), target {m.get('target', 'native')}: {m['isa']}, "
          f"{m['cpus']} cpus; {data['date']}; "
          + ", ".join(f"{k} {v}" for k, v in data["versions"].items()))
    print_tables(data, systems)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    opts = parse(argv)
    data = run(opts.names, opts.systems_list, opts.threads_list, opts)
    data["stamp"] = stamp(settings(opts, argv, "python -m jitcore bench --models"))
    report(data, opts.systems_list)
    save(data, opts)
    bad = [c for r in data["runs"] if r["system"] in ("jitcore", "jitcore-bf16")
           for c in r["results"].values()
           if c.get("status") != "ok"]
    return 1 if bad else 0


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        saved = json.load(f)
    present = [s for s in SYSTEMS if any(r["system"] == s for r in saved["runs"])]
    report(saved, present)
    if len(sys.argv) > 2:
        print(plot(saved, sys.argv[2], present))

"""The README's benchmark tables from a saved run: `python -m jitcore bench --render
examples/results/bench.json` (or `python -m jitcore.bench.markdown FILE`). First a caption
naming the machine, commit and date of the run (stamp.caption). A kernel-suite run: per thread
count, one table of natural-use and compute-only medians with their speedups over numpy's,
one of the memory-bound workloads' GB/s as % of the copy bandwidth, one of the matmul and
convolution workloads' GFLOP/s as % of the fp32 FMA peak (roofline.py), and one of first calls
(cold / warm where the run measured cold ones, else warm only). A model run (`bench
--models`): per thread count and batch, latency with the speedup over eager, first calls
(labelled alike), and the error against eager with jitcore's fallback nodes. A generation run
(`bench --generate`): generate_suite's tables."""
from __future__ import annotations

import json
import sys

from .cli import cell, cold_measured, first_call_cell, first_call_title, fmt_seconds, roofline_cell
from .roofline import compute_cell, fma_peak, peak_of
from .stamp import caption
from .systems import SYSTEMS
from .workloads import BY_NAME


def _time(c: dict, base: dict, unit: str) -> str:
    if c.get("status") != "ok":
        return c.get("status", "?")
    text = fmt_seconds(c["median_s"], unit)
    if base.get("status") == "ok":
        text += f" ({base['median_s'] / c['median_s']:.2f}x)"
    return text


def tables(data: dict) -> str:
    """The markdown of a saved kernel-suite, model or generation run, its caption first."""
    if "models" in data:
        return model_tables(data)
    if "tokens" in data:                       # bench --generate
        from .generate_suite import tables as generation_tables
        return generation_tables(data)
    lines, names = [f"Measured on {caption(data)}."], list(data["workloads"])
    for threads in sorted({r["threads"] for r in data["runs"]}):
        at = {r["system"]: r for r in data["runs"] if r["threads"] == threads}
        systems = [s for s in SYSTEMS if s in at]
        numpy = at.get("numpy", {"results": {}})
        head = "| workload | " + " | ".join(systems) + " |"
        rule = "|---" * (len(systems) + 1) + "|"
        lines += [f"\n{threads} thread(s): natural use / compute only, median ms (us for "
                  f"dispatch_1024), speedup over numpy's same column; median of "
                  f"{data.get('runs_count', 1)} interleaved run(s)\n", head, rule]
        for n in names:
            unit, base = BY_NAME[n].unit, cell(numpy, n)
            row = []
            for s in systems:
                c = cell(at[s], n)
                into = c.get("compute_only", c)
                row.append(f"{_time(c, base, unit)} / "
                           f"{_time(into, base.get('compute_only', {}), unit)}"
                           if c.get("status") == "ok" else c.get("status", "?"))
            lines.append(f"| {n}{' (us)' if unit == 'us' else ''} | " + " | ".join(row) + " |")
        memory_bound = [n for n in names if BY_NAME[n].memory_bound]
        copy = at.get("jitcore", {}).get("copy_gbs")
        if memory_bound:
            measured = f"copy bandwidth {copy:.1f} GB/s" if copy else "no copy bandwidth"
            lines += [f"\n{threads} thread(s): streaming roofline, GB/s (% of the {measured} "
                      f"measured in the same run), natural use / compute only\n", head, rule]
            for n in memory_bound:
                lines.append(f"| {n} | " + " | ".join(roofline_cell(cell(at[s], n))
                                                      for s in systems) + " |")
        compute_bound = [n for n in names if BY_NAME[n].gemm and BY_NAME[n].flops is not None]
        peak = fma_peak(at.get("jitcore", {}), threads)
        if compute_bound:
            measured = (f"{peak:.0f} GFLOP/s fp32 FMA peak of {threads} core(s)" if peak else
                        "no FMA peak")
            bf16_peak = peak_of(at.get("jitcore", {}), threads, "bf16")
            if bf16_peak and bf16_peak != peak:
                measured += f"; bf16 rows: of the {bf16_peak:.0f} GFLOP/s vdpbf16ps peak"
            lines += [f"\n{threads} thread(s): GFLOP/s (% of the {measured} measured in the "
                      f"same run), natural use / compute only\n", head, rule]
            for n in compute_bound:
                bound = peak_of(at.get("jitcore", {}), threads, BY_NAME[n].precision)
                lines.append(f"| {n} | " + " | ".join(compute_cell(cell(at[s], n), bound)
                                                      for s in systems) + " |")
        cold = cold_measured(data)
        lines += [f"\n{threads} thread(s): {first_call_title(data)}\n", head, rule]
        for n in names:
            lines.append(f"| {n} | " + " | ".join(first_call_cell(cell(at[s], n), cold)
                                                  for s in systems) + " |")
    return "\n".join(lines)


def model_tables(data: dict) -> str:
    """A model run's tables: latency (speedup over eager), first call, error and fallbacks."""
    from .model_child import SYSTEMS as MODEL_SYSTEMS
    from .model_suite import _cell, _points, speedup
    names = data["models"]
    systems = [s for s in MODEL_SYSTEMS if any(r["system"] == s for r in data["runs"])]
    cold = cold_measured(data)
    head = "| model | " + " | ".join(systems) + " |"
    rule = "|---" * (len(systems) + 1) + "|"
    lines = [f"Measured on {caption(data)}."]
    for threads, batch in _points(data):
        def latency(c, s, name):
            if "median_s" not in c:
                return c.get("status", "?")
            sp = speedup(data, s, threads, name, batch)
            return fmt_seconds(c["median_s"]) + (f" ({sp:.2f}x)" if sp else "") + \
                ("" if c["status"] == "ok" else " WRONG")

        def first(c, s, name):
            if "first_call_s" not in c:
                return c.get("status", "?")
            if not cold:
                return f"{c['first_call_s']:.2f}"
            cold_s = c.get("first_call_cold_s")
            return f"{'-' if cold_s is None else f'{cold_s:.2f}'} / {c['first_call_s']:.2f}"

        def error(c, s, name):
            if "rel_error" not in c:
                return c.get("status", "?")
            return f"{c['rel_error']:.1e}" + (f"; {c['fallbacks']} fb" if "fallbacks" in c else "")

        first_title = ("cold cache / warm cache" if cold else
                       "warm cache (no cold child: --no-cold)")
        for title, text in (("latency, median ms (speedup over torch eager)", latency),
                            (f"first call (compile + run), s: {first_title}", first),
                            ("normwise error against eager; jitcore: fallback nodes", error)):
            lines += [f"\n{threads} thread(s), batch {batch}: {title}\n", head, rule]
            lines += [f"| {n} | " + " | ".join(text(_cell(data["runs"], s, threads, n, batch), s, n)
                                               for s in systems) + " |" for n in names]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m jitcore bench --render RESULTS.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        print(tables(json.load(f)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

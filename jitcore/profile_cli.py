"""`python -m jitcore profile [--top N] [--keep DIR] script.py [args...]`: where a program's
time goes, kernel by kernel.

Runs the script under Linux `perf record` (CPU-clock sampling, 999 Hz, every thread) with
JITCORE_PERF_MAP=1, so that each fused kernel jitcore compiles is named in the perf map
(jitcore/perfmap.py), then prints each jitcore kernel's share of the samples (of all, and of
jitcore's code: compiling and Python left out), jitcore's code in all, and the rest of the
process (Python, numpy, torch) by shared object. A kernel shared by equal layers (`(x3)`)
is one line: their code is one. Without --keep, perf.data and the perf maps the script's
processes wrote are removed afterwards.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

from . import perfmap

_SEP = ";"                      # perf report's field separator (no kernel name has one)


def _perf() -> str:
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("python -m jitcore profile needs Linux perf on PATH "
                         "(Debian/Ubuntu: apt install linux-perf / linux-tools-generic)")
    return perf


def samples(report: str) -> list:
    """(percent, shared object, symbol) rows of `perf report --stdio --sort dso,sym -t ';'`;
    a kernel's samples in several threads (`[JIT] tid N`) are summed."""
    totals: dict = {}
    for line in report.splitlines():
        fields = line.strip().split(_SEP)
        if line.startswith("#") or len(fields) != 3 or not fields[0].strip().endswith("%"):
            continue
        dso = "[JIT]" if fields[1].startswith("[JIT]") else fields[1].strip()
        sym = re.sub(r"^\[[.k]\]\s*", "", fields[2].strip())
        totals[(dso, sym)] = totals.get((dso, sym), 0.0) + float(fields[0].strip().rstrip("%"))
    return sorted(((pct, dso, sym) for (dso, sym), pct in totals.items()), reverse=True)


def summary(rows: list, top: int) -> str:
    """The table printed: jitcore's kernels (their share of all samples), then the rest of
    the process by shared object."""
    ours = [r for r in rows if r[2].startswith("jitcore:")]
    others: dict = {}
    for pct, dso, sym in rows:
        if not sym.startswith("jitcore:"):
            others[dso] = others.get(dso, 0.0) + pct
    total = sum(r[0] for r in ours) or 1.0
    out = [f"{'% samples':>9} {'% jitcore':>9}  jitcore kernel (graph:kernel kind ops)"]
    for pct, _, sym in ours[:top]:
        out.append(f"{pct:8.2f}% {100 * pct / total:8.2f}%  {sym[len('jitcore:'):]}")
    if len(ours) > top:
        rest = sum(r[0] for r in ours[top:])
        out.append(f"{rest:8.2f}% {100 * rest / total:8.2f}%  ... {len(ours) - top} more")
    out.append(f"{sum(r[0] for r in ours):8.2f}% {100.0:8.2f}%  all jitcore code")
    out.append("")
    out.append(f"{'% samples':>9}  the rest, by shared object")
    for dso, pct in sorted(others.items(), key=lambda kv: -kv[1])[:8]:
        out.append(f"{pct:8.2f}%  {dso}")
    return "\n".join(out)


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog="python -m jitcore profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--top", type=int, default=25, help="kernels listed (default 25)")
    parser.add_argument("--keep", help="keep perf.data in this directory")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    perf = _perf()
    work = args.keep or tempfile.mkdtemp(prefix="jitcore-profile-")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "perf.data")
    env = {**os.environ, "JITCORE_PERF_MAP": "1"}
    maps_before = set(glob.glob(perfmap.path("*")))
    run = subprocess.run([perf, "record", "-F", "999", "-e", "cpu-clock", "-o", data, "--",
                          sys.executable, args.script, *args.args], env=env)
    if run.returncode != 0:
        print(f"jitcore profile: the script (or perf) exited with {run.returncode}",
              file=sys.stderr)
        return run.returncode
    report = subprocess.run([perf, "report", "-i", data, "--stdio", "--sort", "dso,sym",
                             "-t", _SEP],
                            capture_output=True, text=True)
    if report.returncode != 0:
        print(report.stderr, file=sys.stderr)
        return report.returncode
    print(summary(samples(report.stdout), args.top))
    if not args.keep:                  # (with --keep, perf report can be run again later)
        shutil.rmtree(work, ignore_errors=True)
        _remove_maps(set(glob.glob(perfmap.path("*"))) - maps_before)
    return 0


def _remove_maps(paths: set) -> None:
    """Delete the perf maps the script's processes left, those holding jitcore's names only."""
    for path in paths:
        try:
            with open(path) as f:
                ours = all(" jitcore:" in line for line in f if line.strip())
            if ours:
                os.remove(path)
        except OSError:
            pass

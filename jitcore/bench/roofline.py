"""The streaming roofline of the suite: every memory-bound workload's GB/s (the bytes its
call must move: inputs read once, output written once; `Workload.nbytes`) as a share of the
copy bandwidth jitcore's child measured in the same run at the same thread count, for the
natural-use and the compute-only (preallocated output) columns of every system.

The copy is np.copyto of 64 MB (16M float32; 64K in --tiny) counted as 2 bytes moved per byte
copied; a normal store also reads its line first, so a kernel that streams its output
(non-temporal stores) can exceed 100%, as can data still in cache.
"""
from __future__ import annotations

from .workloads import BY_NAME


def copy_gbs(run: dict) -> float | None:
    """The copy bandwidth jitcore's child measured in `run` (a merged run entry)."""
    return (run.get("bandwidth_gbs") or {}).get("copy")


def add_roofline(runs: list) -> None:
    """Add `gbs` and `copy_fraction` to the natural-use and compute-only cells of every
    memory-bound workload of every system (in place), from jitcore's copy bandwidth at the
    same thread count; runs without that measurement get no fraction."""
    copy = {r["threads"]: copy_gbs(r) for r in runs if r["system"] == "jitcore"}
    for run in runs:
        bw = copy.get(run["threads"])
        run["copy_gbs"] = bw
        for name, cell in run["results"].items():
            if name not in BY_NAME or not BY_NAME[name].memory_bound:
                continue
            for c in (cell, cell.get("compute_only", {})):
                if c.get("status") == "ok" and "bytes" in cell:
                    c["gbs"] = cell["bytes"] / c["median_s"] / 1e9
                    if bw:
                        c["copy_fraction"] = c["gbs"] / bw


def roofline_text(c: dict) -> str:
    """'GB/s (x% of copy)' of one cell, '-' where there is none."""
    if c.get("status") != "ok" or "gbs" not in c:
        return "-"
    if "copy_fraction" not in c:
        return f"{c['gbs']:.1f}"
    return f"{c['gbs']:.1f} ({c['copy_fraction']:.0%})"

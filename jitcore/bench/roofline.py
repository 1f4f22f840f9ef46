"""The rooflines of the suite. Streaming: every memory-bound workload's GB/s (the bytes its
call must move: inputs read once, output written once; `Workload.nbytes`) as a share of the
copy bandwidth jitcore's child measured in the same run at the same thread count, for the
natural-use and the compute-only (preallocated output) columns of every system. Compute: every
matmul and convolution workload's GFLOP/s (`Workload.flops`, 2 per multiply-add) as a share of
the fp32 FMA peak jitcore's child measured on one core in the same run, times the threads.

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


def fma_peak(run: dict, threads: int) -> float | None:
    """The fp32 FMA peak of `threads` cores from jitcore's merged run entry: its measured
    one-core peak times the threads; None where it was not measured."""
    per_core = run.get("fma_peak_gflops_per_core")
    return per_core * threads if per_core else None


def peak_of(run: dict, threads: int, precision: str = "fp32") -> float | None:
    """The peak a workload of matmul `precision` is measured against: fma_peak, or for
    "bf16" the vdpbf16ps peak (None where the CPU has no AVX512_BF16: jitcore then runs the
    float32 fallback, and the fp32 FMA peak is its bound)."""
    per_core = run.get("bf16_peak_gflops_per_core") if precision == "bf16" else None
    return per_core * threads if per_core else fma_peak(run, threads)


def gflops_text(c: dict, flops: float, peak: float | None) -> str:
    """'GFLOP/s (x% of peak)' of one cell (natural use or compute only), '-' where it was not
    timed."""
    if c.get("status") != "ok" or "median_s" not in c:
        return "-"
    gflops = flops / c["median_s"] / 1e9
    return f"{gflops:.1f}" + (f" ({gflops / peak:.0%})" if peak else "")


def compute_cell(c: dict, peak: float | None) -> str:
    """'natural / compute only' as 'GFLOP/s (% of peak)' each, or the cell's status."""
    if c.get("status") != "ok" or "flops" not in c:
        return c.get("status", "?")
    return (f"{gflops_text(c, c['flops'], peak)} / "
            f"{gflops_text(c.get('compute_only', {}), c['flops'], peak)}")

"""Where a result comes from: the one stamp every benchmark result file carries, and the
caption the README's tables print from it.

`stamp(settings)` records the commit (with a dirty flag), the UTC date, the CPU (model, the
LLVM name of the host, the flags that decide our kernels, physical cores, logical CPUs, the
CPUs this process may run on, L2 and L3 sizes), the version of every peer that is installed,
jitcore's and Python's versions, and the settings the writer passes (its command line and
options). Versions come from the installed distributions' metadata: nothing heavy is imported.
"""
from __future__ import annotations

import datetime
import importlib.metadata
import importlib.util
import os
import platform
import subprocess
from pathlib import Path

# the peers and libraries a figure can depend on: import name -> distribution name
PEERS = {"numpy": "numpy", "numexpr": "numexpr", "torch": "torch", "jax": "jax",
         "jaxlib": "jaxlib", "numba": "numba", "onnx": "onnx", "onnxruntime": "onnxruntime",
         "openvino": "openvino", "transformers": "transformers", "llvmlite": "llvmlite"}
# the CPU flags that decide which kernels run (ours and the peers')
FLAG_PREFIXES = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                 "avx512_bf16", "avx512_fp16", "avx_vnni", "amx")
BEFORE_STAMPS = "measured before stamps"
REPO = Path(__file__).resolve().parents[2]


def _git(*args: str):
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def commit() -> dict:
    """{"commit": HEAD's hash or None (not a git checkout), "dirty": whether tracked files
    differ from it (None where unknown)}."""
    head = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if head else None
    return {"commit": head, "dirty": None if status is None else bool(status)}


def _cpuinfo() -> list:
    """/proc/cpuinfo as one dict per logical CPU (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    cpus = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        cpus.append(fields)
    return cpus


def _cache_sizes() -> dict:
    """{"L2": bytes, "L3": bytes} of CPU 0's unified caches, from sysfs."""
    sizes = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        if level in ("2", "3") and kind == "Unified":
            units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
            sizes[f"L{level}"] = int(size.rstrip("KMG")) * units.get(size[-1], 1)
    return sizes


def cpu() -> dict:
    """The CPU the figures were measured on."""
    cpus = _cpuinfo()
    first = cpus[0] if cpus else {}
    flags = first.get("flags", "").split()
    cores = {(c.get("physical id"), c.get("core id")) for c in cpus if "core id" in c}
    try:
        import jitcore as jc
        llvm_cpu = jc.target_info()["host_cpu"]
    except Exception:                          # the stamp must never stop a result
        llvm_cpu = None
    return {"model": first.get("model name") or platform.processor() or platform.machine(),
            "llvm_cpu": llvm_cpu,
            "flags": sorted(f for f in flags if f.startswith(FLAG_PREFIXES)),
            "physical_cores": len(cores) or None, "logical_cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
            **_cache_sizes()}


def versions() -> dict:
    """Python's, jitcore's and every installed peer's version."""
    from jitcore.version import VERSION
    out = {"python": platform.python_version(), "jitcore": VERSION}
    for module, dist in PEERS.items():
        if importlib.util.find_spec(module) is None:
            continue
        try:
            out[module] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:   # importable, not pip-installed
            out[module] = "unknown"
    return out


def stamp(settings: dict) -> dict:
    """The stamp of a result: commit, date, CPU, versions and the writer's `settings`."""
    return {**commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu": cpu(), "versions": versions(), "settings": settings}


def caption(data: dict) -> str:
    """One line naming the machine, commit and date a result file came from, e.g. 'AMD EPYC
    (znver4), 2 cores, commit abc1234, 2026-12-03'. A file from before stamps says so, with
    the machine and date it recorded."""
    s = data.get("stamp")
    if not s or "commit" not in s:
        m = data.get("machine", {})
        machine = f"{m.get('brand', '?')} ({m.get('cpu', '?')}), {m.get('cpus', '?')} cpus"
        return f"{machine}, commit not recorded ({BEFORE_STAMPS}), {data.get('date', '?')[:10]}"
    c = s["cpu"]
    name = c["model"] + (f" ({c['llvm_cpu']})" if c.get("llvm_cpu") else "")
    cores = c.get("physical_cores") or c.get("logical_cpus")
    sha = (s["commit"] or "unknown")[:7] + (" + uncommitted changes" if s.get("dirty") else "")
    return f"{name}, {cores} cores, commit {sha}, {s['date'][:10]}"

"""Names for jitcore's JIT code in Linux `perf` profiles (JITCORE_PERF_MAP=1).

perf reads `/tmp/perf-<pid>.map` for code it finds no object file for: one line per symbol,
`START SIZE NAME` (hex start and size). With JITCORE_PERF_MAP=1 each compiled graph appends
its kernels there, named `jitcore:<graph>:<kernel> <kind> <ops>`, and its run and entry
functions, so that `perf record -g python prog.py` then `perf report` shows the time of each
fused kernel (`python -m jitcore profile` does both for a script).

LLVM does not report function sizes to us, so a symbol's size is the distance to the next
jitcore symbol of the same library (at most MAX_SIZE; the last one gets LAST_SIZE): a sample
in a library's helper functions is counted to the symbol before it.
"""
from __future__ import annotations

import os
import threading

MAP_DIR = "/tmp"                # where perf looks (tests point it elsewhere)
MAX_SIZE = 1 << 20
LAST_SIZE = 64 << 10
_LOCK = threading.Lock()
_WRITTEN: set = set()           # start addresses already in this process's map


def path(pid: int | None = None) -> str:
    return os.path.join(MAP_DIR, f"perf-{pid or os.getpid()}.map")


def lines(named: dict) -> list:
    """`START SIZE NAME` lines for {address: name}, sized by the next address."""
    starts = sorted(named)
    out = []
    for i, start in enumerate(starts):
        gap = starts[i + 1] - start if i + 1 < len(starts) else LAST_SIZE
        size = gap if 0 < gap <= MAX_SIZE else LAST_SIZE
        out.append(f"{start:x} {size:x} {named[start]}")
    return out


def write(named: dict) -> None:
    """Append {address: name} of one library to this process's perf map (addresses written
    before, by an earlier graph sharing the code, are left as they are)."""
    with _LOCK:
        fresh = {a: n for a, n in named.items() if a and a not in _WRITTEN}
        if not fresh:
            return
        with open(path(), "a") as f:
            f.write("\n".join(lines(fresh)) + "\n")
        _WRITTEN.update(fresh)


def kernel_name(graph: str, kernels: list) -> str:
    """The map name of a kernel's code: the first kernel that uses it, and how many share it
    (equal layers of a model are compiled once)."""
    k = kernels[0]
    shared = f" (x{len(kernels)})" if len(kernels) > 1 else ""
    return f"jitcore:{graph}:{k.name} {k.kind} {'+'.join(k.ops)}{shared}".replace("\n", " ")

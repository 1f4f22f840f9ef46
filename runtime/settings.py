"""Thread settings with PyTorch's semantics, and where each value came from.

Intra-op threads: `set_num_threads(n)` at any time between calls; otherwise from the
environment, JITCORE_NUM_THREADS > MKL_NUM_THREADS > OMP_NUM_THREADS, otherwise the usable
cores (CPU affinity and the cgroup CPU quota respected); a variable whose value is not a
count from 1 to 256 warns and is skipped. Inter-op threads:
`set_num_interop_threads(n)` once, and only before any inter-op work.
"""
from __future__ import annotations

import math
import os
import threading
import warnings

ENV_ORDER = ("JITCORE_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
MAX_THREADS = 256


def _cgroup_cpu_limit() -> int | None:
    """CPUs allowed by a cgroup v2 (cpu.max) or v1 (cfs quota/period) CPU quota, if any."""
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as fh:
            quota = int(fh.read())
        with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as fh:
            period = int(fh.read())
        if quota > 0 and period > 0:
            return max(1, math.ceil(quota / period))
    except (OSError, ValueError):
        pass
    return None


def usable_cores() -> tuple:
    """(count, how it was found): affinity mask, then the cgroup quota if lower."""
    try:
        n, how = len(os.sched_getaffinity(0)), "CPU affinity"
    except (AttributeError, OSError):
        n, how = os.cpu_count() or 1, "os.cpu_count()"
    quota = _cgroup_cpu_limit()
    if quota is not None and quota < n:
        n, how = quota, "cgroup CPU quota"
    return n, how


def validate_count(n, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int) and not (
            isinstance(n, str) and n.strip().isdigit()):
        raise ValueError(f"{what} must be a positive integer, got {n!r}")
    n = int(n)
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"{what} must be between 1 and {MAX_THREADS}, got {n}")
    return n


def _from_env(environ) -> tuple:
    for name in ENV_ORDER:
        raw = environ.get(name, "").strip()
        if raw:
            try:
                return validate_count(raw, name), f"environment variable {name}"
            except ValueError as e:      # torch warns and goes on too
                warnings.warn(f"jitcore: {e}; ignoring it", RuntimeWarning, stacklevel=2)
    n, how = usable_cores()
    return n, f"usable cores ({how})"


class ThreadSettings:
    """The process-wide settings; `on_change(n)` tells the pool about intra-op changes."""

    def __init__(self, environ=None):
        self._lock = threading.Lock()
        self.intra, self.intra_source = _from_env(os.environ if environ is None else environ)
        cores, how = usable_cores()
        self.interop, self.interop_source = cores, f"usable cores ({how})"
        self.interop_frozen = False
        self.on_change = None

    def set_num_threads(self, n) -> None:
        n = validate_count(n, "set_num_threads")
        with self._lock:
            self.intra, self.intra_source = n, "set_num_threads()"
        if self.on_change is not None:
            self.on_change(n)

    def set_num_interop_threads(self, n) -> None:
        n = validate_count(n, "set_num_interop_threads")
        with self._lock:
            if self.interop_frozen:
                raise RuntimeError("set_num_interop_threads: cannot be called after inter-op "
                                   "work has started (or after a previous call)")
            self.interop, self.interop_source = n, "set_num_interop_threads()"
            self.interop_frozen = True

    def freeze_interop(self) -> int:
        """Called when inter-op work starts: the count is fixed from now on."""
        with self._lock:
            self.interop_frozen = True
            return self.interop

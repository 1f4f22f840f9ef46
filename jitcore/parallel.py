"""Threads: the process-wide intra-op pool (compiled once from runtime.pool_ir) and its settings.

`jc.set_num_threads`, `jc.get_num_threads`, `jc.set_num_interop_threads`,
`jc.get_num_interop_threads` and `jc.parallel_info` live here. The pool's code is linked
into every compiled graph that has a kernel worth splitting (`jc_parallel_for`).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

from jitcore.runtime import POOL_EXPORTS, ThreadSettings, build_pool_module
from jitcore.runtime.forksafe import renew_in_child

from . import log

SETTINGS = ThreadSettings()
renew_in_child(SETTINGS, "_lock")
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")
_LIB = None
# the pools sleep on Linux futexes; elsewhere kernels and tasks run on the calling thread
THREADS_SUPPORTED = sys.platform.startswith("linux")


class _PoolLibrary:
    """The runtime's JIT library; never freed (worker threads run its code until exit)."""

    def __init__(self):
        from .cache import disk as diskcache
        from .targetinfo import select_target
        from .llvm import engine
        target = select_target()
        mach = engine.machine(target)
        exports = list(POOL_EXPORTS)
        # a new process finds the module's object by recipe: no IR generated (~30 ms)
        recipe = diskcache.ModuleRecipe(("thread pool", engine.RUNTIME.name, target.triple,
                                         mach.data_layout, exports), target.key())
        stored = recipe.load()
        self.library = None
        if stored is not None:
            try:
                self.library = engine.compile_modules([(None, stored)], exports, target)
            except diskcache.ModuleMissing:
                pass
        if self.library is None:
            text = engine.with_pipeline(build_pool_module(target.triple, mach.data_layout),
                                        engine.RUNTIME)
            entry = diskcache.Entry(text, target.key(), exports)
            self.library = engine.compile_ir(text, exports, target, cache=entry)
            recipe.store(entry.key)
        # an extra reference each: at interpreter exit, module teardown must not unmap code
        # that sleeping workers would return into
        for obj in (self.library, mach):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))
        addr = self.library.addresses
        self.parallel_for = addr["jc_parallel_for"]
        self.set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int32)(addr["jc_set_num_threads"])
        self.workers = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["jc_pool_workers"])
        self.after_fork = ctypes.CFUNCTYPE(None)(addr["jc_after_fork_child"])
        self.empty_region = ctypes.CFUNCTYPE(None)(addr["jc_pool_empty_region"])
        self.noop_call = ctypes.CFUNCTYPE(None)(addr["jc_pool_noop_call"])
        self.set_interop = ctypes.CFUNCTYPE(None, ctypes.c_int32)(addr["jc_set_interop_threads"])
        self.task_workers = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["jc_task_workers"])
        self.tasks_inflight = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["jc_tasks_inflight"])
        self.task_spawn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(
            addr["jc_task_spawn"])
        self.task_wait = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(addr["jc_task_wait"])
        self.set_threads(SETTINGS.intra if THREADS_SUPPORTED else 1)
        if not THREADS_SUPPORTED:
            log.warning("no thread pools on %s: kernels and tasks run on the calling thread",
                        sys.platform)


def start_interop() -> _PoolLibrary:
    """Inter-op work is about to start (a fork from Python, or a compiled graph with forked
    tasks): the inter-op thread count is fixed from now on. With no inter-op workers
    (unsupported platform) a waiter takes every task back and runs it itself."""
    lib = pool()
    count = SETTINGS.freeze_interop()
    lib.set_interop(count if THREADS_SUPPORTED else 0)
    return lib


def pool() -> _PoolLibrary:
    global _LIB
    if _LIB is None:
        with _LOCK:
            if _LIB is None:
                _LIB = _PoolLibrary()
    return _LIB


def _on_change(n: int):
    if _LIB is not None and THREADS_SUPPORTED:
        _LIB.set_threads(n)


SETTINGS.on_change = _on_change


def _after_fork_in_child():
    if _LIB is not None:
        _LIB.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def set_num_threads(n: int) -> None:
    """Intra-op threads for the following calls (any time between calls)."""
    SETTINGS.set_num_threads(n)


def get_num_threads() -> int:
    return SETTINGS.intra


def set_num_interop_threads(n: int) -> None:
    """Inter-op threads; once, and only before any inter-op work (else RuntimeError)."""
    SETTINGS.set_num_interop_threads(n)


def get_num_interop_threads() -> int:
    return SETTINGS.interop


def pool_workers() -> int:
    """Worker threads the intra-op pool has created so far (they persist)."""
    return pool().workers() if _LIB is not None else 0


def task_workers() -> int:
    """Inter-op worker threads created so far."""
    return pool().task_workers() if _LIB is not None else 0


def tasks_in_flight() -> int:
    """Forked tasks queued or running now (parallel regions leave one worker out per task)."""
    return pool().tasks_inflight() if _LIB is not None else 0


def parallel_info() -> str:
    """The thread settings and where each came from, the pool backend, the CPU and ISA."""
    from .targetinfo import target_info
    info = target_info()
    lines = [
        "jitcore parallel info",
        f"  intra-op threads: {SETTINGS.intra} (from {SETTINGS.intra_source})",
        f"  inter-op threads: {SETTINGS.interop} (from {SETTINGS.interop_source}"
        f"{', fixed' if SETTINGS.interop_frozen else ''})",
        f"  pool backend: native pthreads pools emitted as LLVM IR (futex sleep after a short "
        f"spin): {pool_workers()} intra-op and {task_workers()} inter-op worker thread(s) "
        f"created so far",
        "  environment: " + ", ".join(f"{k}={os.environ.get(k, '(unset)')}" for k in
                                        ("JITCORE_NUM_THREADS", "MKL_NUM_THREADS",
                                         "OMP_NUM_THREADS")),
        f"  CPU: {info['brand']} ({info['host_cpu']}), target {info['level']}, {info['isa']}, "
        f"{info['vector_bits']}-bit vectors",
    ]
    return "\n".join(lines)

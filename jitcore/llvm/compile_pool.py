"""Compile worker processes: LLVM builds modules on other cores while this process generates
the next kernels' IR and builds modules of its own.

llvmlite serializes every LLVM call behind one process-wide lock, so threads cannot build two
modules at once; processes can. The pool's workers each run machine_code.serve, loaded by
path (no jitcore import: a worker is ready in ~0.1 s of CPU), fed by one thread apiece over
pipes. They start the first time one compile has MIN_MODULES modules to build, and last as
long as this process (a worker exits when its stdin closes).

    pool(workers)           this process's pool, started if needed; None where it has none
                            (one CPU, or JITCORE_COMPILE_WORKERS=0: `workers` is that
                            setting, None for the default)
    Pool.submit(text, ...)  a Future of (object, optimized IR, seconds, "worker" | "here"),
                            or of None where a worker could not build it (the caller
                            builds it, and reports the error an invalid module deserves)
    Pool.run_queued(build)  build still-queued modules in this thread (with `build`), so this
                            process is one more builder while it waits

A worker's object is the one this process would build: the same llvmlite, the same target
machine settings and the same pipeline (tests/test_compile_pool.py compares them byte for
byte).
"""
from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

from jitcore.runtime.forksafe import hold_during_fork

from . import machine_code

MIN_MODULES = 3           # a compile with fewer modules to build never starts the workers
MAX_AUTO_WORKERS = 4      # the default's cap: each worker holds ~50 MB of LLVM

_START = ("import importlib.util as u, sys; "
          "s = u.spec_from_file_location('jitcore_compile_worker', {path!r}); "
          "m = sys.modules[s.name] = u.module_from_spec(s); s.loader.exec_module(m); "
          "m.serve()")


def worker_count(chosen: int | None) -> int:
    """Worker processes to use: `chosen` (JITCORE_COMPILE_WORKERS), else one fewer than the
    CPUs this process may run on (this process builds too), at most MAX_AUTO_WORKERS."""
    if chosen is not None:
        return chosen
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:                    # (not Linux)
        cpus = os.cpu_count() or 1
    return max(0, min(cpus - 1, MAX_AUTO_WORKERS))


class _Task:
    __slots__ = ("request", "future")

    def __init__(self, request: tuple):
        self.request, self.future = request, Future()


class _Worker:
    """One worker process and the thread that feeds it tasks from the pool's queue."""

    def __init__(self, tasks: queue.Queue):
        command = [sys.executable] + (["-P"] if sys.version_info >= (3, 11) else []) + \
            ["-c", _START.format(path=machine_code.__file__)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.thread = threading.Thread(target=self._feed, args=(tasks,), daemon=True,
                                       name="jitcore-compile-worker")
        self.thread.start()

    def _feed(self, tasks: queue.Queue) -> None:
        while True:
            task = tasks.get()
            if task is None:                  # the pool closed: the worker exits on EOF
                self._release()
                return
            if not task.future.set_running_or_notify_cancel():
                continue
            try:
                machine_code.write_message(self.process.stdin, task.request)
                reply = machine_code.read_message(self.process.stdout)
            except (OSError, EOFError, ValueError):
                # the worker died: its caller builds this one, the other workers or the
                # waiting thread (Pool.run_queued) the ones still queued
                task.future.set_result(None)
                self._release()
                return
            task.future.set_result((*reply[1:], "worker") if reply[0] == "ok" else None)


    def _release(self) -> None:
        """Close the pipes (the worker exits on EOF, if it still runs) and reap it."""
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


class Pool:
    def __init__(self, workers: int):
        self.pid = os.getpid()
        self.tasks: queue.Queue = queue.Queue()
        self.workers = [_Worker(self.tasks) for _ in range(workers)]

    def close(self) -> None:
        """Let the workers exit once the tasks queued before have been taken."""
        for _ in self.workers:
            self.tasks.put(None)

    def submit(self, text: str, triple: str, cpu: str, features: str) -> Future:
        task = _Task((triple, cpu, features, text))
        self.tasks.put(task)
        return task.future

    def run_queued(self, build) -> None:
        """Build the modules no worker has taken yet, in this thread: `build(request)` ->
        (object, optimized IR, seconds); its exceptions go to the task's future."""
        closing = 0                  # the close() marks met: put back for the workers
        while True:
            try:
                task = self.tasks.get_nowait()
            except queue.Empty:
                break
            if task is None:
                closing += 1
            elif task.future.set_running_or_notify_cancel():
                try:
                    task.future.set_result((*build(task.request), "here"))
                except BaseException as e:
                    task.future.set_exception(e)
        for _ in range(closing):
            self.tasks.put(None)


_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()
hold_during_fork(sys.modules[__name__], "_POOL_LOCK")


def pool(workers: int | None = None) -> Pool | None:
    """This process's pool (a forked child starts its own), or None without workers.
    `workers`: JITCORE_COMPILE_WORKERS (None: the default, see worker_count); a pool of
    another size is replaced (its workers exit)."""
    global _POOL
    n = worker_count(workers)
    with _POOL_LOCK:
        if _POOL is not None and _POOL.pid == os.getpid() and len(_POOL.workers) == n:
            return _POOL
        if _POOL is not None and _POOL.pid == os.getpid():
            _POOL.close()
        _POOL = None
        if n <= 0:
            return None
        try:
            _POOL = Pool(n)
        except OSError:                      # no process could start: build here
            return None
        return _POOL

"""Inter-op parallelism from Python: `fut = jc.fork(fn, *args)`, `jc.wait(fut)`.

Tasks run on the inter-op pool: `get_num_interop_threads()` Python threads, created at the
first fork (which fixes the inter-op setting). Compiled calls release the GIL, so tasks that
call jitted functions run in parallel; their kernels share the one intra-op pool (a region
that finds the pool busy runs inline on the task's thread, so nothing is oversubscribed).
A thread that waits on a task nobody has started yet runs it itself, so nested forks cannot
deadlock a saturated pool. An exception in a task is raised at `wait`.
"""
from __future__ import annotations

import threading
from concurrent.futures import Future as _StdFuture
from concurrent.futures import ThreadPoolExecutor

from ir.errors import TraceError

from .parallel import SETTINGS
from .tracer import Tracer

_EXECUTOR = None
_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=SETTINGS.freeze_interop(),
                                           thread_name_prefix="jitcore-interop")
        return _EXECUTOR


class Future:
    """The result of `jc.fork`: `wait()` returns it (or raises the task's error), `done()`."""

    def __init__(self, fn, args, kwargs):
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._inline = None
        self._std: _StdFuture = _executor().submit(fn, *args, **kwargs)

    def done(self) -> bool:
        return self._inline is not None or self._std.done()

    def wait(self):
        if self._inline is None and self._std.cancel():    # nobody started it: run it here
            self._inline = _StdFuture()
            try:
                self._inline.set_result(self._fn(*self._args, **self._kwargs))
            except BaseException as e:                        # re-raised below, at wait
                self._inline.set_exception(e)
        return (self._inline or self._std).result()


def fork(fn, *args, **kwargs) -> Future:
    """Run fn(*args, **kwargs) asynchronously on the inter-op pool."""
    if any(isinstance(a, Tracer) for a in (*args, *kwargs.values())):
        raise TraceError("jc.fork inside a jitted function is not supported yet: fork the "
                         "jitted functions from Python instead (the tasks run in parallel)")
    return Future(fn, args, kwargs)


def wait(fut: Future):
    """The task's result; its exception, if it raised one."""
    if not isinstance(fut, Future):
        raise TypeError(f"jc.wait expects a Future from jc.fork, got {type(fut).__name__}")
    return fut.wait()

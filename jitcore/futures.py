"""Inter-op parallelism from Python: `fut = jc.fork(fn, *args)`, `jc.wait(fut)`.

Tasks run on the native inter-op pool (runtime/tasks_ir.py): `get_num_interop_threads()`
threads, created at the first fork, which fixes the inter-op setting. The same threads run
the forked tasks of compiled graphs, so the process never has more than main + intra-op +
inter-op threads. Compiled calls release the GIL, so tasks that call jitted functions run in
parallel; their kernels share the one intra-op pool (a region that finds the pool busy runs
inline on the task's thread, so nothing is oversubscribed). A thread that waits on a task
nobody has started yet runs it itself, so nested forks cannot deadlock a saturated pool.
An exception in a task is raised at `wait`. A Future that is never waited on keeps its
24-byte task record.
"""
from __future__ import annotations

import ctypes
import itertools
import sys
import threading

from jitcore.ir import build
from jitcore.ir.errors import TraceError
from jitcore.ir.ops import Op
from jitcore.runtime.forksafe import renew_in_child

from .api import JitFunction
from .ops.tracer import TRACE, Tracer, node_of
from .parallel import pool, start_interop

_TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_PENDING: dict = {}              # token -> Future whose body has not run yet
_TOKENS = itertools.count(1)
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")


@_TASK
def _run_task(token):
    """Runs on a native inter-op worker (or on a waiter); ctypes takes the GIL for it."""
    with _LOCK:
        fut = _PENDING.pop(token)
    try:
        fut._result = fut._fn(*fut._args, **fut._kwargs)
    except BaseException as e:       # raised again at wait()
        fut._error = e


_RUN_TASK = ctypes.cast(_run_task, ctypes.c_void_p).value


class Future:
    """The result of `jc.fork` from Python: `wait()` returns it (or raises the task's
    error), `done()` says whether it has finished. The task runs on the native inter-op
    pool, the same threads that run the tasks of compiled graphs."""

    def __init__(self, fn, args, kwargs):
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._result = self._error = None
        self._waited = False
        token = next(_TOKENS)
        with _LOCK:
            _PENDING[token] = self
        self._handle = start_interop().task_spawn(_RUN_TASK, token)

    def done(self) -> bool:
        if self._waited or not self._handle:
            return True
        return ctypes.c_int32.from_address(self._handle).value != 0   # the record's done flag

    def wait(self):
        if not self._waited:
            pool().task_wait(self._handle)        # releases the GIL; may run the task here
            self._waited = True
        if self._error is not None:
            raise self._error
        return self._result


class TracedFuture:
    """jc.fork inside a jitted function: the forked function's sub-graph, traced now, runs
    as a native task of the compiled graph; `jc.wait` marks where its results are needed."""

    def __init__(self, task: int, outputs: list, many: bool):
        self.task, self.outputs, self.many = task, outputs, many

    def wait(self):
        outs = [Tracer(build.node(Op.WAIT, n, arg=self.task)) for n in self.outputs]
        return tuple(outs) if self.many else outs[0]


class _Done:
    """A nested fork inside a forked function: it runs inline in its parent task."""

    def __init__(self, value):
        self.value = value

    def wait(self):
        return self.value


def _fork_traced(fn, args, kwargs):
    body = getattr(fn, "__wrapped__", fn) if isinstance(fn, JitFunction) else fn
    if TRACE.fork_depth > 0:
        return _Done(body(*args, **kwargs))
    task = TRACE.forks
    TRACE.forks += 1

    def mark(a):
        return Tracer(build.node(Op.FORKARG, a.node, arg=task)) if isinstance(a, Tracer) else a
    TRACE.fork_depth += 1
    try:
        result = body(*[mark(a) for a in args], **{k: mark(v) for k, v in kwargs.items()})
    finally:
        TRACE.fork_depth -= 1
    many = isinstance(result, (tuple, list))
    outputs = [node_of(r) for r in (result if many else [result])]
    if not outputs:
        raise TraceError("a forked function must return at least one tensor")
    return TracedFuture(task, outputs, many)


def fork(fn, *args, **kwargs):
    """Run fn(*args, **kwargs) asynchronously on the inter-op pool. Inside a jitted function
    the forked computation becomes a native task of the compiled graph."""
    if any(isinstance(a, Tracer) for a in (*args, *kwargs.values())):
        return _fork_traced(fn, args, kwargs)
    return Future(fn, args, kwargs)


def wait(fut):
    """The task's result; its exception, if it raised one."""
    if not isinstance(fut, (Future, TracedFuture, _Done)):
        raise TypeError(f"jc.wait expects a Future from jc.fork, got {type(fut).__name__}")
    return fut.wait()

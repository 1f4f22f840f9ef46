"""LLVM itself, behind one module: parse + verify, optimize, machine code, and the in-process JIT.

One target machine and one LLJIT serve the whole process (a second MCJIT engine on a shared
target machine segfaulted; LLJIT with resource trackers did not). Each compiled graph is a
JIT library whose `ResourceTracker` the owner keeps for as long as its code may run; dropping
it frees the code. LLVM calls are serialized by a lock: compiles may come from many threads.

How hard LLVM works on a module is a property of the module (machine_code.py's pipelines).
Modules a graph needs are built here or, where a compile has several, partly by compile
worker processes on other cores (compile_pool.py): `Prebuilds` starts a kernel's module as
soon as its IR exists, while the next kernels' IR is generated.
"""
from __future__ import annotations

import hashlib
import itertools
import sys
import threading
import time

import llvmlite.binding as llvm

from jitcore.ir.errors import CompileError
from jitcore.runtime.forksafe import hold_during_fork

from . import compile_pool
from .machine_code import (GLUE, KERNEL, PIPELINES, RUNTIME, TILED, Pipeline,  # noqa: F401
                           build, create_target_machine, pipeline_of, with_pipeline)
from .target import Target

_LOCK = threading.RLock()
hold_during_fork(sys.modules[__name__], "_LOCK", threading.RLock)   # no fork inside LLVM
_LIB_IDS = itertools.count()


class _Machine:
    """The target machines and JIT for one Target (CPU + features)."""

    def __init__(self, target: Target):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.target = target
        self.tm = self._create(KERNEL.codegen_level)
        self.jit = llvm.create_lljit_compiler(self.tm)
        self.data_layout = str(self.tm.target_data)
        self.tm_key = (target.triple, target.cpu, target.features)
        self._by_level = {KERNEL.codegen_level: self.tm}

    def _create(self, level: int):
        t = self.target
        return create_target_machine(t.triple, t.cpu, t.features, level)

    def codegen(self, level: int):
        """The target machine that emits code at this optimization level (the JIT's own
        for KERNEL's; objects of any level link into the one JIT)."""
        if level not in self._by_level:
            self._by_level[level] = self._create(level)
        return self._by_level[level]


_MACHINES: dict = {}


def machine(target: Target) -> _Machine:
    key = (target.triple, target.cpu, target.features)
    with _LOCK:
        if key not in _MACHINES:
            _MACHINES[key] = _Machine(target)
        return _MACHINES[key]


class Library:
    """JIT-compiled code of one graph: exported addresses, kept alive by the tracker."""

    def __init__(self, tracker, addresses: dict, optimized_ir: list, mach: _Machine,
                 seconds: dict, pipelines: tuple):
        self._tracker, self.addresses = tracker, addresses
        self._optimized_parts, self._machine, self._asm = optimized_ir, mach, None
        # the name of each linked module's Pipeline, in the order of optimized_ir
        self.pipelines = pipelines
        # where LLVM's time went, summed over the modules: parse (+ verify), optimize,
        # machine_code, disk_load, disk_store, link
        self.seconds = seconds
        # modules linked, and how many of them this process had already built (an equal
        # kernel of another graph or layer)
        self.modules, self.reused = len(optimized_ir), 0

    @property
    def optimized_ir(self) -> str:
        return "\n".join(self._optimized_parts)

    def __del__(self, _finalizing=sys.is_finalizing):
        # freeing the code is an LLJIT call like the others: under the lock, never mid-fork
        # (at interpreter exit the code stays mapped, as llvmlite's own finalizer does; the
        # module's globals may be None by then, hence the default argument)
        tracker = getattr(self, "_tracker", None)
        if tracker is not None and not _finalizing() and _LOCK is not None:
            with _LOCK:
                tracker.close()

    def asm(self) -> str:
        if self._asm is None:
            with _LOCK:
                self._asm = "\n".join(
                    self._machine.codegen(PIPELINES[p].codegen_level).emit_assembly(
                        llvm.parse_assembly(t))
                    for t, p in zip(self._optimized_parts, self.pipelines))
        return self._asm


class ObjectCache:
    """Objects built in this process, by module key, up to a byte bound (oldest out first):
    a module seen again (an equal kernel in another graph) is linked, not compiled again."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes, self.bytes, self.items = max_bytes, 0, {}

    def get(self, key):
        hit = self.items.pop(key, None)
        if hit is not None:
            self.items[key] = hit                 # most recent last
        return hit

    def put(self, key, obj: bytes, optimized: str):
        self.items[key] = (obj, optimized)
        self.bytes += len(obj) + len(optimized)
        while self.bytes > self.max_bytes and len(self.items) > 1:
            old_obj, old_ir = self.items.pop(next(iter(self.items)))
            self.bytes -= len(old_obj) + len(old_ir)


OBJECTS = ObjectCache()
STATS = {"modules_compiled": 0, "modules_reused": 0, "modules_built_by_workers": 0}


def _machine_code_stages(text: str, mach: _Machine) -> tuple:
    """(object bytes, optimized IR text, seconds per stage) of a module, built in this
    process with the pipeline its text declares."""
    try:
        return build(text, mach.codegen)
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the generated IR: {e}") from None


def _add(seconds: dict, **stages) -> None:
    for stage, s in stages.items():
        seconds[stage] = seconds.get(stage, 0.0) + s


def _module_key(mach: _Machine, text: str, cache) -> tuple:
    return (mach.tm_key, cache.key if cache is not None else
            hashlib.sha256(text.encode()).hexdigest())


class Prebuilds:
    """One compile's kernel modules, started on the compile workers as soon as their IR is
    generated (compiler.py passes `add` to IR generation), so LLVM builds the first kernels
    while Python generates the next. Modules this process has (OBJECTS) or the disk cache
    has are not started; the workers start once MIN_MODULES modules wait to be built.
    compile_modules takes the futures; a module never asked for is built for nothing.
    `workers`: JITCORE_COMPILE_WORKERS (None: compile_pool's default)."""

    def __init__(self, target: Target, workers: int | None = None):
        self.target, self.mach, self.workers = target, machine(target), workers
        self.futures: dict = {}          # module key -> Future (compile_pool.Pool.submit)
        self._waiting: dict = {}         # module key -> text, before the workers start
        self._pool = None

    def add(self, text: str, cache) -> None:
        key = _module_key(self.mach, text, cache)
        if key in self.futures or key in self._waiting:
            return
        with _LOCK:
            if key in OBJECTS.items:
                return
        if cache is not None and cache.stored():
            return
        self._waiting[key] = text
        if self.pool(len(self._waiting)) is not None:
            t = self.target
            for key, text in self._waiting.items():
                self.futures[key] = self._pool.submit(text, t.triple, t.cpu, t.features)
            self._waiting.clear()

    def pool(self, modules: int):
        """The compile workers' pool, started once `modules` wait to be built (or earlier),
        or None."""
        if self._pool is None and modules >= compile_pool.MIN_MODULES:
            self._pool = compile_pool.pool(self.workers)
        return self._pool

    def take(self, key):
        """The Future of this module, or None where it was not started."""
        return self.futures.pop(key, None)


def compile_ir(text: str, exports: list, target: Target, imports: dict | None = None,
               cache=None) -> Library:
    """One module: see compile_modules."""
    return compile_modules([(text, cache)], exports, target, imports)


def compile_modules(modules: list, exports: list, target: Target,
                    imports: dict | None = None, prebuilds: Prebuilds | None = None) -> Library:
    """Parse, verify, optimize and emit machine code for each module (with the pipeline its
    text declares, see with_pipeline), then link them all into one JIT library of this
    process. `modules`: (IR text, cache) pairs, where
    cache is None or an object with `key`, load() -> (object, optimized IR) | None and
    store(object, optimized IR) (the disk cache): a hit skips LLVM's optimizer and code
    generator. Objects are also kept in memory (OBJECTS) by that key, or by the text's hash.
    With `prebuilds` (one compile's, engine.Prebuilds), modules to build go to the compile
    workers where there are MIN_MODULES of them, this thread building those no worker has
    taken yet.
    `imports` binds external symbols of the modules to addresses of this process."""
    mach = machine(target)
    seconds, reused = {}, 0
    found, linked = [], set()            # [key, text, cache, (object, optimized IR) | None]
    for text, cache in modules:
        key = _module_key(mach, text, cache)
        if key in linked:               # an equal kernel earlier in this graph
            STATS["modules_reused"] += 1
            reused += 1
            continue
        linked.add(key)
        with _LOCK:
            hit = OBJECTS.get(key)
        if hit is not None:
            STATS["modules_reused"] += 1
            reused += 1
        else:
            t0 = time.perf_counter()
            hit = cache.load() if cache is not None else None
            if hit is not None:
                _add(seconds, disk_load=time.perf_counter() - t0)
                with _LOCK:
                    OBJECTS.put(key, *hit)
        found.append([key, text, cache, hit])
    _build_missing([f for f in found if f[3] is None], mach, prebuilds, seconds)
    objects = [f[3][0] for f in found]
    optimized = [f[3][1] for f in found]
    # (a module from a stored manifest has no text: its stored IR declares the pipeline too,
    # as unoptimized modules keep their text as written)
    pipelines = [pipeline_of(text if text is not None else hit[1]).name
                 for _, text, _, hit in found]
    t0 = time.perf_counter()
    with _LOCK:
        builder = llvm.JITLibraryBuilder().add_current_process()
        for obj in objects:
            builder.add_object_img(obj)
        for name in exports:
            builder.export_symbol(name)
        for name, address in (imports or {}).items():
            builder.import_symbol(name, address)
        try:
            tracker = builder.link(mach.jit, f"jitcore_lib{next(_LIB_IDS)}")
        except RuntimeError as e:
            raise CompileError(f"JIT link failed: {e}") from None
        addresses = {n: tracker[n] for n in exports}
    _add(seconds, link=time.perf_counter() - t0)
    library = Library(tracker, addresses, optimized, mach, seconds, tuple(pipelines))
    library.modules, library.reused = len(modules), reused
    return library


def _build_missing(missing: list, mach: _Machine, prebuilds: Prebuilds | None,
                   seconds: dict) -> None:
    """Build each [key, text, cache, None] entry's machine code into its last slot, store it
    on disk (where it has a cache) and in OBJECTS."""
    futures = [prebuilds.take(key) if prebuilds is not None else None
               for key, *_ in missing]
    pool = prebuilds.pool(len(missing)) if prebuilds is not None else None
    if pool is not None:
        t = mach.target
        futures = [f if f is not None or text is None else
                   pool.submit(text, t.triple, t.cpu, t.features)
                   for f, (_, text, _, _) in zip(futures, missing)]
        pool.run_queued(_build_request)          # this thread builds as one more worker
    for entry, future in zip(missing, futures):
        key, text, cache, _ = entry
        built = future.result() if future is not None else None
        if built is None:                # not sent to a worker, or it failed: build here
            with _LOCK:
                built = (*_machine_code_stages(text, mach), "here")
        obj, optimized, stages, where = built
        if where == "worker":
            STATS["modules_built_by_workers"] += 1
        _add(seconds, **stages)
        STATS["modules_compiled"] += 1
        if cache is not None:
            t0 = time.perf_counter()
            cache.store(obj, optimized)
            _add(seconds, disk_store=time.perf_counter() - t0)
        with _LOCK:
            OBJECTS.put(key, obj, optimized)
        entry[3] = (obj, optimized)


def _build_request(request: tuple) -> tuple:
    """A compile worker's request built in this process (Pool.run_queued)."""
    triple, cpu, features, text = request
    with _LOCK:
        return _machine_code_stages(text, _MACHINES[(triple, cpu, features)])

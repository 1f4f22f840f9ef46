"""LLVM itself, behind one module: parse + verify, optimize, machine code, and the in-process JIT.

One target machine and one LLJIT serve the whole process (a second MCJIT engine on a shared
target machine segfaulted; LLJIT with resource trackers did not). Each compiled graph is a
JIT library whose `ResourceTracker` the owner keeps for as long as its code may run; dropping
it frees the code. LLVM calls are serialized by a lock: compiles may come from many threads.

How hard LLVM works on a module is a property of the module (its PIPELINE, declared in its
text by `with_pipeline`): kernels get LLVM's function simplification pipeline and the code
generator's highest level; a graph's glue (graph_module.py's run function, entry.py's checks
and fast call) and the thread pool's runtime go to fast instruction selection unoptimized.
"""
from __future__ import annotations

import hashlib
import itertools
import sys
import threading
import time
from dataclasses import dataclass

import llvmlite.binding as llvm

from jitcore.ir.errors import CompileError
from jitcore.runtime.forksafe import hold_during_fork

from .target import Target

_LOCK = threading.RLock()
hold_during_fork(sys.modules[__name__], "_LOCK", threading.RLock)   # no fork inside LLVM
_LIB_IDS = itertools.count()


@dataclass(frozen=True)
class Pipeline:
    """What LLVM does to a module between parsing and linking: `ir_level`, the speed level
    of LLVM's function simplification pipeline, run on each defined function (SROA, early
    CSE, GVN, instcombine, LICM and the other loop canonicalizations, full unrolling of
    constant trip counts; 0: none, the IR goes to the code generator as written); `unroll`:
    LLVM's loop unroller after it (partial and runtime unrolling); `codegen_level`, the
    target machine's optimization level (0: fast instruction selection and register
    allocation)."""
    name: str
    ir_level: int
    codegen_level: int
    unroll: bool = False


# A kernel module is one function, vectorized by codegen: it needs LLVM to promote its allocas,
# simplify, hoist and unroll short loops, not the module pipeline's inliner, global passes and
# late loop passes. Measured on AMD EPYC Zen 4 (CPU seconds, one process, interleaved): the
# 32 kernels of MobileNetV2 took 2.0-2.5 s to optimize and 1.2-1.5 s to emit with O3's module
# pipeline; 1.5-1.6 s and 1.4-1.6 s with the level-2 function pipeline and the unroller
# (KERNEL), 1.0-1.4 s and 0.8-1.1 s without the unroller (TILED). At level 1 an avg pool read
# its window bounds from constant tables on every row (3% slower); without the unroller row
# kernels (layer norm) ran 4-7% slower, while conv and GEMM kernels, whose emitters unroll
# their micro-kernels themselves, ran as fast as at O3 (registry.KindEntry.unrolled).
KERNEL = Pipeline("kernel", 2, 3, unroll=True)
TILED = Pipeline("tiled", 2, 3)
# The glue runs once per call: straight-line loads, compares and calls, no loops. O3 and the
# full code generator cost it 20-40 ms per graph (most of a small graph's LLVM time); fast
# instruction selection on the IR as written builds it in a few ms, and calls are no slower
# (a few more instructions per array checked: examples/dispatch_bench.py). SROA and
# SimplifyCFG before it only made FastISel's code longer.
GLUE = Pipeline("glue", 0, 0)
# The thread pool's runtime (runtime/pool_ir.py), built once per process: claiming chunks,
# futex waits, task queues. O3 cost ~100 ms of every fresh process's first parallel call;
# as written it builds in ~15 ms and small 2-thread calls (16K-1M floats) take the same time.
RUNTIME = Pipeline("runtime", 0, 0)
PIPELINES = {p.name: p for p in (KERNEL, TILED, GLUE, RUNTIME)}
_MARKER = "; jitcore.pipeline = "


def with_pipeline(text: str, pipeline: Pipeline) -> str:
    """The module text, declaring the pipeline it is compiled with (part of its text, so of
    every cache key derived from it). Modules that declare none get KERNEL."""
    return f"{_MARKER}{pipeline.name}\n{text}"


def pipeline_of(text: str) -> Pipeline:
    if text.startswith(_MARKER):
        return PIPELINES[text[len(_MARKER):text.index("\n")].strip()]
    return KERNEL


class _Machine:
    """The target machines and JIT for one Target (CPU + features)."""

    def __init__(self, target: Target):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self._target = target
        self.tm = self._create(KERNEL.codegen_level)
        self.jit = llvm.create_lljit_compiler(self.tm)
        self.data_layout = str(self.tm.target_data)
        self.tm_key = (target.triple, target.cpu, target.features)
        self._by_level = {KERNEL.codegen_level: self.tm}

    def _create(self, level: int):
        return llvm.Target.from_triple(self._target.triple).create_target_machine(
            cpu=self._target.cpu, features=self._target.features, opt=level, jit=True)

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
STATS = {"modules_compiled": 0, "modules_reused": 0}


def _machine_code(text: str, mach: _Machine, seconds: dict) -> tuple:
    """(object bytes, optimized IR text) of a module, built with the pipeline its text
    declares; adds each stage's time to `seconds`."""
    pipeline = pipeline_of(text)
    t0 = time.perf_counter()
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the generated IR: {e}") from None
    t1 = time.perf_counter()
    _optimize(mod, mach.tm, pipeline)
    t2 = time.perf_counter()
    obj = mach.codegen(pipeline.codegen_level).emit_object(mod)
    t3 = time.perf_counter()
    _add(seconds, parse=t1 - t0, optimize=t2 - t1, machine_code=t3 - t2)
    return obj, str(mod) if pipeline.ir_level else text     # (unoptimized: as written)


def _add(seconds: dict, **stages) -> None:
    for stage, s in stages.items():
        seconds[stage] = seconds.get(stage, 0.0) + s


def _optimize(mod, tm, pipeline: Pipeline = KERNEL):
    if pipeline.ir_level == 0:
        return
    pto = llvm.create_pipeline_tuning_options(speed_level=pipeline.ir_level)
    pb = llvm.create_pass_builder(tm, pto)
    fpm = pb.getFunctionPassManager()
    try:
        if pipeline.unroll:
            fpm.add_loop_unroll_pass()
        for fn in mod.functions:
            if not fn.is_declaration:
                fpm.run(fn, pb)
    finally:
        _free_pass_manager(fpm)
        pb.close()
        pto.close()


def _free_pass_manager(fpm):
    """Free a pass pipeline now. llvmlite's FunctionPassManager never frees it (its
    _dispose is shadowed by ObjectRef's empty one in the class's MRO: 70-110 KB lost per
    compile with the module pipeline, see tests/test_memory.py); detaching afterwards keeps
    a fixed llvmlite from freeing it twice."""
    dispose = getattr(llvm.ffi.lib, "LLVMPY_DisposeNewFunctionPassManger", None)
    if dispose is not None and not fpm.closed:
        dispose(fpm)
        fpm.detach()


def compile_ir(text: str, exports: list, target: Target, imports: dict | None = None,
               cache=None) -> Library:
    """One module: see compile_modules."""
    return compile_modules([(text, cache)], exports, target, imports)


def compile_modules(modules: list, exports: list, target: Target,
                    imports: dict | None = None) -> Library:
    """Parse, verify, optimize and emit machine code for each module (with the pipeline its
    text declares, see with_pipeline), then link them all into one JIT library of this
    process. `modules`: (IR text, cache) pairs, where
    cache is None or an object with `key`, load() -> (object, optimized IR) | None and
    store(object, optimized IR) (the disk cache): a hit skips LLVM's optimizer and code
    generator. Objects are also kept in memory (OBJECTS) by that key, or by the text's hash.
    `imports` binds external symbols of the modules to addresses of this process."""
    mach = machine(target)
    seconds, objects, optimized, pipelines, reused = {}, [], [], [], 0
    linked = set()
    for text, cache in modules:
        key = (mach.tm_key, cache.key if cache is not None else
               hashlib.sha256(text.encode()).hexdigest())
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
            else:
                with _LOCK:
                    hit = _machine_code(text, mach, seconds)
                    STATS["modules_compiled"] += 1
                if cache is not None:
                    t0 = time.perf_counter()
                    cache.store(*hit)
                    _add(seconds, disk_store=time.perf_counter() - t0)
            with _LOCK:
                OBJECTS.put(key, *hit)
        objects.append(hit[0])
        optimized.append(hit[1])
        # (a module from a stored manifest has no text: its stored IR declares the pipeline
        # too, as unoptimized modules keep their text as written)
        pipelines.append(pipeline_of(text if text is not None else hit[1]).name)
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

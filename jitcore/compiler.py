"""The compile driver: graph + input layouts + target -> CompiledGraph, with the in-memory cache.

Cache key (DESIGN.md): graph text, input strides, target CPU and features, vector width and
library version. The key never includes the Python function: two functions that trace to
the same graph share code.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import logging
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from jitcore.ir.graph import Graph
from jitcore.passes.legality import bytes_moved, coverage, flops
from jitcore.passes.pipeline import run_pipeline
from jitcore.passes.symbolic import at_sizes

from . import config, diskcache, log, output_cache
from .llvm import conv, engine, gemm, graph_module
from .llvm import entry as abi
from .llvm.entry import NDARRAY_TYPE_SYMBOL
from .llvm.graph_module import build_module
from .llvm.target import Target
from .lru import LRU
from .version import VERSION
from jitcore.runtime import PARALLEL_FOR, TASK_SPAWN, TASK_WAIT
from jitcore.runtime.forksafe import renew_in_child


RUN_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.POINTER(ctypes.c_int64))   # (slots, run-time extents)


@dataclass(frozen=True)
class KernelInfo:
    """What `f.kernels(...)` returns for each fused kernel."""
    name: str
    kind: str
    ops: tuple
    loop_nest: str
    vector_width: int
    lanes: int
    vectorized: bool
    reason: str | None
    bytes: int
    flops: int
    task: int | None = None      # the forked task that runs it (None: the main line)
    layout: str | None = None    # the data layout a conv kernel computes in ("NCHW")

    def __str__(self):
        vec = f"vectorized x{self.lanes}" if self.vectorized else f"scalar ({self.reason})"
        where = f" in task {self.task}" if self.task is not None else ""
        layout = f" layout {self.layout}" if self.layout else ""
        return (f"{self.name}: {self.kind}{layout} [{', '.join(self.ops)}] {vec}{where}\n"
                f"    {self.loop_nest}\n    {self.bytes} bytes, {self.flops} flops")


class CompiledGraph:
    """A graph compiled for one input layout and target: its kernels, IR and native code."""

    def __init__(self, graph: Graph, lowered, target: Target, llvm_ir: str, library,
                 run_name: str, entry_name: str, seconds: dict, fastcall_name=None):
        self.graph, self.lowered, self.target = graph, lowered, target
        self.llvm_ir, self.library, self.seconds = llvm_ir, library, seconds
        self.prepacked_bytes = 0          # constant GEMM/conv weights packed at compile time
        # the code lives as long as self.library; whoever calls these addresses holds self
        self.entry_address = library.addresses[entry_name]
        # the native fast call (llvm/entry.py emit_fastcall), for graphs it handles, else None
        self.fastcall_address = library.addresses[fastcall_name] if fastcall_name else None
        self.run = RUN_TYPE(library.addresses[run_name])
        self.kernels = [KernelInfo(k.name, k.kind, k.ops, k.loop_nest, k.vector_bits, k.lanes,
                                   k.vectorized, k.reason, bytes_moved(k), flops(k), k.task,
                                   k.layout)
                        for k in lowered.kernels]

    @property
    def optimized_ir(self) -> str:
        return self.library.optimized_ir

    def asm(self) -> str:
        return self.library.asm()

    def coverage(self) -> tuple:
        return coverage(self.lowered.kernels)

    def kernels_at(self, extents: tuple) -> list:
        """The kernels' records with bytes and flops at a call's run-time extents (a graph
        compiled with them, jc.jit(dynamic=True); `self.kernels` counts their placeholders)."""
        if not extents:
            return list(self.kernels)
        size = at_sizes(extents)
        return [dataclasses.replace(info, bytes=bytes_moved(k, size), flops=flops(k, size))
                for info, k in zip(self.kernels, self.lowered.kernels)]


_CACHE = LRU()
_CACHE_LOCK = threading.Lock()
_KEY_LOCKS: dict = {}
renew_in_child(sys.modules[__name__], "_CACHE_LOCK")
renew_in_child(sys.modules[__name__], "_KEY_LOCKS", dict)   # held by compiling threads
STATS = {"compiles": 0, "hits": 0}


def cache_info() -> dict:
    """Compiles and cache hits so far, the compiled graphs held now, the disk cache's hits,
    misses and rejected (corrupt or foreign) entries, the kernels whose LLVM IR was generated
    or reused and the LLVM modules compiled or reused (an equal kernel already built in this
    process is linked, not generated or compiled again), `code_cache_bytes`: what the
    process-wide caches of kernel IR and of built objects hold now (each bounded), and
    `compile_seconds`: the seconds all
    compiles of this process spent per stage (STAGES, and their total), and the output
    buffer cache's figures (`output_cache_bytes`: idle large output buffers kept for reuse,
    bounded by `output_cache_limit`; its hits, misses and evictions)."""
    with _CACHE_LOCK:
        return {**STATS, "size": len(_CACHE), "max_size": config.get().cache_size,
                **diskcache.STATS, "disk_dir": diskcache.directory(), **engine.STATS, **graph_module.STATS,
                "code_cache_bytes": engine.OBJECTS.bytes + graph_module.emitted_bytes(),
                "compile_seconds": dict(COMPILE_SECONDS), **output_cache.info()}


def cache_key(graph: Graph, strides: tuple, target: Target, threads: int,
              prepack: bool) -> tuple:
    # (a graph with run-time extents has their placeholders in its text: its own key)
    return (graph.text(), strides, target.key(), threads, prepack, VERSION)


def compile_graph(graph: Graph, strides: tuple, target: Target, threads: int = 0,
                  prepack: bool = True, trace_seconds: float = 0.0,
                  dynamic: bool = False) -> CompiledGraph:
    """Compile (or fetch from the cache). `strides`: per input, strides in elements;
    `threads`: intra-op threads for this graph (0: the process-wide setting); `prepack`:
    pack constant GEMM weights at compile time (unless JITCORE_PREPACK=0); `trace_seconds`:
    what tracing the graph took, recorded with the compile's other stages; `dynamic`: the
    graph's shapes hold run-time extents (passes/symbolic.py), and the passes raise
    passes.dynamic.NotDynamic when it needs their values."""
    prepack = prepack and config.get().prepack
    t0 = time.perf_counter()
    key = cache_key(graph, strides, target, threads, prepack)
    key_seconds = time.perf_counter() - t0
    with _CACHE_LOCK:
        hit = _CACHE.lookup(key)
        if hit is None:
            key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
        else:
            STATS["hits"] += 1
    if hit is not None:
        log.info("%s: compiled graph found in the memory cache (%d kernel(s))", graph.name,
                 len(hit.kernels))
        return hit
    with key_lock:                       # one compile per key, even from many threads
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is None:
            hit = _compile(graph, strides, target, threads, prepack,
                           {"trace": trace_seconds, "cache_key": key_seconds}, dynamic)
            with _CACHE_LOCK:
                _CACHE.put(key, hit)
                STATS["compiles"] += 1
    with _CACHE_LOCK:
        _KEY_LOCKS.pop(key, None)
    return hit


def _runtime_imports(text: str) -> dict:
    """Addresses for the external symbols a graph module uses."""
    imports = {NDARRAY_TYPE_SYMBOL: id(np.ndarray)}
    if abi.NP_EMPTY in text:
        imports.update(python_api())
    for symbol in (PARALLEL_FOR, TASK_SPAWN, TASK_WAIT):   # runtime functions it calls
        if symbol in text:
            from .parallel import pool, start_interop
            lib = start_interop() if symbol == TASK_SPAWN else pool()
            imports[symbol] = lib.library.addresses[symbol]
    return imports


def _c_function(name: str) -> int:
    return ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p).value


@functools.lru_cache(maxsize=None)
def python_api() -> dict:
    """Addresses of the CPython and numpy C-API functions the native fast call uses."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    core = getattr(np, "_core", None) or np.core          # numpy 2 / numpy 1
    table = get(core._multiarray_umath._ARRAY_API, None)
    return {abi.PY_INCREF: _c_function("Py_IncRef"), abi.PY_DECREF: _c_function("Py_DecRef"),
            abi.PY_SAVE_THREAD: _c_function("PyEval_SaveThread"),
            abi.PY_RESTORE_THREAD: _c_function("PyEval_RestoreThread"),
            abi.TUPLE_TYPE_SYMBOL: id(tuple),
            abi.NP_EMPTY: ctypes.c_void_p.from_address(table + 8 * abi.NP_API_EMPTY).value}


def _log_compile(compiled: CompiledGraph, entries: list) -> None:
    log.info("%s: compiled %d kernel(s) in %.1f ms (memory cache miss, %s)",
             compiled.graph.name, len(compiled.kernels), 1e3 * compiled.seconds["total"],
             _module_sources(entries, compiled.library))
    if not log.LOGGER.isEnabledFor(logging.DEBUG):
        return
    for k in compiled.kernels:
        log.debug("%s: kernel %s (%s, ops %s): %s", compiled.graph.name, k.name, k.kind,
                  ", ".join(k.ops), f"vectorized x{k.lanes}" if k.vectorized
                  else f"scalar, legality: {k.reason}")


def _module_sources(entries: list, library) -> str:
    """Where the graph's machine code came from: `disk cache hit` (every module LLVM would
    have built was on disk), `miss` (LLVM built some), `off`, plus the modules this process
    had built already (equal kernels of other graphs or layers)."""
    outcomes = [e.outcome for e in entries]
    if "miss" in outcomes:
        disk = "disk cache miss"
    elif "hit" in outcomes:
        disk = "disk cache hit"
    elif diskcache.directory() is None:
        disk = "disk cache off"
    else:
        disk = "disk cache not needed"
    if library.reused:
        disk += f", {library.reused} of {library.modules} LLVM module(s) already built here"
    return disk


# Compile stages in the order they run (seconds per stage: CompiledGraph.seconds, explain(),
# cache_info()["compile_seconds"]). LLVM's stages come from the engine; a graph whose machine
# code came from the disk cache has disk_load instead of parse, optimize and machine_code.
STAGES = ("trace", "cache_key", "passes", "prepack", "ir_generation", "parse", "optimize",
          "machine_code", "disk_load", "disk_store", "link")
COMPILE_SECONDS = dict.fromkeys(STAGES + ("total",), 0.0)    # summed over this process


def _compile(graph: Graph, strides: tuple, target: Target, threads: int,
             prepack: bool, front_seconds: dict, dynamic: bool = False) -> CompiledGraph:
    t0 = time.perf_counter()
    input_strides = {inp.arg: s for inp, s in zip(graph.inputs, strides)}
    lowered = run_pipeline(graph, target.vector_bits, input_strides, target.masked_tails,
                           verify_stages=config.get().verify, dynamic=dynamic)
    t1 = time.perf_counter()
    packed = 0
    if prepack:
        packed += gemm.prepack(lowered, target.vector_bits, gemm.plan_threads(threads))
        packed += conv.prepack(lowered, target.vector_bits, gemm.plan_threads(threads))
    t2 = time.perf_counter()
    mach = engine.machine(target)
    code = build_module(lowered, target.vector_bits, target.triple, mach.data_layout,
                        target.masked_tails, threads, diskcache.KernelIR(target.key()),
                        target.stream_bytes)
    t3 = time.perf_counter()
    text = code.text
    # the process-wide runtime (built by the first graph that needs it) is not this graph's cost
    imports = _runtime_imports(code.graph_text)
    exports = [code.run_name, code.entry_name] + \
        ([code.fastcall_name] if code.fastcall_name else [])
    modules = [(k.text, diskcache.Entry(k.text, target.key(), [k.symbol]))
               for k in code.kernels]
    modules.append((code.graph_text, diskcache.Entry(code.graph_text, target.key(), exports)))
    entries = [cache for _, cache in modules]
    library = engine.compile_modules(modules, exports, target, imports=imports)
    run_name, entry_name = code.run_name, code.entry_name
    seconds = {**front_seconds, "passes": t1 - t0, "prepack": t2 - t1,
               "ir_generation": t3 - t2, **library.seconds}
    seconds["total"] = sum(seconds.values())
    with _CACHE_LOCK:
        for stage, s in seconds.items():
            COMPILE_SECONDS[stage] += s
    compiled = CompiledGraph(graph, lowered, target, text, library, run_name, entry_name, seconds,
                             code.fastcall_name)
    compiled.prepacked_bytes = packed
    _log_compile(compiled, entries)
    if config.get().dump_dir:
        from .dump import dump_or_warn
        dump_or_warn(compiled, config.get().dump_dir)
    return compiled

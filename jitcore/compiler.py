"""The compile driver: graph + input layouts + target -> CompiledGraph, with the in-memory cache.

Cache key (DESIGN.md): graph text, input strides, target CPU and features, vector width and
library version. The key never includes the Python function: two functions that trace to
the same graph share code.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from jitcore.ir.graph import Graph
from jitcore.passes.legality import bytes_moved, coverage, flops
from jitcore.passes.pipeline import run_pipeline

from . import config, diskcache
from .llvm import conv, engine, gemm
from .llvm.entry import NDARRAY_TYPE_SYMBOL
from .llvm.graph_module import build_module
from .llvm.target import Target
from .lru import LRU
from .version import VERSION
from jitcore.runtime import PARALLEL_FOR, TASK_SPAWN, TASK_WAIT
from jitcore.runtime.forksafe import renew_in_child


RUN_TYPE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))


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
                 run_name: str, entry_name: str, seconds: dict):
        self.graph, self.lowered, self.target = graph, lowered, target
        self.llvm_ir, self.library, self.seconds = llvm_ir, library, seconds
        self.prepacked_bytes = 0          # constant GEMM/conv weights packed at compile time
        # the code lives as long as self.library; whoever calls these addresses holds self
        self.entry_address = library.addresses[entry_name]
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


_CACHE = LRU()
_CACHE_LOCK = threading.Lock()
_KEY_LOCKS: dict = {}
renew_in_child(sys.modules[__name__], "_CACHE_LOCK")
renew_in_child(sys.modules[__name__], "_KEY_LOCKS", dict)   # held by compiling threads
STATS = {"compiles": 0, "hits": 0}


def cache_info() -> dict:
    """Compiles and cache hits so far, the compiled graphs held now, and the disk cache's
    hits, misses and rejected (corrupt or foreign) entries."""
    with _CACHE_LOCK:
        return {**STATS, "size": len(_CACHE), "max_size": config.get().cache_size,
                **diskcache.STATS, "disk_dir": diskcache.directory()}


def cache_key(graph: Graph, strides: tuple, target: Target, threads: int,
              prepack: bool) -> tuple:
    return (graph.text(), strides, target.key(), threads, prepack, VERSION)


def compile_graph(graph: Graph, strides: tuple, target: Target, threads: int = 0,
                  prepack: bool = True) -> CompiledGraph:
    """Compile (or fetch from the cache). `strides`: per input, strides in elements;
    `threads`: intra-op threads for this graph (0: the process-wide setting); `prepack`:
    pack constant GEMM weights at compile time (unless JITCORE_PREPACK=0)."""
    prepack = prepack and config.get().prepack
    key = cache_key(graph, strides, target, threads, prepack)
    with _CACHE_LOCK:
        hit = _CACHE.lookup(key)
        if hit is not None:
            STATS["hits"] += 1
            return hit
        key_lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with key_lock:                       # one compile per key, even from many threads
        with _CACHE_LOCK:
            hit = _CACHE.get(key)
        if hit is None:
            hit = _compile(graph, strides, target, threads, prepack)
            with _CACHE_LOCK:
                _CACHE.put(key, hit)
                STATS["compiles"] += 1
    with _CACHE_LOCK:
        _KEY_LOCKS.pop(key, None)
    return hit


def _runtime_imports(text: str) -> dict:
    """Addresses for the external symbols a graph module uses."""
    imports = {NDARRAY_TYPE_SYMBOL: id(np.ndarray)}
    for symbol in (PARALLEL_FOR, TASK_SPAWN, TASK_WAIT):   # runtime functions it calls
        if symbol in text:
            from .parallel import pool, start_interop
            lib = start_interop() if symbol == TASK_SPAWN else pool()
            imports[symbol] = lib.library.addresses[symbol]
    return imports


def _compile(graph: Graph, strides: tuple, target: Target, threads: int,
             prepack: bool) -> CompiledGraph:
    t0 = time.perf_counter()
    input_strides = {inp.arg: s for inp, s in zip(graph.inputs, strides)}
    lowered = run_pipeline(graph, target.vector_bits, input_strides, target.masked_tails)
    packed = 0
    if prepack:
        packed += gemm.prepack(lowered, target.vector_bits, gemm.plan_threads(threads))
        packed += conv.prepack(lowered, target.vector_bits, gemm.plan_threads(threads))
    t1 = time.perf_counter()
    mach = engine.machine(target)
    text, run_name, entry_name = build_module(lowered, target.vector_bits, target.triple,
                                              mach.data_layout, target.masked_tails, threads)
    t_runtime = time.perf_counter()
    imports = _runtime_imports(text)     # the first one builds the thread pools, once
    t2 = time.perf_counter()
    exports = [run_name, entry_name]
    library = engine.compile_ir(text, exports, target, imports=imports,
                                cache=diskcache.Entry(text, target.key(), exports))
    t3 = time.perf_counter()
    # the process-wide runtime (built by the first graph that needs it) is not this graph's cost
    setup = t2 - t_runtime
    seconds = {"passes": t1 - t0, "codegen": t_runtime - t1, "llvm": t3 - t2,
               "total": t3 - t0 - setup}
    compiled = CompiledGraph(graph, lowered, target, text, library, run_name, entry_name, seconds)
    compiled.prepacked_bytes = packed
    if config.get().dump_dir:
        from .dump import dump
        dump(compiled, config.get().dump_dir)
    return compiled

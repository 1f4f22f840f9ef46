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

from jitcore.ir import dtypes as dt
from jitcore.ir.errors import CompileError
from jitcore.ir.graph import Graph
from jitcore.passes.legality import bytes_moved, flops
from jitcore.passes.pipeline import run_pipeline
from jitcore.passes.symbolic import at_sizes

from . import config, gcpause, log, perfmap
from .cache import disk as diskcache
from .cache import outputs as output_cache
from .cache.fingerprint import host_caches
from .cache.lru import LRU
from .llvm import bf16, conv, conv_gemm, engine, gemm, gemv_pack, graph_module
from .llvm import entry as abi
from .llvm.entry import NDARRAY_TYPE_SYMBOL
from .llvm.graph_module import build_module
from .llvm.kinds import report as kind_report
from .llvm.target import Target
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


@dataclass(frozen=True)
class CallLayout:
    """What the call path reads of a lowered graph: the constant arrays passed after the
    inputs, each output buffer's (shape, DType) in slot order, the output buffer of each graph
    output, and the gathers' index checks ((op name, axis, extent) per site)."""
    consts: tuple
    outputs: tuple
    out_index: tuple
    checks: tuple

    @classmethod
    def of(cls, lowered) -> "CallLayout":
        out_bufs = lowered.buffers_of_kind("output")
        first_out = out_bufs[0].slot if out_bufs else 0
        return cls(tuple(c.array for c in lowered.consts),
                   tuple((tuple(b.shape), b.dtype) for b in out_bufs),
                   tuple(s - first_out for s in lowered.outputs),
                   tuple(tuple(c) for c in lowered.checks or ()))

    def to_json(self, kernels: list) -> dict | None:
        """The layout and kernels' reports as JSON data, for a graph stored whole; None when
        it has constants (arrays stay out of the disk cache: such a graph runs its passes)."""
        if self.consts:
            return None
        return {"outputs": [[list(shape), dtype.name] for shape, dtype in self.outputs],
                "out_index": list(self.out_index), "checks": [list(c) for c in self.checks],
                "kernels": [list(dataclasses.astuple(k)) for k in kernels]}

    @classmethod
    def from_json(cls, d: dict) -> tuple:
        """(layout, kernels' reports) from to_json's data; ValueError/TypeError/KeyError
        when malformed."""
        outputs = tuple((tuple(_count(n) for n in shape), dt.as_dtype(name))
                        for shape, name in d["outputs"])
        out_index = tuple(_count(i) for i in d["out_index"])
        if sorted(out_index) != list(range(len(outputs))):
            raise ValueError("output buffers do not match the outputs")
        checks = tuple((str(op), _count(axis), _count(extent)) for op, axis, extent in d["checks"])
        kernels = [KernelInfo(*fields) for fields in d["kernels"]]
        for k in kernels:
            if not (isinstance(k.name, str) and isinstance(k.loop_nest, str)
                    and all(isinstance(op, str) for op in k.ops)):
                raise TypeError("malformed kernel report")
        return cls((), outputs, out_index, checks), \
            [dataclasses.replace(k, ops=tuple(k.ops)) for k in kernels]


def _count(n) -> int:
    if type(n) is not int or n < 0:
        raise TypeError(f"expected a count, got {n!r}")
    return n


def kernel_infos(lowered) -> list:
    """Each kernel's report; its kind's part (name, layout, loop nest) from the kind's
    registry entry (jitcore/llvm/kinds.py)."""
    infos = []
    for k in lowered.kernels:
        kind, layout, loop_nest = kind_report(k)
        infos.append(KernelInfo(k.name, kind, k.ops, loop_nest, k.vector_bits, k.lanes,
                                k.vectorized, k.reason, bytes_moved(k), flops(k), k.task,
                                layout))
    return infos


class CompiledGraph:
    """A graph compiled for one input layout and target: its kernels, IR and native code.

    `lowered` and `llvm_ir`: the lowered graph and the generated LLVM IR, or functions that
    compute them (a graph loaded whole from the disk cache computes them only when someone
    asks). `layout`: what the call path reads (CallLayout); `kernels`: the kernels' reports
    (both from `lowered` unless given). `source`: where the machine code came from:
    "compiled" (LLVM built some of its modules), "disk" (their machine code came from the
    disk cache), "disk_graph" (the whole graph came from the disk cache: no IR generated)
    or "memory" (every module was built earlier in this process); explain.SOURCES words
    them."""

    def __init__(self, graph: Graph, lowered, target: Target, llvm_ir, library,
                 run_name: str, entry_name: str, seconds: dict, fastcall_name=None,
                 source: str = "compiled", layout: CallLayout | None = None,
                 kernels: list | None = None):
        self.graph, self._lowered, self.target = graph, lowered, target
        self._llvm_ir, self.library, self.seconds = llvm_ir, library, seconds
        self.source = source
        self.prepacked_bytes = 0          # constant GEMM/GEMV/conv weights packed at compile time
        # the code lives as long as self.library; whoever calls these addresses holds self
        self.entry_address = library.addresses[entry_name]
        # the native fast call (llvm/entry.py emit_fastcall), for graphs it handles, else None
        self.fastcall_address = library.addresses[fastcall_name] if fastcall_name else None
        self.run = RUN_TYPE(library.addresses[run_name])
        self.layout = layout if layout is not None else CallLayout.of(lowered)
        self.kernels = kernels if kernels is not None else kernel_infos(lowered)

    @property
    def lowered(self):
        """The lowered graph (passes.lower.LoweredGraph)."""
        if callable(self._lowered):
            self._lowered = self._lowered()
        return self._lowered

    @property
    def llvm_ir(self) -> str:
        """The generated (unoptimized) LLVM IR of every module."""
        if callable(self._llvm_ir):
            self._llvm_ir = self._llvm_ir()
        return self._llvm_ir

    @property
    def optimized_ir(self) -> str:
        return self.library.optimized_ir

    def asm(self) -> str:
        return self.library.asm()

    def coverage(self) -> tuple:
        """(vectorized kernels, all kernels)."""
        return sum(k.vectorized for k in self.kernels), len(self.kernels)

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
    misses and rejected (corrupt or foreign) entries (`disk_graph_hits`/`disk_graph_misses`:
    graphs loaded whole from it, with no IR generated, or not found whole), the kernels whose LLVM IR was generated
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
              prepack: bool, precision: str = bf16.FP32) -> tuple:
    # (a graph with run-time extents has their placeholders in its text: its own key; a
    # graph compiled for a perf map names its kernels there, so it is another entry)
    return (graph.text(), strides, target.key(), threads, prepack, VERSION,
            config.get().perf_map, config.get().winograd) + \
        ((precision,) if precision != bf16.FP32 else ())


def compile_graph(graph: Graph, strides: tuple, target: Target, threads: int = 0,
                  prepack: bool = True, trace_seconds: float = 0.0,
                  dynamic: bool = False, matmul_precision=None) -> CompiledGraph:
    """Compile (or fetch from the cache). `strides`: per input, strides in elements;
    `threads`: intra-op threads for this graph (0: the process-wide setting); `prepack`:
    pack constant GEMM weights at compile time (unless JITCORE_PREPACK=0); `trace_seconds`:
    what tracing the graph took, recorded with the compile's other stages; `dynamic`: the
    graph's shapes hold run-time extents (passes/symbolic.py), and the passes raise
    passes.dynamic.NotDynamic when it needs their values; `matmul_precision`: "fp32" or
    "bf16", the policy of float32 matmuls (jitcore/llvm/bf16.py; None: the setting of
    JITCORE_MATMUL_PRECISION)."""
    prepack = prepack and config.get().prepack
    precision = bf16.policy(matmul_precision or config.get().matmul_precision)
    t0 = time.perf_counter()
    key = cache_key(graph, strides, target, threads, prepack, precision)
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
            with gcpause.paused():
                hit = _compile(graph, strides, target, threads, prepack,
                               {"trace": trace_seconds, "cache_key": key_seconds}, dynamic,
                               key, precision)
            with _CACHE_LOCK:
                _CACHE.put(key, hit)
                STATS["compiles"] += 1
    with _CACHE_LOCK:
        _KEY_LOCKS.pop(key, None)
    return hit


RUNTIME_SYMBOLS = (abi.NP_EMPTY, PARALLEL_FOR, TASK_SPAWN, TASK_WAIT)


def _runtime_symbols(text: str) -> tuple:
    """The external symbols of this process a graph module's IR text uses."""
    return tuple(symbol for symbol in RUNTIME_SYMBOLS if symbol in text)


def _runtime_imports(symbols: tuple) -> dict:
    """Addresses for the external symbols a graph module uses (`_runtime_symbols`)."""
    imports = {NDARRAY_TYPE_SYMBOL: id(np.ndarray)}
    if abi.NP_EMPTY in symbols:
        imports.update(python_api())
    for symbol in (PARALLEL_FOR, TASK_SPAWN, TASK_WAIT):   # runtime functions it calls
        if symbol in symbols:
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
             _module_sources(entries, compiled))
    if not log.LOGGER.isEnabledFor(logging.DEBUG):
        return
    for k in compiled.kernels:
        log.debug("%s: kernel %s (%s, ops %s): %s", compiled.graph.name, k.name, k.kind,
                  ", ".join(k.ops), f"vectorized x{k.lanes}" if k.vectorized
                  else f"scalar, legality: {k.reason}")


def _module_sources(entries: list, compiled: CompiledGraph) -> str:
    """Where the graph's machine code came from: `whole graph from the disk cache` (its
    manifest and objects, no IR generated), `disk cache hit` (every module LLVM would
    have built was on disk), `miss` (LLVM built some), `off`, plus the modules this process
    had built already (equal kernels of other graphs or layers)."""
    outcomes = [e.outcome for e in entries]
    if compiled.source == "disk_graph":
        disk = "whole graph from the disk cache"
    elif "miss" in outcomes:
        disk = "disk cache miss"
    elif "hit" in outcomes:
        disk = "disk cache hit"
    elif diskcache.directory() is None:
        disk = "disk cache off"
    else:
        disk = "disk cache not needed"
    library = compiled.library
    if library.reused:
        disk += f", {library.reused} of {library.modules} LLVM module(s) already built here"
    return disk


# Compile stages in the order they run (seconds per stage: CompiledGraph.seconds, explain(),
# cache_info()["compile_seconds"]). LLVM's stages come from the engine; a graph whose machine
# code came from the disk cache has disk_load instead of parse, optimize and machine_code.
STAGES = ("trace", "cache_key", "passes", "prepack", "ir_generation", "parse", "optimize",
          "machine_code", "disk_load", "disk_store", "link")
COMPILE_SECONDS = dict.fromkeys(STAGES + ("total",), 0.0)    # summed over this process


class _Job:
    """One compile's inputs, and its two Python stages: the passes (with prepacking) and IR
    generation."""

    def __init__(self, graph, strides, target, threads, prepack, dynamic,
                 precision=bf16.FP32):
        self.graph, self.strides, self.target = graph, strides, target
        self.threads, self.prepack, self.dynamic = threads, prepack, dynamic
        self.precision = precision
        self.mach = engine.machine(target)

    def lower(self) -> tuple:
        """(lowered graph, bytes prepacked, seconds of the passes, of prepacking)."""
        t0 = time.perf_counter()
        target, threads = self.target, gemm.plan_threads(self.threads)
        input_strides = {inp.arg: s for inp, s in zip(self.graph.inputs, self.strides)}
        lowered = run_pipeline(self.graph, target.vector_bits, input_strides,
                               target.masked_tails, verify_stages=config.get().verify,
                               dynamic=self.dynamic)
        bf16.apply(lowered, self.precision, target)   # before prepacking: it packs by it
        conv_gemm.apply(lowered)                       # (full-precision convs only)
        t1 = time.perf_counter()
        packed = 0
        if self.prepack:     # in place in `lowered`: the kernels read the packed constants
            packed += gemm.prepack(lowered, target.vector_bits, threads)
            packed += gemv_pack.prepack(lowered, target.vector_bits, threads)
            packed += conv.prepack(lowered, target.vector_bits, threads,
                                   config.get().winograd)
        return lowered, packed, t1 - t0, time.perf_counter() - t1

    def generate(self, lowered, on_kernel=None):
        t = self.target
        return build_module(lowered, t.vector_bits, t.triple, self.mach.data_layout,
                            t.masked_tails, self.threads, diskcache.KernelIR(t.key()),
                            t.stream_bytes, t.has("fma"), t.has("avx512bf16"), on_kernel)


def _compile(graph: Graph, strides: tuple, target: Target, threads: int,
             prepack: bool, front_seconds: dict, dynamic: bool = False,
             key: tuple | None = None, precision: str = bf16.FP32) -> CompiledGraph:
    """Compile: from the disk cache whole when it has the graph (without even the passes
    when it has the call layout), else the passes, IR generation and LLVM (per module, from
    the disk cache where it has the module)."""
    job = _Job(graph, strides, target, threads, prepack, dynamic, precision)
    whole = None
    # (a graph loaded whole has no kernel symbols to name in a perf map: build it from modules)
    if diskcache.directory() is not None and not config.get().perf_map:
        key = key or cache_key(graph, strides, target, threads, prepack, precision)
        whole = diskcache.GraphEntry(_code_key(key, threads, dynamic), target.key())
    t0 = time.perf_counter()
    manifest, stored = _find_whole(whole) if whole is not None else (None, None)
    # reading the manifest is the disk's time; looking for one in vain, the cache key's
    looked = "disk_load" if manifest is not None else "cache_key"
    front_seconds = {**front_seconds,
                     looked: front_seconds.get(looked, 0.0) + time.perf_counter() - t0}
    if stored is not None:
        library = _link_whole_graph(whole, manifest, target)
        if library is not None:      # the lowered graph and its IR: computed when asked for
            layout, kernels = stored
            seconds = {**front_seconds, "passes": 0.0, "prepack": 0.0, "ir_generation": 0.0}
            compiled = _finish(graph, lambda: job.lower()[0], target, None, library, manifest,
                               seconds, "disk_graph", layout, kernels)
            compiled._llvm_ir = lambda: job.generate(compiled.lowered).text
            return _report(compiled, [])
        manifest = None
    lowered, packed, passes, prepacking = job.lower()
    front_seconds = {**front_seconds, "passes": passes, "prepack": prepacking}
    library = _link_whole_graph(whole, manifest, target) if manifest is not None else None
    if library is not None:          # the code whole; the IR generated when asked for
        compiled = _finish(graph, lowered, target, lambda: job.generate(lowered).text,
                           library, manifest, {**front_seconds, "ir_generation": 0.0},
                           "disk_graph")
    else:
        compiled, entries = _build(job, lowered, whole, front_seconds)
    compiled.prepacked_bytes = packed
    return _report(compiled, [] if library is not None else entries)


def _build(job: _Job, lowered, whole, front_seconds: dict) -> tuple:
    """(compiled graph, its modules' disk entries): IR generated, then each module's machine
    code from LLVM or the disk cache; the graph stored whole (`whole`) for the next process."""
    target = job.target
    t0 = time.perf_counter()
    # each kernel's module starts building (on the compile workers) as soon as its IR exists
    prebuilds = engine.Prebuilds(target, config.get().compile_workers)
    kernel_entries = {}          # symbol -> its disk entry (keyed by a hash of its text)

    def started(k):
        if k.symbol not in kernel_entries:
            kernel_entries[k.symbol] = diskcache.Entry(k.text, target.key(), [k.symbol])
            prebuilds.add(k.text, kernel_entries[k.symbol])
    code = job.generate(lowered, started)
    ir_seconds = time.perf_counter() - t0
    # the process-wide runtime (built by the first graph that needs it) is not this graph's
    # cost
    symbols = _runtime_symbols(code.graph_text)
    exports = [code.run_name, code.entry_name] + \
        ([code.fastcall_name] if code.fastcall_name else [])
    modules = [(k.text, kernel_entries[k.symbol]) for k in code.kernels]
    modules.append((code.graph_text, diskcache.Entry(code.graph_text, target.key(), exports)))
    entries = [cache for _, cache in modules]
    perf_map = config.get().perf_map
    kernel_symbols = list(dict.fromkeys(k.symbol for k in code.kernels)) if perf_map else []
    library = engine.compile_modules(modules, exports + kernel_symbols, target,
                                     imports=_runtime_imports(symbols), prebuilds=prebuilds)
    seconds = {**front_seconds, "ir_generation": ir_seconds}
    source = "compiled" if "machine_code" in library.seconds else \
        "disk" if "disk_load" in library.seconds else "memory"
    layout, kernels = CallLayout.of(lowered), kernel_infos(lowered)
    manifest = diskcache.GraphManifest(
        tuple(dict.fromkeys(e.key for e in entries)), tuple(exports), symbols,
        code.run_name, code.entry_name, code.fastcall_name, layout.to_json(kernels))
    if whole is not None:
        t0 = time.perf_counter()
        whole.store(manifest)
        seconds["disk_store"] = time.perf_counter() - t0
    compiled = _finish(job.graph, lowered, target, code.text, library, manifest, seconds,
                       source, layout, kernels)
    if perf_map:
        _write_perf_map(job.graph.name, code, kernels, library)
    return compiled, entries


def _write_perf_map(graph: str, code, kernels: list, library) -> None:
    """Name the graph's kernels, run and entry functions in the perf map (perfmap.py)."""
    users: dict = {}                    # kernel symbol -> the kernels' reports that run it
    for info, kc in zip(kernels, code.kernels):
        users.setdefault(kc.symbol, []).append(info)
    named = {library.addresses[s]: perfmap.kernel_name(graph, infos)
             for s, infos in users.items()}
    for fn, role in ((code.run_name, "run"), (code.entry_name, "entry"),
                     (code.fastcall_name, "fast call")):
        if fn:
            named[library.addresses[fn]] = f"jitcore:{graph}:{role}"
    perfmap.write(named)


def _find_whole(whole) -> tuple:
    """(manifest, (CallLayout, kernels' reports) or None) of a graph stored whole, or
    (None, None). A manifest whose layout is malformed is rejected."""
    manifest = whole.load()
    if manifest is None or manifest.layout is None:
        return manifest, None
    stored = _stored_layout(manifest.layout)
    if stored is None:
        diskcache.reject(whole.key)
        return None, None
    return manifest, stored


def _finish(graph, lowered, target, llvm_ir, library, manifest, seconds: dict, source: str,
            layout=None, kernels=None) -> CompiledGraph:
    """The CompiledGraph, with its stages' seconds (`seconds` plus LLVM's and the disk's
    from the library) added to the process's."""
    for stage, s in library.seconds.items():
        seconds[stage] = seconds.get(stage, 0.0) + s
    seconds["total"] = sum(seconds.values())
    with _CACHE_LOCK:
        for stage, s in seconds.items():
            COMPILE_SECONDS[stage] += s
    return CompiledGraph(graph, lowered, target, llvm_ir, library, manifest.run_name,
                         manifest.entry_name, seconds, manifest.fastcall_name, source, layout,
                         kernels)


def _report(compiled: CompiledGraph, entries: list) -> CompiledGraph:
    _log_compile(compiled, entries)
    if config.get().dump_dir:
        from .dump import dump_or_warn
        dump_or_warn(compiled, config.get().dump_dir)
    return compiled


def _stored_layout(data: dict):
    """(CallLayout, kernels' reports) from a manifest's layout, or None when malformed."""
    try:
        return CallLayout.from_json(data)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _code_key(key: tuple, threads: int, dynamic: bool) -> tuple:
    """Everything a graph's code depends on: the memory cache's key (graph text, strides,
    target, threads, prepacking, version), plus what the passes and code generation read
    besides: the threads a plan splits work for, run-time extents, the host's cache sizes
    (GEMM and conv blocking). The disk entry adds the sources and versions of the code
    between (diskcache.GraphEntry, jitcore/cache/fingerprint.py). A new setting that changes
    the generated code (or the optimizer's output) must join this key, or a warm start would
    link code built under the old setting."""
    return key + (gemm.plan_threads(threads), dynamic, host_caches(), _user_type_numbers())


def _user_type_numbers() -> tuple:
    """numpy's numbers of the user dtypes (ml_dtypes' bfloat16) in this process: the native
    entry checks an array's dtype by its number, which numpy gives out in registration
    order, so code linked from disk must come from a process that numbered them alike."""
    if sys.modules.get("ml_dtypes") is None:    # (no bfloat16 array exists without it)
        return ()
    return tuple((d.name, d.np.num) for d in dt.STORAGE)


def _link_whole_graph(whole, manifest, target: Target):
    """The linked library of a graph whose manifest was found, from its modules' objects on
    disk (or in memory), else None: a module gone since (evicted, damaged) means the graph
    compiles normally, which rewrites it."""
    modules = [(None, diskcache.StoredModule(k, target.key())) for k in manifest.modules]
    try:
        library = engine.compile_modules(modules, list(manifest.exports), target,
                                         imports=_runtime_imports(manifest.imports))
    except diskcache.ModuleMissing:
        log.info("a module of a graph stored whole is no longer on disk: compiling it")
        whole.count(loaded=False)
        return None
    except CompileError as e:         # e.g. a symbol the objects need is not there
        log.warning("a graph stored whole on disk could not be linked (%s): compiling it", e)
        whole.count(loaded=False)
        diskcache.reject(whole.key)
        return None
    whole.count(loaded=True)
    return library

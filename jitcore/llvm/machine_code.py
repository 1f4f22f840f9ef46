"""LLVM's work on one module: parse and verify its text, run the pipeline it declares, emit
an object file.

    build(text, machine_for_level)   -> (object bytes, optimized IR text, stage seconds)
    serve()                          the loop of a compile worker process (compile_pool.py)

This file imports only llvmlite and the standard library: compile worker processes load it
by path and serve requests from it without importing jitcore (whose import costs ~0.6 s of
CPU; llvmlite's ~0.08 s).

How hard LLVM works on a module is a property of the module (its PIPELINE, declared in its
text by `with_pipeline`): kernels get LLVM's function simplification pipeline and the code
generator's highest level; a graph's glue (graph_module.py's run function, entry.py's checks
and fast call) and the thread pool's runtime go to fast instruction selection unoptimized.
"""
from __future__ import annotations

import pickle
import struct
import sys
import time
from dataclasses import dataclass

import llvmlite.binding as llvm


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


def create_target_machine(triple: str, cpu: str, features: str, level: int):
    """A target machine of the JIT's kind (objects of any level link into one LLJIT)."""
    return llvm.Target.from_triple(triple).create_target_machine(
        cpu=cpu, features=features, opt=level, jit=True)


def build(text: str, machine_for_level) -> tuple:
    """(object bytes, optimized IR text, seconds per stage: parse, optimize, machine_code)
    of one module, built with the pipeline its text declares; `machine_for_level(level)`
    gives the target machine of a code generator level. Invalid IR raises RuntimeError."""
    pipeline = pipeline_of(text)
    t0 = time.perf_counter()
    mod = llvm.parse_assembly(text)
    mod.verify()
    t1 = time.perf_counter()
    tm = machine_for_level(pipeline.codegen_level)    # (optimizing pipelines: level 3)
    optimize(mod, tm, pipeline)
    t2 = time.perf_counter()
    obj = tm.emit_object(mod)
    t3 = time.perf_counter()
    optimized = str(mod) if pipeline.ir_level else text      # (unoptimized: as written)
    return obj, optimized, {"parse": t1 - t0, "optimize": t2 - t1, "machine_code": t3 - t2}


def optimize(mod, tm, pipeline: Pipeline = KERNEL) -> None:
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


def _free_pass_manager(fpm) -> None:
    """Free a pass pipeline now. llvmlite's FunctionPassManager never frees it (its
    _dispose is shadowed by ObjectRef's empty one in the class's MRO: 70-110 KB lost per
    compile with the module pipeline, see tests/test_memory.py); detaching afterwards keeps
    a fixed llvmlite from freeing it twice."""
    dispose = getattr(llvm.ffi.lib, "LLVMPY_DisposeNewFunctionPassManger", None)
    if dispose is not None and not fpm.closed:
        dispose(fpm)
        fpm.detach()


# -- the compile worker process: length-prefixed pickles over stdin/stdout ------------------

_HEADER = struct.Struct("<Q")


def write_message(stream, value) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_message(stream):
    """The next message, or EOFError when the other side has closed the pipe."""
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    data = stream.read(_HEADER.unpack(header)[0])
    return pickle.loads(data)


def serve(stdin=None, stdout=None) -> None:
    """Build modules until the parent closes the pipe. A request is (triple, cpu, features,
    text); the reply ("ok", object, optimized IR, seconds) or ("error", message)."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machines: dict = {}

    while True:
        try:
            triple, cpu, features, text = read_message(stdin)
        except EOFError:
            return

        def machine_for_level(level, key=(triple, cpu, features)):
            if (key, level) not in machines:
                machines[key, level] = create_target_machine(*key, level)
            return machines[key, level]

        try:
            reply = ("ok", *build(text, machine_for_level))
        except Exception as e:          # invalid IR: the parent builds it again and reports
            reply = ("error", f"{type(e).__name__}: {e}")
        write_message(stdout, reply)

"""A lowered graph -> one LLVM module: a function per kernel (`codegen.KernelEmitter`), the
`run` function that allocates the temps and launches the kernels (and forked tasks) on the
runtime's pool, and the native entry (`entry.py`).

ABI (room for the parallel runtime: a kernel runs any sub-range of its first loop):
    void  <graph>_k<i>(i64 start, i64 stop, i8** bufs)   kernel over [start, stop) of loop 0
    i32   <graph>_run(i8** bufs)                          all kernels; allocates the temps
    i32   <graph>_entry(PyTupleObject* arrays)           reads each ndarray's data pointer
"""
from __future__ import annotations

import math

from llvmlite import ir

from jitcore.passes.kernel import Kernel
from jitcore.passes.legality import bytes_moved, flops
from jitcore.passes.memory_plan import ALIGN, plan_temps
from jitcore.runtime import emit_parallel_for, emit_spawn, emit_wait

from . import irutil as u
from .codegen import KernelEmitter, streams_by_rows
from .entry import OK, OUT_OF_MEMORY, emit_entry
from .conv import plan as conv_plan
from .gemm import plan as gemm_plan
from .gemm import plan_threads
from .gemv import plan as gemv_plan


def build_module(lowered, vector_bits: int, triple: str, data_layout: str,
                 masked_tails: bool = False, threads: int = 0) -> tuple:
    """Return (module text, run function name, entry function name). `threads`: intra-op
    threads of this graph's kernels (0: the process-wide setting at call time)."""
    module = ir.Module(name=lowered.name)
    module.triple, module.data_layout = triple, data_layout
    prefix = f"jc_{lowered.name}"
    kernel_fns = []
    for i, kernel in enumerate(lowered.kernels):
        ke = KernelEmitter(module, kernel, f"{prefix}_k{i}", masked_tails)
        launch = (kernel.range_extent, grain(kernel))
        if kernel.kind == "gemm":        # work items of the GEMM, one per call at most
            ke.gemm_plan = gemm_plan(kernel, vector_bits, plan_threads(threads))
            launch = (ke.gemm_plan.items, 1)
        elif kernel.kind == "conv":      # work items: image x pixel tile x channel blocks
            ke.conv_plan = conv_plan(kernel, vector_bits, plan_threads(threads))
            launch = (ke.conv_plan.items, 1)
        elif kernel.kind == "gemv":      # work items: blocks of outputs
            ke.gemv_plan = gemv_plan(kernel, vector_bits, plan_threads(threads))
            launch = (ke.gemv_plan.items, grain(kernel, ke.gemv_plan.items))
        ke.emit()
        kernel_fns.append((ke.fn,) + launch)     # (function, range extent, grain)
    run = _emit_run(module, lowered, kernel_fns, f"{prefix}_run", threads)
    entry = emit_entry(module, lowered, run, f"{prefix}_entry")
    text = _with_vector_attributes(str(module), vector_bits)
    return text, run.name, entry.name


def _with_vector_attributes(text: str, vector_bits: int) -> str:
    """llvmlite cannot set string attributes; tag every definition with group #0 in the text.
    Without "min-legal-vector-width" the x86 backend may split 512-bit vectors in halves."""
    lines = []
    for line in text.splitlines():
        if line.startswith("define "):
            line = line.rstrip() + " #0" if not line.rstrip().endswith("{") else \
                line.rstrip()[:-1].rstrip() + " #0 {"
        lines.append(line)
    lines.append(f'attributes #0 = {{ nounwind "min-legal-vector-width"="{vector_bits}" '
                 f'"prefer-vector-width"="{vector_bits}" }}')
    return "\n".join(lines) + "\n"


MIN_CHUNK_WORK = 1 << 16    # bytes + flops in the smallest chunk worth a thread (~5-10 us)


def grain(kernel: Kernel, extent: int | None = None) -> int:
    """Fewest iterations of the kernel's range loop (of `extent` work items, if given) per
    parallel chunk, from its cost. A streaming column reduction is split in halves at most:
    narrower column slices turn its long row reads into short strided ones."""
    extent = kernel.range_extent if extent is None else extent
    per_iteration = max((bytes_moved(kernel) + flops(kernel)) / max(extent, 1), 1)
    g = max(1, math.ceil(MIN_CHUNK_WORK / per_iteration))
    return max(g, -(-extent // 2)) if streams_by_rows(kernel) else g


def _emit_task(module, lowered, kernel_fns, task: int, name: str, threads: int) -> ir.Function:
    """`void task(i8** bufs)`: the kernels of one forked sub-graph, in order."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [u.I8P.as_pointer()]), name=name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for kernel, (kfn, extent, chunk) in zip(lowered.kernels, kernel_fns):
        if kernel.task == task:
            emit_parallel_for(b, kfn, extent, fn.args[0], chunk, threads)
    b.ret_void()
    return fn


def _emit_run(module, lowered, kernel_fns, name, threads: int):
    fn = ir.Function(module, ir.FunctionType(u.I32, [u.I8P.as_pointer()]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    given = fn.args[0]
    nslots = len(lowered.buffers)
    bufs = b.alloca(ir.ArrayType(u.I8P, max(nslots, 1)), name="bufs")
    slots = b.bitcast(bufs, u.I8P.as_pointer())
    aligned_alloc = ir.Function(module, ir.FunctionType(u.I8P, [u.I64, u.I64]), "aligned_alloc")
    free = ir.Function(module, ir.FunctionType(ir.VoidType(), [u.I8P]), "free")
    temps = []
    plan = plan_temps(lowered)                  # temps with disjoint lifetimes share a block
    for size in plan.sizes:
        p = b.call(aligned_alloc, [u.I64(ALIGN), u.I64(size)], name=f"block{len(temps)}")
        fail = b.icmp_unsigned("==", p, ir.Constant(u.I8P, None))
        with b.if_then(fail, likely=False):
            for t in temps:
                b.call(free, [t])
            b.ret(u.I32(OUT_OF_MEMORY))
        temps.append(p)
    for buf in lowered.buffers:
        dst = b.gep(slots, [u.I64(buf.slot)])
        if buf.kind == "temp" and buf.slot not in plan.block_of:  # its kernels were fused away
            b.store(ir.Constant(u.I8P, None), dst)
        elif buf.kind == "temp":
            b.store(temps[plan.block_of[buf.slot]], dst)
        else:
            b.store(b.load(b.gep(given, [u.I64(buf.slot)])), dst)
    handles = {}
    for step, arg in lowered.steps:
        if step == "kernel":
            kfn, extent, chunk = kernel_fns[arg]
            emit_parallel_for(b, kfn, extent, slots, chunk, threads)
        elif step == "spawn":
            task_fn = _emit_task(module, lowered, kernel_fns, arg, f"{name}_task{arg}", threads)
            handles[arg] = emit_spawn(b, task_fn, slots)
        else:
            emit_wait(b, handles[arg])
    for t in temps:
        b.call(free, [t])
    b.ret(u.I32(OK))
    return fn

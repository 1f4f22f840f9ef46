"""Emission of a parallel-for over one kernel, as LLVM IR (llvmlite)."""
from __future__ import annotations

from llvmlite import ir

from .pool_ir import KERNEL_PTR

I32, I64 = ir.IntType(32), ir.IntType(64)
I8PP = ir.IntType(8).as_pointer().as_pointer()

KERNEL_ABI = "void kernel(i64 start, i64 stop, i8** bufs)"
PARALLEL_FOR = "jc_parallel_for"       # void (kernel*, i64 extent, i64 grain, i8** bufs,
                                       #       i32 threads: 0 = the process-wide setting)
TASK_SPAWN = "jc_task_spawn"           # i8* (void (i8**)*, i8** bufs): a task handle
TASK_WAIT = "jc_task_wait"             # void (i8* handle)


def kernel_type() -> ir.FunctionType:
    """The LLVM type of every kernel function (see KERNEL_ABI)."""
    return ir.FunctionType(ir.VoidType(), [I64, I64, I8PP])


def emit_parallel_for(builder: ir.IRBuilder, kernel: ir.Function, extent, bufs,
                      grain, threads: int = 0) -> None:
    """Run `kernel` over [0, extent) in chunks of at least `grain` iterations, on `threads`
    threads (0: the process-wide setting; 1: always on the calling thread).

    Work that fits in one chunk is a direct call: no pool, no wake-up. Larger work goes to
    the runtime's `jc_parallel_for` (linked in from the runtime library). `extent` may be
    an i64 value known only at run time (then that choice is made at run time), and so
    may `grain`.
    """
    if not isinstance(extent, int) or not isinstance(grain, int):
        _emit_parallel_for_runtime(builder, kernel, extent, bufs, grain, threads)
        return
    if extent <= 0:
        return
    if extent <= grain or threads == 1:
        builder.call(kernel, [I64(0), I64(extent), bufs])
        return
    pfor = _declare(builder.module, PARALLEL_FOR,
                    ir.FunctionType(ir.VoidType(), [KERNEL_PTR, I64, I64, I8PP, I32]))
    builder.call(pfor, [kernel, I64(extent), I64(grain), bufs, I32(threads)])


def _emit_parallel_for_runtime(builder, kernel, extent, bufs, grain, threads: int):
    extent = I64(extent) if isinstance(extent, int) else extent
    grain = I64(grain) if isinstance(grain, int) else grain
    if threads == 1:
        with builder.if_then(builder.icmp_signed(">", extent, I64(0))):
            builder.call(kernel, [I64(0), extent, bufs])
        return
    small = builder.icmp_signed("<=", extent, grain)
    with builder.if_else(small) as (direct, pooled):
        with direct:
            with builder.if_then(builder.icmp_signed(">", extent, I64(0))):
                builder.call(kernel, [I64(0), extent, bufs])
        with pooled:
            pfor = _declare(builder.module, PARALLEL_FOR,
                            ir.FunctionType(ir.VoidType(), [KERNEL_PTR, I64, I64, I8PP, I32]))
            builder.call(pfor, [kernel, extent, grain, bufs, I32(threads)])


def _declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    return module.globals.get(name) or ir.Function(module, fnty, name)


def emit_spawn(builder: ir.IRBuilder, task: ir.Function, bufs):
    """Start `task(bufs)` on the inter-op pool; returns the handle to wait on."""
    i8p = ir.IntType(8).as_pointer()
    spawn = _declare(builder.module, TASK_SPAWN,
                     ir.FunctionType(i8p, [task.type, I8PP]))
    return builder.call(spawn, [task, bufs])


def emit_wait(builder: ir.IRBuilder, handle) -> None:
    """Wait for a spawned task (running it here if no thread has started it)."""
    wait = _declare(builder.module, TASK_WAIT,
                    ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()]))
    builder.call(wait, [handle])

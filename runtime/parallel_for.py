"""Emission of a parallel-for over one kernel, as LLVM IR (llvmlite)."""
from __future__ import annotations

from llvmlite import ir

from .pool_ir import KERNEL_PTR

I32, I64 = ir.IntType(32), ir.IntType(64)
I8PP = ir.IntType(8).as_pointer().as_pointer()

KERNEL_ABI = "void kernel(i64 start, i64 stop, i8** bufs)"
PARALLEL_FOR = "jc_parallel_for"       # void (kernel*, i64 extent, i64 grain, i8** bufs)


def kernel_type() -> ir.FunctionType:
    """The LLVM type of every kernel function (see KERNEL_ABI)."""
    return ir.FunctionType(ir.VoidType(), [I64, I64, I8PP])


def emit_parallel_for(builder: ir.IRBuilder, kernel: ir.Function, extent: int, bufs,
                      grain: int) -> None:
    """Run `kernel` over [0, extent) in chunks of at least `grain` iterations.

    Work that fits in one chunk is a direct call: no pool, no wake-up. Larger work goes to
    the runtime's `jc_parallel_for` (linked in from the runtime library).
    """
    if extent <= 0:
        return
    if extent <= grain:
        builder.call(kernel, [I64(0), I64(extent), bufs])
        return
    module = builder.module
    pfor = module.globals.get(PARALLEL_FOR) or ir.Function(
        module, ir.FunctionType(ir.VoidType(), [KERNEL_PTR, I64, I64, I8PP]), PARALLEL_FOR)
    builder.call(pfor, [kernel, I64(extent), I64(grain), bufs])

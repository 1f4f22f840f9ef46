"""Emission of a parallel-for over one kernel, as LLVM IR (llvmlite)."""
from __future__ import annotations

from llvmlite import ir

I64 = ir.IntType(64)
I8PP = ir.IntType(8).as_pointer().as_pointer()

KERNEL_ABI = "void kernel(i64 start, i64 stop, i8** bufs)"


def kernel_type() -> ir.FunctionType:
    """The LLVM type of every kernel function (see KERNEL_ABI)."""
    return ir.FunctionType(ir.VoidType(), [I64, I64, I8PP])


def emit_parallel_for(builder: ir.IRBuilder, kernel: ir.Function, extent: int, bufs) -> None:
    """Run `kernel` over [0, extent). Single-threaded for now: one call on this thread."""
    if extent > 0:
        builder.call(kernel, [I64(0), I64(extent), bufs])

"""The runtime: how a compiled graph's kernels are run over their iteration space.

It knows no tensors: a kernel is a function `void k(i64 start, i64 stop, i8** bufs)` that runs
iterations [start, stop) of its outermost loop, and the runtime decides how that range is run.
This version runs every kernel on the calling thread, in one call over its whole range; the
native thread pool (chunked parallel-for, fork/wait futures) plugs in at `emit_parallel_for`
without changing the kernel ABI or the compiled graph's entry point.
"""
from .parallel_for import KERNEL_ABI, emit_parallel_for, kernel_type

__all__ = ["KERNEL_ABI", "emit_parallel_for", "kernel_type"]

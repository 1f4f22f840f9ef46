"""The runtime: how a compiled graph's kernels run over their iteration space, on threads.

It knows no tensors: a kernel is a function `void k(i64 start, i64 stop, i8** bufs)` that runs
iterations [start, stop) of its outermost loop. `pool_ir` emits the process-wide intra-op
thread pool as LLVM IR (pthreads + futex, no C compiler), `parallel_for` emits the call that
hands a kernel to it, and `settings` holds the thread settings with PyTorch's semantics.
"""
from .parallel_for import (KERNEL_ABI, PARALLEL_FOR, TASK_SPAWN, TASK_WAIT, emit_parallel_for,
                           emit_spawn, emit_wait, kernel_type)
from .pool_ir import EXPORTS as POOL_EXPORTS
from .module_ir import build_pool_module
from .settings import ThreadSettings, usable_cores

__all__ = ["KERNEL_ABI", "PARALLEL_FOR", "TASK_SPAWN", "TASK_WAIT", "emit_parallel_for",
           "emit_spawn", "emit_wait", "kernel_type", "POOL_EXPORTS",
           "build_pool_module", "ThreadSettings", "usable_cores"]

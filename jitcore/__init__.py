"""jitcore: an LLVM JIT kernel generator for tensor graphs on the CPU.

    import jitcore as jc

    @jc.jit
    def f(a, b, c):
        return jc.relu(a * b + c) * 0.5

    y = f(a, b, c)                 # numpy arrays in, numpy arrays out
    print(f.explain(a, b, c))      # kernels, vectorization, bytes, flops, compile time
    print(f.llvm_ir(a, b, c))      # the optimized LLVM IR (f.asm for machine code)
"""
from . import source_layout  # noqa: F401 -- first: in a checkout, maps jitcore.ir/passes/runtime
from jitcore.ir.dtypes import bfloat16, bool_, float32, float64, int32, int64, uint8
from jitcore.ir.errors import (CompileError, DTypeError, JitcoreError, ShapeError, TargetError,
                               TraceError)

from .api import Graph, JitFunction, compile, jit
from .compiler import cache_info
from .ops.conv import batch_norm, conv1d, conv2d
from .ops.core import (astype, broadcast_to, expand_dims, layer_norm, log_softmax, reshape,
                       softmax, squeeze, transpose)
from .ops.join import arange, clip, concatenate, cumsum, pad, split, stack, take
from .ops.math import norm  # and implements the spelling table's numpy math rows
from .ops.pool import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from .ops.spellings import SPELLINGS as _SPELLINGS, implementation as _implementation
from . import eager  # noqa: F401 -- ops on plain arrays run jitted
from .futures import Future, fork, wait
from .parallel import (get_num_interop_threads, get_num_threads, parallel_info,
                       set_num_interop_threads, set_num_threads)
from .call.signature import Spec, spec
from .targetinfo import target_info
from . import threadpool_control
from .version import VERSION as __version__

bool = bool_  # noqa: A001 -- jc.bool, as numpy's np.bool
# every op of the spelling table under each of its names: jc.exp, jc.add, jc.divide,
# jc.arctan2, jc.sum, jc.amax, ... (jitcore/ops/spellings.py lists them)
globals().update({name: _implementation(row.name) for row in _SPELLINGS for name in row.names})
threadpool_control.install()      # threadpoolctl sees the intra-op pool (when it is used)

__all__ = [n for n in dir() if not n.startswith("_")]

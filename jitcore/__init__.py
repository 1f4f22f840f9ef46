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
from jitcore.ir.dtypes import bool_, float32, float64, int32, int64, uint8
from jitcore.ir.errors import (CompileError, DTypeError, JitcoreError, ShapeError, TargetError,
                               TraceError)

from .api import Graph, JitFunction, compile, jit
from .compiler import cache_info
from .conv_ops import batch_norm, conv1d, conv2d
from .ops import (abs, add, amax, amin, arctan, argmax, argmin, astype, bitwise_and,
                  bitwise_not, bitwise_or, bitwise_xor, broadcast_to, cbrt, ceil, copysign,
                  cos, cosh, div, divide, equal, erf, exp, exp2, expand_dims, expm1, floor,
                  floor_divide, gelu, greater, greater_equal, hardsigmoid, hardswish,
                  hardtanh, invert, layer_norm, leaky_relu, left_shift, less, less_equal, log,
                  log1p, log2, log10, log_softmax, logical_and, logical_not, logical_or,
                  matmul, max, maximum, mean, min, minimum, mod, mul, multiply, neg, negative,
                  not_equal, pow, power, prod, reciprocal, relu, relu6, remainder, reshape,
                  right_shift, rsqrt, sigmoid, silu, sin, sinh, softmax, sqrt, squeeze, sub,
                  subtract, sum, tanh, transpose, where)
from .join_ops import arange, clip, concatenate, cumsum, pad, split, stack, take
from .math_ops import (arccos, arccosh, arcsin, arcsinh, arctan2, arctanh, conj, deg2rad,
                       fmax, fmin, hypot, isfinite, isinf, isnan, logaddexp, nan_to_num,
                       norm, positive, rad2deg, real, rint, sign, signbit, square, std, trunc,
                       var)
from .pool_ops import adaptive_avg_pool2d, avg_pool2d, max_pool2d
from . import eager  # noqa: F401 -- ops on plain arrays run jitted
from .futures import Future, fork, wait
from .parallel import (get_num_interop_threads, get_num_threads, parallel_info,
                       set_num_interop_threads, set_num_threads)
from .call.signature import Spec, spec
from .targetinfo import target_info
from . import threadpool_control
from .version import VERSION as __version__

bool = bool_  # noqa: A001 -- jc.bool, as numpy's np.bool
threadpool_control.install()      # threadpoolctl sees the intra-op pool (when it is used)

__all__ = [n for n in dir() if not n.startswith("_")]

"""The systems the suite compares, and how a child process prepares one: import its modules
and size its thread pools before anything is timed, take its one-time setup out of the first
calls (a trivial compile), then build each workload's two calls.

`prepare(system, threads)` returns `calls(name, args, out)`: None where the system has no
implementation of the workload (n/a), else (natural, into): natural() returns a fresh output,
as users call it; into() writes into the preallocated `out` (compute only), or is None where
the system has no way to do that.
"""
from __future__ import annotations

import numpy as np

SYSTEMS = ("jitcore", "numpy", "numexpr", "numba", "torch", "torch.compile",
           "torch.compile-max-autotune", "jax", "onnxruntime", "openvino")
SYSTEM_MODULES = {"jitcore": "jitcore", "numpy": "numpy", "numexpr": "numexpr",
                  "numba": "numba", "torch": "torch", "torch.compile": "torch",
                  "torch.compile-max-autotune": "torch", "jax": "jax",
                  "onnxruntime": "onnxruntime", "openvino": "openvino"}
# what compute only means (or why it is n/a) per system, for the report
INTO_NOTES = {
    "jitcore": "out=", "numpy": "out= / in-place ufuncs", "numexpr": "evaluate(out=)",
    "numba": "kernel given the output", "torch": "out= of the last op (n/a where none)",
    "torch.compile": "compiled out.copy_(fn(...))",
    "torch.compile-max-autotune": "compiled out.copy_(fn(...)) (matmul rows only)",
    "jax": "n/a: immutable arrays, no out=",
    "onnxruntime": "n/a: the session returns its own output (CNN layer rows only)",
    "openvino": "n/a: the infer request returns its own output (CNN layer rows only)",
}
# how each torch.compile system compiles (recorded in the results' stamps)
COMPILE_SETTINGS = {
    "torch.compile": {"dynamic": False, "mode": "default",
                      "freezing": "conv rows (weights as constants) and models"},
    "torch.compile-max-autotune": {"dynamic": False, "mode": "max-autotune",
                                   "rows": "matmul rows (linear_gelu, mlp2, fork_wait, the "
                                           "bf16 GEMM rows) and models",
                                   "freezing": "models"}}
TINY = np.ones(8, np.float32)
# the data layout each system's convolutions compute in, for the report
CONV_LAYOUTS = {
    "jitcore": "NCHW in place (direct conv, no reorder; f.kernels() says layout NCHW)",
    "torch": "NCHW tensors; oneDNN reorders to its blocked nChw16c layout per call",
    "torch.compile": "an nn.Module with freezing=True: weights prepacked by oneDNN "
                     "(mkldnn blocked layout), batch norm folded",
    "jax": "lax.conv_general_dilated with NCHW/OIHW dimension numbers (XLA CPU picks its "
           "own internal layout)",
    "onnxruntime": "the layer exported to ONNX, weights folded at load; MLAS reorders NCHW "
                   "to its blocked layout at the graph's edges (per call for one layer)",
    "openvino": "ov.convert_model of the layer, weights folded at load; oneDNN's blocked "
                "layout, reordered at the graph's edges (per call for one layer)",
}


def _jitcore(threads: int):
    import inspect

    import jitcore as jc
    from .workloads import BY_NAME, JITCORE, WEIGHTS_AFTER_FIRST
    jc.set_num_threads(threads)
    jc.set_num_interop_threads(threads)        # fork/wait tasks get the cell's threads too
    jc.jit(lambda a: a + 1.0, num_threads=threads)(TINY)

    def calls(name, args, out):
        fn = JITCORE[name]
        opts = dict(num_threads=threads, matmul_precision=BY_NAME[name].precision)
        if name in WEIGHTS_AFTER_FIRST:       # weights bound as constants (prepacked, folded)
            params = list(inspect.signature(fn).parameters)
            f = jc.jit(fn, constants=dict(zip(params[1:], args[1:])), **opts)
            args = args[:1]
        else:
            f = jc.jit(fn, **opts)
        return (lambda: f(*args)), (lambda: f(*args, out=out))
    return calls


def _numpy(threads: int):
    from .peers_numpy import NUMPY

    def calls(name, args, out):
        fn = NUMPY.get(name)
        if fn is None:
            return None
        return (lambda: fn(*args)), (lambda: fn(*args, out=out))
    return calls


def _numexpr(threads: int):
    import numexpr
    from .peers_numpy import numexpr_calls
    numexpr.set_num_threads(threads)
    numexpr.evaluate("a + 1", local_dict={"a": TINY})
    return numexpr_calls


def _numba(threads: int):
    from . import peers_numba
    peers_numba.nb.set_num_threads(threads)
    peers_numba.warm_up(TINY.copy())           # threading layer up, with a kernel of its own
    return lambda name, args, out: peers_numba.numba_calls(name, args, out, threads)


def _torch(threads: int):
    from . import peers_torch
    peers_torch.setup(threads)
    return peers_torch.eager_calls


def _torch_compile(threads: int):
    import torch
    from . import peers_torch
    peers_torch.setup(threads)
    torch.compile(lambda a: a + 1, dynamic=False)(torch.from_numpy(TINY))
    return peers_torch.compiled_calls


def _torch_compile_max_autotune(threads: int):
    import torch
    from . import peers_torch
    peers_torch.setup(threads)
    torch.compile(lambda a: a + 1, dynamic=False)(torch.from_numpy(TINY))
    return peers_torch.max_autotune_calls


def _jax(threads: int):
    import jax
    from . import peers_jax
    peers_jax.setup(threads)
    jax.jit(lambda a: a + 1)(TINY).block_until_ready()
    return peers_jax.jax_calls


def _onnxruntime(threads: int):
    from . import peers_runtimes
    return peers_runtimes.onnxruntime_calls(threads)


def _openvino(threads: int):
    from . import peers_runtimes
    return peers_runtimes.openvino_calls(threads)


PREPARE = {"jitcore": _jitcore, "numpy": _numpy, "numexpr": _numexpr, "numba": _numba,
           "torch": _torch, "torch.compile": _torch_compile,
           "torch.compile-max-autotune": _torch_compile_max_autotune, "jax": _jax,
           "onnxruntime": _onnxruntime, "openvino": _openvino}


def prepare(system: str, threads: int):
    return PREPARE[system](threads)

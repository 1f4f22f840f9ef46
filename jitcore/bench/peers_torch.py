"""torch eager and torch.compile as a competent user writes them. Imported only in the torch
children (and by examples/gemm_bench.py): torch loads at import.

Eager: fused library calls and in-place ops where natural (`addcmul(c, a, b).relu_().mul_(0.5)`),
a bool mask prepared once; the child runs every call under one `torch.inference_mode()`
(no per-call grad-mode context). Compute only: the public `out=` of the last op where torch
has one (n/a where it has none: gelu, layer_norm). torch.compile (dynamic=False) compiles the
eager function; compute only compiles `out.copy_(fn(...))`, which inductor turns into
kernels that store into `out`. torch.compile-max-autotune compiles the matmul rows the same
way with mode="max-autotune" (Inductor times its C++ GEMM templates against ATen's while
compiling).

bf16 rows (workloads.BF16_GEMMS): the weight converted to torch.bfloat16 once, each call
`(x.bfloat16() @ W).float()` (oneDNN's bf16 GEMM, float32 accumulation; the float32 result
as jitcore returns it); torch.compile compiles the same function.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


def t_chain(a, b, c, out=None):
    return torch.addcmul(c, a, b, out=out).relu_().mul_(0.5)


def t_triad(a, b, c, out=None):
    return torch.addcmul(c, a, b, out=out)


def t_gelu(x):
    return F.gelu(x, approximate="tanh")


def t_softmax(x, out=None):
    return torch.softmax(x, -1, out=out) if out is not None else torch.softmax(x, -1)


def t_layer_norm(x, w, b):
    return F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)


def t_row_sum(x, out=None):
    return torch.sum(x, dim=1, out=out) if out is not None else x.sum(dim=1)


def t_col_sum(x, out=None):
    return torch.sum(x, dim=0, out=out) if out is not None else x.sum(dim=0)


def t_broadcast3(a, b, c, out=None):
    return torch.add(c, a, out=out).add_(b) if out is not None else torch.add(c, a).add_(b)


def t_transpose_add(a, b, out=None):
    return torch.add(a, b.T, out=out) if out is not None else a + b.T


def t_masked_max(m, x, out=None):
    masked = torch.where(m, x, NEG_INF)
    return torch.amax(masked, dim=1, out=out) if out is not None else masked.amax(dim=1)


def t_linear_gelu(x, W, b):
    return F.gelu(torch.addmm(b, x, W), approximate="tanh")


def t_mlp(x, W1, b1, W2, b2, out=None):
    h = F.gelu(torch.addmm(b1, x, W1), approximate="tanh")
    return torch.addmm(b2, h, W2, out=out) if out is not None else torch.addmm(b2, h, W2)


def t_fork_wait_eager(x, w_y, w_z):
    """fork_wait as plain ops, for torch.compile (the TorchScript fork is for eager)."""
    return torch.mm(x, w_y).add_(torch.tanh(torch.mm(x, w_z)).mul_(0.5))


def t_max_pool(x):
    return torch.nn.functional.max_pool2d(x, 3, 2, 1)


def t_avg_pool(x):
    return torch.nn.functional.avg_pool2d(x, 2)


def t_global_pool(x):
    return torch.nn.functional.adaptive_avg_pool2d(x, 1)
def t_conv3x3(x, w):
    return F.conv2d(x, w, padding=1)


def t_conv1x1(x, w):
    return F.conv2d(x, w)


def t_conv7x7s2(x, w):
    return F.conv2d(x, w, stride=2, padding=3)


def t_dwconv3x3(x, w):
    return F.conv2d(x, w, padding=1, groups=x.shape[1])


def t_conv_bn_relu(x, w, mean, var, gamma, beta):
    y = F.batch_norm(F.conv2d(x, w, padding=1), mean, var, gamma, beta, False, 0.0, 1e-5)
    return y.relu_()


def t_resblock(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
    y = F.batch_norm(F.conv2d(x, w1, padding=1), m1, v1, g1, b1, False, 0.0, 1e-5).relu_()
    y = F.batch_norm(F.conv2d(y, w2, padding=1), m2, v2, g2, b2, False, 0.0, 1e-5)
    return y.add_(x).relu_()


CONV = {"conv3x3_64": t_conv3x3, "conv1x1_64_256": t_conv1x1, "conv3x3_256": t_conv3x3,
        "conv7x7s2_stem": t_conv7x7s2, "dwconv3x3_96": t_dwconv3x3,
        "conv_bn_relu": t_conv_bn_relu, "resblock": t_resblock}


class WeightsModule(torch.nn.Module):
    """fn(x, *weights) with the weights as parameters, so that torch.compile's freezing
    (torch._inductor.config.freezing = True) treats them as constants: it prepacks conv
    weights for oneDNN and folds batch norms, as jitcore's constants= does."""

    def __init__(self, fn, weights):
        super().__init__()
        self.fn = fn
        self.weights = torch.nn.ParameterList(
            [torch.nn.Parameter(w, requires_grad=False) for w in weights])

    def forward(self, x):
        return self.fn(x, *self.weights)


EAGER = {"chain": t_chain, "gelu_tanh": t_gelu, "dispatch_1024": t_triad,
         "softmax": t_softmax, "layer_norm": t_layer_norm, "row_sum": t_row_sum,
         "col_sum": t_col_sum, "broadcast3": t_broadcast3, "transpose_add": t_transpose_add,
         "masked_row_max": t_masked_max, "masked_row_max_causal": t_masked_max,
         "linear_gelu": t_linear_gelu, "mlp2": t_mlp, "max_pool_3x3s2": t_max_pool,
         "avg_pool_2x2": t_avg_pool, "global_avg_pool": t_global_pool,
         "global_avg_pool_b8": t_global_pool, **CONV}
HAS_OUT = {"chain", "dispatch_1024", "softmax", "row_sum", "col_sum", "broadcast3",
           "transpose_add", "masked_row_max", "masked_row_max_causal", "mlp2"}


@torch.jit.script
def _compute_z(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(torch.mm(x, w)) * 0.5


@torch.jit.script
def t_fork_wait(x: torch.Tensor, w_y: torch.Tensor, w_z: torch.Tensor) -> torch.Tensor:
    """The threading note's example as the note writes it: torch.jit.fork on the inter-op
    pool (sized to the cell's thread count, like jitcore's)."""
    fut = torch.jit.fork(_compute_z, x, w_z)
    y = torch.mm(x, w_y)
    return y + torch.jit.wait(fut)


def setup(threads: int):
    """Thread pools sized before any parallel work; one inference_mode for the whole child."""
    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)
    # one copy_ wrapper serves every workload: each is a recompile of the same code object,
    # and past dynamo's default limit of 8 the rest would silently run eagerly
    torch._dynamo.config.recompile_limit = 64
    mode = torch.inference_mode()
    mode.__enter__()
    return mode


def t_bf16_matmul(x, w_bf16):
    return torch.matmul(x.bfloat16(), w_bf16).float()


BF16 = dict.fromkeys(("bf16_gemm_512x1024x4096", "bf16_bert_qkv", "bf16_bert_ffn_up",
                      "bf16_bert_ffn_down"), t_bf16_matmul)


def _tensors(args: tuple, name: str = "") -> list:
    """The arguments as tensors (a bf16 row's weight converted to bfloat16, once)."""
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
    if name in BF16:
        tensors[1:] = [t.bfloat16() for t in tensors[1:]]
    return tensors


def eager_calls(name: str, args: tuple, out: np.ndarray):
    targs, tout = _tensors(args, name), torch.from_numpy(out)
    if name == "fork_wait":
        return lambda: t_fork_wait(*targs), None
    fn = EAGER.get(name) or BF16.get(name)
    if fn is None:
        return None
    into = (lambda: fn(*targs, out=tout)) if name in HAS_OUT else None
    return (lambda: fn(*targs)), into


def _copy_into(fn):
    def into(*args):
        return args[-1].copy_(fn(*args[:-1]))
    return into


def compiled_calls(name: str, args: tuple, out: np.ndarray, mode: str = "default"):
    targs, tout = _tensors(args, name), torch.from_numpy(out)
    if name in CONV:
        import torch._inductor.config as inductor_config
        inductor_config.freezing = True
        module = WeightsModule(CONV[name], targs[1:]).eval()
        natural = torch.compile(module, dynamic=False)
        x = targs[0]
        return (lambda: natural(x)), (lambda: tout.copy_(natural(x)))
    fn = t_fork_wait_eager if name == "fork_wait" else EAGER.get(name) or BF16.get(name)
    if fn is None:
        return None
    natural = torch.compile(fn, dynamic=False, mode=mode)
    into = torch.compile(_copy_into(fn), dynamic=False, mode=mode)
    return (lambda: natural(*targs)), (lambda: into(*targs, tout))


def max_autotune_calls(name: str, args: tuple, out: np.ndarray):
    """torch.compile(mode="max-autotune") on the matmul rows (Inductor benchmarks its GEMM
    templates against ATen's at compile time); n/a elsewhere."""
    from .workloads import BY_NAME
    if not BY_NAME[name].gemm or name in CONV:
        return None
    return compiled_calls(name, args, out, mode="max-autotune")

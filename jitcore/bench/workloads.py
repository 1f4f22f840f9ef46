"""The named benchmark suite: each workload's sizes, inputs, float64 reference, traffic and
flops, and jitcore's function for it. The peers' implementations live in one module per
system (peers_numpy.py, peers_numba.py, peers_torch.py, peers_jax.py), chosen in systems.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jitcore as jc

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
F32 = np.float32


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    shapes: Callable[[bool], dict]       # tiny -> named sizes
    inputs: Callable[[dict, np.random.Generator], tuple]
    reference: Callable                  # float64 numpy on float64 copies of the inputs
    nbytes: Callable[[dict], int]        # bytes read + written (inputs once, fresh output)
    flops: Callable[[dict], int] | None = None
    rtol: float = 1e-4
    atol: float = 1e-4
    unit: str = "ms"                     # how the table shows times ("us" for dispatch)
    gemm: bool = False                   # matmul-bound: the table shows GFLOP/s and % of peak


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=F32)


def gelu_tanh64(x):
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def _softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm64(x, w, b, eps=1e-5):
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * w + b


def _masked_max64(m, x):
    return np.where(m, x, -np.inf).max(axis=1)


# ---- jitcore's functions ----------------------------------------------------------------------
def jc_chain(a, b, c):
    return jc.relu(a * b + c) * 0.5


def jc_triad(a, b, c):
    return a * b + c


def jc_gelu(x):
    return jc.gelu(x, approximate="tanh")


def jc_softmax(x):
    return jc.softmax(x, axis=-1)


def jc_layer_norm(x, w, b):
    return jc.layer_norm(x, w, b, eps=1e-5)


def jc_row_sum(x):
    return x.sum(axis=1)


def jc_col_sum(x):
    return x.sum(axis=0)


def jc_broadcast3(a, b, c):
    return a + b + c


def jc_transpose_add(a, b):
    return a + b.T


def jc_masked_max(m, x):
    return jc.where(m, x, -np.inf).max(axis=1)


def jc_linear_gelu(x, W, b):
    return jc.gelu(x @ W + b, approximate="tanh")


def jc_mlp(x, W1, b1, W2, b2):
    return jc.gelu(x @ W1 + b1, approximate="tanh") @ W2 + b2


def _compute_z(x, w):
    return jc.tanh(x @ w) * 0.5


def jc_fork_wait(x, w_y, w_z):
    """PyTorch's threading note example: compute_z forked while y = x @ w_y runs."""
    fut = jc.fork(_compute_z, x, w_z)
    y = x @ w_y
    return y + jc.wait(fut)


def jc_max_pool(x):
    return jc.max_pool2d(x, 3, 2, 1)


def jc_avg_pool(x):
    return jc.avg_pool2d(x, 2)


def jc_global_pool(x):
    return jc.adaptive_avg_pool2d(x, 1)


def pool64(x, kind: str, k: int, s: int, p: int):
    """Pooling of an (N, C, H, W) float64 array by strided windows (reference)."""
    pad = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=pad)
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::s, ::s]
    return win.max(axis=(4, 5)) if kind == "max" else win.mean(axis=(4, 5))


JITCORE = {"chain": jc_chain, "gelu_tanh": jc_gelu, "dispatch_1024": jc_triad,
           "softmax": jc_softmax, "layer_norm": jc_layer_norm, "row_sum": jc_row_sum,
           "col_sum": jc_col_sum, "broadcast3": jc_broadcast3,
           "transpose_add": jc_transpose_add, "masked_row_max": jc_masked_max,
           "masked_row_max_causal": jc_masked_max, "linear_gelu": jc_linear_gelu,
           "mlp2": jc_mlp, "fork_wait": jc_fork_wait, "max_pool_3x3s2": jc_max_pool,
           "avg_pool_2x2": jc_avg_pool, "global_avg_pool": jc_global_pool,
           "global_avg_pool_b8": jc_global_pool}


# ---- the suite --------------------------------------------------------------------------------
def _n(full: int, tiny: int):
    return lambda tiny_mode: {"n": tiny if tiny_mode else full}


def _rc(rows: int, cols: int, tiny_rows: int, tiny_cols: int):
    return lambda tiny_mode: ({"r": tiny_rows, "c": tiny_cols} if tiny_mode
                              else {"r": rows, "c": cols})


def _bytes_rc(arrays_in: int, out_cols=None):
    def count(s):
        out = s["r"] * (s["c"] if out_cols is None else out_cols(s))
        return 4 * (arrays_in * s["r"] * s["c"] + out)
    return count


def _mm_flops(*dims):
    return lambda s: sum(2 * s[a] * s[b] * s[c] for a, b, c in dims)


def _nchw(n, c, hw, tiny_c):
    return lambda tiny_mode: {"n": n, "c": tiny_c if tiny_mode else c, "h": hw}


def _pool_bytes(out_hw):
    return lambda s: 4 * s["n"] * s["c"] * (s["h"] ** 2 + out_hw(s["h"]) ** 2)


def _pool_flops(out_hw, taps):
    return lambda s: s["n"] * s["c"] * out_hw(s["h"]) ** 2 * taps(s["h"])


def _image(s, rng):
    return (randn(rng, s["n"], s["c"], s["h"], s["h"]),)


def _three(s, rng):
    return randn(rng, s["n"]), randn(rng, s["n"]), randn(rng, s["n"])


def _random_mask(s, rng):
    return rng.random((s["r"], s["c"])) < 0.5, randn(rng, s["r"], s["c"])


def _causal_mask(s, rng):
    """Row i sees columns 0..i (scaled to the width): attention's causal mask."""
    rows = np.arange(s["r"])[:, None] * s["c"] // s["r"]
    return np.arange(s["c"])[None, :] <= rows, randn(rng, s["r"], s["c"])


SUITE = [
    Workload("chain", "relu(a*b+c)*0.5, 16M float32", _n(1 << 24, 4096), _three,
             lambda a, b, c: np.maximum(a * b + c, 0) * 0.5, lambda s: 16 * s["n"]),
    Workload("gelu_tanh", "gelu (tanh form), 16M float32", _n(1 << 24, 4096),
             lambda s, rng: (randn(rng, s["n"]),), gelu_tanh64, lambda s: 8 * s["n"],
             lambda s: 9 * s["n"]),
    Workload("dispatch_1024", "a*b+c on 1024 float32: per-call overhead", _n(1024, 1024),
             _three, lambda a, b, c: a * b + c, lambda s: 16 * s["n"], unit="us"),
    Workload("softmax", "softmax over rows, 4096x1024", _rc(4096, 1024, 64, 1024),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), _softmax64, _bytes_rc(1)),
    Workload("layer_norm", "layer_norm over rows, 8192x768", _rc(8192, 768, 64, 768),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"]),
                             randn(rng, s["c"])),
             _layer_norm64, _bytes_rc(1)),
    Workload("row_sum", "sum over rows, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=1),
             _bytes_rc(1, lambda s: 1), rtol=1e-4, atol=1e-3),
    Workload("col_sum", "sum over columns, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=0),
             lambda s: 4 * (s["r"] * s["c"] + s["c"]), rtol=1e-4, atol=1e-3),
    Workload("broadcast3", "a[N,1] + b[1,M] + c[N,M], 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], 1), randn(rng, 1, s["c"]),
                             randn(rng, s["r"], s["c"])),
             lambda a, b, c: a + b + c, _bytes_rc(1)),
    Workload("transpose_add", "a + b.T, 4096x4096", _rc(4096, 4096, 64, 64),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"], s["r"])),
             lambda a, b: a + b.T, _bytes_rc(2)),
    Workload("masked_row_max", "where(mask, x, -inf).max(axis=1), random 50% bool mask, "
             "2048x2047", _rc(2048, 2047, 64, 2047), _random_mask, _masked_max64,
             lambda s: 5 * s["r"] * s["c"] + 4 * s["r"]),
    Workload("masked_row_max_causal", "the same with a causal (lower-triangular) bool mask",
             _rc(2048, 2047, 64, 2047), _causal_mask, _masked_max64,
             lambda s: 5 * s["r"] * s["c"] + 4 * s["r"]),
    Workload("linear_gelu", "gelu(x @ W + b), 512x1024 @ 1024x4096",
             lambda t: {"m": 32 if t else 512, "k": 64 if t else 1024, "n": 128 if t else 4096},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["n"])),
             lambda x, W, b: gelu_tanh64(x @ W + b),
             lambda s: 4 * (s["m"] * s["k"] + s["k"] * s["n"] + s["n"] + s["m"] * s["n"]),
             _mm_flops(("m", "k", "n")), rtol=1e-3, atol=1e-3, gemm=True),
    Workload("mlp2", "2-layer MLP 256x1024 @ 1024x4096 @ 4096x1024",
             lambda t: {"m": 16 if t else 256, "k": 64 if t else 1024, "h": 128 if t else 4096,
                        "n": 64 if t else 1024},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["h"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["h"]),
                             randn(rng, s["h"], s["n"]) * F32(1 / math.sqrt(s["h"])),
                             randn(rng, s["n"])),
             lambda x, W1, b1, W2, b2: gelu_tanh64(x @ W1 + b1) @ W2 + b2,
             lambda s: 4 * (s["m"] * s["k"] + s["k"] * s["h"] + s["h"] * s["n"]
                            + s["m"] * s["n"]),
             _mm_flops(("m", "k", "h"), ("m", "h", "n")), rtol=1e-3, atol=1e-3, gemm=True),
    Workload("fork_wait", "x @ w_y + tanh(x @ w_z) * 0.5, the second matmul forked "
             "(inter-op threads = the cell's thread count)",
             lambda t: {"m": 32 if t else 512, "k": 64 if t else 1024, "n": 64 if t else 1024},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"]))),
             lambda x, w_y, w_z: x @ w_y + np.tanh(x @ w_z) * 0.5,
             lambda s: 4 * (s["m"] * s["k"] + 2 * s["k"] * s["n"] + s["m"] * s["n"]),
             _mm_flops(("m", "k", "n"), ("m", "k", "n")), rtol=1e-3, atol=1e-3, gemm=True),
    Workload("max_pool_3x3s2", "max_pool2d 3x3 stride 2 pad 1, (1, 64, 112, 112) (ResNet stem)",
             _nchw(1, 64, 112, 4), _image, lambda x: pool64(x, "max", 3, 2, 1),
             _pool_bytes(lambda h: h // 2), _pool_flops(lambda h: h // 2, lambda h: 9),
             unit="us"),
    Workload("avg_pool_2x2", "avg_pool2d 2x2, (1, 256, 56, 56)", _nchw(1, 256, 56, 4), _image,
             lambda x: pool64(x, "avg", 2, 2, 0), _pool_bytes(lambda h: h // 2),
             _pool_flops(lambda h: h // 2, lambda h: 4), unit="us"),
    Workload("global_avg_pool", "adaptive_avg_pool2d(1), (1, 512, 7, 7)", _nchw(1, 512, 7, 4),
             _image, lambda x: x.mean(axis=(2, 3), keepdims=True), _pool_bytes(lambda h: 1),
             _pool_flops(lambda h: 1, lambda h: h * h), unit="us"),
    Workload("global_avg_pool_b8", "adaptive_avg_pool2d(1), (8, 2048, 7, 7)",
             _nchw(8, 2048, 7, 4), _image, lambda x: x.mean(axis=(2, 3), keepdims=True),
             _pool_bytes(lambda h: 1), _pool_flops(lambda h: 1, lambda h: h * h), unit="us"),
]

BY_NAME = {w.name: w for w in SUITE}

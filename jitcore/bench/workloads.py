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
    precision: str = "fp32"              # jitcore's matmul_precision; "bf16": % of the bf16 peak
    memory_bound: bool = False           # bandwidth-bound: GB/s and % of copy (roofline.py)


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
# ---- convolutions (batch 1, ResNet-50 / MobileNet shapes) ---------------------------------------
def jc_conv3x3(x, w):
    return jc.conv2d(x, w, padding=1)


def jc_conv1x1(x, w):
    return jc.conv2d(x, w)


def jc_conv7x7s2(x, w):
    return jc.conv2d(x, w, stride=2, padding=3)


def jc_dwconv3x3(x, w):
    return jc.conv2d(x, w, padding=1, groups=x.shape[1])


def jc_conv_bn_relu(x, w, mean, var, gamma, beta):
    return jc.relu(jc.batch_norm(jc.conv2d(x, w, padding=1), mean, var, gamma, beta))


def jc_resblock(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
    y = jc.relu(jc.batch_norm(jc.conv2d(x, w1, padding=1), m1, v1, g1, b1))
    return jc.relu(jc.batch_norm(jc.conv2d(y, w2, padding=1), m2, v2, g2, b2) + x)


def jc_matmul(x, W):
    return x @ W


JITCORE = {"chain": jc_chain, "gelu_tanh": jc_gelu, "dispatch_1024": jc_triad,
           "softmax": jc_softmax, "layer_norm": jc_layer_norm, "row_sum": jc_row_sum,
           "col_sum": jc_col_sum, "broadcast3": jc_broadcast3,
           "transpose_add": jc_transpose_add, "masked_row_max": jc_masked_max,
           "masked_row_max_causal": jc_masked_max, "linear_gelu": jc_linear_gelu,
           "mlp2": jc_mlp, "fork_wait": jc_fork_wait, "max_pool_3x3s2": jc_max_pool,
           "avg_pool_2x2": jc_avg_pool, "global_avg_pool": jc_global_pool,
           "global_avg_pool_b8": jc_global_pool, "conv3x3_64": jc_conv3x3,
           "conv1x1_64_256": jc_conv1x1, "conv3x3_256": jc_conv3x3,
           "conv7x7s2_stem": jc_conv7x7s2, "dwconv3x3_96": jc_dwconv3x3,
           "conv_bn_relu": jc_conv_bn_relu, "resblock": jc_resblock}
# workloads whose arguments after the first are weights: every system gets them as constants
# (jitcore: jit(constants=...), prepacked, batch norm folded; torch.compile: module parameters
# with freezing; eager torch and JAX: arguments as usual)
WEIGHTS_AFTER_FIRST = {"conv3x3_64", "conv1x1_64_256", "conv3x3_256", "conv7x7s2_stem",
                       "dwconv3x3_96", "conv_bn_relu", "resblock"}
# bf16 matmul rows (x @ W, W a weight): name -> (M, K, N, tiny M, K, N)
BF16_GEMMS = {"bf16_gemm_512x1024x4096": (512, 1024, 4096, 32, 64, 128),
              "bf16_bert_qkv": (128, 768, 768, 16, 64, 64),
              "bf16_bert_ffn_up": (128, 768, 3072, 16, 64, 128),
              "bf16_bert_ffn_down": (128, 3072, 768, 16, 128, 64)}
JITCORE.update(dict.fromkeys(BF16_GEMMS, jc_matmul))
WEIGHTS_AFTER_FIRST |= set(BF16_GEMMS)


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
             lambda a, b, c: np.maximum(a * b + c, 0) * 0.5, lambda s: 16 * s["n"],
             memory_bound=True),
    Workload("gelu_tanh", "gelu (tanh form), 16M float32", _n(1 << 24, 4096),
             lambda s, rng: (randn(rng, s["n"]),), gelu_tanh64, lambda s: 8 * s["n"],
             lambda s: 9 * s["n"]),
    Workload("dispatch_1024", "a*b+c on 1024 float32: per-call overhead", _n(1024, 1024),
             _three, lambda a, b, c: a * b + c, lambda s: 16 * s["n"], unit="us"),
    Workload("softmax", "softmax over rows, 4096x1024", _rc(4096, 1024, 64, 1024),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), _softmax64, _bytes_rc(1),
             memory_bound=True),
    Workload("layer_norm", "layer_norm over rows, 8192x768", _rc(8192, 768, 64, 768),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"]),
                             randn(rng, s["c"])),
             _layer_norm64, _bytes_rc(1), memory_bound=True),
    Workload("row_sum", "sum over rows, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=1),
             _bytes_rc(1, lambda s: 1), rtol=1e-4, atol=1e-3, memory_bound=True),
    Workload("col_sum", "sum over columns, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=0),
             lambda s: 4 * (s["r"] * s["c"] + s["c"]), rtol=1e-4, atol=1e-3, memory_bound=True),
    Workload("broadcast3", "a[N,1] + b[1,M] + c[N,M], 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], 1), randn(rng, 1, s["c"]),
                             randn(rng, s["r"], s["c"])),
             lambda a, b, c: a + b + c, _bytes_rc(1), memory_bound=True),
    Workload("transpose_add", "a + b.T, 4096x4096", _rc(4096, 4096, 64, 64),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"], s["r"])),
             lambda a, b: a + b.T, _bytes_rc(2), memory_bound=True),
    Workload("masked_row_max", "where(mask, x, -inf).max(axis=1), random 50% bool mask, "
             "2048x2047", _rc(2048, 2047, 64, 2047), _random_mask, _masked_max64,
             lambda s: 5 * s["r"] * s["c"] + 4 * s["r"], memory_bound=True),
    Workload("masked_row_max_causal", "the same with a causal (lower-triangular) bool mask",
             _rc(2048, 2047, 64, 2047), _causal_mask, _masked_max64,
             lambda s: 5 * s["r"] * s["c"] + 4 * s["r"], memory_bound=True),
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


# ---- convolution workloads --------------------------------------------------------------------
def conv2d64(x, w, stride=1, padding=0, groups=1):
    """A direct float64 NCHW convolution (torch.nn.functional.conv2d semantics)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i:i + stride * (oh - 1) + 1:stride,
                           j:j + stride * (ow - 1) + 1:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                         w[g * og:(g + 1) * og, :, i, j])
    return out


def batch_norm64(x, mean, var, gamma, beta, eps=1e-5):
    def ch(a):
        return a.reshape(1, -1, 1, 1)
    return (x - ch(mean)) / np.sqrt(ch(var) + eps) * ch(gamma) + ch(beta)


def _conv_shapes(c, o, hw, k, tiny_c, tiny_o, tiny_hw):
    return lambda t: ({"c": tiny_c, "o": tiny_o, "hw": tiny_hw, "k": k} if t
                      else {"c": c, "o": o, "hw": hw, "k": k})


def _conv_inputs(groups=False):
    def make(s, rng):
        fan_in = (1 if groups else s["c"]) * s["k"] ** 2
        w = randn(rng, s["o"], 1 if groups else s["c"], s["k"], s["k"]) * F32(
            1 / math.sqrt(fan_in))
        return randn(rng, 1, s["c"], s["hw"], s["hw"]), w
    return make


def _bn_arrays(rng, c):
    return (randn(rng, c) * F32(0.1), (rng.random(c, dtype=F32) + F32(0.5)),
            randn(rng, c) * F32(0.5) + F32(1), randn(rng, c) * F32(0.1))


def _conv_bn_inputs(s, rng):
    x, w = _conv_inputs()(s, rng)
    return (x, w) + _bn_arrays(rng, s["o"])


def _resblock_inputs(s, rng):
    x, w1 = _conv_inputs()(s, rng)
    w2 = randn(rng, s["o"], s["o"], 3, 3) * F32(1 / math.sqrt(9 * s["o"]))
    return (x, w1) + _bn_arrays(rng, s["o"]) + (w2,) + _bn_arrays(rng, s["o"])


def _conv_flops(stride=1, groups=False, convs=1):
    def count(s):
        out = -(-s["hw"] // stride)
        per_out = 2 * (1 if groups else s["c"]) * s["k"] ** 2
        return convs * s["o"] * out * out * per_out
    return count


def _conv_bytes(stride=1, groups=False):
    def count(s):
        out = -(-s["hw"] // stride)
        weights = s["o"] * (1 if groups else s["c"]) * s["k"] ** 2
        return 4 * (s["c"] * s["hw"] ** 2 + weights + s["o"] * out * out)
    return count


def _resblock64(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
    y = np.maximum(batch_norm64(conv2d64(x, w1, padding=1), m1, v1, g1, b1), 0)
    return np.maximum(batch_norm64(conv2d64(y, w2, padding=1), m2, v2, g2, b2) + x, 0)


CONV_TOL = dict(rtol=1e-3, atol=1e-3, gemm=True)
SUITE += [
    Workload("conv3x3_64", "conv 3x3 64->64 at 56x56, pad 1 (ResNet-50 layer1)",
             _conv_shapes(64, 64, 56, 3, 8, 8, 12), _conv_inputs(),
             lambda x, w: conv2d64(x, w, padding=1), _conv_bytes(), _conv_flops(), **CONV_TOL),
    Workload("conv1x1_64_256", "conv 1x1 64->256 at 56x56 (ResNet-50 layer1)",
             _conv_shapes(64, 256, 56, 1, 8, 16, 12), _conv_inputs(),
             lambda x, w: conv2d64(x, w), _conv_bytes(), _conv_flops(), **CONV_TOL),
    Workload("conv3x3_256", "conv 3x3 256->256 at 14x14, pad 1 (ResNet-50 layer3)",
             _conv_shapes(256, 256, 14, 3, 16, 16, 7), _conv_inputs(),
             lambda x, w: conv2d64(x, w, padding=1), _conv_bytes(), _conv_flops(), **CONV_TOL),
    Workload("conv7x7s2_stem", "conv 7x7 stride 2 3->64 at 224x224, pad 3 (ResNet stem)",
             _conv_shapes(3, 64, 224, 7, 3, 8, 20), _conv_inputs(),
             lambda x, w: conv2d64(x, w, stride=2, padding=3), _conv_bytes(2),
             _conv_flops(2), **CONV_TOL),
    Workload("dwconv3x3_96", "depthwise conv 3x3, 96 channels at 112x112, pad 1",
             _conv_shapes(96, 96, 112, 3, 8, 8, 12), _conv_inputs(groups=True),
             lambda x, w: conv2d64(x, w, padding=1, groups=x.shape[1]),
             _conv_bytes(groups=True), _conv_flops(groups=True), **CONV_TOL),
    Workload("conv_bn_relu", "relu(batch_norm(conv 3x3 64->64 at 56x56)), constants folded",
             _conv_shapes(64, 64, 56, 3, 8, 8, 12), _conv_bn_inputs,
             lambda x, w, m, v, g, b: np.maximum(batch_norm64(conv2d64(x, w, padding=1),
                                                              m, v, g, b), 0),
             _conv_bytes(), _conv_flops(), **CONV_TOL),
    Workload("resblock", "ResNet basic block 64ch 56x56: conv-bn-relu-conv-bn + x, relu",
             _conv_shapes(64, 64, 56, 3, 8, 8, 12), _resblock_inputs, _resblock64,
             _conv_bytes(), _conv_flops(convs=2), **CONV_TOL),
]



def _bf16_gemm(name: str, title: str) -> Workload:
    """x @ W under matmul_precision="bf16": jitcore's vdpbf16ps GEMM (W prepacked as bf16
    pairs), torch on bf16 tensors (W converted once), numpy's float32 matmul as the base.
    Tolerance: bf16 operands (unit roundoff 2^-8 each) on a product of standard deviation ~1."""
    m, k, n, tm, tk, tn = BF16_GEMMS[name]
    return Workload(name, f"{title}: x @ W, {m}x{k} @ {k}x{n}, bf16 operands, fp32 accumulation",
                    lambda t: {"m": tm if t else m, "k": tk if t else k, "n": tn if t else n},
                    lambda s, rng: (randn(rng, s["m"], s["k"]),
                                    randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"]))),
                    lambda x, W: x @ W,
                    lambda s: 4 * (s["m"] * s["k"] + s["m"] * s["n"]) + 2 * s["k"] * s["n"],
                    _mm_flops(("m", "k", "n")), rtol=3e-2, atol=3e-2, gemm=True,
                    precision="bf16")


SUITE += [_bf16_gemm("bf16_gemm_512x1024x4096", "bf16 GEMM"),
          _bf16_gemm("bf16_bert_qkv", "bf16 BERT-base attention projection"),
          _bf16_gemm("bf16_bert_ffn_up", "bf16 BERT-base FFN up"),
          _bf16_gemm("bf16_bert_ffn_down", "bf16 BERT-base FFN down")]

BY_NAME = {w.name: w for w in SUITE}

"""The named benchmark suite: each workload's inputs, float64 reference, traffic and flops,
and its implementation per system (jitcore, numpy, numexpr, numba, torch, torch.compile).

Implementations are built lazily inside the child process that runs one system, so a peer
that is not installed costs nothing and is reported as missing. A workload without an
implementation for a system is "not applicable" there (numexpr has no matmul, for example).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
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
    builders: dict = field(default_factory=dict)    # system -> (sizes, inputs) -> callable
    unit: str = "ms"                     # how the table shows times ("us" for dispatch)


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=F32)


def _gelu_tanh64(x):
    return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def _softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layer_norm64(x, w, b, eps=1e-5):
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * w + b


# ---- per-system implementations -------------------------------------------------------------
# each builder takes (sizes, inputs, threads) and returns a zero-argument callable: one call

def _jc(fn):
    def build(sizes, args, threads):
        f = jc.jit(fn, num_threads=threads)
        return lambda: f(*args)
    return build


def _np(fn):
    return lambda sizes, args, threads: (lambda: fn(*args))


def _ne(expr: str, names: str, **consts):
    def build(sizes, args, threads):
        import numexpr
        numexpr.set_num_threads(threads)
        local = {**{k: F32(v) for k, v in consts.items()}, **dict(zip(names.split(), args))}
        return lambda: numexpr.evaluate(expr, local_dict=local)
    return build


def _torch(fn, compiled: bool):
    def build(sizes, args, threads):
        import torch
        torch.set_num_threads(threads)
        targs = [torch.from_numpy(np.ascontiguousarray(a)) for a in args]
        f = torch.compile(fn, dynamic=False) if compiled else fn

        def call():
            with torch.no_grad():
                return f(*targs)
        return call
    return build


def _both_torch(fn) -> dict:
    return {"torch": _torch(fn, False), "torch.compile": _torch(fn, True)}


def _numba(make):
    """`make(numba)` returns a jitted function of the inputs."""
    def build(sizes, args, threads):
        import numba
        numba.set_num_threads(threads)
        f = make(numba)
        return lambda: f(*args)
    return build


# numba kernels: parallel loops over rows / elements (prange), as a numba user would write
def _nb_chain(nb):
    @nb.njit(parallel=True, fastmath=False)
    def f(a, b, c):
        out = np.empty_like(a)
        for i in nb.prange(a.size):
            t = a[i] * b[i] + c[i]
            out[i] = (t if t > 0 else F32(0)) * F32(0.5)
        return out
    return f


def _nb_gelu(nb):
    k = F32(SQRT_2_OVER_PI)

    @nb.njit(parallel=True)
    def f(x):
        out = np.empty_like(x)
        for i in nb.prange(x.size):
            v = x[i]
            out[i] = F32(0.5) * v * (F32(1) + np.tanh(k * (v + F32(0.044715) * v * v * v)))
        return out
    return f


def _nb_softmax(nb):
    @nb.njit(parallel=True)
    def f(x):
        out = np.empty_like(x)
        for r in nb.prange(x.shape[0]):
            m = x[r].max()
            e = np.exp(x[r] - m)
            out[r] = e / e.sum()
        return out
    return f


def _nb_layer_norm(nb):
    @nb.njit(parallel=True)
    def f(x, w, b):
        out = np.empty_like(x)
        for r in nb.prange(x.shape[0]):
            mean = x[r].mean()
            d = x[r] - mean
            out[r] = d / np.sqrt((d * d).mean() + F32(1e-5)) * w + b
        return out
    return f


def _nb_row_sum(nb):
    @nb.njit(parallel=True)
    def f(x):
        out = np.empty(x.shape[0], x.dtype)
        for r in nb.prange(x.shape[0]):
            out[r] = x[r].sum()
        return out
    return f


def _nb_col_sum(nb):
    @nb.njit(parallel=True)
    def f(x):
        out = np.zeros(x.shape[1], x.dtype)
        for r in range(x.shape[0]):
            out += x[r]
        return out
    return f


def _nb_broadcast3(nb):
    @nb.njit(parallel=True)
    def f(a, b, c):
        out = np.empty_like(c)
        for i in nb.prange(c.shape[0]):
            out[i] = a[i, 0] + b[0] + c[i]
        return out
    return f


def _nb_transpose_add(nb):
    @nb.njit(parallel=True)
    def f(a, b):
        out = np.empty_like(a)
        for i in nb.prange(a.shape[0]):
            for j in range(a.shape[1]):
                out[i, j] = a[i, j] + b[j, i]
        return out
    return f


def _nb_masked_max(nb):
    @nb.njit(parallel=True)
    def f(m, x):
        out = np.empty(x.shape[0], x.dtype)
        for r in nb.prange(x.shape[0]):
            best = -np.inf
            for j in range(x.shape[1]):
                if m[r, j] and x[r, j] > best:
                    best = x[r, j]
            out[r] = best
        return out
    return f


def _nb_triad(nb):
    @nb.njit(parallel=True)
    def f(a, b, c):
        out = np.empty_like(a)
        for i in nb.prange(a.size):
            out[i] = a[i] * b[i] + c[i]
        return out
    return f


# ---- jitcore functions ------------------------------------------------------------------------
def jc_chain(a, b, c):
    return jc.relu(a * b + c) * 0.5


def jc_gelu(x):
    return jc.gelu(x, approximate="tanh")


def jc_softmax(x):
    return jc.softmax(x, axis=-1)


def jc_layer_norm(x, w, b):
    return jc.layer_norm(x, w, b, eps=1e-5)


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


# ---- numpy and torch functions ----------------------------------------------------------------
def np_chain(a, b, c):
    t = a * b
    t += c
    np.maximum(t, 0, out=t)
    t *= F32(0.5)
    return t


def np_gelu(x):
    t = x * x
    t *= x
    t *= F32(0.044715)
    t += x
    t *= F32(SQRT_2_OVER_PI)
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= F32(0.5)
    return t


def np_softmax(x):
    e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def np_layer_norm(x, w, b):
    d = x - x.mean(axis=-1, keepdims=True)
    d *= 1 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + F32(1e-5))
    d *= w
    d += b
    return d


def np_linear_gelu(x, W, b):
    t = x @ W
    t += b
    return np_gelu(t)


def np_mlp(x, W1, b1, W2, b2):
    t = np_linear_gelu(x, W1, b1) @ W2
    t += b2
    return t


def np_fork_wait(x, w_y, w_z):
    return x @ w_y + np.tanh(x @ w_z) * F32(0.5)


def _torch_fns():
    import torch
    import torch.nn.functional as F
    return torch, F


def t_chain(a, b, c):
    torch, _ = _torch_fns()
    return torch.relu(a * b + c) * 0.5


def t_gelu(x):
    _, F = _torch_fns()
    return F.gelu(x, approximate="tanh")


def t_softmax(x):
    torch, _ = _torch_fns()
    return torch.softmax(x, dim=-1)


def t_layer_norm(x, w, b):
    _, F = _torch_fns()
    return F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)


def t_masked_max(m, x):
    torch, _ = _torch_fns()
    return torch.where(m != 0, x, float("-inf")).amax(dim=1)


def t_linear_gelu(x, W, b):
    torch, F = _torch_fns()
    return F.gelu(torch.addmm(b, x, W), approximate="tanh")


def t_mlp(x, W1, b1, W2, b2):
    torch, F = _torch_fns()
    return torch.addmm(b2, F.gelu(torch.addmm(b1, x, W1), approximate="tanh"), W2)


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


SUITE = [
    Workload("chain", "relu(a*b+c)*0.5, 16M float32", _n(1 << 24, 4096),
             lambda s, rng: (randn(rng, s["n"]), randn(rng, s["n"]), randn(rng, s["n"])),
             lambda a, b, c: np.maximum(a * b + c, 0) * 0.5, lambda s: 16 * s["n"],
             builders={"jitcore": _jc(jc_chain), "numpy": _np(np_chain),
                       "numexpr": _ne("(a*b+c + abs(a*b+c)) * q", "a b c", q=0.25),
                       "numba": _numba(_nb_chain), **_both_torch(t_chain)}),
    Workload("gelu_tanh", "gelu (tanh form), 16M float32", _n(1 << 24, 4096),
             lambda s, rng: (randn(rng, s["n"]),), _gelu_tanh64, lambda s: 8 * s["n"],
             lambda s: 9 * s["n"],
             builders={"jitcore": _jc(jc_gelu), "numpy": _np(np_gelu),
                       "numexpr": _ne("h*x*(o + tanh(k*(x + c3*x*x*x)))", "x", h=0.5, o=1.0,
                                      k=SQRT_2_OVER_PI, c3=0.044715),
                       "numba": _numba(_nb_gelu), **_both_torch(t_gelu)}),
    Workload("dispatch_1024", "a*b+c on 1024 float32: per-call overhead", _n(1024, 1024),
             lambda s, rng: (randn(rng, s["n"]), randn(rng, s["n"]), randn(rng, s["n"])),
             lambda a, b, c: a * b + c, lambda s: 16 * s["n"], unit="us",
             builders={"jitcore": _jc(lambda a, b, c: a * b + c),
                       "numpy": _np(lambda a, b, c: a * b + c),
                       "numexpr": _ne("a*b+c", "a b c"), "numba": _numba(_nb_triad),
                       **_both_torch(lambda a, b, c: a * b + c)}),
    Workload("softmax", "softmax over rows, 4096x1024", _rc(4096, 1024, 64, 1024),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), _softmax64, _bytes_rc(1),
             builders={"jitcore": _jc(jc_softmax), "numpy": _np(np_softmax),
                       "numba": _numba(_nb_softmax), **_both_torch(t_softmax)}),
    Workload("layer_norm", "layer_norm over rows, 8192x768", _rc(8192, 768, 64, 768),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"]),
                             randn(rng, s["c"])),
             _layer_norm64, _bytes_rc(1),
             builders={"jitcore": _jc(jc_layer_norm), "numpy": _np(np_layer_norm),
                       "numba": _numba(_nb_layer_norm), **_both_torch(t_layer_norm)}),
    Workload("row_sum", "sum over rows, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=1),
             _bytes_rc(1, lambda s: 1), rtol=1e-4, atol=1e-3,
             builders={"jitcore": _jc(lambda x: x.sum(axis=1)),
                       "numpy": _np(lambda x: x.sum(axis=1)),
                       "numexpr": _ne("sum(x, axis=1)", "x"), "numba": _numba(_nb_row_sum),
                       **_both_torch(lambda x: x.sum(dim=1))}),
    Workload("col_sum", "sum over columns, 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], s["c"]),), lambda x: x.sum(axis=0),
             lambda s: 4 * (s["r"] * s["c"] + s["c"]), rtol=1e-4, atol=1e-3,
             builders={"jitcore": _jc(lambda x: x.sum(axis=0)),
                       "numpy": _np(lambda x: x.sum(axis=0)),
                       "numexpr": _ne("sum(x, axis=0)", "x"), "numba": _numba(_nb_col_sum),
                       **_both_torch(lambda x: x.sum(dim=0))}),
    Workload("broadcast3", "a[N,1] + b[1,M] + c[N,M], 4096x4096", _rc(4096, 4096, 64, 512),
             lambda s, rng: (randn(rng, s["r"], 1), randn(rng, 1, s["c"]),
                             randn(rng, s["r"], s["c"])),
             lambda a, b, c: a + b + c, _bytes_rc(1),
             builders={"jitcore": _jc(lambda a, b, c: a + b + c),
                       "numpy": _np(lambda a, b, c: a + b + c),
                       "numexpr": _ne("a + b + c", "a b c"), "numba": _numba(_nb_broadcast3),
                       **_both_torch(lambda a, b, c: a + b + c)}),
    Workload("transpose_add", "a + b.T, 4096x4096", _rc(4096, 4096, 64, 64),
             lambda s, rng: (randn(rng, s["r"], s["c"]), randn(rng, s["c"], s["r"])),
             lambda a, b: a + b.T, _bytes_rc(2),
             builders={"jitcore": _jc(lambda a, b: a + b.T),
                       "numpy": _np(lambda a, b: a + b.T),
                       "numba": _numba(_nb_transpose_add),
                       **_both_torch(lambda a, b: a + b.T)}),
    Workload("masked_row_max", "where(uint8 mask, x, -inf).max(axis=1), 2048x2047",
             _rc(2048, 2047, 64, 2047),
             lambda s, rng: ((rng.random((s["r"], s["c"])) < 0.5).astype(np.uint8),
                             randn(rng, s["r"], s["c"])),
             lambda m, x: np.where(m, x, -np.inf).max(axis=1),
             lambda s: 5 * s["r"] * s["c"] + 4 * s["r"],
             builders={"jitcore": _jc(jc_masked_max),
                       "numpy": _np(lambda m, x: np.where(m, x, -np.inf).max(axis=1)),
                       "numba": _numba(_nb_masked_max), **_both_torch(t_masked_max)}),
    Workload("linear_gelu", "gelu(x @ W + b), 512x1024 @ 1024x4096",
             lambda t: {"m": 32 if t else 512, "k": 64 if t else 1024, "n": 128 if t else 4096},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["n"])),
             lambda x, W, b: _gelu_tanh64(x @ W + b),
             lambda s: 4 * (s["m"] * s["k"] + s["k"] * s["n"] + s["n"] + s["m"] * s["n"]),
             _mm_flops(("m", "k", "n")), rtol=1e-3, atol=1e-3,
             builders={"jitcore": _jc(jc_linear_gelu), "numpy": _np(np_linear_gelu),
                       **_both_torch(t_linear_gelu)}),
    Workload("mlp2", "2-layer MLP 256x1024 @ 1024x4096 @ 4096x1024",
             lambda t: {"m": 16 if t else 256, "k": 64 if t else 1024, "h": 128 if t else 4096,
                        "n": 64 if t else 1024},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["h"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["h"]),
                             randn(rng, s["h"], s["n"]) * F32(1 / math.sqrt(s["h"])),
                             randn(rng, s["n"])),
             lambda x, W1, b1, W2, b2: _gelu_tanh64(x @ W1 + b1) @ W2 + b2,
             lambda s: 4 * (s["m"] * s["k"] + s["k"] * s["h"] + s["h"] * s["n"]
                            + s["m"] * s["n"]),
             _mm_flops(("m", "k", "h"), ("m", "h", "n")), rtol=1e-3, atol=1e-3,
             builders={"jitcore": _jc(jc_mlp), "numpy": _np(np_mlp), **_both_torch(t_mlp)}),
    Workload("fork_wait", "fork/wait example: compute_z forked while x @ w_y runs",
             lambda t: {"m": 32 if t else 512, "k": 64 if t else 1024, "n": 64 if t else 1024},
             lambda s, rng: (randn(rng, s["m"], s["k"]),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"])),
                             randn(rng, s["k"], s["n"]) * F32(1 / math.sqrt(s["k"]))),
             lambda x, w_y, w_z: x @ w_y + np.tanh(x @ w_z) * 0.5,
             lambda s: 4 * (s["m"] * s["k"] + 2 * s["k"] * s["n"] + s["m"] * s["n"]),
             _mm_flops(("m", "k", "n"), ("m", "k", "n")), rtol=1e-3, atol=1e-3,
             builders={"jitcore": _jc(jc_fork_wait), "numpy": _np(np_fork_wait)}),
]

BY_NAME = {w.name: w for w in SUITE}
SYSTEMS = ("jitcore", "numpy", "numexpr", "numba", "torch", "torch.compile")
SYSTEM_MODULES = {"jitcore": "jitcore", "numpy": "numpy", "numexpr": "numexpr",
                  "numba": "numba", "torch": "torch", "torch.compile": "torch"}

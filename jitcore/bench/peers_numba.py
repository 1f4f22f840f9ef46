"""numba as a competent user writes it: `@njit(parallel=True, fastmath=True, cache=True)`,
explicit loops over elements or rows (prange over the outer loop), one kernel per workload
that writes into an output it is given. Natural use calls it through a small njit wrapper
that allocates the output, as a function returning a fresh array would; compute only passes
a preallocated output. Imported only in the numba child (numba loads at import).
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

from .workloads import F32, SQRT_2_OVER_PI

KERNEL = dict(parallel=True, fastmath=True, cache=True)
# fastmath=True includes "ninf": the masked max starts from -inf, so it keeps infinities
KERNEL_WITH_INF = dict(parallel=True, cache=True,
                       fastmath={"nsz", "arcp", "contract", "afn", "reassoc"})
WRAPPER = dict(cache=True)
K = F32(SQRT_2_OVER_PI)
TILE = 32              # transpose tile
COL_BLOCK = 256        # columns per task of the column sum


@nb.njit(**KERNEL)
def chain_into(a, b, c, out):
    for i in nb.prange(a.size):
        t = a[i] * b[i] + c[i]
        out[i] = (t if t > 0 else F32(0)) * F32(0.5)
    return out


@nb.njit(**KERNEL)
def triad_into(a, b, c, out):
    for i in nb.prange(a.size):
        out[i] = a[i] * b[i] + c[i]
    return out


@nb.njit(**KERNEL)
def gelu_into(x, out):
    for i in nb.prange(x.size):
        v = x[i]
        out[i] = F32(0.5) * v * (F32(1) + math.tanh(K * (v + F32(0.044715) * v * v * v)))
    return out


@nb.njit(**KERNEL)
def softmax_into(x, out):
    rows, cols = x.shape
    for r in nb.prange(rows):
        m = x[r, 0]
        for j in range(1, cols):
            m = max(m, x[r, j])
        s = F32(0)
        for j in range(cols):
            e = math.exp(x[r, j] - m)
            out[r, j] = e
            s += e
        inv = F32(1) / s
        for j in range(cols):
            out[r, j] *= inv
    return out


@nb.njit(**KERNEL)
def layer_norm_into(x, w, b, out):
    rows, cols = x.shape
    for r in nb.prange(rows):
        s = F32(0)
        for j in range(cols):
            s += x[r, j]
        mean = s / cols
        v = F32(0)
        for j in range(cols):
            d = x[r, j] - mean
            v += d * d
        inv = F32(1) / math.sqrt(v / cols + F32(1e-5))
        for j in range(cols):
            out[r, j] = (x[r, j] - mean) * inv * w[j] + b[j]
    return out


@nb.njit(**KERNEL)
def row_sum_into(x, out):
    rows, cols = x.shape
    for r in nb.prange(rows):
        s = F32(0)
        for j in range(cols):
            s += x[r, j]
        out[r] = s
    return out


@nb.njit(**KERNEL)
def col_sum_into(x, out):
    rows, cols = x.shape
    for jb in nb.prange((cols + COL_BLOCK - 1) // COL_BLOCK):
        j0, j1 = jb * COL_BLOCK, min(cols, (jb + 1) * COL_BLOCK)
        for j in range(j0, j1):
            out[j] = 0
        for r in range(rows):
            for j in range(j0, j1):
                out[j] += x[r, j]
    return out


@nb.njit(**KERNEL)
def broadcast3_into(a, b, c, out):
    rows, cols = c.shape
    for i in nb.prange(rows):
        ai = a[i, 0]
        for j in range(cols):
            out[i, j] = ai + b[0, j] + c[i, j]
    return out


@nb.njit(**KERNEL)
def transpose_add_into(a, b, out):
    rows, cols = a.shape
    for ib in nb.prange((rows + TILE - 1) // TILE):
        for jb in range(0, cols, TILE):
            for i in range(ib * TILE, min(rows, (ib + 1) * TILE)):
                for j in range(jb, min(cols, jb + TILE)):
                    out[i, j] = a[i, j] + b[j, i]
    return out


@nb.njit(**KERNEL_WITH_INF)
def masked_max_into(m, x, out):
    rows, cols = x.shape
    for r in nb.prange(rows):
        best = -np.inf
        for j in range(cols):
            if m[r, j] and x[r, j] > best:
                best = x[r, j]
        out[r] = best
    return out


@nb.njit(**KERNEL)
def warm_up(a):
    for i in nb.prange(a.size):
        a[i] += 1
    return a


# natural use: allocate, then the kernel
@nb.njit(**WRAPPER)
def chain(a, b, c):
    return chain_into(a, b, c, np.empty_like(a))


@nb.njit(**WRAPPER)
def triad(a, b, c):
    return triad_into(a, b, c, np.empty_like(a))


@nb.njit(**WRAPPER)
def gelu(x):
    return gelu_into(x, np.empty_like(x))


@nb.njit(**WRAPPER)
def softmax(x):
    return softmax_into(x, np.empty_like(x))


@nb.njit(**WRAPPER)
def layer_norm(x, w, b):
    return layer_norm_into(x, w, b, np.empty_like(x))


@nb.njit(**WRAPPER)
def row_sum(x):
    return row_sum_into(x, np.empty(x.shape[0], x.dtype))


@nb.njit(**WRAPPER)
def col_sum(x):
    return col_sum_into(x, np.empty(x.shape[1], x.dtype))


@nb.njit(**WRAPPER)
def broadcast3(a, b, c):
    return broadcast3_into(a, b, c, np.empty_like(c))


@nb.njit(**WRAPPER)
def transpose_add(a, b):
    return transpose_add_into(a, b, np.empty_like(a))


@nb.njit(**WRAPPER)
def masked_max(m, x):
    return masked_max_into(m, x, np.empty(x.shape[0], x.dtype))


# workload -> (natural, into); numba has no matmul of its own worth timing (np.dot in numba
# calls the same BLAS as numpy), so the matmul workloads are n/a
NUMBA = {"chain": (chain, chain_into), "gelu_tanh": (gelu, gelu_into),
         "dispatch_1024": (triad, triad_into), "softmax": (softmax, softmax_into),
         "layer_norm": (layer_norm, layer_norm_into), "row_sum": (row_sum, row_sum_into),
         "col_sum": (col_sum, col_sum_into), "broadcast3": (broadcast3, broadcast3_into),
         "transpose_add": (transpose_add, transpose_add_into),
         "masked_row_max": (masked_max, masked_max_into),
         "masked_row_max_causal": (masked_max, masked_max_into)}


def numba_calls(name: str, args: tuple, out: np.ndarray, threads: int):
    nb.set_num_threads(threads)
    if name not in NUMBA:
        return None
    natural, into = NUMBA[name]
    return (lambda: natural(*args)), (lambda: into(*args, out))

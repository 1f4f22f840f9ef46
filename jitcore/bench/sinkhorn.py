"""Sinkhorn iterations: iterative programs whose every step reads the previous one.

Each builder returns a plain numpy-style function of the cost matrix C (and the marginals a, b)
that jitcore traces and numpy runs as is; `steps` counts normalisations (a row or a column
one, alternating, starting with rows), so 80 steps are 40 row+column rounds. Used by
examples/sinkhorn_bench.py and tests/test_recompute.py.

  normalize(steps)       K = exp(-C / eps), then K /= K.sum(axis=1) and K /= K.sum(axis=0)
                         in turn (keepdims): the transport plan itself is rescaled each step;
  scaling(steps)         the usual form with scaling vectors: u = a / (K v), v = b / (K^T u),
                         with the products written as broadcast multiply and sum; returns
                         the plan u[:, None] * K * v[None, :];
  scaling_matmul(steps)  the same with K @ v and K.T @ u (matrix-vector products).
"""
from __future__ import annotations

import numpy as np

EPS = 0.5


def normalize(steps: int, eps: float = EPS):
    def sinkhorn_normalize(C):
        K = np.exp(-C / eps)
        for i in range(steps):
            K = K / K.sum(axis=1 - i % 2, keepdims=True)
        return K
    return sinkhorn_normalize


def scaling(steps: int, eps: float = EPS):
    def sinkhorn_scaling(C, a, b):
        K = np.exp(-C / eps)
        u = a / K.sum(axis=1)                  # K @ ones: the first step starts from v = 1
        v = None
        for i in range(1, steps):
            if i % 2:
                v = b / (K * u[:, None]).sum(axis=0)
            else:
                u = a / (K * v[None, :]).sum(axis=1)
        return u[:, None] * K if v is None else u[:, None] * K * v[None, :]
    return sinkhorn_scaling


def scaling_matmul(steps: int, eps: float = EPS):
    def sinkhorn_scaling_matmul(C, a, b):
        K = np.exp(-C / eps)
        u = a / K.sum(axis=1)
        v = None
        for i in range(1, steps):
            if i % 2:
                v = b / (K.T @ u)
            else:
                u = a / (K @ v)
        return u[:, None] * K if v is None else u[:, None] * K * v[None, :]
    return sinkhorn_scaling_matmul


PROGRAMS = {"normalize": normalize, "scaling": scaling, "scaling_matmul": scaling_matmul}


def numpy_normalize(steps: int, eps: float = EPS):
    """normalize as a numpy user writes it: one array rescaled in place."""
    def sinkhorn_normalize_np(C):
        K = np.exp(-C / eps)
        for i in range(steps):
            K /= K.sum(axis=1 - i % 2, keepdims=True)
        return K
    return sinkhorn_normalize_np


def numpy_scaling(steps: int, eps: float = EPS):
    """The scaling form as a numpy user writes it: matrix-vector products through BLAS."""
    def sinkhorn_scaling_np(C, a, b):
        K = np.exp(-C / eps)
        u = a / K.sum(axis=1)
        v = None
        for i in range(1, steps):
            if i % 2:
                v = b / (u @ K)
            else:
                u = a / (K @ v)
        return u[:, None] * K if v is None else u[:, None] * K * v[None, :]
    return sinkhorn_scaling_np


# The peer each program is timed against: the competent numpy version of the same algorithm.
NUMPY_PEERS = {"normalize": numpy_normalize, "scaling": numpy_scaling,
               "scaling_matmul": numpy_scaling}


def inputs(n: int, m: int | None = None, dtype=np.float32, seed: int = 0) -> dict:
    """Arguments per program: a random cost matrix in [0, 1) of shape (n, m) and uniform
    marginals."""
    m = n if m is None else m
    rng = np.random.default_rng(seed)
    C = rng.random((n, m)).astype(dtype)
    a, b = np.full(n, 1 / n, dtype), np.full(m, 1 / m, dtype)
    return {"normalize": (C,), "scaling": (C, a, b), "scaling_matmul": (C, a, b)}

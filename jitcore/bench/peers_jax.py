"""JAX (jax.jit on the CPU backend) as a competent user writes it: jnp / jax.nn functions
under jax.jit, inputs placed on the device once, every call ended by block_until_ready().
The first call traces and compiles with XLA. JAX arrays are immutable and jax.jit has no
`out=`: the compute-only column is n/a for JAX. Imported only in the jax child; the parent
sets XLA_FLAGS, PJRT_NPROC (the CPU client's thread pool: cli.jax_thread_env) and the CPU
affinity before jax loads.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .workloads import F32


def _layer_norm(x, w, b):
    mean = x.mean(axis=-1, keepdims=True)
    var = jnp.square(x - mean).mean(axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + F32(1e-5)) * w + b


def _masked_max(m, x):
    return jnp.max(jnp.where(m, x, -jnp.inf), axis=1)


def _max_pool(x):
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 1, 3, 3), (1, 1, 2, 2),
                                 ((0, 0), (0, 0), (1, 1), (1, 1)))


def _avg_pool(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))
def _conv(x, w, stride=1, padding=1, groups=1):
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), [(padding, padding)] * 2,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups)


def _bn(x, mean, var, gamma, beta):
    def ch(a):
        return a.reshape(1, -1, 1, 1)
    return (x - ch(mean)) * jax.lax.rsqrt(ch(var) + F32(1e-5)) * ch(gamma) + ch(beta)


def _resblock(x, w1, m1, v1, g1, b1, w2, m2, v2, g2, b2):
    y = jnp.maximum(_bn(_conv(x, w1), m1, v1, g1, b1), 0)
    return jnp.maximum(_bn(_conv(y, w2), m2, v2, g2, b2) + x, 0)


JAX = {
    "chain": lambda a, b, c: jnp.maximum(a * b + c, 0) * F32(0.5),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "dispatch_1024": lambda a, b, c: a * b + c,
    "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    "layer_norm": _layer_norm,
    "row_sum": lambda x: x.sum(axis=1),
    "col_sum": lambda x: x.sum(axis=0),
    "broadcast3": lambda a, b, c: a + b + c,
    "transpose_add": lambda a, b: a + b.T,
    "masked_row_max": _masked_max,
    "masked_row_max_causal": _masked_max,
    "linear_gelu": lambda x, W, b: jax.nn.gelu(x @ W + b, approximate=True),
    "mlp2": lambda x, W1, b1, W2, b2: jax.nn.gelu(x @ W1 + b1, approximate=True) @ W2 + b2,
    "fork_wait": lambda x, w_y, w_z: x @ w_y + jnp.tanh(x @ w_z) * F32(0.5),
    "max_pool_3x3s2": _max_pool,
    "avg_pool_2x2": _avg_pool,
    "global_avg_pool": lambda x: x.mean(axis=(2, 3), keepdims=True),
    "global_avg_pool_b8": lambda x: x.mean(axis=(2, 3), keepdims=True),
    "conv3x3_64": _conv, "conv3x3_256": _conv,
    "conv1x1_64_256": lambda x, w: _conv(x, w, padding=0),
    "conv7x7s2_stem": lambda x, w: _conv(x, w, stride=2, padding=3),
    "dwconv3x3_96": lambda x, w: _conv(x, w, groups=x.shape[1]),
    "conv_bn_relu": lambda x, w, m, v, g, b: jnp.maximum(_bn(_conv(x, w), m, v, g, b), 0),
    "resblock": _resblock,
}


def setup(threads: int):
    jax.config.update("jax_platforms", "cpu")


def jax_calls(name: str, args: tuple, out: np.ndarray):
    fn = JAX.get(name)
    if fn is None:
        return None
    jargs = [jax.device_put(a) for a in args]
    f = jax.jit(fn)
    return (lambda: f(*jargs).block_until_ready()), None

"""numpy and numexpr as a competent user writes them.

numpy: in-place ufuncs with one allocated output (`out=None`) in natural use; the same code
with `out=` a preallocated array is the compute-only variant (row-sized temporaries, and the
full-size ones a workload cannot avoid in numpy, stay). numexpr: `evaluate` once, then
`re_evaluate` (which skips parsing and the cache lookup), with `out=` for compute only.
"""
from __future__ import annotations

import numpy as np

from .workloads import F32, SQRT_2_OVER_PI


def np_chain(a, b, c, out=None):
    t = np.multiply(a, b, out=out)
    t += c
    np.maximum(t, 0, out=t)
    t *= F32(0.5)
    return t


def np_triad(a, b, c, out=None):
    t = np.multiply(a, b, out=out)
    t += c
    return t


def np_gelu(x, out=None):
    t = np.multiply(x, x, out=out)
    t *= x
    t *= F32(0.044715)
    t += x
    t *= F32(SQRT_2_OVER_PI)
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= F32(0.5)
    return t


def np_softmax(x, out=None):
    e = np.subtract(x, x.max(axis=-1, keepdims=True), out=out)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def np_layer_norm(x, w, b, out=None):
    d = np.subtract(x, x.mean(axis=-1, keepdims=True), out=out)
    d *= 1 / np.sqrt(np.square(d).mean(axis=-1, keepdims=True) + F32(1e-5))
    d *= w
    d += b
    return d


def np_row_sum(x, out=None):
    return np.sum(x, axis=1, out=out)


def np_col_sum(x, out=None):
    return np.sum(x, axis=0, out=out)


def np_broadcast3(a, b, c, out=None):
    t = np.add(a, b, out=out)
    t += c
    return t


def np_transpose_add(a, b, out=None):
    return np.add(a, b.T, out=out)


def np_masked_max(m, x, out=None):
    # np.max(x, axis=1, where=m, initial=-inf) skips the masked copy: 6x faster with the
    # causal mask, 2x slower with the random one (measured); the common idiom it is
    return np.where(m, x, F32(-np.inf)).max(axis=1, out=out)


def np_linear_gelu(x, W, b, out=None):
    t = x @ W
    t += b
    return np_gelu(t, out=out)


def np_mlp(x, W1, b1, W2, b2, out=None):
    t = np.matmul(np_linear_gelu(x, W1, b1), W2, out=out)
    t += b2
    return t


def np_fork_wait(x, w_y, w_z, out=None):
    y = np.matmul(x, w_y, out=out)
    z = x @ w_z
    np.tanh(z, out=z)
    z *= F32(0.5)
    y += z
    return y


def np_max_pool(x, out=None):
    """3x3 stride-2 windows of the -inf-padded input, as strided views."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return win.max(axis=(4, 5), out=out)


def np_avg_pool(x, out=None):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5), out=out)


def np_global_pool(x, out=None):
    return x.mean(axis=(2, 3), keepdims=True, out=out)


def np_matmul(x, W, out=None):
    """float32 x @ W: numpy has no bf16, so the bf16 rows' base is its float32 matmul."""
    return np.matmul(x, W, out=out)


NUMPY = {"chain": np_chain, "gelu_tanh": np_gelu, "dispatch_1024": np_triad,
         "softmax": np_softmax, "layer_norm": np_layer_norm, "row_sum": np_row_sum,
         "col_sum": np_col_sum, "broadcast3": np_broadcast3, "transpose_add": np_transpose_add,
         "masked_row_max": np_masked_max, "masked_row_max_causal": np_masked_max,
         "linear_gelu": np_linear_gelu, "mlp2": np_mlp, "fork_wait": np_fork_wait,
         "max_pool_3x3s2": np_max_pool, "avg_pool_2x2": np_avg_pool,
         "global_avg_pool": np_global_pool, "global_avg_pool_b8": np_global_pool}
NUMPY.update({name: np_matmul for name in ("bf16_gemm_512x1024x4096", "bf16_bert_qkv",
                                            "bf16_bert_ffn_up", "bf16_bert_ffn_down")})

# numexpr: (expression, input names, float32 constants); float32 constants keep it in float32
NUMEXPR = {
    "chain": ("where(a*b+c > z, a*b+c, z) * h", "a b c", {"z": 0.0, "h": 0.5}),
    "gelu_tanh": ("h*x*(o + tanh(k*(x + c3*x*x*x)))", "x",
                  {"h": 0.5, "o": 1.0, "k": SQRT_2_OVER_PI, "c3": 0.044715}),
    "dispatch_1024": ("a*b+c", "a b c", {}),
    "row_sum": ("sum(x, axis=1)", "x", {}),
    "col_sum": ("sum(x, axis=0)", "x", {}),
    "broadcast3": ("a + b + c", "a b c", {}),
}


def numexpr_calls(name: str, args: tuple, out: np.ndarray):
    """(natural, into) for one workload, or None where numexpr has no expression for it."""
    import numexpr
    if name not in NUMEXPR:
        return None
    expr, names, consts = NUMEXPR[name]
    local = {**{k: F32(v) for k, v in consts.items()}, **dict(zip(names.split(), args))}

    def first_then_re_evaluate(**kw):
        # evaluate parses and compiles; later calls re-run that program (numexpr keeps the
        # last one per thread, and this call is the only one timed meanwhile)
        state = {"first": True}

        def call():
            if state["first"]:
                state["first"] = False
                return numexpr.evaluate(expr, local_dict=local, **kw)
            return numexpr.re_evaluate(local_dict=local)
        return call
    return first_then_re_evaluate(), first_then_re_evaluate(out=out)

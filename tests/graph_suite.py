"""A suite of realistic tensor graphs (MLP activations, attention, normalizations, broadcasting,
mixed dtypes, reductions) with float64 numpy references, used by tests/test_graph_suite.py and
examples/coverage.py.

Each `Case` in `SUITE` holds:
    fn        the function to jit (jitcore ops and numpy-style operators);
    ref       the reference: numpy on float64 copies of the inputs (exact for integer results);
    inputs    a function making the input arrays from a seeded generator (deterministic);
    dtype     the result dtype jitcore must return (numpy's, with the documented deviations);
    terms, scale
              the tolerance is `helpers.reduction_tol(dtype, terms, scale)`: `terms` values
              of magnitude <= `scale` accumulate into each output element (for a mean over n
              values of x: |x| / n); the defaults 1, 1.0 give the elementwise tolerance;
    kernels   the required number of fused kernels, or None where it is not a requirement;
    all_vectorized
              True where every kernel of the graph is required to be vectorized.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import jitcore as jc
from helpers import BOOL, F32, F64, I32, I64, erf64, f64, rng_for

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable
    ref: Callable
    inputs: Callable[[], tuple]
    dtype: np.dtype
    terms: int = 1
    scale: float = 1.0
    kernels: int | None = None
    all_vectorized: bool = False


def uniform(name, shape, low=-1.0, high=1.0, dtype=F32):
    """Uniform values in [low, high] from a generator seeded by (name, shape)."""
    return rng_for("suite", name, shape).uniform(low, high, shape).astype(dtype)


def integers(name, shape, low, high, dtype):
    """Integers in [low, high] from a generator seeded by (name, shape, dtype)."""
    return rng_for("suite", name, shape, np.dtype(dtype).name).integers(
        low, high, shape, endpoint=True).astype(dtype)


def coin(name, shape, p_true=0.5):
    """Booleans, True with probability p_true."""
    return rng_for("suite", name, shape, "coin").random(shape) < p_true


def causal_mask(n, masked_value):
    """(n, n) float32 additive mask: 0 on and below the diagonal, masked_value above."""
    return np.triu(np.full((n, n), masked_value, np.float32), k=1)


# ---- float64 references -------------------------------------------------------------------------

def relu_ref(x):
    return np.maximum(x, 0.0)


def sigmoid_ref(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu_ref(x):
    return 0.5 * x * (1.0 + erf64(x / math.sqrt(2.0)))


def gelu_tanh_ref(x):
    return 0.5 * x * (1.0 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x ** 3)))


def softmax_ref(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax_ref(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def layer_norm_ref(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def rms_norm_ref(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def on_f64(ref):
    """A reference that gets float64 copies of the inputs."""
    return lambda *xs: ref(*(f64(x) for x in xs))


# ---- jitted functions written from primitives ---------------------------------------------------

def layer_norm_by_hand(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=-1, keepdims=True)
    return d * jc.rsqrt(var + 1e-5) * w + b


def rms_norm(x, w):
    return x * jc.rsqrt(jc.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def attention_probs(q, k, mask):
    scores = (q @ k.T) * (1.0 / math.sqrt(q.shape[-1])) + mask
    return jc.softmax(scores, axis=-1)


def attention_probs_ref(q, k, mask):
    q, k, mask = f64(q), f64(k), f64(mask)
    return softmax_ref((q @ k.T) / math.sqrt(q.shape[-1]) + mask)


def row_variance(x):
    d = x - x.mean(axis=-1, keepdims=True)
    return (d * d).mean(axis=-1)


def clamp(x):
    return jc.minimum(jc.maximum(x, -0.5), 0.5)


def bool_logic(a, b, m):
    return ((a > 0.0) & (b < 0.25)) | ~m


def int32_chain(a, b, c):
    return jc.maximum(a * b - c * 3, -c) + jc.abs(a - b) * 2 + 7


def int32_chain_ref(a, b, c):
    a, b, c = (x.astype(np.int64) for x in (a, b, c))
    return np.maximum(a * b - c * 3, -c) + np.abs(a - b) * 2 + 7


# ---- inputs -----------------------------------------------------------------------------------

ROWS, WIDTH = 256, 1024           # activations: a batch of 256 rows of 1024 features


def activations(name):
    return lambda: (uniform(name, (ROWS, WIDTH), -4.0, 4.0), uniform(name, (WIDTH,)))


def rows(name, shape=(ROWS, 1000), low=-4.0, high=4.0, dtype=F32):
    return lambda: (uniform(name, shape, low, high, dtype),)


def norm_inputs(name, dtype=F32, shape=(ROWS, 768)):
    # a non-zero mean and a spread as in a transformer's hidden states
    return lambda: (uniform(name, shape, -3.0, 5.0, dtype), uniform(name, shape[-1:], 0.5, 1.5,
                    dtype), uniform(name, shape[-1:], -0.5, 0.5, dtype))


def attention_inputs():
    n, d = 256, 64
    return (uniform("attn-q", (n, d)), uniform("attn-k", (n, d)), causal_mask(n, -1e9))


def masked_softmax_inputs():
    x = uniform("masked-softmax", (128, 1000), -6.0, 6.0)
    mask = np.where(coin("masked-softmax", x.shape, 0.3), -np.inf, 0.0).astype(np.float32)
    mask[:, 0] = 0.0                         # every row keeps at least one entry
    return x, mask


def masked_fill_inputs(n_rows):
    def make():
        shape = (n_rows, 2047)
        mask = coin("masked-fill", shape, 0.8).astype(np.uint8)
        return uniform("masked-fill", shape, -8.0, 8.0), mask
    return make


def row_max_of_masked_inputs():
    x, mask = masked_fill_inputs(64)()
    mask[:, 5] = 1                           # every row keeps at least one entry
    return x, mask


def residual_inputs():
    x, w, b = norm_inputs("residual-ln")()
    return x, uniform("residual", x.shape), w, b


def elementwise_triple(name, shape=(512, 512)):
    return lambda: (uniform(name + "a", shape, -2.0, 2.0), uniform(name + "b", shape, -2.0, 2.0),
                    uniform(name + "c", shape, -2.0, 2.0))


def broadcast_matrix_inputs():
    n, m = 384, 640
    return (uniform("bc-m", (n, m)), uniform("bc-row", (1, m)), uniform("bc-col", (n, 1)))


def broadcast_3d_inputs():
    return (uniform("bc3-x", (8, 96, 256)), uniform("bc3-a", (8, 1, 256)),
            uniform("bc3-b", (1, 96, 1)), uniform("bc3-c", (96, 256)))


def mixed_int_float_inputs():
    return integers("mix-i", (256, 1000), -1000, 1000, I32), uniform("mix-f", (1000,), -2.0, 2.0)


def u8_times_f64_inputs():
    return integers("u8", (300, 1000), 0, 255, np.uint8), uniform("u8-f", (300, 1000), dtype=F64)


SUITE = [
    # MLP activations after a bias add (the bias broadcasts over the rows)
    Case("relu_bias", lambda x, b: jc.relu(x + b), on_f64(lambda x, b: relu_ref(x + b)),
         activations("relu"), F32),
    Case("gelu_erf_bias", lambda x, b: jc.gelu(x + b), on_f64(lambda x, b: gelu_ref(x + b)),
         activations("gelu"), F32),
    Case("gelu_tanh_bias", lambda x, b: jc.gelu(x + b, approximate="tanh"),
         on_f64(lambda x, b: gelu_tanh_ref(x + b)), activations("gelu-tanh"), F32),
    Case("silu_bias", lambda x, b: jc.silu(x + b),
         on_f64(lambda x, b: (x + b) * sigmoid_ref(x + b)), activations("silu"), F32),
    Case("sigmoid_bias", lambda x, b: jc.sigmoid(x + b),
         on_f64(lambda x, b: sigmoid_ref(x + b)), activations("sigmoid"), F32),
    Case("gelu", jc.gelu, on_f64(gelu_ref), rows("gelu-1d", (262_144,), -6.0, 6.0), F32),
    Case("gelu_f64", jc.gelu, on_f64(gelu_ref), rows("gelu-f64", (65_536,), -6.0, 6.0, F64),
         F64),
    Case("fused_relu_chain", lambda a, b, c: jc.relu(a * b + c) * 0.5,
         on_f64(lambda a, b, c: relu_ref(a * b + c) * 0.5), elementwise_triple("chain"), F32,
         scale=4.0, kernels=1),
    Case("clamp", clamp, on_f64(lambda x: np.clip(x, -0.5, 0.5)), rows("clamp"), F32),
    Case("hardtanh", lambda x: jc.hardtanh(x, -2.0, 2.0), on_f64(lambda x: np.clip(x, -2, 2)),
         rows("hardtanh"), F32),

    # attention and softmax
    Case("attention_scores_softmax", attention_probs, attention_probs_ref, attention_inputs,
         F32, terms=256),
    Case("masked_softmax", lambda x, mask: jc.softmax(x + mask, axis=-1),
         on_f64(lambda x, mask: softmax_ref(x + mask)), masked_softmax_inputs, F32,
         terms=1000),
    Case("softmax_rows", lambda x: jc.softmax(x, axis=-1), on_f64(softmax_ref), rows("softmax"),
         F32, terms=1000, kernels=1),
    Case("softmax_temperature", lambda x: jc.softmax(x / 0.7, axis=-1),
         on_f64(lambda x: softmax_ref(x / 0.7)), rows("softmax-t"), F32, terms=1000),
    Case("log_softmax", lambda x: jc.log_softmax(x, axis=-1), on_f64(log_softmax_ref),
         rows("log-softmax"), F32, terms=1000, scale=4.0 / 1000),
    Case("softmax_f64", lambda x: jc.softmax(x, axis=-1), on_f64(softmax_ref),
         rows("softmax-f64", dtype=F64), F64, terms=1000),

    # normalizations
    Case("layer_norm", jc.layer_norm, on_f64(layer_norm_ref), norm_inputs("ln"), F32,
         terms=768, scale=5.0 / 768, kernels=1),
    Case("layer_norm_by_hand", layer_norm_by_hand, on_f64(layer_norm_ref),
         norm_inputs("ln-hand"), F32, terms=768, scale=5.0 / 768),
    Case("residual_layer_norm", lambda x, r, w, b: jc.layer_norm(x + r, w, b),
         on_f64(lambda x, r, w, b: layer_norm_ref(x + r, w, b)), residual_inputs, F32,
         terms=768, scale=6.0 / 768),
    Case("layer_norm_f64", jc.layer_norm, on_f64(layer_norm_ref), norm_inputs("ln-f64", F64),
         F64, terms=768, scale=5.0 / 768),
    Case("rms_norm", rms_norm, on_f64(rms_norm_ref),
         lambda: norm_inputs("rms")()[:2], F32, terms=768, scale=25.0 / 768),

    # masked fill with a uint8 mask at an odd width
    Case("masked_fill_u8", lambda x, mask: jc.where(mask, x, -1e4),
         lambda x, mask: np.where(mask, f64(x), -1e4), masked_fill_inputs(128), F32),
    Case("where_u8_row_max", lambda x, mask: jc.where(mask, x, -np.inf).max(axis=-1),
         lambda x, mask: np.where(mask, f64(x), -np.inf).max(axis=-1), row_max_of_masked_inputs,
         F32),

    # layouts and broadcasting
    Case("transpose_add", lambda a, b: a + b.T, on_f64(lambda a, b: a + b.T),
         lambda: (uniform("tr-a", (512, 384)), uniform("tr-b", (384, 512))), F32, kernels=1,
         all_vectorized=True),
    Case("broadcast_row_col_matrix", lambda x, r, c: x + r + c, on_f64(lambda x, r, c: x + r + c),
         broadcast_matrix_inputs, F32),
    Case("broadcast_outer", lambda c, r: c + r, on_f64(lambda c, r: c + r),
         lambda: (uniform("outer-c", (512, 1)), uniform("outer-r", (1, 500))), F32),
    Case("broadcast_3d", lambda x, a, b, c: x * a + b - c, on_f64(lambda x, a, b, c: x * a + b - c),
         broadcast_3d_inputs, F32),

    # mixed dtypes
    Case("int32_plus_float32", lambda i, f: i + f, on_f64(lambda i, f: i + f),
         mixed_int_float_inputs, F64),
    Case("uint8_times_float64", lambda u, f: u * f, on_f64(lambda u, f: u * f),
         u8_times_f64_inputs, F64),
    Case("int64_row_sum", lambda x: x.sum(axis=-1), lambda x: x.sum(axis=-1),
         lambda: (integers("i64-sum", (256, 1000), -10**9, 10**9, I64),), I64),
    Case("bool_logic", bool_logic,
         lambda a, b, m: ((a > 0.0) & (b < 0.25)) | ~m,
         lambda: (uniform("bool-a", (256, 1000)), uniform("bool-b", (256, 1000)),
                  coin("bool-m", (256, 1000))), BOOL),
    Case("int32_chain", int32_chain, int32_chain_ref,
         lambda: tuple(integers("i32-" + s, (256, 1000), -1000, 1000, I32) for s in "abc"), I32),

    # reductions
    Case("column_sum", lambda x: x.sum(axis=0), on_f64(lambda x: x.sum(axis=0)),
         rows("col-sum", (512, 500)), F32, terms=512, scale=4.0),
    Case("column_max", lambda x: x.max(axis=0), lambda x: x.max(axis=0),
         rows("col-max", (512, 500)), F32),
    Case("row_sum", lambda x: x.sum(axis=-1), on_f64(lambda x: x.sum(axis=-1)), rows("row-sum"),
         F32, terms=1000, scale=4.0),
    Case("row_max", lambda x: x.max(axis=-1), lambda x: x.max(axis=-1), rows("row-max"), F32),
    Case("row_mean", lambda x: x.mean(axis=-1), on_f64(lambda x: x.mean(axis=-1)),
         rows("row-mean"), F32, terms=1000, scale=4.0 / 1000),
    Case("row_variance", row_variance, on_f64(lambda x: x.var(axis=-1)), rows("row-var"), F32,
         terms=1000, scale=64.0 / 1000),
    Case("row_sum_f64", lambda x: x.sum(axis=-1), on_f64(lambda x: x.sum(axis=-1)),
         rows("row-sum-f64", dtype=F64), F64, terms=1000, scale=4.0),
]

"""Differential testing on random programs: hypothesis builds random graphs of elementwise ops
(transcendentals, numpy's other math (arctan, log1p, expm1, cbrt, arcsinh, sinh, hypot,
arctan2, logaddexp, fmax, copysign, square, sign), activations, composites, casts,
comparisons and logic, Python scalars as constants and as arguments of the call (weak
run-time values); in integer programs
also the bitwise family, shifts by any count, and float -> integer casts of float inputs full
of NaN, infinities and out-of-range values), broadcasting between
compatible shapes (size-1, odd and empty dims), views (transpose, slicing with any step,
reshape, expand/broadcast), pooling (max, avg and adaptive over the last two axes of 3-d
values), reductions (random axes, keepdims; argmax/argmin and prod on
integers; argmax/argmin on floats the reference computes exactly, ties included; elementwise
chains read by two reductions), pow with constant and tensor exponents, matmuls (2-D, batched
with broadcast batch dims, transposed operands, 1-D: A @ v, v @ A, v @ v), convolutions of
3-D and 4-D values (constant weights; stride, padding, dilation, groups, depthwise) and
forked tasks (a step computed by `jc.fork` and waited for at its first use). The same program
runs through numpy (float64 for float programs, the exact integer dtypes for integer
programs, float -> integer casts saturating as jitcore defines them: `saturating_astype`) and
through jitcore (so do full reductions large enough to be split); each float output is
held to an error bound propagated along the program from its own inputs (`error_bounds`).
A failure prints the program and jitcore's graph."""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitcore as jc
from jitcore import config
from jitcore.llvm import work
from helpers import (BOOL, F32, F64, TOL, U8, ULP, assert_close, ref_conv2d,
                     saturating_astype)
from jitcore.llvm import conv_winograd as winograd
from test_conv_winograd import winograd_magnitude, winograd_tol
from test_pooling import out_size, ref_adaptive, ref_pool

DIMS = [1, 2, 3, 5, 7, 16, 17]
MAX_SIZE = 3000

# continuous ops only (a tiny rounding difference must not flip a discrete choice)
UNARY = ["neg", "abs", "tanh", "sigmoid", "relu", "sin", "cos", "exp_neg_abs", "log1p_abs",
         "sqrt_abs1", "gelu", "silu", "scale", "shift", "leaky_where", "erf", "rsqrt_abs1",
         "recip_abs1", "pow_abs1", "gelu_tanh", "hardtanh", "relu6", "hardswish",
         "hardsigmoid", "leaky_relu", "softmax", "log_softmax", "layer_norm", "pow2", "pow3",
         "pow_abs1_2_5", "pow_abs1_m0_5", "pow_abs1_0_5", "pow_abs1_m2",
         # numpy's other math (jitcore/ops/math.py), on domains where they are smooth
         "arctan", "log1p_of_abs", "expm1_neg_abs", "cbrt", "arcsinh", "sinh_tanh", "square",
         # sizes read in Python (run-time sizes under dynamic=True): as a value, in a branch
         "size_scale", "size_branch"]
# constant exponents of pow (x ** c): integer ones on any base, half-integer ones on |v| + 1
POW_CONST = {"pow2": 2, "pow3": 3, "pow_abs1_2_5": 2.5, "pow_abs1_m0_5": -0.5,
             "pow_abs1_0_5": 0.5, "pow_abs1_m2": -2}
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div_safe", "where_max", "pow_tanh",
          "hypot", "arctan2", "logaddexp", "fmax", "copysign"]
REDUCE = ["sum", "mean", "max", "min"]
# integer programs: exact ops (wrap-around included), compared for equality
BITWISE = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift"]
INT_UNARY = ["neg", "abs", "relu", "scale3", "shift2", "invert", "square", "sign"]
INT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "where_max", "floordiv", "mod",
              "pow_small", "fmax", "fmin"] + BITWISE
SCALAR_OPS = ["add", "sub", "mul", "maximum", "minimum"]
INT_REDUCE = ["sum", "max", "min", "prod", "argmax", "argmin"]
BOOL_REDUCE = ["sum", "max", "min"]
COMPARE = ["less", "less_equal", "greater", "greater_equal", "equal", "not_equal"]
NO_IDENTITY = {"max", "min", "argmax", "argmin"}   # an empty reduced axis raises in numpy
EXACT_KINDS = {"transpose", "slice", "reshape", "broadcast_to", "astype",
               "concat", "split", "pad", "take", "clip"}
# indexing and joining steps (a small share of the draws): values moved, not computed,
# except cumsum (a running sum) and clip (maximum/minimum)
JOIN_KINDS = ["concat", "stack", "split", "pad", "take", "clip", "cumsum"]
EXACT_OPS = {"neg", "abs", "relu", "hardtanh", "relu6", "maximum", "minimum", "where_max",
             "fmax", "copysign"}
ROW_OPS = {"softmax", "log_softmax", "layer_norm"}  # along the last axis (not of 0-d values)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)
# float values of integer programs: cast to integers or bool (exact, so compared exactly)
CAST_EDGES = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, -1.5, 255.5, 256.0, 300.0, 3e9,
              -3e9, 2.0**31, -2.0**31 - 1, 1e10, -1e10, 2.0**63, -2.0**63, 1e20, -1e20]


def _is_np(v):
    return isinstance(v, (np.ndarray, np.generic))


def _gelu_tanh(v):
    return 0.5 * v * (1.0 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))


def _rows(fn, v):
    """A last-axis composite in numpy; empty rows stay empty (numpy's max would raise)."""
    return v * 1.0 if v.size == 0 else fn(v)


def _softmax(v):
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(v):
    z = v - v.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _layer_norm(v):                          # eps = 1: well conditioned for near-constant rows
    m = v.mean(axis=-1, keepdims=True)
    return (v - m) / np.sqrt(((v - m) ** 2).mean(axis=-1, keepdims=True) + 1.0)


NUMPY_UNARY = {
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "relu": lambda v: np.maximum(v, 0),
    "silu": lambda v: v / (1.0 + np.exp(-v)),
    "gelu": lambda v: 0.5 * v * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(
        v / math.sqrt(2)).astype(v.dtype)),
    "erf": lambda v: np.vectorize(math.erf, otypes=[np.float64])(v).astype(v.dtype),
    "rsqrt_abs1": lambda v: 1.0 / np.sqrt(np.abs(v) + 1.0),
    "recip_abs1": lambda v: 1.0 / (np.abs(v) + 1.0),
    "gelu_tanh": _gelu_tanh,
    "hardtanh": lambda v: np.clip(v, -1.0, 1.0),
    "relu6": lambda v: np.clip(v, 0.0, 6.0),
    "hardswish": lambda v: v * np.clip(v + 3.0, 0.0, 6.0) / 6.0,
    "hardsigmoid": lambda v: np.clip(v + 3.0, 0.0, 6.0) / 6.0,
    "leaky_relu": lambda v: np.where(v > 0, v, v * 0.01),
    "softmax": lambda v: _rows(_softmax, v),
    "log_softmax": lambda v: _rows(_log_softmax, v),
    "layer_norm": lambda v: _rows(_layer_norm, v),
}
JC_UNARY = {
    "sigmoid": jc.sigmoid, "relu": jc.relu, "silu": jc.silu, "gelu": jc.gelu, "erf": jc.erf,
    "rsqrt_abs1": lambda v: jc.rsqrt(np.abs(v) + 1.0),
    "recip_abs1": lambda v: jc.reciprocal(np.abs(v) + 1.0),
    "gelu_tanh": lambda v: jc.gelu(v, approximate="tanh"),
    "hardtanh": jc.hardtanh, "relu6": jc.relu6, "hardswish": jc.hardswish,
    "hardsigmoid": jc.hardsigmoid, "leaky_relu": jc.leaky_relu, "softmax": jc.softmax,
    "log_softmax": jc.log_softmax, "layer_norm": lambda v: jc.layer_norm(v, eps=1.0),
}


def unary(name, v):
    """One op on a numpy array (the reference) or on a jitcore tracer."""
    if name in JC_UNARY:
        return NUMPY_UNARY[name](v) if _is_np(v) else JC_UNARY[name](v)
    if name == "neg":
        return -v
    if name == "abs":
        return np.abs(v)
    if name == "tanh":
        return np.tanh(v)
    if name == "sin":
        return np.sin(v)
    if name == "cos":
        return np.cos(v)
    if name == "exp_neg_abs":
        return np.exp(-np.abs(v))
    if name == "log1p_abs":
        return np.log(np.abs(v) + 1.0)
    if name == "sqrt_abs1":                  # + 1: no infinite slope at 0
        return np.sqrt(np.abs(v) + 1.0)
    if name == "pow_abs1":
        return (np.abs(v) + 1.0) ** 1.5
    if name in POW_CONST:
        return (v if name in ("pow2", "pow3") else np.abs(v) + 1.0) ** POW_CONST[name]
    if name == "scale":
        return v * 0.75
    if name == "scale3":
        return v * 3
    if name == "shift2":
        return v - 2
    if name == "invert":
        return ~v
    if name == "shift":
        return v - 0.5
    if name in ("arctan", "cbrt", "arcsinh", "square", "sign"):
        return getattr(np, name)(v)
    if name == "log1p_of_abs":
        return np.log1p(np.abs(v))
    if name == "expm1_neg_abs":
        return np.expm1(-np.abs(v))
    if name == "sinh_tanh":
        return np.sinh(np.tanh(v))
    if name == "leaky_where":
        return np.where(v > 0, v, v * 0.1)
    if name == "size_scale":                 # a size used as a value: read at run time
        n = v.shape[0] if v.ndim else 1
        return v * (1.0 / (n + 1) ** 0.5)
    if name == "size_branch":                # a size Python must know: the compile specializes
        n = v.shape[0] if v.ndim else 1
        return v * 0.5 if n > 3 else v - 0.25
    raise AssertionError(name)


def binary(name, a, b):
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "maximum":
        return np.maximum(a, b)
    if name == "minimum":
        return np.minimum(a, b)
    if name == "div_safe":
        return a / (np.abs(b) + 1.0)
    if name == "where_max":
        return np.where(a > b, a, b)
    if name == "pow_tanh":                   # positive base, exponent in (-1, 1)
        return (np.abs(a) + 1.0) ** np.tanh(b)
    if name in ("hypot", "arctan2", "logaddexp", "fmax", "fmin", "copysign"):
        return getattr(np, name)(a, b)
    if name == "pow_small":                  # integer power, exponent 0..3 (wraps like numpy)
        return a ** (np.abs(b) % 4)
    if name in ("floordiv", "mod"):          # zero divisors included: 0, never a trap
        with np.errstate(divide="ignore", over="ignore"):
            return a // b if name == "floordiv" else a % b
    if name in COMPARE:
        return getattr(np, name)(a, b)
    if name in ("logical_and", "logical_or"):
        return getattr(np, name)(a, b)
    if name in BITWISE:                      # the operators; any shift count (numpy's rule)
        with np.errstate(all="ignore"):
            return {"bitwise_and": lambda: a & b, "bitwise_or": lambda: a | b,
                    "bitwise_xor": lambda: a ^ b, "left_shift": lambda: a << b,
                    "right_shift": lambda: a >> b}[name]()
    raise AssertionError(name)


@dataclass
class Program:
    input_shapes: list
    input_dtypes: list
    steps: list = field(default_factory=list)     # (kind, args...) referring to earlier values
    scalar_args: list = field(default_factory=list)   # Python scalars passed at the call
    outputs: list = field(default_factory=list)
    seed: int = 0

    def __repr__(self):
        lines = ["inputs: " + ", ".join(f"v{i}: {np.dtype(d).name}{list(s)}" for i, (s, d)
                                         in enumerate(zip(self.input_shapes, self.input_dtypes)))]
        k = len(self.input_shapes)
        for i, st_ in enumerate(self.steps):
            lines.append(f"v{k + i} = {st_[0]}{st_[1:]}")
        lines.append(f"return {', '.join(f'v{o}' for o in self.outputs)}  (seed {self.seed})")
        if self.scalar_args:
            lines.append(f"Python scalar arguments s0...: {self.scalar_args}")
        return "\n".join(lines)


class Pending:
    """A value a forked task computes; waited for where it is first used."""

    def __init__(self, future):
        self.future = future


def value(vals, i):
    v = vals[i]
    if isinstance(v, Pending):
        v = vals[i] = jc.wait(v.future)
    return v


def _swap_last(v):
    return v.transpose(tuple(range(v.ndim - 2)) + (v.ndim - 1, v.ndim - 2))


def step_inputs(step) -> tuple:
    """The value indices a step reads."""
    kind = step[0]
    if kind in ("unary", "not", "invert"):
        return (step[2],) if kind == "unary" else (step[1],)
    if kind in ("binary", "compare", "logic"):
        return step[2], step[3]
    if kind == "where":
        return step[1:4]
    if kind in ("matmul", "concat"):
        return step[1], step[2]
    if kind == "conv":
        return (step[1],)
    if kind == "fork":
        return step_inputs(step[1])
    return (step[1] if kind not in ("scalar", "scalar_arg") else step[2],)


def live_values(program) -> set:
    """The values the program's outputs read, through any number of steps."""
    first, live = len(program.input_shapes), set(program.outputs)
    for k in range(first + len(program.steps) - 1, first - 1, -1):
        if k in live:
            live |= set(step_inputs(program.steps[k - first]))
    return live


def returning(*kinds):
    """A function of a program that adds the result of each of its steps of `kinds` (fork
    steps by the step they run) to its outputs: steps the random steps after them leave
    unread would be dead code."""
    def add_outputs(program):
        first = len(program.input_shapes)
        picked = [k for k, step in enumerate(program.steps, start=first)
                  if (step[1] if step[0] == "fork" else step)[0] in kinds]
        program.outputs += [k for k in picked if k not in program.outputs]
        return program
    return add_outputs


def apply_step(step, vals, reference=False, scalars=None):
    """One step on numpy arrays or tracers. `reference`: the float64 run of a float program
    (a cast to float32 only rounds; the values stay float64). `scalars`: the jitted
    function's Python scalar arguments (weak run-time values), which a "scalar_arg" step
    uses instead of the value it records (the same value: numpy sees it as a Python
    scalar too)."""
    kind = step[0]
    if kind == "fork":
        inner, refs = step[1], step_inputs(step[1])
        args = [value(vals, r) for r in refs]
        if _is_np(args[0]):
            return apply_step(inner, dict(zip(refs, args)), reference)
        return Pending(jc.fork(lambda *xs: apply_step(inner, dict(zip(refs, xs))), *args))
    if kind == "unary":
        return unary(step[1], value(vals, step[2]))
    if kind in ("binary", "compare", "logic"):
        return binary(step[1], value(vals, step[2]), value(vals, step[3]))
    if kind == "scalar":                       # a Python scalar on the left or the right
        op, i, c, left = step[1:]
        return binary(op, c, value(vals, i)) if left else binary(op, value(vals, i), c)
    if kind == "scalar_arg":                   # the same, passed as an argument of the call
        op, i, c, left, k = step[1:]
        c = c if scalars is None else scalars[k]
        return binary(op, c, value(vals, i)) if left else binary(op, value(vals, i), c)
    if kind == "not":
        return np.logical_not(value(vals, step[1]))
    if kind == "invert":
        return ~value(vals, step[1])
    if kind == "where":
        return np.where(*(value(vals, i) for i in step[1:4]))
    if kind == "matmul":                       # v @ w or v @ w^T (last two axes swapped)
        v, w = value(vals, step[1]), value(vals, step[2])
        return v @ (_swap_last(w) if step[3] else w)
    if kind == "concat":                       # concatenate, or stack when step[4]
        join = np.stack if step[4] else np.concatenate
        return join([value(vals, step[1]), value(vals, step[2])], axis=step[3])
    if kind == "conv":
        return _conv(step, value(vals, step[1]))
    v = value(vals, step[1])
    if kind == "pad":
        widths, mode, fill = step[2:]
        return np.pad(v, widths, mode=mode, **({"constant_values": fill}
                                               if mode == "constant" else {}))
    if kind == "take":
        return np.take(v, np.array(step[3], np.int64), axis=step[2])
    if kind == "split":
        axis, cut, part = step[2:]
        return np.split(v, [cut], axis=axis)[part]
    if kind == "clip":
        return np.clip(v, *step[2:])
    if kind == "cumsum":
        if _is_np(v) and v.dtype in (U8, BOOL):    # jitcore's deviation: int64, not uint64
            return np.cumsum(v, axis=step[2], dtype=np.int64)
        return np.cumsum(v, axis=step[2])
    if kind == "astype":
        target = np.dtype(step[2])
        if reference and _is_np(v) and (target.kind == "f" or target.name == "bfloat16"):
            return v.astype(target).astype(np.float64)
        if _is_np(v) and v.dtype.kind == "f" and target.kind in "iu":
            return saturating_astype(v, target)      # numpy's own cast is undefined there
        return v.astype(target)
    if kind == "pool":
        return pool_step(step, v)
    if kind == "transpose":
        return v.transpose(step[2])
    if kind == "slice":
        return v[step[2]]
    if kind == "reshape":
        return v.reshape(step[2])
    if kind == "broadcast_to":
        return np.broadcast_to(v, step[2])
    if kind == "reduce":
        op, axis, keepdims = step[2:]
        if op in ("argmax", "argmin"):
            return getattr(v, op)(axis=axis, keepdims=keepdims)
        if op in ("sum", "prod") and _is_np(v) and v.dtype in (U8, BOOL):
            # jitcore's documented deviation: sums of uint8/bool are int64 (numpy: uint64)
            return getattr(v, op)(axis=axis, keepdims=keepdims, dtype=np.int64)
        return getattr(v, op)(axis=axis, keepdims=keepdims)
    raise AssertionError(kind)


def pool_step(step, v):
    """("pool", i, kind, options) on a (C, H, W) value: jitcore's op on tracers, the float64
    window-loop reference (in v's dtype) on arrays."""
    kind, opts = step[2], dict(step[3])
    if not _is_np(v):
        if kind == "adaptive":
            return jc.adaptive_avg_pool2d(v, opts["out"])
        fn = jc.max_pool2d if kind == "max" else jc.avg_pool2d
        return fn(v, opts.pop("kernel"), **opts)
    if kind == "adaptive":
        out = ref_adaptive(v[None], opts["out"])
    else:
        out = ref_pool(v[None], kind, **opts)
    return out[0].astype(v.dtype)
def conv_weight(step) -> np.ndarray:
    """The constant weight of a conv step: multiples of 1/8 (exact in float32 and float64)."""
    seed, wshape = step[2:4]
    return np.random.default_rng(seed).integers(-8, 9, wshape) / 8.0


def conv_batch_norm(step):
    """(mean, var, gamma, beta) of the batch norm after a conv step, or None: multiples of
    1/4 (exact in float32), var > 0."""
    if not dict(step[4]).get("bn"):
        return None
    rng, c = np.random.default_rng(step[2] + 1), step[3][0]
    return (rng.integers(-4, 5, c) / 4, rng.integers(1, 9, c) / 4,
            rng.integers(-4, 5, c) / 4, rng.integers(-4, 5, c) / 4)


def folded_conv(step) -> tuple:
    """(weights, shift or None) of a conv step in float64, its batch norm folded in (as
    jitcore folds it, passes/fold_batch_norm.py, before rounding to the conv's dtype). A step
    with a 6th element, a function, computes from that function of those weights (the
    operands a kernel rounds: bf16)."""
    w, bn, shift = conv_weight(step), conv_batch_norm(step), None
    if bn is not None:                         # (x - mean) * scale + beta, folded
        mean, var, gamma, beta = bn
        scale = gamma / np.sqrt(var + 1e-5)
        w, shift = w * scale[:, None, None, None], beta - mean * scale
    return (step[5](w) if len(step) > 5 else w), shift


def _conv(step, v, absolute=False, bias=True):
    """conv2d of a value (then a batch norm with constant arrays, which jitcore folds into
    the weights): numpy's float64 reference on arrays, jc.conv2d on tracers. absolute: with
    |weights| and |shift| (the bounds' sums of |terms|); bias=False: without the shift."""
    w, bn = conv_weight(step), conv_batch_norm(step)
    opts = {k: v_ for k, v_ in step[4] if k != "bn"}
    if v.ndim == 3:                            # (C, H, W): one image
        v = v[None] if _is_np(v) else jc.reshape(v, (1,) + tuple(v.shape))
    if not _is_np(v):
        y = jc.conv2d(v, w.astype(v.dtype), **opts)
        return y if bn is None else jc.batch_norm(y, *(a.astype(v.dtype) for a in bn))
    w, shift = folded_conv(step)
    if absolute:
        w, shift = np.abs(w), None if shift is None else np.abs(shift)
    # float64 sums, in the value's dtype (as torch would give it)
    return ref_conv2d(v, w, shift if bias else None, **opts)[0].astype(v.dtype)


@contextmanager
def quiet_numpy():
    """numpy without floating-point warnings ("mean of empty slice", overflow, 0/0)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def run(program, inputs, reference=False, scalars=None):
    vals = list(inputs)
    for step in program.steps:
        with quiet_numpy():
            v = apply_step(step, vals, reference, scalars)
        vals.append(np.asarray(v) if _is_np(v) else v)
    return tuple(value(vals, i) for i in program.outputs)


# ---- the strategy ---------------------------------------------------------------------------

def _size(shape):
    return math.prod(shape)


@st.composite
def shapes(draw):
    ndim = draw(st.integers(1, 3))
    while True:
        s = [draw(st.sampled_from(DIMS)) for _ in range(ndim)]
        if draw(st.sampled_from([False] * 7 + [True])):   # about one shape in eight is empty
            s[draw(st.integers(0, ndim - 1))] = 0
        if _size(s) <= MAX_SIZE:
            return tuple(s)


def _broadcast_variant(draw, shape):
    """A shape that broadcasts with `shape`: some dims 1, maybe fewer leading dims."""
    drop = draw(st.integers(0, len(shape) - 1))
    s = list(shape[drop:])
    for i in range(len(s)):
        if draw(st.booleans()) and draw(st.booleans()):
            s[i] = 1
    return tuple(s)


def _broadcastable(*shapes_):
    try:
        out = np.broadcast_shapes(*shapes_)
    except ValueError:
        return None
    return out if _size(out) <= MAX_SIZE else None


def _matmul_shape(sa, sb, transposed):
    """The shape of sa @ sb (sb's last two axes swapped when `transposed`), or None."""
    if not sa or not sb or (len(sb) < 2 and transposed):
        return None
    sb = sb[:-2] + (sb[-1], sb[-2]) if transposed else sb
    if len(sb) == 1:                                 # A @ v (gemv) or v @ v
        out = sa[:-1] if sa[-1] == sb[0] else None
    elif len(sa) == 1:
        out = sb[:-2] + sb[-1:] if sa[0] == sb[-2] else None
    else:
        batch = _broadcastable(sa[:-2], sb[:-2])
        out = batch + (sa[-2], sb[-1]) if sa[-1] == sb[-2] and batch is not None else None
    return out if out is not None and _size(out) <= MAX_SIZE else None


def _slice_for(draw, n):
    if n == 0:
        return slice(None)
    step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
    start = draw(st.integers(0, n - 1))
    if step > 0:
        stop = draw(st.integers(start + 1, n))
        return slice(start, stop, step)
    stop = draw(st.integers(-1, start - 1))
    return slice(start, None if stop < 0 else stop, step)


def _reshape_target(draw, shape):
    options = [(-1,)] if _size(shape) else []
    for i in range(len(shape) - 1):                                     # merge two dims
        options.append(shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:])
    for i, d in enumerate(shape):                                       # split one dim
        for f in (2, 3, 4):
            if d % f == 0 and d > f:
                options.append(shape[:i] + (f, d // f) + shape[i + 1:])
    for i in range(len(shape) + 1):                                     # a new size-1 dim
        if len(shape) < 4:
            options.append(shape[:i] + (1,) + shape[i:])
    if 1 in shape and len(shape) > 1:                                   # drop a size-1 dim
        i = shape.index(1)
        options.append(shape[:i] + shape[i + 1:])
    return draw(st.sampled_from(options))


def zero_values(program):
    """Zero-filled stand-ins of a program's inputs: running steps on them gives every value's
    shape and dtype without real data."""
    return [np.zeros(s, d) for s, d in zip(program.input_shapes, program.input_dtypes)]


def walk(program):
    """(step, the values before it, its result) for each step, on zero stand-ins."""
    vals = zero_values(program)
    for step in program.steps:
        with quiet_numpy():
            out = np.asarray(apply_step(step, vals))
        yield step, vals, out
        vals.append(out)


class _Builder:
    """The program under construction: its steps and each value on zero stand-ins."""

    def __init__(self, prog: Program, floats: bool):
        self.prog = prog
        self.floats = floats
        self.vals = zero_values(prog)
        # values the float64 reference computes with no rounding (inputs, views, casts, and
        # ops that pick one of their operands): argmax/argmin of them is exact, ties included
        self.exact = set(range(len(prog.input_shapes)))

    @property
    def shape(self):
        return [v.shape for v in self.vals]

    @property
    def dtype(self):
        return [v.dtype for v in self.vals]

    def add(self, step):
        with quiet_numpy():
            self.vals.append(np.asarray(apply_step(step, self.vals)))
        self.prog.steps.append(step)
        if (step[0] in EXACT_KINDS or step[0] in ("unary", "binary") and step[1] in EXACT_OPS) \
                and set(step_inputs(step)) <= self.exact:
            self.exact.add(len(self.vals) - 1)

    def numeric(self):
        """The values arithmetic draws from: floats in a float program, integers in an
        integer program (whose float values only feed casts and views)."""
        return [i for i, d in enumerate(self.dtype)
                if d != BOOL and (d.kind == "f") == self.floats]

    def float_values(self):
        return [i for i, d in enumerate(self.dtype) if d.kind == "f"]

    def bools(self):
        return [i for i, d in enumerate(self.dtype) if d == BOOL]


def _draw_reduce(draw, b, i, ops):
    s = b.shape[i]
    if not s:                                        # a 0-d value has no axis to reduce
        return None
    op = draw(st.sampled_from(ops))
    if op in ("argmax", "argmin"):
        axis = None if draw(st.booleans()) and draw(st.booleans()) else \
            draw(st.integers(-len(s), len(s) - 1))
    elif draw(st.booleans()) and draw(st.booleans()):
        axis = None
    else:
        axes = draw(st.lists(st.integers(-len(s), len(s) - 1), min_size=1,
                             max_size=len(s), unique_by=lambda a: a % len(s)))
        axis = axes[0] if len(axes) == 1 else tuple(axes)
    axes = range(len(s)) if axis is None else np.atleast_1d(axis)
    folded = math.prod(s[a] for a in axes)           # elements folded into each result
    if folded == 0 and op in NO_IDENTITY:            # numpy raises on an empty axis
        if op in ("argmax", "argmin"):
            return None
        op = "sum"
    if op == "prod" and folded > 8:                  # keep products of ints small-ish
        op = "sum"
    return ("reduce", i, op, axis, draw(st.booleans()))


def _draw_matmul(draw, b):
    options = [(i, j, t) for i in b.numeric() for j in b.numeric() for t in (True, False)
               if b.dtype[i].kind == "f" and b.dtype[j].kind == "f"
               and _matmul_shape(b.shape[i], b.shape[j], t) is not None]
    return ("matmul", *draw(st.sampled_from(options))) if options else None


def _draw_conv(draw, b):
    """conv2d of a float 4-D value (or 3-D: one image) with a constant weight: random kernel
    (up to 3x3), stride, padding ("same" included), dilation and groups (1, a divisor, or
    depthwise), and half the time a batch norm with constant arrays (folded into the conv)."""
    vals = [i for i in b.numeric() if len(b.shape[i]) in (3, 4) and b.dtype[i].kind == "f"
            and min(b.shape[i][-3:]) > 0]
    if not vals:
        return None
    i = draw(st.sampled_from(vals))
    n, c, h, w = (1,) * (4 - len(b.shape[i])) + b.shape[i]
    groups = draw(st.sampled_from(sorted({1, c} | {g for g in (2, 3) if c % g == 0})))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = draw(st.sampled_from([1, 1, 2]))
    padding = draw(st.sampled_from([0, 1, "same"] if stride == 1 else [0, 1]))
    dilation = draw(st.sampled_from([1, 1, 2]))
    pads = (0, 0) if padding == "same" else (padding, padding)
    if padding != "same" and (h + 2 * pads[0] < dilation * (kh - 1) + 1
                              or w + 2 * pads[1] < dilation * (kw - 1) + 1):
        return None
    out = groups * draw(st.integers(1, 3))
    opts = (("stride", stride), ("padding", padding), ("dilation", dilation),
            ("groups", groups), ("bn", draw(st.booleans())))   # a batch norm after it
    return ("conv", i, draw(st.integers(0, 2**31 - 1)), (out, c // groups, kh, kw), opts)


def _draw_gemv(draw, b):
    """A matrix-vector product (the gemv kernel): A @ v or v @ A (A transposed or batched),
    v a sum of A over its other axes, so that its length fits (1-D values rarely meet
    matrices otherwise). Adds the sum and returns the product."""
    mats = [i for i in b.numeric() if len(b.shape[i]) >= 2]
    if not mats:
        return None
    i, left, t = draw(st.sampled_from(mats)), draw(st.booleans()), draw(st.booleans())
    n = len(b.shape[i])
    keep = n - 2 if left != t else n - 1             # the axis of A the vector runs along
    b.add(("reduce", i, "sum", tuple(a for a in range(n) if a != keep), False))
    v = len(b.shape) - 1
    step = ("matmul", v, i, t) if left else ("matmul", i, v, False) if not t else None
    if step is None or _matmul_shape(b.shape[step[1]], b.shape[step[2]], t) is None:
        return None
    return step


def _draw_reductions(draw, b, ops, unary_ops):
    """A chain of elementwise ops on the latest value, read by two reductions (keepdims),
    whose kernels may each recompute it, combined so that both stay live. Adds the chain and
    the reductions and returns the combination."""
    for _ in range(draw(st.integers(1, 3))):
        b.add(("unary", draw(st.sampled_from([o for o in unary_ops if o not in ROW_OPS])),
               max(b.numeric())))
    i = max(b.numeric())
    r = []
    for _ in range(2):
        step = _draw_reduce(draw, b, i, ops)
        if step is None:
            return None
        b.add(step[:4] + (True,))
        r.append(len(b.shape) - 1)
    return ("binary", draw(st.sampled_from(["add", "sub", "maximum"])), *r)


def _draw_elementwise(draw, b, kind, unary_ops, binary_ops, scalars, scalar_ops=SCALAR_OPS):
    numeric = b.numeric()
    i = draw(st.sampled_from(numeric))
    if kind == "unary":
        ops = [o for o in unary_ops if b.shape[i] or o not in ROW_OPS]
        return ("unary", draw(st.sampled_from(ops)), i)
    if kind == "scalar":
        op = draw(st.sampled_from(scalar_ops))
        if b.dtype[i] == U8:                         # -3 does not fit uint8 (NEP 50 raises)
            scalars = [c for c in scalars if c >= 0]
        step = ("scalar", op, i, draw(st.sampled_from(scalars)), draw(st.booleans()))
        if draw(st.booleans()):                      # the scalar as an argument of the call
            step = ("scalar_arg",) + step[1:] + (len(b.prog.scalar_args),)
            b.prog.scalar_args.append(step[3])
        return step
    partners = _partners(b, i, numeric)
    if not partners:
        return None
    j = draw(st.sampled_from(partners))
    if draw(st.booleans()):
        i, j = j, i
    return ("binary", draw(st.sampled_from(binary_ops)), i, j)


def _partners(b, i, candidates) -> list:
    """The values among `candidates` that broadcast with value i within MAX_SIZE (none when
    i itself is past it: a conv's output can be)."""
    return [j for j in candidates if _broadcastable(b.shape[i], b.shape[j]) is not None]


def _draw_pool(draw, b):
    """A max, average or adaptive pooling of a (C, H, W) value with drawn options, or None
    when no value fits or the options leave no output."""
    values = [i for i in b.numeric() if len(b.shape[i]) == 3 and 0 not in b.shape[i]]
    if not values:
        return None
    i = draw(st.sampled_from(values))
    h, w = b.shape[i][1:]
    kind = draw(st.sampled_from(["max", "avg", "adaptive"]))
    if kind == "adaptive":
        return ("pool", i, kind, (("out", (draw(st.integers(1, h)), draw(st.integers(1, w)))),))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    opts = dict(kernel=k, stride=draw(st.sampled_from([None, 1, 2, (1, 2)])),
                padding=(draw(st.integers(0, k[0] // 2)), draw(st.integers(0, k[1] // 2))),
                ceil_mode=draw(st.booleans()))
    if kind == "max":
        opts["dilation"] = draw(st.sampled_from([1, 2]))
    else:
        opts["count_include_pad"] = draw(st.booleans())
    stride = opts["stride"] or k
    stride = stride if isinstance(stride, tuple) else (stride, stride)
    d = opts.get("dilation", 1)
    if min(out_size(n, kk, ss, pp, d, opts["ceil_mode"])
           for n, kk, ss, pp in zip((h, w), k, stride, opts["padding"])) < 1:
        return None
    return ("pool", i, kind, tuple(opts.items()))


def _draw_view(draw, b, i):
    s = b.shape[i]
    view = draw(st.sampled_from(["transpose", "slice", "reshape", "broadcast_to"]))
    if view == "transpose" and len(s) >= 2:
        return ("transpose", i, tuple(draw(st.permutations(range(len(s))))))
    if view == "slice":
        return ("slice", i, tuple(_slice_for(draw, d) for d in s))
    if view == "broadcast_to" and (1 in s or len(s) < 3):
        target = tuple(draw(st.sampled_from([3, 5])) if d == 1 else d for d in s)
        if len(target) < 3 and draw(st.booleans()):
            target = (draw(st.sampled_from([2, 3])),) + target
        if _size(target) > MAX_SIZE:
            target = s
        return ("broadcast_to", i, target)
    return ("reshape", i, _reshape_target(draw, s))


def _draw_bool_step(draw, b):
    """Comparisons make bools; logic, bitwise ops (with bools or integers), where and casts
    use them (integer programs)."""
    numeric, bools = b.numeric(), b.bools()
    kind = draw(st.sampled_from(["compare", "compare"] + (
        ["logic", "not", "where", "where", "cast", "reduce", "mixed"] if bools else [])))
    if kind == "compare":
        i = draw(st.sampled_from(numeric))
        partners = _partners(b, i, numeric)
        if not partners:
            return None
        return ("compare", draw(st.sampled_from(COMPARE)), i, draw(st.sampled_from(partners)))
    c = draw(st.sampled_from(bools))
    if kind == "logic":                              # & | ^ of bools are logical too
        partners = _partners(b, c, bools)
        if not partners:
            return None
        d = draw(st.sampled_from(partners))
        return ("logic", draw(st.sampled_from(["logical_and", "logical_or"] + BITWISE[:3])),
                c, d)
    if kind == "not":
        return (draw(st.sampled_from(["not", "invert"])), c)
    if kind == "mixed":                              # bool with an integer: an integer result
        others = [i for i in numeric if _broadcastable(b.shape[c], b.shape[i]) is not None]
        if not others:
            return None
        i = draw(st.sampled_from(others))
        return ("binary", draw(st.sampled_from(BITWISE)), *draw(st.permutations([c, i])))
    if kind == "cast":
        return ("astype", c, draw(st.sampled_from([I32, I64, U8])))
    if kind == "reduce":
        return _draw_reduce(draw, b, c, BOOL_REDUCE)
    pairs = [(x, y) for x in numeric for y in numeric
             if _broadcastable(b.shape[c], b.shape[x], b.shape[y]) is not None]
    x, y = draw(st.sampled_from(pairs)) if pairs else (c, c)
    return ("where", c, x, y)


def _draw_join(draw, b, floats: bool):
    """One of the indexing and joining ops on a numeric value (or two, for concat)."""
    kind = draw(st.sampled_from(JOIN_KINDS))
    i = draw(st.sampled_from(b.numeric()))
    s = b.shape[i]
    if kind == "clip":
        lo, hi = draw(st.sampled_from([None, 0, 1])), draw(st.sampled_from([None, 2, 3]))
        return ("clip", i, lo, hi if lo is not None or hi is not None else 2)
    if kind == "cumsum":
        return ("cumsum", i, draw(st.sampled_from([None] + list(range(-len(s), len(s))))))
    if not s:
        return None
    axis = draw(st.integers(-len(s), len(s) - 1))
    n = s[axis]
    if kind == "take":
        if n == 0:
            return None
        count = draw(st.sampled_from([(3,), (2, 2), ()]))
        idx = draw(st.lists(st.integers(-n, n - 1), min_size=math.prod(count),
                            max_size=math.prod(count)))
        return ("take", i, axis, np.array(idx, np.int64).reshape(count).tolist())
    if kind in ("concat", "stack"):
        stack = kind == "stack"
        fits = [j for j in b.numeric() if b.shape[j] == s] if stack else \
            [j for j in b.numeric() if len(b.shape[j]) == len(s) and all(
                a == c for k, (a, c) in enumerate(zip(b.shape[j], s)) if k != axis % len(s))]
        j = draw(st.sampled_from(fits))
        if _size(s) + _size(b.shape[j]) > MAX_SIZE:
            return None
        if stack:                                    # a new axis: -ndim-1 .. ndim
            axis = draw(st.integers(-len(s) - 1, len(s)))
        return ("concat", i, j, axis, stack)
    if kind == "split":                              # one piece of a split at `cut`
        cut = draw(st.integers(0, n))
        return ("split", i, axis, cut, draw(st.integers(0, 1)))
    mode = draw(st.sampled_from(["constant", "constant", "edge", "reflect"]))
    if 0 in s and mode != "constant":
        return None
    limit = [(d - 1 if mode == "reflect" else 2) for d in s]
    widths = tuple((draw(st.integers(0, min(2, m))), draw(st.integers(0, min(2, m))))
                   for m in limit)
    if _size([d + lo + hi for d, (lo, hi) in zip(s, widths)]) > MAX_SIZE:
        return None
    return ("pad", i, widths, mode, draw(st.sampled_from([0, 1.5] if floats else [0, 3])))


def _draw_float_cast(draw, b):
    """Integer programs: a float value (an input full of NaN, infinities and out-of-range
    values, or an integer converted to float) cast to an integer dtype or bool, which
    saturates; or an integer cast to a float (to be cast back)."""
    floats = b.float_values()
    if floats and draw(st.sampled_from([True, True, False])):
        return ("astype", draw(st.sampled_from(floats)), draw(st.sampled_from([I32, I64, U8,
                                                                               BOOL])))
    return ("astype", draw(st.sampled_from(b.numeric())), draw(st.sampled_from([F32, F64])))


@st.composite
def image_shapes(draw):
    """(C, H, W) or (N, C, H, W), no extent 0: a value a conv can read."""
    while True:
        s = tuple(draw(st.sampled_from(DIMS)) for _ in range(draw(st.integers(3, 4))))
        if _size(s) <= MAX_SIZE:
            return s


@dataclass(frozen=True)
class Opening:
    """How a program starts: the strategy of its first input's shape, and a function
    (draw, builder) that adds its first steps."""
    shape: st.SearchStrategy
    steps: object


def _conv_opening(draw, b):
    """A conv of the image (of its zero padding, half the time)."""
    base = b.shape[0]
    if draw(st.booleans()):         # a zero padding of the spatial axes, which the conv absorbs
        widths = ((0, 0),) * (len(base) - 2) + tuple(
            (draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
        padded = [d + lo + hi for d, (lo, hi) in zip(base, widths)]
        if _size(padded) <= MAX_SIZE:
            b.add(("pad", 0, widths, "constant", 0))
    step = _draw_conv(draw, b)
    if step is not None:
        b.add(step)


# the programs' kinds: (unary, binary, reduce ops, input and cast dtypes, Python scalars)
KINDS = {
    "float": (UNARY, BINARY, REDUCE, [F32, F64], [0.5, -1.25, 2.0, 3]),
    "float32": (UNARY, BINARY, REDUCE, [F32], [0.5, -1.25, 2.0, 3]),
    "int": (INT_UNARY, INT_BINARY, INT_REDUCE, [I32, I64, U8], [1, 2, -3]),
}


@st.composite
def programs(draw, kind="float", conv_first=False, opening=None):
    """Random programs of `kind` ("float", "float32": float32 inputs and casts only, or
    "int"); with `conv_first` (float), the first input is an image and the first steps a
    conv of it; an `opening` (Opening) draws the first input's shape and the first steps."""
    unary_ops, binary_ops, reduce_ops, dtypes, scalars = KINDS[kind]
    floats = kind != "int"     # matmuls and float casts; integer matmul computes in float64
                               # (a documented deviation from numpy's integer result)
    if conv_first:
        opening = Opening(image_shapes(), _conv_opening)
    base = draw(opening.shape if opening else shapes())
    n_in = draw(st.integers(1, 3))
    in_shapes = [base] + [_broadcast_variant(draw, base) if draw(st.booleans()) else base
                          for _ in range(n_in - 1)]
    mixed = draw(st.booleans()) and draw(st.booleans())
    first = draw(st.sampled_from(dtypes))
    in_dtypes = [draw(st.sampled_from(dtypes)) if mixed else first for _ in in_shapes]
    float_input = not floats and draw(st.booleans())  # an input for float -> int casts
    if float_input:
        in_shapes.append(_broadcast_variant(draw, base) if draw(st.booleans()) else base)
        in_dtypes.append(draw(st.sampled_from([F32, F64])))
    b = _Builder(Program(in_shapes, in_dtypes, seed=draw(st.integers(0, 2**31 - 1))), floats)
    if opening:
        opening.steps(draw, b)
    scalar_ops = SCALAR_OPS if floats else SCALAR_OPS + BITWISE
    choices = ["unary", "unary", "binary", "binary", "scalar", "view", "view", "reduce",
               "reductions", "fork", "join"] + (
        ["matmul", "gemv", "cast", "argreduce", "pool", "conv"] if floats
        else ["bool", "bool", "cast"] + ["float_cast"] * (3 if float_input else 1))
    for _ in range(draw(st.integers(3, 12))):
        step_kind = draw(st.sampled_from(choices))
        if step_kind == "fork":                      # a unary op or matmul as a forked task
            inner = _draw_matmul(draw, b) if floats and draw(st.booleans()) else \
                _draw_elementwise(draw, b, "unary", unary_ops, binary_ops, scalars)
            step = ("fork", inner) if inner is not None else None
        elif step_kind == "matmul":
            step = _draw_matmul(draw, b)
        elif step_kind == "bool":
            step = _draw_bool_step(draw, b)
        elif step_kind == "cast":
            i = draw(st.sampled_from(b.numeric()))
            step = ("astype", i, draw(st.sampled_from(dtypes)))
        elif step_kind == "reductions":
            step = _draw_reductions(draw, b, reduce_ops, unary_ops)
        elif step_kind == "gemv":
            step = _draw_gemv(draw, b)
        elif step_kind == "join":
            step = _draw_join(draw, b, floats)
        elif step_kind == "conv":
            step = _draw_conv(draw, b)
        elif step_kind == "argreduce":               # float argmax/argmin: exact indices
            exact = [i for i in b.exact if b.dtype[i].kind == "f"]
            step = _draw_reduce(draw, b, draw(st.sampled_from(exact)), ["argmax", "argmin"])
        elif step_kind == "float_cast":
            step = _draw_float_cast(draw, b)
        elif step_kind == "pool":
            step = _draw_pool(draw, b)
        elif step_kind in ("unary", "binary", "scalar"):
            step = _draw_elementwise(draw, b, step_kind, unary_ops, binary_ops, scalars,
                                     scalar_ops)
        elif step_kind == "view":
            i = draw(st.integers(0, len(b.shape) - 1))
            step = _draw_view(draw, b, i)
        else:
            step = _draw_reduce(draw, b, draw(st.sampled_from(b.numeric())), reduce_ops)
        if step is None:
            continue
        b.add(step)
    last = len(b.shape) - 1
    b.prog.outputs = [last]
    if draw(st.booleans()) and last > 0:
        b.prog.outputs.append(draw(st.integers(0, last - 1)))
    if draw(st.integers(0, 3)) == 0:         # a value returned twice: still two arrays
        b.prog.outputs.append(draw(st.sampled_from(b.prog.outputs)))
    return b.prog


# ---- the test -------------------------------------------------------------------------------

# ---- error bounds ---------------------------------------------------------------------------
# Every value of a float program gets an absolute error bound per element: what its inputs'
# bounds move it by (first order: the step re-run with one input moved by its bound, each
# input in turn; the worst direction), plus the step's own rounding, ROUNDING_ULP ulp of the
# magnitude of the terms it combines (sum|terms| for sums and matmuls, times sqrt(n) for the
# accumulation order). Inputs are exact. So an output is held to what its own inputs allow,
# not to the largest value anywhere in the program.
ROUNDING_ULP = 4


def _unary_terms(name, v, out):
    """The magnitude a unary step's own rounding errors are relative to."""
    a = np.abs(out)
    if name in ("gelu", "gelu_tanh"):                # 0.5v + 0.5v*erf(..): cancels for v < 0
        return a + np.abs(v)
    if name == "hardswish":                          # v * (v + 3) / 6: v + 3 cancels
        return a + np.abs(v) * (np.abs(v) + 3) / 6
    if name == "hardsigmoid":
        return a + (np.abs(v) + 3) / 6
    if name == "shift":
        return np.abs(v) + 0.5
    if name == "log1p_abs":                          # log of a rounded |v| + 1: eps absolute
        return a + 1.0
    if name in ROW_OPS and v.size:
        n = v.shape[-1]
        z = np.abs(v - v.max(axis=-1, keepdims=True))
        if name == "softmax":                        # exp(z) is relative to |z|; the row sum
            return a * (z + math.sqrt(n) + 1)
        if name == "log_softmax":
            return z + a + math.sqrt(n)
        s = np.sqrt(v.var(axis=-1, keepdims=True) + 1.0)           # layer_norm, eps = 1
        return (np.abs(v) + math.sqrt(n) * np.abs(v).mean(axis=-1, keepdims=True)) / s \
            + a * math.sqrt(n)
    return a


def _rounding_terms(step, vals, out):
    kind = step[0]
    if kind in ("transpose", "slice", "reshape", "broadcast_to", "not", "compare", "logic",
                "where", "concat", "split", "pad", "take", "clip"):
        return np.zeros(out.shape)                   # no arithmetic
    if kind == "cumsum":                             # n additions in order: n * sum|v|
        v, axis = vals[step[1]], step[2]
        n = v.size if axis is None else v.shape[axis]
        return np.cumsum(np.abs(v), axis=axis) * max(n, 1)
    if kind == "unary":
        return _unary_terms(step[1], vals[step[2]], out)
    if kind in ("binary", "scalar", "scalar_arg"):
        if kind == "binary":
            x, y = vals[step[2]], vals[step[3]]
        else:
            x, y = vals[step[2]], step[3]
        if step[1] in ("add", "sub"):
            return np.abs(x) + np.abs(y)
        if step[1] == "logaddexp":                   # cancels like a sum, and adds log 2 or
            return np.abs(x) + np.abs(y) + np.abs(out)   # more: |out| can exceed |x| + |y|
        return np.abs(out)
    if kind == "reduce":
        v, op, axis, keepdims = vals[step[1]], *step[2:]
        if op in ("sum", "mean"):
            n = v.size // max(out.size, 1)
            return getattr(np.abs(v), op)(axis=axis, keepdims=keepdims) * math.sqrt(max(n, 1))
        return np.abs(out)
    if kind == "matmul":
        v, w = np.abs(vals[step[1]]), np.abs(vals[step[2]])
        return (v @ (_swap_last(w) if step[3] else w)) * math.sqrt(max(v.shape[-1], 1))
    if kind == "pool":                               # max picks; an average sums its window
        if step[2] == "max":
            return np.zeros(out.shape)
        opts, (h, w) = dict(step[3]), vals[step[1]].shape[-2:]
        if step[2] == "adaptive":                    # windows of at most ceil(n/out) + 1
            taps = math.prod(-(-n // o) + 1 for n, o in zip((h, w), opts["out"]))
        else:
            taps = math.prod(opts["kernel"])
        return pool_step(step, np.abs(vals[step[1]])) * taps
    if kind == "conv":                               # sum|terms|, times sqrt(terms)
        v = np.abs(vals[step[1]])
        return np.maximum(_conv(step, v, absolute=True) * math.sqrt(conv_weight(step)[0].size),
                          _winograd_terms(step, v))
    return np.abs(out)                               # astype: one rounding


def _winograd_terms(step, v):
    """The rounding terms of a conv that may take Winograd (3x3, stride 1, one group, at
    least MIN_CHANNELS channels each way; its dtype and tile count decide at compile time):
    gamma(C_in + 2 alpha + 4) times the transformed magnitudes (test_conv_winograd.py's
    bound) of each tile size JITCORE_WINOGRAD allows, in units of ROUNDING_ULP ulp; 0 for
    other convs."""
    cout, cin, kh, kw = step[3]
    opts = dict(step[4])
    sizes = [m for m in winograd.VARIANTS if m <= config.get().winograd]
    if (kh, kw) != (3, 3) or opts["stride"] != 1 or opts["dilation"] != 1 or \
            opts["groups"] != 1 or min(cin, cout) < winograd.MIN_CHANNELS or not sizes:
        return 0.0
    w, shift = folded_conv(step)
    x = v if v.ndim == 4 else v[None]
    terms = np.maximum.reduce([winograd_magnitude(x, np.abs(w), opts["padding"], m) *
                               winograd_tol(cin, m) for m in sizes])
    if shift is not None:
        terms = terms + np.abs(shift)[:, None, None] * winograd_tol(cin, 2)
    return terms / (ROUNDING_ULP * ULP[F32])


def _moved(step, vals, errs, out, i):
    """How far out moves, at most, when input i moves by its bound either way."""
    worst = np.zeros(out.shape)
    for sign in (1.0, -1.0):
        moved = dict(vals)
        moved[i] = vals[i] + sign * errs[i]
        worst = np.maximum(worst, np.abs(np.asarray(apply_step(step, moved, True)) - out))
    return worst


def _propagated(step, vals, errs, out):
    """The error out inherits from its inputs' bounds."""
    kind = step[0]
    refs = [i for i in dict.fromkeys(step_inputs(step)) if vals[i].dtype.kind == "f"]
    if out.dtype.kind != "f" or not refs or out.size == 0:
        return np.zeros(out.shape)
    if kind == "where":                              # the bound of the value it picks
        c, x, y = step[1:4]
        return np.asarray(np.where(vals[c], errs[x], errs[y]), dtype=np.float64)
    if kind in ("transpose", "slice", "reshape", "broadcast_to", "astype", "concat", "split",
                "take", "cumsum", "pool"):
        # (errs >= 0: a running sum bounds them; a pool of the bounds: the largest in a max's
        # window, an average's average)
        return np.asarray(apply_step(step, errs, True), dtype=np.float64)
    if kind == "pad":                                # a constant border is exact
        return np.asarray(apply_step(step[:4] + (0,), errs, True), dtype=np.float64)
    if kind == "reduce":
        op, axis, keepdims = step[2:]
        e = errs[step[1]]
        return (e.sum if op == "sum" else e.mean if op == "mean" else e.max)(
            axis=axis, keepdims=keepdims)
    if kind == "conv":                               # linear in its input: conv(|dx|, |w|)
        return _conv(step, errs[step[1]], absolute=True, bias=False)
    if kind == "matmul":                             # |da| @ |b| + |a| @ |db| + |da| @ |db|
        (a, ea), (b, eb) = ((np.abs(vals[i]), errs[i]) for i in step[1:3])
        mm = lambda x, y: x @ (_swap_last(y) if step[3] else y)        # noqa: E731
        return mm(ea, b) + mm(a, eb) + mm(ea, eb)
    if kind == "unary" and step[1] in ROW_OPS:       # worst case over the row, not one shift
        d = errs[step[2]].max(axis=-1, keepdims=True)
        if step[1] == "softmax":
            return 2 * np.abs(out) * d
        if step[1] == "log_softmax":
            return 2 * d
        v = vals[step[2]]
        return 2 * d * (1 + np.abs(out)) / np.sqrt(v.var(axis=-1, keepdims=True) + 1.0)
    if kind == "unary" and step[1] in ("sin", "cos"):   # not monotone: the input's bound
        e = errs[step[2]]                            # may straddle an extremum, so Taylor:
        slope = np.abs(np.cos(vals[step[2]]) if step[1] == "sin" else np.sin(vals[step[2]]))
        return np.minimum(np.minimum(slope * e + e * e / 2, e), 2.0)   # |f'| e + e^2/2
    return sum(_moved(step, vals, errs, out, i) for i in refs)


class Numerics:
    """How jitcore computes a program, for the reference and its bounds: as written (this
    class), or with some steps' operands rounded first (`operands`, e.g. bf16 matmuls) and
    some results rounded on store (`stored`, e.g. bf16 values)."""

    def operands(self, k: int, step, vals: dict, errs: dict) -> tuple:
        """(step, values, error bounds) step k computes from: as written by default (a conv
        step may come back with a function of its weights, see folded_conv)."""
        return step, vals, errs

    def stored(self, k: int, out: np.ndarray, err: np.ndarray) -> np.ndarray:
        """Step k's error from storing its result `out` (err: its error before): none."""
        return np.zeros(out.shape)

    def compared(self, ref: np.ndarray, err: np.ndarray, dtype) -> np.ndarray:
        """The bound on an output of `dtype` against the reference rounded to it: err."""
        return err


def error_bounds(program, inputs, ulp, numerics=Numerics()):
    """(float64 reference outputs, absolute error bound per output element) of a float
    program on float64 copies of its inputs; ulp: the spacing at 1 of its least precise
    dtype."""
    vals = {i: np.asarray(x, np.float64) for i, x in enumerate(inputs)}
    errs = {i: np.zeros(x.shape) for i, x in enumerate(inputs)}
    for k, step in enumerate(program.steps, start=len(inputs)):
        inner = step[1] if step[0] == "fork" else step
        inner, read, read_errs = numerics.operands(k, inner, vals, errs)
        with quiet_numpy():
            out = np.asarray(apply_step(inner, read, True))
            err = np.zeros(out.shape)
            if out.dtype.kind == "f":
                err = _propagated(inner, read, read_errs, out) + ROUNDING_ULP * ulp * \
                    np.broadcast_to(_rounding_terms(inner, read, out), out.shape)
                err = err + numerics.stored(k, out, err)
        vals[k], errs[k] = out, np.where(np.isnan(err), np.inf, err)
    return ([vals[i] for i in program.outputs], [errs[i] for i in program.outputs])


def _float32_anywhere(program) -> bool:
    """Whether the program computes in float32 anywhere (bfloat16 values do too)."""
    return any(_computes_in_float32(d) for d in program.input_dtypes) or any(
        st_[0] == "astype" and _computes_in_float32(st_[2]) for st_ in program.steps)


def _computes_in_float32(dtype) -> bool:
    return np.dtype(dtype) == F32 or np.dtype(dtype).name == "bfloat16"


def jitted(program, **options):
    """The program as a jitted function of its arrays and then its Python scalars (call it
    with `call_args`)."""
    n = len(program.input_shapes)
    return jc.jit(lambda *xs: run(program, xs[:n], scalars=xs[n:]), **options)


def call_args(program, inputs) -> list:
    return [*inputs, *program.scalar_args]


def _jit_and_run(program, inputs, **options):
    """Jit the program (with jit `options`) and run it; a failure names the program and
    shows jitcore's graph."""
    f = jitted(program, **options)
    try:
        got = f(*call_args(program, inputs))
    except Exception as e:
        raise AssertionError(f"jitcore failed on\n{program}\n{type(e).__name__}: {e}\n"
                             f"graph:\n{_graph_text(f, call_args(program, inputs))}") from e
    got = got if isinstance(got, tuple) else (got,)
    for k, g in enumerate(got):                # outputs never alias each other or an input
        for other in got[k + 1:] + tuple(inputs):
            if g is other or np.shares_memory(g, other):
                raise AssertionError(f"output {k} shares memory with another array\n{program}")
    return f, got


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs())
def test_random_programs_match_numpy(program):
    check_program(program)


def program_inputs(program) -> list:
    """Normal values (times 2) of the program's input shapes and dtypes, seeded by it."""
    rng = np.random.default_rng(program.seed)
    return [(rng.standard_normal(s) * 2.0).astype(d)
            for s, d in zip(program.input_shapes, program.input_dtypes)]


def check_program(program, numerics=Numerics(), inputs=None, dtypes=None, **options):
    """Jit a float program (with `options`), run it on `inputs` (default: program_inputs)
    and hold each output to its float64 reference within the error bound of `numerics`, and
    to `dtypes` (default: numpy's on the same inputs); returns the jitted function."""
    inputs = program_inputs(program) if inputs is None else inputs
    least = F32 if _float32_anywhere(program) else F64
    refs, bounds = error_bounds(program, inputs, ULP[least], numerics)
    if dtypes is None:
        with quiet_numpy():                 # numpy on the original dtypes: the result dtypes
            dtypes = [np.asarray(t).dtype for t in run(program, inputs)]
    f, got = _jit_and_run(program, inputs, **options)
    for k, (g, r, t, e) in enumerate(zip(got, refs, dtypes, bounds)):
        try:
            assert_close(g, r, t, rtol=0.0, atol=TOL[least][1] + numerics.compared(r, e, t),
                         msg=f"output {k}")
        except AssertionError as e:
            graph = _graph_text(f, call_args(program, inputs))
            raise AssertionError(f"{e}\nprogram:\n{program}\ngraph:\n{graph}") from None
    return f


@settings(max_examples=40, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs())
def test_random_programs_with_streaming_stores_match_numpy(program):
    """The same programs with the streaming-store threshold at 64 bytes: every elementwise
    output the drawn programs write (at any offset, any dtype) goes through the alignment
    peel, the non-temporal stores and the fence, on 1 thread and on 2 with tiny chunks."""
    with config.override(stream_stores=64):
        test_random_programs_match_numpy.hypothesis.inner_test(program)
        rng = np.random.default_rng(program.seed)
        _same_bits_on_one_and_two_threads(program, [
            (rng.standard_normal(s) * 2.0).astype(d)
            for s, d in zip(program.input_shapes, program.input_dtypes)])


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs(conv_first=True))
def test_random_programs_with_every_conv_on_the_channel_plan_match_numpy(program):
    """The same programs with the conv channel plan's thresholds at zero: every conv of
    constant weights (all the drawn ones; depthwise ones have their own kind) computes with
    output channels along the vectors, whatever its K, plane or channel count (partial
    vectors and tiles, padding read as zeros, the element-wise NCHW epilogue, the batch norm
    folded into it), on 1 thread and on 2."""
    if not any(step[0] == "conv" for step in program.steps):
        return
    from collections import OrderedDict
    from jitcore import compiler
    from jitcore.cache.lru import LRU
    from jitcore.llvm import conv, conv_channels, graph_module
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_channels, "MIN_PRODUCTS", 1)
        patch.setattr(conv, "CHANNEL_PLAN_COST", 0.0)
        patch.setenv("JITCORE_DISK_CACHE", "0")           # compiled anew under the plan
        patch.setattr(compiler, "_CACHE", LRU())
        patch.setattr(graph_module, "_EMITTED", OrderedDict())
        test_random_programs_match_numpy.hypothesis.inner_test(program)
        rng = np.random.default_rng(program.seed)
        _same_bits_on_one_and_two_threads(program, [
            (rng.standard_normal(s) * 2.0).astype(d)
            for s, d in zip(program.input_shapes, program.input_dtypes)])


def _resized(program, inputs, n: int, t: int | None = None) -> list | None:
    """The inputs with the leading extent of every input that shares input 0's replaced by n
    and, with `t`, the second-to-last extent (the sequence axis) of every rank >= 3 input
    that shares input 0's replaced by t (None when input 0 has no such axis of 2 or more)."""
    x0 = inputs[0]
    lead = x0.shape[0] if x0.ndim else 0
    seq = x0.shape[-2] if x0.ndim >= 3 else 0
    if lead < 2 or (t is not None and seq < 2):
        return None
    rng = np.random.default_rng(program.seed + n + (t or 0))

    def shape(x):
        s = list(x.shape)
        if x.ndim and s[0] == lead:
            s[0] = n
        if t is not None and x.ndim >= 3 and s[-2] == seq:
            s[-2] = t
        return tuple(s)
    return [x if shape(x) == x.shape else
            (rng.standard_normal(shape(x)) * 2.0).astype(x.dtype) for x in inputs]


@settings(max_examples=80, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs())
def test_random_programs_with_run_time_extents_match_numpy(program):
    """dynamic=True (the leading extents, and the sequence axis of rank >= 3 inputs,
    run-time values where the program allows): the drawn shapes, then the same program at
    two other leading sizes and at another leading size and sequence length, through the
    same jitted function (where numpy runs the program at that size: a reshape or slice with
    literal extents may not), each held to the float64 reference as the static test is."""
    rng = np.random.default_rng(program.seed)
    inputs = [(rng.standard_normal(s) * 2.0).astype(d)
              for s, d in zip(program.input_shapes, program.input_dtypes)]
    least = F32 if _float32_anywhere(program) else F64
    f = jitted(program, dynamic=True)
    lead = inputs[0].shape[0] if inputs[0].ndim else 0
    seq = inputs[0].shape[-2] if inputs[0].ndim >= 3 else 0
    for size_inputs in [inputs, _resized(program, inputs, lead + 3),
                        _resized(program, inputs, 2), _resized(program, inputs, lead + 1, seq + 2)]:
        if size_inputs is None:
            continue
        try:
            refs, bounds = error_bounds(program, size_inputs, ULP[least])
            with quiet_numpy():
                typed = run(program, size_inputs)
        except (ValueError, IndexError):          # numpy cannot run it at this size either
            continue
        args = call_args(program, size_inputs)
        try:
            got = f(*args)
        except jc.JitcoreError as e:
            if size_inputs is not inputs:     # the program's literal extents may not fit
                with pytest.raises(type(e)):  # a resized input: static code refuses it too
                    jitted(program)(*args)
                continue
            raise AssertionError(f"jitcore (dynamic=True) failed on\n{program}\n"
                                 f"{type(e).__name__}: {e}") from e
        except Exception as e:
            raise AssertionError(f"jitcore (dynamic=True) failed on\n{program}\nat shapes "
                                 f"{[x.shape for x in size_inputs]}\n{type(e).__name__}: {e}")
        got = got if isinstance(got, tuple) else (got,)
        for k, (g, r, t, e) in enumerate(zip(got, refs, typed, bounds)):
            try:
                assert_close(g, r, np.asarray(t).dtype, rtol=0.0, atol=TOL[least][1] + e,
                             msg=f"output {k}")
            except AssertionError as err:
                raise AssertionError(f"{err}\nprogram:\n{program}\nshapes "
                                     f"{[x.shape for x in size_inputs]}\n"
                                     f"{f.explain(*args)}") from None


def integer_program_inputs(program):
    """Integers in [-50, 50) (so shift counts fall on both sides of every range); float
    inputs (cast to integers only) mix NaN, infinities, out-of-range values and fractions."""
    rng = np.random.default_rng(program.seed)
    inputs = []
    for s, d in zip(program.input_shapes, program.input_dtypes):
        if np.dtype(d).kind != "f":
            inputs.append(rng.integers(-50, 50, s).astype(d))
            continue
        pick = rng.integers(0, 3, s)
        x = np.where(pick == 0, rng.choice(CAST_EDGES, s),
                     np.where(pick == 1, rng.uniform(-3e9, 3e9, s), rng.normal(0, 200, s)))
        with quiet_numpy():
            inputs.append(x.astype(d))
    return inputs


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs("int"))
def test_random_integer_programs_match_numpy_exactly(program):
    """int32/int64/uint8 programs with comparisons, logic, bitwise ops, where, casts and bool
    values: numpy on the same dtypes is the exact reference (wrap-around included)."""
    inputs = integer_program_inputs(program)
    with quiet_numpy():
        refs = run(program, inputs)
    f, got = _jit_and_run(program, inputs)
    for k, (g, r) in enumerate(zip(got, refs)):
        try:
            assert_close(g, np.asarray(r), np.asarray(r).dtype, msg=f"output {k}")
        except AssertionError as e:
            graph = _graph_text(f, call_args(program, inputs))
            raise AssertionError(f"{e}\nprogram:\n{program}\ngraph:\n{graph}") from None


# Full reductions of >= 65,536 elements are cut into pieces (passes/split_reductions.py); the
# random programs above (dims up to 17) never get there. Lengths include primes.
SPLIT_SHAPES = [(65_536,), (65_537,), (100_003,), (262_139,), (257, 509), (3, 100_003),
                (131_071, 2), (263, 1_000)]


@st.composite
def split_reductions(draw):
    """A large 1-D/2-D input, read contiguously, transposed or with a step, reduced to one
    element (a float program of two steps, checked like the random programs)."""
    shape = draw(st.sampled_from(SPLIT_SHAPES))
    layout = draw(st.sampled_from(["contiguous", "transposed", "strided"]))
    if layout == "strided":                          # every other element of the first axis
        step = draw(st.sampled_from([2, -2]))
        prog = Program([(2 * shape[0],) + shape[1:]], [draw(st.sampled_from([F32, F64]))])
        prog.steps.append(("slice", 0, (slice(None, None, step),) + (slice(None),) *
                           (len(shape) - 1)))
    else:
        prog = Program([shape], [draw(st.sampled_from([F32, F64]))])
        prog.steps.append(("transpose", 0, tuple(reversed(range(len(shape))))) if layout ==
                          "transposed" else ("reshape", 0, shape))
    prog.steps.append(("reduce", 1, draw(st.sampled_from(REDUCE + ["argmax", "argmin"])),
                       None, draw(st.booleans())))
    prog.outputs = [2]
    prog.seed = draw(st.integers(0, 2**31 - 1))
    return prog


@settings(max_examples=12, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(split_reductions())
def test_random_split_full_reductions_match_numpy(program):
    test_random_programs_match_numpy.hypothesis.inner_test(program)


@contextmanager
def tiny_chunks():
    """Every kernel's range loop split into chunks of a few iterations across the pool."""
    saved, work.MIN_CHUNK_WORK = work.MIN_CHUNK_WORK, 64
    try:
        yield
    finally:
        work.MIN_CHUNK_WORK = saved


def _same_bits_on_one_and_two_threads(program, inputs):
    with tiny_chunks():
        one = jitted(program, num_threads=1)(*call_args(program, inputs))
        f = jitted(program, num_threads=2)
        two = f(*call_args(program, inputs))
    one, two = (r if isinstance(r, tuple) else (r,) for r in (one, two))
    for k, (a, b) in enumerate(zip(one, two)):
        if not (a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")):
            graph = _graph_text(f, call_args(program, inputs))
            raise AssertionError(f"output {k} differs between 1 and 2 threads\nprogram:\n"
                                 f"{program}\ngraph:\n{graph}")


THREADS_SETTINGS = settings(max_examples=50, deadline=None, database=None,
                            suppress_health_check=[HealthCheck.too_slow,
                                                   HealthCheck.data_too_large,
                                                   HealthCheck.filter_too_much])


@THREADS_SETTINGS
@given(programs())
def test_random_programs_give_the_same_bits_on_one_and_two_threads(program):
    """Chunked over two threads (tiny chunks) and run on one, a program gives identical bits
    (each output element is computed by one thread in a fixed order), and numpy's values."""
    rng = np.random.default_rng(program.seed)
    _same_bits_on_one_and_two_threads(program, [
        (rng.standard_normal(s) * 2.0).astype(d)
        for s, d in zip(program.input_shapes, program.input_dtypes)])
    test_random_programs_match_numpy.hypothesis.inner_test(program)


@THREADS_SETTINGS
@given(programs("int"))
def test_random_integer_programs_give_the_same_bits_on_one_and_two_threads(program):
    _same_bits_on_one_and_two_threads(program, integer_program_inputs(program))


def _graph_text(f, inputs):
    try:
        return f.graph(*inputs)
    except Exception as e:               # the trace itself failed
        return f"<no graph: {type(e).__name__}: {e}>"

"""Differential testing on random programs: hypothesis builds random graphs of elementwise ops
(with broadcasting between compatible shapes, including size-1 and odd dims), views
(transpose, slicing with any step, reshape, expand/broadcast) and reductions (random axes,
keepdims) over float32/float64 inputs. The same program runs through numpy (float64) and
through jitcore; results are compared with a tolerance that follows the magnitudes of the
intermediate values. A failure prints the program and jitcore's graph text."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitcore as jc
from helpers import EPS, F32, F64, TOL, assert_close

DIMS = [1, 2, 3, 5, 7, 16, 17]
MAX_SIZE = 3000

# continuous ops only (a tiny rounding difference must not flip a discrete choice)
UNARY = ["neg", "abs", "tanh", "sigmoid", "relu", "sin", "cos", "exp_neg_abs", "log1p_abs",
         "sqrt_abs1", "gelu", "silu", "scale", "shift", "leaky_where"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div_safe", "where_max"]
REDUCE = ["sum", "mean", "max", "min"]
# integer programs: exact ops (wrap-around included), compared for equality
INT_UNARY = ["neg", "abs", "relu", "scale3", "shift2"]
INT_BINARY = ["add", "sub", "mul", "maximum", "minimum", "where_max", "floordiv", "mod"]
INT_REDUCE = ["sum", "max", "min"]
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)


def _is_np(v):
    return isinstance(v, (np.ndarray, np.generic))


def unary(name, v):
    """One op on a numpy array (the float64 reference) or on a jitcore tracer."""
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
    if name == "scale":
        return v * 0.75
    if name == "scale3":
        return v * 3
    if name == "shift2":
        return v - 2
    if name == "shift":
        return v - 0.5
    if name == "leaky_where":
        return np.where(v > 0, v, v * 0.1)
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-v)) if _is_np(v) else jc.sigmoid(v)
    if name == "relu":
        return np.maximum(v, 0) if _is_np(v) else jc.relu(v)
    if name == "silu":
        return v / (1.0 + np.exp(-v)) if _is_np(v) else jc.silu(v)
    if name == "gelu":
        if _is_np(v):
            erf = np.vectorize(math.erf, otypes=[np.float64])(v / math.sqrt(2)).astype(v.dtype)
            return 0.5 * v * (1.0 + erf)
        return jc.gelu(v)
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
    if name in ("floordiv", "mod"):                 # zero divisors included: 0, never a trap
        with np.errstate(divide="ignore", over="ignore"):
            return a // b if name == "floordiv" else a % b
    raise AssertionError(name)


@dataclass
class Program:
    input_shapes: list
    input_dtypes: list
    steps: list = field(default_factory=list)     # (kind, args...) referring to earlier values
    outputs: list = field(default_factory=list)
    seed: int = 0

    def __repr__(self):
        lines = ["inputs: " + ", ".join(f"v{i}: {np.dtype(d).name}{list(s)}" for i, (s, d)
                                         in enumerate(zip(self.input_shapes, self.input_dtypes)))]
        k = len(self.input_shapes)
        for i, st_ in enumerate(self.steps):
            lines.append(f"v{k + i} = {st_[0]}{st_[1:]}")
        lines.append(f"return {', '.join(f'v{o}' for o in self.outputs)}  (seed {self.seed})")
        return "\n".join(lines)


def apply_step(step, vals):
    kind = step[0]
    if kind == "unary":
        return unary(step[1], vals[step[2]])
    if kind == "binary":
        return binary(step[1], vals[step[2]], vals[step[3]])
    if kind == "scalar":                       # a Python scalar on the left or the right
        op, i, c, left = step[1:]
        return binary(op, c, vals[i]) if left else binary(op, vals[i], c)
    v = vals[step[1]]
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
        return getattr(v, op)(axis=axis, keepdims=keepdims)
    if kind == "matmul_t":                     # v @ w.T: a GEMM, its epilogue fused maybe
        return v @ vals[step[2]].T
    raise AssertionError(kind)


def run(program, inputs, record=None):
    vals = list(inputs)
    for step in program.steps:
        v = apply_step(step, vals)
        if _is_np(v):
            v = np.asarray(v)
            if record is not None and v.size:
                record.append(float(np.max(np.abs(v))))
        vals.append(v)
    return tuple(vals[i] for i in program.outputs)


# ---- the strategy ---------------------------------------------------------------------------

def _size(shape):
    return math.prod(shape)


@st.composite
def shapes(draw):
    ndim = draw(st.integers(1, 3))
    while True:
        s = tuple(draw(st.sampled_from(DIMS)) for _ in range(ndim))
        if _size(s) <= MAX_SIZE:
            return s


def _broadcast_variant(draw, shape):
    """A shape that broadcasts with `shape`: some dims 1, maybe fewer leading dims."""
    drop = draw(st.integers(0, len(shape) - 1))
    s = list(shape[drop:])
    for i in range(len(s)):
        if draw(st.booleans()) and draw(st.booleans()):
            s[i] = 1
    return tuple(s)


def _broadcastable(sa, sb):
    try:
        out = np.broadcast_shapes(sa, sb)
    except ValueError:
        return None
    return out if _size(out) <= MAX_SIZE else None


def _slice_for(draw, n):
    step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
    start = draw(st.integers(0, n - 1))
    if step > 0:
        stop = draw(st.integers(start + 1, n))
        return slice(start, stop, step)
    stop = draw(st.integers(-1, start - 1))
    return slice(start, None if stop < 0 else stop, step)


def _reshape_target(draw, shape):
    options = [(-1,)]
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


@st.composite
def programs(draw, kind="float"):
    unary_ops, binary_ops, reduce_ops, dtypes, scalars = {
        "float": (UNARY, BINARY, REDUCE, [F32, F64], [0.5, -1.25, 2.0, 3]),
        "int": (INT_UNARY, INT_BINARY, INT_REDUCE, [I32, I64], [1, 2, -3]),
    }[kind]
    matmuls = kind == "float"          # integer matmul computes in float64 (a documented
                                       # deviation from numpy's integer result)
    base = draw(shapes())
    n_in = draw(st.integers(1, 3))
    in_shapes = [base] + [_broadcast_variant(draw, base) if draw(st.booleans()) else base
                          for _ in range(n_in - 1)]
    mixed = draw(st.booleans()) and draw(st.booleans())
    first = draw(st.sampled_from(dtypes))
    in_dtypes = [draw(st.sampled_from(dtypes)) if mixed else first for _ in in_shapes]
    prog = Program(in_shapes, in_dtypes, seed=draw(st.integers(0, 2**31 - 1)))
    shp = list(in_shapes)
    for _ in range(draw(st.integers(3, 12))):
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "scalar", "view",
                                     "view", "reduce"] + (["matmul"] if matmuls else [])))
        i = draw(st.integers(0, len(shp) - 1))
        s = shp[i]
        if kind == "matmul":
            partners = [j for j in range(len(shp)) if len(s) == 2 and len(shp[j]) == 2
                        and shp[j][1] == s[1]]
            if not partners:
                continue
            j = draw(st.sampled_from(partners))
            prog.steps.append(("matmul_t", i, j))
            shp.append((s[0], shp[j][0]))
        elif kind == "unary":
            prog.steps.append(("unary", draw(st.sampled_from(unary_ops)), i))
            shp.append(s)
        elif kind == "binary":
            partners = [j for j in range(len(shp)) if _broadcastable(s, shp[j]) is not None]
            j = draw(st.sampled_from(partners))
            if draw(st.booleans()):
                i, j = j, i
            prog.steps.append(("binary", draw(st.sampled_from(binary_ops)), i, j))
            shp.append(_broadcastable(shp[i], shp[j]))
        elif kind == "scalar":
            op = draw(st.sampled_from(["add", "sub", "mul", "maximum", "minimum"]))
            c = draw(st.sampled_from(scalars))
            prog.steps.append(("scalar", op, i, c, draw(st.booleans())))
            shp.append(s)
        elif kind == "view":
            if len(s) == 0:
                prog.steps.append(("reshape", i, (1,)))
                shp.append((1,))
                continue
            view = draw(st.sampled_from(["transpose", "slice", "reshape", "broadcast_to"]))
            if view == "transpose" and len(s) >= 2:
                perm = tuple(draw(st.permutations(range(len(s)))))
                prog.steps.append(("transpose", i, perm))
                shp.append(tuple(s[p] for p in perm))
            elif view == "slice":
                index = tuple(_slice_for(draw, d) for d in s)
                prog.steps.append(("slice", i, index))
                shp.append(tuple(len(range(*sl.indices(d))) for sl, d in zip(index, s)))
            elif view == "broadcast_to" and (1 in s or len(s) < 3):
                target = tuple(draw(st.sampled_from([3, 5])) if d == 1 else d for d in s)
                if len(target) < 3 and draw(st.booleans()):
                    target = (draw(st.sampled_from([2, 3])),) + target
                if _size(target) > MAX_SIZE:
                    target = s
                prog.steps.append(("broadcast_to", i, target))
                shp.append(target)
            else:
                target = _reshape_target(draw, s)
                prog.steps.append(("reshape", i, target))
                shp.append((_size(s),) if target == (-1,) else target)
        else:
            if len(s) == 0:
                continue
            op = draw(st.sampled_from(reduce_ops))
            if draw(st.booleans()) and draw(st.booleans()):
                axis = None
            else:
                axes = draw(st.lists(st.integers(-len(s), len(s) - 1), min_size=1,
                                     max_size=len(s), unique_by=lambda a: a % len(s)))
                axis = axes[0] if len(axes) == 1 else tuple(axes)
            keepdims = draw(st.booleans())
            prog.steps.append(("reduce", i, op, axis, keepdims))
            shp.append(np.empty(s).sum(axis=axis, keepdims=keepdims).shape)
    last = len(shp) - 1
    prog.outputs = [last]
    if draw(st.booleans()) and last > 0:
        prog.outputs.append(draw(st.integers(0, last - 1)))
    return prog


# ---- the test -------------------------------------------------------------------------------

def _max_reduced(program):
    """The largest number of elements folded into one value by any reduction or matmul."""
    n = 1
    vals = [np.zeros(s) for s in program.input_shapes]
    for step in program.steps:
        out = np.asarray(apply_step(step, vals))
        if step[0] == "reduce":
            n = max(n, vals[step[1]].size // max(out.size, 1))
        if step[0] == "matmul_t":
            n = max(n, vals[step[1]].shape[1])
        vals.append(out)
    return n


def _jit_and_run(program, inputs):
    """Jit the program and run it; a failure names the program and shows jitcore's graph."""
    f = jc.jit(lambda *xs: run(program, xs))
    try:
        got = f(*inputs)
    except Exception as e:
        raise AssertionError(f"jitcore failed on\n{program}\n{type(e).__name__}: {e}\n"
                             f"graph:\n{_graph_text(f, inputs)}") from e
    return f, (got if isinstance(got, tuple) else (got,))


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs())
def test_random_programs_match_numpy(program):
    rng = np.random.default_rng(program.seed)
    inputs = [(rng.standard_normal(s) * 2.0).astype(d)
              for s, d in zip(program.input_shapes, program.input_dtypes)]
    scales = [float(np.max(np.abs(x))) for x in inputs if x.size]
    with np.errstate(all="ignore"):
        refs = run(program, [x.astype(np.float64) for x in inputs], record=scales)
        typed = run(program, inputs)            # numpy on the original dtypes: the result dtypes
    f, got = _jit_and_run(program, inputs)
    least = F32 if F32 in program.input_dtypes else F64
    n = _max_reduced(program)
    scale = max(scales, default=1.0)
    rtol = TOL[least][0] * 10
    atol = TOL[least][1] + 64 * EPS[least] * scale * math.sqrt(n) * 4
    for k, (g, r, t) in enumerate(zip(got, refs, typed)):
        try:
            assert_close(g, np.asarray(r), np.asarray(t).dtype, rtol=rtol, atol=atol,
                         msg=f"output {k}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nprogram:\n{program}\ngraph:\n{_graph_text(f, inputs)}"
                                 ) from None


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(programs("int"))
def test_random_integer_programs_match_numpy_exactly(program):
    """int32/int64 programs: numpy on the same dtypes is the exact reference (wrap-around
    included)."""
    rng = np.random.default_rng(program.seed)
    inputs = [rng.integers(-50, 50, s).astype(d)
              for s, d in zip(program.input_shapes, program.input_dtypes)]
    with np.errstate(all="ignore"):
        refs = run(program, inputs)
    f, got = _jit_and_run(program, inputs)
    for k, (g, r) in enumerate(zip(got, refs)):
        try:
            assert_close(g, np.asarray(r), np.asarray(r).dtype, msg=f"output {k}")
        except AssertionError as e:
            raise AssertionError(f"{e}\nprogram:\n{program}\ngraph:\n{_graph_text(f, inputs)}"
                                 ) from None


def _graph_text(f, inputs):
    try:
        return f.graph(*inputs)
    except Exception as e:               # the trace itself failed
        return f"<no graph: {type(e).__name__}: {e}>"

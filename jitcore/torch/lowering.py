"""ATen -> jitcore: one small function per core ATen op, in the table LOWERINGS.

The elementwise ATen ops whose semantics are a jitcore op's are named in that op's row of
the spelling table (jitcore/ops/spellings.py) and lowered here by the row's style; the rest are
written by hand below, each where torch's semantics differ (alpha, rounding modes, torch's
dtype rules for where and clamp, reductions over dims).

Each lowering takes the node's arguments with its tensor arguments already jitcore Tracers
(Python scalars, lists and None stay as they are) and returns a Tracer, or a tuple of them for
ops with several results (native_layer_norm, split_with_sizes). `out` is the node's result as
torch computed it at export time (a FakeTensor, or a tuple of them): shapes and dtypes to match.

An entry names the jitcore ops it needs (`needs=("conv2d",)`): while one of them does not exist in
this jitcore (`getattr(jc, name, None) is None`), the op counts as unsupported and runs in torch.
An entry may also have a `check(node)`: arguments the lowering does not handle (a 3-d
convolution, say) make that node unsupported.
"""
from __future__ import annotations

import contextlib
import math
import operator
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

import jitcore as jc
from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.errors import ShapeError
from jitcore.ir.ops import info
from jitcore.ir.sizes import Size, shape_text
from jitcore.ops.spellings import SPELLINGS, Spelling
from jitcore.ops.tracer import Tracer, wrap

from . import convolution, resize

aten = torch.ops.aten

# (bfloat16 by name: numpy's is ml_dtypes', optional and imported on first use)
TORCH_TO_NUMPY = {torch.float32: np.float32, torch.float64: np.float64, torch.int32: np.int32,
                  torch.int64: np.int64, torch.uint8: np.uint8, torch.bool: np.bool_}
if dt.bfloat16 in dt.available():
    TORCH_TO_NUMPY[torch.bfloat16] = "bfloat16"


def tensor_array(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's memory (never a copy); bfloat16 tensors, which torch
    cannot hand to numpy, as their int16 bits relabelled ml_dtypes.bfloat16."""
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(dt.bfloat16.np)
    return t.numpy()


def array_tensor(a: np.ndarray) -> torch.Tensor:
    """A tensor of a numpy array's memory (never a copy; bfloat16 through its int16 bits)."""
    # (the kind first: ml_dtypes' bfloat16 is of kind V, and dtype.name costs ~4 us, once
    # per output of every call)
    if a.dtype.kind == "V" and a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


@dataclass(frozen=True)
class Lowering:
    fn: Callable
    needs: tuple = ()                   # jitcore ops the lowering calls that may be missing
    check: Callable | None = None      # node -> None if handled, else why not (a string)


LOWERINGS: dict = {}


def lower(*targets, needs=(), check=None):
    def register(fn):
        for t in targets:
            LOWERINGS[t] = Lowering(fn, tuple(needs), check)
        return fn
    return register


def missing_ops(entry: Lowering) -> list:
    """The jitcore ops this lowering needs that this jitcore does not have (yet)."""
    return [n for n in entry.needs if getattr(jc, n, None) is None]


# ---- helpers -----------------------------------------------------------------------------------
def np_dtype(t) -> np.dtype:
    return dt.as_dtype(TORCH_TO_NUMPY[t.dtype]).np


def is_float(dtype: np.dtype) -> bool:
    """A float dtype, bfloat16 included (numpy's kind for ml_dtypes' bfloat16 is "V")."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def as_dtype(x, dtype):
    """x (a Tracer or a Python scalar) in `dtype`: torch computes an op in its result dtype,
    with torch's conversions (a Python int wraps into an integer dtype; float -> uint8
    wraps), not numpy's (OverflowError; saturation in jitcore)."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer) and x.dtype != dtype:
        if is_float(x.dtype) and dtype == np.uint8:
            x = jc.astype(x, np.int64)      # torch: truncate, then keep the low 8 bits
        return jc.astype(x, dtype)
    if isinstance(x, int) and not isinstance(x, bool) and dtype.kind in "iu":
        return wrap_int(x, dtype)
    return x


def wrap_int(value: int, dtype: np.dtype) -> int:
    """A Python int as torch converts it to an integer dtype: its low bits (`u8 + 300` adds
    44), where numpy raises OverflowError."""
    bits = 8 * dtype.itemsize
    value %= 1 << bits
    return value - (1 << bits) if dtype.kind == "i" and value >> (bits - 1) else value


def _axis(dim, ndim):
    return dim + ndim if dim < 0 else dim


def _axes(dims, ndim):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None                                     # torch: all axes
    dims = dims if isinstance(dims, (list, tuple)) else [dims]
    return tuple(_axis(d, ndim) for d in dims)


# ---- elementwise and reductions: generated from the spelling table -------------------------------
# A row of jitcore/ops/spellings.py names the ATen overloads whose semantics are its op's; the
# lowering of each is made here by the row's style. torch computes an op in its result dtype,
# so the operands are converted to it first (comparisons: to the dtype they promote to).
def _unary(jc_fn):
    def fn(out, x):
        return as_dtype(jc_fn(as_dtype(x, np_dtype(out))), np_dtype(out))
    return fn


def _binary(jc_fn, compute_in_result=True):
    """A binary op computed, as torch does, in the result dtype (comparisons: in the dtype
    their operands promote to)."""
    def fn(out, a, b, **kw):
        if compute_in_result:
            dtype = np_dtype(out)
        else:
            metas = [x for x in (a, b) if isinstance(x, Tracer)]
            dtype = np.result_type(*[m.dtype for m in metas])
        return jc_fn(as_dtype(a, dtype), as_dtype(b, dtype))
    return fn


def _reduce(jc_fn):
    """sum/mean/prod/amax/amin over `dims` (None or []: all), in torch's result dtype; their
    .default overloads (all axes) too."""
    def fn(out, x, dims=None, keepdim=False, dtype=None):
        want = np_dtype(out)
        x = as_dtype(x, want) if is_float(want) or dtype is not None else x
        return as_dtype(jc_fn(x, axis=_axes(dims, x.ndim), keepdims=keepdim), want)
    return fn


def _index_reduce(jc_fn):
    """argmax/argmin over one dim (None: the flattened tensor), torch's int64 indices."""
    def fn(out, x, dim=None, keepdim=False):
        return as_dtype(jc_fn(x, axis=dim, keepdims=keepdim), np.int64)
    return fn


STYLES = {
    "unary": _unary,
    "binary": _binary,
    "compare": lambda jc_fn: _binary(jc_fn, compute_in_result=False),
    "predicate": lambda jc_fn: lambda out, x: jc_fn(x),        # bool of the input as it is
    "direct": lambda jc_fn: lambda out, *args, **kw: jc_fn(*args, **kw),   # same arguments
    "reduce": _reduce,
    "index_reduce": _index_reduce,
}


def style_of(row: Spelling) -> str:
    """How a row's ATen overloads are lowered: its own `torch` style, else by its kind."""
    if row.torch is not None:
        return row.torch
    record = info(row.op) if row.op is not None else None     # None: a decomposition
    if row.reduction:
        return "index_reduce" if record.index_reduction else "reduce"
    if row.arity == 1:
        return "unary"
    return "compare" if record and (record.compare or record.logical) else "binary"


def aten_overload(name: str):
    """torch.ops.aten.<op>.<overload> for "op.overload"."""
    packet, overload = name.split(".")
    return getattr(getattr(aten, packet), overload)


for _row in SPELLINGS:
    if _row.aten:
        lower(*map(aten_overload, _row.aten))(STYLES[style_of(_row)](getattr(jc, _row.name)))


# ---- elementwise, by hand where torch's semantics differ from the jitcore op's ------------------
@lower(aten.logical_xor.default)
def _logical_xor(out, a, b):
    # no jitcore op: != of the operands as bools
    return jc.not_equal(as_dtype(a, np.bool_), as_dtype(b, np.bool_))


# add and sub take torch's `alpha` (b scaled first)
@lower(aten.add.Tensor, aten.add.Scalar)
def _add(out, a, b, alpha=1):
    dtype = np_dtype(out)
    return jc.add(as_dtype(a, dtype), as_dtype(b if alpha == 1 else b * alpha, dtype))


@lower(aten.sub.Tensor, aten.sub.Scalar)
def _sub(out, a, b, alpha=1):
    dtype = np_dtype(out)
    return jc.sub(as_dtype(a, dtype), as_dtype(b if alpha == 1 else b * alpha, dtype))


def _div_mode_check(node):
    mode = node.kwargs.get("rounding_mode")
    return None if mode in (None, "floor") else f"rounding_mode={mode!r}"


# torch's division with a rounding mode: floor is floor_divide; "trunc" (C's integer division)
# has no jitcore op and runs in torch
@lower(aten.div.Tensor_mode, aten.div.Scalar_mode, check=_div_mode_check)
def _div_mode(out, a, b, rounding_mode=None):
    dtype = np_dtype(out)
    a, b = as_dtype(a, dtype), as_dtype(b, dtype)
    if rounding_mode == "floor":
        return jc.floor_divide(a, b)
    return jc.div(a, b)


# ATen ops waiting for their jitcore op: until jc.<name> exists they run in torch (explain()
# says "needs jc.<name>"); give the op a row in the spelling table instead once it exists
for _target, _name in [(aten.tan.default, "tan")]:
    lower(_target, needs=(_name,))(
        lambda out, x, _n=_name: _unary(getattr(jc, _n))(out, x))


# clamp: either bound may be None, both converted to torch's result dtype (numpy's clip
# promotes them instead)
@lower(aten.clamp.default, aten.clamp.Tensor)
def _clamp(out, x, min=None, max=None):             # noqa: A002 (torch's names)
    dtype = np_dtype(out)
    x = as_dtype(x, dtype)
    if min is not None:
        x = jc.maximum(x, as_dtype(min, dtype))
    if max is not None:
        x = jc.minimum(x, as_dtype(max, dtype))
    return x


# where: the branches in torch's result dtype (jc.where promotes them by numpy's rules)
@lower(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def _where(out, cond, a, b):
    dtype = np_dtype(out)
    return jc.where(cond, as_dtype(a, dtype), as_dtype(b, dtype))


@lower(aten._to_copy.default)
def _to_copy(out, x, **kw):
    return as_dtype(x, np_dtype(out))


@lower(aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default,
       aten.detach.default)
def _identity(out, x, **kw):
    return x


@lower(aten.full_like.default)
def _full_like(out, x, fill_value, **kw):
    return full(out, fill_value)


def full(out, value):
    """A tensor of torch's result shape and dtype filled with `value` (a broadcast scalar)."""
    dtype = np_dtype(out)
    return jc.broadcast_to(wrap(build.const(value, dtype)), shape_of(out))


LOWERINGS[aten.zeros_like.default] = Lowering(lambda out, x, **kw: full(out, 0))
LOWERINGS[aten.ones_like.default] = Lowering(lambda out, x, **kw: full(out, 1))
LOWERINGS[aten.full.default] = Lowering(lambda out, size, value, **kw: full(out, value))
LOWERINGS[aten.scalar_tensor.default] = Lowering(lambda out, value, **kw: full(out, value))


# ---- views and shapes --------------------------------------------------------------------------
@lower(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(out, x, shape):
    return jc.reshape(x, shape_of(out))


@lower(aten.permute.default)
def _permute(out, x, dims):
    return jc.transpose(x, tuple(_axis(d, x.ndim) for d in dims))


@lower(aten.transpose.int)
def _transpose(out, x, d0, d1):
    axes = list(range(x.ndim))
    d0, d1 = _axis(d0, x.ndim), _axis(d1, x.ndim)
    axes[d0], axes[d1] = axes[d1], axes[d0]
    return jc.transpose(x, tuple(axes))


@lower(aten.t.default)
def _t(out, x):
    return jc.transpose(x) if x.ndim == 2 else x


@lower(aten.expand.default)
def _expand(out, x, size, implicit=False):
    return jc.broadcast_to(x, shape_of(out))


@lower(aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def _reshape_to_out(out, x, *args):
    return jc.reshape(x, shape_of(out))


@lower(aten.select.int)
def _select(out, x, dim, index):
    idx = [slice(None)] * x.ndim
    idx[_axis(dim, x.ndim)] = index
    return x[tuple(idx)]


@lower(aten.slice.Tensor)
def _slice(out, x, dim=0, start=None, end=None, step=1):
    idx = [slice(None)] * x.ndim
    size = x.shape[_axis(dim, x.ndim)]
    start = 0 if start is None else start
    end = size if end is None else end          # python slicing clamps huge ends as torch
    idx[_axis(dim, x.ndim)] = slice(start, end, step)
    return x[tuple(idx)]


@lower(aten.split_with_sizes.default, aten.split.Tensor)
def _split(out, x, sizes, dim=0):
    axis = _axis(dim, x.ndim)
    if isinstance(sizes, int):                         # split.Tensor: chunks of `sizes`
        sizes = [shape_of(t)[axis] for t in out]
    parts, start = [], 0
    for s in sizes:
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(start, start + s)
        parts.append(x[tuple(idx)])
        start += s
    return tuple(parts)


@lower(aten.cat.default, needs=("concatenate",))
def _cat(out, xs, dim=0):
    dtype = np_dtype(out)
    xs = [as_dtype(x, dtype) for x in xs if x.shape != (0,)]    # torch skips empty 1-d
    return jc.concatenate(xs, axis=_axis(dim, out.dim()))


# ---- contractions ------------------------------------------------------------------------------
@lower(aten.mm.default, aten.bmm.default)
def _mm(out, a, b):
    return jc.matmul(a, b)


@lower(aten.addmm.default)
def _addmm(out, bias, a, b, beta=1, alpha=1):
    y = jc.matmul(a, b)
    if alpha != 1:
        y = y * alpha
    return y + (bias if beta == 1 else bias * beta)


# ---- reductions and row-wise composites --------------------------------------------------------
# (sum, mean, prod, amax, amin, argmax, argmin: from the spelling table, above)
def _value_and_index(reduce_fn, arg_fn):
    """max.dim / min.dim: the values and their int64 indices along `dim`."""
    def fn(out, x, dim, keepdim=False):
        axis = _axis(dim, x.ndim)
        return (reduce_fn(x, axis=axis, keepdims=keepdim),
                as_dtype(arg_fn(x, axis=axis, keepdims=keepdim), np.int64))
    return fn


lower(aten.max.dim)(_value_and_index(jc.max, jc.argmax))
lower(aten.min.dim)(_value_and_index(jc.min, jc.argmin))


@lower(aten.any.dim, aten.any.dims, aten.any.default)
def _any(out, x, dims=None, keepdim=False):
    flag = jc.not_equal(x, 0) if x.dtype != np.bool_ else x
    return jc.max(flag, axis=_axes(dims, x.ndim), keepdims=keepdim)


@lower(aten.var.correction)
def _var(out, x, dims=None, correction=None, keepdim=False):
    axes = _axes(dims, x.ndim)
    n = math.prod(x.shape) if axes is None else math.prod(x.shape[a] for a in axes)
    d = x - jc.mean(x, axis=axes, keepdims=True)
    c = 1 if correction is None else correction
    return jc.sum(d * d, axis=axes, keepdims=keepdim) / (n - c)


@lower(aten._softmax.default)
def _softmax(out, x, dim, half_to_float=False):
    return jc.softmax(x, axis=dim)


@lower(aten._log_softmax.default)
def _log_softmax(out, x, dim, half_to_float=False):
    return jc.log_softmax(x, axis=dim)


@lower(aten.native_layer_norm.default)
def _layer_norm(out, x, normalized_shape, weight, bias, eps):
    k = len(normalized_shape)
    lead, inner = x.shape[:x.ndim - k], math.prod(normalized_shape)
    flat = jc.reshape(x, lead + (inner,))
    w = None if weight is None else jc.reshape(weight, (inner,))
    b_ = None if bias is None else jc.reshape(bias, (inner,))
    y = jc.reshape(jc.layer_norm(flat, w, b_, eps=eps), x.shape)
    # mean and 1/std, as torch returns them (usually unused: dead in the jitcore graph)
    mean = jc.mean(flat, axis=-1, keepdims=True)
    d = flat - mean
    rstd = jc.rsqrt(jc.mean(d * d, axis=-1, keepdims=True) + eps)
    keep = lead + (1,) * k
    return y, jc.reshape(mean, keep), jc.reshape(rstd, keep)


@lower(aten.native_group_norm.default)
def _group_norm(out, x, weight, bias, n, channels, spatial, groups, eps):
    """Group norm over (C / groups) channels x the spatial axes, then the per-channel affine;
    also torch's mean and 1/std per (N, groups) (usually unused: dead in the graph)."""
    shape = x.shape
    flat = jc.reshape(x, (shape[0], groups, math.prod(shape[1:]) // groups))
    mean = jc.mean(flat, axis=-1, keepdims=True)
    d = flat - mean
    rstd = jc.rsqrt(jc.mean(d * d, axis=-1, keepdims=True) + eps)
    y = jc.reshape(d * rstd, shape)
    per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    if weight is not None:
        y = y * jc.reshape(weight, per_channel)
    if bias is not None:
        y = y + jc.reshape(bias, per_channel)
    return y, jc.reshape(mean, (shape[0], groups)), jc.reshape(rstd, (shape[0], groups))


@lower(aten.linalg_vector_norm.default)
def _vector_norm(out, x, ord=2, dim=None, keepdim=False, dtype=None):   # noqa: A002
    """The p-norm over `dim` (None: all axes): 2 as sqrt(sum(x*x)), 1, inf, -inf, 0 and any
    other p as torch defines them."""
    x = as_dtype(x, np_dtype(out))
    axes, a = _axes(dim, x.ndim), jc.abs(x)
    if ord == 2:
        return jc.sqrt(jc.sum(x * x, axis=axes, keepdims=keepdim))
    if ord == 1:
        return jc.sum(a, axis=axes, keepdims=keepdim)
    if ord == math.inf:
        return jc.max(a, axis=axes, keepdims=keepdim)
    if ord == -math.inf:
        return jc.min(a, axis=axes, keepdims=keepdim)
    if ord == 0:
        return jc.sum(as_dtype(jc.not_equal(x, 0), x.dtype), axis=axes, keepdims=keepdim)
    return jc.power(jc.sum(jc.power(a, ord), axis=axes, keepdims=keepdim), 1.0 / ord)


# ---- indexing ----------------------------------------------------------------------------------
@lower(aten.embedding.default, needs=("take",))
def _embedding(out, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """torch raises IndexError for a negative id, where jc.take (numpy's rule) would count
    it from the end: a negative id is moved below -V, out of take's range, so the kernel's
    check raises IndexError (naming the id minus V)."""
    return jc.take(weight, no_negative_ids(indices, weight.shape[0]), axis=0)


def no_negative_ids(indices, extent: int):
    """Indices for jc.take where a negative one is out of range, as in torch's embedding
    and index_select (take would count it from the end)."""
    return jc.where(indices < 0, indices - extent, indices)


@lower(aten.index_select.default, needs=("take",))
def _index_select(out, x, dim, index):
    axis = _axis(dim, x.ndim)
    return jc.take(x, no_negative_ids(index, x.shape[axis]), axis=axis)


def _index_check(node):
    indices = node.args[1]
    used = [i for i in indices if i is not None]
    return None if len(used) == 1 else "more than one index tensor"


@lower(aten.index.Tensor, needs=("take",), check=_index_check)
def _index(out, x, indices):
    axis = next(k for k, i in enumerate(indices) if i is not None)
    return jc.take(x, indices[axis], axis=axis)


def _gather_check(node):
    x, index = (node.args[k].meta["val"] for k in (0, 2))
    if x.dim() == 0 or x.dim() != index.dim():
        return "gather of a 0-d tensor or with an index of another rank"
    if not all(isinstance(d, int) for d in (*x.shape, *index.shape)):
        # (its flat offsets are built from static strides and aranges: with run-time sizes
        # the lowering would force them static and cost the rest of the part its dynamic
        # sequence length: BERT's token-type ids)
        return "gather over run-time sizes"
    return None


@lower(aten.gather.default, needs=("take",), check=_gather_check)
def _gather(out, x, dim, index, sparse_grad=False):
    """torch.gather as one jc.take from the flattened x (RoBERTa's token-type ids): output
    element i reads x at i's coordinates with index[i] on axis `dim`, the flat offset
    sum(coordinate_k * stride_k) (coordinates: broadcast aranges, constants). An index
    outside [0, extent), which torch rejects, becomes -x.size - 1 so that take's check
    raises IndexError (take would count a negative one from the end)."""
    axis = _axis(dim, x.ndim)
    strides = [int(np.prod(x.shape[k + 1:])) for k in range(x.ndim)]
    extent = x.shape[axis]
    flat = index * strides[axis]
    for k, n in enumerate(index.shape):
        if k != axis:
            coords = np.arange(n, dtype=np.int64).reshape([-1 if j == k else 1
                                                           for j in range(index.ndim)])
            flat = flat + coords * strides[k]
    bad = jc.logical_or(index < 0, index >= extent)
    flat = jc.where(bad, -int(np.prod(x.shape)) - 1, flat)
    return jc.take(jc.reshape(x, (-1,)), flat, axis=0)


@lower(aten.cumsum.default, needs=("cumsum",))
def _cumsum(out, x, dim, dtype=None):
    return as_dtype(jc.cumsum(as_dtype(x, np_dtype(out)), axis=_axis(dim, x.ndim)),
                    np_dtype(out))


@lower(aten.constant_pad_nd.default, needs=("pad",))
def _pad(out, x, pad, value=0):
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):                    # torch: last axis first
        widths[x.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return jc.pad(x, widths, constant_values=value)


# ---- convolution, pooling, batch norm ----------------------------------------------------------
def _conv_check(node):
    return convolution.unsupported(node.args[1].meta["val"].dim())


# every argument form (short lists, transposed, 1-d): jitcore/torch/convolution.py
@lower(aten.convolution.default, needs=("conv2d", "conv1d", "pad"), check=_conv_check)
def _convolution(out, *args):
    return convolution.convolution(*args)


@lower(aten._native_batch_norm_legit_no_training.default, needs=("batch_norm",))
def _batch_norm(out, x, weight, bias, running_mean, running_var, momentum, eps):
    y = jc.batch_norm(x, running_mean, running_var, weight, bias, eps=eps)
    return y, None, None


def _pool_indices_unused(node):
    users = [u for u in node.users if u.target is not operator.getitem or u.args[1] != 0]
    return "uses the pooling indices" if users else None


@lower(aten.max_pool2d_with_indices.default, needs=("max_pool2d",), check=_pool_indices_unused)
def _max_pool2d(out, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return (jc.max_pool2d(x, tuple(kernel_size), tuple(stride) or None, padding, dilation,
                          ceil_mode), None)


def _avg_pool_check(node):
    return None if len(node.args) < 7 or node.args[6] is None else "divisor_override"


@lower(aten.avg_pool2d.default, needs=("avg_pool2d",), check=_avg_pool_check)
def _avg_pool2d(out, x, kernel_size, stride=(), padding=0, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    return jc.avg_pool2d(x, tuple(kernel_size), tuple(stride) or None, padding, ceil_mode,
                         count_include_pad)


@lower(aten._adaptive_avg_pool2d.default, needs=("adaptive_avg_pool2d",))
def _adaptive_avg_pool2d(out, x, output_size):
    return jc.adaptive_avg_pool2d(x, tuple(output_size))


# resizing (F.interpolate): constant source indices and weights, jitcore/torch/resize.py
@lower(aten.upsample_nearest2d.vec, needs=("take",))
def _upsample_nearest_vec(out, x, output_size, scale_factors):
    return resize.nearest(x, shape_of(out)[2:], scale_factors)


@lower(aten.upsample_nearest2d.default, needs=("take",))
def _upsample_nearest(out, x, output_size, scales_h=None, scales_w=None):
    return resize.nearest(x, shape_of(out)[2:], (scales_h, scales_w))


def _bilinear_check(node):
    """Integer images: torch rounds its fixed-point blend its own way; they stay in torch."""
    dtype = node.args[0].meta["val"].dtype
    return None if dtype.is_floating_point else f"bilinear resizing of {dtype}"


@lower(aten.upsample_bilinear2d.vec, needs=("take",), check=_bilinear_check)
def _upsample_bilinear_vec(out, x, output_size, align_corners, scale_factors):
    return resize.bilinear(x, shape_of(out)[2:], align_corners, scale_factors)


@lower(aten.upsample_bilinear2d.default, needs=("take",), check=_bilinear_check)
def _upsample_bilinear(out, x, output_size, align_corners, scales_h=None, scales_w=None):
    return resize.bilinear(x, shape_of(out)[2:], align_corners, (scales_h, scales_w))


@lower(operator.getitem)
def _getitem(out, values, index):
    return values[index]


def expected(out) -> tuple:
    """(shape, numpy dtype) of a FakeTensor result, for the checks after each lowering."""
    return shape_of(out), np_dtype(out)


# Shapes exported with dynamic dims (jitcore.torch.compile(..., dynamic=True)) hold SymInts:
# a part's trace binds each input's symbols to the extents it traces with (run-time
# extents' placeholders, or the call's values), and every shape the lowerings read is
# evaluated with those bindings.
SYMBOLS = threading.local()


@contextlib.contextmanager
def bound_symbols(bindings: dict):
    """Within: SymInt extents are evaluated with `bindings` (sympy symbol -> int)."""
    saved = getattr(SYMBOLS, "bindings", None)
    SYMBOLS.bindings = bindings
    try:
        yield
    finally:
        SYMBOLS.bindings = saved


def extent_of(d) -> int:
    """An int, or a SymInt evaluated with the bound symbols (a run-time Size: its extent)."""
    if isinstance(d, int):
        return d
    if isinstance(d, Size):
        return d.extent
    bindings = getattr(SYMBOLS, "bindings", None) or {}
    expr = d.node.expr
    value = expr.xreplace(bindings) if hasattr(expr, "xreplace") else expr
    if not isinstance(value, int) and not getattr(value, "is_Integer", False):
        raise ShapeError(f"jitcore.torch: extent {d} is not known here")
    return int(value)


def shape_of(t) -> tuple:
    return tuple(extent_of(d) for d in t.shape)


def bind_symbols(bindings: dict, t, shape: tuple) -> None:
    """Add the bindings a FakeTensor's symbolic dims get from `shape` (the traced extents)."""
    for d, v in zip(t.shape, shape):
        if not isinstance(d, int) and d.node.expr.is_Symbol:
            bindings[d.node.expr] = v


@lower(aten.sym_size.int)
def _sym_size(out, x, dim):
    return x.shape[_axis(dim, x.ndim)]


for _op in (operator.mul, operator.add, operator.sub, operator.floordiv):
    LOWERINGS[_op] = Lowering(lambda out, a, b, _op=_op: _op(a, b))


def fit_to(value, out, what: str):
    """The lowering's result cast to torch's result dtype; its shape must be torch's."""
    if value is None or out is None or not isinstance(out, torch.Tensor):
        return value
    shape, dtype = expected(out)
    got = value.node.shape if hasattr(value, "node") else tuple(value.shape)
    if got != shape:
        raise ShapeError(f"jitcore.torch: lowering of {what} gave shape {shape_text(got)}, "
                         f"torch has {shape_text(shape)}")
    return as_dtype(value, dtype)

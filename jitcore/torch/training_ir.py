"""The ops torch.export gives before its core-ATen decompositions, lowered directly, and when a
graph of them can skip `run_decompositions`.

`torch.export.export` returns "training IR": ops above core ATen as the module called them
(aten.conv2d, aten.linear, aten.batch_norm, aten.layer_norm, aten.dropout, ...) and in-place
ops as it wrote them (`x += residual`: aten.add_). `run_decompositions` traces the whole
model a second time to reach core ATen: 3-4 s of the 5 s a CNN's export takes (EfficientNet-B0,
AMD Zen 4). A graph whose every node LOWERINGS compiles (these entries or core ones) and
whose in-place ops write values no later node reads (`functional_twins`) lowers as it is;
anything else is decomposed as before. Each entry here is its core twin's lowering with
torch's arguments of the higher op; inference only (a batch norm or dropout in training
mode is left to the decompositions).
"""
from __future__ import annotations

import math
import operator

import numpy as np
import torch
import torch.fx

import jitcore as jc

from . import convolution
from .lowering import LOWERINGS, as_dtype, lower, missing_ops, np_dtype, shape_of

aten = torch.ops.aten


def _core(op):
    """The lowering function of a core ATen op (the twin an entry here delegates to)."""
    return LOWERINGS[op].fn


def _arg(node: torch.fx.Node, index: int, name: str, default=None):
    """A node's argument by position or keyword (torch.export keeps the caller's form)."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _conv_check(node):
    return convolution.unsupported(node.args[1].meta["val"].dim())


@lower(aten.conv2d.default, aten.conv2d.padding, aten.conv1d.default, aten.conv1d.padding,
       needs=("conv2d", "conv1d", "pad"), check=_conv_check)
def _conv(out, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    # (padding "same"/"valid" of the .padding overloads: jitcore's conv takes the strings)
    return convolution.convolution(x, weight, bias, stride, padding, dilation, False, 0, groups)


def _batch_norm_check(node):
    if _arg(node, 5, "training", False):
        return "batch norm in training mode"
    if _arg(node, 3, "running_mean") is None or _arg(node, 4, "running_var") is None:
        return "batch norm without running statistics"
    return None


@lower(aten.batch_norm.default, needs=("batch_norm",), check=_batch_norm_check)
def _batch_norm(out, x, weight, bias, running_mean, running_var, training=False,
                momentum=0.1, eps=1e-5, cudnn_enabled=True):
    return jc.batch_norm(x, running_mean, running_var, weight, bias, eps=eps)


@lower(aten.linear.default)
def _linear(out, x, weight, bias=None):
    """x @ weight.T + bias, as its decomposition computes it: leading axes flattened into the
    rows of one GEMM (whose constant weight is prepacked), then restored."""
    if x.ndim <= 2:
        y = jc.matmul(x, jc.transpose(weight))
        return y if bias is None else y + bias
    rows = jc.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1]))
    y = jc.matmul(rows, jc.transpose(weight))
    if bias is not None:
        y = y + bias
    return jc.reshape(y, shape_of(out))


@lower(aten.matmul.default)
def _matmul(out, a, b):
    return jc.matmul(a, b)           # numpy's matmul rules are torch's


def _pad_check(node):
    mode = _arg(node, 2, "mode", "constant")
    return None if mode == "constant" else f"{mode} padding"


@lower(aten.pad.default, needs=("pad",), check=_pad_check)
def _pad(out, x, pad, mode="constant", value=None):
    return _core(aten.constant_pad_nd.default)(out, x, pad, 0 if value is None else value)


@lower(aten.layer_norm.default)
def _layer_norm(out, x, normalized_shape, weight=None, bias=None, eps=1e-5,
                cudnn_enable=True):
    return _core(aten.native_layer_norm.default)(None, x, normalized_shape, weight, bias,
                                                 eps)[0]


@lower(aten.group_norm.default)
def _group_norm(out, x, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    n, c = x.shape[0], x.shape[1]
    return _core(aten.native_group_norm.default)(None, x, weight, bias, n, c,
                                                 math.prod(x.shape[2:]), num_groups, eps)[0]


def _dropout_check(node):
    return "dropout in training mode" if _arg(node, 2, "train", False) else None


@lower(aten.dropout.default, check=_dropout_check)
def _dropout(out, x, p=0.5, train=False):
    return x


def _softmax_check(node):
    return None if _arg(node, 2, "dtype") is None else "softmax with a dtype"


@lower(aten.softmax.int, check=_softmax_check)
def _softmax(out, x, dim, dtype=None):
    return _core(aten._softmax.default)(out, x, dim)


@lower(aten.max_pool2d.default, needs=("max_pool2d",))
def _max_pool2d(out, x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _core(aten.max_pool2d_with_indices.default)(None, x, kernel_size, stride, padding,
                                                       dilation, ceil_mode)[0]


@lower(aten.adaptive_avg_pool2d.default, needs=("adaptive_avg_pool2d",))
def _adaptive_avg_pool2d(out, x, output_size):
    return _core(aten._adaptive_avg_pool2d.default)(out, x, output_size)


@lower(aten.flatten.using_ints, aten.reshape_as.default)
def _reshape_to_result(out, x, *args):
    return jc.reshape(x, shape_of(out))


@lower(aten.to.dtype, aten.to.dtype_layout, aten.type_as.default)
def _to(out, x, *args, **kwargs):
    return as_dtype(x, np_dtype(out))        # (a CPU strided result: why_unsupported checks)


@lower(aten.contiguous.default)
def _contiguous(out, x, memory_format=None):
    return x                          # values, not layouts: jitcore arrays are fresh


def _sdpa_check(node):
    if _arg(node, 4, "dropout_p", 0.0):
        return "attention dropout"
    if node.kwargs.get("enable_gqa", False):
        return "grouped-query attention (enable_gqa)"
    return None


@lower(aten.scaled_dot_product_attention.default, check=_sdpa_check)
def _attention(out, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
    """softmax(q k^T * scale + bias) v as torch's decomposition computes it: sqrt(scale) on
    q and on k, a boolean mask (or the causal one) as a -inf bias, a float mask added, and
    rows with nothing to attend (all -inf) give zeros, not NaN."""
    root = math.sqrt(1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    axes = tuple(range(k.ndim - 2)) + (k.ndim - 1, k.ndim - 2)
    s = jc.matmul(q * root, jc.transpose(k, axes) * root)
    if is_causal:
        s = jc.where(np.tril(np.ones(s.shape[-2:], bool)), s, -math.inf)
    if attn_mask is not None and attn_mask.dtype == np.bool_:    # (a bias of s's dtype)
        s = s + jc.where(attn_mask, s.dtype.type(0), s.dtype.type(-math.inf))
    elif attn_mask is not None:
        s = s + attn_mask
    p = jc.softmax(s, axis=-1)
    dead = jc.min(jc.equal(s, -math.inf), axis=-1, keepdims=True)
    return jc.matmul(jc.where(dead, 0.0, p), v)


# ---- when the decompositions can be skipped ---------------------------------------------------
def _aliases(target) -> bool:
    """Whether an op's result may be a view of an input (its schema says so)."""
    schema = getattr(target, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _twin(target):
    """The out-of-place overload of an in-place ATen op (aten.add_.Tensor -> aten.add.Tensor),
    or None."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.is_mutable:
        return None
    name = schema.name.split("::")[-1]
    if not name.endswith("_"):
        return None
    packet = getattr(aten, name[:-1], None)
    return getattr(packet, schema.overload_name or "default", None)


def functional_twins(gm: torch.fx.GraphModule) -> dict | None:
    """{in-place node: its out-of-place overload} when every in-place op may become its twin:
    it writes a tensor computed in the graph by an op that aliases nothing (or by an earlier
    such write), which no view aliases and no node after it reads; None when one may not
    (its write would be seen)."""
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    twins = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "_schema", None) is None \
                or not node.target._schema.is_mutable:
            continue
        twin, base = _twin(node.target), node.args[0] if node.args else None
        # (a base written in place before, by an approved write, is that write's fresh
        # result: relu_(add_(h, x)))
        if twin is None or not isinstance(base, torch.fx.Node) or \
                base.op != "call_function" or (_aliases(base.target) and base not in twins):
            return None
        for user in base.users:
            if user is not node and (order[user] > order[node] or _aliases(user.target)):
                return None
        twins[node] = twin
    return twins


def _computed_from(gm: torch.fx.GraphModule, inputs: set) -> set:
    """The nodes whose value depends on one of the placeholders named in `inputs`."""
    out = set()
    for node in gm.graph.nodes:
        if (node.op == "placeholder" and node.name in inputs) or \
                any(i in out for i in node.all_input_nodes):
            out.add(node)
    return out


def why_decompose(gm: torch.fx.GraphModule, user_inputs: set) -> str | None:
    """None when the training-IR graph lowers as it is, else why it needs the decompositions
    (the first node LOWERINGS cannot take, or an in-place op that must stay one). Nodes not
    computed from the placeholders in `user_inputs` (the module's tensor inputs) need no
    lowering: constant folding runs them in torch (a mask from aten.arange)."""
    twins = functional_twins(gm)
    if twins is None:
        return "an in-place op whose write later nodes see"
    varying = _computed_from(gm, user_inputs)
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem or \
                node not in varying or getattr(node.target, "__name__", "").startswith("_assert"):
            continue                              # (export_graph drops the asserts)
        entry = LOWERINGS.get(twins.get(node, node.target))
        if entry is None or missing_ops(entry):
            return f"{node.target} has no direct lowering"
        if entry.check is not None and entry.check(node) is not None:
            return f"{node.target}: {entry.check(node)}"
    return None


def make_functional(gm: torch.fx.GraphModule) -> None:
    """Each in-place op becomes its out-of-place twin (functional_twins must allow it)."""
    for node, twin in functional_twins(gm).items():
        node.target = twin
    gm.recompile()

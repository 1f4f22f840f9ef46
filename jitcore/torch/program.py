"""From an nn.Module to a partitioned program: export (to core ATen where needed), constants
in, constant subgraphs folded, supported nodes grouped into compiled parts, the rest left to
torch.

    export_graph(module, inputs)        torch.export (+ core-ATen decompositions unless every
                                        node lowers as exported: training_ir.py); parameters,
                                        buffers and lifted constants become get_attr nodes
    fold_constants(gm)                  nodes whose inputs are all constants run once, in torch
    why_unsupported(node)               None, or why the lowering table cannot take this node
    partition(gm)                       CapabilityBasedPartitioner -> call_module parts, each
                                        replaced by a PartModule (one jitcore graph)
"""
from __future__ import annotations

import contextlib
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.utils import _pytree as pytree

from jitcore.ir.graph import ConstArray

from . import training_ir
from .lowering import LOWERINGS, TORCH_TO_NUMPY, missing_ops, tensor_array
from .part import Part, PartModule

CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
FOLDED_PREFIX = "_jc_folded_"    # a folded constant's buffer: its own memory (fold_constants)
PART_PREFIX = "jitcore_part_"
# a folded constant may not grow past this many elements beyond its inputs (expand of a scalar)
FOLD_GROWTH_LIMIT = 1 << 20


@dataclass
class Exported:
    gm: torch.fx.GraphModule
    in_spec: object            # pytree spec of (args, kwargs)
    out_spec: object           # pytree spec of the module's result
    inputs: list               # user-input placeholders, in call order
    ranges: dict = None        # dynamic export: symbol name -> (lowest, highest or None)
    decomposed: str | None = None   # why core-ATen decompositions ran (None: training IR
                                    # lowered as exported, jitcore/torch/training_ir.py)


@contextlib.contextmanager
def _without_stack_traces():
    """torch.export without the Python stack trace it records on every node (nothing here
    reads node.meta["stack_trace"]): ResNet-18's export took 0.64 s of CPU with them, 0.35
    without; EfficientNet-B0's 1.19 and 0.91 (AMD EPYC Zen 4, torch 2.13). Torch versions
    without the switch trace as before."""
    config = getattr(torch.fx, "config", None)
    before = getattr(config, "do_not_emit_stack_traces", None)
    if before is None:
        yield
        return
    config.do_not_emit_stack_traces = True
    try:
        yield
    finally:
        config.do_not_emit_stack_traces = before


def export_graph(module: torch.nn.Module, args: tuple, kwargs: dict | None = None,
                 constant_inputs: dict | None = None, dynamic_shapes=None) -> Exported:
    """Export `module` for these example inputs (in core ATen unless the training IR lowers as
    it is: training_ir.why_decompose), with every parameter, buffer and lifted constant (and
    the user inputs of `constant_inputs`, flat index -> tensor) as a get_attr node of the
    returned GraphModule."""
    with in_eval_form(module), torch.no_grad(), _without_stack_traces():
        ep = torch.export.export(module, tuple(args), kwargs or {},
                                 dynamic_shapes=dynamic_shapes)
        decomposed = "run-time extents" if dynamic_shapes is not None else \
            "state written" if any(s.kind != OutputKind.USER_OUTPUT
                                   for s in ep.graph_signature.output_specs) else \
            training_ir.why_decompose(ep.graph_module, {
                s.arg.name for s in ep.graph_signature.input_specs
                if s.kind == InputKind.USER_INPUT})
        if decomposed is None:              # (the second trace: most of export's time)
            training_ir.make_functional(ep.graph_module)
        else:
            ep = ep.run_decompositions()
    gm, sig = ep.graph_module, ep.graph_signature
    bad = [s for s in sig.output_specs if s.kind != OutputKind.USER_OUTPUT]
    if bad:
        raise TypeError(mutation_advice(bad[0]))
    placeholders = {n.name: n for n in gm.graph.nodes if n.op == "placeholder"}
    user, k = [], 0
    for spec in sig.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind in CONSTANT_KINDS:
            value = ep.state_dict[spec.target] if spec.target in ep.state_dict \
                else ep.constants[spec.target]
            _to_constant(gm, node, value)
        elif spec.kind == InputKind.USER_INPUT:
            if constant_inputs and k in constant_inputs:
                _to_constant(gm, node, constant_inputs[k])
            else:
                user.append(node)
            k += 1
        else:
            raise TypeError(f"jitcore.torch: unsupported input kind {spec.kind.name}")
    for node in list(gm.graph.nodes):                  # runtime asserts: facts, not compute
        if node.op == "call_function" and not node.users \
                and getattr(node.target, "__name__", "").startswith("_assert"):
            gm.graph.erase_node(node)
    gm.recompile()
    ranges = {str(sym): (_bound(r.lower, 0), _bound(r.upper, None))
              for sym, r in ep.range_constraints.items()}
    return Exported(gm, ep.call_spec.in_spec, ep.call_spec.out_spec, user, ranges, decomposed)


@contextlib.contextmanager
def in_eval_form(module: torch.nn.Module):
    """Within: the module and its submodules in eval form; afterwards each has the training
    flag it had (compiling must not change the user's module)."""
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.training = training


def mutation_advice(spec) -> str:
    """Why a module whose forward writes state cannot compile, and what to do instead. (The
    module is already in eval form: export_graph puts it there.)"""
    what = {OutputKind.BUFFER_MUTATION: f"updates its buffer {spec.target!r}",
            OutputKind.USER_INPUT_MUTATION: f"writes its input {spec.target!r} in place"
            }.get(spec.kind, f"mutates state ({spec.kind.name} {spec.target})")
    return (f"jitcore.torch: forward {what}, even in eval form; a compiled module is a pure "
            f"function of its inputs (parameters and buffers are constants), so the write "
            f"would be lost. Compute out of place (`x = x * 2`, not `x.mul_(2)`) and keep "
            f"state updates out of forward; or use torch.compile(module, backend=\"jitcore\"), "
            f"which runs a graph that mutates state in torch. A KV cache: take the cache's "
            f"filled rows as inputs (time-major views cache[:T], one compile with "
            f"dynamic=True for every T), return the new rows and write them into the cache "
            f"outside forward (jitcore/bench/decoder.py)")


def _bound(value, unbounded):
    """A symbolic extent's range bound as an int (`unbounded` for an infinite one)."""
    try:
        return int(value)
    except (TypeError, ValueError, AttributeError, OverflowError):
        return unbounded


def _to_constant(gm: torch.fx.GraphModule, node: torch.fx.Node, value,
                 prefix: str = "_jc_const_") -> torch.fx.Node:
    """Replace `node` by a get_attr of a buffer holding `value`."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"jitcore.torch: constant {node.name} is a {type(value).__name__}")
    name = prefix + node.name
    gm.register_buffer(name, value.detach(), persistent=False)
    with gm.graph.inserting_before(node):
        attr = gm.graph.get_attr(name)
    attr.meta = dict(node.meta)
    node.replace_all_uses_with(attr)
    gm.graph.erase_node(node)
    return attr


# ---- constant folding --------------------------------------------------------------------------
def _numel(v) -> int:
    return math.prod(v.shape) if isinstance(v, torch.Tensor) else 0


def fold_constants(gm: torch.fx.GraphModule) -> int:
    """Run, once and in torch, every op whose inputs are all constants (mask building,
    transposed weights, position ids), and make its result a constant. Returns how many."""
    values = {n: getattr(gm, n.target) for n in gm.graph.nodes if n.op == "get_attr"}
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not all(i in values for i in node.all_input_nodes):
            continue
        if isinstance(node.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in node.target.tags:
            continue                                   # random: stays an op
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        if isinstance(value, (tuple, list)):          # split, layer norm: their getitems fold
            values[node] = value
            continue
        if not isinstance(value, torch.Tensor):
            continue
        grown = _numel(value) - sum(_numel(values[i]) for i in node.all_input_nodes)
        if grown > FOLD_GROWTH_LIMIT:
            continue
        attr = _to_constant(gm, node, _own_memory(value, args, kwargs), prefix=FOLDED_PREFIX)
        values[attr] = getattr(gm, attr.target)
        folded += 1
    gm.graph.eliminate_dead_code()
    drop_unused_constants(gm)
    return folded


def _own_memory(value: torch.Tensor, args, kwargs) -> torch.Tensor:
    """The folded value, contiguous, in memory of its own: a view of an input (a transposed
    or reshaped parameter, whose memory the user may still write) is copied, a fresh result
    kept as is (partition holds it without a copy: ConstArray.owned)."""
    inputs = {t.untyped_storage().data_ptr() for t in pytree.tree_leaves((args, kwargs))
              if isinstance(t, torch.Tensor)}
    if value.is_contiguous() and value.untyped_storage().data_ptr() not in inputs:
        return value
    return value.clone(memory_format=torch.contiguous_format)


def drop_unused_constants(gm: torch.fx.GraphModule) -> None:
    used = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    for name in [n for n, _ in gm.named_buffers() if n.startswith("_jc_") and n not in used]:
        delattr(gm, name)
    gm.recompile()


# ---- what jitcore supports ---------------------------------------------------------------------
def _tensors_of(value) -> list:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def why_unsupported(node: torch.fx.Node) -> str | None:
    """None when the lowering table compiles this node, else the reason it runs in torch."""
    if node.op != "call_function":
        return f"{node.op} node"
    if node.target is operator.getitem:
        return why_unsupported(node.args[0])
    entry = LOWERINGS.get(node.target)
    if entry is None:
        return f"no jitcore lowering for {node.target}"
    missing = missing_ops(entry)
    if missing:
        return f"needs {', '.join('jc.' + m for m in missing)} (not in this jitcore)"
    metas = _tensors_of(node.meta.get("val")) + [
        v for i in node.all_input_nodes for v in _tensors_of(i.meta.get("val"))]
    for t in metas:
        if t.dtype not in TORCH_TO_NUMPY:
            return f"dtype {t.dtype}"
        if t.device.type != "cpu":
            return f"device {t.device}"
    if "val" not in node.meta:
        return "no shape information"
    return entry.check(node) if entry.check else None


# ops that move no data in torch (views): a part made of these alone is not worth a call
VIEW_OPS = ("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
            "aten.permute.default", "aten.transpose.int", "aten.t.default",
            "aten.expand.default", "aten.unsqueeze.default", "aten.squeeze.dim",
            "aten.squeeze.dims", "aten.squeeze.default", "aten.select.int",
            "aten.slice.Tensor", "aten.alias.default", str(operator.getitem))


class _Support(OperatorSupportBase):
    def is_node_supported(self, submodules, node) -> bool:
        return why_unsupported(node) is None


def partition(gm: torch.fx.GraphModule, name: str = "model", dynamic: bool = False,
              precision: str | None = None) -> list:
    """Replace every maximal supported region by one PartModule (one jitcore graph).
    Returns the part names. `dynamic`: the parts are jc.jit(dynamic=True) functions;
    `precision`: their matmul_precision."""
    partitioner = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=True)
    proposed = [p for p in partitioner.propose_partitions()
                if any(str(n.target) not in VIEW_OPS for n in p.nodes)]
    if not proposed:
        return []
    fused = partitioner.fuse_partitions(proposed, prefix=PART_PREFIX)
    arrays: dict = {}                                  # one ConstArray per constant tensor
    parts = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith(PART_PREFIX):
            continue
        sub = getattr(fused, node.target)
        constants, inputs = {}, []
        for k, arg in enumerate(node.args):
            if arg.op == "get_attr":
                if arg.target not in arrays:
                    value = tensor_array(getattr(fused, arg.target))
                    arrays[arg.target] = ConstArray.owned(value) if \
                        arg.target.startswith(FOLDED_PREFIX) else ConstArray(value)
                constants[k] = arrays[arg.target]
            else:
                inputs.append(arg)
        out = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        single = not isinstance(out, (tuple, list))
        scalars = {k: _python_type(n) for k, n in enumerate([out] if single else out)
                   if _python_type(n) is not None}
        part = Part(f"{name}_{node.target[len(PART_PREFIX):]}", sub.graph, constants,
                    dynamic=dynamic, matmul_precision=precision)
        delattr(fused, node.target)
        fused.add_submodule(node.target, PartModule(part, 1 if single else len(out), single,
                                                    scalars))
        node.args = tuple(inputs)
        parts.append(node.target)
    fused.graph.eliminate_dead_code()
    drop_unused_constants(fused)
    return parts


def _python_type(node) -> type | None:
    """int or float for a node whose value is a size or a number (a SymInt such as
    sym_size's, or a SymFloat), which torch's side takes as a Python scalar; else None."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
        return int
    if isinstance(val, (torch.SymFloat, float)):
        return float
    return None


def fallback_nodes(gm: torch.fx.GraphModule) -> tuple:
    """(fallbacks, views): (node name, op, why) for every node jitcore cannot compile, left
    to torch; and the names of supported views left in torch because no part computes near
    them (a view costs torch nothing; a part of views alone would cost a call)."""
    fallbacks, views = [], []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is not operator.getitem:
            why = why_unsupported(node)
            if why is None:
                views.append(node.name)
            else:
                fallbacks.append((node.name, str(node.target), why))
    return fallbacks, views

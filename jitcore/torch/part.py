"""One compiled part: a connected set of ATen nodes that jitcore supports, traced through the
lowering table into ONE jitcore graph (one native call, fused across layer boundaries).

`Part` is a jitted function whose trace interprets the part's fx graph instead of running Python
code: its inputs are jitcore inputs, the model's parameters and folded constants are jitcore
constants (so a matmul by a weight reads it prepacked). `PartModule` is what the torch-side graph
calls: torch tensors in (read in place as numpy views), torch tensors out (wrapping jitcore's
fresh outputs, no copy).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.fx

from jitcore.api import JitFunction, _checked
from jitcore.ir import build
from jitcore.ir.errors import JitcoreError, TraceError
from jitcore.ir.graph import Graph as IRGraph
from jitcore.ir.sizes import Size, SizeValueNeeded
from jitcore.ops.tracer import Tracer, node_of

from .lowering import (LOWERINGS, array_tensor, bind_symbols, bound_symbols, extent_of, fit_to,
                       tensor_array)


def _lower_node(node: torch.fx.Node, env: dict):
    """The jitcore value(s) of one fx node, its arguments taken from env."""
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    out = node.meta.get("val")
    try:
        value = LOWERINGS[node.target].fn(out, *args, **kwargs)
    except JitcoreError as e:
        raise type(e)(f"{e} (lowering {node.format_node()})").with_traceback(
            e.__traceback__) from None
    if isinstance(value, tuple):
        outs = out if isinstance(out, (tuple, list)) else [None] * len(value)
        return tuple(fit_to(v, o, node.name) for v, o in zip(value, outs))
    return fit_to(value, out, node.name)


class Part(JitFunction):
    """The jitted function of one part. `constants`: placeholder index -> ConstArray."""

    def __init__(self, name: str, graph: torch.fx.Graph, constants: dict,
                 dynamic: bool = False, matmul_precision: str | None = None):
        def fn(*args):
            raise TraceError("a jitcore.torch part is traced from its fx graph")
        fn.__name__ = name
        super().__init__(fn, dynamic=dynamic, matmul_precision=matmul_precision)
        self._fx = graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self._fx_inputs = [n for k, n in enumerate(placeholders) if k not in constants]
        self._fx_const_nodes = {placeholders[k]: c for k, c in constants.items()}

    def _arg_names(self, count: int) -> list:
        return [f"in{i}" for i in range(count)]

    def _symbolic_axes(self, sigs: list):
        """The axes torch.export made symbolic (a dim with free symbols), per input, wherever
        they stand (GPT-2's [1, T] ids vary along T); the last axis of a rank >= 3 input
        only when its symbol also sizes another kind of axis (a mask's T, not a head's
        features: those stay static, vector code runs along them)."""
        if len(sigs) != len(self._fx_inputs):
            return None
        dims = []
        for fx in self._fx_inputs:
            val = fx.meta.get("val")
            shape = val.shape if isinstance(val, torch.Tensor) else ()
            dims.append([(k, d.node.expr, len(shape) >= 3 and k == len(shape) - 1)
                         for k, d in enumerate(shape) if isinstance(d, torch.SymInt)
                         and d.node.expr.free_symbols])
        inner = {expr for axes in dims for _, expr, last in axes if not last}
        return [tuple(k for k, expr, last in axes if not last or expr in inner)
                for axes in dims]

    def _trace(self, sigs: list, names: list, weak=None) -> IRGraph:
        """The fx graph, node by node through the lowering table (a size or a number torch
        computed, passed to the part as a Python scalar, is a weak run-time scalar)."""
        inputs = [build.input_node(n, shape, dtype) for n, (shape, dtype, _) in zip(names, sigs)]
        env = {fx: Tracer(i, w) for fx, i, w in zip(self._fx_inputs, inputs,
                                                    weak or [None] * len(inputs))}
        env.update({fx: Tracer(build.const_array(c)) for fx, c in self._fx_const_nodes.items()})
        bindings = {}                  # an export with dynamic dims: its symbols' extents here
        for fx, i in zip(self._fx_inputs, inputs):
            if isinstance(fx.meta.get("val"), torch.Tensor):
                bind_symbols(bindings, fx.meta["val"], i.shape)
        for fx in self._fx_inputs:     # a size torch computed: the Size it is here
            size = _size_from_symbols(fx, bindings)
            if size is not None:
                env[fx] = size
        outputs = None
        with bound_symbols(bindings):
            for node in self._fx.nodes:
                if node.op == "call_function":
                    env[node] = _lower_node(node, env)
                elif node.op == "output":
                    outputs = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        return _checked(IRGraph(self.__name__, inputs, [node_of(o) for o in outputs]))


def _size_from_symbols(fx: torch.fx.Node, bindings: dict):
    """A part's SymInt input as the graph knows it, from its tensors' extents: an int, or a
    run-time Size (s0 * s1 ...); None when it is not such a product of them (it stays a
    run-time scalar)."""
    val = fx.meta.get("val")
    if not isinstance(val, torch.SymInt):
        return None
    try:
        with bound_symbols(bindings):
            return Size.of(extent_of(val))
    except (JitcoreError, SizeValueNeeded):
        return None


def _as_array(t):
    """A numpy view of a CPU tensor's memory (never a copy); a Python scalar (a size or a
    number torch computed) as it is."""
    if not isinstance(t, torch.Tensor):
        return t
    return tensor_array(t.detach() if t.requires_grad else t)


def _as_tensor(a) -> torch.Tensor:
    return array_tensor(a if isinstance(a, np.ndarray) else np.asarray(a))


class PartModule(torch.nn.Module):
    """The torch-side face of a Part: called by the partitioned fx graph with the part's
    run-time inputs (tensors), returns its output tensor or a tuple of them."""

    def __init__(self, part: Part, outputs: int, single: bool, scalars: dict | None = None):
        super().__init__()
        self.part, self.outputs, self.single = part, outputs, single
        # output index -> int or float: a size or number torch's side takes as a Python
        # scalar (arange's end, a view's extent), not as a 0-d tensor
        self.scalars = scalars or {}
        self.example = None            # the arrays of the first call, for explain()/kernels()

    def forward(self, *tensors):
        arrays = [_as_array(t) for t in tensors]
        if self.example is None:
            self.example = arrays
        result = self.part(*arrays)
        if self.single:
            return self._out(0, result)
        result = result if isinstance(result, tuple) else (result,)
        return tuple(self._out(k, r) for k, r in enumerate(result))

    def _out(self, k: int, value):
        kind = self.scalars.get(k)
        return _as_tensor(value) if kind is None else kind(value)

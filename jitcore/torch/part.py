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
from jitcore.ir import build as b
from jitcore.ir.errors import JitcoreError, TraceError
from jitcore.ir.graph import Graph as IRGraph
from jitcore.tracer import Tracer, node_of

from .lowering import LOWERINGS, bind_symbols, bound_symbols, fit_to


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
                 dynamic: bool = False):
        def fn(*args):
            raise TraceError("a jitcore.torch part is traced from its fx graph")
        fn.__name__ = name
        super().__init__(fn, dynamic=dynamic)
        self._fx = graph
        self._fx_constants = constants
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        self._fx_inputs = [n for k, n in enumerate(placeholders) if k not in constants]
        self._fx_const_nodes = {placeholders[k]: c for k, c in constants.items()}

    def _arg_names(self, count: int) -> list:
        return [f"in{i}" for i in range(count)]

    def _trace(self, sigs: list, names: list, weak=None) -> IRGraph:
        """The fx graph, node by node through the lowering table (parts take no Python
        scalars, so `weak` is always None)."""
        inputs = [b.input_node(n, shape, dtype) for n, (shape, dtype, _) in zip(names, sigs)]
        env = {fx: Tracer(i) for fx, i in zip(self._fx_inputs, inputs)}
        env.update({fx: Tracer(b.const_array(c)) for fx, c in self._fx_const_nodes.items()})
        bindings = {}                  # an export with dynamic dims: its symbols' extents here
        for fx, i in zip(self._fx_inputs, inputs):
            if isinstance(fx.meta.get("val"), torch.Tensor):
                bind_symbols(bindings, fx.meta["val"], i.shape)
        outputs = None
        with bound_symbols(bindings):
            for node in self._fx.nodes:
                if node.op == "call_function":
                    env[node] = _lower_node(node, env)
                elif node.op == "output":
                    outputs = torch.fx.node.map_arg(node.args[0], lambda n: env[n])
        outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
        return _checked(IRGraph(self.__name__, inputs, [node_of(o) for o in outputs]))


def _as_array(t: torch.Tensor) -> np.ndarray:
    """A numpy view of a CPU tensor's memory (never a copy)."""
    return (t.detach() if t.requires_grad else t).numpy()


def _as_tensor(a) -> torch.Tensor:
    return torch.from_numpy(a if isinstance(a, np.ndarray) else np.asarray(a))


class PartModule(torch.nn.Module):
    """The torch-side face of a Part: called by the partitioned fx graph with the part's
    run-time inputs (tensors), returns its output tensor or a tuple of them."""

    def __init__(self, part: Part, outputs: int, single: bool):
        super().__init__()
        self.part, self.outputs, self.single = part, outputs, single
        self.example = None            # the arrays of the first call, for explain()/kernels()

    def forward(self, *tensors):
        arrays = [_as_array(t) for t in tensors]
        if self.example is None:
            self.example = arrays
        result = self.part(*arrays)
        if self.single:
            return _as_tensor(result)
        result = result if isinstance(result, tuple) else (result,)
        return tuple(_as_tensor(r) for r in result)

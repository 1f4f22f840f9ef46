"""The verifier: every node must satisfy its op's typing rule; leaves and outputs well-formed."""
from __future__ import annotations

from .build import infer
from .dtypes import DType
from .errors import CompileError, JitcoreError
from .graph import ConstArray, Graph, Node
from .ops import Op, info
from .printer import type_str
from .sizes import monomial


def _check_leaf(node: Node, input_ids: set):
    if node.op == Op.INPUT and id(node) not in input_ids:
        raise CompileError(f"input %{node.arg} is used but not declared as a graph input")
    if node.op == Op.CONST:
        ok = isinstance(node.arg, ConstArray) and node.arg.array.shape == node.shape \
            or node.shape == () and isinstance(node.arg, (bool, int, float))
        if not ok:
            raise CompileError(f"const {node.arg!r} does not match its type {type_str(node)}")
    if node.op == Op.DIM and (monomial(node.arg) is None or node.shape != ()
                              or node.dtype.name != "int64"):
        raise CompileError(f"dim {node.arg!r} : {type_str(node)} is not an int64 scalar of a "
                           "run-time extent")


def verify(graph: Graph) -> Graph:
    """Raise CompileError naming the first malformed node; return the graph unchanged."""
    names = [i.arg for i in graph.inputs]
    if len(set(names)) != len(names):
        raise CompileError(f"graph {graph.name}: duplicate input names {names}")
    if any(i.op != Op.INPUT for i in graph.inputs):
        raise CompileError(f"graph {graph.name}: an input is not an INPUT node")
    if not graph.outputs:
        raise CompileError(f"graph {graph.name}: has no outputs")
    input_ids = {id(i) for i in graph.inputs}
    for node in graph.nodes():
        if not isinstance(node, Node) or not isinstance(node.dtype, DType):
            raise CompileError(f"graph {graph.name}: {node!r} is not a typed node")
        if info(node.op).leaf:
            _check_leaf(node, input_ids)
            continue
        try:
            dtype, shape = infer(node.op, node.src, node.arg)
        except JitcoreError as e:
            raise CompileError(f"graph {graph.name}: node {node.op!r} : {type_str(node)} "
                               f"is malformed: {e}") from None
        if (dtype, shape) != (node.dtype, node.shape):
            raise CompileError(
                f"graph {graph.name}: node {node.op!r} claims {type_str(node)} but its "
                f"sources give {dtype.short}[{','.join(map(str, shape))}]")
    return graph

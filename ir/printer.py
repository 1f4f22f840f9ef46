"""The stable text form of a graph. Equal graphs print equal text; the text is the cache key.

    graph f(%a: f32[4,8], %b: f32[8]) {
      %0 = expand %b shape=(4,8) : f32[4,8]
      %1 = mul %a, %0 : f32[4,8]
      return %1
    }
"""
from __future__ import annotations

from .ops import Op, info
from .shapes import dim_text


def type_str(node) -> str:
    return f"{node.dtype.short}[{','.join(map(dim_text, node.shape))}]"


def _arg_str(node) -> str:
    if node.arg is None or node.op == Op.CAST:
        return ""
    if node.op == Op.CONST:
        return f" {node.arg!r}"
    if node.op == Op.DIM:
        return f" {dim_text(node.arg)}"
    name = info(node.op).arg_name
    return f" {name}={_value_text(node.arg)}".replace(", ", ",")


def _value_text(v) -> str:
    """An op's argument as text, run-time extents (in shapes, slices) as s0, s1..."""
    if isinstance(v, tuple):
        return "(" + ",".join(map(_value_text, v)) + ("," if len(v) == 1 else "") + ")"
    if type(v) is int:
        return dim_text(v)
    return repr(v)


def print_graph(graph) -> str:
    names = {}
    for inp in graph.inputs:
        names[id(inp)] = f"%{inp.arg}"
    lines = []
    counter = 0
    for node in graph.nodes():
        if node.op == Op.INPUT:
            continue
        name = f"%{counter}"
        counter += 1
        names[id(node)] = name
        srcs = ", ".join(names[id(s)] for s in node.src)
        op = node.op.name.lower()
        sep = " " if srcs else ""
        lines.append(f"  {name} = {op}{sep}{srcs}{_arg_str(node)} : {type_str(node)}")
    params = ", ".join(f"%{i.arg}: {type_str(i)}" for i in graph.inputs)
    outs = ", ".join(names[id(o)] for o in graph.outputs)
    return "\n".join([f"graph {graph.name}({params}) {{", *lines, f"  return {outs}", "}"])

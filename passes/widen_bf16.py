"""bfloat16 is stored, never computed: every op on bfloat16 values is rebuilt on float32.

After this pass, bfloat16 appears only where memory holds it: graph inputs, the CASTs that
round a float32 value to bfloat16 (a user's `astype`, and one per bfloat16 output), and the
CASTs that widen those back to float32 (exact: a bfloat16 is the top half of a float32).

Rules, for a node of the original graph:
- a bfloat16 input or constant is read as float32 (constants are widened at compile time);
- a CAST to bfloat16 rounds (to nearest even) and its users read the rounded value widened;
- any other op gets its sources' float32 forms and is rebuilt (its typing then gives float32
  where it gave bfloat16: elementwise math, reductions, softmax, matmul, conv, gather, ...);
- a bfloat16 output is the float32 result rounded once, on store.

So a fused chain such as `a * b + c` rounds once, at the store, not after every op as numpy
with ml_dtypes (and torch eager) do: the results are as accurate or more. Reductions
accumulate in float32 because their sources are float32.
"""
from __future__ import annotations

from jitcore.ir import build
from jitcore.ir import dtypes as dt
from jitcore.ir.graph import ConstArray, Graph, Node
from jitcore.ir.ops import Op, info


def widen_bf16(graph: Graph) -> Graph:
    """The graph with its bfloat16 computations done in float32 (the graph itself when it
    has no bfloat16 value)."""
    nodes = graph.nodes()
    if not any(n.dtype is dt.bfloat16 for n in nodes):    # (DTypes are singletons)
        return graph
    wide: dict = {}      # id(original) -> the node giving its value (float32 for bf16 values)
    narrow: dict = {}    # id(original) -> its bfloat16 node, where one exists (inputs, casts)
    for n in nodes:
        wide[id(n)] = _widened(n, [wide[id(s)] for s in n.src], narrow)
    outputs = [_stored(o, wide[id(o)], narrow) for o in graph.outputs]
    return Graph(graph.name, list(graph.inputs), outputs)


def _widened(n: Node, src: list, narrow: dict) -> Node:
    if n.op == Op.INPUT:
        if n.dtype != dt.bfloat16:
            return n
        narrow[id(n)] = n
        return build.cast(n, dt.float32)
    if n.op == Op.CONST:
        return _const_f32(n) if n.dtype == dt.bfloat16 else n
    if n.op == Op.CAST:
        if n.dtype != dt.bfloat16:
            return build.cast(src[0], n.dtype)
        rounded = build.cast(src[0], dt.bfloat16)
        narrow[id(n)] = rounded
        return build.cast(rounded, dt.float32)
    if all(a is b for a, b in zip(src, n.src)):
        return n
    return build.node(n.op, *src, arg=n.arg)


def _const_f32(n: Node) -> Node:
    """A bfloat16 constant as float32 (exact)."""
    if isinstance(n.arg, ConstArray):
        return build.const_array(n.arg.array.astype(dt.float32.np))
    return build.const(float(n.arg), dt.float32)


def _stored(original: Node, value: Node, narrow: dict) -> Node:
    """What the graph returns for an output: a bfloat16 output is rounded once here."""
    if original.dtype != dt.bfloat16:
        return value
    found = narrow.get(id(original))
    return found if found is not None else build.cast(value, dt.bfloat16)


def note(graph: Graph) -> str | None:
    """What explain() says of a graph with bfloat16 values (None without any)."""
    nodes = graph.nodes()
    if not any(n.dtype is dt.bfloat16 for n in nodes):
        return None
    text = ("bfloat16: stored as bfloat16, computed in float32, rounded to nearest even on "
            "store")
    # contractions (matmul, conv) run as float32 GEMM/conv kernels on widened operands
    slow = sorted({info(n.op).name for n in nodes if info(n.op).contraction
                   and any(s.dtype == dt.bfloat16 for s in n.src)})
    if slow:
        text += (f"; {', '.join(slow)} on bfloat16 operands: the slow float32 path (operands "
                 "widened to float32 copies, float32 kernels)")
    if "matmul" in slow:
        text += (", except matmuls under matmul_precision='bf16' (their kernels below say "
                 "how their bf16 operands multiply: vdpbf16ps where the CPU has AVX512_BF16)")
    return text

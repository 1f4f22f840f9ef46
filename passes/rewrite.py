"""One graph-rewrite driver: rebuild nodes bottom-up, applying rule tables until nothing changes."""
from __future__ import annotations

from jitcore.ir.graph import Graph, Node

MAX_ROUNDS = 32


def rewrite_once(graph: Graph, rule, with_original: bool = False) -> tuple:
    """Apply `rule(node) -> Node | None` to every node (sources already rewritten; with
    `with_original`, `rule(node, original)`: also the graph's node it was rebuilt from).

    Returns (new graph, changed). Structurally equal nodes are merged (CSE for free).
    """
    mapping, canon, changed = {}, {}, False
    for node in graph.nodes():
        src = tuple(mapping[id(s)] for s in node.src)
        new = node if all(a is b for a, b in zip(src, node.src)) else node.replace(src=src)
        out = rule(new, node) if with_original else rule(new)
        if out is not None and out is not new:
            new, changed = out, True
        key = new.key()
        if key in canon and canon[key] is not new:
            new, changed = canon[key], True
        canon.setdefault(key, new)
        mapping[id(node)] = new
    inputs = [mapping[id(i)] for i in graph.inputs]
    outputs = [mapping[id(o)] for o in graph.outputs]
    return Graph(graph.name, inputs, outputs), changed


def rewrite(graph: Graph, rule) -> Graph:
    """Rewrite to a fixed point (rules must make progress; MAX_ROUNDS guards against cycles)."""
    for _ in range(MAX_ROUNDS):
        graph, changed = rewrite_once(graph, rule)
        if not changed:
            return graph
    return graph


def table_rule(table: dict):
    """A rule from an `op -> fn(node) -> Node | None` table."""
    def rule(node: Node):
        fn = table.get(node.op)
        return fn(node) if fn else None
    return rule

"""The recompute rule of fusion: which inlined values are worth a buffer of their own.

Lowering inlines every elementwise value into the kernels that read it, so a value read by
several kernels is computed once per kernel, together with the un-materialized producers it
needs (its cone). That is free for a cheap value read twice and ruinous for a long chain
read by every later step of an iterative program (each of Sinkhorn's normalisations would
recompute all the previous ones). The rule, in op units per element:

  - cost(cone) = the ops a kernel computes to produce a value: OP_COST per elementwise op,
    TRANSCENDENTAL_COST per transcendental, nothing for views and loads;
  - a value read by r kernels is materialized when (r - 1) * cost(cone) > ROUND_TRIP_COST,
    the price of storing it and loading it back (r counted with only the always-materialized
    nodes as kernels: reductions, outputs, matmul operands, broadcast sources, task results);
  - such a value is stored at the end of its chain: where its one user is an elementwise op
    of its shape and dtype with the same readers (silu's x * sigmoid(x) of a sigmoid read by
    a mean and a product), that user is stored instead, so the readers load the finished
    value and a contraction before the chain can take it as its epilogue (a depthwise conv
    then writes silu's result, not its own and a sigmoid's);
  - no kernel inlines more than MAX_CONE_COST: a value whose cone would exceed it gets its
    most expensive inlined sources materialized first (each within the bound already), so
    the work per kernel stays bounded however long the graph is.
One forward pass in topological order decides (cones only shrink as producers are
materialized); reader sets are capped at READERS_CAP, which is enough to decide. Both passes
are linear in the graph.
"""
from __future__ import annotations

from jitcore.ir.ops import ELEMENTWISE, LEAF, TASK_BOUNDARY, VIEW, Op, info

OP_COST = 1
TRANSCENDENTAL_COST = 6       # vector math: a polynomial and range reduction
# vector math that is more than one transcendental: a sigmoid is an exp and, beside it, a
# divide, an add, a product and a select (what it cost as that formula, before vecmath ran
# it as one function); so silu read twice (EfficientNet's squeeze-excitation) is stored
COMPOUND_COST = {Op.SIGMOID: TRANSCENDENTAL_COST + 6}
ROUND_TRIP_COST = 10          # storing a value and loading it back, in the same units
MAX_CONE_COST = 64            # the most one kernel recomputes per element
READERS_CAP = ROUND_TRIP_COST // OP_COST + 2   # (r - 1) * OP_COST > ROUND_TRIP_COST from here

# ops that compute nothing: a kernel reads through them at mapped indices
VIEWS_THROUGH = VIEW | TASK_BOUNDARY
LEAVES = LEAF


def op_cost(node) -> int:
    """The cost of evaluating `node` once per element inside a kernel."""
    if node.op in COMPOUND_COST:
        return COMPOUND_COST[node.op]
    if info(node.op).expensive:
        return TRANSCENDENTAL_COST
    return OP_COST if node.op in ELEMENTWISE else 0


def _readers(nodes: list, chosen: set) -> dict:
    """id(node) -> the ids of the materialized nodes whose kernels would inline it (at most
    READERS_CAP of them: past that the count only needs to be known to be large)."""
    users = {}
    for n in nodes:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    readers = {}
    for n in reversed(nodes):
        acc = set()
        for u in users.get(id(n), ()):
            acc |= {id(u)} if id(u) in chosen else readers[id(u)]
            if len(acc) >= READERS_CAP:
                break
        readers[id(n)] = acc
    return readers


def _cost(cone: dict) -> int:
    return sum(cone.values())


def recompute_materialized(nodes: list, chosen: set) -> set:
    """The nodes (ids) to materialize besides `chosen` (the always-materialized ones), so that
    no value's recomputation costs more than its round trip and no kernel inlines more than
    MAX_CONE_COST. `nodes` is in topological order."""
    readers = _readers(nodes, chosen)
    users = _users(nodes)
    chosen = set(chosen)
    added = set()
    inlined = {}             # id(node) -> {id: cost} of what a kernel reading it computes
    deferred = set()         # ids of nodes whose chain's end is stored in their place

    def chain_end(n):        # the node to store for n: down its single-user elementwise chain
        while True:
            after = users.get(id(n), ())
            if len(after) != 1:
                return n
            u = after[0]
            if u.op not in ELEMENTWISE or u.shape != n.shape or u.dtype != n.dtype or \
                    id(u) in chosen or readers[id(u)] != readers[id(n)]:
                return n
            deferred.add(id(n))
            n = u

    def source(s):           # the node a kernel reading `s` evaluates: views are indices
        while s.op in VIEWS_THROUGH and id(s) not in chosen:
            s = s.src[0]
        return s

    def body(n) -> dict:     # what a kernel computing n evaluates, by id -> cost
        cone = {id(n): op_cost(n)} if n.op in ELEMENTWISE else {}
        for s in n.src:
            cone.update(inlined.get(id(source(s)), {}))
        return cone

    def materialize(n):
        chosen.add(id(n))
        added.add(id(n))
        inlined[id(n)] = {}

    for n in nodes:
        if n.op in LEAVES or (n.op in VIEWS_THROUGH and id(n) not in chosen):
            continue
        cone = body(n)
        while _cost(cone) > MAX_CONE_COST:
            heavy = [source(s) for s in n.src if inlined.get(id(source(s)))]
            if not heavy:
                break
            materialize(max(heavy, key=lambda s: _cost(inlined[id(s)])))
            cone = body(n)
        if id(n) in chosen:
            inlined[id(n)] = {}
        elif n.op in ELEMENTWISE and id(n) not in deferred and \
                (len(readers[id(n)]) - 1) * _cost(cone) > ROUND_TRIP_COST:
            end = chain_end(n)
            if end is n:
                materialize(n)
            else:
                chosen.add(id(end))
                added.add(id(end))
                inlined[id(n)] = cone
        else:
            inlined[id(n)] = cone
    return added


def _users(nodes: list) -> dict:
    """id(node) -> the nodes that read it (each once)."""
    users = {}
    for n in nodes:
        for s in dict.fromkeys(id(s) for s in n.src):
            users.setdefault(s, []).append(n)
    return users


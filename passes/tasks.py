"""Inter-op tasks: which kernels a forked sub-graph owns, and the order the graph runs in.

`jc.fork` inside a jitted function marks the forked function's arguments with FORKARG(t)
and its results with WAIT(t). Task t owns the materialized nodes between them (reached
backwards from its WAIT sources, stopping at FORKARG(t)) unless the main line needs them
too. The schedule is then

    A: main kernels some task reads        (before any task starts)
    spawn every task
    B: main kernels independent of tasks   (overlap with the tasks)
    wait for every task
    C: main kernels that read task results

A task that reads another task's results, or that an A kernel would need, cannot run
concurrently in this scheme: it is demoted to the main line (still correct, just serial).
"""
from __future__ import annotations

from jitcore.ir.graph import Graph
from jitcore.ir.ops import Op


def _reach(roots, stop) -> set:
    seen, stack = set(), list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if not stop(n):
            stack.extend(n.src)
    return seen


def task_of_nodes(graph: Graph) -> dict:
    """id(node) -> task number, for the nodes that forked tasks own."""
    waits = [n for n in graph.nodes() if n.op == Op.WAIT]
    main = _reach(graph.outputs, lambda n: n.op == Op.WAIT)
    owner = {}
    for w in waits:
        t = w.arg
        inside = _reach(w.src, lambda n: n.op == Op.FORKARG and n.arg == t)
        for node_id in inside - main:
            owner[node_id] = t if owner.get(node_id, t) == t else None
    return {k: v for k, v in owner.items() if v is not None}


def _deps(kernels: list) -> list:
    """deps[j]: indices of earlier kernels whose outputs kernel j reads."""
    writes = [{s.buffer.slot for s in k.stores} for k in kernels]
    out = []
    for j, k in enumerate(kernels):
        reads = {ld.buffer.slot for ld in k.loads()}
        out.append({i for i in range(j) if writes[i] & reads})
    return out


def _closure(start: set, edges: list) -> set:
    seen, stack = set(), list(start)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(edges[i])
    return seen


def schedule(kernels: list) -> list:
    """Steps ("kernel", i) / ("spawn", t) / ("wait", t); sets kernel.task (None: main line)."""
    deps = _deps(kernels)
    users = [[j for j in range(len(kernels)) if i in deps[j]] for i in range(len(kernels))]
    while True:
        tasks = sorted({k.task for k in kernels if k.task is not None})
        in_task = {t: {i for i, k in enumerate(kernels) if k.task == t} for t in tasks}
        bad = None
        for t in tasks:
            before = _closure({d for i in in_task[t] for d in deps[i]}, deps) - in_task[t]
            after = _closure({u for i in in_task[t] for u in users[i]}, users) - in_task[t]
            if any(kernels[i].task is not None for i in before) or before & after:
                bad = t
                break
        if bad is None:
            break
        for i in in_task[bad]:
            kernels[i].task = None
    main = [i for i, k in enumerate(kernels) if k.task is None]
    task_ids = {i for i, k in enumerate(kernels) if k.task is not None}
    needed_first = _closure({d for i in task_ids for d in deps[i]}, deps) - task_ids
    after_tasks = _closure({u for i in task_ids for u in users[i]}, users) - task_ids
    steps = [("kernel", i) for i in main if i in needed_first]
    steps += [("spawn", t) for t in tasks]
    steps += [("kernel", i) for i in main if i not in needed_first and i not in after_tasks]
    steps += [("wait", t) for t in tasks]
    steps += [("kernel", i) for i in main if i in after_tasks]
    return steps

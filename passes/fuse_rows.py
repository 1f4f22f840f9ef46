"""Row fusion: consecutive kernels over the same rows become one kernel with one row loop.

softmax lowers to max(row) -> sum(exp(x - max)) -> exp(x - max) / sum; layer_norm to five
such kernels. Each reads the previous ones' per-row results, so they can run row by row in
one loop: for each row, the parts run in order while the row is hot in cache, and the row
loop is what threads split.

A run of kernels fuses when every kernel
  - starts with the same parallel loop (the row variable: same name and extent),
  - belongs to the same task,
  - keeps the group within MAX_FUSED_OPS ops,
  - is pointwise or a horizontal reduction (a vertical one needs all rows first),
  - reads what an earlier part wrote only at the very offset that part stored it, where
    each row's stores are disjoint from the others' (so a part never needs another row's
    result, and threads that split the rows never share memory),
and at least one kernel of the run loops inside the row (kernels that are all one element
per row are plain pointwise work and stay vector kernels).
"""
from __future__ import annotations

from jitcore.ir.ops import TRANSCENDENTAL

from .decision_log import debug
from .kernel import MAX_FUSED_OPS, Const, Gather, Kernel, Kind, Load, Loop, Store, rebuild, walk
from .symbolic import lin


def _row_var(kernel: Kernel):
    if not kernel.kind.row_part or not kernel.loops:
        return None
    if kernel.tile_var is not None:          # tiles span several rows
        return None
    first = kernel.loops[0]
    return first.var if first.kind == "parallel" else None


def _row_disjoint(offset, row) -> bool:
    """Each row writes its own memory: offset = c*row + rest with 0 <= rest < c."""
    c = offset.coeff(row)
    if not c or c < 1:
        return False
    lo, hi = (offset + lin(row) * -c).bounds()
    return 0 <= lo and hi < c


def _reads_fit(kernel: Kernel, written: dict, row) -> bool:
    """Loads of buffers written earlier in the group read exactly what the same row stored
    (the earlier part finished the whole row before this part starts on it)."""
    for ld in kernel.loads():
        store = written.get(ld.buffer.slot)
        if store is None:
            continue
        if ld.offset != store.offset or not _row_disjoint(store.offset, row) \
                or isinstance(ld, Gather):       # (a gather may read any row)
            return False
    return True


def _keys(roots) -> dict:
    """id(node) -> a structural key: equal keys compute the same values at the same indices."""
    keys = {}
    for n in walk(roots):
        if isinstance(n, Gather):
            keys[id(n)] = ("gather", n.buffer.slot, n.offset, keys[id(n.index)])
        elif isinstance(n, Load):
            keys[id(n)] = ("load", n.buffer.slot, n.offset)
        elif isinstance(n, Const):
            keys[id(n)] = ("const", n.value, n.dtype)
        else:
            keys[id(n)] = ("op", n.op, n.dtype, n.arg, tuple(keys[id(s)] for s in n.src))
    return keys


def _keep_summands(group: list) -> None:
    """softmax's pattern: a reduction part sums an expensive expression (exp(x - max)) that a
    later pointwise part computes again at the same indices. The reduction part then also
    stores each summand into the later part's output, and the later part loads it instead of
    recomputing it (its own store overwrites the same element afterwards)."""
    last = group[-1]
    if not last.kind.elementwise or len(last.stores) != 1 or not last.loops:
        return
    target = last.stores[0]
    for part in group[:-1]:
        if part.kind != Kind.REDUCE_HORIZONTAL or len(part.stores) != 1:
            continue
        summand = part.stores[0].value
        expensive = any(getattr(n, "op", None) in TRANSCENDENTAL for n in walk([summand]))
        vars_ok = target.offset.vars() <= {lp.var for lp in part.loops}
        contiguous = not part.vectorized or target.offset.coeff(part.vector_var) == 1
        if not (expensive and vars_ok and contiguous and summand.dtype == target.buffer.dtype):
            continue
        want = _keys([summand])[id(summand)]
        keys = _keys([target.value])
        if want not in keys.values():
            continue
        loaded = Load(target.buffer, target.offset)
        value = rebuild(target.value, lambda n: loaded if keys[id(n)] == want else None)
        part.stores.append(Store(target.buffer, target.offset, summand))
        last.stores[0] = Store(target.buffer, target.offset, value)
        return


def _fused(group: list) -> Kernel:
    row = group[0].loops[0]
    stores = [s for k in group for s in k.stores]
    ops = tuple(op for k in group for op in k.ops)
    fused = Kernel("+".join(k.name for k in group), [Loop(row.var, "parallel")], stores,
                   None, ops, task=group[0].task, parts=list(group), kind=Kind.ROWS)
    inner = [k for k in group if len(k.loops) > 1]
    fused.vector_bits = group[0].vector_bits
    fused.lanes = max(k.lanes for k in group)
    fused.vectorized = bool(inner) and all(k.vectorized for k in inner)
    fused.reason = next((k.reason for k in inner if not k.vectorized), None)
    return fused


def _row_stop(kernel: Kernel, row, group: list, written: dict) -> str | None:
    """Why `kernel` cannot join the row group (None: it can)."""
    if row is None:
        return f"no row loop to share ({kernel.kind})"
    if row != _row_var(group[0]):
        return "another row loop"
    if kernel.task != group[0].task:
        return "another task"
    if not _reads_fit(kernel, written, row):
        return "reads another row's result, or a value at another offset than it was stored"
    if len(kernel.ops) + sum(len(g.ops) for g in group) > MAX_FUSED_OPS:
        return f"the kernel would exceed {MAX_FUSED_OPS} ops"
    return None


def fuse_rows(kernels: list) -> list:
    """Merge runs of row-compatible kernels; others pass through unchanged."""
    out, group, written = [], [], {}

    def flush():
        if len(group) > 1 and any(len(k.loops) > 1 for k in group):
            _keep_summands(group)
            out.append(_fused(group))
        else:
            out.extend(group)
        group.clear()
        written.clear()

    for k in kernels:
        row = _row_var(k)
        stop = _row_stop(k, row, group, written) if group else "first"
        if stop is not None:
            if group:
                debug("fuse_rows: row fusion stops before %s: %s", k.name, stop)
            flush()
        if row is None:
            out.append(k)
            continue
        group.append(k)
        written.update({s.buffer.slot: s for s in k.stores})
    flush()
    return out

"""Lowering of 2-d pooling: a POOL2D node (and the elementwise ops fused around it) -> a kernel
of kind "pool".

The kernel loops over output rows `row` (batch, channel and output row merged: the range the
threads split, so any thread count computes every output the same way) and output columns
`col`. Each output reduces its window: the pooled value is an expression (`Pool.source`) of the
input coordinates `ih`, `iw`, so the cheap elementwise producers of the pool's input are
computed per tap instead of stored (`max_pool2d(relu(x))` reads x once, writes once); the
ops after the pool are its epilogue (`relu(avg_pool2d(x)) + y`), as for a GEMM.
"""
from __future__ import annotations

from jitcore.ir.graph import Node
from jitcore.ir.ops import ELEMENTWISE, info

from .kernel import Kernel, Kind, Loop, Pool, Store
from .recompute import VIEWS_THROUGH, op_cost
from .symbolic import Var, floordiv, lin, mod

# the most elementwise work (in recompute.op_cost units) a pool recomputes per tap rather
# than storing its input first: a bias and an activation (`relu(x + b)`), not a chain
INLINE_SOURCE_COST = 3


def source_to_materialize(pool: Node, chosen: set):
    """The node of the pool's input to store before the pool, or None when the input's
    producers are cheap enough to recompute at every tap (no transcendental, at most
    INLINE_SOURCE_COST ops up to the nearest materialized values)."""
    base = pool.src[0]
    while base.op in VIEWS_THROUGH and id(base) not in chosen:
        base = base.src[0]
    if base.op not in ELEMENTWISE or id(base) in chosen:
        return None
    cost, stack, seen = 0, [base], set()
    while stack:
        n = stack.pop()
        if id(n) in seen or id(n) in chosen:
            continue
        seen.add(id(n))
        if info(n.op).expensive:
            return base
        if n.op in ELEMENTWISE or n.op in VIEWS_THROUGH:
            cost += op_cost(n)
            stack.extend(n.src)
    return base if cost > INLINE_SOURCE_COST else None


def pool_kernel(node: Node, pool: Node, out, index: int, builder, offset) -> Kernel:
    """The kernel computing `node`: the pool itself, or the elementwise owner of its epilogue.
    `builder(target, acc)` makes lowering's expression builder; `offset(buf, idx)` the store
    offset."""
    n_ext, c_ext, h_ext, w_ext = pool.src[0].shape
    oh_ext, ow_ext = pool.shape[2:]
    row, col = Var("row", n_ext * c_ext * oh_ext), Var("ow", ow_ext)
    ih, iw = Var("ih", h_ext), Var("iw", w_ext)
    at = {v: lin(v) if v.extent != 1 else lin(0) for v in (row, col, ih, iw)}  # unit axes at 0
    plane = floordiv(at[row], oh_ext)
    n, c, oh = floordiv(plane, c_ext), mod(plane, c_ext), mod(at[row], oh_ext)
    src_builder = builder(pool, None)
    source = src_builder.value(pool.src[0], (n, c, at[ih], at[iw]))
    # the pool's indices (extent-1 axes at 0, as reshapes that drop them read it), then the
    # owner's: the same indices on its axes of extent > 1
    acc_idx = (n, c, oh, at[col])
    inner = iter(i for i in acc_idx if i != lin(0))
    out_idx = acc_idx if node.shape == pool.shape else \
        tuple(lin(0) if d == 1 else next(inner) for d in node.shape)
    kb = builder(node, (pool, acc_idx))
    value = kb.value(node, out_idx)
    spec = pool.arg
    rows, cols = spec.windows(h_ext, w_ext)
    ops = tuple(src_builder.ops) + (spec.name,) + tuple(kb.ops)
    plan = Pool(spec, source, row, col, ih, iw, oh, rows, cols, pool.dtype)
    return Kernel(f"k{index}_{spec.name}", [Loop(row, "parallel"), Loop(col, "parallel")],
                  [Store(out, offset(out, out_idx), value)], None, ops, pool=plan,
                  kind=Kind.POOL)

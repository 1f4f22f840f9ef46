"""Split large reductions into fixed blocks: full reductions so they run in parallel (with
results that do not depend on the thread count), and float sums over a very long axis so
they accumulate in two levels and in parallel.

A reduction to a single element (over all axes, or over the axes longer than 1) has no
parallel loop: one thread would do all of it. It is
rewritten as partial reductions over a fixed number of blocks of its outermost axis of
MIN_BLOCKS or more elements (the number depends on the shape alone), then the reduction of those few partials:
    sum(x[R, C...])  ->  sum(sum(x.reshape(nb, R // nb, C...), axis=(1, ...)))
nb is the largest divisor of R up to MAX_BLOCKS, so the partials take at most a few KB and
the whole reduction is two kernels. When R has no divisor between MIN_BLOCKS and MAX_BLOCKS
(a prime, say), MAX_BLOCKS blocks take the first rows; when the input is a single row (or
elementwise ops of C-contiguous inputs, cut as one row), the final reduction also takes the
r < nb elements left over (still two kernels); otherwise (views that would index through
div/mod if flattened) those rows are reduced on their own (a third and fourth kernel). Views stay views: a broadcast or
transposed input is read in place. A mean's division by n moves onto the partials, into the
final reduction's kernel.

A float sum over one axis of LONG_AXIS or more elements per output (x[R, N].sum(axis=1), or a
column sum over millions of rows) becomes block sums of BLOCK elements, then the sum of the
block sums (and of the tail), the same rewrite along that axis: a column sum would otherwise
add every row into its vector lanes in sequence (float32 stops counting at 2**24 ones), and
the blocks give a few long rows a parallel loop. Shorter rows need no split: the kernel adds
a row pairwise (jitcore/llvm/pairwise.py).
"""
from __future__ import annotations

import math

import numpy as np

from jitcore.ir import build
from jitcore.ir.graph import Node
from jitcore.ir.ops import ELEMENTWISE, REDUCE_COMBINE, Op, info
from jitcore.ir.shapes import contiguous_strides

from .rewrite import rewrite
from .symbolic import monomial

SPLIT_MIN = 1 << 16          # elements below which one thread is fast enough anyway
MAX_BLOCKS = 256             # partials of a full reduction: parallel chunks, a few KB of temp
MIN_BLOCKS = 16              # fewer (from a divisor) would limit the threads: cut a tail
BLOCK = 1 << 14              # elements per block sum of a long axis
LONG_AXIS = 1 << 20          # a float sum over this many elements per output: two levels


def _along(src: Node, axis: int, start: int, stop: int) -> Node:
    return build.node(Op.SLICE, src, arg=tuple((start, stop, 1) if k == axis else (0, d, 1)
                                               for k, d in enumerate(src.shape)))


def _split_long_axis(node: Node):
    """sum over one long axis -> sum of block sums (+ the tail's sum), keeping dims."""
    (axis,) = node.arg
    src = node.src[0]
    n = src.shape[axis]
    blocks = n // BLOCK
    main = build.reshape(_along(src, axis, 0, blocks * BLOCK),
                         src.shape[:axis] + (blocks, BLOCK) + src.shape[axis + 1:])
    partial = build.node(Op.SUM, main, arg=(axis + 1,))
    total = build.reshape(build.node(Op.SUM, partial, arg=(axis,)), node.shape)
    if blocks * BLOCK < n:
        tail = build.node(Op.SUM, _along(src, axis, blocks * BLOCK, n), arg=(axis,))
        total = build.node(Op.ADD, total, tail)
    return total


def _is_long_sum(node: Node) -> bool:
    if node.op != Op.SUM or not node.dtype.is_float or len(node.arg) != 1:
        return False
    return node.src[0].shape[node.arg[0]] >= LONG_AXIS


def block_count(rows: int) -> int:
    """Blocks of a full reduction's first long axis: its largest divisor up to MAX_BLOCKS,
    or MAX_BLOCKS (the rows left over then form a tail) when that divisor is too small."""
    best = max(d for d in range(1, min(rows, MAX_BLOCKS) + 1) if rows % d == 0)
    return best if best >= min(rows, MIN_BLOCKS) else MAX_BLOCKS


def _reduce_all(op: Op, x: Node) -> Node:
    return build.node(op, x, arg=tuple(range(x.ndim)))


def _input_strides(node: Node, strides: dict):
    """The strides (elements) node is read with when it is an input, a permuted input or
    elementwise ops of such of its own shape (the first one found); else None."""
    if node.op == Op.INPUT:
        return tuple(strides.get(node.arg) or contiguous_strides(node.shape))
    if node.op == Op.PERMUTE:
        inner = _input_strides(node.src[0], strides)
        return None if inner is None else tuple(inner[k] for k in node.arg)
    if node.op in ELEMENTWISE:
        for src in node.src:
            if src.shape == node.shape:
                found = _input_strides(src, strides)
                if found is not None:
                    return found
    return None


def _block_axis(src: Node, strides: dict) -> int:
    """The axis a full reduction is cut along: the outermost one in memory (by its input's
    strides; C order when unknown or broadcast) with MIN_BLOCKS or more elements (else the
    longest). Any axis would do (the order of a full reduction is ours to choose), but an inner one leaves
    each partial to add the outer rows one after another in its vector lanes ((101, 103, 107)
    cut along its last axis summed 10,403 rows per lane: float32 error 1e-4), and cutting a
    transposed input along its unit-stride axis leaves the partials short vectors."""
    shape, found = src.shape, _input_strides(src, strides)
    # broadcast inputs (a stride of 0) keep C order: their partials then reduce whole rows
    broadcast = found is not None and any(st == 0 and d > 1 for st, d in zip(found, shape))
    order = range(len(shape)) if found is None or broadcast else \
        sorted(range(len(shape)), key=lambda k: -abs(found[k]))
    long_enough = [k for k in order if shape[k] >= MIN_BLOCKS]
    return long_enough[0] if long_enough else shape.index(max(shape))


def _flattens_in_place(node: Node, strides: dict) -> bool:
    """Whether node, reshaped to one row, is still read with unit strides: elementwise ops
    of C-contiguous inputs of its own shape and of scalar constants."""
    if node.op == Op.INPUT:
        given, c_order = _input_strides(node, strides), contiguous_strides(node.shape)
        return all(st == c for d, st, c in zip(node.shape, given, c_order) if d > 1)
    if _is_scalar(node):
        return True
    if node.op in ELEMENTWISE:
        return all(s.shape == node.shape or _is_scalar(s) for s in node.src) \
            and all(_flattens_in_place(s, strides) for s in node.src)
    return False


def _is_scalar(node: Node) -> bool:
    """A one-element constant, possibly reshaped or broadcast (read at offset 0)."""
    while info(node.op).view and math.prod(node.src[0].shape) == 1:
        node = node.src[0]
    return node.op == Op.CONST and math.prod(node.shape) == 1


def _split_full(node: Node, strides: dict):
    """A reduction to one element of a large input -> partials over fixed blocks of one
    axis (_block_axis), then the reduction of those partials."""
    src = node.src[0]
    axis = _block_axis(src, strides)
    rows = src.shape[axis]
    nb = block_count(rows)
    if rows % nb and src.ndim > 1 and _flattens_in_place(src, strides):
        # rows left over: a contiguous input is cut as one row instead, whose leftover
        # elements the final reduction takes in (two kernels, not four)
        src = build.reshape(src, (math.prod(src.shape),))
        axis, rows = 0, src.shape[0]
        nb = block_count(rows)
    q = rows // nb
    main = src if nb * q == rows else _along(src, axis, 0, nb * q)
    blocks = build.reshape(main, src.shape[:axis] + (nb, q) + src.shape[axis + 1:])
    partial = build.node(node.op, blocks, arg=tuple(k for k in range(blocks.ndim) if k != axis))
    if nb * q < rows and math.prod(src.shape) == rows:
        partial = _with_tail(node.op, build.reshape(partial, (nb,)), build.reshape(src, (rows,)))
    total = build.reshape(_reduce_all(node.op, partial), (1,))
    if nb * q < rows and math.prod(src.shape) > rows:
        tail = build.reshape(_reduce_all(node.op, _along(src, axis, nb * q, rows)), (1,))
        total = build.node(REDUCE_COMBINE[node.op], total, tail)
    return build.reshape(total, node.shape)


def _with_tail(op: Op, partial: Node, row: Node) -> Node:
    """The nb partials of the blocks of a single row and the r < nb elements after them ->
    nb values whose reduction is the row's: partial i combined with element n - nb + i,
    masked to the last r for a sum or product (max and min may read an element twice).
    The final reduction's kernel reads them: still two kernels, the row read in place."""
    nb, n = partial.shape[0], row.shape[0]
    last = build.cast(_along(row, 0, n - nb, n), partial.dtype)
    identity = info(op).identity      # what a masked-off element contributes
    if identity is not None:
        mask = np.arange(nb) >= nb - n % nb
        last = build.elementwise(Op.WHERE, build.const_array(mask), last,
                                 build.const(identity, partial.dtype))
    return build.elementwise(REDUCE_COMBINE[op], partial, last)


def _strip(node: Node, *ops: Op) -> Node:
    while node.op in ops:
        node = node.src[0]
    return node


def _is_partial_sum(node: Node) -> bool:
    """The operand of a split full sum's final reduction: partial sums, or (with a tail)
    their masked combination with the row's last elements (see _with_tail)."""
    if node.op == Op.ADD:
        node = node.src[0]
    return _strip(node, Op.RESHAPE).op == Op.SUM


def _divided_partials(node: Node):
    """mean's `sum / n` of a split full sum -> the sum of partials / n: the division moves
    into the final reduction's kernel (two kernels, not three). Only for a finite, nonzero n
    and at least two partials: no partials would drop the division (an empty mean's 0 / 0
    gave 0, not NaN), and with n = 0 a zero partial's 0 / 0 would turn an infinite quotient
    into NaN."""
    total, count = _strip(node.src[0], Op.RESHAPE), _strip(node.src[1], Op.EXPAND, Op.RESHAPE)
    if total.op != Op.SUM or count.op != Op.CONST or count.ndim != 0 \
            or total.arg != tuple(range(total.src[0].ndim)):
        return None
    if not (isinstance(count.arg, (int, float)) and math.isfinite(count.arg) and count.arg != 0):
        return None
    partial = total.src[0]
    if not _is_partial_sum(partial) or math.prod(partial.shape) < 2 \
            or not partial.dtype.is_float:
        return None
    scaled = build.elementwise(Op.DIV, partial, count)
    return build.reshape(_reduce_all(Op.SUM, scaled), node.shape)


def _split(node: Node, strides: dict):
    if node.op == Op.DIV and math.prod(node.shape) == 1:
        return _divided_partials(node)
    if node.op not in REDUCE_COMBINE:
        return None
    src = node.src[0]
    if any(monomial(d) is not None for d in src.shape):
        return None     # a dynamic extent: splitting it would need its value
    # one output element: whatever the axes, it is a reduction of everything
    full = math.prod(node.shape) == 1 and src.ndim > 0
    if not full and _is_long_sum(node):
        return _split_long_axis(node)
    if not full or math.prod(src.shape) < SPLIT_MIN:
        return None     # (the partials of a split are never full; their final is small)
    return _split_full(node, strides)


def split_reductions(graph, input_strides: dict | None = None):
    """`input_strides` (input name -> strides in elements) lets a contiguous input with an
    awkward length be cut as one row."""
    strides = input_strides or {}
    return rewrite(graph, lambda node: _split(node, strides))

"""Shapes that vary (jc.jit(dynamic=True)): which input extents are run-time values.

A call's signature is reduced to its *shape class*: per array argument, its dtype, layout and
shape with each dynamic extent replaced by its symbol. A candidate is the leading axis of
a C-contiguous array argument with extent >= 2; candidates of equal extent are one symbol
(the graph may combine them, so they must stay equal: a call where they differ is another
class, and if the graph then combines them, tracing raises the ShapeError numpy would).
`shape_classes` lists the classes to try, from every candidate dynamic down to the first
argument's leading axis alone (the others may be weights the graph combines with a static
axis: tracing them with a placeholder fails, and the next class is tried).
Every other extent is static and part of the class: the axes inside the leading one (their
extents are strides of the leading axis), and extents 0 and 1 (a size-1 axis broadcasts, so
it needs code of its own; an empty one is compiled on its own too).

The graph is traced once per class with placeholders for the symbols (passes/symbolic.py);
when the passes find that it needs a symbol's value (passes/dynamic.py), the class is
compiled per shape instead, and `explain()` says why.
"""
from __future__ import annotations

from dataclasses import dataclass

from jitcore.passes.symbolic import MAX_SYMBOLS, dynamic_extent


@dataclass(frozen=True)
class ShapeClass:
    """The traced signatures (placeholders for the dynamic extents) and, per symbol, the
    (argument, axis) positions that carry it (the first one gives its value)."""
    sigs: tuple
    positions: tuple         # per symbol: ((arg, axis), ...)

    def extents(self, sigs) -> tuple:
        """The symbols' values in a call of this class."""
        return tuple(sigs[where[0][0]][0][where[0][1]] for where in self.positions)

    def describe(self, names: list) -> str:
        parts = []
        for k, where in enumerate(self.positions):
            args = " = ".join(f"{names[a]} dim {axis}" for a, axis in where)
            parts.append(f"s{k} ({args})")
        return ", ".join(parts)


def shape_classes(sigs: list) -> list:
    """The shape classes to try for a call's signatures ((shape, dtype, strides or None) per
    argument), most dynamic first: every candidate leading extent (equal extents one
    symbol); then only the first array argument's leading extent, on every argument where
    it leads; then on the first array argument alone (a weight vector whose length equals
    the batch size is then static). Empty when no extent can vary."""
    first = next((a for a, (shape, _, strides) in enumerate(sigs)
                  if strides is None and shape and shape[0] >= 2), None)
    if first is None:
        return []
    size = sigs[first][0][0]
    tries = [_shape_class(sigs, lambda arg, d: True),
             _shape_class(sigs, lambda arg, d: d == size),
             _shape_class(sigs, lambda arg, d: arg == first)]
    out = []
    for sc in tries:                  # (distinct ones, in order)
        if sc not in out:
            out.append(sc)
    return out


def _shape_class(sigs: list, candidate) -> ShapeClass:
    symbols: dict = {}                # extent -> symbol
    positions: list = []
    out = []
    for arg, (shape, dtype, strides) in enumerate(sigs):
        if strides is None and shape and shape[0] >= 2 and candidate(arg, shape[0]) and \
                (shape[0] in symbols or len(symbols) < MAX_SYMBOLS):
            k = symbols.setdefault(shape[0], len(symbols))
            if k == len(positions):
                positions.append([])
            positions[k].append((arg, 0))
            shape = (dynamic_extent(k),) + tuple(shape[1:])
        out.append((shape, dtype, strides))
    return ShapeClass(tuple(out), tuple(tuple(p) for p in positions))


def class_key(sc: ShapeClass) -> tuple:
    """What a compiled class is looked up by (hashable)."""
    return sc.sigs

"""Shapes that vary (jc.jit(dynamic=True)): which input extents are run-time values.

A call's signature is reduced to its *shape class*: per array argument, its dtype, layout and
shape with each dynamic extent replaced by its symbol. A candidate is an axis of a
C-contiguous array argument with extent >= 2 that usually varies between calls: the leading
axis (the batch), and the second-to-last axis of arrays of rank >= 3 (the sequence: T of a
[B, T, D] activation and of attention's [B, H, T, dh]; the heads and the last axis, the
features, stay static). Candidates of equal extent are one symbol (the graph may combine
them, so they must stay equal: a call where they differ is another class, and if the graph
then combines them, tracing raises the ShapeError numpy would).
`shape_classes` lists the classes to try, most dynamic first: every candidate; the first
argument's candidate extents wherever they are candidates; the first argument's alone; then
the same with leading axes only (the others may be weights the graph combines with a static
axis: tracing them with a placeholder fails, or the passes need its value, and the next
class is tried).
Every other extent is static and part of the class: the last axes (their extents are
strides of the dynamic ones; features, weights), and extents 0 and 1 (a size-1 axis
broadcasts, so it needs code of its own; an empty one is compiled on its own too).

The graph is traced once per class with placeholders for the symbols (passes/symbolic.py);
when the passes find that it needs a symbol's value (passes/dynamic.py), the next class is
tried, and when none is left the shape is compiled on its own; `explain()` says why.
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


def _candidate_axes(shape: tuple, strides) -> tuple:
    """The axes of an argument that may be run-time extents: the leading one, and the
    second-to-last of arrays of rank >= 3 (the sequence), where C-contiguous with extent
    >= 2."""
    if strides is not None:
        return ()
    return tuple(ax for ax in ((0, len(shape) - 2) if len(shape) >= 3 else (0,))
                 if ax < len(shape) and shape[ax] >= 2)


def shape_classes(sigs: list, symbolic_axes: list | None = None) -> list:
    """The shape classes to try for a call's signatures ((shape, dtype, strides or None) per
    argument), most dynamic first: every candidate axis (equal extents one symbol); the
    first array argument's candidate extents wherever they are candidates; on the first
    argument alone (weights [D, D] beside x [B, T, D] are then static); then the same with
    leading axes only (a graph that needs the sequence's value: every leading axis; the
    first argument's leading extent where it leads; on the first argument alone: a weight
    vector whose length equals the batch size is then static). Empty when no extent can
    vary. `symbolic_axes`: per argument, the axes that may vary when the caller knows them
    (a torch export's symbolic dims) instead of the leading and sequence axes."""
    def axes_of(arg: int) -> tuple:
        shape, _, strides = sigs[arg]
        if symbolic_axes is None:
            return _candidate_axes(shape, strides)
        return tuple(ax for ax in symbolic_axes[arg] if strides is None and shape[ax] >= 2)

    first = next((a for a in range(len(sigs)) if axes_of(a)), None)
    if first is None:
        return []
    lead = axes_of(first)[0]
    size = sigs[first][0][lead]
    own = {sigs[first][0][ax] for ax in axes_of(first)}
    tries = [_shape_class(sigs, axes_of, lambda arg, ax, d: True),
             _shape_class(sigs, axes_of, lambda arg, ax, d: d in own),
             _shape_class(sigs, axes_of, lambda arg, ax, d: arg == first),
             _shape_class(sigs, axes_of, lambda arg, ax, d: ax == 0),
             _shape_class(sigs, axes_of, lambda arg, ax, d: ax == 0 and d == size),
             _shape_class(sigs, axes_of, lambda arg, ax, d: ax == 0 and arg == first)]
    out = []
    for sc in tries:                  # (distinct ones with a symbol, in order)
        if sc not in out and sc.positions:
            out.append(sc)
    return out


def _shape_class(sigs: list, axes_of, candidate) -> ShapeClass:
    symbols: dict = {}                # extent -> symbol
    positions: list = []
    out = []
    for arg, (shape, dtype, strides) in enumerate(sigs):
        shape = list(shape)
        for ax in axes_of(arg):
            d = shape[ax]
            if not candidate(arg, ax, d) or (d not in symbols and len(symbols) >= MAX_SYMBOLS):
                continue
            k = symbols.setdefault(d, len(symbols))
            if k == len(positions):
                positions.append([])
            positions[k].append((arg, ax))
            shape[ax] = dynamic_extent(k)
        out.append((tuple(shape), dtype, strides))
    return ShapeClass(tuple(out), tuple(tuple(p) for p in positions))


def class_key(sc: ShapeClass) -> tuple:
    """What a compiled class is looked up by (hashable)."""
    return sc.sigs

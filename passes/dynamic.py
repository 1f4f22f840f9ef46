"""Which graphs can run with run-time extents (jc.jit(dynamic=True)), and why not.

The front traces a dynamic graph with each dynamic extent replaced by its placeholder
(`symbolic.dynamic_extent(k)`). The code is correct for every run-time value of the symbol
only if no pass used the placeholder's value: loop bounds and buffer sizes may be the
placeholder itself (the backend reads the call's extent there), but nothing may be
computed from it. Two checks make sure:

- `check_graph` (the primitive graph): every op that sees a dynamic extent keeps it as an
  axis of its own (elementwise ops, broadcasts, reductions, transposes, matmuls) or merges
  it with others (a reshape to c * s_b * s_t), or gathers from a table whose extents are
  static at run-time indices (an embedding of [B, T] ids), or joins along a static axis;
  slicing, other joins, convolution,
  pooling and forked tasks on a dynamic axis need its value; a constant computed from an
  extent does too (a mean's 1/n is read at run time: an Op.DIM node).
- `check_lowered` (the kernels): every integer in the kernels is a real (small) value or
  a static count c times a product of placeholders (symbolic.monomial), standing as a loop
  extent (axes merged into one loop), a buffer's dimension, a stride or an offset (the
  axes inside a dynamic one), or a divisor of a non-negative index (a split of merged
  axes: m // s1, m % s1); and each kernel is of a kind whose emitter reads run-time
  extents. The symbolic pass itself simplifies a division by a run-time extent only where
  the result holds at every size (symbolic.fits).

A failed check raises `NotDynamic` with a reason for explain(); the front then compiles that
shape statically.
"""
from __future__ import annotations

import dataclasses
import math

from jitcore.ir.ops import INDEX_REDUCE, Op, info
from jitcore.ir.sizes import NotDynamic  # noqa: F401 -- raised here, caught by the front

from .kernel import Buffer, Const, Extent, Gather, Kernel, walk
from .symbolic import HUGE, Div, Lin, Mod, Var, extent_text, monomial, symbol_of


DIMS_SLOT = -1      # a kernel's pointer to the call's extent array (i64[symbols]), as a slot


def _dynamic_axes(shape) -> list:
    """(c, (k, ...)) per axis of `shape` that is c times a product of dynamic symbols."""
    return [monomial(d) for d in shape if monomial(d) is not None]


def check_graph(graph) -> None:
    """Raise NotDynamic unless every op keeps the dynamic extents it sees as axes of their
    own, or merges them with static axes (reshapes); joins, gathers, convolutions, pooling
    and the rest are compiled per shape."""
    for node in graph.nodes():
        if node.op == Op.CONST:
            _check_constant(node)
            continue
        if node.op == Op.INPUT:
            continue
        seen = [s for s in node.src if _dynamic_axes(s.shape)]
        if not seen:
            continue
        what = f"{node.op.name.lower()} of {_shape_text(seen[0].shape)}"
        if node.op in INDEX_REDUCE:
            raise NotDynamic(f"{what}: arg-reductions are compiled per shape")
        if info(node.op).keeps_axes:
            continue
        if node.op == Op.RESHAPE:
            # merging dynamic axes with static ones gives c * s_b * s_t; the lowered check
            # makes sure no index needs more (a split of one, or an axis inside it)
            if any(abs(d) >= HUGE and monomial(d) is None for d in node.shape):
                raise NotDynamic(f"{what} to {_shape_text(node.shape)} splits a dynamic "
                                 "axis")
            continue
        if node.op == Op.TAKE:
            # a lookup into a table whose gathered axis is static (an embedding: the ids'
            # extents may be run-time; the index check reads the table's static extent)
            table, axis = node.src[0], node.arg
            if not _dynamic_axes(table.shape):
                continue
            raise NotDynamic(f"{what}: gathering from a table with run-time extents")
        if node.op == Op.CONCAT and monomial(node.shape[node.arg]) is None:
            continue            # joined along a static axis (rotary's halves): regions of it
        if node.op == Op.SLICE:
            if not all(_slice_holds(d, sl, n) for d, sl, n in
                       zip(node.src[0].shape, node.arg, node.shape)):
                raise NotDynamic(f"{what}: slicing a dynamic axis needs its extent")
            continue
        raise NotDynamic(f"{what}: {node.op.name.lower()} is compiled per shape")


def _slice_holds(extent: int, sl: tuple, out: int) -> bool:
    """A slice of an axis is the same at every run-time size: a static axis; all of a
    run-time one; or a static run of indices below 2 (every run-time extent is >= 2 in its
    class): BERT's [:, 0] reads token 0 of any length."""
    if monomial(extent) is None:
        return True
    start, stop, step = sl
    if (start, stop, step) == (0, extent, 1):
        return True
    return out < HUGE and step > 0 and 0 <= start and (out == 0 or start + (out - 1) * step < 2)


def _check_constant(node) -> None:
    """A pass that computed a constant from a placeholder (n, or 1/n) made it huge, or the
    reciprocal of c times a product of placeholders. Tiny constants of the model itself
    (BERT's layer-norm eps, 1e-12) are no such thing."""
    value = node.arg
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value == 0 \
            or not math.isfinite(value):
        return
    if abs(value) >= HUGE or (abs(value) < 2.0 ** -36 and
                              monomial(round(1 / abs(value))) is not None):
        raise NotDynamic(f"constant {value!r} is computed from a dynamic extent")


def _shape_text(shape) -> str:
    return "(" + ", ".join(extent_text(d) for d in shape) + ")"


def check_lowered(lowered) -> None:
    """Raise NotDynamic unless every placeholder in the kernels is c times a product of
    input symbols (c * s_b * s_t), as a loop extent, a buffer dimension, a stride or an
    offset, in kernels that read run-time extents."""
    if any(step != "kernel" for step, _ in lowered.steps):
        raise NotDynamic("forked tasks are compiled per shape")
    given = {symbol_of(d) for b in lowered.buffers_of_kind("input") for d in b.shape}
    for buf in lowered.buffers:
        _check_buffer(buf)
        for d in buf.shape:
            found = monomial(d)
            for k in (found[1] if found is not None else ()):
                if k not in given:
                    raise NotDynamic(f"buffer {buf.name}: extent s{k} is no input's")
    for kernel in lowered.kernels:
        _check_kernel(kernel)


def _check_buffer(buf: Buffer) -> None:
    for d in buf.shape:
        if monomial(d) is None and abs(d) >= HUGE:
            raise NotDynamic(f"buffer {buf.name} has an extent computed from dynamic ones")
    if any(abs(s) >= HUGE and monomial(s) is None for s in buf.strides):
        raise NotDynamic(f"{buf.name}: a stride computed from dynamic extents other than "
                         "as c * s_b * s_t")


def uses_dynamic(kernel: Kernel) -> bool:
    """Whether a kernel's loops or buffers have run-time extents (its code then reads the
    call's extent array)."""
    loops = list(kernel.loops) + [lp for p in kernel.parts for lp in p.loops]
    return any(monomial(lp.var.extent) is not None for lp in loops) or any(
        monomial(d) is not None for b in kernel.buffers() for d in b.shape) or any(
        isinstance(n, Extent) for part in [kernel] + list(kernel.parts)
        for n in walk(part.values()))


def _check_kernel(kernel: Kernel) -> None:
    if not uses_dynamic(kernel):
        return
    name = f"kernel {kernel.name} ({kernel.kind})"
    if not kernel.kind.reads_run_time_extents:
        raise NotDynamic(f"{name}: this kernel kind is compiled per shape")
    if kernel.reduction is not None and kernel.reduction.op in INDEX_REDUCE:
        raise NotDynamic(f"{name}: arg-reductions are compiled per shape")
    g = kernel.gemm
    for part in [kernel] + list(kernel.parts):
        for lp in part.loops:
            _check_int(lp.var.extent, name, loop=True)
        values = part.values() + ([g.a, g.b] if g is not None else [])
        for node in walk(values):
            _check_node(node, name)
        for st in part.stores:
            _check_lin(st.offset, name)


def _check_node(node, name: str) -> None:
    if isinstance(node, Extent):            # read from the call's extents
        return
    if isinstance(node, Const):
        if isinstance(node.value, (int, float)) and not isinstance(node.value, bool) \
                and math.isfinite(node.value) and abs(node.value) >= HUGE:
            raise NotDynamic(f"{name}: a constant computed from a dynamic extent")
        return
    if isinstance(node, Gather) and (abs(node.extent) >= HUGE or abs(node.stride) >= HUGE):
        raise NotDynamic(f"{name}: a gather along a run-time extent")
    if hasattr(node, "offset"):
        _check_lin(node.offset, name)
    for f in dataclasses.fields(node) if dataclasses.is_dataclass(node) else ():
        v = getattr(node, f.name)
        if isinstance(v, int) and not isinstance(v, bool):
            _check_int(v, name)


def _check_lin(e: Lin, name: str) -> None:
    _check_int(e.const, name, loop=True)        # (c * s: a stride of an axis inside s)
    for atom, c in e.terms:
        _check_int(c, name, loop=True)
        if isinstance(atom, Var):
            _check_int(atom.extent, name, loop=True)
        elif isinstance(atom, (Div, Mod)):
            # a split of merged run-time axes (m // s1, m % s1) divides by a run-time value
            # of a dividend that is never negative (codegen's unsigned division)
            _check_int(atom.d, name, loop=True)
            if atom.d >= HUGE and atom.expr.bounds()[0] < 0:
                raise NotDynamic(f"{name}: a negative index divided by a run-time extent")
            _check_lin(atom.expr, name)


def _check_int(v: int, name: str, loop: bool = False) -> None:
    """`loop`: v may be c times a product of placeholders (a loop extent, a stride, an
    offset)."""
    if abs(v) < HUGE or (loop and monomial(v) is not None):
        return
    raise NotDynamic(f"{name}: an index, stride or extent computed from dynamic extents "
                     f"other than as c * s_b * s_t (a sum, or a split of one: {v})")

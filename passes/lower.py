"""Lowering: a primitive graph -> buffers and loop-nest kernels.

Which nodes get memory (the fusion rule of this stage):
  - graph outputs and reductions are always materialized;
  - a computed node that a broadcast replicates (EXPAND by a factor > 1) is materialized,
    so that e.g. `relu(a) @ w` or `exp(x)[:, None] + y` never recompute it per copy;
  - a value whose recomputation in every kernel that reads it would cost more than storing
    and loading it, and the most expensive inlined sources of a kernel that would otherwise
    compute more than a bounded number of ops per element (the recompute rule,
    `passes/recompute.py`: softmax's exp, read by two kernels, stays inlined and row fusion
    lets them share it; each step of an iterative program read by all later ones is stored);
  - a forked task's results (the sources of WAIT nodes) live in memory;
  - a matmul's operands live in memory (the GEMM reads them through strides), and so does
    its result, unless one node alone reads it through elementwise ops of the same shape and
    dtype (`gelu(x @ w + b) + r`): that node's kernel is the GEMM, the ops its epilogue;
  - a concatenation (CONCAT) and a running sum (CUMSUM) are materialized; a concatenation
    read only by another one is not: its sources are written straight into the outer one's
    buffer (a pad of several axes is one buffer, each region written once);
  - the array a gather (TAKE) reads lives in memory (its address depends on a run-time index);
  - a conv2d's input and weight live in memory as a matmul's operands do, and its result is
    fused the same way (`relu(conv2d(x, W, b) + r)` is one kernel of kind "conv");
  - a pooling's result, as a matmul's, unless elementwise ops alone read it
    (`relu(max_pool2d(x))` is one kernel); its input is read per tap, inlined unless its
    producers are costly (passes/pool.py);
  - everything else (elementwise ops, casts, views, gathers) is inlined into the kernel that
    reads it.
A materialized node that a later kernel needs is loaded from its buffer, not recomputed.
A concatenation is lowered to one pointwise kernel per source, each computing its source's
expression and storing it in its region of the output (multi-output fusion merges those with
equal loop nests into one kernel writing both halves); a running sum to a "scan" kernel.

Views become index arithmetic: a kernel evaluates a node at a tuple of symbolic indices, and
each view op maps its output indices to its source's. Loads then turn the indices into an
offset with the buffer's strides (input strides come from the caller's arrays, so transposed
or negatively strided inputs are read in place).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from jitcore.ir.dtypes import int64
from jitcore.ir.errors import CompileError
from jitcore.ir.graph import Graph, Node
from jitcore.ir.ops import ELEMENTWISE, LEAF, REDUCE, Op, info
from jitcore.ir.shapes import contiguous_strides, numel

from .kernel import (SCAN_LOOP, Acc, Buffer, Compute, Const, Conv, Extent, Gather, Gemm, Kernel,
                     Kind, Load, Loop, Reduction, Store, rebuild, reduction_kind,
                     substituted_stores)
from .pool import pool_kernel, source_to_materialize
from .recompute import VIEWS_THROUGH, recompute_materialized
from .symbolic import Lin, Var, floordiv, lin, mod
from .subsample_convs import is_subsampled_input
from .tasks import task_of_nodes


# the status buffer's type: [site + 1 of the first failed index check (0: none), its index]
_STATUS_NODE = Node(Op.INPUT, int64, (2,), (), "status")


@dataclass
class LoweredGraph:
    """Buffers by slot (inputs, consts, outputs, temps in that order) and kernels in run order."""
    name: str
    buffers: list
    kernels: list
    consts: list            # ConstArray per const slot, in slot order
    outputs: list           # buffer slot of each graph output (repeats allowed)
    steps: list             # run order: ("kernel", i), ("spawn", task), ("wait", task);
                            # the pipeline fills it in after fusion (passes.tasks.schedule)
    checks: list = None     # per gather site: (op name, axis, extent), for the IndexError
    status: int | None = None   # slot of the int64[2] status buffer the gathers report into

    def buffers_of_kind(self, kind: str) -> list:
        return [b for b in self.buffers if b.kind == kind]


def _array_leaf(node: Node) -> bool:
    """A graph input or a constant: a leaf whose values sit in a buffer (DIM is a scalar
    the kernel reads from the call's extents)."""
    return info(node.op).leaf and node.op != Op.DIM


def _strip_views(node: Node) -> Node:
    while node.op in VIEWS_THROUGH:
        node = node.src[0]
    return node


def _strided_view(node: Node, input_strides: dict) -> bool:
    """Whether `node` reads an array in memory through strides alone: through its views, its
    offset in an input, a constant array or a node with a (contiguous) buffer is affine in
    its indices. A reshape merging axes that a permute separated (MobileViT's folding of
    patches) leaves floordiv/mod terms: a conv2d cannot read such an operand."""
    variables = [Var(f"v{k}", d) for k, d in enumerate(node.shape)]
    idx = tuple(lin(v) for v in variables)
    while node.op in VIEWS_THROUGH:
        idx = view_index(node, idx)
        node = node.src[0]
    if info(node.op).leaf and (not _array_leaf(node) or node.op == Op.CONST and node.shape == ()):
        return False                # a scalar constant or an extent: not in memory
    strides = (input_strides.get(node.arg) if node.op == Op.INPUT else None) or \
        contiguous_strides(node.shape)
    at = lin(0)
    for i, stride in zip(idx, strides):
        if stride:
            at = at + lin(i) * stride
    return all(at.coeff(v) is not None for v in variables)


def _non_unit(shape) -> list:
    return [d for d in shape if d != 1]


def _epilogue_owner(matmul: Node, users: dict, chosen: set, task: dict):
    """The one materialized node that reads `matmul` (or a pooling) only through elementwise
    ops (and reshapes that add or drop unit axes: `A @ v` of a 1-D v is a matmul to (M, 1) and a
    reshape to (M,)) of its shape up to unit axes, or None. The owner has the matmul's dtype:
    its output holds the partial sums between k blocks."""
    owners, stack, seen = set(), [matmul], set()
    while stack:
        n = stack.pop()
        for u in users.get(id(n), ()):
            if id(u) in seen:
                continue
            seen.add(id(u))
            if u.shape != matmul.shape and (_non_unit(u.shape) != _non_unit(matmul.shape)
                                            or numel(u.shape) == 0):
                return None              # (a reshape of nothing reads at no index)
            if u.op not in ELEMENTWISE and u.op != Op.RESHAPE:
                return None
            if task.get(id(u)) != task.get(id(matmul)):
                return None
            if id(u) in chosen:
                if u.dtype != matmul.dtype:
                    return None
                owners.add(id(u))
            else:
                stack.append(u)
    return owners.pop() if len(owners) == 1 else None


def _waits_on_a_task(node: Node, chosen: set) -> bool:
    """Whether `node`'s kernel reads a forked task's result (fusing a GEMM there would make
    the GEMM wait for the task instead of overlapping with it)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if n.op == Op.WAIT:
            return True
        if id(n) in seen or (n is not node and id(n) in chosen):
            continue
        seen.add(id(n))
        stack.extend(n.src)
    return False


def materialized_nodes(graph: Graph, input_strides: dict | None = None) -> tuple:
    """The nodes that get a buffer of their own, in topological order, and the fused GEMM
    and pooling epilogues: id(node) -> the matmul or pooling its kernel computes.
    `input_strides`: input name -> its strides in elements (default: contiguous)."""
    nodes = graph.nodes()
    chosen = {id(o) for o in graph.outputs}
    for n in nodes:
        if info(n.op).contraction:
            chosen.add(id(n))
            for s in n.src[:2]:
                base = _strip_views(s)
                if base.op not in LEAF:
                    chosen.add(id(base))
                if not _strided_view(s, input_strides or {}):
                    # the kernel reads a contiguous copy of the view (or of a broadcast
                    # scalar: a slice of a pad's zeros simplifies to one)
                    chosen.add(id(s))
            if is_subsampled_input(n):       # (passes/subsample_convs.py)
                chosen.add(id(n.src[0]))
        if n.op in REDUCE or n.op == Op.CUMSUM:
            chosen.add(id(n))
        if n.op == Op.CONCAT and not _written_by_outer_concat(n, nodes, graph):
            chosen.add(id(n))
        if n.op == Op.TAKE and not _array_leaf(n.src[0]):
            chosen.add(id(n.src[0]))
        if n.op == Op.POOL2D:
            chosen.add(id(n))
            source = source_to_materialize(n, chosen)
            if source is not None:
                chosen.add(id(source))
        if n.op == Op.WAIT:                 # a task's result lives in memory
            base = _strip_views(n.src[0])
            chosen.add(id(base) if base.op not in LEAF else id(n))
        if n.op == Op.EXPAND and numel(n.shape) > numel(n.src[0].shape):
            base = _strip_views(n.src[0])
            if base.op not in LEAF:
                chosen.add(id(base))
    chosen |= recompute_materialized(nodes, chosen)
    users, task, by_id = {}, task_of_nodes(graph), {id(n): n for n in nodes}
    for n in nodes:
        for s in n.src:
            users.setdefault(id(s), []).append(n)
    epilogues = {}
    for n in nodes:
        if (info(n.op).contraction or n.op == Op.POOL2D) and \
                id(n) not in {id(o) for o in graph.outputs}:
            owner = _epilogue_owner(n, users, chosen, task)
            if owner is not None and owner not in epilogues and \
                    not _waits_on_a_task(by_id[owner], chosen):
                epilogues[owner] = n
                chosen.discard(id(n))
    outputs = {id(o) for o in graph.outputs}
    mats = [n for n in nodes if id(n) in chosen and (n.op != Op.INPUT or id(n) in outputs)]
    return mats, epilogues


def _written_by_outer_concat(node: Node, nodes: list, graph: Graph) -> bool:
    """A concatenation whose one reader is another concatenation (and which is no output)
    is written by the outer one's kernels into its buffer (see _Lowering._regions)."""
    if any(o is node for o in graph.outputs):
        return False
    readers = [n for n in nodes for s in n.src if s is node]
    return len(readers) == 1 and readers[0].op == Op.CONCAT


def view_index(node: Node, idx: tuple) -> tuple:
    """Map indices into a view's output to indices into its source."""
    src = node.src[0]
    if info(node.op).task_boundary:
        return idx
    if node.op == Op.PERMUTE:
        out = [None] * len(idx)
        for k, p in enumerate(node.arg):
            out[p] = idx[k]
        return tuple(out)
    if node.op == Op.EXPAND:
        return tuple(lin(0) if s == 1 and d != 1 else i
                     for i, s, d in zip(idx, src.shape, node.shape))
    if node.op == Op.SLICE:
        return tuple(i * step + start for i, (start, _, step) in zip(idx, node.arg))
    return _reshape_index(src.shape, node.shape, idx)


def _reshape_index(src_shape, out_shape, idx):
    if 0 in src_shape:                  # no element: nothing is ever read (no stride to divide)
        return tuple(lin(0) for _ in src_shape)
    if [d for d in src_shape if d != 1] == [d for d in out_shape if d != 1]:
        it = iter(i for i, d in zip(idx, out_shape) if d != 1)   # only unit dims change
        return tuple(lin(0) if d == 1 else next(it) for d in src_shape)
    flat = lin(0)
    for i, s in zip(idx, contiguous_strides(out_shape)):
        flat = flat + i * s
    return tuple(mod(floordiv(flat, s), d) for s, d in zip(contiguous_strides(src_shape), src_shape))


class _KernelBuilder:
    """Builds the expression of one materialized node, inlining what is not materialized."""

    def __init__(self, lowering: "_Lowering", target: Node, acc: tuple = None):
        self.lowering, self.target, self.memo, self.ops = lowering, target, {}, []
        self.deps = {}           # (id(node), indices) -> the (source, indices) it needs
        self.acc = acc           # a fused GEMM's (matmul node, its indices): becomes Acc

    def value(self, node: Node, idx: tuple):
        """The expression of `node` at indices `idx` (an explicit stack: graphs can be
        thousands of ops deep)."""
        stack = [(node, idx)]
        while stack:
            n, i = stack[-1]
            if (id(n), i) in self.memo:
                stack.pop()
                continue
            key = (id(n), i)
            if key not in self.deps:
                self.deps[key] = self._deps(n, i)
            deps = self.deps[key]
            missing = [d for d in deps if (id(d[0]), d[1]) not in self.memo]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            self.memo[(id(n), i)] = self._make(n, i, [self.memo[(id(s), j)] for s, j in deps])
        return self.memo[(id(node), idx)]

    def _is_loaded(self, node: Node) -> bool:
        buf = self.lowering.read_buffer.get(id(node))
        return buf is not None and (node is not self.target or _array_leaf(node))

    def _is_acc(self, node: Node, idx: tuple) -> bool:
        if self.acc is None or node is not self.acc[0]:
            return False
        if idx != self.acc[1]:
            raise CompileError("lowering: a GEMM epilogue reads its product at other indices")
        return True

    def _deps(self, node: Node, idx: tuple) -> list:
        if self._is_loaded(node) or info(node.op).leaf or self._is_acc(node, idx):
            return []
        if node.op in VIEWS_THROUGH:
            return [(node.src[0], view_index(node, idx))]
        if node.op in ELEMENTWISE:
            return [(s, idx) for s in node.src]
        if node.op == Op.TAKE:
            ax, k = node.arg, node.src[1].ndim
            return [(node.src[1], idx[ax:ax + k])]
        raise CompileError(f"lowering: {node.op.name.lower()} cannot be inlined here")

    def _make(self, node: Node, idx: tuple, srcs: list):
        if self._is_acc(node, idx):
            return Acc(node.dtype)
        if self._is_loaded(node):
            buf = self.lowering.read_buffer[id(node)]
            return Load(buf, offset(buf, idx))
        if node.op == Op.CONST:
            return Const(node.arg, node.dtype)
        if node.op == Op.DIM:
            return Extent(node.arg, node.dtype)
        if node.op in VIEWS_THROUGH:
            return srcs[0]
        if node.op == Op.TAKE:
            self.ops.append("take")
            return self.lowering.gather(node, idx, srcs[0])
        self.ops.append(node.op.name.lower())
        return Compute(node.op, node.dtype, tuple(srcs), node.arg)


def offset(buf: Buffer, idx: tuple) -> Lin:
    out = lin(0)
    for i, s in zip(idx, buf.strides):
        if s:
            out = out + lin(i) * s
    return out


class _Lowering:
    def __init__(self, graph: Graph, input_strides: dict):
        self.graph, self.buffers, self.read_buffer, self.consts = graph, [], {}, []
        self.input_strides = input_strides
        for node in graph.inputs:
            strides = input_strides.get(node.arg) or contiguous_strides(node.shape)
            self.read_buffer[id(node)] = self._buffer(node.arg, "input", node, strides)
        for node in graph.nodes():
            if node.op == Op.CONST and node.shape != ():
                self.consts.append(node.arg)
                self.read_buffer[id(node)] = self._buffer(f"const{len(self.consts) - 1}",
                                                          "const", node)

    def _buffer(self, name, kind, node, strides=None) -> Buffer:
        buf = Buffer(name, kind, node.dtype, node.shape,
                     tuple(strides or contiguous_strides(node.shape)), len(self.buffers))
        self.buffers.append(buf)
        return buf

    def gather(self, node: Node, idx: tuple, index) -> Gather:
        """TAKE at output indices `idx`, its index expression already built: a checked load
        of the source's buffer (a new check site, reported as the op, axis and extent)."""
        x, ax, k = node.src[0], node.arg, node.src[1].ndim
        buf = self.read_buffer[id(x)]
        src_idx = idx[:ax] + (lin(0),) + idx[ax + k:]
        self.checks.append(("take", ax, x.shape[ax]))
        return Gather(buf, offset(buf, src_idx), index, buf.strides[ax], x.shape[ax],
                      len(self.checks) - 1, self.status)

    def run(self) -> LoweredGraph:
        self.checks, self.status = [], None
        mats, self.epilogues = materialized_nodes(self.graph, self.input_strides)
        out_ids = [id(o) for o in self.graph.outputs]
        write_buffer = {}
        for node in mats:                                  # outputs first: fixed slot order
            if id(node) in out_ids:
                write_buffer[id(node)] = self._buffer(f"out{out_ids.index(id(node))}",
                                                      "output", node)
        outputs, repeats = self._output_slots(write_buffer)
        if any(n.op == Op.TAKE for n in self.graph.nodes()):     # after outputs, before temps
            self.status = self._buffer("status", "status", _STATUS_NODE)
        mats = self._write_reshaped_outputs_in_place(mats, write_buffer)
        for node in mats:
            if id(node) not in write_buffer:
                write_buffer[id(node)] = self._buffer(f"t{len(self.buffers)}", "temp", node)
        kernels, owner = [], task_of_nodes(self.graph)
        for node in mats:
            out = write_buffer[id(node)]
            made = self._regions(node, out, len(kernels)) if node.op == Op.CONCAT else \
                [self._kernel(node, out, len(kernels))]
            for kernel in made:
                kernel.task = owner.get(id(node))
            kernels.extend(made)
            for extra in repeats.get(out.slot, ()):
                kernels.append(_copy_kernel(out, extra, len(kernels)))
                kernels[-1].task = made[0].task
            if not _array_leaf(node):
                self.read_buffer[id(node)] = out
        return LoweredGraph(self.graph.name, self.buffers, kernels, self.consts, outputs,
                            [("kernel", i) for i in range(len(kernels))], self.checks,
                            self.status.slot if self.status is not None else None)

    def _regions(self, node: Node, out: Buffer, index: int) -> list:
        """A concatenation as one pointwise kernel per source, each storing its source's
        values in its region of `out` (the sources of an inner concatenation written by this
        one are split further, shifted to their place)."""
        kernels, stack = [], [(node, (0,) * node.ndim)]
        while stack:
            cat, shift = stack.pop()
            start = 0
            for src in cat.src:
                here = tuple(s + start if k == cat.arg else s for k, s in enumerate(shift))
                start += src.shape[cat.arg]
                if src.op == Op.CONCAT and id(src) not in self.read_buffer and \
                        _written_by_outer_concat(src, self.graph.nodes(), self.graph):
                    stack.append((src, here))
                    continue
                kernels.append(self._region(node, src, out, here, index + len(kernels)))
        return kernels

    def _region(self, cat: Node, src: Node, out: Buffer, shift: tuple, index: int) -> Kernel:
        kb = _KernelBuilder(self, cat)          # (a materialized source is loaded)
        dims = [Var(f"i{k}", d) for k, d in enumerate(src.shape)]
        value = kb.value(src, tuple(lin(v) for v in dims))
        store = Store(out, offset(out, tuple(lin(v) + s for v, s in zip(dims, shift))), value)
        loops = [Loop(v, "parallel") for v in dims if v.extent != 1]
        ops = tuple(kb.ops) + ("concat",)
        return order_and_collapse(Kernel(f"k{index}_concat", loops, [store], None, ops,
                                         kind=Kind.POINTWISE))

    def _scan(self, node: Node, out: Buffer, index: int) -> Kernel:
        """A running sum along node.arg: the loops before the axis (parallel), the axis
        ("scan": in order), the loops after it (parallel; the vector loop when there are)."""
        kb = _KernelBuilder(self, node)
        dims = [Var(f"i{k}", d) for k, d in enumerate(node.shape)]
        idx = tuple(lin(v) for v in dims)
        value = kb.value(node.src[0], idx)
        kinds = [SCAN_LOOP if k == node.arg else "parallel" for k in range(node.ndim)]
        loops = [Loop(v, kind) for v, kind in zip(dims, kinds) if v.extent != 1]
        ops = tuple(kb.ops) + ("cumsum",)
        return order_and_collapse(Kernel(f"k{index}_cumsum", loops,
                                         [Store(out, offset(out, idx), value)], None, ops,
                                         kind=Kind.SCAN))

    def _output_slots(self, write_buffer: dict) -> tuple:
        """The buffer slot of each output position, and the extra output buffers by the slot
        of the first: a node returned at several positions (equal outputs merged by CSE,
        `(y, y)`, an input returned twice) gets a buffer for each, so that no two outputs
        are ever one array."""
        slots, repeats, seen = [], {}, set()
        for k, node in enumerate(self.graph.outputs):
            first = write_buffer[id(node)]
            if id(node) in seen:
                extra = self._buffer(f"out{k}", "output", node)
                repeats.setdefault(first.slot, []).append(extra)
                slots.append(extra.slot)
            else:
                seen.add(id(node))
                slots.append(first.slot)
        return slots, repeats

    def _write_reshaped_outputs_in_place(self, mats: list, write_buffer: dict) -> list:
        """An output that only reshapes a materialized node (`x.sum(axis=1)` drops a kept axis)
        needs no copy: the node is computed straight into the output's memory."""
        mat_ids = {id(n) for n in mats}
        aliased = set()
        for out in self.graph.outputs:
            src = out
            while src.op == Op.RESHAPE or info(src.op).task_boundary:
                src = src.src[0]
            if src is out or id(src) not in mat_ids or id(src) in write_buffer \
                    or _array_leaf(src):
                continue
            buf = write_buffer[id(out)]
            write_buffer[id(src)] = Buffer(buf.name, "output", src.dtype, src.shape,
                                           contiguous_strides(src.shape), buf.slot)
            aliased.add(id(out))
        return [n for n in mats if id(n) not in aliased]

    def _kernel(self, node: Node, out: Buffer, index: int) -> Kernel:
        if node.op == Op.CUMSUM:
            return self._scan(node, out, index)
        producer = self.epilogues.get(id(node), node)
        if producer.op == Op.POOL2D:
            return pool_kernel(node, producer, out, index,
                               lambda target, acc: _KernelBuilder(self, target, acc), offset)
        if producer.op == Op.CONV2D:
            return self._conv_kernel(node, producer, out, index)
        if producer.op == Op.MATMUL:
            return self._gemm_kernel(node, producer, out, index)
        kb = _KernelBuilder(self, node)
        if node.op in REDUCE:
            src = node.src[0]
            dims = [Var(f"i{k}", d) for k, d in enumerate(src.shape)]
            value = kb.value(src, tuple(lin(v) for v in dims))
            out_idx = tuple(lin(0) if k in node.arg else lin(v) for k, v in enumerate(dims))
            kinds = ["reduce" if k in node.arg else "parallel" for k in range(len(dims))]
            reduction = Reduction(node.op, node.dtype)
            ops = tuple(kb.ops) + (node.op.name.lower(),)
        else:
            dims = [Var(f"i{k}", d) for k, d in enumerate(node.shape)]
            value = kb.value(node, tuple(lin(v) for v in dims))
            out_idx = tuple(lin(v) for v in dims)
            kinds = ["parallel"] * len(dims)
            reduction, ops = None, tuple(kb.ops) or ("copy",)
        store = Store(out, offset(out, out_idx), value)
        loops = [Loop(v, k) for v, k in zip(dims, kinds) if v.extent != 1]
        # (a reduction's orientation follows from the loop order order_and_collapse picks)
        kind = Kind.POINTWISE if reduction is None else Kind.REDUCE_HORIZONTAL
        kernel = Kernel(f"k{index}_{ops[-1]}", loops, [store], reduction, ops, kind=kind)
        return order_and_collapse(kernel)


    def _gemm_kernel(self, node: Node, matmul: Node, out: Buffer, index: int) -> Kernel:
        """`node` computed by a GEMM of `matmul` (node is matmul, or its epilogue's owner)."""
        *batch_shape, m_ext, n_ext = matmul.shape
        k_ext = matmul.src[0].shape[-1]
        batch = tuple(Var(f"b{i}", d) for i, d in enumerate(batch_shape))
        m, n, k = Var("m", m_ext), Var("n", n_ext), Var("k", k_ext)
        bidx = tuple(lin(v) for v in batch)
        operands = []
        for src, idx in ((matmul.src[0], bidx + (lin(m), lin(k))),
                         (matmul.src[1], bidx + (lin(k), lin(n)))):
            ld = _KernelBuilder(self, matmul).value(src, idx)
            if not isinstance(ld, Load):
                raise CompileError("lowering: a matmul operand is not in memory")
            operands.append(ld)
        # the product's indices (unit axes at 0, as reshapes that drop them read it), and the
        # owner's: the same variables on its axes of extent > 1 (see _epilogue_owner)
        acc_idx = tuple(lin(v) if v.extent != 1 else lin(0) for v in batch + (m, n))
        inner = iter(i for i in acc_idx if i != lin(0))
        out_idx = acc_idx if node.shape == matmul.shape else \
            tuple(lin(0) if d == 1 else next(inner) for d in node.shape)
        kb = _KernelBuilder(self, node, (matmul, acc_idx))
        value = kb.value(node, out_idx)
        ops = ("matmul",) + tuple(kb.ops)
        gemm = Gemm(operands[0], operands[1], m, n, k, batch, matmul.dtype)
        loops = [Loop(v, "parallel") for v in batch] + \
            [Loop(m, "parallel"), Loop(k, "reduce"), Loop(n, "parallel")]
        if gemm.matvec:       # the other axis has extent 1; the output axis is the vector one
            loops = [Loop(v, "parallel") for v in batch] + \
                [Loop(k, "reduce"), Loop(gemm.out_var, "parallel")]
        return Kernel(f"k{index}_matmul", loops, [Store(out, offset(out, out_idx), value)],
                      None, ops, gemm=gemm, kind=Kind.GEMV if gemm.matvec else Kind.GEMM)


    def _conv_kernel(self, node: Node, conv: Node, out: Buffer, index: int) -> Kernel:
        """`node` computed by a convolution kernel of `conv` (node is conv, or the owner of
        its epilogue); the conv's bias (an expression along oc) is added to Acc first."""
        out_vars = tuple(Var(name, d) for name, d in zip(("n", "oc", "oh", "ow"), conv.shape))
        x_vars = tuple(Var(name, d) for name, d in zip(("xn", "xc", "xh", "xw"),
                                                       conv.src[0].shape))
        w_vars = tuple(Var(name, d) for name, d in zip(("wo", "wc", "kh", "kw"),
                                                       conv.src[1].shape))
        operands = []
        for src, variables in ((conv.src[0], x_vars), (conv.src[1], w_vars)):
            ld = _KernelBuilder(self, conv).value(src, tuple(lin(v) for v in variables))
            if not isinstance(ld, Load) or any(ld.offset.coeff(v) is None for v in variables):
                raise CompileError("lowering: a conv2d operand is not a strided array")
            operands.append(ld)
        acc_idx = tuple(lin(v) if v.extent != 1 else lin(0) for v in out_vars)
        inner = iter(i for i in acc_idx if i != lin(0))
        out_idx = acc_idx if node.shape == conv.shape else \
            tuple(lin(0) if d == 1 else next(inner) for d in node.shape)
        kb = _KernelBuilder(self, node, (conv, acc_idx))
        value = kb.value(node, out_idx)
        if len(conv.src) == 3:
            bias = kb.value(conv.src[2], (acc_idx[1],))
            with_bias = Compute(Op.ADD, conv.dtype, (Acc(conv.dtype), bias))
            value = rebuild(value, lambda n: with_bias if isinstance(n, Acc) else None)
        ops = ("conv2d",) + tuple(kb.ops)
        # ow stays the last loop even of extent 1: the epilogue's vectors run along it
        loops = [Loop(v, "parallel") for v in out_vars[:3] if v.extent != 1] + \
            [Loop(out_vars[3], "parallel")]
        spec = Conv(operands[0], operands[1], x_vars, w_vars, out_vars, conv.arg, conv.dtype)
        return Kernel(f"k{index}_conv2d", loops, [Store(out, offset(out, out_idx), value)],
                      None, ops, conv=spec, kind=Kind.DEPTHWISE if spec.depthwise else Kind.CONV)


def _copy_kernel(out: Buffer, extra: Buffer, index: int) -> Kernel:
    """A kernel copying `out` into `extra`, another output position of the same value.

    Computing once and copying keeps one rule for every producer (pointwise, reduction,
    GEMM, row-fused): the value's kernel is untouched. Where the producer is pointwise over
    the same loop nest, multi-output fusion (fuse_outputs.py) merges the copy into it: the
    value is stored a second time from its register, with no re-read of `out`."""
    # both are contiguous with the same element count, so `out`'s indices fit `extra`
    # (`out` may be a reduction's result written in place of its reshaped output)
    twin = Buffer(extra.name, "output", out.dtype, out.shape, out.strides, extra.slot)
    dims = [Var(f"i{k}", d) for k, d in enumerate(out.shape)]
    idx = tuple(lin(v) for v in dims)
    store = Store(twin, offset(twin, idx), Load(out, offset(out, idx)))
    loops = [Loop(v, "parallel") for v in dims if v.extent != 1]
    return order_and_collapse(Kernel(f"k{index}_copy", loops, [store], None, ("copy",),
                                     kind=Kind.POINTWISE))


# ---- loop order and dimension collapsing -----------------------------------------------------

def _offsets(kernel: Kernel) -> list:
    return [ld.offset for ld in kernel.loads()] + [s.offset for s in kernel.stores]


def _vector_fitness(kernel: Kernel, var: Var) -> tuple:
    """(no access gathers along var, bytes walked with stride 1 along var): higher is better."""
    accesses = [(ld.offset, ld.buffer) for ld in kernel.loads()] + \
        [(s.offset, s.buffer) for s in kernel.stores]
    coeffs = [(off.coeff(var), buf) for off, buf in accesses]
    legal = all(c in (0, 1) for c, _ in coeffs)
    return legal, sum(buf.nbytes for c, buf in coeffs if c == 1)


def _smallest_stride(kernel: Kernel, var: Var) -> float:
    strides = [abs(c) if c is not None else math.inf
               for c in (ld.offset.coeff(var) for ld in kernel.loads()) if c != 0]
    return min(strides, default=math.inf)


def _choose_order(kernel: Kernel) -> list:
    """Reductions: vectorize the variable along which most bytes are walked with stride 1
    (ties: a reduced one, so that a broadcast row is summed pairwise like any row; then the
    innermost), preferring variables that no access gathers along."""
    loops = kernel.loops
    if kernel.reduction is None or not loops:
        return loops
    best = max(reversed(loops),
               key=lambda lp: _vector_fitness(kernel, lp.var) + (lp.kind == "reduce",))
    if not _vector_fitness(kernel, best.var)[0]:
        # nothing vectorizes: walk memory with the smallest stride innermost, a reduced axis
        # on ties (a float sum then adds that axis pairwise, not row after row)
        best = min(loops, key=lambda lp: (_smallest_stride(kernel, lp.var),
                                          lp.kind != "reduce"))
    best = _pairwise_instead(kernel, best)
    rest = [lp for lp in loops if lp is not best]
    parallel = [lp for lp in rest if lp.kind == "parallel"]
    reduce = [lp for lp in rest if lp.kind == "reduce"]
    return parallel + reduce + [best]


# a float sum whose vector loop is a parallel one adds this many values or more in sequence
# per lane: more than a row sum's lane adds in sequence (a pairwise block of 512 float32 over
# two vector accumulators: 16), so a value repeated along the row (167 units of float32
# roundoff at 1000 copies, 637 at 4000; numpy's pairwise sum: 3) is summed as a row; see
# _pairwise_instead
VERTICAL_CHAIN_LIMIT = 1 << 5


def _static_extent(var: Var) -> int | None:
    return var.extent if isinstance(var.extent, int) else None


def _pairwise_instead(kernel: Kernel, best: Loop) -> Loop:
    """A float sum would add its reduce loops in sequence in every lane when a parallel loop
    is its vector loop (a "vertical" kernel). Reading a broadcast value (stride 0 along the
    reduce loops: the partial sums of a scalar broadcast to 2**30 elements, or a column
    repeated along a row) makes the store's stride-1 walk win that choice. When such a chain
    is long and a reduce loop vectorizes as well, that loop becomes the vector loop: its row
    is then summed pairwise like any other. A column sum of a contiguous array (stride > 1
    along its reduce loop) stays vertical, as numpy's is (long ones are split in blocks,
    passes/split_reductions.py)."""
    red = kernel.reduction
    if best.kind != "parallel" or red is None or red.op != Op.SUM or not red.dtype.is_float:
        return best
    reduce = [lp for lp in kernel.loops if lp.kind == "reduce"]
    extents = [_static_extent(lp.var) for lp in reduce]
    if not reduce or None in extents or math.prod(extents) < VERTICAL_CHAIN_LIMIT:
        return best
    legal = [lp for lp in reduce if _vector_fitness(kernel, lp.var)[0]]
    if not legal:
        return best
    return max(reversed(legal), key=lambda lp: (_vector_fitness(kernel, lp.var)[1],
                                                lp.var.extent))


def _mergeable(offsets: list, outer: Var, inner: Var) -> bool:
    for off in offsets:
        co, ci = off.coeff(outer), off.coeff(inner)
        if co is None or ci is None or co != ci * inner.extent:
            return False
    return True


def _rebuild(kernel: Kernel, loops: list, mapping: dict) -> Kernel:
    """The same kernel over new loop variables; `mapping` gives old vars as expressions."""
    return Kernel(kernel.name, loops, substituted_stores(kernel.stores, mapping),
                  kernel.reduction, kernel.ops, kind=kernel.kind)


def order_and_collapse(kernel: Kernel) -> Kernel:
    """Put the loops in codegen order and merge neighbours that walk memory as one loop."""
    loops = _choose_order(kernel)
    kind = reduction_kind(loops) if kernel.kind.reduces else kernel.kind
    kernel = Kernel(kernel.name, loops, kernel.stores, kernel.reduction, kernel.ops, kind=kind)
    changed = True
    while changed:
        changed = False
        offsets = _offsets(kernel)
        for a, b in zip(kernel.loops, kernel.loops[1:]):
            if a.kind != b.kind or b.var.extent == 0 or not _mergeable(offsets, a.var, b.var):
                continue                 # (an empty loop: nothing runs, nothing to merge)
            merged = Var(f"{a.var.name}{b.var.name}", a.var.extent * b.var.extent)
            mapping = {a.var: floordiv(lin(merged), b.var.extent),
                       b.var: mod(lin(merged), b.var.extent)}
            loops = [Loop(merged, a.kind) if lp is a else lp for lp in kernel.loops if lp is not b]
            kernel = _rebuild(kernel, loops, mapping)
            changed = True
            break
    return kernel


def lower(graph: Graph, input_strides: dict | None = None) -> LoweredGraph:
    """Lower a primitive graph. `input_strides` maps input names to strides in elements."""
    return _Lowering(graph, input_strides or {}).run()

"""Loop-level kernels: what lowering produces and codegen consumes.

A kernel is a loop nest (outermost first) with one or more stores. Each stored value is an
expression DAG of `Load`, `Const` and `Compute` nodes whose indices are symbolic in the loop
variables. A reduction kernel carries a `Reduction`: its loops include the reduced variables,
and each store writes the reduction of its value over them.

A kernel's `kind` (Kind, set where it is built) names its shape, and loop order encodes it:
- pointwise:            parallel loops only; the last one is the vector loop.
- horizontal reduction: parallel loops, then reduce loops; the last reduce loop is vectorized.
- vertical reduction:   parallel loops, reduce loops, then one parallel loop that is vectorized
                        (accumulators live across the reduce loops, one per vector lane).
- gemm:                 batch loops, m, k (reduce), n; the store's value is the epilogue: an
                        expression of `Acc` (the dot product at (batch, m, n)) and loads, so
                        post-ops run while the output tile is in registers (see `Gemm`).
- conv:                 n, oc, oh, ow (the output's axes); `Conv` holds the operands, the
                        store's value is the epilogue over `Acc` as for gemm.
- depthwise:            a conv whose groups have one input channel each (`Conv.depthwise`),
                        computed one channel plane at a time (jitcore/llvm/depthwise.py).
- gemv:                 a gemm whose M or N is 1 (a matrix times a vector): batch loops, k
                        (reduce), then the output axis (`Gemm.out_var`); the same epilogue.
- pool:                 2-d pooling: the output rows (n, c, oh merged), then the output
                        columns (the vector loop); each output reduces its window (see `Pool`),
                        and the store's value is an epilogue of `Acc`, as for a gemm.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from jitcore.ir.dtypes import DType
from jitcore.ir.errors import CompileError
from jitcore.ir.ops import Op

from .symbolic import Lin, Var, extent_text, substitute


@dataclass(frozen=True)
class Buffer:
    """A memory region the compiled graph reads or writes.

    kind: "input" (a user array), "const" (a captured array), "output" (allocated by the
    caller), "temp" (allocated by the entry function). `slot` is the position in the entry
    function's array list. Strides are in elements and may be negative or zero.
    """
    name: str
    kind: str
    dtype: DType
    shape: tuple
    strides: tuple
    slot: int

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n * self.dtype.itemsize


@dataclass(frozen=True, eq=False)
class Load:
    buffer: Buffer
    offset: Lin

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True, eq=False)
class Gather(Load):
    """A load at a run-time index: `offset` covers the other axes, and the gathered axis adds
    `stride` * the value of `index` (an int32/int64 expression), negative values counting
    from `extent` as numpy does. Codegen checks the index: one out of range is recorded in
    the call's status buffer (`status`, int64[2]: [site + 1, index]) and read as 0 instead,
    so no address outside the buffer is ever formed. `site` names the check
    (LoweredGraph.checks)."""
    index: object = None
    stride: int = 0
    extent: int = 0
    site: int = 0
    status: Buffer | None = None

    @property
    def src(self) -> tuple:
        return (self.index,)

    def with_src(self, src: tuple, offset=None) -> "Gather":
        return Gather(self.buffer, self.offset if offset is None else offset, src[0],
                      self.stride, self.extent, self.site, self.status)


@dataclass(frozen=True, eq=False)
class Const:
    value: object
    dtype: DType


@dataclass(frozen=True, eq=False)
class Extent(Const):
    """The run-time value of an extent (Op.DIM: a size Python used as a value): `value` is
    c times a product of placeholders, and codegen reads the call's extents for it. The
    same at every index, so to every pass but codegen it is a constant."""


@dataclass(frozen=True, eq=False)
class Compute:
    """An elementwise primitive (an `ir.ops.Op` whose record is elementwise and not composite)."""
    op: Op
    dtype: DType
    src: tuple
    arg: object = None


@dataclass(frozen=True, eq=False)
class Acc:
    """In a gemm kernel's epilogue: the finished dot product at the current (batch, m, n)."""
    dtype: DType


@dataclass(frozen=True, eq=False)
class Store:
    buffer: Buffer
    offset: Lin
    value: object


@dataclass(frozen=True)
class Loop:
    var: Var
    kind: str            # "parallel", "reduce" or SCAN_LOOP

    @property
    def scan(self) -> bool:
        """A running sum's loop: sequential, each step reads the previous step's output."""
        return self.kind == SCAN_LOOP


SCAN_LOOP = "scan"       # the loop kind of a scan kernel's running loop (named like Kind.SCAN)


@dataclass(frozen=True)
class Reduction:
    op: Op               # SUM, PROD, MAX, MIN, ARGMAX, ARGMIN
    dtype: DType         # accumulator dtype (= the stored dtype; int64 for arg-reductions)


@dataclass
class Gemm:
    """C[batch, m, n] = sum over k of A[batch, m, k] * B[batch, k, n], in `dtype`.
    `a` and `b` are loads whose offsets are linear in the batch vars, m, k and k, n."""
    a: Load
    b: Load
    m: Var
    n: Var
    k: Var
    batch: tuple         # the batch variables, outermost first
    dtype: DType
    prepacked: bool = False   # b's buffer holds the packed panels (see jitcore/llvm/gemm.py);
    #                           a gemv's matrix operand (a or b) its panels (llvm/gemv_pack.py)
    # how the products compute (the matmul precision policy, jitcore/llvm/bf16.py): "fp32",
    # "bf16" (operands in bf16 pairs, vdpbf16ps) or "bf16-emulated" (bf16-rounded operands,
    # float32 FMA); float32 accumulation always
    precision: str = "fp32"

    @property
    def matvec(self) -> bool:
        """M or N is 1: a matrix-vector product, read once at the memory bandwidth by its own
        kernel (kind "gemv", jitcore/llvm/gemv.py) instead of packed into panels."""
        return self.m.extent == 1 or self.n.extent == 1

    @property
    def out_var(self) -> Var:
        """A matrix-vector product's output axis: m when N is 1, else n."""
        return self.m if self.n.extent == 1 else self.n


@dataclass
class Pool:
    """out[row, col] = the max or average of `source` over a window. `source` is the pooled
    value as an expression of loads at the input coordinates `ih`, `iw` (and the row): the
    producers before the pool (`pool(relu(x))`) run per tap. `rows` and `cols` are the
    window tables (`ir.pooling.Window1d`); `oh` the output row within its plane (of `row`)."""
    spec: object         # ir.pooling.Pool2d
    source: object
    row: Var
    col: Var
    ih: Var
    iw: Var
    oh: Lin
    rows: object
    cols: object
    dtype: DType

    @property
    def window(self) -> int:
        """Taps per window at most (for cost estimates)."""
        return max(self.rows.hi, default=0) * max(self.cols.hi, default=0)


MAX_CHANNEL_MULTIPLIER = 4
MAX_PHASES = 4
MAX_DEPTHWISE_TAPS = 81
MAX_DEPTHWISE_REACH = 32


@dataclass
class Conv:
    """out[n, oc, oh, ow] = sum over (ci, kh, kw) of x[n, g*Cg_in + ci, ih, iw] *
    w[oc, ci, kh, kw], with g = oc // Cg_out, ih = oh*sh + kh*dh - pad_top, iw likewise, and
    x = 0 in the padding. `x` and `w` are loads whose offsets are linear in `x_vars` (n, c,
    h, w of the input) and `w_vars` (o, ci, kh, kw); the kernel's loops are the output's
    (n, oc, oh, ow) and its store's value is the epilogue over `Acc` (bias already added).
    Computed in NCHW: vectors of output pixels along a row (or along the flattened plane),
    a register tile of output channels x pixel vectors (see jitcore/llvm/conv.py), or with
    constant weights where that wastes fewer lanes, vectors of output channels, a register
    tile of pixels x channel vectors (jitcore/llvm/conv_channels.py)."""
    x: Load
    w: Load
    x_vars: tuple
    w_vars: tuple
    out_vars: tuple      # (n, oc, oh, ow)
    attrs: object        # jitcore.ir.conv.ConvAttrs
    dtype: DType
    prepacked: bool = False   # w's buffer holds the packed weights (jitcore/llvm/conv.py)
    channel_vectors: bool = False   # computed with output channels along the vectors
    #                                 (jitcore/llvm/conv_channels.py; weights prepacked for it)
    im2col: bool = False   # pixels along the vectors, each pixel tile's inputs packed into an
    #                        im2col panel first (jitcore/llvm/conv.py; weights prepacked)
    winograd: int = 0   # m > 0: a 3x3 stride-1 conv computed as Winograd F(m x m, 3x3),
    #                     weights prepacked transformed (jitcore/llvm/conv_winograd.py)
    # how the products compute under the matmul precision policy (jitcore/llvm/bf16.py):
    # "fp32", "bf16" (bf16 pairs of input channels, vdpbf16ps: jitcore/llvm/conv_pairs.py) or
    # "bf16-emulated" (bf16-rounded operands, float32 FMA); float32 accumulation always
    precision: str = "fp32"

    @property
    def taps(self) -> int:
        return self.w_vars[2].extent * self.w_vars[3].extent

    @property
    def cin_group(self) -> int:
        return self.w_vars[1].extent

    @property
    def depthwise(self) -> bool:
        """Computed by the depthwise kernel (kind "depthwise"): one input channel per group,
        at most MAX_CHANNEL_MULTIPLIER outputs per group (more share input loads better in
        the conv kernel's register tile), a column stride of at most MAX_PHASES (the input
        rows are de-interleaved into that many phases), a kernel of at most MAX_DEPTHWISE_TAPS
        taps reaching at most MAX_DEPTHWISE_REACH pixels (its unrolled code and stack
        buffer stay small)."""
        (kh, kw), (dh, dw) = (v.extent for v in self.w_vars[2:]), self.attrs.dilation
        return self.cin_group == 1 and \
            self.out_vars[1].extent // self.attrs.groups <= MAX_CHANNEL_MULTIPLIER and \
            self.attrs.stride[1] <= MAX_PHASES and kh * kw <= MAX_DEPTHWISE_TAPS and \
            max((kh - 1) * dh, (kw - 1) * dw) <= MAX_DEPTHWISE_REACH

    def strides(self, load: Load, variables) -> tuple:
        return tuple(load.offset.coeff(v) for v in variables)


class Kind(StrEnum):
    """A kernel's kind: the shape of its loop nest and the backend emitter that runs it
    (jitcore/llvm/kinds.py registers one entry per kind). Set where the kernel is built
    (passes/lower.py, pool.py, fuse_rows.py, fuse_outputs.py; legality.py turns a pointwise
    kernel it vectorizes through transposed tiles into TILES) and checked against the
    kernel's fields by `kind_error`. The one place kind names are spelled."""
    POINTWISE = "pointwise"                  # parallel loops; the last one is the vector loop
    TILES = "tiles"                          # pointwise, transposed reads in register tiles
    REDUCE_HORIZONTAL = "reduce_horizontal"  # the last loop is a reduce loop
    REDUCE_VERTICAL = "reduce_vertical"      # reduce loops, then a parallel (vector) loop
    SCAN = "scan"                            # a running sum along a "scan" loop
    ROWS = "rows"                            # row fusion: `parts` run in order per row
    GEMM = "gemm"                            # a matmul with its epilogue
    GEMV = "gemv"                            # a matmul whose M or N is 1
    CONV = "conv"                            # a convolution with its epilogue
    DEPTHWISE = "depthwise"                  # a depthwise convolution with its epilogue
    POOL = "pool"                            # 2-d pooling with its epilogue

    @property
    def elementwise(self) -> bool:
        """One value per output element, no reduction: pointwise or tiled."""
        return self in (Kind.POINTWISE, Kind.TILES)

    @property
    def reduces(self) -> bool:
        """A plain reduction kernel (horizontal or vertical)."""
        return self in (Kind.REDUCE_HORIZONTAL, Kind.REDUCE_VERTICAL)

    @property
    def row_part(self) -> bool:
        """May be a part of a row-fused kernel (fuse_rows.py)."""
        return self in (Kind.POINTWISE, Kind.TILES, Kind.REDUCE_HORIZONTAL)

    @property
    def reads_run_time_extents(self) -> bool:
        """Its emitter reads extents at run time (jc.jit(dynamic=True)); the others are
        compiled per shape (passes/dynamic.py)."""
        return self in (Kind.POINTWISE, Kind.TILES, Kind.REDUCE_HORIZONTAL,
                        Kind.REDUCE_VERTICAL, Kind.ROWS, Kind.GEMM, Kind.GEMV)

    @property
    def ranges_inner_loop(self) -> bool:
        """With no parallel loop first, a call covers a range of the last (parallel) loop."""
        return self in (Kind.REDUCE_VERTICAL, Kind.SCAN)


def reduction_kind(loops: list) -> Kind:
    """A reduction kernel's kind from its loop order (lowering's choice): vertical when a
    parallel loop is the last (the vector loop), else horizontal."""
    vertical = loops and loops[-1].kind == "parallel"
    return Kind.REDUCE_VERTICAL if vertical else Kind.REDUCE_HORIZONTAL


def kind_error(kernel: "Kernel") -> str | None:
    """Why the kernel's fields do not fit its kind (None: they do): each kind's own fields
    are set, and no other kind's."""
    k = kernel.kind
    if not isinstance(k, Kind):
        return f"kind {k!r} is not a Kind"
    conv_kind = Kind.DEPTHWISE if k == Kind.DEPTHWISE else Kind.CONV   # (one field, two kinds)
    has = {Kind.GEMM: kernel.gemm is not None and not kernel.gemm.matvec,
           Kind.GEMV: kernel.gemm is not None and kernel.gemm.matvec,
           conv_kind: kernel.conv is not None, Kind.POOL: kernel.pool is not None,
           Kind.ROWS: bool(kernel.parts), Kind.TILES: kernel.tile_var is not None,
           Kind.SCAN: any(lp.scan for lp in kernel.loops)}
    extra = [name for name, present in has.items() if present and name != k]
    if extra:
        return f"a {k} kernel with the fields of {', '.join(extra)}"
    if k in has and not has[k]:
        return f"a {k} kernel without its own field"
    if k == Kind.DEPTHWISE and not kernel.conv.depthwise:
        return "a depthwise kernel of a conv that is not depthwise"
    if k.reduces != (kernel.reduction is not None):
        return f"a {k} kernel {'without' if k.reduces else 'with'} a reduction"
    if k.reduces and reduction_kind(kernel.loops) != k:
        return f"a {k} kernel whose loop order is {reduction_kind(kernel.loops)}"
    return None


def verify_kinds(kernels: list) -> list:
    """The kernels, each checked against its kind (and a row-fused one's parts against
    theirs); CompileError at the first that does not fit."""
    for kernel in kernels:
        for k in [kernel, *kernel.parts]:
            error = kind_error(k)
            if error is not None:
                raise CompileError(f"kernel {k.name}: {error}")
    return kernels


# The fusion passes (fuse_outputs, fuse_rows) stop growing a kernel at this many ops: the work
# and compile time of one kernel stay bounded however long the graph (lowering bounds what a
# single kernel inlines the same way, passes/recompute.py).
MAX_FUSED_OPS = 256


@dataclass
class Kernel:
    name: str
    loops: list
    stores: list
    reduction: Reduction | None = None
    ops: tuple = ()                  # the graph ops fused into this kernel, for inspection
    # filled by the legality pass
    vector_bits: int = 0
    lanes: int = 1
    vectorized: bool = False
    reason: str | None = None
    tile_var: Var | None = None      # vectorized through transposed register tiles along it
    task: int | None = None          # the inter-op task that runs it (None: the main line)
    parts: list = field(default_factory=list)   # row fusion: kernels run in order per row
    # loop kinds: "parallel", "reduce", or "scan" (a running sum: sequential, each step
    # reads the previous step's stored output; see codegen's emit_scan)
    gemm: Gemm | None = None         # a matmul with its epilogue (kind "gemm" or "gemv")
    pool: Pool | None = None         # a pooling with its epilogue (kind "pool")
    conv: Conv | None = None         # a convolution with its epilogue (kind "conv" or
                                     # "depthwise")
    kind: Kind = field(kw_only=True)  # set by whoever builds the kernel (see Kind)

    @property
    def range_loop(self):
        """The loop a kernel call's [start, stop) covers: the first loop when it is parallel,
        else the inner parallel loop of a vertical reduction (column sums split by columns)
        or of a scan along the first axis, else none (the kernel runs whole)."""
        if self.loops and self.loops[0].kind == "parallel":
            return self.loops[0]
        if self.kind.ranges_inner_loop and self.loops[-1].kind == "parallel":
            return self.loops[-1]
        return None

    @property
    def range_extent(self) -> int:
        lp = self.range_loop
        return lp.var.extent if lp is not None else 1

    @property
    def vector_var(self) -> Var | None:
        return self.loops[-1].var if self.loops else None

    @property
    def loop_nest(self) -> str:
        """e.g. `for i0 in 0..4096 (parallel), i1 in 0..1024 (reduce, vector)`. (A kind may
        add to it in its report: jitcore/llvm/registry.py.)"""
        parts = []
        for i, lp in enumerate(self.loops):
            tag = lp.kind + (", vector" if self.vectorized and i == len(self.loops) - 1 else "")
            tag += f", {self.lanes}x{self.lanes} tiles" if lp.var == self.tile_var else ""
            parts.append(f"{lp.var.name} in 0..{extent_text(lp.var.extent)} ({tag})")
        return "for " + ", ".join(parts) if parts else "(no loops)"

    def loads(self) -> list:
        """Every load of the kernel (a gemm's operands first)."""
        operands = [self.gemm.a, self.gemm.b] if self.gemm is not None else \
            [self.conv.x, self.conv.w] if self.conv is not None else []
        return operands + [n for n in walk(self.values()) if isinstance(n, Load)]

    def values(self) -> list:
        """The expressions the kernel evaluates: its stored values (and a pool's source)."""
        return [s.value for s in self.stores] + ([self.pool.source] if self.pool else [])

    def buffers(self) -> list:
        seen = {}
        for b in [ld.buffer for ld in self.loads()] + [s.buffer for s in self.stores]:
            seen.setdefault(b.name, b)
        return list(seen.values())

    def dtypes(self) -> set:
        return {n.dtype for n in walk(self.values())} | \
            {s.buffer.dtype for s in self.stores}

    def iterations(self) -> int:
        n = 1
        for lp in self.loops:
            n *= lp.var.extent
        return n


def rebuild(value, replace, memo: dict | None = None):
    """`value` with every node for which `replace(node)` returns a node swapped for it; the
    Computes above a swapped node are rebuilt, the rest shared. `memo` carries the mapping
    across several roots (so shared subexpressions stay shared)."""
    memo = {} if memo is None else memo
    for n in walk([value]):
        if id(n) in memo:
            continue
        if isinstance(n, Gather) and memo[id(n.index)] is not n.index:
            n_src = n.with_src((memo[id(n.index)],))       # (replace sees the new index)
            new = replace(n_src)
            memo[id(n)] = n_src if new is None else new
            continue
        new = replace(n)
        if new is None and isinstance(n, Compute):
            new = Compute(n.op, n.dtype, tuple(memo[id(s)] for s in n.src), n.arg)
        memo[id(n)] = n if new is None else new
    return memo[id(value)]


def substituted_stores(stores: list, mapping: dict) -> list:
    """`stores` over new loop variables: every store's and load's offset with the old
    variables replaced by their expressions in `mapping` (shared subexpressions stay
    shared)."""
    memo = {}

    def moved(n):
        if isinstance(n, Gather):
            return n.with_src(n.src, substitute(n.offset, mapping))
        return Load(n.buffer, substitute(n.offset, mapping)) if isinstance(n, Load) else None
    return [Store(s.buffer, substitute(s.offset, mapping), rebuild(s.value, moved, memo))
            for s in stores]


def walk(roots) -> list:
    """Every expression node reachable from roots, sources before users, each once.
    Iterative: expressions thousands of ops deep are fine."""
    order, seen = [], set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((s, False) for s in reversed(getattr(node, "src", ()))
                         if id(s) not in seen)
    return order

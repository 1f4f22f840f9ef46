"""Vectorization legality: a pure analysis that decides, per kernel, vector or scalar and why.

The checks are a table of `(reason, predicate)` pairs tried in order; the first predicate that
holds names the reason the kernel stays scalar. The vocabulary is fixed (REASONS), so tools and
tests can count kernels by reason. The vector loop is always the kernel's last loop.

Transposed reads are vectorized through register tiles rather than gathers: when every load
that strides the vector loop is contiguous along one other parallel loop (the tile loop), the
kernel runs square tiles of TILE_MAX_LANES at most: it loads vectors along the tile loop and
transposes them in registers (see codegen's emit_tiled).
"""
from __future__ import annotations

from jitcore.ir.ops import INDEX_REDUCE, Op

from .kernel import Gather, Kernel, Kind, Load, walk
from .symbolic import Var

TILE_MAX_LANES = 16   # a tile is lanes x lanes elements: 16 x 16 keeps it in 16 registers

REASONS = (
    "no_loops",               # a single element: nothing to vectorize
    "unsupported_op:<op>",    # an op without a vector form (integer pow)
    "non_contiguous_load",    # a load walks the vector loop with a stride other than 0 or 1
                              # and no tile loop makes it contiguous
    "non_contiguous_store",   # the store does not walk the vector loop with stride 1
    "short_inner_loop",       # the vector loop has fewer iterations than one vector
    "sequential_scan",        # a running sum along the vector loop (each step needs the last)
    "irregular_windows",      # a pooling whose column windows have no arithmetic form
                              # (adaptive pooling of a width its output does not divide)
)


def lanes_for(kernel: Kernel, vector_bits: int) -> int:
    """Lanes per vector: the register width over the widest element type in the kernel.
    An arg-reduction counts its values and its running indices (32 bits at least; see
    jitcore/llvm/argreduce.py), not the int64 it stores once per output."""
    if kernel.reduction is not None and kernel.reduction.op in INDEX_REDUCE:
        widest = max([32] + [n.dtype.bits for n in walk([s.value for s in kernel.stores])])
    else:
        widest = max((d.bits for d in _vector_dtypes(kernel)), default=8)
    return max(vector_bits // widest, 1)


def _vector_dtypes(kernel: Kernel) -> set:
    """The dtypes a vector iteration computes in: the index of a gather that does not change
    along the vector loop is computed once per row as a scalar (codegen hoists it), so an
    int64 index does not halve the lanes of a float32 embedding lookup."""
    if not kernel.loops:
        return kernel.dtypes()
    var, scalar = kernel.vector_var, set()
    for g in _gathers(kernel):
        if not varies(g.index, var):
            scalar |= {id(n) for n in walk([g.index])}
    return {n.dtype for n in walk([s.value for s in kernel.stores]) if id(n) not in scalar} | \
        {s.buffer.dtype for s in kernel.stores}


def _unsupported_op(kernel: Kernel):
    for n in walk(kernel.values()):
        if getattr(n, "op", None) == Op.POW and n.dtype.is_int:
            return "pow"          # integer power loops per element
    return None


def _strided_loads(kernel: Kernel) -> list:
    var = kernel.vector_var
    return [ld for ld in kernel.loads() if ld.offset.coeff(var) not in (0, 1)]


def varies(expr, var: Var) -> bool:
    """Whether an expression's value changes along `var` (some load in it moves with it)."""
    return any(isinstance(n, Load) and n.offset.coeff(var) != 0 for n in walk([expr]))


def _gathers(kernel: Kernel) -> list:
    return [n for n in walk([s.value for s in kernel.stores]) if isinstance(n, Gather)]


def _lane_gather(kernel: Kernel) -> bool:
    """A gather whose index changes along the vector loop would need one load per lane."""
    return any(varies(g.index, kernel.vector_var) for g in _gathers(kernel))


def tile_var(kernel: Kernel, lanes: int) -> Var | None:
    """The loop along which every strided load of a pointwise kernel is contiguous, when
    both it and the vector loop span at least one tile; None when no tile is needed or fits
    (or the kernel gathers: tiles load rows at static offsets)."""
    strided = _strided_loads(kernel)
    if not strided or not kernel.kind.elementwise or kernel.vector_var.extent < lanes \
            or _gathers(kernel):
        return None
    if any(ld.offset.coeff(kernel.vector_var) is None for ld in strided):
        return None
    for lp in kernel.loops[:-1]:
        if lp.var.extent >= lanes and all(ld.offset.coeff(lp.var) == 1 for ld in strided):
            return lp.var
    return None


def _bad_load(kernel: Kernel, lanes: int) -> bool:
    if _lane_gather(kernel):
        return True
    return bool(_strided_loads(kernel)) and tile_var(kernel, min(lanes, TILE_MAX_LANES)) is None


def _bad_store(kernel: Kernel) -> bool:
    var = kernel.vector_var
    want = 0 if kernel.kind == Kind.REDUCE_HORIZONTAL else 1
    return any(s.offset.coeff(var) != want for s in kernel.stores)


def _short_loop(kernel: Kernel, lanes: int, masked: bool) -> bool:
    """The vector loop has fewer iterations than one vector and the target cannot mask the
    tail. A tiled kernel runs vectors of at most TILE_MAX_LANES lanes (uint8 at 256 bits:
    16 of its 32), so a loop that spans one tile is long enough (tile_var checks that)."""
    if masked or kernel.vector_var.extent >= lanes:
        return False
    return tile_var(kernel, min(lanes, TILE_MAX_LANES)) is None


CHECKS = (
    ("no_loops", lambda k, lanes, masked: not k.loops),
    ("sequential_scan", lambda k, lanes, masked: k.loops[-1].scan),
    ("unsupported_op", lambda k, lanes, masked: _unsupported_op(k)),
    ("non_contiguous_load", lambda k, lanes, masked: _bad_load(k, lanes)),
    ("non_contiguous_store", lambda k, lanes, masked: _bad_store(k)),
    ("short_inner_loop", _short_loop),
)


def _pool_bad_load(kernel: Kernel) -> bool:
    """Lanes need every load to be a broadcast, a contiguous run, or (a source read along
    a contiguous input row) a run of stride*lanes elements of which every stride-th is used,
    and every gather's index to be the same for all lanes (the output columns and their taps'
    input columns)."""
    p = kernel.pool
    return any(ld.offset.coeff(p.iw) not in (0, 1) or ld.offset.coeff(p.col) not in (0, 1)
               for ld in kernel.loads()) or \
        any(s.offset.coeff(p.col) != 1 for s in kernel.stores) or \
        any(varies(g.index, p.iw) or varies(g.index, p.col) for g in _gathers(kernel))


def _pool_lanes(kernel: Kernel, lanes: int) -> int:
    """Narrower vectors (down to 128 bits) for a pooling whose rows of full windows are
    shorter than a vector of the full width (7 to 15 columns: 8 lanes of float32)."""
    cols, bits = kernel.pool.cols, kernel.vector_bits // lanes     # bits: the widest element
    while lanes * bits > 128 and cols.stride is not None and cols.vector_range(lanes) == (0, 0):
        lanes //= 2
    return lanes


POOL_CHECKS = (
    ("unsupported_op", lambda k, lanes, masked: _unsupported_op(k)),
    ("irregular_windows", lambda k, lanes, masked: k.pool.cols.stride is None),
    ("non_contiguous_load", lambda k, lanes, masked: _pool_bad_load(k)),
    ("short_inner_loop", lambda k, lanes, masked: k.pool.cols.vector_range(lanes) == (0, 0)),
)


def check(kernel: Kernel, vector_bits: int, masked_tails: bool = False) -> Kernel:
    """Fill in the kernel's vector decision (lanes, vectorized, reason) and return it.
    With `masked_tails` (the target masks vector loads/stores) a loop shorter than a vector
    is still vectorized: it runs as one masked iteration."""
    lanes = lanes_for(kernel, vector_bits)
    kernel.vector_bits, kernel.lanes, kernel.tile_var = vector_bits, lanes, None
    if kernel.kind == Kind.TILES:          # decided again below
        kernel.kind = Kind.POINTWISE
    if kernel.gemm is not None or kernel.conv is not None:   # vector code by construction
        dtype = kernel.gemm.dtype if kernel.gemm is not None else kernel.conv.dtype
        kernel.lanes = max(vector_bits // dtype.bits, 1)
        kernel.vectorized, kernel.reason = True, None
        return kernel
    checks = CHECKS
    if kernel.pool is not None:
        checks, lanes = POOL_CHECKS, _pool_lanes(kernel, lanes)
        kernel.lanes = lanes
    for reason, predicate in checks:
        hit = predicate(kernel, lanes, masked_tails)
        if hit:
            kernel.vectorized = False
            kernel.reason = f"{reason}:{hit}" if isinstance(hit, str) else reason
            kernel.lanes = 1
            return kernel
    kernel.vectorized, kernel.reason = True, None
    kernel.tile_var = tile_var(kernel, min(lanes, TILE_MAX_LANES))
    if kernel.tile_var is not None:
        kernel.lanes = min(lanes, TILE_MAX_LANES)
        kernel.kind = Kind.TILES
    return kernel


def coverage(kernels: list) -> tuple:
    """(vectorized kernels, all kernels)."""
    return sum(k.vectorized for k in kernels), len(kernels)


def _as_is(n: int) -> int:
    return n


def _iterations(kernel: Kernel, size) -> int:
    n = 1
    for lp in kernel.loops:
        n *= size(lp.var.extent)
    return n


def flops(kernel: Kernel, size=_as_is) -> int:
    """Arithmetic ops per kernel run (each Compute counts one per iteration; reductions one more;
    a GEMM 2K per output plus its epilogue). `size`: an extent's value (a run-time extent's
    at a call's sizes; by default the extents as they are)."""
    if kernel.parts:
        return sum(flops(p, size) for p in kernel.parts)
    per_iter = sum(1 for n in walk(kernel.values()) if hasattr(n, "op"))
    if kernel.gemm is not None:
        g = kernel.gemm
        outputs = size(g.m.extent) * size(g.n.extent)
        for v in g.batch:
            outputs *= size(v.extent)
        return outputs * (2 * size(g.k.extent) + per_iter)
    if kernel.pool is not None:
        return _iterations(kernel, size) * (per_iter + kernel.pool.window)
    if kernel.conv is not None:
        c = kernel.conv
        return _iterations(kernel, size) * (2 * c.cin_group * c.taps + per_iter)
    combine = kernel.reduction is not None or kernel.kind == Kind.SCAN   # the running add
    return _iterations(kernel, size) * (per_iter + combine)


def bytes_moved(kernel: Kernel, size=_as_is) -> int:
    """A lower bound on memory traffic: every buffer the kernel touches, read or written once;
    a buffer only gathered from, at most one element per iteration (an embedding lookup
    reads its rows, not the table). `size` as for flops."""
    plain = {ld.buffer.name for ld in kernel.loads() if not isinstance(ld, Gather)} | \
        {s.buffer.name for s in kernel.stores}
    total = 0
    for b in kernel.buffers():
        nbytes = b.dtype.itemsize
        for d in b.shape:
            nbytes *= size(d)
        total += nbytes if b.name in plain else \
            min(nbytes, _iterations(kernel, size) * b.dtype.itemsize)
    return total

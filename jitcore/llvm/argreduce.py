"""argmax / argmin kernels, vector or scalar, with numpy's rules exactly.

Every lane keeps the best value it has seen and the index where it first saw it: a new value
replaces the lane's best only when it is strictly better, so a lane holds the FIRST index of
its extremum. "Better" is `>` for argmax (`<` for argmin), and a NaN beats everything but an
earlier NaN (numpy returns the first NaN's index for both). -0.0 and 0.0 compare equal, so
neither replaces the other.

Lanes are merged at the end by `pick`: the better value, and on a tie (equal values, or two
NaNs) the smaller index. Each lane holds the first index of its own extremum, so the smallest
index among the lanes holding the overall extremum is the first index overall; the merge is a
total order on (value, index), so its tree shape does not change the result.

Two kernel shapes (see passes/legality.py and passes/lower.py for how they are chosen):
    horizontal  the reduced axis is the vector loop (argmax(axis=-1), full reductions): lanes
                walk consecutive elements of a row; the lanes are merged at the row's end
    vertical    a parallel axis is the vector loop (argmax(axis=0)): each lane is one output
                element and walks its column row by row; nothing to merge
The accumulators start at the reduction's identity with index 0. That is right even when no
value ever beats the identity: then every value equals it and numpy's answer is 0 too.
Indices are counted in i32 when the reduced extent allows (one register per vector of 32-bit
values) and widened to int64 when stored.
"""
from __future__ import annotations

from llvmlite import ir

from jitcore.ir.ops import Op

from . import irutil as u
from .opemit import emit

INDEX32_LIMIT = 2**31 - 1024    # a reduced extent below this counts its indices in i32


def index_type(value_dtype, extent: int) -> ir.IntType:
    """The integer type of the running indices: as wide as the values, at least 32 bits."""
    return u.I32 if value_dtype.bits <= 32 and extent < INDEX32_LIMIT else u.I64


class ArgReduce:
    """Emits the arg-reduction of `emitter.kernel` (a KernelEmitter) with its builder;
    `identity`: the value no other beats (-inf for a float argmax)."""

    def __init__(self, emitter, identity):
        self.ke, self.b, self.identity = emitter, emitter.b, identity
        k = emitter.kernel
        self.op, self.st = k.reduction.op, k.stores[0]
        self.dtype = self.st.value.dtype
        reduce_loops = [lp for lp in k.loops if lp.kind == "reduce"]
        assert len(reduce_loops) == 1, "an arg-reduction reduces one axis"
        self.loop = reduce_loops[0]
        self.ity = index_type(self.dtype, self.loop.var.extent)

    # -- the order -----------------------------------------------------------------------
    def beats(self, v, best):
        """v is strictly better than best (lane-wise)."""
        b = self.b
        cmp = emit(b, Op.GT if self.op == Op.ARGMAX else Op.LT, self.dtype, self.dtype, [v, best])
        if not self.dtype.is_float:
            return cmp
        first_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", best, best))
        return b.or_(cmp, first_nan)

    def ties(self, v, w):
        """v and w are equally good: equal (-0.0 == 0.0), or both NaN."""
        b = self.b
        if not self.dtype.is_float:
            return emit(b, Op.EQ, self.dtype, self.dtype, [v, w])
        both_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", w, w))
        return b.or_(b.fcmp_ordered("==", v, w), both_nan)

    def pick(self, a, c):
        """The better of two (value, index) pairs; on a tie, the smaller index."""
        b = self.b
        take = b.or_(self.beats(c[0], a[0]),
                     b.and_(self.ties(a[0], c[0]), b.icmp_unsigned("<", c[1], a[1])))
        return b.select(take, c[0], a[0]), b.select(take, c[1], a[1])

    # -- accumulators --------------------------------------------------------------------
    def accumulator(self, lanes: int):
        """(best, where) slots, set to (identity, 0)."""
        best = u.alloca_once(self.b, u.value_type(self.dtype, lanes), name="best")
        where = u.alloca_once(self.b, ir.VectorType(self.ity, lanes) if lanes > 1 else self.ity,
                              name="where")
        self.b.store(u.const(best.type.pointee, self.identity), best)
        self.b.store(u.const(where.type.pointee, 0), where)
        return best, where

    def update(self, acc, v, index):
        """Replace the lanes of acc that v beats (lanes off the tail mask never)."""
        b = self.b
        best, where = acc
        old, old_index = b.load(best), b.load(where)
        better = self.beats(v, old)
        if self.ke.mask is not None:
            better = b.and_(better, self.ke.mask)
        b.store(b.select(better, v, old), best)
        b.store(b.select(better, index, old_index), where)

    def position(self, var, lanes: int):
        """The index of each lane: env[var] + 0, 1, ..., lanes - 1 (in the index type)."""
        i = self.ke.env[var]
        i = self.b.trunc(i, self.ity) if self.ity is u.I32 else i
        if lanes == 1:
            return i
        iota = ir.Constant(ir.VectorType(self.ity, lanes), [self.ity(n) for n in range(lanes)])
        return self.b.add(u.splat(self.b, i, lanes), iota)

    def widen(self, index):
        """An index as the stored int64 (indices are never negative)."""
        n = u.lanes_of(index)
        return index if self.ity is u.I64 else \
            self.b.zext(index, ir.VectorType(u.I64, n) if n > 1 else u.I64)

    # -- kernel shapes -------------------------------------------------------------------
    def horizontal(self, n_acc: int):
        """One output: lanes (and `n_acc` accumulators, which hide the compare-select
        latency) walk the reduced axis; then the accumulators and lanes are merged."""
        ke, b, lanes = self.ke, self.b, self.ke.kernel.lanes
        var = self.loop.var
        vaccs = [self.accumulator(lanes) for _ in range(n_acc)] if lanes > 1 else []
        sacc = self.accumulator(1)

        def inner(n, part):
            v = ke.value(self.st.value, n, {})
            self.update(vaccs[part] if n > 1 else sacc, v, self.position(var, n))
        ke.vector_loop(self.loop, inner, False, n_acc)
        total = (b.load(sacc[0]), b.load(sacc[1]))
        if vaccs:
            pairs = [(b.load(best), b.load(where)) for best, where in vaccs]
            while len(pairs) > 1:
                pairs = [self.pick(x, y) for x, y in zip(pairs[::2], pairs[1::2])]
            total = self.pick(self._lanes_merged(pairs[0]), total)
        ke.store(self.st.buffer, self.st.offset, self.widen(total[1]), 1)

    def _lanes_merged(self, pair):
        """The lanes of one (values, indices) pair merged by halves down to scalars."""
        b, n = self.b, u.lanes_of(pair[0])
        while n > 1:
            (v_lo, v_hi), (i_lo, i_hi) = (u.halves(b, x) for x in pair)
            pair = self.pick((v_lo, i_lo), (v_hi, i_hi))
            n //= 2
        return tuple(b.extract_element(x, u.I32(0)) for x in pair)

    def vertical(self, width: int, first: bool):
        """One output per lane: blocks of `width` vectors of the vector loop (the output
        axis) walk the reduced axis row by row, each lane keeping its column's best."""
        ke, b = self.ke, self.b
        k = ke.kernel
        var = k.loops[-1].var

        def block(lanes, count):
            base = ke.env[var]
            accs = [self.accumulator(lanes) for _ in range(count)]

            def at(p):
                ke.env[var] = b.add(base, u.I64(p * lanes)) if p else base

            def step():
                row = ke.env[self.loop.var]
                row = u.splat(b, b.trunc(row, self.ity) if self.ity is u.I32 else row, lanes)
                for p, acc in enumerate(accs):
                    at(p)
                    self.update(acc, ke.value(self.st.value, lanes, {}), row)
            ke.loop(self.loop, step, False)
            for p, (_, where) in enumerate(accs):
                at(p)
                ke.store(self.st.buffer, self.st.offset, self.widen(b.load(where)), lanes)
        ke.vector_loop(k.loops[-1], block, first, width, blocked=True)

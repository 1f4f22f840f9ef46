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


class ArgReduction:
    """The arg-reductions of the reduction emitters (reduce.py mixes this into them): their
    own methods, on their own builder and loop variables. `arg_setup` first."""

    def arg_setup(self, identity):
        """The kernel's arg-reduction; `identity`: the value no other beats (-inf for a
        float argmax)."""
        k = self.kernel
        self.arg_identity = identity
        self.arg_op, self.arg_st = k.reduction.op, k.stores[0]
        self.arg_dtype = self.arg_st.value.dtype
        reduce_loops = [lp for lp in k.loops if lp.kind == "reduce"]
        assert len(reduce_loops) == 1, "an arg-reduction reduces one axis"
        self.arg_loop = reduce_loops[0]
        self.arg_ity = index_type(self.arg_dtype, self.arg_loop.var.extent)
        return self

    # -- the order -----------------------------------------------------------------------
    def beats(self, v, best):
        """v is strictly better than best (lane-wise)."""
        b = self.b
        dtype = self.arg_dtype
        cmp = emit(b, Op.GT if self.arg_op == Op.ARGMAX else Op.LT, dtype, dtype, [v, best])
        if not self.arg_dtype.is_float:
            return cmp
        first_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_ordered("ord", best, best))
        return b.or_(cmp, first_nan)

    def ties(self, v, w):
        """v and w are equally good: equal (-0.0 == 0.0), or both NaN."""
        b = self.b
        if not self.arg_dtype.is_float:
            return emit(b, Op.EQ, self.arg_dtype, self.arg_dtype, [v, w])
        both_nan = b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", w, w))
        return b.or_(b.fcmp_ordered("==", v, w), both_nan)

    def pick(self, a, c):
        """The better of two (value, index) pairs; on a tie, the smaller index."""
        b = self.b
        take = b.or_(self.beats(c[0], a[0]),
                     b.and_(self.ties(a[0], c[0]), b.icmp_unsigned("<", c[1], a[1])))
        return b.select(take, c[0], a[0]), b.select(take, c[1], a[1])

    # -- accumulators --------------------------------------------------------------------
    def arg_accumulator(self, lanes: int):
        """(best, where) slots, set to (identity, 0)."""
        best = u.alloca_once(self.b, u.value_type(self.arg_dtype, lanes), name="best")
        ity = self.arg_ity
        where = u.alloca_once(self.b, ir.VectorType(ity, lanes) if lanes > 1 else ity,
                              name="where")
        self.b.store(u.const(best.type.pointee, self.arg_identity), best)
        self.b.store(u.const(where.type.pointee, 0), where)
        return best, where

    def arg_update(self, acc, v, index):
        """Replace the lanes of acc that v beats (lanes off the tail mask never)."""
        b = self.b
        best, where = acc
        old, old_index = b.load(best), b.load(where)
        better = self.beats(v, old)
        if self.mask is not None:
            better = b.and_(better, self.mask)
        b.store(b.select(better, v, old), best)
        b.store(b.select(better, index, old_index), where)

    def arg_position(self, var, lanes: int):
        """The index of each lane: env[var] + 0, 1, ..., lanes - 1 (in the index type)."""
        i = self.env[var]
        i = self.b.trunc(i, self.arg_ity) if self.arg_ity is u.I32 else i
        if lanes == 1:
            return i
        ity = self.arg_ity
        iota = ir.Constant(ir.VectorType(ity, lanes), [ity(n) for n in range(lanes)])
        return self.b.add(u.splat(self.b, i, lanes), iota)

    def widen(self, index):
        """An index as the stored int64 (indices are never negative)."""
        n = u.lanes_of(index)
        return index if self.arg_ity is u.I64 else \
            self.b.zext(index, ir.VectorType(u.I64, n) if n > 1 else u.I64)

    # -- kernel shapes -------------------------------------------------------------------
    def arg_horizontal(self, n_acc: int):
        """One output: lanes (and `n_acc` accumulators, which hide the compare-select
        latency) walk the reduced axis; then the accumulators and lanes are merged."""
        b, lanes = self.b, self.kernel.lanes
        var = self.arg_loop.var
        vaccs = [self.arg_accumulator(lanes) for _ in range(n_acc)] if lanes > 1 else []
        sacc = self.arg_accumulator(1)

        def inner(n, part):
            v = self.value(self.arg_st.value, n, {})
            self.arg_update(vaccs[part] if n > 1 else sacc, v, self.arg_position(var, n))
        self.vector_loop(self.arg_loop, inner, False, n_acc)
        total = (b.load(sacc[0]), b.load(sacc[1]))
        if vaccs:
            pairs = [(b.load(best), b.load(where)) for best, where in vaccs]
            while len(pairs) > 1:
                pairs = [self.pick(x, y) for x, y in zip(pairs[::2], pairs[1::2])]
            total = self.pick(self._lanes_merged(pairs[0]), total)
        self.store(self.arg_st.buffer, self.arg_st.offset, self.widen(total[1]), 1)

    def _lanes_merged(self, pair):
        """The lanes of one (values, indices) pair merged by halves down to scalars."""
        b, n = self.b, u.lanes_of(pair[0])
        while n > 1:
            (v_lo, v_hi), (i_lo, i_hi) = (u.halves(b, x) for x in pair)
            pair = self.pick((v_lo, i_lo), (v_hi, i_hi))
            n //= 2
        return tuple(b.extract_element(x, u.I32(0)) for x in pair)

    def arg_vertical(self, width: int, first: bool):
        """One output per lane: blocks of `width` vectors of the vector loop (the output
        axis) walk the reduced axis row by row, each lane keeping its column's best."""
        b = self.b
        k = self.kernel
        var = k.loops[-1].var

        def block(lanes, count):
            base = self.env[var]
            accs = [self.arg_accumulator(lanes) for _ in range(count)]

            def at(p):
                self.env[var] = b.add(base, u.I64(p * lanes)) if p else base

            def step():
                row = self.env[self.arg_loop.var]
                ity = self.arg_ity
                row = u.splat(b, b.trunc(row, ity) if ity is u.I32 else row, lanes)
                for p, acc in enumerate(accs):
                    at(p)
                    self.arg_update(acc, self.value(self.arg_st.value, lanes, {}), row)
            self.loop(self.arg_loop, step, False)
            for p, (_, where) in enumerate(accs):
                at(p)
                self.store(self.arg_st.buffer, self.arg_st.offset, self.widen(b.load(where)), lanes)
        self.vector_loop(k.loops[-1], block, first, width, blocked=True)

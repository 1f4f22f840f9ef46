"""Pairwise summation in generated code: a binary counter of partial sums.

A reduction kernel adds its values into a few vector accumulators; over a long row each lane
would add n / (lanes * accumulators) values in sequence, and a float32 sum's error grows
with that count (float32 stops counting ones at 2**24). Instead, every block (BLOCK_TRIPS
trips of the main loop) the accumulators are summed as a tree and pushed into a binary
counter: level l holds the sum of 2**l blocks, and a push adds equal-sized sums together
(carrying like binary addition), so each value goes through about log2(n / block) additions
after its block, as in numpy's pairwise sum.

The error bound has numpy's form. numpy adds 16 values in sequence per accumulator (blocks
of 128, 8 accumulators), 3 levels to join them, then halves pairwise: for n = 2**k a value
sees at most k + 11 roundings. Here each lane of each accumulator adds BLOCK_TRIPS = 16
values in sequence (from 0: 15 roundings), log2(accumulators) levels join them, log2(blocks)
levels of the counter and log2(lanes) of the final lane tree follow: with a block of
16 * accumulators * lanes = 2**b elements, 15 + (k - b) + log2(accumulators * lanes)
= k + 11 as well, at every vector width. (The fold adds a level per set bit of the block
count when that is not a power of two, as numpy's uneven halves do.)

The structure depends only on the row length and the loop shape, never on the thread
count (one thread reduces a whole row), so results stay bitwise reproducible. Rows shorter
than one block never push, and `fold` then returns its argument untouched.
"""
from __future__ import annotations

from llvmlite import ir

from . import irutil as u
from .codegen import BLOCK_TRIPS

LEVELS = 64          # a counter of 64 bits never overflows


class PairwiseSum:
    """A counter of partial sums of type `ty` (scalar or vector), reset with `reset`.
    `combine(a, b)` emits the addition (the reduction's combine op)."""

    def __init__(self, builder: ir.IRBuilder, ty: ir.Type, combine, name: str):
        self.b, self.ty, self.combine = builder, ty, combine
        self.stack = u.alloca_once(builder, ir.ArrayType(ty, LEVELS), name=f"{name}.levels")
        self.count = u.alloca_once(builder, u.I64, name=f"{name}.count")
        self.name = name

    def reset(self):
        self.b.store(u.I64(0), self.count)

    def _slot(self, level):
        return self.b.gep(self.stack, [u.I64(0), level])

    def push(self, value):
        """Add one block's sum: merge it with each full level below the lowest empty one
        (the set low bits of the count), then store it at that level."""
        b = self.b
        count = b.load(self.count)
        carry = u.alloca_once(b, self.ty, name=f"{self.name}.v")
        b.store(value, carry)

        def merge(lv, bits):
            b.store(self.combine(b.load(self._slot(lv)), b.load(carry)), carry)
        level = self._walk_bits(count, "carry", merge, while_low_bit=True)
        b.store(b.load(carry), self._slot(b.load(level)))
        b.store(b.add(count, u.I64(1)), self.count)

    def fold(self, rest):
        """`rest` (what was not pushed) plus every filled level, lowest level first."""
        b = self.b
        total = u.alloca_once(b, self.ty, name=f"{self.name}.total")
        b.store(rest, total)

        def add_level(lv, bits):
            with b.if_then(b.icmp_unsigned("!=", b.and_(bits, u.I64(1)), u.I64(0))):
                b.store(self.combine(b.load(self._slot(lv)), b.load(total)), total)
        self._walk_bits(b.load(self.count), "fold", add_level, while_low_bit=False)
        return b.load(total)

    def _walk_bits(self, count, name: str, body, while_low_bit: bool):
        """body(level, bits) for level = 0, 1, ... with bits = count >> level, while the low
        bit of bits is set (`while_low_bit`: push's carries) or while any bit is left (fold).
        Returns the level slot: afterwards it holds the first level not walked."""
        b = self.b
        level = u.alloca_once(b, u.I64, name=f"{self.name}.{name}.l")
        bits = u.alloca_once(b, u.I64, name=f"{self.name}.{name}.bits")
        b.store(u.I64(0), level)
        b.store(count, bits)
        cond = b.append_basic_block(f"{self.name}.{name}")
        loop = b.append_basic_block(f"{self.name}.{name}.body")
        done = b.append_basic_block(f"{self.name}.{name}.end")
        b.branch(cond)
        b.position_at_end(cond)
        c = b.load(bits)
        test = b.and_(c, u.I64(1)) if while_low_bit else c
        b.cbranch(b.icmp_unsigned("!=", test, u.I64(0)), loop, done)
        b.position_at_end(loop)
        lv = b.load(level)
        body(lv, c)
        b.store(b.add(lv, u.I64(1)), level)
        b.store(b.lshr(c, u.I64(1)), bits)
        b.branch(cond)
        b.position_at_end(done)
        return level


class PairwiseAccumulators:
    """A horizontal float sum's accumulators (vector `accs`, scalar `sacc`) pushed into
    binary counters of partial sums (PairwiseSum) and emptied at the end of every block
    (BLOCK_TRIPS trips of the innermost loop; when it is short, enough of its runs to make
    about as many adds per accumulator). A block is 16 trips of `len(accs)` vectors (in a
    sum kernel 8 from cache, 128 bytes of them from memory, see
    HorizontalEmitter.sum_accumulators; in a row kernel 4): a push, a short carry loop,
    costs little against the block's loads.
    `ke`: the reduction's emitter (reduce.py), read for its builder, lanes and combine op."""

    def __init__(self, ke, accs, sacc, vector_sum, identity):
        self.ke, self.accs, self.sacc, self.vector_sum = ke, accs, sacc, vector_sum
        self.identity = identity
        b = ke.b
        self.vectors = PairwiseSum(b, accs[0].type.pointee, ke.combine, "vpairs") \
            if ke.kernel.lanes > 1 else None
        self.scalars = PairwiseSum(b, sacc.type.pointee, ke.combine, "spairs")
        for counter in (self.vectors, self.scalars):
            if counter is not None:
                counter.reset()

    def _zero(self, acc):
        self.ke.b.store(u.const(acc.type.pointee, self.identity), acc)

    def block(self, vectors: bool = True, scalars: bool = True):
        """End a block: push the accumulators' sums into the counters and zero them."""
        if vectors and self.vectors is not None:
            self.vectors.push(self.vector_sum())
            for acc in self.accs:
                self._zero(acc)
        if scalars or self.vectors is None:
            self.scalars.push(self.ke.b.load(self.sacc))
            self._zero(self.sacc)

    def block_of_trips(self):
        """After BLOCK_TRIPS trips of the innermost loop: only its main loop's accumulators
        filled (in a scalar kernel, that is the scalar one)."""
        self.block(scalars=False)

    def total_vector(self):
        return self.vectors.fold(self.vector_sum())

    def total_scalar(self):
        return self.scalars.fold(self.ke.b.load(self.sacc))

    def rows(self, last, row, n_acc: int):
        """The body of the outer reduce loops: one run of the innermost loop, then the end
        of a block every `runs` runs, so that no accumulator adds more than about
        BLOCK_TRIPS values in sequence within a block."""
        ke, b = self.ke, self.ke.b
        extent, lanes = last.var.extent, ke.kernel.lanes
        if lanes == 1:
            vector_adds, scalar_adds = 0, extent
        else:
            vector_adds = -(-(extent // lanes) // n_acc) + (1 if ke.masked_tail else 0)
            scalar_adds = 0 if ke.masked_tail else extent % lanes
        per_run = max(min(vector_adds, BLOCK_TRIPS), scalar_adds, 1)
        runs = max(1, BLOCK_TRIPS // per_run)
        end_block = lambda: self.block(vector_adds > 0, scalar_adds > 0)  # noqa: E731
        done = u.alloca_once(b, u.I64, name="runs")
        b.store(u.I64(0), done)

        def body():
            row()
            if runs == 1:
                return end_block()
            n = b.add(b.load(done), u.I64(1))
            b.store(n, done)
            with b.if_then(b.icmp_signed("==", n, u.I64(runs))):
                end_block()
                b.store(u.I64(0), done)
        return body

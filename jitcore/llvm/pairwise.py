"""Pairwise summation in generated code: a binary counter of partial sums.

A reduction kernel adds its values into a few vector accumulators; over a long row each lane
would add n / (lanes * accumulators) values in sequence, and a float32 sum's error grows
with that count (float32 stops counting ones at 2**24). Instead, every block of a fixed
number of vectors is pushed into a binary counter: level l holds the sum of 2**l blocks,
and a push adds equal-sized sums together (carrying like binary addition), so each value
goes through about log2(n / block) additions after its block, as in numpy's pairwise sum.

The structure depends only on the row length and the loop shape, never on the thread
count (one thread reduces a whole row), so results stay bitwise reproducible. Rows shorter
than one block never push, and `fold` then returns its argument untouched.
"""
from __future__ import annotations

from llvmlite import ir

from . import irutil as u

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

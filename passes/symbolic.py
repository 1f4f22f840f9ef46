"""Integer index expressions over loop variables, simplified with the variables' ranges.

An expression is linear: `const + sum(coeff * atom)`, where an atom is a loop variable or a
floor-division / modulo of another expression by a positive constant (these come from
reshapes). Construction simplifies with ranges, so `(6*i + j) // 6` with `0 <= j < 6` becomes
`i`, and `6*(k // 6) + k % 6` becomes `k`: reshapes of contiguous data lower to plain strides.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

# run-time extents (jc.jit(dynamic=True)): their placeholders and factoring are defined with
# sizes; a loop over axes merged with dynamic ones runs c * s_b * s_t times (monomial)
from jitcore.ir.sizes import (HUGE, MAX_SYMBOLS, PLACEHOLDERS,  # noqa: F401
                              dynamic_extent, extent_text, monomial, symbol_of)


def per_item(work: int, items: int) -> int | None:
    """work / items as c times a product of run-time extents, when that is its leading term
    (a softmax row over T costs c * s1 per row): the product of the fewest symbols whose
    multiple is within 2**-20 of the quotient (the lower terms are ~2**-40 of it). None when
    the quotient is a static count (or no such product fits). `work` and `items` are
    counted at the placeholders."""
    q = work // max(items, 1)
    if q < HUGE:
        return None
    found = monomial(items)
    symbols = sorted(set(found[1] if found else ()) | {0, 1, 2})
    for degree in (1, 2, 3):
        for ks in itertools.combinations_with_replacement(symbols, degree):
            p = math.prod(PLACEHOLDERS[k] for k in ks)
            c = round(q / p)
            if 1 <= c < HUGE and abs(c * p - q) <= q >> 20:   # (placeholders differ by 2**-8)
                return c * p
    return None


def at_sizes(extents: tuple):
    """A function from the pass's integers to their values at a call's sizes (`extents`:
    each symbol's value): c * s_b * s_t is c times the product; other integers as they are."""
    def size(n: int) -> int:
        found = monomial(n)
        if found is None:
            return n
        value = found[0]
        for k in found[1]:
            value *= extents[k]
        return value
    return size


@dataclass(frozen=True)
class Var:
    """A loop variable ranging over [0, extent)."""
    name: str
    extent: int

    def bounds(self):
        return 0, max(self.extent - 1, 0)

    def __repr__(self):
        return self.name


def fits(lo: int, hi: int, d: int) -> bool:
    """0 <= lo and hi < d for every run-time value of the extents in hi and d. A static d
    compares as is; a run-time d (a monomial) stands for every size up to its placeholder,
    so a static hi < d proves nothing: hi + 1 must divide it (c'' times some of its
    symbols, never more than d at any size: m % s1 < s1, and 8*t + j < 8*s1)."""
    if lo < 0:
        return False
    if d < HUGE:
        return hi < d
    return d % (hi + 1) == 0


@dataclass(frozen=True)
class Div:
    expr: "Lin"
    d: int

    def bounds(self):
        lo, hi = self.expr.bounds()
        if self.d < HUGE or (lo >= 0 and (hi + 1) % self.d == 0):
            return lo // self.d, hi // self.d
        return min(lo, 0), max(hi, 0)       # (a run-time d >= 1: |e // d| <= |e|)

    def __repr__(self):
        return f"({self.expr!r} // {self.d})"


@dataclass(frozen=True)
class Mod:
    expr: "Lin"
    d: int

    def bounds(self):
        lo, hi = self.expr.bounds()
        return (lo, hi) if fits(lo, hi, self.d) else (0, self.d - 1)

    def __repr__(self):
        return f"({self.expr!r} % {self.d})"


@dataclass(frozen=True)
class Lin:
    """const + sum(coeff * atom); terms are sorted by repr so equal expressions compare equal."""
    terms: tuple = ()        # ((atom, coeff), ...)
    const: int = 0

    def bounds(self):
        lo = hi = self.const
        for atom, c in self.terms:
            alo, ahi = atom.bounds()
            lo += c * (alo if c > 0 else ahi)
            hi += c * (ahi if c > 0 else alo)
        return lo, hi

    def __add__(self, other) -> "Lin":
        other = lin(other)
        acc = dict(self.terms)
        for atom, c in other.terms:
            acc[atom] = acc.get(atom, 0) + c
        return _make(acc, self.const + other.const)

    __radd__ = __add__

    def __mul__(self, k: int) -> "Lin":
        return _make({a: c * k for a, c in self.terms}, self.const * k)

    __rmul__ = __mul__

    def __floordiv__(self, d: int) -> "Lin":
        return floordiv(self, d)

    def __mod__(self, d: int) -> "Lin":
        return mod(self, d)

    def coeff(self, var: Var):
        """The coefficient of `var` if the expression is linear in it, else None."""
        c = 0
        for atom, k in self.terms:
            if atom == var:
                c = k
            elif not isinstance(atom, Var) and var in atom_vars(atom):
                return None
        return c

    def vars(self) -> set:
        out = set()
        for atom, _ in self.terms:
            out |= atom_vars(atom)
        return out

    def __repr__(self):
        parts = [repr(a) if c == 1 else f"{c}*{a!r}" for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)


def atom_vars(atom) -> set:
    return {atom} if isinstance(atom, Var) else atom.expr.vars()


def lin(x) -> Lin:
    if isinstance(x, Lin):
        return x
    if isinstance(x, int):
        return Lin((), x)
    return Lin(((x, 1),), 0)


def _make(acc: dict, const: int) -> Lin:
    acc = {a: c for a, c in acc.items() if c != 0 and not (isinstance(a, Var) and a.extent == 1)}
    const += _fold_divmod_pairs(acc)
    return Lin(tuple(sorted(acc.items(), key=lambda t: repr(t[0]))), const)


def _fold_divmod_pairs(acc: dict) -> int:
    """c*d*(e // d) + c*(e % d) == c*e: undo the split a reshape made, until nothing folds
    (a flattened 3-D index folds twice: 30*(i // 30) + 6*((i // 6) % 5) is 6*(i // 6), as
    (i // 6) // 5 is i // 30, and then 6*(i // 6) + i % 6 is i). Returns the constant part
    of the folded terms; `acc` is updated in place."""
    extra, folded = 0, True
    while folded:
        folded = False
        for m in [a for a in acc if isinstance(a, Mod)]:
            c, q = acc.get(m), floordiv(m.expr, m.d)
            if c is None or q.const != 0 or len(q.terms) != 1 or q.terms[0][1] != 1:
                continue
            div = q.terms[0][0]
            if acc.get(div) == c * m.d:
                del acc[div], acc[m]
                for a, k in m.expr.terms:
                    acc[a] = acc.get(a, 0) + c * k
                extra += c * m.expr.const
                folded = True
                break
        for a in [a for a, c in acc.items() if c == 0]:
            del acc[a]
    return extra


def _split(e: Lin, d: int):
    """e = d*q + r, with q taking every term whose coefficient d divides."""
    q = {a: c // d for a, c in e.terms if c % d == 0}
    r = {a: c for a, c in e.terms if c % d != 0}
    return _make(q, e.const // d), _make(r, e.const % d)


def floordiv(e, d: int) -> Lin:
    e = lin(e)
    if d == 1:
        return e
    if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1 and isinstance(e.terms[0][0], Div):
        inner = e.terms[0][0]                   # (x // a) // d is x // (a*d)
        return floordiv(inner.expr, inner.d * d)
    q, r = _split(e, d)
    lo, hi = r.bounds()
    if fits(lo, hi, d):
        return q
    if d < HUGE and lo // d == hi // d:
        return q + lo // d
    found = _common_factor(r, d)
    if found is not None:                       # (g*x + y) // (g*d') is x // d' (0 <= y < g)
        g, x, _ = found
        return q + floordiv(x, d // g)
    return q + Lin(((Div(r, d), 1),), 0)


def mod(e, d: int) -> Lin:
    e = lin(e)
    if d == 1:
        return Lin()
    _, r = _split(e, d)
    lo, hi = r.bounds()
    if fits(lo, hi, d):
        return r
    if d < HUGE and lo // d == hi // d:
        return r + (-(lo // d) * d)
    found = _common_factor(r, d)
    if found is not None:                       # (g*x + y) % (g*d') is g*(x % d') + y
        g, x, y = found
        return mod(x, d // g) * g + y
    return Lin(((Mod(r, d), 1),), 0)


def _common_factor(e: Lin, d: int):
    """(g, x, y) with e == g*x + y, g > 1 dividing d and 0 <= y < g over y's range, for the
    largest such g among the factors d shares with e's coefficients; else None. Flattened
    indices split this way: (32*m + k) // (32*T) with 0 <= k < 32 is m // T, also when T is
    a run-time extent (where the other rules need the value)."""
    for g in sorted({math.gcd(d, c) for _, c in e.terms} - {1, d}, reverse=True):
        x = {a: c // g for a, c in e.terms if c % g == 0}
        y = _make({a: c for a, c in e.terms if c % g != 0}, e.const % g)
        lo, hi = y.bounds()
        if x and fits(lo, hi, g):
            return g, _make(x, e.const // g), y
    return None


def substitute(e: Lin, mapping: dict) -> Lin:
    """Replace variables by expressions (used to drop or merge loop dimensions)."""
    out = lin(e.const)
    for atom, c in e.terms:
        if isinstance(atom, Var):
            out = out + lin(mapping.get(atom, atom)) * c
        elif isinstance(atom, Div):
            out = out + floordiv(substitute(atom.expr, mapping), atom.d) * c
        else:
            out = out + mod(substitute(atom.expr, mapping), atom.d) * c
    return out

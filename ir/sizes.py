"""Run-time sizes as Python sees them while a dynamic graph is traced (jc.jit(dynamic=True)).

Inside the graph a run-time extent is its placeholder (`ir.shapes.PLACEHOLDERS`: a prime
above 2**40), so shapes stay tuples of ints for the passes, and an extent c * s_b * s_t is c
times a product of placeholders (`monomial`). Python code never sees a placeholder: a traced
tensor's `shape` holds a `Size` for each run-time axis, and a Size answers only what holds
for every value the axis can take in its shape class (each symbol is >= 2: extents 0 and 1
compile on their own; distinct symbols differ: equal extents are one symbol).

- Integer arithmetic with ints and other sizes (`+ - *`, and `// %` where exact) gives a
  Size, a polynomial in the symbols; a monomial may be used as an extent (reshape,
  broadcast_to).
- A size used as a value (`x / n`, `n * 0.5`, `1 / n`, `n ** 0.5`, `np.sqrt(n)`) becomes a
  run-time scalar of the graph: `Op.DIM` nodes read the call's extents.
- A question only the value answers (`n > 3`, `int(n)`, `range(n)`, `float(n)`,
  `math.sqrt(n)`, `np.arange(n)`) raises `SizeValueNeeded`: the front then compiles with
  that extent static (a compile per value), and explain() names the use.
"""
from __future__ import annotations

import functools
import math
import numbers
import operator
import os
import sys

import numpy as np


# Run-time extents (jc.jit(dynamic=True)): a graph is traced and lowered once with each
# dynamic extent k replaced by the placeholder `dynamic_extent(k)`, a prime far above any real
# extent, so the passes treat it as "large" and never simplify with it as a small bound (and,
# being prime, a multiple of it is divisible by a small number only when its cofactor is);
# the backend reads the actual value from the call's extent array wherever a loop bound or a
# buffer size is this placeholder. Any other integer this large in a lowered graph (a stride
# or an extent computed from a placeholder) means the graph needs that extent's value
# (jitcore.passes.dynamic then keeps it static).
PLACEHOLDERS = (1099511627791, 1103806595179, 1108101562427, 1112396529683, 1116691497029,
                1120986464327, 1125281431591, 1129576398859, 1133871366161, 1138166333443,
                1142461300817, 1146756268067, 1151051235337, 1155346202671, 1159641169927,
                1163936137249)          # the first prime above 2**40 + k * 2**32
MAX_SYMBOLS = len(PLACEHOLDERS)
_SYMBOL = {p: k for k, p in enumerate(PLACEHOLDERS)}
HUGE = 1 << 36                # real extents, strides and offsets stay below this


def dynamic_extent(k: int) -> int:
    """The placeholder extent of dynamic symbol k."""
    return PLACEHOLDERS[k]


def symbol_of(n) -> int | None:
    """k when `n` is the placeholder of dynamic symbol k, else None."""
    return _SYMBOL.get(n) if type(n) is int else None


def extent_text(n: int) -> str:
    """An extent as graphs, loop nests and errors print it: `s0` for dynamic symbol 0,
    `4*s0*s1` for 4 times the product of symbols 0 and 1, other ints as they are."""
    found = monomial(n)
    if found is None:
        return str(n)
    c, ks = found
    return "*".join(([str(c)] if c != 1 else []) + [f"s{k}" for k in ks])


def shape_text(shape) -> str:
    """A shape as messages print it: `(s0, 3)`."""
    return "(" + ", ".join(map(extent_text, shape)) + ("," if len(shape) == 1 else "") + ")"


class NotDynamic(Exception):
    """A graph needs the value of a run-time extent; `reason` says where (for explain()).
    The front compiles such a graph with that extent static."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class SizeValueNeeded(NotDynamic):
    """Python code asked a run-time size a question only its value answers."""


def monomial(n) -> tuple | None:
    """(c, (k, ...)) when `n` is c times a product of dynamic placeholders (symbols k, sorted,
    a symbol repeated per factor), with 0 < c < HUGE: a loop over merged axes (c * s_b *
    s_t iterations), a buffer's extent or a stride of an axis inside dynamic ones; else None.
    The placeholders are primes far above any real count, so the factoring is unique."""
    if type(n) is not int or n < PLACEHOLDERS[0]:
        return None
    return _monomial(n)


@functools.lru_cache(maxsize=4096)
def _monomial(n: int) -> tuple | None:
    ks = []
    for k, p in enumerate(PLACEHOLDERS):
        while n % p == 0:
            n //= p
            ks.append(k)
        if n < PLACEHOLDERS[0]:
            break
    return (n, tuple(ks)) if ks and 0 < n < HUGE else None


def _product(ks: tuple) -> int:
    return math.prod(PLACEHOLDERS[k] for k in ks)


class Size:
    """c0 + sum(c * s_a * s_b ...): a polynomial in the run-time symbols with int
    coefficients, as `x.shape[k]` gives it in a dynamic trace. Immutable and hashable."""
    __slots__ = ("terms",)

    def __init__(self, terms: dict):
        # {(k, ...): coefficient}; () is the constant term
        self.terms = tuple(sorted((m, c) for m, c in terms.items() if c))

    @staticmethod
    def of(extent: int):
        """The Size of an extent of the graph (c times a product of placeholders), or the
        int itself when it is static. An extent computed from a run-time one in another way
        (a slice of it) has no Size: asking for it raises SizeValueNeeded."""
        found = monomial(extent)
        if found is not None:
            return Size({found[1]: found[0]})
        if abs(extent) >= HUGE:
            raise SizeValueNeeded("an extent computed from a run-time one other than as "
                                  "c * s0 * s1 (a slice of a run-time axis) was read")
        return extent

    # -- what it is --------------------------------------------------------------------------
    @property
    def extent(self) -> int:
        """The extent as the graph holds it (c times a product of placeholders). Only a
        monomial is an extent; a sum needs its value."""
        if len(self.terms) != 1 or self.terms[0][0] == () or self.terms[0][1] <= 0:
            self._needed("use as an extent (only c * s0 * s1 stays a run-time extent)")
        ks, c = self.terms[0]
        return c * _product(ks)

    def _minimum(self) -> int | None:
        """The least value over every size of the class when the polynomial grows with each
        symbol (all non-constant coefficients positive), else None."""
        if any(c < 0 for m, c in self.terms if m):
            return None
        return sum(c * 2 ** len(m) for m, c in self.terms)

    def needed(self, what: str):
        """Raise SizeValueNeeded: Python asked `what`, which only this size's value answers."""
        self._needed(what)

    def _needed(self, what: str):
        raise SizeValueNeeded(f"Python needs the value of run-time size {self!r}: {what}"
                              + user_line())

    def __repr__(self) -> str:
        out = ""
        for m, c in sorted(self.terms, key=lambda t: (-len(t[0]), t[0])):
            names = "*".join(f"s{k}" for k in m)
            body = names if abs(c) == 1 and names else "*".join(filter(None, [str(abs(c)), names]))
            out += (" - " if c < 0 else " + ") + body if out else ("-" if c < 0 else "") + body
        return out or "0"

    __str__ = __repr__

    def __hash__(self):
        return hash(("Size", self.terms))

    # -- integer arithmetic stays symbolic ----------------------------------------------------
    def _combine(self, other, sign: int):
        terms = dict(self.terms)
        for m, c in _terms(other):
            terms[m] = terms.get(m, 0) + sign * c
        return _simplest(terms)

    def __add__(self, other):
        if _is_int(other):
            return self._combine(other, 1)
        return _as_value(self) + other if _value_operand(other) else NotImplemented

    def __radd__(self, other):
        return self.__add__(other)

    def __sub__(self, other):
        if _is_int(other):
            return self._combine(other, -1)
        return _as_value(self) - other if _value_operand(other) else NotImplemented

    def __rsub__(self, other):
        if _is_int(other):
            return (-self).__add__(other)
        return other - _as_value(self) if _value_operand(other) else NotImplemented

    def __neg__(self):
        return _simplest({m: -c for m, c in self.terms})

    def __pos__(self):
        return self

    def __mul__(self, other):
        if not _is_int(other):
            return _as_value(self) * other if _value_operand(other) else NotImplemented
        terms = {}
        for m1, c1 in self.terms:
            for m2, c2 in _terms(other):
                m = tuple(sorted(m1 + m2))
                terms[m] = terms.get(m, 0) + c1 * c2
        return _simplest(terms)

    def __rmul__(self, other):
        return self.__mul__(other)

    def __floordiv__(self, other):
        if not _is_int(other):
            return _as_value(self) // other if _value_operand(other) else NotImplemented
        q = self._exact_quotient(other)
        if q is None:
            self._needed(f"{self!r} // {other!r}")
        return q

    def __rfloordiv__(self, other):
        if not _is_int(other):
            return other // _as_value(self) if _value_operand(other) else NotImplemented
        if isinstance(other, Size):
            return other.__floordiv__(self)
        lo = self._minimum()
        if other >= 0 and lo is not None and other < lo:
            return 0                       # k // n with 0 <= k < n
        self._needed(f"{other!r} // {self!r}")

    def __mod__(self, other):
        if not _is_int(other):
            return _as_value(self) % other if _value_operand(other) else NotImplemented
        if not isinstance(other, Size) and other > 0:
            # every non-constant coefficient a multiple of the divisor: the constant decides
            if all(c % other == 0 for m, c in self.terms if m):
                return dict(self.terms).get((), 0) % other
        elif self._exact_quotient(other) is not None:
            return 0
        self._needed(f"{self!r} % {other!r}")

    def __rmod__(self, other):
        if not _is_int(other):
            return other % _as_value(self) if _value_operand(other) else NotImplemented
        lo = self._minimum()
        if 0 <= other and lo is not None and other < lo:
            return int(other)                  # k % n with 0 <= k < n
        self._needed(f"{other!r} % {self!r}")

    def _exact_quotient(self, d):
        """self / d as a Size or int when d divides it exactly as a polynomial (every
        coefficient by an int; a monomial divisor's symbols in every term), else None."""
        if not isinstance(d, Size):
            if d == 0:
                raise ZeroDivisionError("integer division or modulo by zero")
            if all(c % d == 0 for _, c in self.terms):
                return _simplest({m: c // d for m, c in self.terms})
            return None
        if len(d.terms) != 1:
            return None
        dm, dc = d.terms[0]
        out = {}
        for m, c in self.terms:
            rest = list(m)
            for k in dm:
                if k not in rest:
                    return None
                rest.remove(k)
            if c % dc:
                return None
            out[tuple(rest)] = c // dc
        return _simplest(out)

    # -- values: a run-time scalar of the graph -----------------------------------------------
    def __truediv__(self, other):
        return _as_value(self) / other if _is_int(other) or _value_operand(other) \
            else NotImplemented

    def __rtruediv__(self, other):
        return other / _as_value(self) if _is_int(other) or _value_operand(other) \
            else NotImplemented

    def __pow__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other >= 0:
            out = 1
            for _ in range(other):
                out = self * out
            return out
        return _as_value(self) ** other

    def __rpow__(self, other):
        return other ** _as_value(self)

    def __abs__(self):
        lo = self._minimum()
        return self if lo is not None and lo >= 0 else abs(_as_value(self))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy on sizes: integer arithmetic and comparisons with ints as Python's
        operators (`np.int64(3) * n` stays a Size); other ufuncs (np.sqrt(n)) on the run-time
        value."""
        python_op = _INT_UFUNCS.get(ufunc)
        if python_op is not None and method == "__call__" and not kwargs \
                and all(_is_int(x) for x in inputs):
            return python_op(*(x if isinstance(x, Size) else int(x) for x in inputs))
        inputs = tuple(_as_value(x) if isinstance(x, Size) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    # -- questions: answered when every size agrees, else the value is needed ------------------
    def _compare(self, other, op, text: str):
        if not _is_int(other):
            if isinstance(other, float):
                self._needed(f"comparing {self!r} {text} {other!r}")
            return NotImplemented
        diff = self._combine(other, -1)
        if isinstance(diff, int):
            return op(diff, 0)
        # diff lies in [lo, hi] at every size of the class (None: unbounded that way)
        lo, neg = diff._minimum(), (-diff)._minimum()
        hi = None if neg is None else -neg
        found = _decide(op, lo, hi)
        if found is None and op in (operator.eq, operator.ne) and _distinct_symbols(self, other):
            found = op is operator.ne
        if found is None:
            self._needed(f"comparing {self!r} {text} {other!r}")
        return found

    def __eq__(self, other):
        return self._compare(other, operator.eq, "==")

    def __ne__(self, other):
        return self._compare(other, operator.ne, "!=")

    def __lt__(self, other):
        return self._compare(other, operator.lt, "<")

    def __le__(self, other):
        return self._compare(other, operator.le, "<=")

    def __gt__(self, other):
        return self._compare(other, operator.gt, ">")

    def __ge__(self, other):
        return self._compare(other, operator.ge, ">=")

    def __bool__(self):
        return self._compare(0, operator.ne, "!=")

    def __index__(self):
        self._needed("use as a Python int (range(), an index, a count, np.arange(), ...)")

    def __int__(self):
        self._needed("int()")

    def __float__(self):
        self._needed("float() (math.sqrt(n) and the like call it; n ** 0.5 or np.sqrt(n) "
                     "stay run-time values)")

    def __complex__(self):
        self._needed("complex()")

    def __round__(self, ndigits=None):
        return self if ndigits is None or ndigits >= 0 else self._needed("round()")

    def __trunc__(self):
        return self

    def __floor__(self):
        return self

    def __ceil__(self):
        return self


_INT_UFUNCS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
               np.floor_divide: operator.floordiv, np.remainder: operator.mod,
               np.negative: operator.neg, np.absolute: abs, np.positive: operator.pos,
               np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
               np.greater_equal: operator.ge, np.equal: operator.eq,
               np.not_equal: operator.ne}


def _decide(op, lo, hi):
    """op(diff, 0) for every diff in [lo, hi] (None: unbounded), or None when it depends."""
    pos = lo is not None and lo > 0            # diff > 0 everywhere
    nonneg = lo is not None and lo >= 0
    neg = hi is not None and hi < 0
    nonpos = hi is not None and hi <= 0
    table = {operator.gt: (pos, nonpos), operator.ge: (nonneg, neg),
             operator.lt: (neg, nonneg), operator.le: (nonpos, pos),
             operator.eq: (False, pos or neg), operator.ne: (pos or neg, False)}
    always, never = table[op]
    return True if always else False if never else None


def _distinct_symbols(a: Size, b) -> bool:
    """a and b are two different single symbols (s0 and s1: distinct extents in a class)."""
    if not isinstance(b, Size) or len(a.terms) != 1 or len(b.terms) != 1:
        return False
    (ma, ca), (mb, cb) = a.terms[0], b.terms[0]
    return ca == cb == 1 and len(ma) == len(mb) == 1 and ma != mb


def _is_int(x) -> bool:
    """A Size, a Python int or a numpy integer (not a bool): what stays a Size."""
    return isinstance(x, (Size, numbers.Integral)) and not isinstance(x, (bool, np.bool_))


def _value_operand(x) -> bool:
    """An operand that makes a size a run-time value: a float, a tensor or an array."""
    return isinstance(x, (float, complex, np.ndarray, np.generic)) or hasattr(x, "node")


def _terms(x) -> tuple:
    if isinstance(x, Size):
        return x.terms
    return (((), int(x)),)


def user_line() -> str:
    """ (at file:line) of the innermost frame outside jitcore: the user's code that asked."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame = frame.f_back
    if frame is None:
        return ""
    return f" (at {os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno})"


# jitcore's own source folders: installed, ir/ sits inside the jitcore package (all of it is
# ours); in a checkout, ir/, passes/ and runtime/ sit beside jitcore/
_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN_DIRS = (_PARENT + os.sep,) if os.path.isfile(os.path.join(_PARENT, "__init__.py")) else \
    tuple(os.path.join(_PARENT, d) + os.sep for d in ("ir", "passes", "runtime", "jitcore"))


def _simplest(terms: dict):
    """A Size, or a plain int when no symbol is left."""
    terms = {m: c for m, c in terms.items() if c}
    if all(m == () for m in terms):
        return terms.get((), 0)
    return Size(terms)


# set by jitcore (the tracer): Size -> a traced run-time scalar (ir knows no tracers)
_VALUE_OF = None


def register_value_maker(fn) -> None:
    """jitcore's tracer registers how a size becomes a graph value (Op.DIM nodes)."""
    global _VALUE_OF
    _VALUE_OF = fn


def _as_value(size: Size):
    if _VALUE_OF is None:
        size._needed("use as a value")
    return _VALUE_OF(size)


def symbolic_terms(size: Size) -> list:
    """[(coefficient, extent)] of a Size: each monomial's coefficient, and the extent
    (product of placeholders) whose run-time value Op.DIM reads; () gives extent 1."""
    return [(c, _product(m)) for m, c in size.terms]

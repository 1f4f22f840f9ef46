"""float32 x**y lane-wise, as pure LLVM IR: |x|**y = 2^(y * log2|x|) in double precision,
rounded once to float, with every C99/numpy special case.

Accuracy (tests/test_composite_accuracy.py, against float64 numpy): within 0.51 ulp (measured
0.5007 on 2M random and special pairs, 0.5014 for constant exponents). The double
intermediate needs only ~2^-34 relative accuracy for that, not double's 2^-53, so both
polynomials are short ones fitted for it (IRLS minimax, mpmath reference):
  * log2|x| = k + log1p(f) * log2(e), 1+f in [sqrt(1/2), sqrt(2)), log1p(f) = 2s + s*z*P(z)
    with s = f/(2+f), z = s^2: P of degree 3, relative error 2^-37.6 (|y * log2|x|| <= 200
    keeps the absolute error of the exponent near 2^-31). The quotient s comes from a float32
    reciprocal (16 lanes per instruction) refined by one Newton step in double (relative
    error ~2^-45), which is cheaper than a double division.
  * 2^t = 2^k * (1 + r*Q(r)), k = round(t), |r| <= 1/2: Q of degree 6, relative error 2^-34.3.
    t is clamped to +-200 (the float result is 0 or inf well before), so 2^k is a normal double.
The special cases (sign, NaN, zero, infinity, denormal x, integer tests) are decided in float32
lanes, and only for vectors that have such a lane (one compare and branch per vector).

Compile-time constant exponents take shorter paths (`constant_power`), each correctly rounded
up to the one final rounding of a double: integers |n| <= MAX_CONST_INT by repeated squaring in
double, half-integers as x^n * sqrt(x) (or its reciprocal) in double.

Public interface: :func:`emit_pow_f32`.
"""
from __future__ import annotations

import math

from llvmlite import ir

from .irutil import alloca_once
from .vecmath import (_F32, _copysign, _fabs, _fc, _fmuladd, _ic, _like, _mangle, _poly,
                      _pow2, _round_to_int, _to_float, _to_int)

__all__ = ["emit_pow_f32"]

# log1p(f) = 2s + s*z*P(z), z = s^2 <= 0.0295
LOG_P = (0.6666666564496448, 0.4000033530686176, 0.28537300827362966, 0.23582304475836233)
# 2^r = 1 + r*Q(r), |r| <= 1/2
EXP2_Q = (0.6931471807045538, 0.24022651066586828, 0.05550410365930984, 0.009618038129100892,
          0.0013333935099773826, 0.00015466757109325113, 1.5196147074237949e-05)
LOG2E = 1.4426950408889634
T_CLAMP = 200.0            # |y * log2|x|| beyond this: the float result is 0 or inf already
MAX_CONST_INT = 16         # constant integer exponents up to this use repeated squaring


def emit_pow_f32(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """float32 x**y lane-wise with C99/numpy special cases: pow(x, +-0) = 1 and pow(1, y) = 1
    even for NaN, pow(-1, +-inf) = 1; a finite negative base gives NaN unless y is an integer
    (odd y keeps the sign); infinite y, infinite x and zero x follow from |x|. `y` may be an
    ir.Constant (a compile-time exponent): then a shorter exact path is used if one exists."""
    if _elem(x.type) != ir.FloatType() or _elem(y.type) != ir.FloatType():
        raise ValueError("powf: emit_pow_f32 takes float32 values")
    c = _constant(y)
    if c is not None:
        fast = constant_power(b, x, c)
        if fast is not None:
            return fast
    return _pow_general(b, x, y)


def _elem(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _constant(y: ir.Value):
    """The exponent's value when y is the same constant in every lane, else None."""
    if not isinstance(y, ir.Constant):
        return None
    vals = [e.constant for e in y.constant] if isinstance(y.type, ir.VectorType) else [y.constant]
    if not all(isinstance(v, (int, float)) for v in vals) or len(set(vals)) != 1:
        return None
    return float(vals[0])


# ---- the general path ------------------------------------------------------------------------

def _log2_abs(b: ir.IRBuilder, x: ir.Value, dty: ir.Type, edges: bool) -> ir.Value:
    """log2|x| in double (relative error ~2^-37) for finite nonzero normal x; with `edges`
    also for denormals, and -inf at 0, inf at inf."""
    f = _F32
    ax = axs = _fabs(b, x)
    kadj = _ic(x, 0)
    if edges:        # denormals: scale into the normal range and compensate in the exponent
        sub = b.fcmp_ordered("<", ax, _fc(x, f.min_normal))
        axs = b.select(sub, b.fmul(ax, _fc(x, 2.0 ** 25)), ax)
        kadj = b.select(sub, _ic(x, -25), kadj)
    # split at sqrt(1/2): ax = 2^k * (1 + fm), 1 + fm in [sqrt(1/2), sqrt(2)), fm exact
    ix = b.add(_to_int(b, axs), _ic(x, (f.bias << f.mant) - f.sqrt_half_bits))
    k = b.add(b.sub(b.ashr(ix, _ic(x, f.mant)), _ic(x, f.bias)), kadj)
    mbits = b.add(b.and_(ix, _ic(x, (1 << f.mant) - 1)), _ic(x, f.sqrt_half_bits))
    fm = b.fsub(_to_float(b, mbits, x.type), _fc(x, 1.0))
    recip = b.fdiv(_fc(x, 1.0), b.fadd(fm, _fc(x, 2.0)))          # ~1/(2+fm), float lanes
    fd, rd = b.fpext(fm, dty), b.fpext(recip, dty)
    dd = b.fadd(fd, _fc(fd, 2.0))                                  # exact in double
    s0 = b.fmul(fd, rd)
    s = _fmuladd(b, _fmuladd(b, b.fneg(s0), dd, fd), rd, s0)      # s0 + (fm - s0*d)/d
    z = b.fmul(s, s)
    log1p = _fmuladd(b, b.fmul(s, z), _poly(b, z, LOG_P), b.fadd(s, s))
    lg = _fmuladd(b, log1p, _fc(fd, LOG2E), b.sitofp(k, dty))
    if edges:
        lg = b.select(b.fcmp_ordered("==", ax, _fc(x, 0.0)), _fc(fd, -math.inf), lg)
        lg = b.select(b.fcmp_ordered("==", ax, _fc(x, math.inf)), _fc(fd, math.inf), lg)
    return lg


def _exp2(b: ir.IRBuilder, t: ir.Value) -> ir.Value:
    """2^t in double (relative error ~2^-34) for t in [-T_CLAMP, T_CLAMP]; t is clamped
    there first (an ordered clamp: NaN lanes give garbage, the caller overrides them)."""
    t = b.select(b.fcmp_ordered(">", t, _fc(t, T_CLAMP)), _fc(t, T_CLAMP), t)
    t = b.select(b.fcmp_ordered("<", t, _fc(t, -T_CLAMP)), _fc(t, -T_CLAMP), t)
    k, ki = _round_to_int(b, t)
    r = b.fsub(t, k)                                                # exact
    p = _fmuladd(b, r, _poly(b, r, EXP2_Q), _fc(t, 1.0))
    return b.fmul(p, _pow2(b, ki, t.type))


def _magnitude(b: ir.IRBuilder, x: ir.Value, y: ir.Value, edges: bool) -> ir.Value:
    """|x|**y as float, rounded once from double."""
    dty = _like(x.type, ir.DoubleType())
    t = b.fmul(b.fpext(y, dty), _log2_abs(b, x, dty, edges))
    return b.fptrunc(_exp2(b, t), x.type)


def _pow_general(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """Most lanes have a positive normal finite x and a finite y: they need none of the
    special cases. A vector with any other lane is redone with all of them."""
    f = _F32
    # x in [min_normal, inf) by its bits (one unsigned compare), |y| < inf
    normal = b.icmp_unsigned("<", b.sub(_to_int(b, x), _ic(x, 1 << f.mant)),
                             _ic(x, (2 * f.bias) << f.mant))
    finite_y = b.icmp_unsigned("<", _to_int(b, _fabs(b, y)), _ic(y, (2 * f.bias + 1) << f.mant))
    plain = b.and_(normal, finite_y)
    result = alloca_once(b, x.type, name="pow.res")
    b.store(_magnitude(b, x, y, edges=False), result)
    all_plain = plain if not isinstance(plain.type, ir.VectorType) else \
        b.call(_declare_reduce_and(b, plain.type), [plain])
    with b.if_then(b.not_(all_plain), likely=False):
        b.store(_pow_with_specials(b, x, y), result)
    return b.load(result)


def _pow_with_specials(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    mag = _magnitude(b, x, y, edges=True)
    ax, ay = _fabs(b, x), _fabs(b, y)
    floor = _declare_unary(b, "floor", y.type)
    is_int = b.fcmp_ordered("==", b.call(floor, [y]), y)            # false for inf and NaN
    half = b.fmul(y, _fc(y, 0.5))
    odd = b.and_(is_int, b.fcmp_ordered("!=", b.call(floor, [half]), half))
    y_inf = b.fcmp_ordered("==", ay, _fc(y, math.inf))
    finite_negative = b.and_(b.fcmp_ordered("<", x, _fc(x, 0.0)),
                             b.fcmp_ordered("!=", ax, _fc(x, math.inf)))
    nan = b.or_(b.and_(finite_negative, b.not_(b.or_(is_int, y_inf))),
                b.fcmp_unordered("uno", x, y))
    one = b.or_(b.or_(b.fcmp_ordered("==", y, _fc(y, 0.0)), b.fcmp_ordered("==", x, _fc(x, 1.0))),
                b.and_(y_inf, b.fcmp_ordered("==", ax, _fc(x, 1.0))))
    result = b.select(odd, _copysign(b, mag, x), mag)
    result = b.select(nan, _fc(x, math.nan), result)
    return b.select(one, _fc(x, 1.0), result)


# ---- constant exponents ----------------------------------------------------------------------

def constant_power(b: ir.IRBuilder, x: ir.Value, c: float):
    """x**c for a compile-time c in double, rounded once to float, when c is an integer or a
    half-integer of magnitude <= MAX_CONST_INT (+ 1/2); None for other exponents.
    Integer powers take every special case from IEEE arithmetic itself (signs of zeros and
    infinities, NaN, overflow in double then to inf when rounded); x**0 is 1, NaN too."""
    if not math.isfinite(c):
        return None
    if c == 0:
        return _fc(x, 1.0)
    dty = _like(x.type, ir.DoubleType())
    if c == int(c) and abs(c) <= MAX_CONST_INT:
        return b.fptrunc(_int_power(b, b.fpext(x, dty), int(c)), x.type)
    if c * 2 == int(c * 2) and abs(c) <= MAX_CONST_INT + 0.5:
        return _half_power(b, x, dty, c)
    return None


def _int_power(b: ir.IRBuilder, xd: ir.Value, n: int) -> ir.Value:
    """xd**n by squaring (double: x^2 of a float is exact; each further product rounds at
    2^-53, far below float's half ulp); a negative n divides once at the end."""
    m, acc, base = abs(n), None, xd
    while m:
        if m & 1:
            acc = base if acc is None else b.fmul(acc, base)
        m >>= 1
        if m:
            base = b.fmul(base, base)
    return b.fdiv(_fc(xd, 1.0), acc) if n < 0 else acc


def _half_power(b: ir.IRBuilder, x: ir.Value, dty: ir.Type, c: float) -> ir.Value:
    """x**(n + 1/2) = x^n * sqrt(x) (or 1 / that for c < 0) in double. pow's rules for the
    signed specials differ from sqrt's: (-0)**c and (-inf)**c are (+0)**c and (+inf)**c,
    and a finite negative base gives NaN (sqrt does that by itself)."""
    signed_special = b.or_(b.fcmp_ordered("==", x, _fc(x, 0.0)),
                           b.fcmp_ordered("==", x, _fc(x, -math.inf)))
    xd = b.fpext(b.select(signed_special, _fabs(b, x), x), dty)
    n = int(math.floor(abs(c)))
    root = b.call(_declare_unary(b, "sqrt", dty), [xd])
    mag = root if n == 0 else b.fmul(_int_power(b, xd, n), root)
    if c < 0:
        mag = b.fdiv(_fc(xd, 1.0), mag)
    return b.fptrunc(mag, x.type)


def _declare_reduce_and(b: ir.IRBuilder, ty: ir.VectorType) -> ir.Function:
    """``llvm.vector.reduce.and`` over a vector of i1: true when every lane is."""
    full = f"llvm.vector.reduce.and.{_mangle(ty)}"
    fn = b.module.globals.get(full)
    return fn if fn is not None else ir.Function(b.module, ir.FunctionType(ir.IntType(1), [ty]),
                                                 full)


def _declare_unary(b: ir.IRBuilder, name: str, ty: ir.Type) -> ir.Function:
    """Declare (once) the intrinsic ``llvm.<name>.<type>`` of one argument."""
    full = f"llvm.{name}.{_mangle(ty)}"
    fn = b.module.globals.get(full)
    return fn if fn is not None else ir.Function(b.module, ir.FunctionType(ty, [ty]), full)

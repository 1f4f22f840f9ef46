"""Lane-wise transcendental functions emitted as pure LLVM IR.

LLVM lowers ``llvm.exp.v16f32`` (and friends) to 16 scalar ``expf`` calls, which defeats
vectorisation.  This module emits the math inline instead: range reduction, a polynomial
evaluated with ``llvm.fmuladd`` and reconstruction by exponent-bit manipulation.  Everything
is branch-free (special cases are handled with ``select``), so the same code works on
scalars and on ``<N x float>`` / ``<N x double>`` vectors of any width.

No fast-math flags are set: NaN, infinities, signed zeros and denormals follow numpy.

Max error in ulp against a correctly rounded reference (float32: exhaustive over all
inputs for exp ... sin/cos, every 16th bit pattern for the others; float64: sweeps, see
tests/test_vecmath.py):

    float32: exp 1.01  log 0.84  tanh 1.33  erf 1.05  sin/cos 1.54 (|x| <= 1e5),
             2.31 (|x| <= 6.5e6)  atan 0.84  cbrt 0.73  expm1 0.98  log1p 0.80
             log2 1.04  log10 1.00  exp2 0.78  sinh 1.58  cosh 1.35
             sigmoid 2.41 (sweep)
    float64: exp 0.99  log 0.81  tanh 1.29  erf 0.95  sin/cos 1.94 (|x| <= 3.5e15)
             atan 0.76  cbrt 0.73  expm1 1.04  log1p 0.75  log2 0.91  log10 0.85
             exp2 0.74  sinh 1.58  cosh 1.34  sigmoid 2.42

Without FMA (x86-64-v2 and below, where ``llvm.fmuladd`` is not fused) the bounds of all
but sin/cos hold as well (tests/test_vecmath.py::test_accuracy_without_fma).
The sin/cos range reduction assumes fmuladd is fused (FMA hardware) for large arguments.
atan uses fdlibm's (s_atan.c, s_atanf.c) breakpoints and coefficients. The other polynomial
coefficients were fitted offline (Lawson/IRLS minimax with mpmath, rounding
the coefficients to the target precision one at a time and refitting the rest).

float32 pow lives in powf.py (built from the helpers here); float64 pow stays with libm
(``llvm.pow``, one call per lane), which a double-double log would replace.

Public interface: :data:`SUPPORTED` and :func:`emit_math`.
"""

import math
from typing import Callable, Dict, NamedTuple, Sequence

from llvmlite import ir

from . import irutil as u

__all__ = ["SUPPORTED", "emit_math"]


# --------------------------------------------------------------------------------------
# Per-precision constants
# --------------------------------------------------------------------------------------

class _Fmt(NamedTuple):
    """Binary layout and constants of one floating-point format."""

    width: int  # total bits (also the width of the matching integer type)
    mant: int  # explicit mantissa bits
    bias: int  # exponent bias
    min_normal: float
    sqrt_half_bits: int  # bit pattern of sqrt(0.5): log mantissa range starts there
    # ln2 = LN2_HI + LN2_LO; LN2_HI has few enough bits that k*LN2_HI is exact for every
    # exponent k, even if fmuladd is not fused.
    ln2_hi: float
    ln2_lo: float
    log2e: float
    # pi/2 = PIO2_1 + PIO2_2 + PIO2_3 (three full-precision parts, ~3x the precision).
    pio2: Sequence[float]
    two_over_pi: float
    exp_lo: float  # exp(x) rounds to +0 below this (clamp point)
    exp_hi: float  # exp(x) overflows above this (clamp point)
    erf_big: float  # erf(x) rounds to 1 at and above this
    coeffs: Dict[str, Sequence[float]]  # polynomial coefficients, lowest order first


_H = float.fromhex

_F32 = _Fmt(
    width=32, mant=23, bias=127,
    min_normal=_H("0x1p-126"),
    sqrt_half_bits=0x3F3504F3,
    ln2_hi=_H("0x1.62e4p-1"), ln2_lo=_H("0x1.7f7d1cp-20"),
    log2e=_H("0x1.715476p+0"),
    pio2=(_H("0x1.921fb6p+0"), _H("-0x1.777a5cp-25"), _H("-0x1.ee59dap-50")),
    two_over_pi=_H("0x1.45f306p-1"),
    exp_lo=-104.0, exp_hi=89.0,
    erf_big=3.919205843636722,
    coeffs={
        # exp(r) = 1 + r + r^2 * P(r),  |r| <= ln2/2
        "exp": (0.4999999403953552, 0.1666652113199234, 0.04166828468441963,
                0.008368704468011856, 0.0013819276355206966),
        # log1p(f) = f - f^2/2 + s*(f^2/2 + z*P(z)),  s = f/(2+f), z = s^2 <= 0.0295
        "log": (0.6666677594184875, 0.3997756838798523, 0.2987145781517029),
        # tanh(x) = x + x*z*P(z),  z = x^2, |x| < 0.625
        "tanh": (-0.3333328068256378, 0.1333141177892685, -0.05373743548989296,
                 0.020632321015000343, -0.005698029883205891),
        # erf(x) = x + x*P(z),  z = x^2, |x| < 0.875
        "erf_small": (0.12837915122509003, -0.37612512707710266, 0.11282104253768921,
                      -0.02677960693836212, 0.005015458911657333, -0.0006119509343989193),
        # erf(x) = 1 - exp(P(x - 0.875)),  0.875 <= x < erf_big  (P ~ log(erfc))
        "erf_big": (-1.5328243970870972, -2.430222749710083, -0.8265082240104675,
                    -0.04701671749353409, 0.011497405357658863, -0.0022521326318383217,
                    0.00025589432334527373),
        # sin(r) = r + r*z*P(z),  z = r^2, |r| <= 0.8 (a little more than pi/4)
        "sin": (-0.16666653752326965, 0.008332095108926296, -0.00019505539967212826),
        # cos(r) = 1 + z*(-1/2 + z*P(z))
        "cos": (0.04166664183139801, -0.0013887130189687014, 2.4412085622316226e-05),
    },
)

_F64 = _Fmt(
    width=64, mant=52, bias=1023,
    min_normal=_H("0x1p-1022"),
    sqrt_half_bits=0x3FE6A09E667F3BCD,
    ln2_hi=_H("0x1.62e42fefa38p-1"), ln2_lo=_H("0x1.ef35793c7673p-45"),
    log2e=_H("0x1.71547652b82fep+0"),
    pio2=(_H("0x1.921fb54442d18p+0"), _H("0x1.1a62633145c07p-54"),
          _H("-0x1.f1976b7ed8fbcp-110")),
    two_over_pi=_H("0x1.45f306dc9c883p-1"),
    exp_lo=-746.0, exp_hi=710.0,
    erf_big=5.921587195794507,
    coeffs={
        "exp": (0.5000000000000011, 0.16666666666666433, 0.04166666666652671,
                0.008333333333484046, 0.001388888894449881, 0.00019841269526361252,
                2.4801492197840955e-05, 2.755756995781136e-06, 2.7630576445505855e-07,
                2.5005093394607746e-08),
        "log": (0.6666666666666735, 0.3999999999940985, 0.2857142874348321,
                0.22222198457522963, 0.18183570538192825, 0.15313885963900986,
                0.14797656079930122),
        "tanh": (-0.33333333333332854, 0.1333333333326196, -0.05396825393121783,
                 0.02186948757513652, -0.008863220991851448, 0.0035919890977380246,
                 -0.0014549585310077286, 0.0005863155180400355, -0.00022856233182198457,
                 7.714240631331507e-05, -1.607168357638805e-05),
        "erf_small": (0.12837916709551256, -0.37612638903183077, 0.11283791670918132,
                      -0.026866170637472136, 0.0052239775447710385, -0.0008548322076562735,
                      0.0001205514372494437, -1.49209865903271e-05, 1.6387835113482727e-06,
                      -1.5621920710602217e-07, 1.04633903250656e-08),
        "erf_big": (-1.5328244365985517, -2.4302197229548237, -0.8265416933346522,
                    -0.04689605454271464, 0.011323339486037271, -0.002143996431720735,
                    0.0002007822851028479, 5.929459336991944e-05, -3.938916372917213e-05,
                    1.218410557694331e-05, -2.060336416871259e-06, -1.204633645101251e-07,
                    2.2747321500921286e-07, -9.147020190601671e-08, 2.3328997929934033e-08,
                    -4.129007812507468e-09, 4.948384398517052e-10, -3.625895574134691e-11,
                    1.227086496895805e-12),
        "sin": (-0.1666666666666663, 0.008333333333321893, -0.00019841269829431966,
                2.7557313572720702e-06, -2.5050740867767785e-08, 1.5895863877603706e-10),
        "cos": (0.041666666666666595, -0.0013888888888873342, 2.480158728900212e-05,
                -2.755731421707246e-07, 2.087570540416845e-09, -1.1358749851266757e-11),
    },
)

# atan (fdlibm s_atan.c): |x| is reduced to a small t around one of the breakpoints
# 0, 0.5, 1, 1.5, inf with atan(|x|) = atan(b) + atan(t); (breakpoint limit, atan(b) hi,
# atan(b) lo, t = (p*|x| + q) / (r*|x| + s)). Coefficients odd/even of an odd polynomial.
_ATAN_SEGMENTS = (
    (0.4375, 0.0, 0.0, (1.0, 0.0, 0.0, 1.0)),
    (0.6875, 4.63647609000806093515e-01, 2.26987774529616870924e-17, (2.0, -1.0, 1.0, 2.0)),
    (1.1875, 7.85398163397448278999e-01, 3.06161699786838301793e-17, (1.0, -1.0, 1.0, 1.0)),
    (2.4375, 9.82793723247329054082e-01, 1.39033110312309984516e-17, (1.0, -1.5, 1.5, 1.0)),
    (math.inf, 1.57079632679489655800e+00, 6.12323399573676603587e-17, (0.0, -1.0, 1.0, 0.0)),
)
# float32 (FreeBSD s_atanf.c): atan(b) hi/lo per segment and a shorter polynomial
_ATAN_HILO_F32 = ((0.0, 0.0), (4.6364760399e-01, 5.0121582440e-09),
                  (7.8539812565e-01, 3.7748947079e-08), (9.8279368877e-01, 3.4473217170e-08),
                  (1.5707962513e+00, 7.5497894159e-08))
_ATAN_T_F32 = (3.3333328366e-01, -1.9999158382e-01, 1.4253635705e-01, -1.0648017377e-01,
               6.1687607318e-02)
_ATAN_T = (3.33333333333329318027e-01, -1.99999999998764832476e-01,
           1.42857142725034663711e-01, -1.11111104054623557880e-01,
           9.09088713343650656196e-02, -7.69187620504482999495e-02,
           6.66107313738753120669e-02, -5.83357013379057348645e-02,
           4.97687799461593236017e-02, -3.65315727442169155270e-02,
           1.62858201153657823623e-02)

_TANH_SMALL = 0.625  # below: odd polynomial; above: 1 - 2/(exp(2|x|) + 1)
_ERF_SMALL = 0.875  # below: odd polynomial; above: 1 - exp(P(|x|))
_SINCOS_RCLAMP = 1.2  # |r| clamp; only ever hit for |x| beyond the accurate range


# --------------------------------------------------------------------------------------
# Type and constant helpers
# --------------------------------------------------------------------------------------

def _fmt(ty: ir.Type) -> _Fmt:
    """Format of a float/double scalar or vector type; ValueError for anything else."""
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    if isinstance(elem, ir.FloatType):
        return _F32
    if isinstance(elem, ir.DoubleType):
        return _F64
    raise ValueError(f"vecmath: unsupported type {ty} (need float/double scalar or vector)")


def _like(ty: ir.Type, elem: ir.Type) -> ir.Type:
    """``elem`` with the same lane count as ``ty``."""
    return ir.VectorType(elem, ty.count) if isinstance(ty, ir.VectorType) else elem


def _int_type(ty: ir.Type) -> ir.Type:
    """Integer type with the same width and lane count as the float type ``ty``."""
    return _like(ty, ir.IntType(_fmt(ty).width))


def _splat(ty: ir.Type, value) -> ir.Constant:
    """Constant ``value`` of scalar or vector type ``ty`` (broadcast to every lane)."""
    if isinstance(ty, ir.VectorType):
        return u.const(ty, value)
    return ir.Constant(ty, value)


def _fc(x: ir.Value, value: float) -> ir.Constant:
    """Float constant of ``x``'s type."""
    return _splat(x.type, value)


def _ic(x: ir.Value, value: int) -> ir.Constant:
    """Integer constant of the integer type matching ``x`` (float or int)."""
    ty = x.type if _is_int(x.type) else _int_type(x.type)
    return _splat(ty, value)


def _is_int(ty: ir.Type) -> bool:
    elem = ty.element if isinstance(ty, ir.VectorType) else ty
    return isinstance(elem, ir.IntType)


def _mangle(ty: ir.Type) -> str:
    """LLVM intrinsic type suffix: f32, f64, v16f32, ..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{ty.element.intrinsic_name}"
    return ty.intrinsic_name


# --------------------------------------------------------------------------------------
# Arithmetic helpers (builder first, a few instructions each)
# --------------------------------------------------------------------------------------

def _fmuladd(b: ir.IRBuilder, a: ir.Value, x: ir.Value, c: ir.Value) -> ir.Value:
    """a*x + c via ``llvm.fmuladd`` (fused where the target has FMA)."""
    ty = a.type
    name = f"llvm.fmuladd.{_mangle(ty)}"
    fn = b.module.globals.get(name)
    if fn is None:
        fn = ir.Function(b.module, ir.FunctionType(ty, [ty, ty, ty]), name)
    return b.call(fn, [a, x, c])


def _poly(b: ir.IRBuilder, x: ir.Value, coeffs: Sequence[float]) -> ir.Value:
    """Horner evaluation of c0 + c1*x + c2*x^2 + ... (coefficients lowest order first)."""
    acc = _fc(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _fmuladd(b, acc, x, _fc(x, c))
    return acc


def _select(b: ir.IRBuilder, cond: ir.Value, yes: ir.Value, no: ir.Value) -> ir.Value:
    return b.select(cond, yes, no)


def _to_int(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """Reinterpret float bits as integer (same width and lanes)."""
    return b.bitcast(x, _int_type(x.type))


def _to_float(b: ir.IRBuilder, i: ir.Value, fty: ir.Type) -> ir.Value:
    """Reinterpret integer bits as the float type ``fty``."""
    return b.bitcast(i, fty)


def _isnan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    return b.fcmp_unordered("uno", x, x)


def _fabs(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """|x| by clearing the sign bit."""
    w = _fmt(x.type).width
    return _to_float(b, b.and_(_to_int(b, x), _ic(x, (1 << (w - 1)) - 1)), x.type)


def _copysign(b: ir.IRBuilder, mag: ir.Value, sign: ir.Value) -> ir.Value:
    """|mag| with the sign bit of ``sign``."""
    w = _fmt(mag.type).width
    sbit = 1 << (w - 1)
    m = b.and_(_to_int(b, mag), _ic(mag, sbit - 1))
    s = b.and_(_to_int(b, sign), _ic(sign, sbit))
    return _to_float(b, b.or_(m, s), mag.type)


def _two_sum(b: ir.IRBuilder, x: ir.Value, y: ir.Value):
    """(s, e) with s = x + y rounded and e its exact rounding error (Knuth, any order)."""
    s = b.fadd(x, y)
    yy = b.fsub(s, x)
    e = b.fadd(b.fsub(x, b.fsub(s, yy)), b.fsub(y, yy))
    return s, e


def _round_to_int(b: ir.IRBuilder, t: ir.Value):
    """Round t to the nearest integer, returning it both as float and as integer.

    Adding 1.5*2^mant pushes the fraction bits out of the mantissa (round to nearest even);
    the integer then sits in the low mantissa bits.  Valid for |t| < 2^(mant-1); no fptosi,
    so out-of-range or NaN input yields garbage instead of poison.
    """
    f = _fmt(t.type)
    magic = 1.5 * 2.0 ** f.mant
    magic_bits = (f.bias + f.mant) << f.mant | 1 << (f.mant - 1)
    s = b.fadd(t, _fc(t, magic))
    k = b.fsub(s, _fc(t, magic))
    ki = b.sub(_to_int(b, s), _ic(t, magic_bits))
    return k, ki


def _pow2(b: ir.IRBuilder, n: ir.Value, fty: ir.Type) -> ir.Value:
    """2^n as a float, built from exponent bits; n must be in the normal exponent range."""
    f = _fmt(fty)
    e = b.shl(b.add(n, _ic(n, f.bias)), _ic(n, f.mant))
    return _to_float(b, e, fty)


def _ldexp(b: ir.IRBuilder, x: ir.Value, n: ir.Value) -> ir.Value:
    """x * 2^n for |n| up to ~2*bias.

    The scale is split in two factors so that each is a normal number: the first product is
    exact and the second rounds once, which gives correct overflow to inf and correctly
    rounded denormal results (a single 2^n would not be representable there).
    """
    n1 = b.ashr(n, _ic(n, 1))
    n2 = b.sub(n, n1)
    return b.fmul(b.fmul(x, _pow2(b, n1, x.type)), _pow2(b, n2, x.type))


def _in_double(b: ir.IRBuilder, emit, x: ir.Value) -> ir.Value:
    """emit(x) evaluated in double and rounded once to x's type (float32 lanes)."""
    wide = _like(x.type, ir.DoubleType())
    return b.fptrunc(emit(b, b.fpext(x, wide)), x.type)


# --------------------------------------------------------------------------------------
# Emitters, one per function
# --------------------------------------------------------------------------------------

def _emit_exp(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """exp(x): x = k*ln2 + r (Cody-Waite), exp(r) by polynomial, scale by 2^k."""
    f = _fmt(x.type)
    # Clamp to [exp_lo, exp_hi]: the reconstruction then gives 0 / inf by itself.
    # The compares are false for NaN, so NaN passes both selects (one minps / maxps each
    # on x86) and stays NaN through the polynomial and the scaling (NaN * 2^garbage).
    xc = _select(b, b.fcmp_ordered(">", x, _fc(x, f.exp_hi)), _fc(x, f.exp_hi), x)
    xc = _select(b, b.fcmp_ordered("<", xc, _fc(x, f.exp_lo)), _fc(x, f.exp_lo), xc)
    k, ki = _round_to_int(b, b.fmul(xc, _fc(x, f.log2e)))
    r = _fmuladd(b, k, _fc(x, -f.ln2_hi), xc)  # exact: k*ln2_hi is exact and close to xc
    r = _fmuladd(b, k, _fc(x, -f.ln2_lo), r)
    p = _fmuladd(b, b.fmul(r, r), _poly(b, r, f.coeffs["exp"]), r)
    return _ldexp(b, b.fadd(p, _fc(x, 1.0)), ki)


def _emit_sigmoid(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """1 / (1 + exp(-x)) as s = 1 / (1 + e) for x >= 0 and e * s below, e = exp(-|x|) (so
    sigmoid(-100) is the denormal exp(-100), not 1 / (1 + inf) = 0). exp's argument is
    never positive, which makes exp cheaper than `_emit_exp`: no upper clamp, and the
    scale 2^k (k in [exp_lo * log2e, 0]) is two products, 2^(k + mant + 2) (a normal
    number) and the constant 2^-(mant + 2), which rounds once into the denormals.
    NaN fails the clamp's compare and stays NaN throughout."""
    f = _fmt(x.type)
    a = _to_float(b, b.or_(_to_int(b, x), _ic(x, 1 << (f.width - 1))), x.type)   # -|x|
    a = _select(b, b.fcmp_ordered("<", a, _fc(x, f.exp_lo)), _fc(x, f.exp_lo), a)
    k, ki = _round_to_int(b, b.fmul(a, _fc(x, f.log2e)))
    r = _fmuladd(b, k, _fc(x, -f.ln2_hi), a)
    r = _fmuladd(b, k, _fc(x, -f.ln2_lo), r)
    p = b.fadd(_fmuladd(b, b.fmul(r, r), _poly(b, r, f.coeffs["exp"]), r), _fc(x, 1.0))
    shift = f.mant + 2
    e = b.fmul(b.fmul(p, _pow2(b, b.add(ki, _ic(x, shift)), x.type)), _fc(x, 2.0 ** -shift))
    s = b.fdiv(_fc(x, 1.0), b.fadd(e, _fc(x, 1.0)))
    return _select(b, b.fcmp_ordered(">=", x, _fc(x, 0.0)), s, b.fmul(e, s))


def _emit_log(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """log(x) = k*ln2 + log1p(f) with 1+f in [sqrt(1/2), sqrt(2)) (fdlibm-style kernel)."""
    return _log_specials(b, x, _log_core(b, x))


def _log_reduce(b: ir.IRBuilder, x: ir.Value):
    """The log kernel's pieces for finite x > 0: x = 2^k * (1 + f), 1 + f in [sqrt(1/2),
    sqrt(2)), f exact; log1p(f) = f - hfsq + s*(hfsq + R). Returns (k as a float, f, hfsq,
    s, R)."""
    f = _fmt(x.type)
    # Denormals: scale into the normal range first and compensate in the exponent.
    sub = b.fcmp_ordered("<", x, _fc(x, f.min_normal))
    xs = _select(b, sub, b.fmul(x, _fc(x, 2.0 ** (f.mant + 2))), x)
    kadj = _select(b, sub, _ic(x, -(f.mant + 2)), _ic(x, 0))
    # Offset the bits so that the exponent field rounds at sqrt(1/2) instead of 1.
    one_bits = f.bias << f.mant
    ix = b.add(_to_int(b, xs), _ic(x, one_bits - f.sqrt_half_bits))
    k = b.add(b.sub(b.ashr(ix, _ic(x, f.mant)), _ic(x, f.bias)), kadj)
    mbits = b.add(b.and_(ix, _ic(x, (1 << f.mant) - 1)), _ic(x, f.sqrt_half_bits))
    fm = b.fsub(_to_float(b, mbits, x.type), _fc(x, 1.0))  # exact
    hfsq = b.fmul(_fc(x, 0.5), b.fmul(fm, fm))
    s = b.fdiv(fm, b.fadd(fm, _fc(x, 2.0)))
    z = b.fmul(s, s)
    rz = b.fmul(z, _poly(b, z, f.coeffs["log"]))
    return b.sitofp(k, x.type), fm, hfsq, s, rz


def _log_core(b: ir.IRBuilder, x: ir.Value, corr=None) -> ir.Value:
    """The log kernel for finite x > 0, plus a small correction term `corr` (summed with
    the small terms, before f and k*ln2_hi, so that it costs no extra rounding)."""
    f = _fmt(x.type)
    dk, fm, hfsq, s, rz = _log_reduce(b, x)
    # s*(hfsq+R) + k*ln2_lo - hfsq + f + k*ln2_hi, summed from small to large terms.
    lo = b.fmul(dk, _fc(x, f.ln2_lo))
    if corr is not None:
        lo = b.fadd(lo, corr)
    y = _fmuladd(b, s, b.fadd(hfsq, rz), lo)
    y = b.fadd(b.fsub(y, hfsq), fm)
    return _fmuladd(b, dk, _fc(x, f.ln2_hi), y)


# log_b(x) = k*log_b(2) + log1p(f)/ln(b): (1/ln b hi, lo; log_b(2) hi, lo) per format. The
# hi parts have few enough bits (12 / 26 for float32 / float64) that k*hi and f_hi*hi are
# exact without FMA (f_hi: f with as few bits)
_LOG_BASE = {
    (32, 2): (_H("0x1.716p+0"), _H("-0x1.7135a8p-13"), 1.0, 0.0),
    (64, 2): (_H("0x1.7154768p+0"), _H("-0x1.6a3e80f444178p-27"), 1.0, 0.0),
    (32, 10): (_H("0x1.bccp-2"), _H("-0x1.09d5b2p-15"), _H("0x1.344p-2"), _H("0x1.3509f8p-18")),
    (64, 10): (_H("0x1.bcb7b18p-2"), _H("-0x1.6c8d78e6acaa4p-29"), _H("0x1.34413509f7p-2"),
               _H("0x1.3fde623e2566bp-43")),
}
_LOG_SPLIT_BITS = {32: 12, 64: 26}          # significant bits kept in the hi parts


def _emit_log_base(base: int):
    def emit(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """log_b(x) from the log kernel's pieces: (f + w)/ln(b) with w = s*(hfsq + R) -
        hfsq; f and 1/ln(b) are both split in two so that the large product f_hi*c_hi is
        exact with or without FMA, and it is added last but k*log_b(2) (exact as well).
        Max error 1.04 / 0.91 ulp (log2 float32 / float64), 1.00 / 0.85 (log10), as much
        without FMA."""
        fmt = _fmt(x.type)
        c_hi, c_lo, l_hi, l_lo = (_fc(x, v) for v in _LOG_BASE[fmt.width, base])
        dk, fm, hfsq, s, rz = _log_reduce(b, x)
        w = _fmuladd(b, s, b.fadd(hfsq, rz), b.fneg(hfsq))
        drop = fmt.mant - _LOG_SPLIT_BITS[fmt.width] + 1
        f_hi = _to_float(b, b.and_(_to_int(b, fm), _ic(x, -(1 << drop))), x.type)
        f_lo = b.fsub(fm, f_hi)                                   # exact
        c = _fc(x, sum(_LOG_BASE[fmt.width, base][:2]))
        small = _fmuladd(b, fm, c_lo, b.fmul(dk, l_lo))
        small = _fmuladd(b, f_lo, c_hi, _fmuladd(b, w, c, small))
        y = _fmuladd(b, f_hi, c_hi, small)
        return _log_specials(b, x, _fmuladd(b, dk, l_hi, y))
    emit.__name__ = f"_emit_log{base}"
    return emit


def _log_specials(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """log's results outside finite x > 0 (y elsewhere)."""
    # Specials: +inf -> +inf, +-0 -> -inf, x < 0 -> NaN, NaN -> NaN.
    y = _select(b, b.fcmp_ordered("==", x, _fc(x, float("inf"))), x, y)
    y = _select(b, b.fcmp_ordered("==", x, _fc(x, 0.0)), _fc(x, float("-inf")), y)
    y = _select(b, b.fcmp_ordered("<", x, _fc(x, 0.0)), _fc(x, float("nan")), y)
    return _select(b, _isnan(b, x), x, y)


def _emit_tanh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """tanh(x): odd polynomial for |x| < 0.625, else 1 - 2/(exp(2|x|) + 1); sign restored."""
    f = _fmt(x.type)
    a = _fabs(b, x)
    z = b.fmul(a, a)
    small = _fmuladd(b, b.fmul(a, z), _poly(b, z, f.coeffs["tanh"]), a)
    e = _emit_exp(b, b.fadd(a, a))  # exp overflow to inf gives exactly 1 below
    big = b.fsub(_fc(x, 1.0), b.fdiv(_fc(x, 2.0), b.fadd(e, _fc(x, 1.0))))
    y = _select(b, b.fcmp_ordered("<", a, _fc(x, _TANH_SMALL)), small, big)
    return _copysign(b, y, x)  # NaN stays NaN (through exp)


def _emit_erf(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """erf(x): x + x*P(x^2) for |x| < 0.875, else 1 - exp(Q(|x|)) with Q ~ log(erfc)."""
    f = _fmt(x.type)
    a = _fabs(b, x)
    small = _fmuladd(b, a, _poly(b, b.fmul(a, a), f.coeffs["erf_small"]), a)
    # Q is expanded around the range start so that its rounding errors are smallest where
    # erfc is largest (far out, erfc is tiny and its relative error hardly matters).
    big_lim = _fc(x, f.erf_big)
    ac = _select(b, b.fcmp_ordered("<", a, big_lim), a, big_lim)
    u = b.fsub(ac, _fc(x, _ERF_SMALL))
    big = b.fsub(_fc(x, 1.0), _emit_exp(b, _poly(b, u, f.coeffs["erf_big"])))
    y = _select(b, b.fcmp_ordered("<", a, _fc(x, _ERF_SMALL)), small, big)
    y = _select(b, b.fcmp_ordered(">=", a, big_lim), _fc(x, 1.0), y)
    y = _copysign(b, y, x)
    return _select(b, _isnan(b, x), x, y)


def _emit_atan(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """atan(x), fdlibm's algorithm made branch-free: each lane picks its segment's
    reduction and constants with selects. float32 uses s_atanf.c's constants and shorter
    polynomial (max error 0.84 ulp against 0.50 in double, at a third of the time)."""
    f32 = _fmt(x.type) is _F32
    segments = [(limit, *hilo, pqrs) for (limit, _, _, pqrs), hilo in
                zip(_ATAN_SEGMENTS, _ATAN_HILO_F32)] if f32 else _ATAN_SEGMENTS
    coeffs = _ATAN_T_F32 if f32 else _ATAN_T
    a = _fabs(b, x)
    # the last segment is the default, so NaN (all compares false) and +inf land there
    limit, hi, lo, (p, q, r, s) = segments[-1]
    hi_v, lo_v = _fc(x, hi), _fc(x, lo)
    num_v, den_v = _fc(x, q), a                       # -1 / |x|
    for limit, hi, lo, (p, q, r, s) in reversed(segments[:-1]):
        inside = b.fcmp_ordered("<", a, _fc(x, limit))
        num = _fmuladd(b, _fc(x, p), a, _fc(x, q))
        den = _fmuladd(b, _fc(x, r), a, _fc(x, s))
        num_v, den_v = _select(b, inside, num, num_v), _select(b, inside, den, den_v)
        hi_v, lo_v = _select(b, inside, _fc(x, hi), hi_v), _select(b, inside, _fc(x, lo), lo_v)
    t = b.fdiv(num_v, den_v)
    z = b.fmul(t, t)
    w = b.fmul(z, z)
    s1 = b.fmul(z, _poly(b, w, coeffs[0::2]))
    s2 = b.fmul(w, _poly(b, w, coeffs[1::2]))
    # atan(b) + atan(t) = hi - ((t*(s1 + s2) - lo) - t), summed from small to large
    y = b.fsub(hi_v, b.fsub(b.fsub(b.fmul(t, b.fadd(s1, s2)), lo_v), t))
    return _copysign(b, y, x)                      # NaN stays NaN (through the division)


# cbrt(m) for m in [1, 2) around m = 1.5: relative error 1.4e-6 (IRLS fit), the start of the
# Newton steps
_CBRT_START = (1.1447129614607252, 0.2543863981778454, -0.05643700486255366,
               0.02080971427143322, -0.01026736890126254, 0.005319247747983297)
_CBRT_2R = (1.0, 2.0 ** (1.0 / 3.0), 2.0 ** (2.0 / 3.0))   # cbrt(2^r), r = 0, 1, 2


def _cbrt_newton(b: ir.IRBuilder, y: ir.Value, a: ir.Value) -> ir.Value:
    """One Newton step for y^3 = a, written as a small correction of y: y - (y - a/y^2)/3
    (the correction's own rounding is tiny next to y's, so the result is y's rounding)."""
    return b.fsub(y, b.fmul(b.fsub(y, b.fdiv(a, b.fmul(y, y))), _fc(y, 1.0 / 3.0)))


def _emit_cbrt(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """cbrt(x) without pow: |x| = 2^(3q+r) * m (m in [1, 2), r in {0, 1, 2}), a polynomial
    start for cbrt(m) (1.4e-6) times cbrt(2^r), Newton steps on m*2^r, scaled by 2^q.

    Max error 0.73 ulp, float32 and float64 alike (the last Newton step's rounding; float32
    needs one step, float64 two). 0, +-inf and NaN are returned as they are; the sign is
    x's."""
    f = _fmt(x.type)
    steps = 1 if f is _F32 else 2
    a = _fabs(b, x)
    # subnormals: scale by 2^(3*18) into the normal range, 18 off the result's exponent
    sub = b.fcmp_ordered("<", a, _fc(x, f.min_normal))
    a_n = _select(b, sub, b.fmul(a, _fc(x, 2.0 ** 54)), a)
    bits = _to_int(b, a_n)
    e = b.sub(b.lshr(bits, _ic(x, f.mant)), _ic(x, f.bias))
    m = _to_float(b, b.or_(b.and_(bits, _ic(x, (1 << f.mant) - 1)), _ic(x, f.bias << f.mant)),
                  x.type)
    # q = e div 3 (floor): (e - 1)/3 is q - 1/3, q or q + 1/3, which rounds to q
    _, qi = _round_to_int(b, b.fmul(b.fsub(b.sitofp(e, x.type), _fc(x, 1.0)),
                                    _fc(x, 1.0 / 3.0)))
    r = b.sub(e, b.mul(qi, _ic(x, 3)))
    r1, r2 = (b.icmp_signed("==", r, _ic(x, k)) for k in (1, 2))
    scale_m = _select(b, r1, _fc(x, 2.0), _select(b, r2, _fc(x, 4.0), _fc(x, 1.0)))
    c_r = _select(b, r1, _fc(x, _CBRT_2R[1]), _select(b, r2, _fc(x, _CBRT_2R[2]), _fc(x, 1.0)))
    mr = b.fmul(m, scale_m)                               # exact, in [1, 8)
    y = b.fmul(_poly(b, b.fsub(m, _fc(x, 1.5)), _CBRT_START), c_r)
    for _ in range(steps):                                # 1.4e-6 -> 2e-12 -> rounding
        y = _cbrt_newton(b, y, mr)
    qi = b.sub(qi, _select(b, sub, _ic(x, 18), _ic(x, 0)))
    y = b.fmul(y, _pow2(b, qi, x.type))                   # exact: 2^q is normal, y in [1, 2)
    # 0, inf: the result is the input; NaN: the compare is true (unordered)
    keep = b.fcmp_unordered("uno", a, a)
    keep = b.or_(keep, b.fcmp_ordered("==", a, _fc(x, 0.0)))
    keep = b.or_(keep, b.fcmp_ordered("==", a, _fc(x, float("inf"))))
    return _copysign(b, _select(b, keep, a, y), x)


def _expm1_parts(b: ir.IRBuilder, x: ir.Value):
    """exp(x) - 1 and its pieces: (k, p_hi, p_lo, value) with x = k*ln2 + r and exp(r) - 1
    = p_hi + p_lo (for sinh/cosh: exp(x)/2 = 2^(k-1) * (1 + p) without overflowing).

    The reduction as in exp; p = r + r^2*P(r) kept in two parts (fast two-sum, |q| < |r|/5),
    then 2^k*p + (2^k - 1) with 2^k - 1's rounding error (past k = mant + 1) among the
    small terms; past k = 60 the -1 is below the last bit and the value is exp's. x is
    clamped to [-40, exp_hi + 1] (exp(x)/2 overflows just past exp_hi); NaN passes."""
    f = _fmt(x.type)
    hi_lim, lo_lim = f.exp_hi + 1.0, -40.0          # below -40 the value rounds to -1
    xc = _select(b, b.fcmp_ordered(">", x, _fc(x, hi_lim)), _fc(x, hi_lim), x)
    xc = _select(b, b.fcmp_ordered("<", xc, _fc(x, lo_lim)), _fc(x, lo_lim), xc)
    k, ki = _round_to_int(b, b.fmul(xc, _fc(x, f.log2e)))
    r_hi = _fmuladd(b, k, _fc(x, -f.ln2_hi), xc)          # exact
    c = b.fmul(k, _fc(x, f.ln2_lo))
    r = b.fsub(r_hi, c)
    r_lo = b.fsub(b.fsub(r_hi, r), c)                     # r's rounding error
    # for k = 1 the result is about 2p, and p's roundings would count twice in its ulp
    q = b.fmul(b.fmul(r, r), _poly(b, r, f.coeffs["exp"]))
    p_hi = b.fadd(r, q)
    p_lo = b.fadd(b.fadd(b.fsub(r, p_hi), q), r_lo)
    big = b.icmp_signed(">", ki, _ic(x, 60))
    t = _pow2(b, _select(b, big, _ic(x, 0), ki), x.type)
    # t - 1 = tm1 + err: err is 0 up to k = mant + 1 and -1 past it (tm1 rounds to t)
    tm1 = b.fsub(t, _fc(x, 1.0))
    err = b.fsub(b.fsub(t, tm1), _fc(x, 1.0))
    hi, lo = _two_sum(b, b.fmul(t, p_hi), tm1)          # t*p_hi is exact (t = 2^k)
    small = b.fadd(hi, b.fadd(lo, _fmuladd(b, t, p_lo, err)))
    large = _ldexp(b, b.fadd(p_hi, _fc(x, 1.0)), ki)
    return ki, p_hi, p_lo, _select(b, big, large, small)


def _emit_expm1(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """expm1(x) = exp(x) - 1 from exp's reduction (see _expm1_parts)."""
    value = _expm1_parts(b, x)[3]
    return _select(b, b.fcmp_ordered("==", x, _fc(x, 0.0)), x, value)   # -0.0 stays -0.0


def _half_exp(b: ir.IRBuilder, ki: ir.Value, p_hi: ir.Value, p_lo: ir.Value) -> ir.Value:
    """exp(x)/2 = 2^(k-1) * (1 + p) from _expm1_parts' pieces (finite up to exp_hi + ln2)."""
    one_p = b.fadd(_fc(p_hi, 1.0), b.fadd(p_hi, p_lo))
    return _ldexp(b, one_p, b.sub(ki, _ic(ki, 1)))


def _emit_cosh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """cosh(x) = h + 1/(4h) with h = exp(|x|)/2 from one exp reduction, scaled by 2^(k-1):
    no overflow before cosh's own. NaN stays NaN, +-inf gives +inf."""
    ki, p_hi, p_lo, _ = _expm1_parts(b, _fabs(b, x))
    h = _half_exp(b, ki, p_hi, p_lo)
    return b.fadd(h, b.fdiv(_fc(x, 0.25), h))


# sinh(x) = x + x*z*P(z), z = x^2, |x| < 1: Taylor's 1/(2n+3)! (the next term is below
# half an ulp: 1/13! float32, 1/19! float64)
_SINH_TAYLOR = {32: tuple(1.0 / math.factorial(2 * n + 3) for n in range(5)),
                64: tuple(1.0 / math.factorial(2 * n + 3) for n in range(8))}


def _emit_sinh(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """sinh(x): below 1 in magnitude x + x^3*P(x^2) (Taylor, one rounding at the end);
    above, h - 1/(4h) with h = exp(|x|)/2 from one exp reduction (no overflow before
    sinh's own). The sign is x's (-0.0 stays -0.0)."""
    a = _fabs(b, x)
    z = b.fmul(a, a)
    small = _fmuladd(b, b.fmul(a, z), _poly(b, z, _SINH_TAYLOR[_fmt(x.type).width]), a)
    ki, p_hi, p_lo, _ = _expm1_parts(b, a)
    h = _half_exp(b, ki, p_hi, p_lo)
    big = b.fsub(h, b.fdiv(_fc(x, 0.25), h))
    return _copysign(b, _select(b, b.fcmp_ordered("<", a, _fc(x, 1.0)), small, big), x)


def _emit_exp2(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """2^x = 2^k * exp(r*ln2), k = round(x), r = x - k exact in [-1/2, 1/2]; r*ln2 is
    kept as hi + lo (the product's rounding error by a fused multiply-add) so that exp's
    polynomial sees the exact argument, and 1 + p is summed in two parts. Max error
    0.77 / 0.74 ulp float32 / float64, in subnormal results (rounded twice, by the sum and
    by the scaling); without FMA r*ln2's rounding adds up to ~0.5 ulp."""
    f = _fmt(x.type)
    ln2 = f.ln2_hi + f.ln2_lo
    # clamp past overflow / underflow to 0 (ldexp then gives inf / 0); NaN passes both
    hi_lim, lo_lim = f.bias + 2.0, -(f.bias + f.mant + 3.0)
    xc = _select(b, b.fcmp_ordered(">", x, _fc(x, hi_lim)), _fc(x, hi_lim), x)
    xc = _select(b, b.fcmp_ordered("<", xc, _fc(x, lo_lim)), _fc(x, lo_lim), xc)
    k, ki = _round_to_int(b, xc)
    r = b.fsub(xc, k)
    t = b.fmul(r, _fc(x, ln2))
    t_lo = _fmuladd(b, r, _fc(x, ln2), b.fneg(t))       # exact with FMA (0 without)
    t_lo = _fmuladd(b, r, _fc(x, f.ln2_lo - (ln2 - f.ln2_hi)), t_lo)
    # 1 + t + t^2*P(t) summed in two parts (fast two-sums), rounded once at the end
    q = b.fmul(b.fmul(t, t), _poly(b, t, f.coeffs["exp"]))
    p_hi = b.fadd(t, q)
    p_lo = b.fadd(b.fadd(b.fsub(t, p_hi), q), t_lo)
    one = _fc(x, 1.0)
    y_hi = b.fadd(one, p_hi)
    y_lo = b.fadd(b.fadd(b.fsub(one, y_hi), p_hi), p_lo)
    return _ldexp(b, b.fadd(y_hi, y_lo), ki)


def _emit_log1p(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """log1p(x) = log(u) + c/u with u = 1 + x rounded and c = (1 + x) - u its rounding
    error, computed exactly (fdlibm's correction), added to the log kernel's small terms.
    -1 -> -inf, below -1 -> NaN."""
    one = _fc(x, 1.0)
    u = b.fadd(x, one)
    # x < 1: u - 1 is exact (Sterbenz); x >= 1: u - x is exact (u and x within a factor 2)
    c = _select(b, b.fcmp_ordered("<", u, _fc(x, 2.0)),
                b.fsub(x, b.fsub(u, one)), b.fsub(one, b.fsub(u, x)))
    # log(u)'s specials are log1p's: u = 0 (x = -1), u < 0, +inf, NaN
    y = _log_specials(b, u, _log_core(b, u, b.fdiv(c, u)))
    return _select(b, b.fcmp_ordered("==", u, one), x, y)    # x = +-0 and tiny x: x


def _reduce_pio2(b: ir.IRBuilder, x: ir.Value, k: ir.Value) -> ir.Value:
    """x - k*pi/2 with a three-part pi/2 (Cody-Waite), one fmuladd per part."""
    for part in _fmt(x.type).pio2:
        x = _fmuladd(b, k, _fc(x, -part), x)
    return x


def _sincos_kernel(b: ir.IRBuilder, x: ir.Value, quadrant_shift: int) -> ir.Value:
    """sin(x + quadrant_shift*pi/2).

    x = k*pi/2 + r with a three-part pi/2 (Cody-Waite), then polynomials for sin r / cos r
    on [-pi/4, pi/4] and the quadrant k mod 4 picks one and the sign.  With fused fmuladd
    (FMA hardware) every reduction step is exact up to one rounding, so results stay
    accurate for |x| < 2^(mant-1)*pi/2 (~6.5e6 float, ~3.5e15 double); without FMA large
    arguments lose accuracy.  Beyond that the result is meaningless but within [-1, 1].
    """
    f = _fmt(x.type)
    k, ki = _round_to_int(b, b.fmul(x, _fc(x, f.two_over_pi)))
    r = _reduce_pio2(b, x, k)
    # For large |x| the rounded x*2/pi can pick the wrong k (r up to ~1.37): correct k by
    # one and reduce again from x (exact integers; as accurate as a first-time-right k).
    up = b.fcmp_ordered(">", r, _fc(x, math.pi / 4))
    down = b.fcmp_ordered("<", r, _fc(x, -math.pi / 4))
    adj = _select(b, up, _fc(x, 1.0), _select(b, down, _fc(x, -1.0), _fc(x, 0.0)))
    r = _reduce_pio2(b, x, b.fadd(k, adj))
    ki = b.add(ki, _select(b, up, _ic(x, 1), _select(b, down, _ic(x, -1), _ic(x, 0))))
    # Past 2^(mant-1) quadrants k is meaningless and r can be huge: clamp so that the
    # result stays in [-1, 1].  No-op otherwise; NaN passes through.
    hi, lo = _fc(x, _SINCOS_RCLAMP), _fc(x, -_SINCOS_RCLAMP)
    r = _select(b, b.fcmp_ordered(">", r, hi), hi, r)
    r = _select(b, b.fcmp_ordered("<", r, lo), lo, r)
    z = b.fmul(r, r)
    sin_r = _fmuladd(b, b.fmul(r, z), _poly(b, z, f.coeffs["sin"]), r)
    cos_r = _poly(b, z, (1.0, -0.5) + tuple(f.coeffs["cos"]))
    # quadrant q: 0 -> sin r, 1 -> cos r, 2 -> -sin r, 3 -> -cos r
    q = b.add(ki, _ic(x, quadrant_shift))
    odd = b.icmp_unsigned("!=", b.and_(q, _ic(x, 1)), _ic(x, 0))
    y = _select(b, odd, cos_r, sin_r)
    flip = b.shl(b.and_(q, _ic(x, 2)), _ic(x, f.width - 2))  # bit 1 -> sign bit
    return _to_float(b, b.xor(_to_int(b, y), flip), x.type)


def _emit_sin(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """sin(x); sin(+-inf) = NaN comes out of the reduction (inf - inf)."""
    y = _sincos_kernel(b, x, 0)
    # -0 would come out as +0 (-0 * negative coefficient + -0 = +0).
    return _select(b, b.fcmp_ordered("==", x, _fc(x, 0.0)), x, y)


def _emit_cos(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """cos(x) = sin(x + pi/2), done by shifting the quadrant."""
    return _sincos_kernel(b, x, 1)


_EMITTERS: Dict[str, Callable[[ir.IRBuilder, ir.Value], ir.Value]] = {
    "exp": _emit_exp,
    "sigmoid": _emit_sigmoid,
    "log": _emit_log,
    "tanh": _emit_tanh,
    "erf": _emit_erf,
    "sin": _emit_sin,
    "cos": _emit_cos,
    "atan": _emit_atan,
    "cbrt": _emit_cbrt,
    "expm1": _emit_expm1,
    "log1p": _emit_log1p,
    "log2": _emit_log_base(2),
    "log10": _emit_log_base(10),
    "exp2": _emit_exp2,
    "sinh": _emit_sinh,
    "cosh": _emit_cosh,
}
# the function names emit_math knows (jitcore.llvm.opemit gives each op of that name its emitter)
SUPPORTED = frozenset(_EMITTERS)


def emit_math(builder: ir.IRBuilder, name: str, x: ir.Value) -> ir.Value:
    """Emit IR computing name(x) lane-wise.

    x is float, double, or <N x float>/<N x double> (any N >= 1, e.g. 4, 8, 16).
    Raises ValueError for unknown names or non-float types.
    """
    emitter = _EMITTERS.get(name)
    if emitter is None:
        raise ValueError(f"vecmath: unknown function {name!r}; supported: {sorted(SUPPORTED)}")
    _fmt(x.type)  # type check
    return emitter(builder, x)

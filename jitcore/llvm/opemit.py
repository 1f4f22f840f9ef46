"""Elementwise op emitters: an `Op -> emitter` table (`EMITTERS`) with one signature.

    emitter(builder, out_dtype, in_dtype, args, arg) -> value

Every emitter works on scalars and on vectors alike (llvmlite builder ops and the overloaded
intrinsics are lane-wise), so the same table serves the vector body and the scalar tail.
NaN behaviour follows numpy: maximum/minimum propagate NaN, `!=` is true for NaN.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from jitcore.ir import dtypes as dt
from jitcore.ir.ops import ELEMENTWISE, Op, info

from . import bf16_convert
from . import irutil as u
from . import powf, vecmath


def _math(name):
    def emit(b, out, inp, args, arg):
        return vecmath.emit_math(b, name, args[0])
    return emit


# vecmath's sin/cos reduce arguments exactly up to about these magnitudes (float, double)
SINCOS_EXACT_BELOW = {32: 6.5e6, 64: 3.5e15}


def _sincos(name):
    """Vector sin/cos; lanes with huge arguments (rare) are redone by libm, whose
    Payne-Hanek reduction is exact at any magnitude. vecmath's reduction is exact only with
    fused multiply-adds: targets without FMA (x86-64, x86-64-v2) call libm for every lane."""
    def emit(b, out, inp, args, arg):
        x = args[0]
        if not u.fused_fma(b):
            return u.intrinsic(b, name, [x])
        fast = vecmath.emit_math(b, name, x)
        limit = u.const(x.type, SINCOS_EXACT_BELOW[out.bits])
        big = b.fcmp_ordered(">", u.intrinsic(b, "fabs", [x]), limit)
        any_big = big if u.lanes_of(x) == 1 else u.intrinsic(b, "vector.reduce.or", [big],
                                                             ret_type=u.I1)
        result = u.alloca_once(b, x.type, name=f"{name}.res")
        b.store(fast, result)
        with b.if_then(any_big, likely=False):
            b.store(b.select(big, u.intrinsic(b, name, [x]), fast), result)
        return b.load(result)
    return emit


def _neg(b, out, inp, args, arg):
    return b.fneg(args[0]) if out.is_float else b.sub(u.const(args[0].type, 0), args[0])


def _abs(b, out, inp, args, arg):
    x = args[0]
    if out.is_float:
        return u.intrinsic(b, "fabs", [x])
    if out.kind in "ub":
        return x
    return b.select(b.icmp_signed("<", x, u.const(x.type, 0)), b.neg(x), x)


def _round(name):
    def emit(b, out, inp, args, arg):
        return u.intrinsic(b, name, args) if out.is_float else args[0]
    return emit


def _float_to_int(b, x, out: dt.DType, ty):
    """Truncate toward zero, saturating at the target's bounds, NaN -> 0 (the README's rule;
    plain fptosi gives poison there). LLVM's llvm.fptosi.sat/fptoui.sat do this but x86
    scalarizes their vector forms, so the value is clamped into range with selects first
    and converted with a plain fptosi, which stays one vector instruction (through i32 for
    uint8: there is no byte conversion)."""
    signed = out.kind == "i"
    lo = -(2.0 ** (out.bits - 1)) if signed else 0.0     # exact in float32 and float64
    above = 2.0 ** (out.bits - signed)                   # the first value past the maximum
    fdtype = np.float32 if u.element_type(x.type) == u.F32 else np.float64
    below_above = float(np.nextafter(fdtype(above), fdtype(0)))   # largest float in range
    clamped = b.select(b.fcmp_ordered("<", x, u.const(x.type, lo)), u.const(x.type, lo), x)
    clamped = b.select(b.fcmp_ordered(">", clamped, u.const(x.type, below_above)),
                       u.const(x.type, below_above), clamped)
    clamped = b.select(b.fcmp_unordered("uno", x, x), u.const(x.type, 0.0), clamped)
    lanes = u.lanes_of(x)
    via = ty if out.bits >= 32 else u.value_type(dt.int32, lanes)
    r = b.fptosi(clamped, via)
    r = b.trunc(r, ty) if via != ty else r
    top = np.iinfo(out.np).max
    if int(below_above) != top:          # e.g. float32 -> int32: 2147483520 < 2**31 - 1
        r = b.select(b.fcmp_ordered(">=", x, u.const(x.type, above)), u.const(ty, top), r)
    return r


def cast(b, out: dt.DType, inp: dt.DType, x):
    """Convert a value of dtype inp to dtype out as numpy's astype does."""
    lanes = u.lanes_of(x)
    ty = u.value_type(out, lanes)
    if out == inp:
        return x
    if inp == dt.bfloat16:
        return cast(b, out, dt.float32, bf16_convert.widen(b, x))
    if out == dt.bfloat16:
        return bf16_convert.narrow(b, _to_float32_once(b, inp, x))
    if out == dt.bool_:
        zero = u.const(x.type, 0.0 if inp.is_float else 0)
        return b.fcmp_unordered("!=", x, zero) if inp.is_float else b.icmp_unsigned("!=", x, zero)
    if out.is_float:
        if inp.is_float:
            return b.fpext(x, ty) if out.bits > inp.bits else b.fptrunc(x, ty)
        return b.sitofp(x, ty) if inp.kind == "i" else b.uitofp(x, ty)
    if inp.is_float:
        return _float_to_int(b, x, out, ty)
    if out.bits > inp.bits or inp == dt.bool_:
        return b.sext(x, ty) if inp.kind == "i" else b.zext(x, ty)
    return b.trunc(x, ty) if out.bits < inp.bits else x


def _to_float32_once(b, inp: dt.DType, x):
    """x as float32, or (where that would round) as float32 rounded to odd, so that rounding
    the result to bfloat16 rounds x once: int32 and int64 go through float64 (int32 exactly;
    int64 rounds there as ml_dtypes does)."""
    if inp == dt.float32:
        return x
    if inp.bits <= 8:                       # bool, uint8: exact in float32
        return cast(b, dt.float32, inp, x)
    if inp != dt.float64:
        x = cast(b, dt.float64, inp, x)
    return bf16_convert.f64_to_f32_odd(b, x)


def _cast(b, out, inp, args, arg):
    return cast(b, out, inp, args[0])


def _arith(fop, iop, bool_op=None):
    def emit(b, out, inp, args, arg):
        if out.is_float:
            return getattr(b, fop)(*args)
        if out == dt.bool_ and bool_op:
            return getattr(b, bool_op)(*args)
        return getattr(b, iop)(*args)
    return emit


def _minmax(fname, signed_pred, bool_op):
    def emit(b, out, inp, args, arg):
        x, y = args
        if out.is_float:
            return u.intrinsic(b, fname, [x, y])
        if out == dt.bool_:
            return getattr(b, bool_op)(x, y)
        cmp = b.icmp_signed if out.kind == "i" else b.icmp_unsigned
        return b.select(cmp(signed_pred, x, y), x, y)
    return emit


def _compare(pred):
    def emit(b, out, inp, args, arg):
        if inp.is_float:
            if pred == "!=":
                return b.fcmp_unordered(pred, *args)
            return b.fcmp_ordered(pred, *args)
        if inp.kind == "i":
            return b.icmp_signed(pred, *args)
        return b.icmp_unsigned(pred, *args)
    return emit


def _pow(b, out, inp, args, arg):
    if out.name == "float32":
        return powf.emit_pow_f32(b, *args)
    if out.is_float:                       # float64: libm, one call per lane
        return u.intrinsic(b, "pow", args)
    return _int_pow(b, out, *args)


def _int_pow(b, out, x, y):
    """Integer power by squaring (scalar only: the legality pass keeps such kernels scalar).
    Wraps on overflow like numpy. A negative exponent (numpy raises) gives the truncated
    quotient: 1 for base 1, +-1 for base -1, else 0."""
    ty = x.type
    r, base, e = (u.alloca_once(b, ty, name=n) for n in ("pow.r", "pow.base", "pow.e"))
    b.store(ir.Constant(ty, 1), r)
    b.store(x, base)
    b.store(y, e)
    cond_bb, body_bb, end_bb = (b.append_basic_block(n) for n in ("pow.cond", "pow.body", "pow.end"))
    b.branch(cond_bb)
    b.position_at_end(cond_bb)
    ev = b.load(e)
    more = b.icmp_signed(">", ev, ir.Constant(ty, 0)) if out.kind == "i" else \
        b.icmp_unsigned("!=", ev, ir.Constant(ty, 0))
    b.cbranch(more, body_bb, end_bb)
    b.position_at_end(body_bb)
    bv, rv = b.load(base), b.load(r)
    odd = b.trunc(ev, u.I1)
    b.store(b.select(odd, b.mul(rv, bv), rv), r)
    b.store(b.mul(bv, bv), base)
    b.store(b.lshr(ev, ir.Constant(ty, 1)), e)
    b.branch(cond_bb)
    b.position_at_end(end_bb)
    result = b.load(r)
    if out.kind != "i":
        return result
    one, minus_one = ir.Constant(ty, 1), ir.Constant(ty, -1)
    odd_y = b.trunc(y, u.I1)
    negative = b.select(b.icmp_signed("==", x, one), one,
                        b.select(b.icmp_signed("==", x, minus_one),
                                 b.select(odd_y, minus_one, one), ir.Constant(ty, 0)))
    return b.select(b.icmp_signed("<", y, ir.Constant(ty, 0)), negative, result)


def _divmod(b, out, x, y):
    """numpy's floor division and remainder, lane-wise, never trapping: a zero divisor gives
    0 for both (numpy warns and returns 0), INT_MIN // -1 wraps to INT_MIN (numpy too). For
    floats, numpy's npy_divmod: mod = fmod(x, y) moved to the divisor's sign, div = (x - mod)/y
    rounded to the nearest integer below."""
    ty = x.type
    zero = u.const(ty, 0)
    if out.is_float:
        mod = b.frem(x, y)
        fix = b.and_(b.fcmp_ordered("!=", mod, zero),
                     b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", mod, zero)))
        mod_fixed = b.select(fix, b.fadd(mod, y), mod)
        div = b.fdiv(b.fsub(x, mod), y)
        div = b.select(fix, b.fsub(div, u.const(ty, 1.0)), div)
        floor = u.intrinsic(b, "floor", [div])
        floor = b.select(b.fcmp_ordered(">", b.fsub(div, floor), u.const(ty, 0.5)),
                         b.fadd(floor, u.const(ty, 1.0)), floor)
        # a zero quotient keeps the sign of x / y; a zero divisor gives x / y (inf or nan)
        floor = b.select(b.fcmp_ordered("==", div, zero),
                         _copysign(b, zero, b.fdiv(x, y)), floor)
        by_zero = b.fcmp_ordered("==", y, zero)
        floor = b.select(by_zero, b.fdiv(x, y), floor)
        mod_fixed = b.select(b.and_(b.fcmp_ordered("==", mod_fixed, zero),
                                    b.fcmp_ordered("==", mod, zero)),
                             _copysign(b, zero, y), mod_fixed)
        return floor, mod_fixed
    one = u.const(ty, 1)
    safe_y = b.select(b.icmp_signed("==", y, zero), one, y)
    if out.kind == "u":
        q, r = b.udiv(x, safe_y), b.urem(x, safe_y)
    else:
        minus_one = u.const(ty, -1)
        safe_y = b.select(b.icmp_signed("==", safe_y, minus_one), one, safe_y)  # no INT_MIN/-1
        q, r = b.sdiv(x, safe_y), b.srem(x, safe_y)
        negated = b.sub(zero, x)                                  # x // -1, wrapping
        is_m1 = b.icmp_signed("==", y, minus_one)
        q, r = b.select(is_m1, negated, q), b.select(is_m1, zero, r)
        fix = b.and_(b.icmp_signed("!=", r, zero),
                     b.xor(b.icmp_signed("<", r, zero), b.icmp_signed("<", y, zero)))
        q = b.select(fix, b.sub(q, one), q)
        r = b.select(fix, b.add(r, y), r)
    by_zero = b.icmp_signed("==", y, zero)
    return b.select(by_zero, zero, q), b.select(by_zero, zero, r)


def _shift(left: bool):
    """numpy's shifts (npy_lshift / npy_rshift): a count outside [0, bits), negative ones
    included, shifts every bit out: 0, or -1 for a right shift of a negative signed value.
    LLVM's shifts give poison for such counts, so they are clamped or selected away."""
    def emit(b, out, inp, args, arg):
        x, n = args
        bits = u.element_type(x.type).width
        in_range = b.icmp_unsigned("<", n, u.const(n.type, bits))    # negatives are huge
        if not left and out.kind == "i":
            # an arithmetic shift by bits - 1 already gives numpy's 0 or -1
            return b.ashr(x, b.select(in_range, n, u.const(n.type, bits - 1)))
        shifted = b.shl(x, n) if left else b.lshr(x, n)
        return b.select(in_range, shifted, u.const(x.type, 0))     # a poison lane is dropped
    return emit


def _copysign(b, mag, sign):
    return u.intrinsic(b, "copysign", [mag, sign])


# The one table where ops meet LLVM: op -> emitter. Ops named like a vecmath function
# (exp, tanh, atan, ...) get it without an entry here; sin and cos add a libm fallback.
EMITTERS = {
    **{op: _math(info(op).name) for op in Op if info(op).name in vecmath.SUPPORTED},
    Op.SIN: _sincos("sin"), Op.COS: _sincos("cos"),
    Op.NEG: _neg, Op.ABS: _abs,
    Op.COPYSIGN: lambda b, out, inp, args, arg: _copysign(b, *args),
    Op.SQRT: lambda b, out, inp, args, arg: u.intrinsic(b, "sqrt", args),
    Op.FLOOR: _round("floor"), Op.CEIL: _round("ceil"),
    Op.LOGICAL_NOT: lambda b, out, inp, args, arg: b.not_(args[0]),
    Op.CAST: _cast,
    Op.ADD: _arith("fadd", "add", "or_"), Op.SUB: _arith("fsub", "sub"),
    Op.MUL: _arith("fmul", "mul", "and_"),
    Op.DIV: lambda b, out, inp, args, arg: b.fdiv(*args),      # the IR divides floats only
    Op.POW: _pow,
    Op.FLOORDIV: lambda b, out, inp, args, arg: _divmod(b, out, *args)[0],
    Op.MOD: lambda b, out, inp, args, arg: _divmod(b, out, *args)[1],
    Op.MAXIMUM: _minmax("maximum", ">", "or_"), Op.MINIMUM: _minmax("minimum", "<", "and_"),
    Op.EQ: _compare("=="), Op.NE: _compare("!="), Op.LT: _compare("<"),
    Op.LE: _compare("<="), Op.GT: _compare(">"), Op.GE: _compare(">="),
    Op.LOGICAL_AND: lambda b, out, inp, args, arg: b.and_(*args),
    Op.LOGICAL_OR: lambda b, out, inp, args, arg: b.or_(*args),
    Op.BITWISE_AND: lambda b, out, inp, args, arg: b.and_(*args),
    Op.BITWISE_OR: lambda b, out, inp, args, arg: b.or_(*args),
    Op.BITWISE_XOR: lambda b, out, inp, args, arg: b.xor(*args),
    Op.BITWISE_NOT: lambda b, out, inp, args, arg: b.not_(args[0]),
    Op.LEFT_SHIFT: _shift(left=True), Op.RIGHT_SHIFT: _shift(left=False),
    Op.WHERE: lambda b, out, inp, args, arg: b.select(*args),
}

_MISSING = {op for op in ELEMENTWISE if not info(op).composite} - set(EMITTERS)
assert not _MISSING, f"elementwise primitives without an emitter: {_MISSING}"


def emit(builder, op: Op, out: dt.DType, inp: dt.DType, args: list, arg=None):
    return EMITTERS[op](builder, out, inp, args, arg)

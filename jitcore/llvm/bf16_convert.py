"""bfloat16 conversions, lane-wise on scalars and vectors. A bfloat16 value lives in an i16
(its bits), the top half of a float32.

- widen: bf16 -> float32 is exact: zero-extend, shift left by 16, bitcast.
- narrow: float32 -> bf16 rounds to nearest even. With AVX512_BF16 (the module says so:
  `set_native`), 16- and 8-lane vectors use `vcvtneps2bf16`; elsewhere the integer sequence
  bits + 0x7FFF + ((bits >> 16) & 1), shifted right by 16, with NaN kept a quiet NaN
  ((bits >> 16) | 0x40, sign and top payload kept, as the instruction gives). The instruction
  flushes float32 denormals to zero; vectors holding one (vfpclassps says which) are redone
  with the integer sequence (a branch not taken otherwise), so both give the same bits for
  every input (tests/test_bfloat16.py).
- float64 -> bf16 rounds once, as ml_dtypes does (not through a rounded float32, which rounds
  twice): the float32 step rounds to odd, which then rounds to bf16 correctly.
"""
from __future__ import annotations

from llvmlite import ir

from . import irutil as u
from .bf16 import BF16_TYPE

_NATIVE_LANES = {16: "512", 8: "256"}     # vcvtneps2bf16 forms without a mask operand
_FPCLASS_DENORMAL = 0x20                  # vfpclassps's category bit for denormals


def set_native(module: ir.Module, native: bool) -> None:
    """Record on a kernel's module whether its target has AVX512_BF16."""
    module.jc_bf16_native = bool(native)


def _native(builder: ir.IRBuilder) -> bool:
    return getattr(builder.module, "jc_bf16_native", False)


def _like(x, elem: ir.Type) -> ir.Type:
    n = u.lanes_of(x)
    return ir.VectorType(elem, n) if n > 1 else elem


def widen(b: ir.IRBuilder, x):
    """bf16 bits (i16 lanes) -> float32 lanes, exactly."""
    bits = b.shl(b.zext(x, _like(x, u.I32)), u.const(_like(x, u.I32), 16))
    return b.bitcast(bits, _like(x, u.F32))


def narrow(b: ir.IRBuilder, x):
    """float32 lanes -> bf16 bits (i16 lanes), rounded to nearest even."""
    lanes = u.lanes_of(x)
    if not _native(b) or lanes not in _NATIVE_LANES:
        return _narrow_bits(b, x)
    fast = _narrow_native(b, x)
    denormal = _denormal_lanes(b, x)
    result = u.alloca_once(b, fast.type, name="bf16.res")
    b.store(fast, result)
    with b.if_then(u.intrinsic(b, "vector.reduce.or", [denormal], ret_type=u.I1),
                   likely=False):
        b.store(b.select(denormal, _narrow_bits(b, x), fast), result)
    return b.load(result)


def _narrow_native(b: ir.IRBuilder, x):
    lanes = u.lanes_of(x)
    name = f"llvm.x86.avx512bf16.cvtneps2bf16.{_NATIVE_LANES[lanes]}"
    bty = ir.VectorType(BF16_TYPE, lanes)
    fn = b.module.globals.get(name) or ir.Function(b.module, ir.FunctionType(bty, [x.type]),
                                                   name=name)
    return b.bitcast(b.call(fn, [x]), ir.VectorType(u.I16, lanes))


def _denormal_lanes(b: ir.IRBuilder, x):
    """<N x i1>: the lanes of x that are float32 denormals (not zeros: a vector of relu
    zeros would take the redo branch every time), by vfpclassps (AVX512DQ, which every CPU
    with AVX512_BF16 has)."""
    lanes = u.lanes_of(x)
    name = f"llvm.x86.avx512.fpclass.ps.{_NATIVE_LANES[lanes]}"
    mask = ir.VectorType(u.I1, lanes)
    fn = b.module.globals.get(name) or ir.Function(
        b.module, ir.FunctionType(mask, [x.type, u.I32]), name=name)
    return b.call(fn, [x, u.I32(_FPCLASS_DENORMAL)])


def _narrow_bits(b: ir.IRBuilder, x):
    i32 = _like(x, u.I32)
    bits = b.bitcast(x, i32)
    high = b.lshr(bits, u.const(i32, 16))
    odd = b.and_(high, u.const(i32, 1))
    rounded = b.lshr(b.add(b.add(bits, u.const(i32, 0x7FFF)), odd), u.const(i32, 16))
    quiet = b.or_(high, u.const(i32, 0x40))
    nan = b.fcmp_unordered("uno", x, x)
    return b.trunc(b.select(nan, quiet, rounded), _like(x, u.I16))


def f64_to_f32_odd(b: ir.IRBuilder, x):
    """float64 -> float32 rounded to odd (truncate toward zero, then set the last bit when
    inexact): rounding that to bf16 equals rounding x to bf16 once. NaN stays NaN."""
    f32 = b.fptrunc(x, _like(x, u.F32))
    back = b.fpext(f32, x.type)
    i32 = _like(x, u.I32)
    bits = b.bitcast(f32, i32)
    away = b.fcmp_ordered(">", u.intrinsic(b, "fabs", [back]), u.intrinsic(b, "fabs", [x]))
    bits = b.select(away, b.sub(bits, u.const(i32, 1)), bits)     # toward zero
    inexact = b.fcmp_ordered("!=", back, x)
    bits = b.select(inexact, b.or_(bits, u.const(i32, 1)), bits)
    return b.bitcast(bits, _like(x, u.F32))

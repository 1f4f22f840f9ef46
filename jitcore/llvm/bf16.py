"""bfloat16 numerics for the matmul precision policy: rounding float32 to bf16, in numpy (for
weights packed at compile time) and in LLVM IR (for operands packed at run time), and the
policy itself (which GEMM/GEMV/conv kernels compute from bf16 operands, and how).

bf16 is float32's upper 16 bits: the same exponent range, 8 significant bits (unit roundoff
2^-8). Rounding is to nearest, ties to even, as `vcvtneps2bf16` does; a NaN stays a (quiet)
NaN, and finite values past the largest bf16 round to infinity.

The policy (`apply`): with matmul_precision="bf16", every float32 GEMM multiplies bf16-rounded
operands and accumulates in float32. Where the target has AVX512_BF16 at 512 bits the GEMM
packs both operands into bf16 pairs and runs `vdpbf16ps` (precision "bf16", gemm_bf16.py);
elsewhere (x86-64-v4 without BF16, v3, v2, x86-64) it rounds the operands as it packs them and
runs its float32 FMA kernel ("bf16-emulated": the same values, a slower path). A GEMV rounds
its operands as it loads them ("bf16-emulated" at every level: it reads its matrix once, so
the gain of bf16 there is the halved memory traffic of bf16 storage, not the arithmetic).
A conv (kind "conv") with constant weights takes a pairs plan where the target has
AVX512_BF16 (conv_pairs.py, conv_panel_pairs.py: "bf16"), and computes in float32 where
neither pairs plan takes it (too few products per output: rounding its inputs as read would
only slow it, conv.prepack); elsewhere a conv rounds its operands ("bf16-emulated");
depthwise convs stay float32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from llvmlite import ir

from jitcore.ir.errors import JitcoreError
from jitcore.passes.kernel import Kind

from . import irutil as u

FP32, BF16, BF16_EMULATED = "fp32", "bf16", "bf16-emulated"
# matmul_precision spellings -> the policy ("highest": torch.set_float32_matmul_precision's)
PRECISIONS = {"fp32": FP32, "float32": FP32, "highest": FP32,
              "bf16": BF16, "bfloat16": BF16}


def policy(name) -> str:
    """The policy a matmul_precision spelling names (FP32 or BF16); JitcoreError if unknown."""
    found = PRECISIONS.get(str(name).strip().lower()) if name is not None else None
    if found is None:
        raise JitcoreError(f"matmul_precision must be one of {', '.join(PRECISIONS)}, "
                           f"got {name!r}")
    return found


# the kernel kinds `apply` makes compute from bf16 operands: the one list of what runs in
# bf16 under the policy (jitcore/torch/precision.py reports a model's ops by it); depthwise
# convs are not among them (memory-bound)
KINDS = frozenset({Kind.GEMM, Kind.GEMV, Kind.CONV})


def native(target) -> bool:
    """Whether the target runs the vdpbf16ps GEMM (AVX512_BF16 at 512-bit vectors)."""
    return target.has("avx512bf16") and target.vector_bits >= 512


def apply(lowered, precision: str, target) -> None:
    """Mark the float32 GEMM, GEMV and conv kernels of `lowered` with how they compute under
    the policy `precision` (FP32: unchanged), in place, before weights are prepacked. A conv
    marked BF16 keeps it where conv.prepack gives it a pairs plan: with constant weights
    that none takes it computes in float32, with weights not constant it is emulated;
    depthwise convs stay float32 (memory-bound: bf16 arithmetic would not speed them up)."""
    if precision == FP32:
        return
    fast = BF16 if native(target) else BF16_EMULATED
    for kernel in lowered.kernels:
        if kernel.kind not in KINDS:
            continue
        g, c = kernel.gemm, kernel.conv
        if g is not None and g.dtype.name == "float32":
            kernel.gemm = replace(g, precision=fast if kernel.kind is Kind.GEMM
                                  else BF16_EMULATED)
        elif kernel.kind is Kind.CONV and c is not None and c.dtype.name == "float32":
            kernel.conv = replace(c, precision=fast)


def describe(precision: str) -> str:
    """The part of a kernel's report that says how its products compute ('' for float32)."""
    if precision == BF16:
        return "; bf16 operands in pairs (vdpbf16ps), float32 accumulation"
    if precision == BF16_EMULATED:
        return ("; bf16-rounded operands, float32 FMA (no AVX512_BF16 here: the slower "
                "fallback)")
    return ""


# ---- numpy ----------------------------------------------------------------------------------

def bits(x: np.ndarray) -> np.ndarray:
    """float32 -> the bf16 bit patterns (uint16) of its values rounded to nearest even."""
    x = np.ascontiguousarray(x, np.float32)
    b = x.view(np.uint32)
    rounded = ((b + np.uint32(0x7FFF) + ((b >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    quiet = ((b >> 16) | np.uint32(0x40)).astype(np.uint16)
    return np.where(np.isnan(x), quiet, rounded)


def rounded(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (as float32)."""
    return (bits(x).astype(np.uint32) << 16).view(np.float32).reshape(np.shape(x))


# ---- LLVM IR ---------------------------------------------------------------------------------

class BFloatType(ir.Type):
    """LLVM's `bfloat` (llvmlite has no type for it)."""
    null = "0.0"

    def _to_string(self):
        return "bfloat"

    def __eq__(self, other):
        return isinstance(other, BFloatType)

    def __hash__(self):
        return hash("bfloat")


BF16_TYPE = BFloatType()


def round_ir(b: ir.IRBuilder, x):
    """float32 (scalar or vector) rounded to bf16 by integer arithmetic (any x86-64 level:
    `fptrunc ... to bfloat` would call a library routine without AVX512_BF16)."""
    lanes = x.type.count if isinstance(x.type, ir.VectorType) else 1
    ity = ir.VectorType(u.I32, lanes) if lanes > 1 else u.I32
    i = b.bitcast(x, ity)
    lsb = b.and_(b.lshr(i, u.const(ity, 16)), u.const(ity, 1))
    near = b.add(b.add(i, u.const(ity, 0x7FFF)), lsb)
    quiet = b.or_(i, u.const(ity, 0x400000))
    out = b.select(b.fcmp_unordered("uno", x, x), quiet, near)
    return b.bitcast(b.and_(out, u.const(ity, -0x10000)), x.type)


def halves_ir(b: ir.IRBuilder, low, high):
    """Two <16 x float> -> <32 x bfloat>: low's values rounded in lanes 0-15, high's in
    16-31 (one vcvtne2ps2bf16)."""
    vty = ir.VectorType(BF16_TYPE, 32)
    fnty = ir.FunctionType(vty, [low.type, high.type])
    name = "llvm.x86.avx512bf16.cvtne2ps2bf16.512"
    fn = b.module.globals.get(name) or ir.Function(b.module, fnty, name=name)
    return b.call(fn, [high, low])          # (the instruction's second source is the low half)


def pairs_ir(b: ir.IRBuilder, even, odd):
    """Two <16 x float> (k and k+1 at 16 columns) -> <16 x i32>: per column the bf16 pair
    (even, odd), even in the low half (vcvtne2ps2bf16 and an interleaving vpermw)."""
    n = even.type.count
    both = halves_ir(b, even, odd)
    order = [j for c in range(n) for j in (c, n + c)]
    mixed = b.shuffle_vector(both, both, ir.Constant(ir.VectorType(u.I32, 2 * n),
                                                     [u.I32(j) for j in order]))
    return b.bitcast(mixed, ir.VectorType(u.I32, n))


def contiguous_pairs_ir(b: ir.IRBuilder, first, second):
    """Two <16 x float> holding 32 consecutive values along k -> <16 x i32> of their bf16
    pairs in order (one vcvtne2ps2bf16)."""
    return b.bitcast(halves_ir(b, first, second), ir.VectorType(u.I32, first.type.count))


def dot_pairs(b: ir.IRBuilder, acc, x, y):
    """vdpbf16ps: acc (<16 x float>) + per lane x.pair . y.pair (<16 x i32> of bf16 pairs)."""
    vty = ir.VectorType(BF16_TYPE, 32)
    fnty = ir.FunctionType(acc.type, [acc.type, vty, vty])
    name = "llvm.x86.avx512bf16.dpbf16ps.512"
    fn = b.module.globals.get(name) or ir.Function(b.module, fnty, name=name)
    return b.call(fn, [acc, b.bitcast(x, vty), b.bitcast(y, vty)])

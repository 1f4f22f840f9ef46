"""The measured fp32 FMA peak of one core: a loop of independent vector FMAs (enough
accumulators to cover the FMA latency on every port), compiled by jitcore's own LLVM engine
at the kernels' vector width and target level, timed on the calling thread. GFLOP/s = 2 flops
per lane per FMA. The loop uses llvm.fmuladd: one FMA where the level has them, a multiply and
an add where it has not (x86-64, x86-64-v2: the peak of that code, not a libm fma call).

The bf16 peak (`bf16_peak_gflops`) is the same loop of `vdpbf16ps` (AVX512_BF16, 512 bits):
each adds 16 lanes x 2 bf16 products to float32 accumulators, 64 flops, the count a bf16
GEMM's 2*M*N*K flops are measured against. None where the target has no AVX512_BF16.
"""
from __future__ import annotations

import ctypes
import time

ACCUMULATORS = 16
TARGET_S = 0.03           # one timed run
RUNS = 7                  # the best run counts: a peak, and the machine may be busy


DPBF16 = "llvm.x86.avx512bf16.dpbf16ps.512"


def _ir(lanes: int, bf16: bool = False) -> str:
    """The peak loop: ACCUMULATORS independent chains of FMAs (or of vdpbf16ps, `bf16`:
    %m and %c reinterpreted as 32 bf16 values each)."""
    vec = f"<{lanes} x float>"
    splat = lambda v: "<" + ", ".join([f"float {v}"] * lanes) + ">"   # noqa: E731
    acc = [f"%acc{k}" for k in range(ACCUMULATORS)]
    nxt = [f"%next{k}" for k in range(ACCUMULATORS)]
    body = [f"  {a} = phi {vec} [ {splat(float(k + 1))}, %entry ], [ {n}, %loop ]"
            for k, (a, n) in enumerate(zip(acc, nxt))]
    pairs = "<32 x bfloat>"
    if bf16:
        body += [f"  {n} = call {vec} @{DPBF16}({vec} {a}, {pairs} %mb, {pairs} %cb)"
                 for a, n in zip(acc, nxt)]
    else:
        body += [f"  {n} = call {vec} @llvm.fmuladd.v{lanes}f32({vec} {a}, {vec} %m, {vec} %c)"
                 for a, n in zip(acc, nxt)]
    total = nxt[0]
    tail = []
    for k, n in enumerate(nxt[1:]):
        tail.append(f"  %sum{k} = fadd {vec} {total}, {n}")
        total = f"%sum{k}"
    return "\n".join([
        f"declare {vec} @{DPBF16}({vec}, {pairs}, {pairs})" if bf16 else
        f"declare {vec} @llvm.fmuladd.v{lanes}f32({vec}, {vec}, {vec})",
        "define float @jc_fma_peak(i64 %iters, float %mul, float %add) {",
        "entry:",
        f"  %m0 = insertelement {vec} undef, float %mul, i32 0",
        f"  %m = shufflevector {vec} %m0, {vec} undef, <{lanes} x i32> zeroinitializer",
        f"  %c0 = insertelement {vec} undef, float %add, i32 0",
        f"  %c = shufflevector {vec} %c0, {vec} undef, <{lanes} x i32> zeroinitializer",
        *([f"  %mb = bitcast {vec} %m to {pairs}", f"  %cb = bitcast {vec} %c to {pairs}"]
          if bf16 else []),
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]",
        *body,
        "  %i1 = add i64 %i, 1",
        "  %more = icmp ult i64 %i1, %iters",
        "  br i1 %more, label %loop, label %done",
        "done:",
        *tail,
        f"  %r = extractelement {vec} {total}, i32 0",
        "  ret float %r",
        "}",
    ])


def fma_peak_gflops() -> float:
    """Best-of-RUNS GFLOP/s of one thread running vector FMAs at the kernels' width."""
    from jitcore.targetinfo import select_target
    target = select_target()
    lanes = target.vector_bits // 32
    return _measure(_ir(lanes), target, 2 * lanes * ACCUMULATORS)


def bf16_peak_gflops() -> float | None:
    """Best-of-RUNS GFLOP/s of one thread running vdpbf16ps (64 flops each), or None where
    the kernels' target has no AVX512_BF16 at 512 bits (the bf16 GEMM then emulates)."""
    from jitcore.llvm import bf16
    from jitcore.targetinfo import select_target
    target = select_target()
    if not bf16.native(target):
        return None
    return _measure(_ir(16, bf16=True), target, 2 * 2 * 16 * ACCUMULATORS)


def _measure(text: str, target, flops_per_iter: int) -> float:
    """Best-of-RUNS GFLOP/s of the peak loop `text` (jc_fma_peak) compiled for `target`."""
    from jitcore.llvm import engine
    lib = engine.compile_ir(text, ["jc_fma_peak"], target)
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float,
                          ctypes.c_float)(lib.addresses["jc_fma_peak"])
    iters = 1000
    while True:                               # size one run to about TARGET_S
        t0 = time.perf_counter()
        fn(iters, 0.999, 1e-3)
        elapsed = time.perf_counter() - t0
        if elapsed > TARGET_S / 4:
            break
        iters *= 4
    iters = max(1, int(iters * TARGET_S / elapsed))
    best = 0.0
    for _ in range(RUNS):
        t0 = time.perf_counter()
        fn(iters, 0.999, 1e-3)
        best = max(best, iters * flops_per_iter / (time.perf_counter() - t0) / 1e9)
    del lib                                   # frees the code (fn is not called again)
    return best

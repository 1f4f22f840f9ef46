"""`f.explain(...)`: a human-readable report of what a compiled graph became."""
from __future__ import annotations


def explain(compiled) -> str:
    vec, total = compiled.coverage()
    t = compiled.seconds
    lines = [compiled.graph.text(), "",
             f"target: {compiled.target.cpu}, {compiled.target.isa}, "
             f"{compiled.target.vector_bits}-bit vectors",
             f"kernels: {total}  (vectorized {vec}/{total})"]
    for k in compiled.kernels:
        lines.append("  " + str(k).replace("\n", "\n  "))
    lines.append(f"memory: {sum(k.bytes for k in compiled.kernels)} bytes moved (lower bound), "
                 f"{sum(k.flops for k in compiled.kernels)} flops")
    if compiled.prepacked_bytes:
        lines.append(f"weights: {compiled.prepacked_bytes} bytes of constant GEMM/conv weights "
                     f"prepacked into panels at compile time (extra memory)")
    lines.append(f"compile: {t['total'] * 1e3:.1f} ms (passes {t['passes'] * 1e3:.1f}, "
                 f"codegen {t['codegen'] * 1e3:.1f}, LLVM {t['llvm'] * 1e3:.1f})")
    return "\n".join(lines)

"""`f.explain(...)`: a human-readable report of what a compiled graph became."""
from __future__ import annotations

from jitcore.passes import widen_bf16


def explain(compiled, extents: tuple = (), paths: tuple = ()) -> str:
    """`extents`: a call's run-time extents (jc.jit(dynamic=True)): bytes and flops are
    counted at its sizes. `paths`: the call paths (jitcore/call/choice.py CallPathChoice) a
    call with these arguments takes, without and with `out=`."""
    vec, total = compiled.coverage()
    t = compiled.seconds
    lines = [compiled.graph.text(), "",
             f"target: {compiled.target.cpu}, {compiled.target.isa}, "
             f"{compiled.target.vector_bits}-bit vectors",
             f"kernels: {total}  (vectorized {vec}/{total})"]
    bf16 = widen_bf16.note(compiled.graph)
    if bf16:
        lines.append(bf16)
    kernels = compiled.kernels_at(extents)
    for k in kernels:
        lines.append("  " + str(k).replace("\n", "\n  "))
    at = f" at this call's sizes ({', '.join(f's{k}={v}' for k, v in enumerate(extents))})" \
        if extents else ""
    lines.append(f"memory: {sum(k.bytes for k in kernels)} bytes moved (lower bound), "
                 f"{sum(k.flops for k in kernels)} flops{at}")
    if compiled.prepacked_bytes:
        lines.append(f"weights: {compiled.prepacked_bytes} bytes of constant GEMM/GEMV/conv weights "
                     f"prepacked into panels at compile time (extra memory)")
    for label, path in zip(("call path", "call path with out="), paths):
        lines.append(f"{label}: {path}")
    lines.append(compile_line(t, getattr(compiled, "source", None)))
    return "\n".join(lines)


STAGE_LABELS = {"trace": "trace", "cache_key": "cache key", "passes": "passes",
                "prepack": "prepack", "ir_generation": "IR generation", "parse": "LLVM parse",
                "optimize": "optimization", "machine_code": "machine code",
                "disk_load": "disk cache load", "disk_store": "disk cache store", "link": "link"}


# where a compiled graph's machine code came from (CompiledGraph.source)
SOURCES = {"compiled": "LLVM built some of its modules",
           "disk": "machine code from the disk cache",
           "disk_graph": "whole graph from the disk cache (no IR generated)",
           "memory": "every module already built in this process"}


def compile_line(seconds: dict, source: str | None = None) -> str:
    """`compile: 41.2 ms (trace 1.0, passes 3.1, ...)`: the first compile's stages, in ms,
    and where the machine code came from when not (only) from LLVM (`source`: a key of
    SOURCES)."""
    parts = [f"{label} {seconds[stage] * 1e3:.1f}" for stage, label in STAGE_LABELS.items()
             if stage in seconds]
    if source is None:
        source = "disk" if "disk_load" in seconds else "compiled"
    where = f"; {SOURCES[source]}" if source != "compiled" else \
        "; part of the machine code from the disk cache" if "disk_load" in seconds else ""
    return f"compile: {seconds['total'] * 1e3:.1f} ms ({', '.join(parts)}{where})"

"""The GEMM kernel kind's registration: the emitter of a plan is gemm.py's float32 one, or
one of gemm_bf16.py's (which extend it) where the matmul precision policy packs A."""
from __future__ import annotations

from jitcore.passes.kernel import Kernel, Kind

from . import bf16, conv_gemm, gemm, gemm_bf16
from .registry import KindEntry, plan_items, register


def emitter(module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0, plan=None):
    """The GEMM emitter of the plan: gemm.py's, or one packing A (gemm_bf16.py)."""
    cls = gemm.GemmEmitter
    if plan.pack_a:
        cls = gemm_bf16.PairsGemmEmitter if plan.pairs else gemm_bf16.RoundedGemmEmitter
    return cls(module, kernel, name, masked_tail, stream_bytes, plan)


def report(kernel: Kernel) -> tuple:
    """The loop nest, and how the products compute under the matmul precision policy; a
    1x1 conv computed as a GEMM (conv_gemm.py) says so in its layout."""
    layout = conv_gemm.LAYOUT if kernel.ops[:1] == ("conv2d",) else None
    return layout, kernel.loop_nest + bf16.describe(kernel.gemm.precision)


register(KindEntry(Kind.GEMM, emitter, plan=gemm.plan, work=plan_items, report=report,
                   unrolled=True))

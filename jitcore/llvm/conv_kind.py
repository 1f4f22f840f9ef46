"""The conv kernel kind's registration: the plan (conv.py), the emitter of each plan (conv.py's
pixel plan, conv_channels.py's channel plan, conv_winograd.py, and the bf16 pairs variants
of conv_pairs.py and conv_panel_pairs.py, which extend them) and the report."""
from __future__ import annotations

from jitcore.passes.kernel import Kernel, Kind

from . import bf16, conv, conv_winograd
from .conv_channels import ChannelConvEmitter, ChannelPlan
from .conv_panel_pairs import PairsPanelEmitter
from .conv_pairs import PairsConvEmitter
from .conv_winograd import WinogradConvEmitter, WinogradPlan
from .registry import KindEntry, plan_items, register

# the report of a conv on bf16-rounded operands (matmul_precision="bf16" without a pairs
# plan: no AVX512_BF16, or weights not constant, hence not prepacked)
EMULATED_CONV = ("; bf16-rounded operands, float32 FMA (the slower fallback: no AVX512_BF16 "
                 "here, or weights not constant)")


def report(kernel: Kernel) -> tuple:
    """A convolution computes in NCHW (the report's layout), with pixels or output channels
    along the vectors (the pixels' inputs packed im2col first, in that variant); and how its
    products compute under the matmul precision policy."""
    c = kernel.conv
    if c.winograd:
        return conv_winograd.report(kernel), kernel.loop_nest
    along = "output channels" if c.channel_vectors else "pixels"
    packed = ", inputs packed im2col" if c.im2col else ""
    how = bf16.describe(c.precision)
    if c.precision != bf16.FP32 and not (c.precision == bf16.BF16 and
                                         (c.channel_vectors or c.im2col)):
        how = EMULATED_CONV
    return f"NCHW, {along} along vectors{packed}", kernel.loop_nest + how


def emitter(module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0, plan=None):
    """The conv emitter of the plan's kind."""
    if isinstance(plan, WinogradPlan):
        cls = WinogradConvEmitter
    elif isinstance(plan, ChannelPlan):
        cls = PairsConvEmitter if plan.pairs else ChannelConvEmitter
    else:
        cls = PairsPanelEmitter if plan.pairs else conv.ConvEmitter
    return cls(module, kernel, name, masked_tail, stream_bytes, plan)


register(KindEntry(Kind.CONV, emitter, plan=conv.plan, work=plan_items, report=report,
                   unrolled=True))

"""The bf16 precision policy of a compiled model (`precision="bf16"`): which of its ops
compute from bf16 operands, and which stay float32.

The reference is torch autocast's CPU policy (`torch.autocast("cpu", dtype=torch.bfloat16)`):
its lower-precision ops are the matmuls and convolutions (mm, addmm, bmm, baddbmm, linear,
matmul, convolutions, scaled dot-product attention); a few ops (prod, ...) are forced to
float32; every other op runs in its inputs' dtype, which after a bf16 matmul is bf16.
jitcore's policy, per op:
- an op of BF16_OPS multiplies bf16-rounded operands with float32 accumulation, where a
  kernel of its kind does so (`jitcore.llvm.bf16.KINDS`: the GEMM, GEMV and conv kernels);
  constant weights are rounded and prepacked as bf16 pairs at compile time. A depthwise
  convolution stays float32 (its kernel is memory-bound: bf16 arithmetic would not speed it
  up), and `report` says so;
- every other op (softmax, layer/RMS norm, reductions, elementwise math) computes in
  float32, and values pass between kernels in float32: at least autocast's accuracy (it
  stores them in bf16), at the cost of twice the bytes between kernels.
A module already in bf16 (every floating parameter and buffer bf16: `model.to(bfloat16)`)
runs as given: its ops compute in float32 from bf16 storage and round on store
(passes/widen_bf16.py), and its matmuls take the bf16 kernels (`resolve`): their operands
are bf16 values already, so the products are the same, exact, and only faster.
"""
from __future__ import annotations

import torch

from jitcore.llvm import bf16
from jitcore.passes.kernel import Kind

# autocast's lower-precision ops as core ATen / export spells them -> the kernel kind that
# computes them in jitcore (attention: its two products; its softmax stays float32)
BF16_OPS = {
    **dict.fromkeys(("aten.mm.default", "aten.addmm.default", "aten.bmm.default",
                     "aten.baddbmm.default", "aten.linear.default", "aten.matmul.default",
                     "aten.scaled_dot_product_attention.default"), Kind.GEMM),
    **dict.fromkeys(("aten.convolution.default", "aten.conv1d.default",
                     "aten.conv2d.default", "aten.conv3d.default"), Kind.CONV),
}


def _floating_state(module: torch.nn.Module, constants: dict | None) -> list:
    """The dtypes of the module's floating parameters and buffers (and of the constant
    inputs torch.compile's backend passes for them)."""
    tensors = [*module.parameters(), *module.buffers(), *(constants or {}).values()]
    return [t.dtype for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()]


def resolve(precision, module: torch.nn.Module, constants: dict | None = None):
    """The matmul policy of the module's parts: `precision`'s (bf16.policy) when given; for a
    module in bf16 given none, BF16 (its matmul operands are bf16 values: the bf16 kernels
    compute its products exactly, as the float32 ones would); else None (the setting of
    JITCORE_MATMUL_PRECISION)."""
    if precision is not None:
        return bf16.policy(precision)
    dtypes = _floating_state(module, constants)
    if dtypes and all(d == torch.bfloat16 for d in dtypes):
        return bf16.BF16
    return None


def depthwise(node: torch.fx.Node) -> bool:
    """Whether a convolution node is depthwise: groups of one input channel each."""
    conv = str(node.target) == "aten.convolution.default"
    groups = node.args[8] if conv else (node.args[6] if len(node.args) > 6 else
                                        node.kwargs.get("groups", 1))
    weight = node.args[1].meta.get("val") if isinstance(node.args[1], torch.fx.Node) else None
    return groups > 1 and weight is not None and weight.shape[1] == 1


def classify(target, is_depthwise: bool = False) -> str:
    """How an ATen op computes under the bf16 policy: 'bf16' (bf16 operands, float32
    accumulation), 'fp32-kept' (autocast runs it in bf16; jitcore has no bf16 kernel of its
    kind: a depthwise convolution) or 'fp32'."""
    kind = BF16_OPS.get(str(target))
    if kind is None:
        return "fp32"
    if kind is Kind.CONV and is_depthwise:
        kind = Kind.DEPTHWISE
    return "bf16" if kind in bf16.KINDS else "fp32-kept"


def report(gm: torch.fx.GraphModule, precision) -> str | None:
    """explain()'s line on the policy of the graph `gm` (export's, before partitioning);
    None under float32."""
    if precision != bf16.BF16:
        return None
    counts: dict = {}                  # how -> ATen op name -> nodes
    for node in gm.graph.nodes:
        name = str(node.target)
        if node.op == "call_function" and name.startswith("aten."):
            conv = BF16_OPS.get(name) is Kind.CONV and depthwise(node)
            op = name.split(".")[1] + (" (depthwise)" if conv else "")
            ops = counts.setdefault(classify(name, conv), {})
            ops[op] = ops.get(op, 0) + 1

    def listed(how):
        return ", ".join(f"{n} x{c}" for n, c in sorted(counts.get(how, {}).items())) or "none"
    text = (f"precision bf16 (torch autocast's CPU policy): bf16 operands, float32 "
            f"accumulation: {listed('bf16')}; float32: every other op "
            f"({sum(counts.get('fp32', {}).values())} nodes), values between kernels float32")
    if "fp32-kept" in counts:
        text += (f"; kept float32 (no bf16 kernel of their kind: memory-bound): "
                 f"{listed('fp32-kept')}")
    return text

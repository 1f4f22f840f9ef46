"""`torch.compile(model, backend="jitcore")`: registered with dynamo when jitcore.torch is
imported.

Dynamo hands the backend a GraphModule of torch-level ops and its example inputs, the model's
parameters among them (as nn.Parameter). The backend compiles it with jitcore.torch.compile,
the parameters and buffers bound as constants (the freezing Inductor does with freezing on:
weights are assumed not to change after compiling, which is what lets GEMM weights be
prepacked and batch norms fold).
Inference only: nothing records autograd through the compiled parts. A graph jitcore cannot
take (symbolic shapes, an export failure) runs as dynamo gave it, with a log line saying why.
"""
from __future__ import annotations

import logging

import torch

from jitcore.llvm.bf16 import policy as bf16_policy

from .module import CompiledModule

log = logging.getLogger("jitcore")


def jitcore_backend(gm: torch.fx.GraphModule, example_inputs: list, options: dict | None = None):
    """The backend; `options` (torch.compile(options=)): {"precision": "bf16"} runs the float32
    matmuls with bf16 operands (jitcore.torch.compile's `precision`), other keys are refused."""
    options = dict(options or {})
    precision = options.pop("precision", None)
    if precision is not None:
        bf16_policy(precision)                 # a bad name is the caller's error, not torch's
    if options:
        raise ValueError(f"jitcore backend: unknown options {sorted(options)} (it takes "
                         "'precision')")
    if any(not isinstance(x, torch.Tensor) for x in example_inputs):
        log.info("jitcore.torch backend: symbolic inputs; graph runs as dynamo gave it")
        return gm.forward
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    constants = {k: x.detach() for k, (x, node) in enumerate(zip(example_inputs, placeholders))
                 if _is_module_state(x, node)}
    try:
        compiled = CompiledModule(gm, tuple(example_inputs), constant_inputs=constants,
                                  precision=precision)
    except Exception as e:                   # never break the user's model: run it in torch
        log.warning("jitcore.torch backend: %s: %s; graph runs in torch", type(e).__name__, e)
        return gm.forward

    def run(*args):
        return compiled(*args)
    run.compiled = compiled
    return run


def _is_module_state(x, node) -> bool:
    """A parameter or buffer of the compiled module (dynamo passes them as inputs)."""
    if isinstance(x, torch.nn.Parameter):
        return True
    source = getattr(node.meta.get("grapharg"), "source", None)
    name = source.name if source is not None else ""
    return "._buffers[" in name or "._parameters[" in name


def _register():
    from torch._dynamo import list_backends, register_backend
    if "jitcore" not in list_backends(exclude_tags=()):
        register_backend(jitcore_backend, name="jitcore")


_register()

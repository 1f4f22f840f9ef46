"""jitcore.torch: run PyTorch modules through jitcore (needs torch: `pip install 'jitcore[torch]'`).

    import jitcore.torch
    m = jitcore.torch.compile(model, example_input)     # torch.export -> ATen -> jitcore
    y = m(x)                                            # torch tensors in and out, no copies
    print(m.explain())                                  # fallback nodes, kernels, compile time

    torch.compile(model, backend="jitcore")             # registered on import

Lowerings live in `lowering.py` (one function per core ATen op) and `training_ir.py` (the
ops torch.export gives before decomposing, and when a graph can skip that); export, constant
folding and partitioning in `program.py`; one compiled part in `part.py`; the torch.compile
backend in `backend.py`; how the two thread pools share the cores in `threads.py`.
"""
from __future__ import annotations

from .backend import jitcore_backend
from .lowering import LOWERINGS
from .module import CompiledModule, compile  # noqa: A004

__all__ = ["compile", "CompiledModule", "jitcore_backend", "LOWERINGS"]

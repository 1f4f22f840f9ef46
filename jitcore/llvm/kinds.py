"""Every kernel kind's backend module, imported so that each registers its entry
(registry.py); `entry(kernel)` is the one dispatch on a kernel's kind."""
from __future__ import annotations

# (imported for their registrations)
from . import (conv_kind, depthwise, gemm_kind, gemv, pointwise, pool, reduce, rows,  # noqa: F401
               scan, tiles)
from .registry import KINDS, KindEntry, entry

__all__ = ["KINDS", "KindEntry", "entry", "report"]


def report(kernel) -> tuple:
    """(kind name, layout, loop nest): the kind's part of the kernel's line in explain()."""
    layout, loop_nest = entry(kernel).describe(kernel)
    return str(kernel.kind), layout, loop_nest

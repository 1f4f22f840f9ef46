"""`jc.target_info()`: what this process compiles for."""
from __future__ import annotations

import platform

from .api import select_target
from .llvm.target import cpu_brand


def target_info(vector_width=None) -> dict:
    """CPU name and brand, the LLVM features enabled, the chosen vector width in bits."""
    t = select_target(vector_width)
    enabled = sorted(f[1:] for f in t.features.split(",") if f.startswith("+"))
    return {
        "triple": t.triple,
        "cpu": t.cpu,
        "brand": cpu_brand(),
        "machine": platform.machine(),
        "features": enabled,
        "isa": t.isa,
        "max_vector_bits": t.max_vector_bits,
        "vector_bits": t.vector_bits,
        "lanes": {"float32": t.vector_bits // 32, "float64": t.vector_bits // 64},
    }

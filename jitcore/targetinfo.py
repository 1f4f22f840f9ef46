"""Target selection: the host CPU at the vector width asked for (and the streaming-store
threshold of JITCORE_STREAM_STORES), and `jc.target_info()`."""
from __future__ import annotations

import platform

from . import config
from .llvm.target import Target, cpu_brand, host_target


def select_target(vector_width=None) -> Target:
    """The host target at the requested width (argument, else JITCORE_VECTOR_WIDTH, else max)."""
    target = host_target()
    bits = vector_width if vector_width is not None else config.get().vector_width
    target = target.with_vector_bits(bits) if bits is not None else target
    stream = config.get().stream_stores
    return target.with_stream_bytes(stream) if stream is not None else target


def target_info(vector_width=None) -> dict:
    """CPU name and brand, the LLVM features enabled, the chosen vector width in bits, and
    whether vector tails are masked (AVX-512) or scalar code (AVX2 and below)."""
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
        "masked_tails": t.masked_tails,
        "stream_store_bytes": t.stream_bytes,
    }

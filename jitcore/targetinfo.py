"""Target selection: the level asked for (argument, else JITCORE_TARGET, else native) at
the vector width asked for, with the streaming-store threshold of JITCORE_STREAM_STORES;
and `jc.target_info()`."""
from __future__ import annotations

import platform

from . import config
from .llvm.target import Target, cpu_brand, full_rate_vector_bits, host_target, level_target


def select_target(vector_width=None, target=None) -> Target:
    """The target of a compile: `target` (a level name; else JITCORE_TARGET, else "native")
    at `vector_width` (else JITCORE_VECTOR_WIDTH, else the level's widest). Raises
    TargetError for a level this host cannot run."""
    settings = config.get()
    chosen = level_target(target if target is not None else settings.target)
    bits = vector_width if vector_width is not None else settings.vector_width
    chosen = chosen.with_vector_bits(bits) if bits is not None else chosen
    stream = settings.stream_stores
    return chosen.with_stream_bytes(stream) if stream is not None else chosen


def target_info(vector_width=None, target=None) -> dict:
    """The target level in use, the CPU it names and the host's, the LLVM features enabled,
    the chosen vector width in bits and the lanes per dtype; `full_rate_vector_bits`: the
    widest vectors the host's cores run at full rate (llvm/target.py), which plans consult
    where 512-bit ops cost double (Zen 4) or not (Intel's server cores)."""
    t = select_target(vector_width, target)
    enabled = sorted(f[1:] for f in t.features.split(",") if f.startswith("+"))
    return {
        "level": t.level,
        "triple": t.triple,
        "cpu": t.cpu,
        "host_cpu": host_target().cpu,
        "brand": cpu_brand(),
        "machine": platform.machine(),
        "features": enabled,
        "isa": t.isa,
        "max_vector_bits": t.max_vector_bits,
        "vector_bits": t.vector_bits,
        "masked_tails": t.masked_tails,
        "lanes": {"float32": t.vector_bits // 32, "float64": t.vector_bits // 64},
        "stream_store_bytes": t.stream_bytes,
        "full_rate_vector_bits": full_rate_vector_bits(),
    }


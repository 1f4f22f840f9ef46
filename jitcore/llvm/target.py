"""The compilation target as a frozen value: triple, CPU, features and the vector width.

The width comes from LLVM's view of the host CPU (512 bits with AVX-512F, 256 with AVX2,
128 otherwise); `JITCORE_VECTOR_WIDTH` or `jit(vector_width=)` can lower it, never raise it
above what the CPU executes. The target is part of every cache key.
"""
from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, replace

import llvmlite.binding as llvm

from jitcore.ir.errors import JitcoreError

VALID_WIDTHS = (128, 256, 512)


@dataclass(frozen=True)
class Target:
    triple: str
    cpu: str
    features: str          # LLVM feature string, e.g. "+avx2,+avx512f,..."
    max_vector_bits: int   # what the CPU can execute
    vector_bits: int       # what kernels use

    def with_vector_bits(self, bits) -> "Target":
        return replace(self, vector_bits=clamp_width(bits, self.max_vector_bits))

    @property
    def isa(self) -> str:
        names = {512: "AVX-512", 256: "AVX2", 128: "SSE/NEON (128-bit)"}
        return names[self.vector_bits] if self.triple.startswith("x86_64") else \
            f"{self.vector_bits}-bit SIMD"

    @property
    def masked_tails(self) -> bool:
        """AVX-512 (with BW for byte lanes) masks loads and stores of every element size, so
        vector tails are one masked iteration; elsewhere tails are scalar code."""
        flags = set(self.features.split(","))
        return "+avx512f" in flags and "+avx512bw" in flags and "+avx512vl" in flags

    def key(self) -> tuple:
        return (self.triple, self.cpu, self.features, self.vector_bits)


def max_width_from_features(features: str) -> int:
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return 512
    if "+avx2" in flags:
        return 256
    return 128


def clamp_width(bits, max_bits: int) -> int:
    """Validate a requested width; widths above the CPU's are lowered with a warning."""
    try:
        bits = int(bits)
    except (TypeError, ValueError):
        raise JitcoreError(f"vector width must be one of {VALID_WIDTHS}, got {bits!r}") from None
    if bits not in VALID_WIDTHS:
        raise JitcoreError(f"vector width must be one of {VALID_WIDTHS}, got {bits}")
    if bits > max_bits:
        warnings.warn(f"vector width {bits} exceeds what this CPU executes; using {max_bits}",
                      RuntimeWarning, stacklevel=3)
        return max_bits
    return bits


@functools.lru_cache(maxsize=None)
def host_target() -> Target:
    """The host CPU at its widest vector width."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features().flatten()
    bits = max_width_from_features(features)
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(), features, bits, bits)


@functools.lru_cache(maxsize=1)
def cpu_brand() -> str:
    """The human-readable CPU name (py-cpuinfo; slow the first time, so only on request)."""
    try:
        import cpuinfo
        return cpuinfo.get_cpu_info().get("brand_raw", "unknown")
    except Exception:          # the report must never break a user's program
        return "unknown"

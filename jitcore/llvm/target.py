"""The compilation target as a frozen value: triple, CPU, features, the vector width and
the output size from which elementwise kernels write with streaming (non-temporal) stores.

The width comes from LLVM's view of the host CPU (512 bits with AVX-512F, 256 with AVX2,
128 otherwise); `JITCORE_VECTOR_WIDTH` or `jit(vector_width=)` can lower it, never raise it
above what the CPU executes. The streaming threshold comes from the host's cache sizes
(`stream_threshold`), `JITCORE_STREAM_STORES` overrides it. The target is part of every
cache key.
"""
from __future__ import annotations

import functools
import os
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
    # kernels writing at least this many bytes of contiguous output use non-temporal stores
    # (0: never); see codegen's streaming loops
    stream_bytes: int = 0

    def with_stream_bytes(self, nbytes: int) -> "Target":
        return replace(self, stream_bytes=max(0, int(nbytes)))

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
        return (self.triple, self.cpu, self.features, self.vector_bits, self.stream_bytes)


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
    return Target(llvm.get_process_triple(), llvm.get_host_cpu_name(), features, bits, bits,
                  stream_threshold(cache_sizes()))


# caches per level (bytes) when the OS does not say: a common desktop/server core
DEFAULT_CACHES = {2: 1 << 20, 3: 32 << 20}
L2_SHARES = 4      # the streaming threshold in core-private (L2) caches, see stream_threshold


def cache_sizes() -> dict:
    """{level: bytes} of the data/unified caches of CPU 0 (Linux sysfs, else glibc's
    sysconf), with DEFAULT_CACHES for the levels neither reports."""
    sizes = {}
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(root):
            path = os.path.join(root, entry)
            if not entry.startswith("index"):
                continue
            with open(os.path.join(path, "type")) as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes[level] = int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        pass
    for level, name in ((2, "SC_LEVEL2_CACHE_SIZE"), (3, "SC_LEVEL3_CACHE_SIZE")):
        if level not in sizes and name in getattr(os, "sysconf_names", {}):
            try:
                if os.sysconf(name) > 0:
                    sizes[level] = os.sysconf(name)
            except (OSError, ValueError):
                pass
    return {**DEFAULT_CACHES, **sizes}


def stream_threshold(sizes: dict) -> int:
    """Output bytes from which a kernel's stores bypass the caches: outputs this large would
    not be in cache when read next anyway, and skipping the read-for-ownership of every line
    saves a third of a copy's traffic. The share of the last-level cache one core can count
    on is what matters; VMs report the whole socket's L3 (260 MB on a 2-vCPU guest), so the
    share is estimated as L2_SHARES core-private L2 caches, at most the last level's size.
    Measured on a 2 MB-L2 Xeon guest (relu(a*b+c)*0.5 followed by a read of its output):
    streaming loses 4-8% at 1-4 MB outputs and wins 8-13% at 16-64 MB."""
    last = sizes[max(sizes)]
    return min(L2_SHARES * sizes.get(2, DEFAULT_CACHES[2]), last)


@functools.lru_cache(maxsize=1)
def cpu_brand() -> str:
    """The human-readable CPU name (py-cpuinfo; slow the first time, so only on request)."""
    try:
        import cpuinfo
        return cpuinfo.get_cpu_info().get("brand_raw", "unknown")
    except Exception:          # the report must never break a user's program
        return "unknown"

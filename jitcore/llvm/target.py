"""The compilation target as a frozen value: level, triple, CPU, features, the vector width
and the output size from which elementwise kernels write with streaming (non-temporal)
stores.

The level is `native` (the host CPU as LLVM sees it) or one row of LEVELS, an x86-64
microarchitecture level of the psABI: code built for it uses that level's instructions only,
whatever the host has above it, and every choice made from the target (width, masked tails,
GEMM/conv blocking, vector math) follows. A level the host cannot run is refused
(`level_target`). The width comes from the features (512 bits with AVX-512F, 256 with AVX2,
128 otherwise); `JITCORE_VECTOR_WIDTH` or `jit(vector_width=)` can lower it, never raise it
above what the level executes. The streaming threshold comes from the host's cache sizes
(`stream_threshold`), `JITCORE_STREAM_STORES` overrides it. The target is part of every
cache key.
"""
from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass, replace

import llvmlite.binding as llvm

from jitcore.ir.errors import JitcoreError, TargetError

VALID_WIDTHS = (128, 256, 512)


@dataclass(frozen=True)
class Level:
    """One instruction-set level: the LLVM CPU name that stands for it, the LLVM features it
    guarantees (cumulative), its widest vector, its name in reports and its architecture."""
    cpu: str
    features: tuple
    vector_bits: int
    isa: str
    arch: str = "x86_64"


_X86_64 = ("64bit", "cmov", "cx8", "fxsr", "mmx", "sse", "sse2")
_X86_64_V2 = _X86_64 + ("cx16", "sahf", "popcnt", "crc32", "sse3", "ssse3", "sse4.1", "sse4.2")
_X86_64_V3 = _X86_64_V2 + ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe",
                           "xsave")
# (evex512 exists in LLVM 18-20 only; features this LLVM does not know are left out)
_X86_64_V4 = _X86_64_V3 + ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl",
                           "evex512")

# JITCORE_TARGET / jit(target=) names -> levels. Another architecture adds rows here (AArch64:
# e.g. "armv8-a": Level("generic", ("neon", "fp-armv8"), 128, "NEON", "aarch64")).
LEVELS = {
    "x86-64-v4": Level("x86-64-v4", _X86_64_V4, 512, "AVX-512"),
    "x86-64-v3": Level("x86-64-v3", _X86_64_V3, 256, "AVX2"),
    "x86-64-v2": Level("x86-64-v2", _X86_64_V2, 128, "SSE4.2"),
    "x86-64": Level("x86-64", _X86_64, 128, "SSE2"),
}
NATIVE = "native"
TARGET_NAMES = (NATIVE,) + tuple(LEVELS)


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
    level: str = NATIVE    # "native" or a key of LEVELS

    def with_stream_bytes(self, nbytes: int) -> "Target":
        return replace(self, stream_bytes=max(0, int(nbytes)))

    def with_vector_bits(self, bits) -> "Target":
        return replace(self, vector_bits=clamp_width(bits, self.max_vector_bits))

    @property
    def isa(self) -> str:
        if self.level in LEVELS and self.vector_bits == self.max_vector_bits:
            return LEVELS[self.level].isa
        names = {512: "AVX-512", 256: "AVX2", 128: "SSE/NEON (128-bit)"}
        return names[self.vector_bits] if self.triple.startswith("x86_64") else \
            f"{self.vector_bits}-bit SIMD"

    @property
    def masked_tails(self) -> bool:
        """AVX-512 (with BW for byte lanes) masks loads and stores of every element size, so
        vector tails are one masked iteration; elsewhere tails are scalar code."""
        return self.has("avx512f") and self.has("avx512bw") and self.has("avx512vl")

    def key(self) -> tuple:
        return (self.level, self.triple, self.cpu, self.features, self.vector_bits,
                self.stream_bytes)

    def has(self, feature: str) -> bool:
        """Whether the target's code may use this LLVM feature ("avx2", "fma", ...)."""
        return f"+{feature}" in self.features.split(",")


def _host_features() -> dict:
    """{LLVM feature name: present} for every feature LLVM knows on this architecture."""
    llvm.initialize_native_target()
    return dict(llvm.get_host_cpu_features())


def _arch(triple: str) -> str:
    return triple.split("-", 1)[0]


def level_features(level: Level, host: dict) -> str:
    """The LLVM feature string of a level: its own features on, and every host feature above
    it off (so nothing the host has leaks into the code). Names this LLVM does not know are
    left out."""
    own = [f for f in level.features if f in host]
    above = sorted(f for f, present in host.items() if present and f not in level.features)
    return ",".join([f"+{f}" for f in own] + [f"-{f}" for f in above])


@functools.lru_cache(maxsize=None)
def level_target(name: str) -> Target:
    """The target of one level (a key of LEVELS, or "native"); TargetError when the name is
    unknown or the host lacks some of the level's features."""
    host = host_target()
    if name == NATIVE:
        return host
    level = LEVELS.get(name)
    if level is None:
        raise TargetError(f"unknown target {name!r}; expected one of {', '.join(TARGET_NAMES)}")
    if level.arch != _arch(host.triple):
        raise TargetError(f"target {name!r} is for {level.arch}; this host is "
                          f"{_arch(host.triple)} ({host.cpu})")
    features = _host_features()
    missing = [f for f in level.features if f in features and not features[f]]
    if missing:
        raise TargetError(f"target {name!r} needs CPU features this host lacks: "
                          f"{', '.join(missing)} (host CPU: {host.cpu}, {cpu_brand()}); "
                          f"use a lower level or 'native'")
    return Target(host.triple, level.cpu, level_features(level, features), level.vector_bits,
                  level.vector_bits, host.stream_bytes, name)


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


# Intel server cores with two 512-bit FMA units (ports 0+1 fused, and port 5): a 512-bit
# vector op costs what a 256-bit one does. Zen 4 splits a 512-bit op into two 256-bit halves
# and client Ice/Tiger Lake have one 512-bit FMA unit, so there 256 bits run at full rate.
# (Zen 5's full 512-bit datapath is not measured yet: it keeps the 256-bit choice.)
WIDE_FMA_CPUS = frozenset({"skylake-avx512", "cascadelake", "cooperlake", "icelake-server",
                           "sapphirerapids", "emeraldrapids", "graniterapids",
                           "graniterapids-d", "diamondrapids"})


@functools.lru_cache(maxsize=1)
def full_rate_vector_bits() -> int:
    """The widest vectors the host's cores execute at full rate (an op per FMA unit per
    cycle): 512 on the CPUs of WIDE_FMA_CPUS, else 256; `jc.target_info()` reports it. The
    one place where kernel plans differ by CPU model rather than by ISA (the depthwise
    conv's vector width along rows); code built for a CPU is cached under its name, so a
    plan never crosses machines."""
    return 512 if host_target().cpu in WIDE_FMA_CPUS else 256


@functools.lru_cache(maxsize=1)
def cpu_brand() -> str:
    """The human-readable CPU name (py-cpuinfo; slow the first time, so only on request)."""
    try:
        import cpuinfo
        return cpuinfo.get_cpu_info().get("brand_raw", "unknown")
    except Exception:          # the report must never break a user's program
        return "unknown"

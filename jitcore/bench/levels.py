"""Every system of the bench held to one instruction-set level (`bench --target LEVEL`).

jitcore builds code for the level (JITCORE_TARGET); each peer is restricted through the
switch it offers, set in its child's environment before it loads:
- numpy: NPY_DISABLE_CPU_FEATURES names its dispatch targets above the level (numpy's
  baseline, X86_V2 in numpy 2.4, cannot be turned off: `notes` says so at x86-64);
- torch: ATEN_CPU_CAPABILITY (ATen's kernels), ONEDNN_MAX_CPU_ISA and MKL_ENABLE_INSTRUCTIONS
  (its GEMM and conv libraries);
- numpy's and others' OpenBLAS: OPENBLAS_CORETYPE; numba: NUMBA_CPU_NAME (an LLVM CPU name,
  as ours); jax: XLA's --xla_cpu_max_isa. ONNX Runtime and OpenVINO have none (a note
  says so).
"""
from __future__ import annotations

from jitcore.llvm.target import LEVELS

# the levels in order: a peer's switch is set to the highest of its values not above the level
RANK = {"x86-64": 1, "x86-64-v2": 2, "x86-64-v3": 3, "x86-64-v4": 4}

# numpy's dispatch targets (the group names of numpy >= 2.4 and the feature names of older
# ones) -> the level that first has them; unknown names count as above every level
NUMPY_TARGET_RANK = {
    "SSE3": 2, "SSSE3": 2, "SSE41": 2, "POPCNT": 2, "SSE42": 2, "X86_V2": 2,
    "AVX": 3, "F16C": 3, "FMA3": 3, "AVX2": 3, "X86_V3": 3,
    "AVX512F": 4, "AVX512CD": 4, "AVX512_SKX": 4, "X86_V4": 4,
}

# per level: the environment of the peers' switches that take a fixed value
PEER_SWITCHES = {
    "x86-64-v4": {"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
                  "MKL_ENABLE_INSTRUCTIONS": "AVX512", "OPENBLAS_CORETYPE": "SkylakeX",
                  "xla_cpu_max_isa": "AVX512"},
    "x86-64-v3": {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                  "MKL_ENABLE_INSTRUCTIONS": "AVX2", "OPENBLAS_CORETYPE": "Haswell",
                  "xla_cpu_max_isa": "AVX2"},
    "x86-64-v2": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                  "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OPENBLAS_CORETYPE": "Nehalem",
                  "xla_cpu_max_isa": "SSE4_2"},
    "x86-64": {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
               "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "OPENBLAS_CORETYPE": "Prescott",
               "xla_cpu_max_isa": "SSE4_2"},
}


def numpy_dispatch() -> tuple:
    """(numpy's dispatch targets, its baseline) as this numpy names them."""
    try:
        from numpy._core import _multiarray_umath as m
    except ImportError:                       # numpy 1.x
        from numpy.core import _multiarray_umath as m
    return tuple(m.__cpu_dispatch__), tuple(m.__cpu_baseline__)


def restriction(level: str, xla_flags: str = "") -> dict:
    """{"env": the variables that hold every system to `level`, "notes": what cannot be held
    there}. `xla_flags`: XLA_FLAGS as set so far (the ISA flag is appended)."""
    if level not in LEVELS:
        raise ValueError(f"unknown level {level!r}; expected one of {', '.join(LEVELS)}")
    rank, switches = RANK[level], dict(PEER_SWITCHES[level])
    dispatch, baseline = numpy_dispatch()
    above = [t for t in dispatch if NUMPY_TARGET_RANK.get(t, 99) > rank]
    env = {"JITCORE_TARGET": level, "NUMBA_CPU_NAME": LEVELS[level].cpu,
           "XLA_FLAGS": f"{xla_flags} --xla_cpu_max_isa={switches.pop('xla_cpu_max_isa')}"
           .strip(), **switches}
    if above:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(above)
    notes = [f"numpy's baseline {' '.join(baseline)} is above {level}"
             for t in baseline if NUMPY_TARGET_RANK.get(t, 1) > rank][:1]
    notes.append("onnxruntime and openvino (the CNN layer rows) have no instruction-set "
                 "switch: they run at the host's level")
    return {"env": env, "notes": notes}

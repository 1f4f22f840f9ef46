"""Settings read from the environment once, with `override()` for tests.

JITCORE_TARGET         native | x86-64-v4 | x86-64-v3 | x86-64-v2 | x86-64: the instruction
                       set kernels are built for (default native: the host CPU); a level
                       the host cannot run, or an unknown name, is refused at the first
                       compile (jitcore.TargetError)
JITCORE_VECTOR_WIDTH   128 | 256 | 512: cap the vector width (never above the target's)
JITCORE_DUMP_DIR       a directory: every compile writes graph, kernels, IR and asm there
JITCORE_CACHE_SIZE     compiled graphs kept in the in-memory LRU cache, and signatures per
                       jitted function (default 512)
JITCORE_PREPACK        0: never prepack constant GEMM or conv weights (default 1)
JITCORE_VERIFY         1: check the graph's typing after every pass (a debugging aid, on in
                       the test suite; default 0: passes are trusted, compiles are faster)
JITCORE_STREAM_STORES  bytes: elementwise kernels writing at least this much contiguous
                       output use non-temporal stores; 0: never (default: from the cache
                       sizes, see jitcore/llvm/target.py)
JITCORE_OUTPUT_CACHE_MB  megabytes of freed large output buffers kept for reuse (default 256;
                       0: off; see cache/outputs.py)
JITCORE_WINOGRAD       the largest Winograd output tile for 3x3 stride-1 convs: 2 (default,
                       F(2x2, 3x3)), 4 (F(4x4, 3x3) where the plane allows: faster, ~20x
                       the rounding error, a NaN or Inf reaches a whole 6x6 patch's tile), or
                       0 (every conv direct); see jitcore/llvm/conv_winograd.py
JITCORE_MATMUL_PRECISION  fp32 | bf16: how float32 matmuls and convs compute when
                       jit(matmul_precision=) does not say (default fp32; bf16: operands
                       rounded to bfloat16, float32 accumulation, see jitcore/llvm/bf16.py)
JITCORE_COMPILE_WORKERS  processes that build kernels' machine code beside this one when a
                       compile has several (default: one fewer than the CPUs this process
                       may run on, at most 4; 0: build every module in this process; see
                       jitcore/llvm/compile_pool.py)
JITCORE_PERF_MAP       1: name every compiled kernel in /tmp/perf-<pid>.map for Linux perf
                       (jitcore/perfmap.py; default 0)

A value that is not valid warns (RuntimeWarning) and the default is used: a bad setting
never stops `import jitcore`. JITCORE_TARGET is the exception: code for
another instruction set than the one asked for would pass tests it was meant to fail, so
a bad one is refused when first used (not at import).
"""
from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Config:
    vector_width: int | None
    dump_dir: str | None
    cache_size: int
    prepack: bool
    output_cache_bytes: int
    verify: bool = False
    stream_stores: int | None = None
    target: str = "native"
    perf_map: bool = False
    winograd: int = 2
    matmul_precision: str = "fp32"
    compile_workers: int | None = None


def _int_env(name: str, default, allowed=None, minimum=None, default_text=None):
    """The integer in environment variable `name`; an unset one gives the default, and so
    does a bad one, with a warning that says what was expected (and `default_text`, what a
    None default means)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or (allowed is not None and value not in allowed) or \
            (minimum is not None and value < minimum):
        expected = " | ".join(map(str, allowed)) if allowed else \
            f"an integer >= {minimum}" if minimum is not None else "an integer"
        warnings.warn(f"jitcore: ignoring {name}={raw!r} (expected {expected}); using the "
                      f"default ({_describe(default, default_text)})",
                      RuntimeWarning, stacklevel=2)
        return default
    return value


def _describe(default, default_text) -> str:
    if default is not None:
        return str(default)
    return default_text or "the CPU maximum"


def from_env() -> Config:
    return Config(vector_width=_int_env("JITCORE_VECTOR_WIDTH", None, allowed=(128, 256, 512)),
                  dump_dir=os.environ.get("JITCORE_DUMP_DIR") or None,
                  cache_size=_int_env("JITCORE_CACHE_SIZE", 512, minimum=1),
                  prepack=bool(_int_env("JITCORE_PREPACK", 1, allowed=(0, 1))),
                  output_cache_bytes=_int_env("JITCORE_OUTPUT_CACHE_MB", 256, minimum=0) << 20,
                  verify=bool(_int_env("JITCORE_VERIFY", 0, allowed=(0, 1))),
                  stream_stores=_int_env("JITCORE_STREAM_STORES", None, minimum=0),
                  target=os.environ.get("JITCORE_TARGET", "").strip().lower() or "native",
                  perf_map=bool(_int_env("JITCORE_PERF_MAP", 0, allowed=(0, 1))),
                  winograd=_int_env("JITCORE_WINOGRAD", 2, allowed=(0, 2, 4)),
                  matmul_precision=_choice_env("JITCORE_MATMUL_PRECISION", "fp32",
                                               ("fp32", "bf16")),
                  compile_workers=_int_env("JITCORE_COMPILE_WORKERS", None, minimum=0,
                                           default_text="one fewer than the usable CPUs"))


def _choice_env(name: str, default: str, allowed: tuple) -> str:
    """The value of environment variable `name`, one of `allowed` (lowercased); unset gives
    the default, and so does another value, with a warning."""
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in allowed:
        warnings.warn(f"jitcore: ignoring {name}={raw!r} (expected {' | '.join(allowed)}); "
                      f"using the default ({default})", RuntimeWarning, stacklevel=2)
        return default
    return raw


_current = from_env()


def get() -> Config:
    return _current


@contextmanager
def override(**changes):
    """Temporarily change settings: `with config.override(vector_width=256): ...`."""
    global _current
    saved = _current
    _current = replace(_current, **changes)
    try:
        yield _current
    finally:
        _current = saved

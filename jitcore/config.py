"""Settings read from the environment once, with `override()` for tests.

JITCORE_VECTOR_WIDTH   128 | 256 | 512: cap the vector width (never above the CPU's)
JITCORE_DUMP_DIR       a directory: every compile writes graph, kernels, IR and asm there
JITCORE_CACHE_SIZE     compiled graphs kept in the in-memory LRU cache, and signatures per
                       jitted function (default 512)
JITCORE_PREPACK        0: never prepack constant GEMM or conv weights (default 1)
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Config:
    vector_width: int | None
    dump_dir: str | None
    cache_size: int
    prepack: bool


def _int_env(name: str, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def from_env() -> Config:
    return Config(vector_width=_int_env("JITCORE_VECTOR_WIDTH", None),
                  dump_dir=os.environ.get("JITCORE_DUMP_DIR") or None,
                  cache_size=max(_int_env("JITCORE_CACHE_SIZE", 512), 1),
                  prepack=bool(_int_env("JITCORE_PREPACK", 1)))


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

"""JITCORE_DUMP_DIR: write what every compile produced, for people and diff tools.

A directory that cannot be written warns once (per directory) and compiles go on: the
dump is a debugging aid, never a reason for a call to fail."""
from __future__ import annotations

import hashlib
import os
import warnings

from .explain import explain


_WARNED: set = set()         # directories already warned about


def dump_or_warn(compiled, directory: str) -> str | None:
    """dump(), or a RuntimeWarning (once per directory) when it cannot be written."""
    try:
        return dump(compiled, directory)
    except OSError as e:
        if directory not in _WARNED:
            _WARNED.add(directory)
            warnings.warn(f"jitcore: JITCORE_DUMP_DIR={directory!r} cannot be written ({e}); "
                          "compiles go on without dumps. Set it to a writable directory, or "
                          "unset it.", RuntimeWarning, stacklevel=2)
        return None


def dump(compiled, directory: str) -> str:
    """Write <graph>_<hash>.{graph.txt,kernels.txt,ll,opt.ll,s}; return the common prefix."""
    os.makedirs(directory, exist_ok=True)
    digest = hashlib.sha256(compiled.llvm_ir.encode()).hexdigest()[:12]
    prefix = os.path.join(directory, f"{compiled.graph.name}_{digest}")
    files = {"graph.txt": compiled.graph.text(), "kernels.txt": explain(compiled),
             "ll": compiled.llvm_ir, "opt.ll": compiled.optimized_ir, "s": compiled.asm()}
    for ext, text in files.items():
        with open(f"{prefix}.{ext}", "w") as fh:
            fh.write(text)
    return prefix

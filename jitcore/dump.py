"""JITCORE_DUMP_DIR: write what every compile produced, for people and diff tools."""
from __future__ import annotations

import hashlib
import os

from .explain import explain


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

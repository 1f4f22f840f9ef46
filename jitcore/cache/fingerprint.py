"""The one source fingerprint every disk cache key ends with (the cache layers and their keys:
jitcore/cache/__init__.py).

`fingerprint(scope, target_key)` hashes the source files of a scope (ENGINE, BACKEND or
DRIVER: the code between what a layer's key names and the bytes it stores), the llvmlite and
LLVM versions, jitcore's version and the target. Editing any of those gives new keys; the
old entries age out of the disk cache.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os

import llvmlite

from ..version import VERSION

# The modules and packages whose source decides what a layer's entries hold (packages
# whole, subfolders included). Named, not imported: the fingerprint reads the files.
# IR text -> machine code: the optimizer's pipelines and the build of one module live in
# machine_code (also what compile workers run), the linking in engine
ENGINE = ("jitcore.llvm.engine", "jitcore.llvm.machine_code")
BACKEND = ("jitcore.ir", "jitcore.passes", "jitcore.runtime", "jitcore.llvm")  # -> IR
DRIVER = BACKEND + ("jitcore.compiler", "jitcore.cache.disk")   # a graph -> its manifest


@functools.lru_cache(maxsize=None)
def fingerprint(scope: tuple, target_key: tuple) -> str:
    """SHA-256 (hex) of the source files of `scope` (ENGINE, BACKEND or DRIVER), the
    llvmlite and LLVM versions, jitcore's version and the target: what every disk cache
    key ends with, so code built by other sources, libraries or targets is never reused."""
    h = hashlib.sha256()
    for name, path in _source_files(scope):
        with open(path, "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    for part in (llvmlite.__version__, llvm_version(), str(VERSION), repr(target_key)):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _source_files(scope: tuple) -> list:
    """(module or package-relative name, path) of each source file of the scope, in order."""
    files = []
    for name in scope:
        spec = importlib.util.find_spec(name)
        if not spec.submodule_search_locations:
            files.append((name, spec.origin))
            continue
        for folder in spec.submodule_search_locations:      # a package: every .py below it
            for root, dirs, names in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                files += [(os.path.relpath(os.path.join(root, n), folder), os.path.join(root, n))
                          for n in sorted(names) if n.endswith(".py")]
    return files


def llvm_version() -> str:
    import llvmlite.binding as llvm
    return ".".join(map(str, llvm.llvm_version_info))


@functools.lru_cache(maxsize=None)
def host_caches() -> tuple:
    """The host's cache sizes ((level, bytes) pairs): GEMM and conv blocking follow them, and
    two hosts with one CPU model (virtual machines) may report different ones."""
    from ..llvm.target import cache_sizes
    return tuple(sorted(cache_sizes().items()))

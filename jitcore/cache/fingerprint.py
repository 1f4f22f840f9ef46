"""jitcore's cache layers, and the one source fingerprint that the persistent ones are keyed by.

The layers, from a call down to machine code (what each holds, its key, what drops an entry):

  1. call plans, per jitted function (api.JitFunction `_plans`, an LRU): signature ->
     callpath.CallPlan. Key: dispatch.plan_key, (shape, strides, dtype) of each argument and
     the type of each Python scalar. Also `_classes` (dynamic=True shape classes) and
     `_variants` (static arguments' values -> a JitFunction of the rest). Bounded by
     JITCORE_CACHE_SIZE; dropped with the function and by jc.api.forget_plans().
  2. eager ops (eager `_CACHE`, an LRU): an op on plain arrays -> its jitted function. Key:
     the op, the array positions and the other arguments' values and types. JITCORE_CACHE_SIZE.
  3. compiled graphs (compiler `_CACHE`, an LRU): compiler.cache_key, (graph text, input
     strides, target key, threads, prepacking, jitcore version). JITCORE_CACHE_SIZE. In one
     process the sources cannot change, so no fingerprint.
  4. kernel IR generated in this process (llvm/graph_module `_EMITTED`): by the kernel's
     structure (passes/kernel_key.py) and target settings; 16 MB of IR text, oldest out.
  5. built objects (llvm/engine `OBJECTS`): by (target machine, the module's disk key or
     the SHA-256 of its IR text); 64 MB, oldest out.
  6. the disk cache (diskcache.py), across processes. Every key is `_digest` of what the
     entry is built from, the target key and `fingerprint(scope, target_key)`:
       - a module's object code (diskcache.Entry), by its IR text and exports; scope ENGINE
         (the code between IR text and machine code);
       - a kernel's generated IR (diskcache.KernelIR), by its structure and the host's cache
         sizes (`host_caches`: GEMM/conv blocking); scope BACKEND;
       - a whole graph's manifest (diskcache.GraphEntry), by compiler._code_key; scope
         DRIVER (the backend plus the compile driver and this cache);
       - a module's recipe (diskcache.ModuleRecipe: the thread pool's runtime), by what its
         IR is generated from; scope BACKEND.
     Entries are also checksummed and bound to their target (a damaged or foreign one is
     removed and rebuilt) and evicted least recently used past JITCORE_DISK_CACHE_MB.
  7. output buffers (output_cache.py): idle blocks of large outputs, by size; not code.
  8. pickling (pickling.py) carries no compiled code: the receiving process compiles, or
     finds its code in layers 3-6.

An entry is invalidated by its key alone: editing any source file a scope covers, another
llvmlite or LLVM, another jitcore version or another target gives new keys, and the old
entries age out of the disk cache.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os

import llvmlite

from .version import VERSION

# The modules and packages whose source decides what a layer's entries hold (packages
# whole, subfolders included). Named, not imported: the fingerprint reads the files.
ENGINE = ("jitcore.llvm.engine",)           # IR text -> machine code (optimizer settings)
BACKEND = ("jitcore.ir", "jitcore.passes", "jitcore.runtime", "jitcore.llvm")  # -> IR
DRIVER = BACKEND + ("jitcore.compiler", "jitcore.diskcache")   # a graph -> its manifest


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
    from .llvm.target import cache_sizes
    return tuple(sorted(cache_sizes().items()))

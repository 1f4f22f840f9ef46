"""The on-disk cache of compiled machine code: a warm start skips LLVM.

An entry holds the object code that LLVM emitted for one module and the module's optimized
IR (for `f.llvm_ir()`), keyed by a SHA-256 of the generated IR text and
`fingerprint(ENGINE, target)` (fingerprint.py: the target, the LLVM and llvmlite
versions, jitcore's version and the source of jitcore/llvm/engine.py and machine_code.py,
the optimizer settings). The generated IR already encodes the graph, its layouts and its block sizes, so
equal keys mean equal code. jitcore/cache/__init__.py lists every cache layer and its key.

Two kinds of entries skip IR generation as well: a kernel's generated IR (`KernelIR`, by the
kernel's structure) and a whole graph's manifest (`GraphEntry`, by everything its code depends
on): the keys of its modules' entries, the names the call path needs and, for a graph without
constants, what the call path reads of its lowered graph, so a warm start runs neither the
passes nor IR generation (they run when someone asks for the IR). Constant arrays are never
written to the cache.

Safety:
  - the directory is created private (0700); an existing one that others can write to is
    not used (a warning says why);
  - an entry is a fixed header (magic, lengths, SHA-256 of the payload) and raw bytes;
    nothing is unpickled or evaluated; a truncated or corrupted entry fails its checksum and
    is rebuilt; an entry whose recorded target differs from this process's is never loaded;
  - entries are written to a temporary file and renamed, so readers never see half an entry.

Size: at most JITCORE_DISK_CACHE_MB megabytes (default 512). A hit refreshes the entry's
mtime; when a store takes the directory over the bound, the least recently used entries go
until it is at 3/4 of it (and temporary files that a killed process left behind).

Location: JITCORE_CACHE_DIR, else $XDG_CACHE_HOME/jitcore, else ~/.cache/jitcore.
JITCORE_DISK_CACHE=0 turns it off.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
import zlib

from jitcore.runtime.forksafe import renew_in_child

from .. import log
from .fingerprint import BACKEND, DRIVER, ENGINE, fingerprint, host_caches

MAGIC = b"JITCORE-OBJ-1\n"
_HEADER = struct.Struct("<QQ32s")          # header json length, payload length, payload sha256
STATS = {"disk_hits": 0, "disk_misses": 0, "disk_rejected": 0, "disk_evicted": 0,
         "disk_graph_hits": 0, "disk_graph_misses": 0}
DEFAULT_MAX_MB = 512
STALE_TMP_SECONDS = 3600                   # a temporary file this old belongs to no writer
_LOCK = threading.Lock()
renew_in_child(sys.modules[__name__], "_LOCK")
_UNUSABLE: set = set()                     # directories refused once (warned)
_USAGE: dict = {}                          # directory -> bytes, as this process estimates


def directory() -> str | None:
    """The cache directory to use, or None when the disk cache is off."""
    if os.environ.get("JITCORE_DISK_CACHE", "1").strip() == "0":
        return None
    path = os.environ.get("JITCORE_CACHE_DIR", "").strip()
    if not path:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".cache")
        path = os.path.join(base, "jitcore")
    return path if _usable(path) else None


def _usable(path: str) -> bool:
    if path in _UNUSABLE:
        return False
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        return _refuse(path, f"cannot create it ({e})")
    if not stat.S_ISDIR(st.st_mode):
        return _refuse(path, "it is not a directory")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return _refuse(path, "it belongs to another user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return _refuse(path, "others can write to it (chmod 700 it to use it)")
    return True


def _refuse(path: str, why: str) -> bool:
    _UNUSABLE.add(path)
    log.warning("not using the disk cache %r: %s; compiled code is not kept across runs",
                path, why)
    warnings.warn(f"jitcore: not using the disk cache {path!r}: {why}", RuntimeWarning,
                  stacklevel=3)
    return False


class Entry:
    """The entry of one module, as engine.compile_ir's `cache` argument wants it."""

    def __init__(self, ir_text: str, target_key: tuple, exports: list):
        self.target_key = target_key
        self.key = key(ir_text, target_key, exports)
        self.outcome = "off"            # after load: "hit" or "miss" (for the compile log)

    def load(self):
        found = load(self.key, self.target_key)
        if found is not None:
            self.outcome = "hit"
        elif directory() is not None:
            self.outcome = "miss"
        return found

    def store(self, obj: bytes, optimized_ir: str):
        store(self.key, self.target_key, obj, optimized_ir)

    def stored(self) -> bool:
        """Whether the cache has a file for this entry (not read: load() validates it)."""
        root = directory()
        return root is not None and os.path.exists(os.path.join(root, self.key + ".jco"))


class KernelIR:
    """Kernels' generated LLVM IR on disk, by structure (`passes.kernel_key`), so a new
    process skips IR generation for kernels an earlier one generated: graph_module's `store`.
    An entry is an ordinary one whose object part is empty and whose text is JSON (symbol,
    IR, pointer-array order, extent, grain). Its key adds a hash of the whole backend's
    source (ir, passes, runtime, jitcore/llvm) and the host's cache sizes (GEMM and conv
    blocking, which prepacked weights follow too) to the kernel's structure and target
    (`fingerprint(BACKEND, ...)`), so changed code generation never reuses IR generated by
    the old one."""

    def __init__(self, target_key: tuple):
        self.target_key = target_key

    def _key(self, structure_key) -> str:
        return _digest("kernel-ir", repr(structure_key), repr(self.target_key),
                       repr(host_caches()), fingerprint(BACKEND, self.target_key))

    def load(self, structure_key):
        from ..llvm.graph_module import KernelCode
        found = load(self._key(structure_key), self.target_key)
        if found is None:
            return None
        try:
            d = json.loads(found[1])
            return KernelCode(d["symbol"], d["text"], tuple(d["buffers"]), d["extent"],
                              d["grain"])
        except (ValueError, KeyError, TypeError):
            return None

    def save(self, structure_key, code) -> None:
        text = json.dumps({"symbol": code.symbol, "text": code.text,
                           "buffers": list(code.buffer_slots), "extent": code.extent,
                           "grain": code.grain})
        store(self._key(structure_key), self.target_key, b"", text, "kernel-ir")


@dataclasses.dataclass(frozen=True)
class GraphManifest:
    """What a compiled graph needs from its code besides the objects: the disk entries of its
    modules (each distinct kernel, then the graph module), the symbols to export and those
    its graph module imports from this process (compiler._runtime_imports), the names of
    its run function, native entry and fast call, and (`layout`, JSON data the compiler
    reads and checks) what the call path needs of the lowered graph."""
    modules: tuple
    exports: tuple
    imports: tuple
    run_name: str
    entry_name: str
    fastcall_name: str | None
    # what the call path and explain() read of the lowered graph (compiler.CallLayout), for a
    # graph without constants: a hit skips the passes too; None otherwise
    layout: dict | None = None

    def to_json(self) -> str:
        return json.dumps({"format": GraphEntry.FORMAT, **dataclasses.asdict(self)})

    @classmethod
    def from_json(cls, text: str) -> "GraphManifest | None":
        """The manifest, or None for text that is not a well-formed one of this format."""
        try:
            d = json.loads(text)
            if d.pop("format") != GraphEntry.FORMAT or set(d) != _MANIFEST_FIELDS:
                return None
            m = cls(tuple(d["modules"]), tuple(d["exports"]), tuple(d["imports"]),
                    d["run_name"], d["entry_name"], d["fastcall_name"], d["layout"])
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        names = m.exports + m.imports + (m.run_name, m.entry_name)
        if not m.modules or not all(isinstance(k, str) and _HEX64.fullmatch(k)
                                    for k in m.modules):
            return None
        if not isinstance(m.layout, (dict, type(None))) or \
                not all(isinstance(n, str) and n for n in names) or \
                {m.run_name, m.entry_name, m.fastcall_name or m.run_name} - set(m.exports):
            return None
        return m


_MANIFEST_FIELDS = {f.name for f in dataclasses.fields(GraphManifest)}
_HEX64 = re.compile(r"[0-9a-f]{64}")


class GraphEntry:
    """A whole compiled graph's manifest on disk, keyed by everything its code depends on
    (`parts`: the compile driver's key; plus `fingerprint(DRIVER, ...)`: the target, the
    LLVM, llvmlite and jitcore versions and the source of everything from the graph to the
    machine code: the backend, the optimizer settings and the compile driver). A hit links
    the modules' stored objects without generating any IR; STATS counts `disk_graph_hits`
    (linked whole) and `disk_graph_misses` (no manifest, or one of its modules is gone; a
    damaged manifest counts as `disk_rejected`).
    The manifest is an ordinary entry (checksummed, target-bound) whose object part is empty
    and whose text is JSON."""

    FORMAT = 1

    def __init__(self, parts: tuple, target_key: tuple):
        self.target_key = target_key
        self.key = _digest("graph", str(self.FORMAT), *map(repr, parts), repr(target_key),
                           fingerprint(DRIVER, target_key))

    def load(self) -> GraphManifest | None:
        found = load(self.key, self.target_key, None, "disk_graph_misses")
        if found is None:
            return None
        manifest = GraphManifest.from_json(found[1])
        if manifest is None:
            reject(self.key)
        return manifest

    def count(self, loaded: bool) -> None:
        """Count the outcome of a manifest found: the graph linked whole, or not (a module
        it lists is gone)."""
        _count("disk_graph_hits" if loaded else "disk_graph_misses")

    def store(self, manifest: GraphManifest) -> None:
        store(self.key, self.target_key, b"", manifest.to_json(), "graph")


class ModuleMissing(Exception):
    """A module a graph manifest lists is no longer on disk (evicted, damaged)."""


class StoredModule:
    """One module of a manifest, for engine.compile_modules: its object comes from memory
    (engine.OBJECTS, by `key`) or from disk; when neither has it, load() raises ModuleMissing
    (there is no IR text to build it from: the caller compiles the graph normally)."""

    def __init__(self, entry_key: str, target_key: tuple):
        self.key, self.target_key = entry_key, target_key
        self.outcome = "hit"

    def load(self):
        found = load(self.key, self.target_key)
        if found is None:
            raise ModuleMissing(self.key)
        return found

    def store(self, obj: bytes, optimized_ir: str):       # never reached: load() hits or raises
        raise ModuleMissing(self.key)


class ModuleRecipe:
    """The disk entry of a module, found by what its IR is generated from (`parts`, plus the
    target, versions and the backend's source) rather than by the IR text: a process loads
    the module's object without generating its IR (the thread pool's runtime module). The
    recipe is an ordinary entry (checksummed, target-bound) whose text is the module entry's
    key; its loads are not counted in STATS (the module's own entry is)."""

    def __init__(self, parts: tuple, target_key: tuple):
        self.target_key = target_key
        self.key = _digest("module-recipe", *map(repr, parts), repr(target_key),
                           fingerprint(BACKEND, target_key))

    def load(self) -> StoredModule | None:
        found = load(self.key, self.target_key, None, None)
        if found is None:
            return None
        if not _HEX64.fullmatch(found[1]):
            reject(self.key)
            return None
        return StoredModule(found[1], self.target_key)

    def store(self, module_key: str) -> None:
        store(self.key, self.target_key, b"", module_key, "recipe")


def key(ir_text: str, target_key: tuple, exports: list) -> str:
    return _digest(ir_text, repr(target_key), repr(exports), fingerprint(ENGINE, target_key))


def _digest(*parts: str) -> str:
    """SHA-256 of the parts, each followed by a NUL (hex): every entry's key."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(entry_key: str, target_key: tuple, hit: str = "disk_hits",
         miss: str = "disk_misses") -> tuple | None:
    """(object bytes, optimized IR) of a valid entry for this target, else None. `hit` and
    `miss`: the STATS counted (None: not counted; a rejected entry counts as
    `disk_rejected`)."""
    root = directory()
    if root is None:
        return None
    path = os.path.join(root, entry_key + ".jco")
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        _count(miss)
        return None
    parsed = _parse(blob, entry_key, target_key)
    if parsed is None:
        reject(entry_key)
        return None
    _count(hit)
    try:
        os.utime(path)                       # recently used: the last to be evicted
    except OSError:
        pass
    return parsed


def reject(entry_key: str) -> None:
    """Count an unusable entry and remove it (its caller rebuilds and rewrites it)."""
    _count("disk_rejected")
    root = directory()
    if root is not None:
        try:
            os.remove(os.path.join(root, entry_key + ".jco"))
        except OSError:
            pass


def _parse(blob: bytes, entry_key: str, target_key: tuple):
    start = len(MAGIC) + _HEADER.size
    if not blob.startswith(MAGIC) or len(blob) < start:
        return None
    header_len, payload_len, digest = _HEADER.unpack_from(blob, len(MAGIC))
    if len(blob) != start + header_len + payload_len:
        return None                                           # truncated or padded
    payload = blob[start + header_len:]
    if hashlib.sha256(blob[start:start + header_len] + payload).digest() != digest:
        return None
    try:
        header = json.loads(blob[start:start + header_len].decode())
        if header["key"] != entry_key or header["target"] != list(map(str, target_key)):
            return None                                       # another CPU's code: never
        obj_len = header["object_bytes"]
        obj, ir_text = payload[:obj_len], zlib.decompress(payload[obj_len:]).decode()
    except (ValueError, KeyError, TypeError, zlib.error, UnicodeDecodeError):
        return None
    return obj, ir_text


def store(entry_key: str, target_key: tuple, obj: bytes, optimized_ir: str,
          kind: str = "object") -> None:
    """Write an entry atomically; any failure leaves the cache as it was. `kind` (recorded
    in the header, for people and tests): "object", "kernel-ir", "graph" or "recipe"."""
    root = directory()
    if root is None:
        return
    header = json.dumps({"key": entry_key, "target": list(map(str, target_key)),
                         "object_bytes": len(obj), "kind": kind}).encode()
    payload = obj + zlib.compress(optimized_ir.encode(), 6)
    digest = hashlib.sha256(header + payload).digest()
    blob = MAGIC + _HEADER.pack(len(header), len(payload), digest) + header + payload
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".jco")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, os.path.join(root, entry_key + ".jco"))
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        return                                                # a full disk is not an error
    _account(root, len(blob))


_WARNED: set = set()          # bad JITCORE_DISK_CACHE_MB values already warned about


def max_bytes() -> int:
    raw = os.environ.get("JITCORE_DISK_CACHE_MB", "").strip() or DEFAULT_MAX_MB
    try:
        mb = float(raw)
    except ValueError:
        if raw not in _WARNED:
            _WARNED.add(raw)
            warnings.warn(f"jitcore: ignoring JITCORE_DISK_CACHE_MB={raw!r} (expected a number "
                          f"of megabytes); using {DEFAULT_MAX_MB}", RuntimeWarning, stacklevel=2)
        mb = DEFAULT_MAX_MB
    return int(max(mb, 0) * 2**20)


def _entries(root: str) -> list:
    """(mtime, size, path, is_temporary) of the files in the cache directory."""
    out = []
    try:
        with os.scandir(root) as it:
            for e in it:
                if e.name.endswith(".jco") and e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out.append((st.st_mtime, st.st_size, e.path, e.name.startswith(".tmp-")))
    except OSError:
        pass
    return out


def _account(root: str, added: int) -> None:
    """Count a stored entry; over the bound, evict least recently used entries."""
    with _LOCK:
        if root not in _USAGE:
            _USAGE[root] = sum(size for _, size, _, _ in _entries(root))
        else:
            _USAGE[root] += added
        if _USAGE[root] <= max_bytes():
            return
        _USAGE[root] = _evict(root, int(max_bytes() * 0.75))


def _evict(root: str, goal: int) -> int:
    """Remove the oldest entries (and stale temporary files) until at most `goal` bytes stay;
    returns the bytes that stay."""
    now, entries = time.time(), sorted(_entries(root))
    total = sum(size for _, size, _, _ in entries)
    for mtime, size, path, temporary in entries:
        if temporary and now - mtime < STALE_TMP_SECONDS:
            continue                         # another process is writing it
        if total <= goal and not temporary:
            break
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        STATS["disk_evicted"] += not temporary
    return total


def _count(name: str | None):
    if name is None:
        return
    with _LOCK:
        STATS[name] += 1

"""The on-disk cache of compiled machine code: a warm start skips LLVM.

An entry holds the object code that LLVM emitted for one module and the module's optimized
IR (for `f.llvm_ir()`), keyed by a SHA-256 of the generated IR text, the target (triple, CPU,
features, vector width), the LLVM and llvmlite versions, jitcore's version and the source of
jitcore/llvm/engine.py (the optimizer settings). The generated IR already encodes the graph,
its layouts and its block sizes, so equal keys mean equal code.

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

import functools
import hashlib
import json
import os
import stat
import struct
import sys
import tempfile
import threading
import time
import warnings
import zlib

import llvmlite

from jitcore.runtime.forksafe import renew_in_child

from .version import VERSION

MAGIC = b"JITCORE-OBJ-1\n"
_HEADER = struct.Struct("<QQ32s")          # header json length, payload length, payload sha256
STATS = {"disk_hits": 0, "disk_misses": 0, "disk_rejected": 0, "disk_evicted": 0}
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
    warnings.warn(f"jitcore: not using the disk cache {path!r}: {why}", RuntimeWarning,
                  stacklevel=3)
    return False


class Entry:
    """The entry of one module, as engine.compile_ir's `cache` argument wants it."""

    def __init__(self, ir_text: str, target_key: tuple, exports: list):
        self.target_key = target_key
        self.key = key(ir_text, target_key, exports)

    def load(self):
        return load(self.key, self.target_key)

    def store(self, obj: bytes, optimized_ir: str):
        store(self.key, self.target_key, obj, optimized_ir)


def key(ir_text: str, target_key: tuple, exports: list) -> str:
    h = hashlib.sha256()
    for part in (ir_text, repr(target_key), repr(exports), llvmlite.__version__,
                 _llvm_version(), _jitcore_version(), _engine_fingerprint()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _llvm_version() -> str:
    import llvmlite.binding as llvm
    return ".".join(map(str, llvm.llvm_version_info))


@functools.lru_cache(maxsize=None)
def _engine_fingerprint() -> str:
    """The code between IR text and machine code (optimizer settings, target machine): a
    change there must not reuse objects built by the old one."""
    from .llvm import engine
    with open(engine.__file__, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _jitcore_version() -> str:
    return str(VERSION)


def load(entry_key: str, target_key: tuple) -> tuple | None:
    """(object bytes, optimized IR) of a valid entry for this target, else None."""
    root = directory()
    if root is None:
        return None
    path = os.path.join(root, entry_key + ".jco")
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        _count("disk_misses")
        return None
    parsed = _parse(blob, entry_key, target_key)
    if parsed is None:
        _count("disk_rejected")
        try:
            os.remove(path)                  # rebuilt and rewritten by the caller
        except OSError:
            pass
        return None
    _count("disk_hits")
    try:
        os.utime(path)                       # recently used: the last to be evicted
    except OSError:
        pass
    return parsed


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


def store(entry_key: str, target_key: tuple, obj: bytes, optimized_ir: str) -> None:
    """Write an entry atomically; any failure leaves the cache as it was."""
    root = directory()
    if root is None:
        return
    header = json.dumps({"key": entry_key, "target": list(map(str, target_key)),
                         "object_bytes": len(obj)}).encode()
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


def _count(name: str):
    with _LOCK:
        STATS[name] += 1

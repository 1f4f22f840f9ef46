"""A bounded cache of large output buffers: fresh outputs without the page-fault-and-zero cost.

A fresh output of N MB from `np.empty` is new memory: the kernel that writes it first takes a
page fault per page and the kernel zeroes each page (~2 ms per 64 MB), often more than the
kernel's own work. Here a large output (`MIN_BYTES` or more) is a view of a cached block:
the returned array's base is a `_Lease`, and when the last reference to the array (and to
every view of it, which all keep the lease alive) goes, the lease gives the block back, so a
loop of calls reuses pages that are already mapped. Memory is never handed out while any
array still refers to it: a block is only ever in the idle list after its lease died.

Bounds: idle blocks are kept up to `JITCORE_OUTPUT_CACHE_MB` (default 256; 0 turns the cache
off), least recently returned out first; blocks in use are the user's arrays, as with numpy.
Thread-safe (one re-entrant lock: a lease may die inside the cache's own code when the
garbage collector runs there). After `os.fork()` the child starts with an empty cache and a
new lock (its copies of the parent's idle blocks are dropped; outputs alive at fork are the
child's own copy-on-write pages and come back to the child's cache).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

from .. import config
from ..llvm.entry import LARGE_OUTPUT_BYTES

# Smaller outputs keep numpy's allocator: glibc's malloc serves a block freed earlier from its
# heap without new faults up to its dynamic mmap threshold's ceiling (32 MB on 64-bit), and
# measured level with `out=` there (examples/output_cache_bench.py), while the lease costs
# a few microseconds. From 32 MB up every np.empty is a fresh mmap: faults and zeroing.
MIN_BYTES = LARGE_OUTPUT_BYTES      # (the native fast call leaves these to the cache)
ALIGN = 64                 # the data of a cached output starts on a cache line
_PAGE = 4096


class _Lease:
    """The base object of an output array on a cached block: exposes the block's memory
    through `__array_interface__`; when it dies (no array or view refers to it any more) the
    block goes back to the cache."""

    __slots__ = ("block", "address", "__array_interface__", "cache")

    def __init__(self, block: np.ndarray, address: int, interface: dict, cache):
        self.block, self.address, self.cache = block, address, cache
        self.__array_interface__ = interface

    def __del__(self):
        self.cache.give_back(self.block, self.address)


class OutputCache:
    """Idle blocks by size; `allocator(shape, dtype)` makes the function that hands out an
    array of that shape and dtype on one."""

    def __init__(self, limit_bytes: int):
        self.limit = limit_bytes
        self._idle: OrderedDict = OrderedDict()      # id(block) -> block, oldest first
        self._by_size: dict = {}                      # block bytes -> [(block, address)...]
        self.idle_bytes = 0
        self.stats = {"hits": 0, "misses": 0, "evicted": 0}
        self._lock = threading.RLock()

    @staticmethod
    def block_bytes(nbytes: int) -> int:
        return -(-(nbytes + ALIGN) // _PAGE) * _PAGE

    def allocator(self, shape: tuple, dtype):
        """`empty()`: an uninitialized C-contiguous array of shape and dtype on a cached
        block (a new block when none of its size is idle)."""
        dtype = np.dtype(dtype)
        shape = tuple(shape)
        size = self.block_bytes(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
        typestr, asarray, stats = dtype.str, np.asarray, self.stats
        # a dtype the interface's typestr cannot name (ml_dtypes' bfloat16 is "|V2"): the
        # array is relabelled by a view (its base chain still ends at the lease)
        relabel = None if np.dtype(typestr) == dtype else dtype

        def empty():
            with self._lock:
                blocks = self._by_size.get(size)
                if blocks:
                    block, address = blocks.pop()
                    del self._idle[id(block)]
                    self.idle_bytes -= size
                    stats["hits"] += 1
                else:
                    block = None
                    stats["misses"] += 1
            if block is None:
                block = np.empty(size, np.uint8)     # numpy's allocator: huge pages
                address = block.ctypes.data
            interface = {"shape": shape, "typestr": typestr, "version": 3,
                         "data": (address + (-address % ALIGN), False)}
            out = asarray(_Lease(block, address, interface, self))
            return out if relabel is None else out.view(relabel)
        return empty

    def give_back(self, block: np.ndarray, address: int) -> None:
        size = block.nbytes
        if size > self.limit:
            return                                    # never kept: freed now
        with self._lock:
            self._by_size.setdefault(size, []).append((block, address))
            self._idle[id(block)] = block
            self.idle_bytes += size
            while self.idle_bytes > self.limit:
                _, old = self._idle.popitem(last=False)
                same = self._by_size[old.nbytes]
                del same[next(i for i, (b, _) in enumerate(same) if b is old)]
                self.idle_bytes -= old.nbytes
                self.stats["evicted"] += 1

    def clear(self) -> None:
        """Drop every idle block (blocks in use come back later as usual)."""
        with self._lock:
            self._idle.clear()
            self._by_size.clear()
            self.idle_bytes = 0

    def after_fork_in_child(self) -> None:
        self._lock = threading.RLock()
        self.clear()


CACHE = OutputCache(config.get().output_cache_bytes)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=CACHE.after_fork_in_child)


def enabled_for(nbytes: int) -> bool:
    """Whether an output of nbytes comes from the cache."""
    return nbytes >= MIN_BYTES and CACHE.block_bytes(nbytes) <= CACHE.limit


def info() -> dict:
    """What the cache holds now: idle bytes, its limit, hits, misses, evictions."""
    with CACHE._lock:
        return {"output_cache_bytes": CACHE.idle_bytes,
                "output_cache_limit": CACHE.limit, **{f"output_cache_{k}": v
                                                      for k, v in CACHE.stats.items()}}

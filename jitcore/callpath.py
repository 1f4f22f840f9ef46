"""The per-call path: from a cached plan to one native call.

A `CallPlan` is everything one input signature needs at call time: the compiled entry, the
constant arrays, the output shapes. Its `__call__` allocates outputs with `np.empty` (numpy's
allocator asks for huge pages, which decides large-array speed), builds one tuple and makes
one ctypes call; the native entry reads each array's data pointer itself. That pointer read
relies on CPython's tuple layout and numpy's array struct; `NATIVE_LAYOUT_OK` checks both at
import, and when it fails every call passes raw pointers to the `run` function instead.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .compiler import CompiledGraph
from .llvm.codegen import ARRAY_DATA_OFFSET, TUPLE_ITEMS_OFFSET
from .signature import check_out


def _native_layout_ok() -> bool:
    a = np.empty(3)
    t = (a,)
    item = ctypes.c_void_p.from_address(id(t) + TUPLE_ITEMS_OFFSET).value
    data = ctypes.c_void_p.from_address(id(a) + ARRAY_DATA_OFFSET).value
    return item == id(a) and data == a.ctypes.data


NATIVE_LAYOUT_OK = _native_layout_ok()


class CallPlan:
    def __init__(self, compiled: CompiledGraph):
        self.compiled = compiled
        lowered = compiled.lowered
        self.consts = tuple(c.array for c in lowered.consts)
        out_bufs = lowered.buffers_of_kind("output")
        self.out_specs = [(b.shape, b.dtype.np) for b in out_bufs]
        first_out = out_bufs[0].slot if out_bufs else 0
        self.out_index = [s - first_out for s in lowered.outputs]   # graph output -> buffer
        self.single = len(lowered.outputs) == 1
        self.entry = compiled.entry if NATIVE_LAYOUT_OK else None
        self.expected = [(lowered.buffers[s].shape, lowered.buffers[s].dtype)
                         for s in lowered.outputs]

    def __call__(self, args: tuple, out=None):
        if out is not None:
            return self._call_with_out(args, out)
        bufs = [np.empty(shape, dtype) for shape, dtype in self.out_specs]
        self._invoke((*args, *self.consts, *bufs))
        if self.single:
            return bufs[self.out_index[0]]
        return tuple(bufs[i] for i in self.out_index)

    def _invoke(self, arrays: tuple):
        if self.entry is not None:
            rc = self.entry(arrays)
        else:
            ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
            rc = self.compiled.run(ptrs)
        if rc:
            raise MemoryError("jitcore: a kernel could not allocate its temporary buffers")

    def _call_with_out(self, args: tuple, out):
        """Write into the user's arrays: directly when each is C-contiguous and overlaps no
        input, else through a fresh result and a copy (so `f(x, out=x)` is always right)."""
        outs = check_out(out, self.expected)
        by_buffer = {}
        for o, i in zip(outs, self.out_index):
            by_buffer.setdefault(i, []).append(o)
        direct = len(by_buffer) == len(self.out_specs) and all(
            len(v) == 1 and v[0].flags.c_contiguous
            and not any(np.may_share_memory(v[0], a) for a in args)
            for v in by_buffer.values())
        if direct:
            self._invoke((*args, *self.consts, *[by_buffer[i][0] for i in range(len(by_buffer))]))
        else:
            bufs = [np.empty(shape, dtype) for shape, dtype in self.out_specs]
            self._invoke((*args, *self.consts, *bufs))
            for o, i in zip(outs, self.out_index):
                np.copyto(o, bufs[i])
        return outs[0] if self.single and not isinstance(out, (tuple, list)) else tuple(outs)

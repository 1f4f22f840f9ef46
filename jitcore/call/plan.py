"""The per-call path: from a plan to one native call.

A `CallPlan` holds what one input signature needs at call time: the compiled entry, the
constant arrays and the output shapes. Its `fast` path, for a graph with one output, is a
native builtin function (llvm/entry.py emit_fastcall) called with the tuple of inputs: it
checks their signature itself (type, rank, shape, strides, dtype), allocates the output with
numpy's PyArray_Empty and runs the graph, with no Python frame or ctypes conversion between
the call and the kernels. Other graphs get a closure that allocates the outputs with
`np.empty`, builds one tuple and makes one ctypes call to the native entry, which checks the
same way. Either way the Python side does no signature lookup at all while the signature
does not change.

Which path a plan's calls take (native fast call, ctypes entry or the Python slow path) is
decided in one place, jitcore/call/choice.py, whose rules this module follows: `CallPlan.path`
and `CallPlan.out_path` hold its choices.
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from jitcore.passes.symbolic import monomial

from ..cache import outputs as output_cache
from ..compiler import CompiledGraph
from ..llvm import entry as abi
from .choice import ENTRY, NATIVE, SLOW, choose_out_path, choose_path
from .signature import check_out


class _Mismatch:
    """Returned by a fast call whose arguments do not have the plan's signature."""


MISMATCH = _Mismatch()
GIL_RELEASE_BYTES = abi.GIL_RELEASE_BYTES      # calls that move more than this release the GIL


def _entry_function(compiled: CompiledGraph, extents: tuple = ()):
    """ctypes wrapper of the entry: big calls release the GIL, tiny ones skip that cost
    (bytes at this plan's run-time extents, for a graph compiled with them)."""
    moved = sum(k.bytes for k in compiled.kernels_at(extents))
    proto = ctypes.CFUNCTYPE if moved > GIL_RELEASE_BYTES else ctypes.PYFUNCTYPE
    return proto(ctypes.c_int32, ctypes.py_object)(compiled.entry_address)


def _nbytes(shape: tuple, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _allocator(shape: tuple, dtype):
    """`empty()` for one output: from the output buffer cache for large ones."""
    if output_cache.enabled_for(_nbytes(shape, dtype)):
        return output_cache.CACHE.allocator(shape, dtype)
    return functools.partial(np.empty, shape, dtype)


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef."""
    _fields_ = [("name", ctypes.c_char_p), ("meth", ctypes.c_void_p), ("flags", ctypes.c_int),
                ("doc", ctypes.c_char_p)]


_METH_O = 0x0008
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.POINTER(_MethodDef), ctypes.py_object, ctypes.c_void_p]
_BUILTIN = type(len)


def native_fast_call(compiled: CompiledGraph, out_dtype: np.dtype, consts: tuple):
    """A builtin function `fast(inputs_tuple)` around the graph's native fast call: returns
    the fresh output, or MISMATCH when the inputs do not have the compiled signature, or
    when a temporary buffer could not be allocated (the slow path then runs the call again
    and raises MemoryError). Its `self` tuple keeps the code and the method table alive."""
    method = _MethodDef(compiled.graph.name.encode(), compiled.fastcall_address, _METH_O, None)
    self_tuple = (MISMATCH, MISMATCH, out_dtype, *consts, compiled, method)
    assert len(consts) == len(compiled.layout.consts)
    return _new_builtin(ctypes.byref(method), self_tuple, None)


# Python scalar arguments: weak-typed run-time values (NEP 50), passed as 0-d arrays
SCALAR_TYPES = {bool: np.bool_, int: np.int64, float: np.float64}


def scalar_marker(pytype: type) -> tuple:
    """A scalar argument's entry in a plan key (an array's is (shape, strides, dtype))."""
    return ((), "python scalar", pytype)


class ScalarArgs:
    """The Python scalar arguments of a plan: position -> (type, integer dtypes its value
    must fit). Their values are run-time inputs (one compile for all values of a type);
    a value that does not fit a narrower integer dtype it meets raises OverflowError as
    numpy 2 does (`uint8_array + 300`)."""

    def __init__(self, specs: dict):
        self.specs = {p: (t, tuple(sorted(narrowed, key=lambda d: d.bits)))
                      for p, (t, narrowed) in specs.items()}
        # per scalar: (position, type, numpy type, (lo, hi, dtype name) per narrowed dtype)
        self._plan = tuple((p, t, SCALAR_TYPES[t],
                            tuple((int(np.iinfo(d.np).min), int(np.iinfo(d.np).max), d.name)
                                  for d in narrowed))
                           for p, (t, narrowed) in sorted(self.specs.items()))
        self._arity = max(self.specs) + 1

    def matches(self, args: tuple) -> bool:
        if len(args) < self._arity:
            return False
        for p, t, _, _ in self._plan:
            if type(args[p]) is not t:
                return False
        return True

    def convert(self, args: tuple, strict: bool = True):
        """args with each scalar a 0-d array, after the range checks: a value out of range
        raises OverflowError, or (strict=False: the fast path, whose plan may not be the
        call's at all) gives MISMATCH, so the slow path finds the call's plan and raises."""
        out = list(args)
        for p, t, np_type, bounds in self._plan:
            value = args[p]
            for lo, hi, name in bounds:
                if not lo <= value <= hi:
                    if not strict:
                        return MISMATCH
                    raise OverflowError(f"Python integer {value} out of bounds for {name}")
            out[p] = scalar_array(value, t) if t is int else np.array(value, np_type)
        return tuple(out)


def scalar_array(value, pytype: type) -> np.ndarray:
    try:
        return np.array(value, SCALAR_TYPES[pytype])
    except OverflowError:
        raise OverflowError(f"Python integer {value} out of bounds for int64 (a Python int "
                            "argument is an int64 run-time value; pass float(...) or mark "
                            "the argument static)") from None


def output_specs(compiled: CompiledGraph, extents: tuple = ()) -> list:
    """(shape, numpy dtype) of each output buffer of a graph, at run-time extents' values."""
    return [(concrete_shape(shape, extents), dtype.np) for shape, dtype in compiled.layout.outputs]


def concrete_shape(shape: tuple, extents: tuple) -> tuple:
    """A shape with each run-time extent's placeholder (c times a product of them: c times
    the product of their values) replaced by its value."""
    out = []
    for d in shape:
        found = monomial(d)
        out.append(d if found is None else found[0] * math.prod(extents[k] for k in found[1]))
    return tuple(out)


class CallPlan:
    """`extents`: for a graph compiled with run-time extents (jc.jit(dynamic=True)), the
    values of its symbols in this plan's signature (one plan per concrete signature; they
    share the compiled graph)."""

    def __init__(self, compiled: CompiledGraph, scalars: ScalarArgs | None = None,
                 extents: tuple = ()):
        self.compiled = compiled
        self.scalars = scalars
        self.extents = (ctypes.c_int64 * max(len(extents), 1))(*extents)
        layout = compiled.layout          # what the call reads of the lowered graph
        self.consts = layout.consts
        self.out_specs = output_specs(compiled, extents)
        self.out_index = list(layout.out_index)               # graph output -> buffer
        # one buffer per output position: outputs are distinct arrays, never one twice
        assert sorted(self.out_index) == list(range(len(layout.outputs)))
        allocators = [_allocator(shape, dtype) for shape, dtype in self.out_specs]
        self._allocate = lambda: tuple([empty() for empty in allocators])
        self.single = len(self.out_index) == 1
        self.expected = [(self.out_specs[i][0], layout.outputs[i][1]) for i in self.out_index]
        # gathers report a failed index check into a per-call int64[2] status array passed
        # after the outputs; the checks table turns it into the IndexError
        self.checks = list(layout.checks)
        # the paths calls take (jitcore/call/choice.py): without `out=`, and with it
        self.path, self.out_path = choose_path(compiled, self.out_specs), choose_out_path(compiled)
        # (the slow path, where the native code may not read Python objects, has no entry)
        self.entry = None if self.path.name == SLOW else _entry_function(compiled, extents)
        self.fast = self._make_fast()
        self.fast_out = self._make_fast_out()
        if scalars is not None:
            self.fast, self.fast_out = self._with_scalars(self.fast, self.fast_out)
        # a jitted function keeps calling its last fast path after the plan itself may have
        # been evicted: the closures own the code they call (a native fast call holds it in
        # its `self` tuple)
        for path in (self.fast, self.fast_out):
            if not isinstance(path, _BUILTIN):
                path.compiled = compiled

    def _with_scalars(self, fast, fast_out):
        """Fast paths that turn the Python scalar arguments into 0-d arrays first (and find
        a call whose scalars have other types a mismatch)."""
        matches, convert = self.scalars.matches, self.scalars.convert

        def fast_scalars(args):
            if not matches(args):
                return MISMATCH
            args = convert(args, False)
            return MISMATCH if args is MISMATCH else fast(args)

        def fast_out_scalars(args, out):
            if not matches(args):
                return MISMATCH
            args = convert(args, False)
            return MISMATCH if args is MISMATCH else fast_out(args, out)
        return fast_scalars, fast_out_scalars

    def prepare(self, args: tuple) -> tuple:
        """The slow path's arguments (arrays, and Python scalars of this plan's types) as
        the entry takes them."""
        return self.scalars.convert(args) if self.scalars is not None else args

    def _make_fast(self):
        """The common call, arrays in, fresh outputs back, on the path `self.path` names:
        the native fast call, a closure around the entry, or none (every call MISMATCHes
        into the slow path)."""
        entry, consts, specs, index = self.entry, self.consts, self.out_specs, self.out_index
        status, alloc = self._status, self._allocate
        if self.path.name == SLOW:
            return lambda args: MISMATCH
        if self.path.name == NATIVE:
            return native_fast_call(self.compiled, np.dtype(specs[0][1]), consts)
        assert self.path.name == ENTRY
        if self.checks:
            return self._make_fast_checked()
        if self.single and len(specs) == 1:
            empty = _allocator(*specs[0])

            def fast(args):
                try:
                    r = empty()
                except MemoryError:           # maybe not even this signature: ask the slow path
                    return MISMATCH
                rc = entry(args + consts + (r,))
                return r if rc == 0 else status(rc)
            return fast

        def fast_general(args):
            try:
                bufs = alloc()
            except MemoryError:
                return MISMATCH
            rc = entry(args + consts + bufs)
            if rc:
                return status(rc)
            return bufs[index[0]] if len(index) == 1 else tuple(bufs[i] for i in index)
        return fast_general

    def _make_fast_checked(self):
        """The common call of a graph that gathers: a fresh status array, checked after."""
        entry, consts, index = self.entry, self.consts, self.out_index
        zeros, status, raise_index = np.zeros, self._status, self._raise_index
        alloc = self._allocate

        def fast_checked(args):
            try:
                bufs = alloc()
            except MemoryError:
                return MISMATCH
            st = zeros(2, np.int64)
            rc = entry(args + consts + bufs + (st,))
            if rc:
                return status(rc)
            if st[0]:
                raise_index(st)
            return bufs[index[0]] if len(index) == 1 else tuple(bufs[i] for i in index)
        return fast_checked

    def _raise_index(self, status):
        name, axis, extent = self.checks[int(status[0]) - 1]
        raise IndexError(f"{name}: index {int(status[1])} is out of bounds for axis {axis} "
                         f"with size {extent}")

    def _make_fast_out(self):
        """`out=` given: the entry itself checks shape, dtype, contiguity, writeability and
        overlap with the inputs; anything unusual goes to the slow path."""
        entry, consts, status = self.entry, self.consts, self._status
        if self.out_path.name == SLOW:
            return lambda args, out: MISMATCH
        assert self.single and len(self.out_specs) == 1 and not self.checks

        def fast_out(args, out):
            rc = entry(args + consts + (out,))
            return out if rc == 0 else status(rc)
        return fast_out

    @staticmethod
    def _status(rc: int):
        if rc == abi.SIGNATURE_MISMATCH:
            return MISMATCH
        raise MemoryError("jitcore: a kernel could not allocate its temporary buffers")

    def __call__(self, args: tuple, out=None):
        """The checked call for normalized arguments (slow path, and `out=`)."""
        if out is not None:
            return self._call_with_out(args, out)
        bufs = self._run_fresh(args)
        if self.single:
            return bufs[self.out_index[0]]
        return tuple(bufs[i] for i in self.out_index)

    def _run_fresh(self, args: tuple) -> list:
        """Run into newly allocated output buffers; returns them (one per output buffer)."""
        bufs = list(self._allocate())
        self._invoke((*args, *self.consts, *bufs))
        return bufs

    def _invoke(self, arrays: tuple):
        """Run via the entry when it accepts the arrays, else with raw data pointers; then
        raise the IndexError of a failed index check."""
        st = np.zeros(2, np.int64)
        if self.checks:
            arrays = arrays + (st,)
        rc = self.entry(arrays) if self.entry is not None else abi.SIGNATURE_MISMATCH
        if rc == abi.SIGNATURE_MISMATCH:
            # e.g. int64 with typecode 'q', or unusual strides on size-1 axes: the arrays
            # were validated in Python, so hand the pointers over directly
            ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
            rc = self.compiled.run(ptrs, self.extents)
        if rc:
            self._status(rc)
        if st[0]:
            self._raise_index(st)

    def _call_with_out(self, args: tuple, out):
        """Write into the user's arrays: directly when each is C-contiguous and overlaps no
        input, else through a fresh result and a copy (so `f(x, out=x)` is always right).
        Each output has its own buffer (lowering gives repeated outputs one each), so the
        out= arrays, which check_out makes sure are disjoint, are the buffers in some order."""
        outs = check_out(out, self.expected)
        direct = all(o.flags.c_contiguous and not any(np.may_share_memory(o, a) for a in args)
                     for o in outs)
        if direct:
            bufs = [None] * len(self.out_specs)
            for o, i in zip(outs, self.out_index):
                bufs[i] = o
            self._invoke((*args, *self.consts, *bufs))
        else:
            bufs = self._run_fresh(args)
            for o, i in zip(outs, self.out_index):
                np.copyto(o, bufs[i])
        return outs[0] if self.single and not isinstance(out, (tuple, list)) else tuple(outs)

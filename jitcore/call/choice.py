"""Which of the three call paths a call takes, and why: the rules in one place.

A jitted function's call reaches its compiled graph by one of three paths:

  - the **native fast call** (NATIVE): a builtin function around the graph's native fast call
    (llvm/entry.py emit_fastcall). It takes the tuple of input arrays, checks their signature
    itself, allocates the output with numpy's PyArray_Empty and runs the graph: no Python
    frame or ctypes conversion between the call and the kernels;
  - the **ctypes entry** (ENTRY): a Python closure allocates the outputs with `np.empty` (or
    from the output buffer cache) and makes one ctypes call to the graph's native entry,
    which checks the signature the same way;
  - the **Python slow path** (SLOW): every call normalizes its arguments in Python, finds
    its plan by its full key and passes the arrays (through the entry, or as raw data
    pointers when the entry cannot read them) to the graph's run function.

`choose_path` decides for a plan's common call (arrays in, fresh outputs back) and
`choose_out_path` for a call with `out=`; `jitcore.call.plan.CallPlan` builds what they name
and `f.explain(...)` prints the choice. The rules, in order:

  1. the native entry and the fast call read CPython's tuple and numpy's array structs at
     fixed offsets (llvm/entry.py). `NATIVE_LAYOUT_OK`, checked at import against this
     interpreter, says whether they are right; when not, no native code ever reads a Python
     object: the Python slow path, which cannot crash on a foreign layout;
  2. a graph gets a native fast call only when it has one output buffer, no index checks and
     at most FASTCALL_MAX_INPUTS array inputs (decided at compile time:
     llvm/entry.py fastcall_eligible); other graphs take the ctypes entry;
  3. an output of LARGE_OUTPUT_BYTES or more comes from the output buffer cache, which the
     fast call cannot allocate from: the ctypes entry;
  4. the fast call allocates with numpy's PyArray_Empty, found in numpy's C-API table
     (`NATIVE_EMPTY_OK`, checked at import); where it is not there: the ctypes entry;
  5. else the native fast call.

A path may still hand a single call on (a signature it does not fit, an array the entry
cannot read): it returns MISMATCH and the slow path runs that call. The choice is what calls
of the plan's own signature take.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .. import log
from ..cache import outputs as output_cache
from ..compiler import CompiledGraph, python_api
from ..llvm import entry as abi

NATIVE, ENTRY, SLOW = "native fast call", "ctypes entry", "Python slow path"


@dataclass(frozen=True)
class CallPathChoice:
    """`name`: NATIVE, ENTRY or SLOW; `reason`: why, in words (for explain())."""
    name: str
    reason: str

    def __str__(self):
        return f"{self.name}: {self.reason}"


# -- the interpreter checks, once at import ------------------------------------------------
def _peek(addr: int, ctype=ctypes.c_void_p):
    return ctype.from_address(addr).value


def native_layout_ok(offsets=abi) -> bool:
    """Whether every CPython and numpy struct offset the native code reads (`offsets`: a
    namespace with llvm/entry.py's constants) is right for this interpreter: read through
    them, a tuple and an array must give back what Python says they hold."""
    a = np.zeros((3, 5), np.float32)[:, ::2]
    t = (a, a.dtype)                   # two different items: an offset one word off fails
    descr = id(a.dtype)
    try:
        return (_peek(id(t) + offsets.TUPLE_ITEMS_OFFSET) == id(a)
                and _peek(id(t) + offsets.TUPLE_ITEMS_OFFSET + 8) == descr
                and _peek(id(t) + offsets.TUPLE_SIZE_OFFSET, ctypes.c_ssize_t) == 2
                and _peek(id(a) + offsets.OB_TYPE_OFFSET) == id(np.ndarray)
                and _peek(id(a) + offsets.ARRAY_DATA_OFFSET) == a.ctypes.data
                and _peek(id(a) + offsets.ARRAY_ND_OFFSET, ctypes.c_int) == 2
                and _peek(_peek(id(a) + offsets.ARRAY_DIMS_OFFSET) + 8, ctypes.c_int64) == 3
                and _peek(_peek(id(a) + offsets.ARRAY_STRIDES_OFFSET) + 8, ctypes.c_int64) == 8
                and _peek(id(a) + offsets.ARRAY_DESCR_OFFSET) == descr
                and _peek(descr + offsets.DESCR_TYPE_NUM_OFFSET, ctypes.c_int) == a.dtype.num
                and _peek(descr + offsets.DESCR_BYTEORDER_OFFSET, ctypes.c_char) == b"="
                and _flags_ok(offsets))
    except (ValueError, OSError):
        return False


def _flags_ok(offsets) -> bool:
    a = np.zeros(2)
    flags = id(a) + offsets.ARRAY_FLAGS_OFFSET
    writeable = _peek(flags, ctypes.c_int) & offsets.NPY_ARRAY_WRITEABLE
    a.flags.writeable = False
    readonly = _peek(flags, ctypes.c_int) & offsets.NPY_ARRAY_WRITEABLE
    return bool(writeable) and not readonly


def _native_empty_ok() -> bool:
    """Whether the numpy C-API slot the fast call allocates with is PyArray_Empty: called
    once through ctypes, it must make a (2, 3) float32 array."""
    try:
        empty = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                  ctypes.py_object, ctypes.c_int)(
            python_api()[abi.NP_EMPTY])
        descr = np.dtype(np.float32)
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(descr))      # PyArray_Empty steals one
        a = empty(2, (ctypes.c_int64 * 2)(2, 3), descr, 0)
        return type(a) is np.ndarray and a.shape == (2, 3) and a.dtype == descr
    except Exception:
        return False


NATIVE_LAYOUT_OK = native_layout_ok()
NATIVE_EMPTY_OK = NATIVE_LAYOUT_OK and _native_empty_ok()
if NATIVE_LAYOUT_OK and not NATIVE_EMPTY_OK:
    log.warning("numpy's C-API table does not have PyArray_Empty where the native fast call "
                "expects it: calls go through the native entry instead")
if not NATIVE_LAYOUT_OK:
    log.warning("this interpreter's tuple or numpy's array layout is not the one the native "
                "entry reads: every call takes the slower checked path")

LAYOUT_DIFFERS = ("this interpreter's tuple layout or numpy's array struct differs from what "
                  "the native entry reads (checked at import)")


# -- the rules --------------------------------------------------------------------------------
def choose_path(compiled: CompiledGraph, out_specs: list) -> CallPathChoice:
    """The path of a plain call (no `out=`) of a plan: `out_specs`, its output buffers'
    (shape, numpy dtype) at the plan's sizes (plan.output_specs)."""
    if not NATIVE_LAYOUT_OK:                                                      # rule 1
        return CallPathChoice(SLOW, LAYOUT_DIFFERS)
    layout = compiled.layout
    n_in, n_out = len(compiled.graph.inputs), len(layout.outputs)
    if compiled.fastcall_address is None:                                         # rule 2
        return CallPathChoice(ENTRY, _no_fast_call(n_in, n_out, layout.checks))
    sizes = [_nbytes(shape, dtype) for shape, dtype in out_specs]
    if any(output_cache.enabled_for(n) for n in sizes):                           # rule 3
        return CallPathChoice(ENTRY, f"its output ({_size(sum(sizes))}) comes from the "
                                     f"output buffer cache, which serves outputs of "
                                     f"{_size(abi.LARGE_OUTPUT_BYTES)} and more")
    if not NATIVE_EMPTY_OK:                                                       # rule 4
        return CallPathChoice(ENTRY, "numpy's C-API table does not have PyArray_Empty where "
                                     "the native fast call expects it")
    return CallPathChoice(NATIVE, f"{_count(n_out, 'output')}, {_count(n_in, 'input')}, "
                                  f"{_size(sum(sizes))} out")                      # rule 5


def choose_out_path(compiled: CompiledGraph) -> CallPathChoice:
    """The path of a call with `out=`: the ctypes entry writes one output into the user's
    array (the entry checks its shape, dtype, contiguity, writeability and overlap); other
    graphs check and copy in Python."""
    if not NATIVE_LAYOUT_OK:
        return CallPathChoice(SLOW, LAYOUT_DIFFERS)
    n_out = len(compiled.layout.outputs)
    if n_out != 1:
        return CallPathChoice(SLOW, f"out= with {n_out} outputs is checked in Python")
    if compiled.layout.checks:
        return CallPathChoice(SLOW, "out= with index checks is checked in Python")
    return CallPathChoice(ENTRY, "the entry checks the out= array")


def _no_fast_call(n_in: int, n_out: int, checks: tuple) -> str:
    """Why the compiler gave a graph no native fast call (llvm/entry.py fastcall_eligible)."""
    if n_out != 1:
        return f"{n_out} outputs (the native fast call makes one)"
    if checks:
        return "index checks (a gather's out-of-bounds index is reported after the call)"
    if n_in > abi.FASTCALL_MAX_INPUTS:
        return f"{n_in} array inputs (the native fast call takes at most " \
               f"{abi.FASTCALL_MAX_INPUTS})"
    return "no native fast call was compiled for this graph"


def _nbytes(shape: tuple, dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _size(nbytes: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes} bytes"

"""LLVM itself, behind one module: parse + verify, O3, machine code, and the in-process JIT.

One target machine and one LLJIT serve the whole process (a second MCJIT engine on a shared
target machine segfaulted; LLJIT with resource trackers did not). Each compiled graph is a
JIT library whose `ResourceTracker` the owner keeps for as long as its code may run; dropping
it frees the code. LLVM calls are serialized by a lock: compiles may come from many threads.
"""
from __future__ import annotations

import itertools
import sys
import threading

import llvmlite.binding as llvm

from jitcore.ir.errors import CompileError
from jitcore.runtime.forksafe import hold_during_fork

from .target import Target

_LOCK = threading.RLock()
hold_during_fork(sys.modules[__name__], "_LOCK", threading.RLock)   # no fork inside LLVM
_LIB_IDS = itertools.count()


class _Machine:
    """The target machine and JIT for one Target (CPU + features)."""

    def __init__(self, target: Target):
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        self.tm = llvm.Target.from_triple(target.triple).create_target_machine(
            cpu=target.cpu, features=target.features, opt=3, jit=True)
        self.jit = llvm.create_lljit_compiler(self.tm)
        self.data_layout = str(self.tm.target_data)


_MACHINES: dict = {}


def machine(target: Target) -> _Machine:
    key = (target.triple, target.cpu, target.features)
    with _LOCK:
        if key not in _MACHINES:
            _MACHINES[key] = _Machine(target)
        return _MACHINES[key]


class Library:
    """JIT-compiled code of one graph: exported addresses, kept alive by the tracker."""

    def __init__(self, tracker, addresses: dict, optimized_ir: str, mach: _Machine):
        self._tracker, self.addresses = tracker, addresses
        self.optimized_ir, self._machine, self._asm = optimized_ir, mach, None

    def __del__(self):
        # freeing the code is an LLJIT call like the others: under the lock, never mid-fork
        # (at interpreter exit the code stays mapped, as llvmlite's own finalizer does)
        tracker = getattr(self, "_tracker", None)
        if tracker is not None and not sys.is_finalizing():
            with _LOCK:
                tracker.close()

    def asm(self) -> str:
        if self._asm is None:
            with _LOCK:
                mod = llvm.parse_assembly(self.optimized_ir)
                self._asm = self._machine.tm.emit_assembly(mod)
        return self._asm


def _machine_code(text: str, mach: _Machine) -> tuple:
    """(object bytes, optimized IR text) of a module."""
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(f"LLVM rejected the generated IR: {e}") from None
    _optimize(mod, mach.tm)
    return mach.tm.emit_object(mod), str(mod)


def _optimize(mod, tm):
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    # kernels are vectorized explicitly by codegen; LLVM's vectorizers would only re-vectorize
    # scalar tails and fallback loops, costing compile time and code size
    pto.loop_vectorization = False
    pto.slp_vectorization = False
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        _free_pass_manager(mpm)
        pb.close()
        pto.close()


def _free_pass_manager(mpm):
    """Free the O3 pipeline now. llvmlite's ModulePassManager never frees it (its _dispose
    is shadowed by ObjectRef's empty one in the class's MRO: 70-110 KB lost per compile, see
    tests/test_memory.py); detaching afterwards keeps a fixed llvmlite from freeing it twice."""
    dispose = getattr(llvm.ffi.lib, "LLVMPY_DisposeNewModulePassManger", None)
    if dispose is not None and not mpm.closed:
        dispose(mpm)
        mpm.detach()


def compile_ir(text: str, exports: list, target: Target, imports: dict | None = None,
               cache=None) -> Library:
    """Parse, verify, optimize at O3, emit machine code and link it into the process.
    `imports` binds external symbols of the module to addresses of this process. `cache`:
    an object with load() -> (object, optimized IR) | None and store(object, optimized IR)
    (the disk cache): a hit skips LLVM's optimizer and code generator."""
    mach = machine(target)
    hit = cache.load() if cache is not None else None
    with _LOCK:
        if hit is not None:
            obj, optimized = hit
        else:
            obj, optimized = _machine_code(text, mach)
            if cache is not None:
                cache.store(obj, optimized)
        builder = llvm.JITLibraryBuilder().add_object_img(obj).add_current_process()
        for name in exports:
            builder.export_symbol(name)
        for name, address in (imports or {}).items():
            builder.import_symbol(name, address)
        try:
            tracker = builder.link(mach.jit, f"jitcore_lib{next(_LIB_IDS)}")
        except RuntimeError as e:
            raise CompileError(f"JIT link failed: {e}") from None
    return Library(tracker, {n: tracker[n] for n in exports}, optimized, mach)

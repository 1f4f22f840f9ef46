"""A lowered graph -> LLVM modules: one per distinct kernel (its kind's emitter, kinds.py), named
by a hash of its code, and the graph's own module: the `run` function that allocates the
temps and launches the kernels (and forked tasks) on the runtime's pool, and the native entry
(`entry.py`). A kernel reads its buffers from its own pointer array, which `run` fills from the
graph's slots, so a kernel repeated in a graph, or shared by graphs, is one module, and its IR
is generated once per process (memoized by `passes.kernel_key`). The graph's own module is
glue, run once per call: it declares engine.GLUE, so LLVM compiles it without optimizing.

ABI (room for the parallel runtime: a kernel runs any sub-range of its first loop):
    void  jck_<hash>(i64 start, i64 stop, i8** bufs)     kernel over [start, stop) of loop 0,
                                                         bufs: its own buffers, in its order
    i32   <graph>_run(i8** slots, i64* dims)             all kernels; allocates the temps
                                                         (dims: the call's run-time extents,
                                                         jc.jit(dynamic=True); else unused)
    i32   <graph>_entry(PyTupleObject* arrays)           reads each ndarray's data pointer
    i1    <graph>_check_inputs(items, ptrs, extents)     (internal) the inputs' checks, which
                                                         the entry and the fast call share
    PyObject* <graph>_fastcall(self, PyTupleObject* inputs)  a METH_O builtin: checks the
                                                         inputs, allocates the output, runs
"""
from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

from llvmlite import ir

from jitcore.passes.kernel import Kernel
from jitcore.passes.kernel_key import kernel_key
from jitcore.passes.legality import bytes_moved
from jitcore.passes.dynamic import DIMS_SLOT
from jitcore.passes.memory_plan import ALIGN, plan_temps
from jitcore.passes.symbolic import monomial
from jitcore.runtime import emit_parallel_for, emit_spawn, emit_wait, kernel_type

from . import bf16_convert
from . import irutil as u
from . import work
from .engine import GLUE, KERNEL, TILED, with_pipeline
from .entry import (GIL_RELEASE_BYTES, OK, OUT_OF_MEMORY, emit_entry, emit_fastcall,
                    emit_input_checks, fastcall_eligible)
from .gemm import plan_threads
from .kinds import entry


KERNEL_PLACEHOLDER = "jitcore_kernel"     # a kernel's name while its text is hashed
DYNAMIC_BYTES = 1 << 40      # a temp block this large was sized with an extent placeholder


@dataclass(frozen=True)
class KernelCode:
    """One kernel's own LLVM module, named by its content (`jck_<hash>`): equal kernels of
    different graphs, or of different layers of one graph, are the same module, compiled once
    (engine.compile_modules keeps the objects)."""
    symbol: str
    text: str
    buffer_slots: tuple      # the graph slots the kernel's `bufs` array holds, in order
    extent: int              # iterations of its range loop (work items for GEMM/GEMV)
    grain: int               # fewest iterations per parallel chunk (negative: -c * s_k, the
    #                          cost of one iteration, a run-time value: see grain)


@dataclass(frozen=True)
class GraphModule:
    """A graph's code: its distinct kernels' modules and the graph's own module (the run
    function, forked tasks and the native entry), which calls the kernels by symbol."""
    kernels: tuple           # KernelCode per kernel of the lowered graph, in order
    graph_text: str
    run_name: str
    entry_name: str
    fastcall_name: str | None = None     # the native fast call, for graphs it handles

    @property
    def parts(self) -> list:
        """The IR texts to compile: each distinct kernel once, then the graph module."""
        distinct = {k.symbol: k.text for k in self.kernels}
        return list(distinct.values()) + [self.graph_text]

    @property
    def text(self) -> str:
        return "\n".join(self.parts)


def build_module(lowered, vector_bits: int, triple: str, data_layout: str,
                 masked_tails: bool = False, threads: int = 0, store=None,
                 stream_bytes: int = 0, fused_fma: bool = True,
                 bf16_native: bool = False, on_kernel=None) -> GraphModule:
    """The LLVM modules of a lowered graph. `threads`: intra-op threads of its kernels (0:
    the process-wide setting at call time). `store`: where kernels' IR outlives the process
    (the disk cache: load(key) -> KernelCode | None, save(key, KernelCode)), or None.
    `stream_bytes`: elementwise kernels writing this much output stream it (0: never).
    `fused_fma`: the target fuses llvm.fmuladd (has FMA; irutil.fused_fma). `bf16_native`:
    it has AVX512_BF16 (bf16_convert.set_native). `on_kernel(KernelCode)`: called as each
    kernel's IR is ready (engine.Prebuilds.add starts building it)."""
    kernels = []
    for kernel in lowered.kernels:
        kernels.append(emit_kernel(kernel, vector_bits, triple, data_layout, masked_tails,
                                   threads, store, stream_bytes, fused_fma, bf16_native))
        if on_kernel is not None:
            on_kernel(kernels[-1])
    kernels = tuple(kernels)
    module = ir.Module(name=lowered.name)
    module.triple, module.data_layout = triple, data_layout
    prefix = f"jc_{lowered.name}"
    run = _emit_run(module, lowered, kernels, f"{prefix}_run", threads)
    check = emit_input_checks(module, lowered, f"{prefix}_check_inputs")
    entry = emit_entry(module, lowered, run, f"{prefix}_entry", check)
    fastcall = None
    if fastcall_eligible(lowered):
        moved = sum(bytes_moved(k) for k in lowered.kernels)
        fastcall = emit_fastcall(module, lowered, run, f"{prefix}_fastcall", check,
                                 release_gil=moved > GIL_RELEASE_BYTES).name
    # the glue runs once per call and has no loops: compiled with a cheap pipeline (engine.py)
    text = with_pipeline(_with_vector_attributes(str(module), vector_bits), GLUE)
    return GraphModule(kernels, text, run.name, entry.name, fastcall)


# kernels emitted in this process, by structure (passes/kernel_key.py) and target settings:
# a layer repeated in a model, or a kernel shared by graphs, is generated once
_EMITTED: OrderedDict = OrderedDict()
_EMITTED_MAX_BYTES = 16 << 20       # of IR text kept (oldest out first)
_emitted_bytes = 0
_EMITTED_LOCK = threading.Lock()
STATS = {"kernels_generated": 0, "kernels_reused": 0, "kernels_loaded": 0}


def emit_kernel(kernel: Kernel, vector_bits: int, triple: str, data_layout: str,
                masked_tails: bool, threads: int, store=None,
                stream_bytes: int = 0, fused_fma: bool = True,
                bf16_native: bool = False) -> KernelCode:
    """One kernel in a module of its own, named by a hash of its text; generated once per
    process for each structure (the code of an equal kernel is reused with this kernel's
    buffer slots), and loaded from `store` when an earlier process generated it."""
    structure, slots = kernel_key(kernel)
    key = (structure, vector_bits, triple, data_layout, masked_tails, plan_threads(threads),
           stream_bytes, fused_fma, bf16_native)
    with _EMITTED_LOCK:
        seen = _EMITTED.get(key)
        if seen is not None:
            _EMITTED.move_to_end(key)
            STATS["kernels_reused"] += 1
    if seen is None and store is not None:
        seen = store.load(key)
        if seen is not None:
            STATS["kernels_loaded"] += 1
            _remember(key, seen)
    if seen is None:
        STATS["kernels_generated"] += 1
        seen = _emit_kernel(kernel, vector_bits, triple, data_layout, masked_tails, threads,
                            stream_bytes, fused_fma, bf16_native)
        positions = {slot: k for k, slot in enumerate(slots)}
        positions[DIMS_SLOT] = DIMS_SLOT
        # the kernel's pointer array, as positions in the key's numbering of buffers
        seen = dataclasses.replace(seen, buffer_slots=tuple(
            positions[slot] for slot in seen.buffer_slots))
        if store is not None:
            store.save(key, seen)
        _remember(key, seen)
    return dataclasses.replace(seen, buffer_slots=tuple(
        DIMS_SLOT if k == DIMS_SLOT else slots[k] for k in seen.buffer_slots))


def emitted_bytes() -> int:
    """Bytes of kernel IR text held by the per-process memo (bounded by _EMITTED_MAX_BYTES)."""
    return _emitted_bytes


def _remember(key, code: KernelCode) -> None:
    global _emitted_bytes
    with _EMITTED_LOCK:
        if key not in _EMITTED:
            _EMITTED[key] = code
            _emitted_bytes += len(code.text)
        while _emitted_bytes > _EMITTED_MAX_BYTES and len(_EMITTED) > 1:
            _emitted_bytes -= len(_EMITTED.popitem(last=False)[1].text)


def _emit_kernel(kernel: Kernel, vector_bits: int, triple: str, data_layout: str,
                 masked_tails: bool, threads: int, stream_bytes: int = 0,
                 fused_fma: bool = True, bf16_native: bool = False) -> KernelCode:
    module = ir.Module(name=KERNEL_PLACEHOLDER)
    module.triple, module.data_layout = triple, data_layout
    u.set_fused_fma(module, fused_fma)
    bf16_convert.set_native(module, bf16_native)
    kind = entry(kernel)             # the kind's plan, work items and emitter (registry.py)
    plan = kind.plan(kernel, vector_bits, plan_threads(threads))
    extent, chunk = kind.work(kernel, plan)
    ke = kind.emitter(module, kernel, KERNEL_PLACEHOLDER, masked_tails, stream_bytes, plan)
    ke.emit()
    text = with_pipeline(_with_vector_attributes(str(module), vector_bits),
                         TILED if kind.unrolled else KERNEL)
    symbol = "jck_" + hashlib.sha256(text.encode()).hexdigest()[:24]
    text = text.replace(f'@"{KERNEL_PLACEHOLDER}"', f'@"{symbol}"')
    return KernelCode(symbol, text, tuple(ke.buffer_slots), extent, chunk)


def _with_vector_attributes(text: str, vector_bits: int) -> str:
    """llvmlite cannot set string attributes; tag every definition with group #0 in the text.
    Without "min-legal-vector-width" the x86 backend may split 512-bit vectors in halves."""
    lines = []
    for line in text.splitlines():
        if line.startswith("define "):
            line = line.rstrip() + " #0" if not line.rstrip().endswith("{") else \
                line.rstrip()[:-1].rstrip() + " #0 {"
        lines.append(line)
    lines.append(f'attributes #0 = {{ nounwind "min-legal-vector-width"="{vector_bits}" '
                 f'"prefer-vector-width"="{vector_bits}" }}')
    return "\n".join(lines) + "\n"


def _declare_kernel(module: ir.Module, code: KernelCode) -> ir.Function:
    return module.globals.get(code.symbol) or ir.Function(module, kernel_type(), code.symbol)


def dim_value(b: ir.IRBuilder, dims, n: int):
    """An extent as an i64 value: a constant, or c times the product of the call's values
    of dynamic symbols (read from the extent array `dims`)."""
    return u.extent_value(b, n, lambda k: b.load(b.gep(dims, [u.I64(k)])))


def _launch(b: ir.IRBuilder, code: KernelCode, pointer, threads: int, dims=None) -> None:
    """parallel_for over one kernel, with its own array of buffer pointers (`pointer(slot)`:
    the graph slot's pointer value; the call's extent array where the kernel reads run-time
    extents)."""
    n = max(len(code.buffer_slots), 1)
    own = b.bitcast(u.alloca_once(b, ir.ArrayType(u.I8P, n), name="kbufs"),
                    u.I8P.as_pointer())
    for local, slot in enumerate(code.buffer_slots):
        ptr = b.bitcast(dims, u.I8P) if slot == DIMS_SLOT else pointer(slot)
        b.store(ptr, b.gep(own, [u.I64(local)]))
    extent = code.extent if monomial(code.extent) is None else \
        dim_value(b, dims, code.extent)
    chunk = code.grain
    if chunk < 0:                   # work.MIN_CHUNK_WORK over the call's cost of an iteration
        cost = dim_value(b, dims, -chunk)
        chunk = b.add(b.sdiv(u.I64(work.MIN_CHUNK_WORK - 1), cost), u.I64(1))
    emit_parallel_for(b, _declare_kernel(b.module, code), extent, own, chunk, threads)


def _emit_task(module, lowered, kernels, task: int, name: str, threads: int) -> ir.Function:
    """`void task(i8** bufs)`: the kernels of one forked sub-graph, in order."""
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [u.I8P.as_pointer()]), name=name)
    fn.linkage = "internal"
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    for kernel, code in zip(lowered.kernels, kernels):
        if kernel.task == task:
            _launch(b, code, lambda slot: b.load(b.gep(fn.args[0], [u.I64(slot)])), threads)
    b.ret_void()
    return fn


def _sized_at_run_time(nbytes: int) -> bool:
    """Whether a block size was computed from a run-time extent's placeholder."""
    return nbytes >= DYNAMIC_BYTES


def _run_time_block_size(b: ir.IRBuilder, lowered, plan, block: int, dims):
    """The bytes of a temp block at run time: the largest of its temps, each its static
    element count times the call's dynamic extents, rounded up to ALIGN."""
    size = u.I64(ALIGN)
    for buf in lowered.buffers:
        if buf.kind != "temp" or plan.block_of.get(buf.slot) != block:
            continue
        n = u.I64(buf.dtype.itemsize)
        for d in buf.shape:
            n = b.mul(n, dim_value(b, dims, d))
        n = b.and_(b.add(n, u.I64(ALIGN - 1)), u.I64(-ALIGN))
        size = b.select(b.icmp_unsigned(">", n, size), n, size)
    return size


def _emit_run(module, lowered, kernels, name, threads: int):
    fn = ir.Function(module, ir.FunctionType(u.I32, [u.I8P.as_pointer(), u.I64.as_pointer()]),
                     name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    given, dims = fn.args
    aligned_alloc = ir.Function(module, ir.FunctionType(u.I8P, [u.I64, u.I64]), "aligned_alloc")
    free = ir.Function(module, ir.FunctionType(ir.VoidType(), [u.I8P]), "free")
    temps, failed = [], None
    plan = plan_temps(lowered)                  # temps with disjoint lifetimes share a block
    for block, size in enumerate(plan.sizes):
        if _sized_at_run_time(size):
            size = _run_time_block_size(b, lowered, plan, block, dims)
        else:
            size = u.I64(size)
        p = b.call(aligned_alloc, [u.I64(ALIGN), size], name=f"block{len(temps)}")
        null = b.icmp_unsigned("==", p, ir.Constant(u.I8P, None))
        failed = null if failed is None else b.or_(failed, null)
        temps.append(p)
    if temps:                                   # one test for all (free(NULL) does nothing)
        with b.if_then(failed, likely=False):
            for t in temps:
                b.call(free, [t])
            b.ret(u.I32(OUT_OF_MEMORY))
    pointers = {}                               # graph slot -> its pointer, loaded once
    for buf in lowered.buffers:
        if buf.kind == "temp" and buf.slot not in plan.block_of:  # its kernels were fused away
            pointers[buf.slot] = ir.Constant(u.I8P, None)
        elif buf.kind == "temp":
            pointers[buf.slot] = temps[plan.block_of[buf.slot]]
        else:
            pointers[buf.slot] = b.load(b.gep(given, [u.I64(buf.slot)]))
    slots = None                                # every slot's pointer, for forked tasks
    if any(step == "spawn" for step, _ in lowered.steps):
        slots = b.bitcast(b.alloca(ir.ArrayType(u.I8P, max(len(lowered.buffers), 1)),
                                   name="bufs"), u.I8P.as_pointer())
        for slot, ptr in pointers.items():
            b.store(ptr, b.gep(slots, [u.I64(slot)]))
    handles = {}
    for step, arg in lowered.steps:
        if step == "kernel":
            _launch(b, kernels[arg], pointers.__getitem__, threads, dims)
        elif step == "spawn":
            task_fn = _emit_task(module, lowered, kernels, arg, f"{name}_task{arg}", threads)
            handles[arg] = emit_spawn(b, task_fn, slots)
        else:
            emit_wait(b, handles[arg])
    for t in temps:
        b.call(free, [t])
    b.ret(u.I32(OK))
    return fn

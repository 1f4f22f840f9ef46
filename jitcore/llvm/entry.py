"""The native entry of a compiled graph: `i32 <graph>_entry(PyTupleObject* arrays)`.

It lets Python make one call with a tuple of arrays: it reads `ob_item[i]` of the tuple and the
`data` field of each ndarray at the offsets below, which `jitcore.call.choice` checks at import.
It first checks that every input is an ndarray of the compiled shape, strides and dtype (and
every output writeable and apart from the inputs), so Python's fast path needs no signature
lookup of its own. Return codes: OK, OUT_OF_MEMORY (from run), SIGNATURE_MISMATCH. The input
checks are one internal function of the graph's module (emit_input_checks), which the entry
and the native fast call (below) both call.

A graph with run-time extents (jc.jit(dynamic=True)) has placeholders in its buffers'
shapes (passes/symbolic.py): the entry reads each dynamic extent from the first input that
has it, requires it to be at least 2 (sizes 0 and 1 are compiled on their own: a size-1
axis broadcasts), checks every other axis of that symbol equals it, and passes the values
to run as an i64 array.
"""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.symbolic import monomial, symbol_of

from . import irutil as u

# CPython and numpy struct offsets (64-bit); jitcore.call.choice verifies them at import
OB_TYPE_OFFSET = 8          # offsetof(PyObject, ob_type)
TUPLE_SIZE_OFFSET = 16      # offsetof(PyVarObject, ob_size)
TUPLE_ITEMS_OFFSET = 24     # offsetof(PyTupleObject, ob_item)
ARRAY_DATA_OFFSET = 16      # offsetof(PyArrayObject_fields, data)
ARRAY_ND_OFFSET = 24        # ... nd (int)
ARRAY_DIMS_OFFSET = 32      # ... dimensions (npy_intp*)
ARRAY_STRIDES_OFFSET = 40   # ... strides (npy_intp*, bytes)
ARRAY_DESCR_OFFSET = 56     # ... descr (PyArray_Descr*)
ARRAY_FLAGS_OFFSET = 64     # ... flags (int)
NPY_ARRAY_WRITEABLE = 0x0400
DESCR_BYTEORDER_OFFSET = 26  # offsetof(PyArray_Descr, byteorder) (char)
DESCR_TYPE_NUM_OFFSET = 28  # offsetof(PyArray_Descr, type_num) (int)
NDARRAY_TYPE_SYMBOL = "jitcore_ndarray_type"   # bound to &PyArray_Type when linking

OK, OUT_OF_MEMORY, SIGNATURE_MISMATCH = 0, 1, 2


def _fail_unless(b: ir.IRBuilder, cond, fail_bb):
    ok = b.append_basic_block("check.ok")
    b.cbranch(cond, ok, fail_bb)
    b.position_at_end(ok)


def _all(b: ir.IRBuilder, conds: list):
    """The conjunction of i1 values (one branch for a group of checks: fewer blocks, which
    is what the glue's fast code generator spends its time on)."""
    out = conds[0]
    for c in conds[1:]:
        out = b.and_(out, c)
    return out


def _check_array(b, item, buf, ndarray_type, fail_bb, dims):
    """Branch to fail_bb unless `item` is an ndarray of exactly buf's shape, strides and dtype
    (outputs must also be writeable). `dims`: symbol -> its i64 value (filled here from the
    first array that has it) and "array" -> the extent array (graphs with run-time extents).
    Three branches: the type (nothing else may be read from a non-array), the header (rank,
    dtype, byte order, flags: the rank bounds the dims read next), then dims and strides."""
    typ = b.load(u.gep_bytes(b, item, OB_TYPE_OFFSET, u.I8P))
    _fail_unless(b, b.icmp_unsigned("==", typ, ndarray_type), fail_bb)
    nd = b.load(u.gep_bytes(b, item, ARRAY_ND_OFFSET, u.I32))
    descr = b.load(u.gep_bytes(b, item, ARRAY_DESCR_OFFSET, u.I8P))
    type_num = b.load(u.gep_bytes(b, descr, DESCR_TYPE_NUM_OFFSET, u.I32))
    byteorder = b.load(u.gep_bytes(b, descr, DESCR_BYTEORDER_OFFSET, u.I8))
    header = [b.icmp_unsigned("==", nd, u.I32(len(buf.shape))),
              b.icmp_unsigned("==", type_num, u.I32(buf.dtype.np.num)),
              b.icmp_unsigned("!=", byteorder, u.I8(ord(">")))]
    if buf.kind == "output":
        flags = b.load(u.gep_bytes(b, item, ARRAY_FLAGS_OFFSET, u.I32))
        writeable = b.and_(flags, u.I32(NPY_ARRAY_WRITEABLE))
        header.append(b.icmp_unsigned("!=", writeable, u.I32(0)))
    _fail_unless(b, _all(b, header), fail_bb)
    if not buf.shape:
        return
    shape = b.load(u.gep_bytes(b, item, ARRAY_DIMS_OFFSET, u.I64.as_pointer()))
    conds = []
    for k, d in enumerate(buf.shape):
        got = b.load(b.gep(shape, [u.I64(k)]))
        found = monomial(d)
        if found is None:
            conds.append(b.icmp_unsigned("==", got, u.I64(d)))
        elif all(sym in dims for sym in found[1]):  # (an output's axis may be c * s * t)
            conds.append(b.icmp_unsigned("==", got, _value(b, d, dims)))
        else:                         # the symbol's value; 0 and 1 have code of their own
            assert found[0] == 1 and len(found[1]) == 1, \
                "a run-time extent first met as a multiple (passes/dynamic.py)"
            sym = found[1][0]
            conds += [b.icmp_signed(">=", got, u.I64(2)),
                      b.icmp_signed("<", got, u.I64(1 << 36))]
            b.store(got, b.gep(dims["array"], [u.I64(sym)]))   # (moot if a check fails)
            dims[sym] = got
    if 0 not in buf.shape:            # (else nothing is read: strides do not matter)
        strides = b.load(u.gep_bytes(b, item, ARRAY_STRIDES_OFFSET, u.I64.as_pointer()))
        for k, (d, st) in enumerate(zip(buf.shape, buf.strides)):
            if d > 1:                 # a size-1 axis is only ever read at index 0
                got = b.load(b.gep(strides, [u.I64(k)]))
                conds.append(b.icmp_signed("==", got, _value(b, st * buf.dtype.itemsize, dims)))
    _fail_unless(b, _all(b, conds), fail_bb)


def _value(b, n: int, dims: dict):
    """n as i64: a constant, or c times a product of dynamic extents' values (a stride
    inside them); `dims`: symbol -> its value."""
    return u.extent_value(b, n, dims.__getitem__)


def _byte_extent(b, buf, dims: dict):
    """[lo, hi) of the bytes an array of buf's layout touches, relative to its data pointer
    (None when it touches none): Python ints for a static layout, else i64 values from the
    call's dynamic extents."""
    if 0 in buf.shape:
        return None
    if all(monomial(n) is None for n in buf.shape + buf.strides):
        lo = sum((d - 1) * st for d, st in zip(buf.shape, buf.strides) if st < 0)
        hi = sum((d - 1) * st for d, st in zip(buf.shape, buf.strides) if st > 0)
        return lo * buf.dtype.itemsize, (hi + 1) * buf.dtype.itemsize
    lo, hi = u.I64(0), u.I64(buf.dtype.itemsize)
    for d, st in zip(buf.shape, buf.strides):
        last = b.sub(_value(b, d, dims), u.I64(1))
        reach = b.mul(last, _value(b, st * buf.dtype.itemsize, dims))
        if st < 0:
            lo = b.add(lo, reach)
        else:
            hi = b.add(hi, reach)
    return lo, hi


def _plus(b, base, offset):
    if isinstance(offset, int):
        return base if offset == 0 else b.add(base, u.I64(offset))
    return b.add(base, offset)


def _fail_if_overlapping(b, data: dict, inputs: list, outputs: list, fail_bb, dims: dict):
    """Outputs must not share bytes with inputs (out= aliasing an input): the slow path
    then computes into fresh memory and copies."""
    def span(buf):
        ext = _byte_extent(b, buf, dims)
        if ext is None:
            return None
        base = b.ptrtoint(data[buf.slot], u.I64)
        return _plus(b, base, ext[0]), _plus(b, base, ext[1])

    spans = {buf.slot: span(buf) for buf in inputs + outputs}
    conds = []
    for o in outputs:
        for i in inputs:
            if spans[o.slot] is not None and spans[i.slot] is not None:
                (o_lo, o_hi), (i_lo, i_hi) = spans[o.slot], spans[i.slot]
                conds.append(b.or_(b.icmp_unsigned("<=", o_hi, i_lo),
                                   b.icmp_unsigned("<=", i_hi, o_lo)))
    if conds:
        _fail_unless(b, _all(b, conds), fail_bb)


def _frame(b, lowered) -> tuple:
    """The run function's arguments as allocas (in the entry block): the pointer array of
    inputs, constants and outputs, and the i64 array of run-time extents, one entry per
    symbol (unused by static graphs)."""
    n_external = sum(1 for buf in lowered.buffers if buf.kind != "temp")
    ptrs = u.alloca_once(b, ir.ArrayType(u.I8P, max(n_external, 1)), name="ptrs")
    n_symbols = max(_symbols(lowered), default=0) + 1
    extents = u.alloca_once(b, ir.ArrayType(u.I64, n_symbols), name="extents")
    return b.bitcast(ptrs, u.I8P.as_pointer()), b.bitcast(extents, u.I64.as_pointer())


def _symbols(lowered) -> set:
    """The run-time extents' symbols (all met in inputs' shapes first)."""
    symbols = {symbol_of(d) for buf in lowered.buffers_of_kind("input") for d in buf.shape}
    symbols.discard(None)
    return symbols


def emit_input_checks(module, lowered, name):
    """`i1 check(i8** items, i8** ptrs, i64* extents)` (internal): checks input k, items[k],
    against its compiled layout as _check_array does, stores its data pointer in
    ptrs[slot] and its run-time extents in extents; returns whether all match. Emitted once
    per graph, called by both the entry and the fast call."""
    fn = ir.Function(module, ir.FunctionType(u.I1, [u.I8P.as_pointer(), u.I8P.as_pointer(),
                                                    u.I64.as_pointer()]), name=name)
    fn.linkage = "internal"
    items, ptrs, extents = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail_bb = fn.append_basic_block("mismatch")
    ndarray_type = _external(module, NDARRAY_TYPE_SYMBOL)
    dims = {"array": extents}
    for k, buf in enumerate(lowered.buffers_of_kind("input")):
        item = b.load(b.gep(items, [u.I64(k)]))
        _check_array(b, item, buf, ndarray_type, fail_bb, dims)
        b.store(b.load(u.gep_bytes(b, item, ARRAY_DATA_OFFSET, u.I8P)),
                b.gep(ptrs, [u.I64(buf.slot)]))
    b.ret(ir.Constant(u.I1, 1))
    b.position_at_end(fail_bb)
    b.ret(ir.Constant(u.I1, 0))
    return fn


def _checked_inputs(b, lowered, check, items, fail_bb) -> tuple:
    """Call the input checks (`items`: the inputs' objects, in order); on a mismatch branch
    to fail_bb. Returns the run function's arguments and the extents' dict that
    _check_array and _value read (symbol -> value, "array" -> the extent array)."""
    ptrs, extents = _frame(b, lowered)
    _fail_unless(b, b.call(check, [items, ptrs, extents]), fail_bb)
    dims = {"array": extents}
    for sym in sorted(_symbols(lowered)):
        dims[sym] = b.load(b.gep(extents, [u.I64(sym)]))
    return ptrs, dims


def _external(module, symbol):
    gv = module.globals.get(symbol)
    if gv is None:
        gv = ir.GlobalVariable(module, u.I8, symbol)
        gv.linkage = "external"
    return gv


def _tuple_items(b, tup):
    """&tup->ob_item[0]."""
    return u.gep_bytes(b, tup, TUPLE_ITEMS_OFFSET, u.I8P)


def emit_entry(module, lowered, run, name, check):
    """`i32 entry(tuple)`: check that the tuple holds inputs and outputs of exactly the
    compiled signature (inputs through `check`, emit_input_checks), outputs writeable and
    not overlapping inputs (else return SIGNATURE_MISMATCH, and Python takes its slow path);
    read the data pointers of inputs, constants and outputs and call run."""
    fn = ir.Function(module, ir.FunctionType(u.I32, [u.I8P]), name=name)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail_bb = fn.append_basic_block("mismatch")
    ndarray_type = _external(module, NDARRAY_TYPE_SYMBOL)
    tup = fn.args[0]
    n_external = sum(1 for buf in lowered.buffers if buf.kind != "temp")
    size = b.load(u.gep_bytes(b, tup, TUPLE_SIZE_OFFSET, u.I64))
    _fail_unless(b, b.icmp_unsigned("==", size, u.I64(n_external)), fail_bb)
    items = _tuple_items(b, tup)
    inputs = lowered.buffers_of_kind("input")
    # input k is tuple item k in both calls: the lowered graph's slots start with the inputs
    assert [buf.slot for buf in inputs] == list(range(len(inputs)))
    ptrs, dims = _checked_inputs(b, lowered, check, items, fail_bb)
    data = {buf.slot: b.load(b.gep(ptrs, [u.I64(buf.slot)])) for buf in inputs}
    for buf in lowered.buffers:
        if buf.kind in ("input", "temp"):           # (constants, outputs, the status buffer)
            continue
        item = b.load(b.gep(items, [u.I64(buf.slot)]))
        if buf.kind == "output":
            _check_array(b, item, buf, ndarray_type, fail_bb, dims)
        data[buf.slot] = b.load(u.gep_bytes(b, item, ARRAY_DATA_OFFSET, u.I8P))
        b.store(data[buf.slot], b.gep(ptrs, [u.I64(buf.slot)]))
    _fail_if_overlapping(b, data, inputs, lowered.buffers_of_kind("output"), fail_bb, dims)
    b.ret(b.call(run, [ptrs, dims["array"]]))
    b.position_at_end(fail_bb)
    b.ret(u.I32(SIGNATURE_MISMATCH))
    return fn


# -- the native fast call: a builtin function that allocates the output itself ---------------
# symbols bound to this process's C-API functions when linking (jitcore.compiler imports them)
PY_INCREF, PY_DECREF = "jitcore_py_incref", "jitcore_py_decref"
PY_SAVE_THREAD, PY_RESTORE_THREAD = "jitcore_py_save_thread", "jitcore_py_restore_thread"
NP_EMPTY = "jitcore_np_empty"              # numpy's PyArray_Empty(nd, dims, descr, fortran)
NP_API_EMPTY = 184                         # its index in numpy's C-API table (_ARRAY_API)
TUPLE_TYPE_SYMBOL = "jitcore_tuple_type"   # &PyTuple_Type
GIL_RELEASE_BYTES = 1 << 18                # calls that move more than this release the GIL
# the fast call's `self` tuple (built by jitcore.call.plan): what it returns on a signature
# mismatch, on a failed temporary allocation, the output's dtype (PyArray_Descr), then the
# constant arrays, then anything the function object must keep alive
FAST_SELF_MISMATCH, FAST_SELF_OOM, FAST_SELF_DESCR, FAST_SELF_CONSTS = 0, 1, 2, 3


# the fast call repeats the entry's per-array checks in IR of its own: for graphs with many
# array inputs (a 12-layer MLP with weights as arguments: 25) that cost ~40% more LLVM time
# at compile, while its gain (~1 us per call) only matters for cheap calls of a few arrays
FASTCALL_MAX_INPUTS = 8
# outputs from this size on come from the output buffer cache (jitcore/cache/outputs.py says
# why 32 MB), so a dynamic graph's fast call, which serves every batch size, leaves them to
# the Python path
LARGE_OUTPUT_BYTES = 32 << 20


def fastcall_eligible(lowered) -> bool:
    """One output buffer, no index checks and at most FASTCALL_MAX_INPUTS array inputs:
    what the native fast call handles (other graphs call through the entry)."""
    return len(lowered.buffers_of_kind("output")) == 1 and not lowered.checks \
        and len(lowered.buffers_of_kind("input")) <= FASTCALL_MAX_INPUTS


def _declare(module, name, ret, args):
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(ret, args), name)


def emit_fastcall(module, lowered, run, name, check, release_gil: bool):
    """`PyObject* fastcall(PyObject* self, PyObject* args)`, a METH_O builtin called with the
    tuple of input arrays: checks them as the entry does (`check`: emit_input_checks),
    allocates the output with numpy's PyArray_Empty, runs the graph (without the GIL when
    `release_gil`) and returns the new array; returns self[FAST_SELF_MISMATCH] (new reference) when the arguments do not have
    the compiled signature, self[FAST_SELF_OOM] when a temporary could not be allocated, and
    NULL (with numpy's MemoryError set) when the output could not."""
    fn = ir.Function(module, ir.FunctionType(u.I8P, [u.I8P, u.I8P]), name=name)
    self_, tup = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    fail_bb = fn.append_basic_block("mismatch")
    incref = _declare(module, PY_INCREF, ir.VoidType(), [u.I8P])
    decref = _declare(module, PY_DECREF, ir.VoidType(), [u.I8P])
    empty = _declare(module, NP_EMPTY, u.I8P, [u.I32, u.I64.as_pointer(), u.I8P, u.I32])
    tuple_type = _external(module, TUPLE_TYPE_SYMBOL)

    def self_item(i):
        return b.load(u.gep_bytes(b, self_, TUPLE_ITEMS_OFFSET + 8 * i, u.I8P))

    typ = b.load(u.gep_bytes(b, tup, OB_TYPE_OFFSET, u.I8P))
    _fail_unless(b, b.icmp_unsigned("==", typ, tuple_type), fail_bb)
    inputs = lowered.buffers_of_kind("input")
    size = b.load(u.gep_bytes(b, tup, TUPLE_SIZE_OFFSET, u.I64))
    _fail_unless(b, b.icmp_unsigned("==", size, u.I64(len(inputs))), fail_bb)
    ptrs, given = _checked_inputs(b, lowered, check, _tuple_items(b, tup), fail_bb)
    for k, buf in enumerate(lowered.buffers_of_kind("const")):
        data = b.load(u.gep_bytes(b, self_item(FAST_SELF_CONSTS + k), ARRAY_DATA_OFFSET, u.I8P))
        b.store(data, b.gep(ptrs, [u.I64(buf.slot)]))
    (out,) = lowered.buffers_of_kind("output")
    if all(monomial(d) is None for d in out.shape):
        dims = ir.GlobalVariable(module, ir.ArrayType(u.I64, max(len(out.shape), 1)),
                                 f"{name}.dims")
        dims.linkage, dims.global_constant = "internal", True
        dims.initializer = ir.Constant(dims.type.pointee,
                                       [u.I64(d) for d in out.shape] or [u.I64(0)])
    else:                                           # the output's shape from this call's extents
        dims = b.alloca(ir.ArrayType(u.I64, len(out.shape)), name="out_dims")
        nbytes = u.I64(out.dtype.itemsize)
        for k, d in enumerate(out.shape):
            extent = _value(b, d, given)
            b.store(extent, b.gep(dims, [u.I32(0), u.I32(k)]))
            nbytes = b.mul(nbytes, extent)
        _fail_unless(b, b.icmp_signed("<", nbytes, u.I64(LARGE_OUTPUT_BYTES)),
                     fail_bb)
    descr = self_item(FAST_SELF_DESCR)
    b.call(incref, [descr])                         # PyArray_Empty steals a reference
    result = b.call(empty, [u.I32(len(out.shape)), b.bitcast(dims, u.I64.as_pointer()),
                            descr, u.I32(0)])
    allocated = b.append_basic_block("allocated")
    null = b.append_basic_block("no_memory")
    b.cbranch(b.icmp_unsigned("==", result, ir.Constant(u.I8P, None)), null, allocated)
    b.position_at_end(null)
    b.ret(result)
    b.position_at_end(allocated)
    b.store(b.load(u.gep_bytes(b, result, ARRAY_DATA_OFFSET, u.I8P)),
            b.gep(ptrs, [u.I64(out.slot)]))
    if release_gil:
        save = _declare(module, PY_SAVE_THREAD, u.I8P, [])
        restore = _declare(module, PY_RESTORE_THREAD, ir.VoidType(), [u.I8P])
        state = b.call(save, [])
        rc = b.call(run, [ptrs, given["array"]])
        b.call(restore, [state])
    else:
        rc = b.call(run, [ptrs, given["array"]])
    ok, failed = b.append_basic_block("ok"), b.append_basic_block("failed")
    b.cbranch(b.icmp_unsigned("==", rc, u.I32(OK)), ok, failed)
    b.position_at_end(ok)
    b.ret(result)
    b.position_at_end(failed)
    b.call(decref, [result])
    oom = self_item(FAST_SELF_OOM)
    b.call(incref, [oom])
    b.ret(oom)
    b.position_at_end(fail_bb)
    mismatch = self_item(FAST_SELF_MISMATCH)
    b.call(incref, [mismatch])
    b.ret(mismatch)
    return fn

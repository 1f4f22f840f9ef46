"""Small llvmlite.ir helpers, each taking the builder first (after Numba's cgutils)."""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir

from jitcore.ir.dtypes import DType

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
I8P = I8.as_pointer()

_SCALAR = {"bool": I1, "uint8": I8, "int32": I32, "int64": I64, "float32": F32, "float64": F64}


def value_type(dtype: DType, lanes: int = 1) -> ir.Type:
    """The register type of a dtype (bool is i1), a vector when lanes > 1."""
    t = _SCALAR[dtype.name]
    return ir.VectorType(t, lanes) if lanes > 1 else t


def memory_type(dtype: DType) -> ir.Type:
    """The in-memory element type (numpy stores bool as one byte)."""
    return I8 if dtype.name == "bool" else _SCALAR[dtype.name]


def memory_type_bytes(ty: ir.Type) -> int:
    """Bytes of one element of a memory type (an integer or float type)."""
    if isinstance(ty, ir.IntType):
        return max(1, ty.width // 8)
    return {ir.HalfType: 2, ir.FloatType: 4, ir.DoubleType: 8}[type(ty)]


def lanes_of(value) -> int:
    return value.type.count if isinstance(value.type, ir.VectorType) else 1


def element_type(t: ir.Type) -> ir.Type:
    return t.element if isinstance(t, ir.VectorType) else t


def const(ty: ir.Type, value) -> ir.Constant:
    """A constant of a scalar or vector type (vectors get the value in every lane)."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def splat(builder: ir.IRBuilder, value, lanes: int):
    """Broadcast a scalar to a vector of `lanes` lanes (no-op for lanes == 1)."""
    if lanes == 1:
        return value
    vty = ir.VectorType(value.type, lanes)
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, I32(0))
    return builder.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, lanes), [I32(0)] * lanes))


def mangle(ty: ir.Type) -> str:
    """LLVM's overload suffix of a type: f32, i64, v16f32, p0, ..."""
    if isinstance(ty, ir.PointerType):
        return "p0"
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{mangle(ty.element)}"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    return f"i{ty.width}"


def declare_intrinsic(module: ir.Module, name: str, overloads: list, fnty: ir.FunctionType):
    """Declare (once) `llvm.<name>.<suffixes>`, e.g. llvm.fptosi.sat.v16i64.v16f32."""
    full = ".".join([f"llvm.{name}"] + [mangle(t) for t in overloads])
    fn = module.globals.get(full)
    return fn if fn is not None else ir.Function(module, fnty, name=full)


def intrinsic(builder: ir.IRBuilder, name: str, args: list, ret_type=None):
    """Call `llvm.<name>` overloaded on the first argument's type (e.g. llvm.sqrt.v16f32)."""
    ty = args[0].type
    fnty = ir.FunctionType(ret_type or ty, [a.type for a in args])
    return builder.call(declare_intrinsic(builder.module, name, [ty], fnty), args)


def imin(builder: ir.IRBuilder, x, y):
    """The smaller of two signed integers."""
    return builder.select(builder.icmp_signed("<", x, y), x, y)


def halves(builder: ir.IRBuilder, vec):
    """(low half, high half) of a vector's lanes (an even count)."""
    n = vec.type.count // 2
    return tuple(builder.shuffle_vector(vec, vec, ir.Constant(ir.VectorType(I32, n),
                                                              [I32(i + at) for i in range(n)]))
                 for at in (0, n))


def reduce_lanes(builder: ir.IRBuilder, vec, combine):
    """combine(a, b) over the lanes of a vector (a power of two of them) in a fixed tree,
    halves first (deterministic results); the result is a scalar."""
    n = vec.type.count
    while n > 1:
        vec, n = combine(*halves(builder, vec)), n // 2
    return builder.extract_element(vec, I32(0))


def alloca_once(builder: ir.IRBuilder, ty: ir.Type, name: str = ""):
    """An alloca in the entry block, so mem2reg can promote it whatever block we are in."""
    entry = builder.function.entry_basic_block
    with builder.goto_block(entry):
        if entry.instructions:
            builder.position_before(entry.instructions[0])
        return builder.alloca(ty, name=name)


@contextmanager
def for_range(builder: ir.IRBuilder, start, stop, step: int = 1, name: str = "i",
              partial: bool = False):
    """`for i in range(start, stop, step)` (i64, step > 0); yields i. The loop runs while
    i + step <= stop, so a vector loop with step = lanes never reads past the end; with
    `partial`, while i < stop (the last block may be short: the body clips it)."""
    fn = builder.function
    counter = alloca_once(builder, I64, name=f"{name}.addr")
    builder.store(start, counter)
    cond_bb = fn.append_basic_block(f"{name}.cond")
    body_bb = fn.append_basic_block(f"{name}.body")
    end_bb = fn.append_basic_block(f"{name}.end")
    builder.branch(cond_bb)
    builder.position_at_end(cond_bb)
    i = builder.load(counter, name=name)
    last = builder.add(i, I64(step - 1)) if step > 1 and not partial else i
    builder.cbranch(builder.icmp_signed("<", last, stop), body_bb, end_bb)
    builder.position_at_end(body_bb)
    yield i
    builder.store(builder.add(i, I64(step)), counter)
    builder.branch(cond_bb)
    builder.position_at_end(end_bb)


def gep_bytes(builder: ir.IRBuilder, ptr, offset: int, to_type: ir.Type):
    """`(to_type*)((char*)ptr + offset)`."""
    p = builder.gep(builder.bitcast(ptr, I8P), [I64(offset)])
    return builder.bitcast(p, to_type.as_pointer())


def lane_mask(builder: ir.IRBuilder, count, lanes: int):
    """<lanes x i1> with the first `count` (an i64 < lanes) lanes set."""
    iota = ir.Constant(ir.VectorType(I32, lanes), [I32(i) for i in range(lanes)])
    return builder.icmp_unsigned("<", iota, splat(builder, builder.trunc(count, I32), lanes))


def masked_load(builder: ir.IRBuilder, ptr, mask, vty: ir.VectorType):
    """llvm.masked.load: lanes off the mask read nothing and come back as zero."""
    fnty = ir.FunctionType(vty, [ptr.type, I32, mask.type, vty])
    fn = declare_intrinsic(builder.module, "masked.load", [vty, ptr.type], fnty)
    return builder.call(fn, [ptr, I32(1), mask, const(vty, 0)])


def masked_store(builder: ir.IRBuilder, value, ptr, mask):
    """llvm.masked.store: lanes off the mask write nothing.

    A narrowing integer store (value is a `trunc`) is written lane by lane instead: the x86
    backend (LLVM 22) folds trunc + masked.store into a truncating store that, with one lane
    on, writes a whole wide element (int64 -> uint8: 7 bytes past the end of the output)."""
    if isinstance(value, ir.CastInstr) and value.opname == "trunc":
        return _store_lanes(builder, value, ptr, mask)
    fnty = ir.FunctionType(ir.VoidType(), [value.type, ptr.type, I32, mask.type])
    fn = declare_intrinsic(builder.module, "masked.store", [value.type, ptr.type], fnty)
    return builder.call(fn, [value, ptr, I32(1), mask])


def _store_lanes(builder: ir.IRBuilder, value, ptr, mask):
    """Each lane on the mask stored on its own (a branch per lane)."""
    elem = value.type.element
    base = builder.bitcast(ptr, elem.as_pointer())
    for j in range(value.type.count):
        with builder.if_then(builder.extract_element(mask, I32(j))):
            lane_ptr = builder.gep(base, [I32(j)], source_etype=elem)
            builder.store(builder.extract_element(value, I32(j)), lane_ptr, align=1)


def transpose(builder: ir.IRBuilder, rows: list) -> list:
    """Transpose a square tile held as `len(rows)` vectors of as many lanes (a power of two):
    out[c][r] = rows[r][c]. Stage j swaps bit j of the row index with bit j of the lane
    index, pairing rows r and r + 2^j with two-source shuffles: log2(n) stages of n shuffles."""
    n = len(rows)
    rows = list(rows)
    half = 1
    while half < n:
        low = [c if not c & half else n + c - half for c in range(n)]    # for row r
        high = [c + half if not c & half else n + c for c in range(n)]   # for row r + half
        masks = [ir.Constant(ir.VectorType(I32, n), [I32(i) for i in m]) for m in (low, high)]
        for r in range(n):
            if r & half:
                continue
            a, b = rows[r], rows[r + half]
            rows[r] = builder.shuffle_vector(a, b, masks[0])
            rows[r + half] = builder.shuffle_vector(a, b, masks[1])
        half *= 2
    return rows


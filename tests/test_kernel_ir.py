"""The IR helpers that keep kernels small (jitcore/llvm/irutil.py): shared splat constants,
constant-folded index arithmetic, loops of 0 or 1 constant trips emitted without a loop,
and the loop ID that keeps LLVM from unrolling. Each module is checked by LLVM itself and
run where the result matters."""
import ctypes

import llvmlite.binding as llvm
import pytest
from llvmlite import ir

from jitcore.llvm import engine
from jitcore.llvm import irutil as u
from jitcore.targetinfo import select_target


def _function(name="f", args=(u.I64, u.I64)):
    module = ir.Module(name="t")
    fn = ir.Function(module, ir.FunctionType(u.I64, list(args)), name=name)
    return module, fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _verified(module) -> str:
    text = str(module)
    llvm.parse_assembly(text).verify()
    return text


def _run(module, name, *args):
    """Compile (O3) and call an i64 function of i64 arguments."""
    target = select_target()
    module.triple, module.data_layout = target.triple, engine.machine(target).data_layout
    lib = engine.compile_ir(_verified(module), [name], target)
    f = ctypes.CFUNCTYPE(ctypes.c_int64, *[ctypes.c_int64] * len(args))(lib.addresses[name])
    return f(*args), lib


def test_vector_constants_are_shared_and_written_as_splats():
    v16 = ir.VectorType(u.F32, 16)
    assert u.const(v16, 0.5) is u.const(v16, 0.5)
    assert u.const(v16, 0.0) is not u.const(v16, -0.0)        # different bits
    assert u.const(ir.VectorType(u.F64, 16), 0.5) is not u.const(v16, 0.5)
    assert str(u.const(v16, 0.5)) == "<16 x float> splat (float 0x3fe0000000000000)"
    assert u.const(u.F32, 0.5).type == u.F32                  # scalars as before
    module, fn, b = _function(args=())
    v = b.fadd(u.const(v16, -0.0), u.const(v16, 1.5))
    b.ret(b.fptosi(b.extract_element(b.fmul(v, u.const(v16, 2.0)), u.I32(3)), u.I64))
    assert _run(module, "f")[0] == 3


@pytest.mark.parametrize("x, y", [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (0, 5)])
def test_folded_arithmetic_matches_llvm(x, y):
    module, fn, b = _function(args=(u.I64, u.I64))
    folded = [op(b, u.I64(x), u.I64(y)) for op in (u.add, u.sub, u.mul, u.sdiv)]
    assert all(u.constant_int(v) is not None for v in folded)
    dynamic = [u.add(b, *fn.args), u.sub(b, *fn.args), u.mul(b, *fn.args),
               u.sdiv(b, *fn.args)]
    # both forms packed into one i64: sum of (folded - dynamic) ** 2 over the four ops
    total = u.I64(0)
    for f, d in zip(folded, dynamic):
        diff = b.sub(f, d)
        total = b.add(total, b.mul(diff, diff))
    b.ret(total)
    assert _run(module, "f", x, y)[0] == 0


def test_folding_keeps_identities_cheap():
    module, fn, b = _function()
    a = fn.args[0]
    assert u.add(b, a, u.I64(0)) is a and u.add(b, u.I64(0), a) is a
    assert u.mul(b, a, u.I64(1)) is a and u.sdiv(b, a, u.I64(1)) is a
    assert u.sub(b, a, u.I64(0)) is a
    assert not b.block.instructions                            # nothing emitted


@pytest.mark.parametrize("lo, hi, step, partial, trips", [
    (0, 0, 1, False, 0), (3, 2, 1, False, 0), (0, 15, 16, False, 0), (0, 15, 16, True, 1),
    (0, 16, 16, False, 1), (5, 6, 1, False, 1), (0, 32, 16, False, 2), (0, 7, 2, True, 4),
])
def test_constant_loops_of_zero_or_one_trip_are_not_loops(lo, hi, step, partial, trips):
    module, fn, b = _function(args=())
    count = u.alloca_once(b, u.I64)
    b.store(u.I64(0), count)
    with u.for_range(b, u.I64(lo), u.I64(hi), step, name="i", partial=partial) as i:
        b.store(b.add(b.load(count), b.add(i, u.I64(1000))), count)
    b.ret(b.load(count))
    text = _verified(module)
    assert ("i.cond" in text) == (trips > 1)
    expected = sum(i + 1000 for i in range(lo, hi, step) if partial or i + step <= hi)
    assert _run(module, "f")[0] == expected


def test_unroll_false_tags_the_loop_with_a_loop_id_llvm_accepts():
    for unroll in (True, False):
        module, fn, b = _function(args=())
        total = u.alloca_once(b, u.I64)
        b.store(u.I64(0), total)
        with u.for_range(b, u.I64(0), u.I64(8), 1, name="i", unroll=unroll) as i:
            b.store(b.add(b.load(total), b.mul(i, i)), total)
        b.ret(b.load(total))
        text = _verified(module)
        assert ("llvm.loop.unroll.disable" in text) == (not unroll)
        assert _run(module, "f")[0] == sum(i * i for i in range(8))

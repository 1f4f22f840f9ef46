"""The graph's own LLVM module (graph_module's run function, entry.py's input checks, native
entry and fast call) is compiled with the GLUE pipeline (engine.py: no IR passes, fast
instruction selection), its kernels with KERNEL, or TILED for kinds that unroll their own
micro-kernels (GEMM, conv); the entry and the fast call accept
exactly the compiled signature and refuse every other, for every dtype, arity (below and
above the fast call's limit), rank, constants and outputs.

The slow path recovers from a refused signature (it hands the data pointers over itself), so
results alone would not show an entry that refuses everything: these tests call the entry
directly."""
from __future__ import annotations

import ctypes
import functools
import operator

import numpy as np
import pytest

import jitcore as jc
from helpers import ALL_DTYPES, BOOL, F32, F64, I32, assert_close, make, rng_for
from jitcore.call.choice import NATIVE_EMPTY_OK, NATIVE_LAYOUT_OK
from jitcore.call.plan import MISMATCH
from jitcore.llvm import engine
from jitcore.llvm.entry import FASTCALL_MAX_INPUTS, OK, SIGNATURE_MISMATCH
from jitcore.targetinfo import select_target

pytestmark = pytest.mark.skipif(not NATIVE_LAYOUT_OK, reason="no native entry here")


def _plan(f, args):
    f(*args)
    f(*args)
    (plan,) = f._plans.values()
    return plan


def _product(*xs):
    return functools.reduce(operator.mul, xs)


def _product_and_square(*xs):
    return _product(*xs), xs[0] * xs[0]


def _reference(xs, two_outputs: bool):
    p = functools.reduce(operator.mul, xs)
    return (p, xs[0] * xs[0]) if two_outputs else (p,)


def test_the_graph_module_is_glue_and_the_kernels_are_optimized():
    x, w = make((16, 32), F32, rng=rng_for("glue")), make((32, 8), F32, rng=rng_for("glue w"))
    f = jc.jit(lambda a, b: jc.gelu(a @ b) + jc.exp(a).sum(axis=1, keepdims=True))
    compiled = f._compiled((x, w))
    library = compiled.library
    assert library.pipelines[-1] == "glue"
    # the GEMM (gelu in its epilogue) is tiled, the row sum of exp a plain kernel
    assert len(library.pipelines) >= 3 and set(library.pipelines[:-1]) == {"kernel", "tiled"}
    parts = library._optimized_parts
    # the glue goes to the code generator as generated; the kernels went through LLVM's passes
    assert compiled.llvm_ir.endswith(parts[-1]) and "_entry" in parts[-1]
    assert all(p not in compiled.llvm_ir for p in parts[:-1])
    assert "ret" in compiled.asm()


def test_each_module_is_compiled_at_the_level_it_declares(monkeypatch):
    """The same function, declared KERNEL (by default) and GLUE: two objects (distinct
    in-memory and disk keys), machine code from target machines of level 3 and 0, equal
    results."""
    target = select_target()
    mach = engine.machine(target)
    levels = []
    codegen = engine._Machine.codegen
    monkeypatch.setattr(engine._Machine, "codegen",
                        lambda self, level: levels.append(level) or codegen(self, level))
    monkeypatch.setattr(engine, "OBJECTS", engine.ObjectCache())
    results = {}
    for pipeline in (engine.KERNEL, engine.GLUE):
        name = f"jc_test_level_{pipeline.name}"
        text = (f'target triple = "{target.triple}"\n'
                f'target datalayout = "{mach.data_layout}"\n'
                f'define i64 @"{name}"(i64 %a, i64 %b) {{\n'
                f'  %c = mul i64 %a, %b\n  %d = add i64 %c, 7\n  ret i64 %d\n}}\n')
        if pipeline is engine.GLUE:
            text = engine.with_pipeline(text, engine.GLUE)
        assert engine.pipeline_of(text) is pipeline
        before = engine.STATS["modules_compiled"]
        levels.clear()
        library = engine.compile_ir(text, [name], target)
        assert engine.STATS["modules_compiled"] == before + 1    # not the other's object
        assert levels == [pipeline.codegen_level]
        assert library.pipelines == (pipeline.name,)
        fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(
            library.addresses[name])
        results[pipeline.name] = [fn(a, b) for a, b in [(3, 4), (-5, 6), (1 << 40, 3)]]
        assert "ret" in library.asm()
    assert results["kernel"] == results["glue"] == [19, -23, 3 * (1 << 40) + 7]
    assert engine.GLUE.codegen_level < engine.KERNEL.codegen_level


def test_the_disk_cache_key_tells_the_pipelines_apart():
    from jitcore.cache import disk as diskcache
    target = select_target()
    text = "define void @f() {\n  ret void\n}\n"
    keys = {diskcache.key(t, target.key(), ["f"])
            for t in (text, engine.with_pipeline(text, engine.GLUE))}
    assert len(keys) == 2


def _variants(a: np.ndarray) -> list:
    """Arrays that must be refused in a's place: (label, value)."""
    other_dtype = np.float64 if a.dtype != np.float64 else np.float32
    out = [("dtype", a.astype(other_dtype)),
           ("rank", a.reshape(a.shape + (1,))),
           ("list", a.tolist()),
           ("scalar", 1.0)]
    if a.ndim:
        out.append(("shape", np.resize(a, (a.shape[0] + 1,) + a.shape[1:])))
    if a.dtype.itemsize > 1:                    # (one-byte types have no byte order)
        out.append(("byte order", a.astype(a.dtype.newbyteorder(">"))))
    if a.ndim == 2:
        out.append(("strides", np.asfortranarray(a)))
    if a.ndim and a.shape[0] > 1:
        out.append(("step", np.repeat(a, 2, axis=0)[::2]))
    return out


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("arity", [1, 3, FASTCALL_MAX_INPUTS + 2])
@pytest.mark.parametrize("shape", [(), (7,), (5, 6)])
@pytest.mark.parametrize("two_outputs", [False, True], ids=["one output", "two outputs"])
def test_the_entry_takes_its_signature_and_refuses_any_other(dtype, arity, shape, two_outputs):
    rng = rng_for("entry", dtype.name, arity, shape, two_outputs)
    xs = [np.asarray(make(shape, dtype, rng=rng, low=-3 if dtype.kind == "f" else None,
                          high=3 if dtype.kind == "f" else None)) for _ in range(arity)]
    f = jc.jit(_product_and_square if two_outputs else _product)
    plan = _plan(f, xs)
    want = _reference([x.astype(np.float64) if dtype.kind == "f" else x for x in xs],
                      two_outputs)
    exact = dtype.kind != "f"

    def outputs():
        return [np.full(shape, 1, dtype) for _ in want]

    def call(args, outs):
        return plan.entry(tuple(args) + plan.consts + tuple(outs))

    outs = outputs()
    assert call(xs, outs) == OK
    for got, ref in zip(outs, want):
        assert got.dtype == dtype
        assert_close(got, ref.astype(dtype) if exact else ref, dtype, exact=exact)
    for k in sorted({0, arity - 1}):
        for label, bad in _variants(xs[k]):
            outs = outputs()
            args = xs[:k] + [bad] + xs[k + 1:]
            assert call(args, outs) == SIGNATURE_MISMATCH, (k, label)
            assert all((o == 1).all() for o in outs), label       # nothing was written
    assert call(xs[:-1], outputs()) == SIGNATURE_MISMATCH             # tuple length
    assert call(xs + [xs[0]], outputs()) == SIGNATURE_MISMATCH
    readonly = outputs()
    readonly[0].flags.writeable = False
    assert call(xs, readonly) == SIGNATURE_MISMATCH
    for label, bad in _variants(outputs()[0]):
        if label != "scalar":
            assert call(xs, [bad] + outputs()[1:]) == SIGNATURE_MISMATCH, label
    if shape != ():
        aliased = outputs()
        aliased[0] = xs[arity - 1]                    # out= sharing an input's bytes
        assert call(xs, aliased) == SIGNATURE_MISMATCH


@pytest.mark.skipif(not NATIVE_EMPTY_OK, reason="no native fast call here")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("arity", [1, 2, FASTCALL_MAX_INPUTS])
def test_the_fast_call_takes_its_signature_and_refuses_any_other(dtype, arity):
    rng = rng_for("fast", dtype.name, arity)
    xs = [make((4, 9), dtype, rng=rng) for _ in range(arity)]
    plan = _plan(jc.jit(_product), xs)
    assert type(plan.fast).__name__ == "builtin_function_or_method"
    got = plan.fast(tuple(xs))
    (want,) = _reference(xs, False)
    assert got.dtype == dtype
    assert_close(got, want, dtype, exact=True)
    for k in sorted({0, arity - 1}):
        for label, bad in _variants(xs[k]):
            assert plan.fast(tuple(xs[:k] + [bad] + xs[k + 1:])) is MISMATCH, (k, label)
    assert plan.fast(tuple(xs[:-1])) is MISMATCH
    assert plan.fast(list(xs)) is MISMATCH                      # not a tuple


@pytest.mark.parametrize("dtype", [F32, F64, I32, BOOL], ids=str)
def test_constants_temps_and_two_threads(dtype):
    """The run function's temporaries, a captured constant array and the pool (2 threads,
    chunks of the kernels' range loop) through the glue, against numpy."""
    rng = rng_for("temps", dtype.name)
    a, b = make((300, 257), dtype, rng=rng), make((300, 257), dtype, rng=rng)
    c = make((257,), dtype, rng=rng)
    if dtype == BOOL:
        def fn(x, y):
            return (x & y).sum(axis=1), x | c
    else:
        def fn(x, y):
            return jc.maximum(x * y, c).sum(axis=1), x - c
    f = jc.jit(fn, num_threads=2)
    want = ((a & b).sum(axis=1), a | c) if dtype == BOOL else \
        (np.maximum(a * b, c).astype(np.float64).sum(axis=1), a - c)
    for _ in range(3):
        got = f(a, b)
        assert_close(got[0], want[0], got[0].dtype, exact=dtype != F32 and dtype != F64,
                     scale=np.abs(np.maximum(a * b, c)).astype(np.float64).sum(axis=1)
                     if dtype.kind == "f" else None)
        assert_close(got[1], want[1], dtype, exact=True)

"""The public API: out=, several outputs, inputs and constants as outputs, jc.Graph + jc.compile,
tracing errors, caching and retracing, argument conversion, unsupported dtypes, and the
inspection methods (graph, kernels, explain, llvm_ir, asm)."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import BOOL, F32, F64, I32, assert_close, assert_same, f64, make, rng_for


@jc.jit
def affine(x, y):
    return x * 2.0 + y


@jc.jit
def transpose_plus_one(x):
    return x.T + 1.0


@jc.jit
def two_outputs(x, y):
    return x + y, (x * y).sum(axis=1)


def _xy(shape=(6, 5), dtype=F32, key="xy"):
    rng = rng_for(key, shape)
    return make(shape, dtype, rng=rng), make(shape, dtype, rng=rng)


# ---- out= -------------------------------------------------------------------------------

def test_out_returns_the_same_object_with_the_values():
    x, y = _xy()
    out = np.empty((6, 5), np.float32)
    r = affine(x, y, out=out)
    assert r is out
    assert_close(out, f64(x) * 2.0 + f64(y), F32)
    # again, with the fast path warm
    out2 = np.full((6, 5), np.nan, np.float32)
    assert affine(x, y, out=out2) is out2
    assert_close(out2, f64(x) * 2.0 + f64(y), F32)


def test_out_wrong_shape_is_a_shape_error():
    x, y = _xy()
    with pytest.raises(jc.ShapeError, match=r"has shape \(5, 6\), expected \(6, 5\)"):
        affine(x, y, out=np.empty((5, 6), np.float32))
    with pytest.raises(jc.ShapeError, match=r"has shape \(30,\), expected \(6, 5\)"):
        affine(x, y, out=np.empty(30, np.float32))


def test_out_wrong_dtype_is_a_dtype_error():
    x, y = _xy()
    with pytest.raises(jc.DTypeError, match="has dtype float64, expected float32"):
        affine(x, y, out=np.empty((6, 5), np.float64))
    with pytest.raises(jc.DTypeError, match="must be a numpy array, got bytearray"):
        affine(x, y, out=bytearray(120))              # not an ndarray


def test_out_read_only_is_a_value_error():
    x, y = _xy()
    out = np.empty((6, 5), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError):
        affine(x, y, out=out)


def test_out_non_contiguous():
    x, y = _xy()
    big = np.zeros((6, 10), np.float32)
    view = big[:, ::2]
    r = affine(x, y, out=view)
    assert r is view
    assert_close(big[:, ::2], f64(x) * 2.0 + f64(y), F32)
    assert np.all(big[:, 1::2] == 0)                 # nothing written between the elements
    fort = np.asfortranarray(np.zeros((6, 5), np.float32))
    affine(x, y, out=fort)
    assert_close(fort, f64(x) * 2.0 + f64(y), F32)


def test_out_aliasing_an_input_transposed():
    """f(x, out=x) where the result reads elements that the write would clobber."""
    x = make((7, 7), F32, rng=rng_for("alias"))
    ref = f64(x).T + 1.0
    r = transpose_plus_one(x, out=x)
    assert r is x
    assert_close(x, ref, F32)


def test_out_aliasing_an_input_elementwise_and_partially():
    x, y = _xy(key="alias2")
    ref = f64(x) * 2.0 + f64(y)
    affine(x, y, out=y)
    assert_close(y, ref, F32)
    # out overlapping a shifted view of the input
    buf = make(40, F32, rng=rng_for("alias3"))
    src = buf[:30].reshape(6, 5)
    dst = buf[10:40].reshape(6, 5)
    ref = f64(src) * 2.0 + f64(src)
    affine(src, src, out=dst)
    assert_close(buf[10:40].reshape(6, 5), ref, F32)


def test_out_with_several_outputs():
    x, y = _xy()
    o1, o2 = np.empty((6, 5), np.float32), np.empty(6, np.float32)
    r = two_outputs(x, y, out=(o1, o2))
    assert isinstance(r, tuple) and r[0] is o1 and r[1] is o2
    assert_close(o1, f64(x) + f64(y), F32)
    # a sum of 5 products: rounding errors relative to the sum of |products|
    assert_close(o2, (f64(x) * f64(y)).sum(axis=1), F32,
                 scale=np.abs(f64(x) * f64(y)).sum(axis=1))
    r = two_outputs(x, y, out=[o1, o2])              # a list works too
    assert r[0] is o1 and r[1] is o2
    with pytest.raises(jc.ShapeError, match=r"needs 2 array\(s\), got 1"):
        two_outputs(x, y, out=(o1,))
    with pytest.raises(jc.ShapeError, match=r"needs 2 array\(s\), got 1"):
        two_outputs(x, y, out=o1)


def test_out_same_value_returned_twice():
    f = jc.jit(lambda x: (x * 3.0, x * 3.0))
    x = make(9, F64, rng=rng_for("twice"))
    a, b = np.empty(9), np.empty(9)
    f(x, out=(a, b))
    assert_close(a, x * 3.0, F64)
    assert_close(b, x * 3.0, F64)
    g = jc.jit(lambda x: (lambda y: (y, y))(x * 3.0))
    p, q = g(x)
    assert_close(p, x * 3.0, F64)
    assert_close(q, x * 3.0, F64)


# ---- outputs ----------------------------------------------------------------------------

def test_several_outputs_are_a_tuple():
    x, y = _xy()
    r = two_outputs(x, y)
    assert isinstance(r, tuple) and len(r) == 2
    r = jc.jit(lambda x: [x + 1.0, x - 1.0])(x)
    assert isinstance(r, tuple) and len(r) == 2
    assert_close(r[1], f64(x) - 1.0, F32)


def test_returning_an_input_unchanged():
    x, y = _xy()
    r = jc.jit(lambda x, y: y)(x, y)
    assert isinstance(r, np.ndarray)
    assert_close(r, y, F32, exact=True)
    a, b = jc.jit(lambda x, y: (x, x * 2.0))(x, y)
    assert_close(a, x, F32, exact=True)
    assert_close(b, f64(x) * 2.0, F32)
    t = jc.jit(lambda x: x.T)(x)                      # a view of an input
    assert_close(t, x.T, F32, exact=True)


def test_returning_constants():
    x, _ = _xy()
    r = jc.jit(lambda x: 3.0)(x)
    assert isinstance(r, np.ndarray) and r.shape == () and r == 3.0
    r = jc.jit(lambda x: np.arange(4, dtype=np.int32))(x)
    assert_close(r, np.arange(4, dtype=np.int32), I32)
    c, s = jc.jit(lambda x: (np.float32(2.5), x.sum()))(x)
    assert c == 2.5 and c.dtype == F32
    assert_close(s, f64(x).sum(), F32, scale=np.abs(f64(x)).sum())


def test_constant_arrays_inside_functions():
    w = make((5,), F32, rng=rng_for("const-w"))
    x, _ = _xy()
    f = jc.jit(lambda x: x * w + np.arange(5, dtype=np.float32))
    assert_close(f(x), f64(x) * f64(w) + np.arange(5), F32)


def test_returning_nothing_is_a_trace_error():
    x, _ = _xy()
    with pytest.raises(jc.TraceError):
        jc.jit(lambda x: None)(x)
    with pytest.raises(jc.TraceError):
        jc.jit(lambda x: ())(x)


# ---- jc.Graph + jc.compile ----------------------------------------------------------------

def test_graph_builder_and_compile():
    g = jc.Graph()
    x = g.input("x", (4, 8), jc.float32)
    y = g.input("y", (8,), np.float32)
    g.output(jc.exp(x) * y, (x + y).sum(axis=0))
    fn = jc.compile(g)
    a = make((4, 8), F32, rng=rng_for("graph-a"), low=-2, high=2)
    b = make((8,), F32, rng=rng_for("graph-b"))
    r1, r2 = fn(a, b)
    assert_close(r1, np.exp(f64(a)) * f64(b), F32)
    assert_close(r2, (f64(a) + f64(b)).sum(axis=0), F32)
    assert "x" in g.text() and "f32[4,8]" in g.text()


def test_graph_single_output():
    g = jc.Graph("single")
    x = g.input("x", (3,), jc.float64)
    g.output(jc.relu(x))
    r = jc.compile(g)(np.array([-1.0, 0.5, 2.0]))
    assert isinstance(r, np.ndarray)
    assert_close(r, np.array([0.0, 0.5, 2.0]), F64, exact=True)


@pytest.mark.parametrize("bad, exc", [
    (np.ones((4, 7), np.float32), jc.ShapeError),
    (np.ones((4, 8, 1), np.float32), jc.ShapeError),
    (np.ones(32, np.float32), jc.ShapeError),
    (np.ones((4, 8), np.float64), jc.DTypeError),
    (np.ones((4, 8), np.int32), jc.DTypeError),
], ids=["wrong-shape", "wrong-rank", "flat", "float64", "int32"])
def test_compiled_graph_rejects_wrong_arguments(bad, exc):
    g = jc.Graph()
    x = g.input("xin", (4, 8), jc.float32)
    g.output(x * 2.0)
    fn = jc.compile(g)
    fn(np.ones((4, 8), np.float32))                  # warm the fast path with a good call
    with pytest.raises(exc) as info:
        fn(bad)
    assert "xin" in str(info.value)                  # the message names the argument


def test_compiled_graph_wrong_argument_count():
    g = jc.Graph()
    x = g.input("x", (3,), jc.float32)
    g.output(x + 1.0)
    fn = jc.compile(g)
    with pytest.raises(jc.ShapeError):
        fn(np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(jc.ShapeError):
        fn()


def test_tracer_from_another_trace_is_a_clear_error():
    """A tracer leaked from one trace (or one Graph's input used in another Graph) is not an
    input of the new graph: a jitcore error, not an internal KeyError."""
    leaked = []

    @jc.jit
    def keep(x):
        leaked.append(x)
        return x + 1.0
    keep(np.ones(3))
    with pytest.raises(jc.JitcoreError):
        jc.jit(lambda y: y + leaked[0])(np.ones(3))
    g1 = jc.Graph("g1")
    a = g1.input("a", (3,), jc.float32)
    g2 = jc.Graph("g2")
    b = g2.input("b", (3,), jc.float32)
    g2.output(a + b)
    with pytest.raises(jc.JitcoreError):
        jc.compile(g2)(np.ones(3, np.float32))


def test_graph_input_negative_dimension_is_a_shape_error():
    with pytest.raises(jc.ShapeError):
        g = jc.Graph()
        x = g.input("x", (-1, 3), jc.float32)
        g.output(x + 1.0)
        jc.compile(g)(np.ones((2, 3), np.float32))


def test_graph_without_outputs_is_an_error():
    g = jc.Graph()
    g.input("x", (3,))
    with pytest.raises(jc.JitcoreError):
        jc.compile(g)(np.ones(3, np.float32))


def test_graph_input_name_errors():
    g = jc.Graph()
    g.input("x", (3,))
    with pytest.raises(jc.ShapeError):
        g.input("x", (3,))
    with pytest.raises(ValueError):
        g.input("not a name", (3,))


def test_compiled_graph_out_and_non_contiguous_argument():
    g = jc.Graph()
    x = g.input("x", (4, 6), jc.float32)
    g.output(x * x)
    fn = jc.compile(g)
    a = make((6, 4), F32, rng=rng_for("cg-nc")).T         # non-contiguous, right shape
    out = np.empty((4, 6), np.float32)
    assert fn(a, out=out) is out
    assert_close(out, f64(a) ** 2, F32)


# ---- tracing errors --------------------------------------------------------------------------

def _if_on_value(x):
    if x.sum() > 0:
        return x
    return -x


def _while_on_value(x):
    while x.max() > 1:
        x = x / 2
    return x


TRACE_ERRORS = {
    "if": _if_on_value,
    "while": _while_on_value,
    "float()": lambda x: float(x.sum()) * x,
    "int()": lambda x: x * int(x.max()),
    "bool-and": lambda x: (x > 0) and x,
    "np.asarray": lambda x: np.asarray(x) + 1,
    "iterate": lambda x: sum(r for r in x),
    "index-by-mask": lambda x: x[x > 0],           # (x[x.argmax()] is a gather now)
    "unsupported-np-function": lambda x: np.cumprod(x),
    "ufunc-out": lambda x: np.exp(x, out=x),
    "setitem": lambda x: x.__setitem__(0, 1.0),
}


@pytest.mark.parametrize("name", list(TRACE_ERRORS))
def test_trace_errors(name):
    f = jc.jit(TRACE_ERRORS[name])
    with pytest.raises(jc.TraceError):
        f(np.ones(4, np.float32))


def test_trace_error_names_the_signature():
    f = jc.jit(_if_on_value)
    with pytest.raises(jc.TraceError) as info:
        f(np.ones((2, 3), np.float32))
    msg = str(info.value)
    assert "_if_on_value" in msg and "[2, 3]" in msg.replace("2,3", "2, 3")


def test_static_shape_facts_are_usable_while_tracing():
    def f(x):
        n = x.shape[-1]
        if x.ndim == 2 and len(x) > 1:
            return x.sum(axis=1) / n
        return x * x.size
    x = make((3, 4), F32, rng=rng_for("static"))
    assert_close(jc.jit(f)(x), f64(x).mean(axis=1), F32)
    assert x.dtype == F32


# ---- caching and retracing -------------------------------------------------------------------

def _counting(fn):
    calls = []

    def traced(*args):
        calls.append(tuple((a.shape, a.dtype) for a in args))
        return fn(*args)
    return jc.jit(traced), calls


def test_same_signature_does_not_retrace():
    f, calls = _counting(lambda x, y: x * y + 1.0)
    x, y = _xy()
    for i in range(5):
        terms = np.abs((f64(x) + i) * f64(y)) + 1.0          # x*y + 1 may cancel
        assert_close(f(x + i, y), (f64(x) + i) * f64(y) + 1.0, F32, scale=terms)
    assert len(calls) == 1


def test_different_signatures_retrace_and_stay_cached():
    f, calls = _counting(lambda x: x * 2 + 1)
    a = np.arange(6, dtype=np.float32)
    b = np.arange(8, dtype=np.float32)
    c = np.arange(6, dtype=np.int32)
    d = np.arange(6, dtype=np.float64)
    seq = [a, b, c, d, a, b, c, d, a]
    for arr in seq:
        r = f(arr)
        assert r.dtype == arr.dtype
        assert_close(r, arr * 2 + 1, arr.dtype)
    assert len(calls) == 4
    assert {c[0] for c in calls} == {((6,), F32), ((8,), F32), ((6,), I32), ((6,), F64)}


def test_layouts_are_part_of_the_signature():
    """Same shape and dtype, different strides: the results must follow each layout."""
    f, calls = _counting(lambda x: x[0] * 10.0 + x[1])
    base = make((4, 4), F32, rng=rng_for("layouts"))
    for arr in [base, base.T, base[::-1], base, base.T, np.asfortranarray(base), base[::-1]]:
        assert_close(f(arr), f64(arr)[0] * 10.0 + f64(arr)[1], F32)
    assert len(calls) <= 4


def test_fast_path_switches_between_signatures():
    """Alternate calls between signatures (the last one is the fast path)."""
    f = jc.jit(lambda x, y: x - y)
    args = [
        (np.ones(5, np.float32), np.arange(5, dtype=np.float32)),
        (np.ones(5, np.float64), np.arange(5, dtype=np.float64)),
        (np.ones((5, 1), np.float32), np.arange(5, dtype=np.float32)),
        (np.ones(5, np.float32), np.arange(10, dtype=np.float32)[::2]),
        ([1.0, 1.0], [0.0, 1.0]),
        (np.ones(5, np.int32), np.arange(5, dtype=np.int32)),
    ]
    for _ in range(2):
        for x, y in args:
            ref = np.subtract(x, y)
            assert_close(f(x, y), ref, ref.dtype)


class _Subclass(np.ndarray):
    """An ndarray subclass that means nothing more than its values."""


def test_fast_path_rejects_byte_swapped_unaligned_and_subclass_arguments():
    """After a warm call, arguments of the same shape and strides but another byte order, an
    unaligned buffer or an ndarray subclass must still give numpy's values."""
    f = jc.jit(lambda x: x * 2.0 + 1.0)
    x = np.arange(8, dtype=np.float32)
    assert_close(f(x), x * 2.0 + 1.0, F32)
    swapped = np.arange(8, dtype=">f4")
    assert_close(f(swapped), np.arange(8) * 2.0 + 1.0, F32)
    assert_close(f(x), x * 2.0 + 1.0, F32)
    unaligned = np.zeros(8 * 4 + 1, np.uint8)[1:].view(np.float32)
    unaligned[:] = np.arange(8)[::-1]
    assert_close(f(unaligned), np.arange(8)[::-1] * 2.0 + 1.0, F32)
    m = np.arange(8, dtype=np.float32).view(_Subclass)     # (masked arrays are refused)
    r = f(m)
    assert type(r) is np.ndarray
    assert_close(r, np.arange(8) * 2.0 + 1.0, F32)


def test_fast_path_out_aliasing_after_a_warm_call():
    """The warm out= path must still notice an out that aliases an input or is strided."""
    x = make((7, 7), F32, rng=rng_for("warm-alias"))
    o = np.empty((7, 7), np.float32)
    transpose_plus_one(x, out=o)                  # warm: a separate, contiguous out
    transpose_plus_one(x, out=o)
    ref = f64(x).T + 1.0
    transpose_plus_one(x, out=x)                  # same shapes, now aliasing the input
    assert_close(x, ref, F32)
    big = np.zeros((7, 14), np.float32)
    y = make((7, 7), F32, rng=rng_for("warm-alias2"))
    transpose_plus_one(y, out=big[:, ::2])        # same shape, strided out
    assert_close(big[:, ::2], f64(y).T + 1.0, F32)
    assert np.all(big[:, 1::2] == 0)


def test_inputs_are_never_written():
    x, y = _xy(key="never-written")
    x0, y0 = x.copy(), y.copy()
    out = np.empty((6, 5), np.float32)
    a, b = f64(x), f64(y)
    assert_close(affine(x, y), a * 2.0 + b, F32)
    assert_close(affine(x, y, out=out), a * 2.0 + b, F32)
    s, p = two_outputs(x, y)
    assert_close(s, a + b, F32)
    assert_close(p, (a * b).sum(axis=1), F32, scale=np.abs(a * b).sum(axis=1))
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    z = np.abs(a - a.max(axis=-1, keepdims=True))        # exp's error is relative to |x - max|
    ref = e / e.sum(axis=-1, keepdims=True)
    assert_close(jc.jit(lambda x: jc.softmax(x))(x), ref, F32, scale=ref * (z + 5))
    assert_same(jc.jit(lambda x: x.T)(x), x.T)
    assert np.array_equal(x, x0) and np.array_equal(y, y0)
    r = jc.jit(lambda x, y: x)(x, y)              # returning an input: writing the result
    r[...] = 0                                     # must not write the caller's array
    assert np.array_equal(x, x0)


def test_wrong_argument_count_after_warm_call():
    x, y = _xy()
    affine(x, y)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        affine(x)                                    # as Python says it, not a crash
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3"):
        affine(x, y, x)


def test_concurrent_calls_from_threads():
    from concurrent.futures import ThreadPoolExecutor
    f = jc.jit(lambda x: (jc.exp(x * 0.1) + x.sum(axis=1, keepdims=True)) * 0.5)
    arrays = [make((33, 65), F32, rng=rng_for("threads", i)) for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(f, arrays))
    for x, r in zip(arrays, results):
        ref = (np.exp(f64(x) * 0.1) + f64(x).sum(axis=1, keepdims=True)) * 0.5
        # the row sum of 65 terms: its errors are relative to sum|x| (times sqrt(65))
        terms = np.exp(f64(x) * 0.1) + np.abs(f64(x)).sum(axis=1, keepdims=True) * 8
        assert_close(r, ref, F32, scale=terms)


def test_reductions_are_deterministic():
    x = make((3, 1_000_003), F32, rng=rng_for("determinism"))
    f = jc.jit(lambda x: (x.sum(axis=1), x.sum(), x.mean(axis=0).sum()))
    first = f(x)
    a = f64(x)
    n = x.shape[1]
    refs = (a.sum(axis=1), a.sum(), a.mean(axis=0).sum())
    scales = (np.abs(a).sum(axis=1) * np.sqrt(n), np.abs(a).sum() * np.sqrt(x.size),
              np.abs(a).mean(axis=0).sum() * np.sqrt(n))
    for got, ref, scale in zip(first, refs, scales):           # numpy's values ...
        assert_close(got, ref, F32, scale=scale)
    for _ in range(3):                                         # ... and the same bits again
        for a, b in zip(first, f(x)):
            assert_same(b, a)


def test_inspection_does_not_break_calls():
    x, y = _xy()
    affine.kernels(x, y)
    affine.graph(jc.spec((3, 3)), jc.spec((3, 3)))
    assert_close(affine(x, y), f64(x) * 2.0 + f64(y), F32)


# ---- argument conversion -----------------------------------------------------------------------

def test_lists_and_python_scalars_as_arguments():
    f = jc.jit(lambda x, s: x * s)
    r = f([1.0, 2.0, 3.0], 2.0)
    assert_close(r, np.array([2.0, 4.0, 6.0]), F64, exact=True)
    r = f([1, 2, 3], 2)
    assert_close(r, np.array([2, 4, 6]), np.int64)
    r = f([[True, False]], True)
    assert_close(r, np.array([[True, False]]), BOOL)
    r = f(np.arange(3, dtype=np.uint8), 2)            # a Python int argument is weak (NEP 50)
    assert_close(r, np.arange(3, dtype=np.uint8) * 2, np.uint8)
    r = f(np.arange(3, dtype=np.float32), np.float32(0.5))
    assert_close(r, np.arange(3) * 0.5, F32, exact=True)


def test_eager_ops_on_lists_and_scalars():
    assert_close(jc.exp([0.0, 1.0]), np.exp([0.0, 1.0]), F64)
    assert_close(jc.maximum([1, 5, 3], 2), np.maximum([1, 5, 3], 2), np.int64)
    assert_close(jc.add(np.float32(1.5), np.float32(2.0)), np.array(3.5, np.float32), F32)


@pytest.mark.parametrize("first, second", [(7, 7.0), (9.0, 9), (1, True), (False, 0)],
                         ids=["int-then-float", "float-then-int", "int-then-bool",
                              "bool-then-int"])
def test_eager_ops_distinguish_python_scalar_types(first, second):
    """Equal Python scalars of different types (1, 1.0, True) promote differently (NEP 50):
    an eager call must not reuse the function traced for the other type."""
    x = np.arange(4, dtype=np.int32)
    b = np.array([True, False, True])
    for v in (first, second):
        with np.errstate(all="ignore"):
            ref = np.add(x, v)
            assert_close(jc.add(x, v), ref, ref.dtype, msg=f"jc.add(int32, {v!r})")
            ref = np.multiply(b, v)
            assert_close(jc.mul(b, v), ref, ref.dtype, msg=f"jc.mul(bool, {v!r})")
            ref = np.where(b, v, v)
            assert_close(jc.where(b, v, v), ref, ref.dtype, msg=f"jc.where(c, {v!r}, {v!r})")
            ref = np.power(x, v) if not isinstance(v, bool) else np.power(x, int(v))
            if not isinstance(v, bool):
                assert_close(jc.pow(x, v), ref, ref.dtype, msg=f"jc.pow(int32, {v!r})")


def test_jit_python_scalar_arguments_of_different_types():
    f = jc.jit(lambda x, s: x * s)
    x = np.arange(4, dtype=np.int32)
    for s in (2, 2.0, True, 2, 2.0):
        ref = x * s                                  # weak Python scalars (NEP 50)
        assert_close(f(x, s), ref, ref.dtype, msg=repr(s))


def test_distinct_constant_arrays_are_not_mixed_up_by_the_cache():
    def make_fn(w):
        def fn(x):
            return x * w
        return jc.jit(fn)
    x = np.ones(1000, np.float32)
    w1 = np.arange(1000, dtype=np.float32)
    w2 = w1.copy()
    w2[500] = -1.0
    assert make_fn(w1)(x)[500] == 500.0
    assert make_fn(w2)(x)[500] == -1.0
    assert make_fn(w1.astype(np.float64))(x).dtype == F64


def test_non_native_byte_order_and_unaligned_inputs():
    x = np.arange(6, dtype=">f4")
    r = jc.jit(lambda x: x + 1.0)(x)
    assert_close(r, np.arange(6) + 1.0, F32)
    buf = np.zeros(6 * 4 + 1, np.uint8)[1:].view(np.float32)     # unaligned
    buf[:] = np.arange(6)
    assert_close(jc.jit(lambda x: x * 2.0)(buf), np.arange(6) * 2.0, F32)


@pytest.mark.parametrize("value", [
    np.ones(3, np.float16), np.ones(3, np.complex64), np.ones(3, np.complex128),
    np.array([1, "a"], dtype=object), np.array(["a", "b"]), np.array([b"a"]),
    np.ones(3, np.int8), np.ones(3, np.int16), np.ones(3, np.uint16), np.ones(3, np.uint32),
    np.ones(3, np.uint64), np.zeros(2, dtype=[("a", np.float32)]),
    np.array(["2020-01-01"], dtype="datetime64[D]"), 1 + 2j, "text", None,
], ids=["float16", "complex64", "complex128", "object", "str", "bytes", "int8", "int16",
        "uint16", "uint32", "uint64", "structured", "datetime", "py-complex", "py-str",
        "None"])
def test_unsupported_dtypes_are_dtype_errors(value):
    f = jc.jit(lambda x: x + 1)
    with pytest.raises(jc.DTypeError):
        f(value)


def test_unsupported_dtype_in_astype_and_spec():
    with pytest.raises(jc.DTypeError):
        jc.jit(lambda x: x.astype(np.float16))(np.ones(3, np.float32))
    with pytest.raises(jc.DTypeError):
        jc.spec((3,), np.complex64)


def test_error_hierarchy():
    assert issubclass(jc.ShapeError, jc.JitcoreError) and issubclass(jc.ShapeError, ValueError)
    assert issubclass(jc.DTypeError, jc.JitcoreError) and issubclass(jc.DTypeError, TypeError)
    assert issubclass(jc.TraceError, jc.JitcoreError)
    assert issubclass(jc.CompileError, jc.JitcoreError)


def test_dtype_constants():
    assert [d.name for d in (jc.float32, jc.float64, jc.int32, jc.int64, jc.uint8, jc.bool)] == [
        "float32", "float64", "int32", "int64", "uint8", "bool"]


# ---- inspection -------------------------------------------------------------------------------

def test_graph_text_is_stable_and_describes_the_signature():
    @jc.jit
    def f(a, b):
        return jc.relu(a * b + 1.0) * 0.5
    s = jc.spec((4, 8), jc.float32)
    t1 = f.graph(s, s)
    t2 = f.graph(jc.spec((4, 8), np.float32), jc.spec((4, 8), "float32"))
    assert t1 == t2
    assert "f32[4,8]" in t1 and "relu" in t1 and "%a" in t1 and "%b" in t1
    x = np.ones((4, 8), np.float32)
    assert f.graph(x, x) == t1                      # arrays and specs give the same graph
    assert f.graph(jc.spec((2, 3), jc.float64), jc.spec((2, 3), jc.float64)) != t1


def test_kernels_records():
    @jc.jit
    def f(a, b):
        return jc.relu(a * b + 1.0) * 0.5, a.sum(axis=1)
    x = np.ones((16, 64), np.float32)
    ks = f.kernels(x, x)
    assert isinstance(ks, list) and len(ks) >= 2
    for k in ks:
        assert isinstance(k.ops, tuple) and all(isinstance(o, str) for o in k.ops) and k.ops
        assert isinstance(k.loop_nest, str) and k.loop_nest
        assert k.vector_width in (128, 256, 512)
        assert isinstance(k.vectorized, bool)
        assert isinstance(k.lanes, int) and k.lanes >= 1
        assert (k.reason is None) == k.vectorized
        if not k.vectorized:
            assert isinstance(k.reason, str) and k.reason
    assert any("mul" in k.ops for k in ks)
    assert any("sum" in k.ops for k in ks)
    assert ks[0].vectorized and ks[0].lanes == ks[0].vector_width // 32
    assert f.kernels(jc.spec((16, 64)), jc.spec((16, 64))) == ks


def test_explain_llvm_ir_and_asm():
    x = np.ones((8, 8), np.float32)
    text = affine.explain(x, x)
    assert isinstance(text, str) and "kernel" in text.lower() and "compile" in text.lower()
    ir_opt = affine.llvm_ir(x, x)
    ir_raw = affine.llvm_ir(x, x, optimized=False)
    assert "define" in ir_opt and "define" in ir_raw
    asm = affine.asm(jc.spec((8, 8)), jc.spec((8, 8)))
    assert isinstance(asm, str) and len(asm) > 100 and "ret" in asm


def _mixed_kernel(x, y):
    return (jc.gelu(x) * jc.exp(-jc.abs(y)) + jc.sigmoid(x * y), (x * y).sum(axis=-1),
            x.max(axis=0), jc.softmax(x, axis=-1), x.T + 1.0, jc.argmax(y, axis=1))


@pytest.mark.parametrize("dtype", [F32, F64, I32], ids=lambda d: d.name)
@pytest.mark.parametrize("width", [128, 256, 512])
def test_vector_width_option(width, dtype):
    """Each vector width (lanes and tails differ) gives numpy's results."""
    if jc.target_info()["max_vector_bits"] < width:
        pytest.skip("the CPU has no vectors this wide")
    rng = rng_for("vw", width, dtype.name)
    x, y = make((7, 37), dtype, rng=rng), make((7, 37), dtype, rng=rng)
    if dtype.kind == "f":
        f = jc.jit(vector_width=width)(_mixed_kernel)
        got = f(x, y)
        a, b = f64(x), f64(y)
        gelu = 0.5 * a * (1 + np.vectorize(__import__("math").erf)(a / np.sqrt(2)))
        refs = [gelu * np.exp(-np.abs(b)) + 1 / (1 + np.exp(-(a * b))), (a * b).sum(-1),
                x.max(0), np.exp(a - a.max(-1, keepdims=True))
                / np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True), a.T + 1.0,
                y.argmax(1)]
        wants = [dtype] * 5 + [np.int64]
        # per output, the magnitude of the terms it is computed from (they cancel): the sum
        # of products over its 37 terms, the softmax relative to its shifted exponent
        z = np.abs(a - a.max(-1, keepdims=True))
        scales = [np.abs(a) * np.exp(-np.abs(b)) + np.abs(a * b) + 1.0,
                  np.abs(a * b).sum(-1) * np.sqrt(37), None, refs[3] * (z + np.sqrt(37)),
                  None, None]
        for i, (g, r, w, sc) in enumerate(zip(got, refs, wants, scales)):
            assert_close(g, r, w, scale=sc, msg=f"output {i}")
    else:
        f = jc.jit(vector_width=width)(lambda x, y: (x * y - x, (x * y).sum(axis=-1),
                                                       x.max(axis=0), np.maximum(x, y).T))
        for g, r in zip(f(x, y), (x * y - x, (x * y).sum(-1), x.max(0), np.maximum(x, y).T)):
            assert_close(g, r, r.dtype)
    ks = f.kernels(x, y)
    assert all(k.vector_width == width for k in ks)
    assert any(k.vectorized and k.lanes == width // (8 * dtype.itemsize) for k in ks)


def test_invalid_vector_width():
    with pytest.raises((jc.JitcoreError, ValueError)):
        jc.jit(vector_width=100)(lambda x: x)


def test_jit_keeps_the_function_name_and_doc():
    def my_function(x):
        """Doc."""
        return x
    f = jc.jit(my_function)
    assert f.__name__ == "my_function" and f.__doc__ == "Doc."
    assert "my_function" in f.graph(jc.spec((2,)))


def test_cache_info_counts_compiles_and_hits():
    before = jc.cache_info()
    f = jc.jit(lambda x: x * 41.0 + 1.0)
    g = jc.jit(lambda x: x * 41.0 + 1.0)       # another function, the same graph
    f(np.ones(5, np.float32))
    g(np.ones(5, np.float32))
    after = jc.cache_info()
    assert after["compiles"] == before["compiles"] + 1
    assert after["hits"] >= before["hits"] + 1 and after["size"] <= after["max_size"]


def test_multi_output_kernel_values_and_shared_transcendental():
    x = make((37, 129), F32, rng=rng_for("multi"))
    f = jc.jit(lambda x: (jc.exp(x) + 1.0, jc.exp(x) * 2.0, jc.exp(x) - x, x * x))
    assert len(f.kernels(x)) == 1
    got, e = f(x), np.exp(f64(x))
    for g, want in zip(got, (e + 1.0, e * 2.0, e - f64(x), f64(x) ** 2)):
        assert_close(g, want, F32)


MASKED = np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0])
MATRIX = np.matrix([[1.0, 2.0], [3.0, 4.0]])


@pytest.mark.parametrize("x,kind", [(MASKED, "MaskedArray"), (MATRIX, "matrix")],
                         ids=["masked", "matrix"])
@pytest.mark.parametrize("call", ["jit", "eager", "second argument"])
def test_masked_arrays_and_matrices_are_refused_naming_the_type(x, kind, call):
    """np.asarray would drop a mask (silently wrong sums) or turn a matrix's `*` (a matrix
    product) into an elementwise one: a TypeError names the type instead (issue 27)."""
    calls = {"jit": lambda: jc.jit(lambda a, b: a * b)(x, x), "eager": lambda: jc.sum(x),
             "second argument": lambda: jc.add(np.asarray(x), x)}
    with pytest.raises(TypeError, match=kind):
        calls[call]()
    assert issubclass(jc.DTypeError, TypeError)

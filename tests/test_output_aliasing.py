"""Outputs are distinct arrays: never one array at two output positions, never an input.

CSE merges equal outputs (`(x * 2, x * 2)`), a function may return one value twice or return
an input; each output position still gets memory of its own (passes/lower.py), whatever
kernel computes it (pointwise, reduction, GEMM, row-fused, a forked task), for every dtype
and for empty arrays. `out=` arrays that share memory are refused: two outputs written into
the same bytes would leave one of them wrong.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import ALL_DTYPES, F32, F64, NUMERIC_DTYPES, assert_close, dtype_id, make, rng_for

SHAPES = [(), (7,), (5, 6), (4097,), (0, 3)]


def assert_distinct(outs, inputs=()):
    """No output is another output or an input, shares no byte with one, and writing into
    an output leaves every other output as it was."""
    outs = list(outs)
    for i, a in enumerate(outs):
        for b in outs[i + 1:] + list(inputs):
            assert a is not b
            assert not np.shares_memory(a, b)
    for i, a in enumerate(outs):
        before = [o.copy() for o in outs]
        if a.size:
            a[...] = np.zeros((), a.dtype) if a.dtype != np.bool_ else ~a
        for j, o in enumerate(outs):
            if j != i:
                assert np.array_equal(o, before[j], equal_nan=True)


def check_all(outs, refs, dtypes, inputs=(), **tol):
    assert isinstance(outs, tuple) and len(outs) == len(refs)
    for o, r, d in zip(outs, refs, dtypes):
        assert_close(o, r, d, **tol)
    assert_distinct(outs, inputs)


# ---- one value at several positions, by op family ------------------------------------------

# name -> (jitted body of one value v of x, numpy reference on float64, result dtype of x's)
FAMILIES = {
    "pointwise": (lambda x: x * 2 + 1, lambda r: r * 2 + 1, lambda d: d),
    "exp": (lambda x: np.exp(x), lambda r: np.exp(r), lambda d: d),
    "full sum": (lambda x: x.sum(), lambda r: r.sum(), lambda d: d),
    "axis sum": (lambda x: x.sum(axis=-1), lambda r: r.sum(axis=-1), lambda d: d),
    "keepdims max": (lambda x: x.max(axis=0, keepdims=True),
                     lambda r: r.max(axis=0, keepdims=True), lambda d: d),
    "argmax": (lambda x: x.argmax(axis=-1), lambda r: r.argmax(axis=-1),
               lambda d: np.dtype(np.int64)),
    "transpose": (lambda x: x.T, lambda r: r.T, lambda d: d),
    "reshape": (lambda x: x.reshape(-1), lambda r: r.reshape(-1), lambda d: d),
    "compare": (lambda x: x > 0, lambda r: r > 0, lambda d: np.dtype(np.bool_)),
    "cast": (lambda x: x.astype(np.float64), lambda r: r, lambda d: F64),
}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("repeat", [2, 3])
def test_one_value_returned_at_several_positions(family, shape, repeat):
    body, ref_fn, out_dtype = FAMILIES[family]
    if family in ("axis sum", "argmax", "keepdims max") and shape == ():
        pytest.skip("no axis to reduce")
    if family in ("argmax", "keepdims max") and 0 in shape:
        pytest.skip("numpy: no identity to reduce an empty axis with")
    x = make(shape, F32, rng=rng_for("alias", family, shape))
    ref = ref_fn(x.astype(np.float64))
    # equal expressions traced twice (CSE merges them) and one traced value returned twice
    for f in (jc.jit(lambda x: tuple(body(x) for _ in range(repeat))),
              jc.jit(lambda x: (body(x),) * repeat)):
        outs = f(x)
        n = int(np.prod(shape[-1:])) if shape else 1
        check_all(outs, [ref] * repeat, [out_dtype(F32)] * repeat, [x],
                  **({"rtol": 1e-5, "atol": 1e-5 * max(n, 1)} if "sum" in family else {}))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_an_input_returned_twice_is_copied_twice(dtype, shape):
    x = make(shape, dtype, rng=rng_for("input twice", shape, str(dtype)))
    y = make(shape, dtype, rng=rng_for("input twice y", shape, str(dtype)))
    outs = jc.jit(lambda x, y: (x, y, x))(x, y)
    check_all(outs, [x, y, x], [dtype] * 3, [x, y], exact=True)
    outs = jc.jit(lambda x: [x, x])(x)                # a list comes back as a tuple too
    check_all(outs, [x, x], [dtype] * 2, [x], exact=True)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=dtype_id)
def test_equal_outputs_of_every_dtype(dtype):
    x = make((6, 9), dtype, rng=rng_for("equal outputs", str(dtype)), positive=True)
    f = jc.jit(lambda x: (x * 2, x * 2, x.sum(axis=1), x.sum(axis=1), np.maximum(x, 3),
                          np.maximum(x, 3)))
    ref_2 = x * 2                                 # numpy in the same dtype: exact for ints
    ref_sum = x.sum(axis=1)
    ref_max = np.maximum(x, 3)
    outs = f(x)
    exact = np.dtype(dtype).kind != "f"
    refs = [ref_2, ref_2, ref_sum, ref_sum, ref_max, ref_max]
    tol = {"exact": True} if exact else {"rtol": 1e-5, "atol": 1e-4}
    check_all(outs, refs, [r.dtype for r in refs], [x], **tol)


def test_constants_returned_twice():
    x = make((4, 5), F32, rng=rng_for("constant twice"))
    outs = jc.jit(lambda x: (np.float32(2.5), np.float32(2.5)))(x)
    check_all(outs, [np.float32(2.5)] * 2, [F32] * 2, [x])
    ar = np.arange(6, dtype=np.int32)
    outs = jc.jit(lambda x: (np.arange(6, dtype=np.int32), np.arange(6, dtype=np.int32)))(x)
    check_all(outs, [ar, ar], [ar.dtype] * 2, [x])
    outs = jc.jit(lambda x: (x * 0 + 1, x * 0 + 1))(x)      # equal to a constant after folding
    check_all(outs, [np.ones((4, 5))] * 2, [F32] * 2, [x])


def test_interleaved_repeats_and_distinct_outputs():
    x = make((8, 16), F32, rng=rng_for("interleaved"))
    r = x.astype(np.float64)

    def body(x):
        y, s = np.exp(x), x.sum(axis=1)
        return y, s, y * 2, s, y, x
    outs = jc.jit(body)(x)
    refs = [np.exp(r), r.sum(axis=1), np.exp(r) * 2, r.sum(axis=1), np.exp(r), r]
    check_all(outs, refs, [F32] * 6, [x], rtol=1e-5, atol=1e-5)


def test_matmul_and_softmax_returned_twice():
    a = make((33, 17), F32, rng=rng_for("mm a"))
    b = make((17, 40), F32, rng=rng_for("mm b"))
    ra, rb = a.astype(np.float64), b.astype(np.float64)
    outs = jc.jit(lambda a, b: (a @ b, a @ b))(a, b)
    check_all(outs, [ra @ rb] * 2, [F32] * 2, [a, b], rtol=1e-4, atol=1e-4)
    sm = np.exp(rb - rb.max(axis=1, keepdims=True))
    sm /= sm.sum(axis=1, keepdims=True)
    outs = jc.jit(lambda b: (jc.softmax(b, axis=1),) * 2)(b)
    check_all(outs, [sm] * 2, [F32] * 2, [b], rtol=1e-5, atol=1e-6)


def test_pointwise_repeats_are_stored_by_the_same_kernel():
    """Lowering copies a repeated output; multi-output fusion merges the copy into a
    pointwise producer over the same loop nest (one loop storing twice, no re-read of the
    result). A reduction keeps a copy of its (smaller) result."""
    x = make((64, 128), F32, rng=rng_for("one kernel"))
    ks = jc.jit(lambda x: (x * 2, x * 2)).kernels(x)
    assert len(ks) == 1 and ks[0].bytes == 3 * x.nbytes      # read once, written twice
    ks = jc.jit(lambda x: (x.sum(axis=1), x.sum(axis=1))).kernels(x)
    assert any("copy" in k.ops for k in ks)


# ---- explicit graphs and forked sub-graphs ---------------------------------------------------

def test_graph_outputs_given_twice():
    g = jc.Graph("twice")
    x = g.input("x", (5, 6), jc.float32)
    y = jc.exp(x)
    g.output(y, x, y, x)
    fn = jc.compile(g)
    a = make((5, 6), F32, rng=rng_for("graph twice"), low=-2, high=2)
    outs = fn(a)
    ra = a.astype(np.float64)
    check_all(outs, [np.exp(ra), ra, np.exp(ra), ra], [F32] * 4, [a])


def test_forked_sub_graph_results_returned_twice():
    def body(x):
        fut = jc.fork(lambda v: (v * 3, v * 3, v.sum(axis=1)), x)
        p, q, s = jc.wait(fut)
        return p, q, s, s, p
    x = make((16, 32), F32, rng=rng_for("fork twice"))
    r = x.astype(np.float64)
    outs = jc.jit(body)(x)
    check_all(outs, [r * 3, r * 3, r.sum(axis=1), r.sum(axis=1), r * 3], [F32] * 5, [x],
              rtol=1e-5, atol=1e-5)


# ---- out= -----------------------------------------------------------------------------------

def test_out_arrays_given_for_equal_outputs():
    f = jc.jit(lambda x: (x * 3.0, x * 3.0, x.sum(axis=1), x.sum(axis=1)))
    x = make((6, 9), F64, rng=rng_for("out equal"))
    outs = (np.empty((6, 9)), np.empty((6, 9)), np.empty(6), np.empty(6))
    r = f(x, out=outs)
    assert all(a is b for a, b in zip(r, outs))
    check_all(r, [x * 3.0, x * 3.0, x.sum(axis=1), x.sum(axis=1)], [F64] * 4, [x],
              rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make_outs", [
    lambda buf: (buf[0], buf[0]),                       # one array twice
    lambda buf: (buf[0], buf[0][...]),                  # two views of the same memory
    lambda buf: (buf.reshape(-1)[:12], buf.reshape(-1)[6:18]),   # half of them
], ids=["same array", "same memory", "overlapping"])
@pytest.mark.parametrize("body", [lambda x: (x * 2, x * 2), lambda x: (x * 2, x + 1)],
                         ids=["equal outputs", "different outputs"])
def test_out_arrays_that_share_memory_are_refused(make_outs, body):
    f = jc.jit(body)
    x = make(12, F32, rng=rng_for("out shared"))
    buf = np.zeros((2, 12), np.float32)
    with pytest.raises(ValueError, match="share memory"):
        f(x, out=make_outs(buf))
    assert not buf.any()                                # nothing was written


def test_out_arrays_interleaved_in_one_buffer_are_accepted():
    """Disjoint views of one buffer (every other element) share no byte: accepted."""
    f = jc.jit(lambda x: (x * 2, x + 1))
    x = make(12, F32, rng=rng_for("out interleaved"))
    buf = np.zeros(24, np.float32)
    a, b = f(x, out=(buf[0::2], buf[1::2]))
    assert_close(buf[0::2], x.astype(np.float64) * 2, F32)
    assert_close(buf[1::2], x.astype(np.float64) + 1, F32)

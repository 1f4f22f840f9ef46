"""The bitwise family against numpy: `& | ^ ~ << >>`, `np.bitwise_and/or/xor`, `np.invert`,
`np.left_shift`, `np.right_shift` and `jc.<name>` on bool and integer dtypes: every dtype pair
(numpy 2 promotion, result dtypes asserted), shift counts outside [0, bits) (numpy's rule: 0, or
-1 for a right shift of a negative signed value), Python and numpy scalar operands, broadcasting,
non-contiguous views, sizes with vector bodies and scalar tails, eager calls, `out=`, constant
folding, type errors for floats, and vectorized kernels."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import jitcore as jc
from helpers import BOOL, F32, F64, I32, I64, U8, assert_close, dtype_id, rng_for

BIT_DTYPES = [BOOL, U8, I32, I64]
BINARY = {                       # name -> (operator form, numpy ufunc, jc function)
    "and": (lambda a, b: a & b, np.bitwise_and, jc.bitwise_and),
    "or": (lambda a, b: a | b, np.bitwise_or, jc.bitwise_or),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor, jc.bitwise_xor),
    "lshift": (lambda a, b: a << b, np.left_shift, jc.left_shift),
    "rshift": (lambda a, b: a >> b, np.right_shift, jc.right_shift),
}
SHIFTS = ("lshift", "rshift")
SIZES = [1, 17, 1000, 1003]      # one element, one vector + tail, vector bodies (+ a tail)


def values(dtype, n, key=()):
    """n values of dtype covering its extremes, -1, 0, 1 and random bits."""
    d = np.dtype(dtype)
    rng = rng_for("bitwise", d.name, n, *key)
    if d == BOOL:
        return rng.random(n) < 0.5
    info = np.iinfo(d)
    x = rng.integers(info.min, info.max, n, endpoint=True, dtype=d)
    edges = np.array([info.min, info.max, 0, 1, info.max // 2, -1 if d.kind == "i" else 254], d)
    k = min(n, edges.size)
    x[:k] = edges[:k]
    return x


def counts(dtype, n, key=()):
    """Shift counts: every count from -bits-2 to bits+2 (negatives only for signed dtypes),
    then random ones over the dtype's whole range."""
    d = np.dtype(dtype)
    bits = d.itemsize * 8
    low = -bits - 2 if d.kind == "i" else 0
    edge = np.arange(low, bits + 3).astype(d)
    x = values(d, n, ("counts",) + tuple(key))
    x[:min(n, edge.size)] = edge[:n]
    return np.roll(x, n // 2)              # edge counts in the vector body and the tail


def operands(da, db, n, op, key=()):
    a = values(da, n, ("a",) + tuple(key))
    b = counts(db, n, key) if op in SHIFTS and np.dtype(db) != BOOL else values(db, n, ("b",) + key)
    return a, b


def numpy_or_error(fn, *args):
    """numpy's result, or the TypeError numpy raises (bool shifts need int8, which jitcore
    does not have: jitcore raises DTypeError there, a TypeError as well)."""
    with np.errstate(all="ignore"):
        try:
            out = fn(*args)
        except TypeError as e:
            return None, e
    if out.dtype == np.int8:
        return None, TypeError("int8")
    return out, None


@functools.lru_cache(maxsize=None)
def jitted(op, form):
    operator, ufunc, jcfn = BINARY[op]
    fn = {"operator": operator, "numpy": ufunc, "jc": jcfn}[form]
    return jc.jit(lambda a, b: fn(a, b))


# ---- every dtype pair ------------------------------------------------------------------------

@pytest.mark.parametrize("db", BIT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("da", BIT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_every_dtype_pair(op, da, db):
    """Result dtype and values as numpy's for each pair (uint8 & int32 -> int32, bool & int ->
    int, bool & bool -> bool); bool << bool (numpy: int8) is a DTypeError."""
    a, b = operands(da, db, 1003, op, (op,))
    want, err = numpy_or_error(BINARY[op][0], a, b)
    if err is not None:
        with pytest.raises(jc.DTypeError, match=BINARY[op][1].__name__):
            jitted(op, "operator")(a, b)
        return
    assert_close(jitted(op, "operator")(a, b), want, want.dtype, msg=f"{da}{op}{db}")


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", [U8, I32, I64], ids=dtype_id)
def test_all_ops_at_vector_and_tail_sizes(dtype, size):
    """One multi-output kernel of the six ops; every shift count from -bits-2 to bits+2 lands
    in the vector body and the scalar tail."""
    f = jc.jit(lambda a, b, c: (a & b, a | b, a ^ b, ~a, a << c, a >> c))
    a, b, c = values(dtype, size, ("a",)), values(dtype, size, ("b",)), counts(dtype, size)
    with np.errstate(all="ignore"):
        want = (a & b, a | b, a ^ b, ~a, a << c, a >> c)
    for k, (g, w) in enumerate(zip(f(a, b, c), want)):
        assert_close(g, w, w.dtype, msg=f"output {k}")


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("form", ["numpy", "jc"])
def test_numpy_ufuncs_and_jc_functions_on_tracers(op, form):
    a, b = operands(I32, I32, 100, op, (form,))
    want, _ = numpy_or_error(BINARY[op][1], a, b)
    assert_close(jitted(op, form)(a, b), want, I32)


@pytest.mark.parametrize("dtype", BIT_DTYPES, ids=dtype_id)
def test_invert_forms(dtype):
    """~x, np.invert, np.bitwise_not and jc.invert / jc.bitwise_not: bitwise not of
    integers, logical not of bools."""
    x = values(dtype, 1003)
    f = jc.jit(lambda x: (~x, np.invert(x), np.bitwise_not(x), jc.invert(x),
                          jc.bitwise_not(x)))
    for k, g in enumerate(f(x)):
        assert_close(g, ~x, dtype, msg=f"form {k}")
    assert_close(jc.invert(x), ~x, dtype, msg="eager")


@pytest.mark.parametrize("op", list(BINARY))
def test_eager_calls(op):
    _, ufunc, jcfn = BINARY[op]
    for da, db in [(I32, I32), (U8, I64), (BOOL, I32)] + ([] if op in SHIFTS else [(BOOL, BOOL)]):
        a, b = operands(da, db, 37, op, ("eager",))
        want = ufunc(a, b)
        assert_close(jcfn(a, b), want, want.dtype, msg=f"{da}, {db}")


# ---- scalars, broadcasting, views, out= ------------------------------------------------------

# (description, function, input dtype): Python ints are weak (NEP 50), numpy scalars strong
SCALAR_CASES = [
    ("u8&0x3C", lambda x: x & 0x3C, U8),
    ("0x3C&u8", lambda x: 0x3C & x, U8),
    ("u8|128", lambda x: x | 128, U8),
    ("u8^255", lambda x: x ^ 255, U8),
    ("u8<<3", lambda x: x << 3, U8),
    ("u8<<9", lambda x: x << 9, U8),
    ("u8>>7", lambda x: x >> 7, U8),
    ("1<<u8", lambda x: 1 << x, U8),
    ("i32<<40", lambda x: x << 40, I32),
    ("i32<<-1", lambda x: x << -1, I32),
    ("i32>>40", lambda x: x >> 40, I32),
    ("i32>>-3", lambda x: x >> -3, I32),
    ("i32>>31", lambda x: x >> 31, I32),
    ("1<<i32", lambda x: 1 << x, I32),
    ("-8>>i32", lambda x: -8 >> x, I32),
    ("i64&-2", lambda x: x & -2, I64),
    ("i64<<63", lambda x: x << 63, I64),
    ("i32&True", lambda x: x & True, I32),
    ("bool&True", lambda x: x & True, BOOL),
    ("bool|False", lambda x: x | False, BOOL),
    ("bool^True", lambda x: x ^ True, BOOL),
    ("bool&1", lambda x: x & 1, BOOL),           # a weak int next to bool: int64
    ("bool<<1", lambda x: x << 1, BOOL),
    ("i32&np.int64", lambda x: x & np.int64(6), I32),     # numpy scalars are strong
    ("u8|np.int32", lambda x: x | np.int32(3), U8),
    ("u8<<np.uint8(255)", lambda x: x << np.uint8(255), U8),
    ("array&i32", lambda x: np.arange(67, dtype=np.int32) * 7 & x, I32),   # ndarray operands
    ("array<<u8", lambda x: np.arange(67, dtype=np.int64) << x, U8),
    ("i32>>array", lambda x: x >> (np.arange(67, dtype=np.uint8) % 40), I32),
]


@pytest.mark.parametrize("desc, fn, dtype", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_operands(desc, fn, dtype):
    x = values(dtype, 67, (desc,))
    if dtype != BOOL and ("<<i" in desc or "<<u" in desc or ">>i" in desc):
        x = counts(dtype, 67, (desc,))           # the tensor is the count
    with np.errstate(all="ignore"):
        want = fn(x)
    assert_close(jc.jit(fn)(x), want, want.dtype, msg=desc)


def test_out_of_range_python_int_is_rejected_like_numpy():
    """numpy 2 raises OverflowError for uint8_array & 300 and uint8_array & -1."""
    x = np.arange(5, dtype=np.uint8)
    for fn in (lambda x: x & 300, lambda x: x | -1):
        with pytest.raises(OverflowError):
            fn(x)
        with pytest.raises((OverflowError, jc.JitcoreError)):
            jc.jit(fn)(x)


@pytest.mark.parametrize("sa, sb", [((3, 1, 5), (4, 5)), ((1,), (7, 33)), ((6, 1), (1, 40)),
                                    ((), (17,))])
def test_broadcasting(sa, sb):
    a, b = values(I32, int(np.prod(sa)), ("ba",)).reshape(sa), counts(U8, int(np.prod(sb)))
    b = b.reshape(sb)
    f = jc.jit(lambda a, b: (a & b, b | a, a ^ b, a << b, a >> b, b << a))
    with np.errstate(all="ignore"):
        want = (a & b, b | a, a ^ b, a << b, a >> b, b << a)
    for k, (g, w) in enumerate(zip(f(a, b), want)):
        assert_close(g, w, w.dtype, msg=f"output {k}")


def test_non_contiguous_views():
    """Strided, reversed and transposed inputs and views taken inside the function."""
    base = values(I64, 64 * 48, ("views",)).reshape(64, 48)
    cnt = counts(I32, 64 * 48).reshape(64, 48)
    f = jc.jit(lambda a, c: (a[::2, ::-3] ^ c[1::2, ::3], a.T << c.T, (a >> c)[::-1]))
    with np.errstate(all="ignore"):
        want = (base[::2, ::-3] ^ cnt[1::2, ::3], base.T << cnt.T, (base >> cnt)[::-1])
    for k, (g, w) in enumerate(zip(f(base, cnt), want)):
        assert_close(g, w, w.dtype, msg=f"output {k}")
    a, c = base[:59, ::2], np.asfortranarray(cnt)[5:, 1:25]      # non-contiguous inputs
    assert not a.flags.c_contiguous and not c.flags.c_contiguous
    g = jc.jit(lambda a, c: (a & c, a >> c))(a, c)
    with np.errstate(all="ignore"):
        assert_close(g[0], a & c, I64)
        assert_close(g[1], a >> c, I64)


def test_in_place_operators_and_out():
    """`x &= m` etc. inside a traced function rebind (no __iand__ on tracers); `out=` writes
    into a preallocated array."""
    def fn(x, m, c):
        x &= m
        x |= 1
        x ^= m
        x <<= c
        x >>= 1
        return x
    x, m, c = values(I32, 1003, ("ip",)), values(I32, 1003, ("m",)), counts(I32, 1003)
    with np.errstate(all="ignore"):
        want = fn(x.copy(), m, c)
    f = jc.jit(fn)
    assert_close(f(x, m, c), want, I32)
    out = np.empty_like(x)
    f(x, m, c, out=out)
    assert_close(out, want, I32)
    assert_close(x, values(I32, 1003, ("ip",)), I32, msg="input untouched")


# ---- errors, folding, vectorization ----------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64], ids=dtype_id)
@pytest.mark.parametrize("op", list(BINARY) + ["invert"])
def test_float_operands_are_a_dtype_error_naming_the_op(op, dtype):
    """numpy raises TypeError for bitwise ops on floats; jitcore raises DTypeError (a
    TypeError) naming the op, for float tensors and for int tensors with float scalars."""
    x, i = np.ones(8, dtype), np.ones(8, np.int32)
    name = "bitwise_not" if op == "invert" else BINARY[op][1].__name__
    with pytest.raises(TypeError):
        (~x) if op == "invert" else BINARY[op][0](x, i)
    cases = [lambda x, i: ~x, lambda x, i: np.invert(x)] if op == "invert" else [
        lambda x, i: BINARY[op][0](x, i), lambda x, i: BINARY[op][1](i, x),
        lambda x, i: BINARY[op][0](i, 1.5)]
    for fn in cases:
        with pytest.raises(jc.DTypeError, match=name):
            jc.jit(fn)(x, i)
    with pytest.raises(jc.DTypeError, match=name):
        (jc.invert(x) if op == "invert" else BINARY[op][2](x, i))


def test_ir_typing_rules():
    """The IR's own rule (ir.build.infer, also the verifier's): one integer or bool dtype per
    bitwise node, integers only for shifts."""
    from jitcore.ir import build as b
    from jitcore.ir.ops import Op
    i32, i64 = b.input_node("a", (4,), jc.int32), b.input_node("b", (4,), jc.int64)
    f32, m = b.input_node("f", (4,), jc.float32), b.input_node("m", (4,), jc.bool)
    assert b.node(Op.BITWISE_AND, m, m).dtype == jc.bool
    assert b.node(Op.BITWISE_NOT, i64).dtype == jc.int64
    assert b.node(Op.RIGHT_SHIFT, i32, i32).dtype == jc.int32
    for op, src in [(Op.BITWISE_AND, (i32, i64)), (Op.BITWISE_OR, (f32, f32)),
                    (Op.LEFT_SHIFT, (m, m)), (Op.BITWISE_NOT, (f32,))]:
        with pytest.raises(jc.DTypeError, match=op.name.lower()):
            b.node(op, *src)


def test_logical_ops_stay_logical():
    """np.logical_and/or/not of integers are bool truth tests, unlike & | ~."""
    a, b = np.array([6, 12, -1, 0], np.int32), np.array([3, 10, 5, 7], np.int32)
    f = jc.jit(lambda a, b: (a & b, np.logical_and(a, b), a | b, np.logical_or(a, b), ~a,
                             np.logical_not(a)))
    want = (a & b, np.logical_and(a, b), a | b, np.logical_or(a, b), ~a, np.logical_not(a))
    for k, (g, w) in enumerate(zip(f(a, b), want)):
        assert_close(g, w, w.dtype, msg=f"output {k}")


# constant operands only: the whole expression is folded by passes.simplify
FOLDED = [(1, 40), (-8, 2), (-8, 70), (7, -1), (255, 3), (True, 3)]


@pytest.mark.parametrize("a, b", FOLDED, ids=str)
def test_constant_folding_matches_numpy(a, b):
    x = np.zeros(3, np.int64)
    f = jc.jit(lambda x: (x + jc.bitwise_and(a, b), x + jc.bitwise_xor(a, b),
                          x + jc.left_shift(a, b), x + jc.right_shift(a, b), x + jc.invert(a)))
    for k, (g, ufunc) in enumerate(zip(f(x), [np.bitwise_and, np.bitwise_xor, np.left_shift,
                                              np.right_shift])):
        with np.errstate(all="ignore"):
            want = x + ufunc(a, b)
        assert_close(g, want, want.dtype, msg=ufunc.__name__)
    assert_close(f(x)[4], x + np.invert(a), I64)


@pytest.mark.parametrize("dtype", BIT_DTYPES, ids=dtype_id)
def test_kernels_are_vectorized(dtype):
    if dtype == BOOL:
        f = jc.jit(lambda a, b: (a & b) ^ ~(a | b))
        args = (np.zeros(1000, bool), np.ones(1000, bool))
    else:
        f = jc.jit(lambda a, b: ((a & b) ^ ~(a | b)) + (a << b) + (a >> b))
        args = (np.zeros(1000, dtype), np.ones(1000, dtype))
    ks = f.kernels(*args)
    assert len(ks) == 1 and ks[0].vectorized, [(k.name, k.reason) for k in ks]
    assert {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"} <= set(ks[0].ops)
    if dtype != BOOL:
        assert {"left_shift", "right_shift"} <= set(ks[0].ops)
    assert f"<{ks[0].lanes} x i" in f.llvm_ir(*args)

"""jc.jit(dynamic=True): batch and sequence extents are run-time values (README "Shapes that
vary").

Every family runs over many batch sizes (and sequence lengths), 0 and 1 included, and is held to numpy in float64
(dtypes asserted) and to the static code of the same function; the compile count shows one
compile serving every size >= 2 (sizes 0 and 1 compile on their own). Graphs that need an
extent's value compile per shape and say why in explain(); extents the graph combines must
agree at each call (ShapeError otherwise).
"""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import (F32, F64, assert_close, layer_norm_ref, make, reduction_tol, rng_for,
                     runnable_levels, softmax_ref)

SIZES = [2, 5, 17, 100, 3, 1, 0]      # 0 and 1 last: they compile on their own
STATIC_TOO = {17, 1}                  # sizes also run through the static code (a compile each)
TEN_SIZES = [2, 3, 4, 5, 7, 9, 16, 17, 33, 100]
FLOATS = [F32, F64]


def compiles() -> int:
    return jc.cache_info()["compiles"]


def check_sizes(fn, make_args, ref, dtype, *, sizes=SIZES, rtol=None, atol=None,
                dynamic_compiles=1, **options):
    """fn under dynamic=True over `sizes`: each result against the float64 reference (dtype
    `dtype`) and against the static code; the sizes >= 2 take `dynamic_compiles` compiles."""
    if rtol is None and np.dtype(dtype).kind == "f":   # a few roundings of a short chain
        rtol, atol = (1e-5, 1e-6) if dtype == F32 else (1e-12, 1e-12)
    dyn, static = jc.jit(fn, dynamic=True, **options), jc.jit(fn, **options)
    before = compiles()
    results = {}
    for n in sizes:
        args = make_args(n)
        results[n] = (args, dyn(*args))
    big = [n for n in sizes if n >= 2]
    small = [n for n in sizes if n < 2]
    # (at most: another test may have compiled the same graph already in this process)
    assert compiles() - before <= dynamic_compiles + len(small), \
        f"{compiles() - before} compiles for sizes {sizes}"
    for n, (args, got) in results.items():
        want = ref(*[np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a
                     for a in args])
        assert_close(got, want, dtype, rtol=rtol, atol=atol, msg=f"size {n}")
        if n not in STATIC_TOO:
            continue
        same = static(*args)
        assert got.shape == same.shape and got.dtype == same.dtype
        assert_close(got, np.asarray(same, np.float64), dtype, rtol=rtol, atol=atol,
                     msg=f"size {n} vs static code")
    return dyn, big


# ---- elementwise ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,inner", [(F32, ()), (F64, ()), (F32, (33,)), (F64, (7,)),
                                         (F32, (3, 5))], ids=str)
def test_elementwise_chain(dtype, inner):
    def fn(a, b, c):
        return jc.relu(a * b + c) * 0.5 - jc.tanh(a)

    def args(n):
        rng = rng_for("chain", n, inner, str(dtype))
        return [make((n, *inner), dtype, rng=rng) for _ in range(3)]
    check_sizes(fn, args, lambda a, b, c: np.maximum(a * b + c, 0) * 0.5 - np.tanh(a), dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64], ids=str)
def test_integer_elementwise_exact(dtype):
    def fn(a, b):
        return jc.maximum(a * 3 - b, 0) + (a & 7)

    def args(n):
        rng = rng_for("int", n, str(dtype))
        return [make((n, 9), dtype, rng=rng), make((n, 9), dtype, rng=rng)]
    dyn, _ = check_sizes(fn, args, lambda a, b: np.maximum(a * 3 - b, 0) + (a & 7),
                         np.dtype(dtype))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_broadcasts(dtype):
    """A weight vector along the static axis, a column (n, 1) and a scalar argument."""
    rng0 = rng_for("bias", str(dtype))
    w = make((12,), dtype, rng=rng0)

    def fn(x, col, w, s):
        return x * w + col * s

    def args(n):
        rng = rng_for("bcast", n, str(dtype))
        return [make((n, 12), dtype, rng=rng), make((n, 1), dtype, rng=rng), w, 2.5]
    check_sizes(fn, args, lambda x, col, w, s: x * w + col * s, dtype)


def test_weight_as_long_as_the_batch_stays_static():
    """A weight vector whose length equals this call's batch size is not taken for a batch:
    it is combined with a static axis, so only the first argument's leading extent varies."""
    w = make((8,), F32)
    f = jc.jit(lambda x, w: x * w, dynamic=True)
    before = compiles()
    for n in [8, 3, 9, 8]:
        x = make((n, 8), F32)
        assert_close(f(x, w), np.float64(x) * w, F32)
    assert compiles() - before == 1
    assert "s0 (x dim 0)" in f.explain(x, w)


# ---- reductions and rows ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype,op", [(F32, "sum"), (F64, "sum"), (F32, "max"), (F64, "min")],
                         ids=str)
@pytest.mark.parametrize("axis", [-1, 0, 1, None])
def test_reductions(dtype, op, axis):
    def fn(x):
        return getattr(x, op)(axis=axis)

    def args(n):
        return [make((n, 6, 20), dtype, rng=rng_for("red", n, op, axis, str(dtype)))]
    sizes = SIZES if op == "sum" else [n for n in SIZES if n]   # max of nothing: an error
    rtol, atol = reduction_tol(dtype, 100 * 120, 3.0)
    check_sizes(fn, args, lambda x: getattr(np, op)(x, axis=axis), dtype, sizes=sizes,
                rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_mean_over_a_static_axis(dtype):
    check_sizes(lambda x: x.mean(axis=-1), lambda n: [make((n, 30), dtype)],
                lambda x: x.mean(axis=-1), dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softmax_and_layer_norm_rows(dtype):
    rng0 = rng_for("ln", str(dtype))
    g, b = make((48,), dtype, rng=rng0), make((48,), dtype, rng=rng0)

    def fn(x):
        return jc.softmax(x) + jc.layer_norm(x, g, b)

    def ref(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        return e / e.sum(-1, keepdims=True) + ln * g + b
    check_sizes(fn, lambda n: [make((n, 48), dtype, rng=rng_for("sm", n))], ref, dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_reshapes_that_merge_the_dynamic_axis_with_static_ones(dtype):
    """(n, 10, 32) -> (10n, 32) @ W -> (n, 10, 8): a loop of 10 * n rows; flatten; a
    reshape of the static axes only; axes inside the dynamic one (strides 32n, 160n)."""
    W = make((32, 8), dtype, rng=rng_for("rw", str(dtype)))

    def fn(x):
        n = x.shape[0]
        y = (x.reshape(n * 10, 32) @ W).reshape(n, 10, 8)
        return (y, x.reshape(-1) * 2.0, x.reshape(n, 20, 16).sum(axis=1),
                x.transpose(1, 0, 2).reshape(10, -1) + 1.0, x.reshape(2, -1) * 3.0)

    def ref(x):
        n = x.shape[0]
        return ((x.reshape(-1, 32) @ W).reshape(n, 10, 8), x.reshape(-1) * 2,
                x.reshape(n, 20, 16).sum(axis=1), x.transpose(1, 0, 2).reshape(10, -1) + 1,
                x.reshape(2, -1) * 3)
    dyn, static = jc.jit(fn, dynamic=True), jc.jit(fn)
    before = compiles()
    rtol, atol = reduction_tol(dtype, 32, 9.0)
    for n in [2, 3, 9, 4]:
        x = make((n, 10, 32), dtype, rng=rng_for("rx", n))
        for got, want, same in zip(dyn(x), ref(np.float64(x)), static(x)):
            assert_close(got, want, dtype, rtol=rtol, atol=atol)
            assert got.shape == same.shape
    assert compiles() - before == 1 + 4           # (4: the static function's)
    assert "0..10*s0" in dyn.explain(x)


# ---- GEMM ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,k,n_out", [(F32, 40, 36), (F64, 40, 36), (F32, 64, 96),
                                           (F64, 3, 5)], ids=str)
@pytest.mark.parametrize("bound", [True, False], ids=["W-constant", "W-argument"])
def test_gemm_dynamic_m(dtype, k, n_out, bound):
    rng0 = rng_for("gemm", k, n_out, str(dtype))
    W, bias = make((k, n_out), dtype, rng=rng0), make((n_out,), dtype, rng=rng0)

    def ref(x, W=W):
        return np.maximum(x @ W + bias, 0)
    rtol, atol = reduction_tol(dtype, k, 9.0)
    if bound:                       # prepacked into the GEMM's panels
        check_sizes(lambda x, W: jc.relu(x @ W + bias),
                    lambda n: [make((n, k), dtype, rng=rng_for("x", n))], ref, dtype,
                    rtol=rtol, atol=atol, constants={"W": W})
    else:
        check_sizes(lambda x, W: jc.relu(x @ W + bias),
                    lambda n: [make((n, k), dtype, rng=rng_for("x", n)), W], ref, dtype,
                    rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batched_gemm_dynamic_batch(dtype):
    rng0 = rng_for("bgemm", str(dtype))
    W = make((24, 40), dtype, rng=rng0)
    rtol, atol = reduction_tol(dtype, 24, 9.0)
    check_sizes(lambda x, y: (x @ W) @ y,
                lambda n: [make((n, 5, 24), dtype, rng=rng_for("bx", n)),
                           make((n, 40, 3), dtype, rng=rng_for("by", n))],
                lambda x, y: (x @ W) @ y, dtype, rtol=rtol, atol=atol * 40)


# ---- an attention-like graph ---------------------------------------------------------------------

S, D = 12, 32


def _weights(dtype, key="attn"):
    rng = rng_for(key, str(dtype))
    return [make((D, D), dtype, rng=rng) / 6 for _ in range(3)]


def attention(Wq, Wk, Wv):
    def fn(x):
        q, k, v = x @ Wq, x @ Wk, x @ Wv
        scores = q @ k.transpose(0, 2, 1) * (1.0 / D ** 0.5)
        return jc.layer_norm(jc.softmax(scores) @ v + x)
    return fn


def attention_ref(Wq, Wk, Wv):
    def ref(x):
        q, k, v = x @ Wq, x @ Wk, x @ Wv
        s = q @ k.transpose(0, 2, 1) / D ** 0.5
        p = np.exp(s - s.max(-1, keepdims=True))
        y = p / p.sum(-1, keepdims=True) @ v + x
        return (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5)
    return ref


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_attention_dynamic_batch(dtype):
    Ws = _weights(dtype)
    check_sizes(attention(*Ws), lambda n: [make((n, S, D), dtype, rng=rng_for("ax", n))],
                attention_ref(*[np.float64(w) for w in Ws]), dtype, rtol=1e-4 if dtype == F32
                else 1e-10, atol=1e-4 if dtype == F32 else 1e-10)


def test_one_compile_across_ten_batch_sizes():
    Ws = _weights(F32, "ten sizes")         # (weights of its own: a graph no other test has)
    graphs = {"chain": (lambda a, b: jc.relu(a * b + 1.0) * 0.375, lambda n: [
        make((n, 64), F32), make((n, 64), F32)]),
        "gemm": (lambda x: jc.gelu(x @ Ws[0]), lambda n: [make((n, D), F32)]),
        "attention": (attention(*Ws), lambda n: [make((n, S, D), F32)])}
    for name, (fn, args) in graphs.items():
        f = jc.jit(fn, dynamic=True)
        before = compiles()
        for n in TEN_SIZES:
            f(*args(n))
        assert compiles() - before == 1, name
        assert len(set(TEN_SIZES)) == 10


# ---- two run-time axes: batch and sequence ([B, T, ...]) ---------------------------------------

PAIRS = [(2, 3), (4, 7), (3, 16), (5, 5), (9, 2), (2, 33), (17, 4), (3, 3), (6, 10), (2, 100)]
SMALL_PAIRS = [(1, 5), (4, 1), (0, 3), (3, 0)]    # a 0 or 1 compiles a class of its own
STATIC_PAIRS = {(3, 16), (4, 1)}                  # also run through the static code


def check_pairs(fn, make_args, ref, dtype, *, pairs=PAIRS + SMALL_PAIRS, rtol=None, atol=None,
                dynamic_compiles=1, **options):
    """check_sizes over (batch, sequence) pairs: the pairs with both extents >= 2 share
    `dynamic_compiles` compiles; each result against float64 numpy and the static code."""
    if rtol is None and np.dtype(dtype).kind == "f":
        rtol, atol = (1e-5, 1e-6) if dtype == F32 else (1e-12, 1e-12)
    dyn, static = jc.jit(fn, dynamic=True, **options), jc.jit(fn, **options)
    before = compiles()
    results = [(bt, make_args(*bt)) for bt in pairs]
    results = [(bt, args, dyn(*args)) for bt, args in results]
    small = [bt for bt in pairs if min(bt) < 2]
    assert compiles() - before <= dynamic_compiles + len(small), \
        f"{compiles() - before} compiles for {pairs}"
    for bt, args, got in results:
        want = ref(*[np.asarray(a, np.float64) if np.asarray(a).dtype.kind == "f" else a
                     for a in args])
        assert_close(got, want, dtype, rtol=rtol, atol=atol, msg=f"(B, T) = {bt}")
        if bt in STATIC_PAIRS:
            same = static(*args)
            assert got.shape == same.shape and got.dtype == same.dtype
            assert_close(got, np.asarray(same, np.float64), dtype, rtol=rtol, atol=atol,
                         msg=f"{bt} vs static code")
    return dyn


def _bt(key, dtype, d=8, **kw):
    return lambda B, T: [make((B, T, d), dtype, rng=rng_for(key, B, T, str(dtype)), **kw)]


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.int32)], ids=str)
def test_batch_and_sequence_elementwise_and_broadcasts(dtype):
    """x[B, T, 8] with a weight along the static axis, a per-token column [B, T, 1] and a
    scalar; an int dtype exactly."""
    w = make((8,), dtype, rng=rng_for("btw", str(dtype)))

    def fn(x, col):
        return jc.maximum(x * w + col * 3, 0) - x

    def args(B, T):
        rng = rng_for("bte", B, T, str(dtype))
        return [make((B, T, 8), dtype, rng=rng), make((B, T, 1), dtype, rng=rng)]
    dyn = check_pairs(fn, args, lambda x, col: np.maximum(x * w + col * 3, 0) - x, dtype)
    text = dyn.explain(*args(5, 6))
    assert "s0 (x dim 0 = col dim 0), s1 (x dim 1 = col dim 1)" in text, text
    assert "0..s0*s1" in text, text


@pytest.mark.parametrize("dtype,op", [(F32, "sum"), (F64, "sum"), (F32, "max"),
                                      (np.dtype(np.int64), "sum")], ids=str)
@pytest.mark.parametrize("axis", [-1, 1, 0, (0, 1), None], ids=str)
def test_batch_and_sequence_reductions(dtype, op, axis):
    """Along the static axis, along one run-time axis, along both, and over everything."""
    def fn(x):
        return getattr(x, op)(axis=axis)
    pairs = PAIRS + [bt for bt in SMALL_PAIRS if op == "sum" or min(bt) > 0]
    rtol, atol = reduction_tol(dtype, 100 * 17 * 8, 3.0) if dtype.kind == "f" else (None, None)
    check_pairs(fn, _bt(("btr", op, str(axis)), dtype), lambda x: getattr(np, op)(x, axis=axis),
                dtype, pairs=pairs, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batch_and_sequence_rows_and_gemm(dtype):
    """softmax and layer_norm over the static rows of x[B, T, 48]; x @ W over B * T rows
    (one merged run-time M); a mean along the static axis."""
    rng0 = rng_for("btrows", str(dtype))
    g, b, W = make((48,), dtype, rng=rng0), make((48,), dtype, rng=rng0), \
        make((48, 20), dtype, rng=rng0) / 7

    def fn(x):
        return jc.softmax(x) + jc.layer_norm(x, g, b), jc.relu(x @ W), x.mean(axis=-1)

    def ref(x):
        return (softmax_ref(x) + layer_norm_ref(x, g, b), np.maximum(x @ W, 0),
                x.mean(axis=-1))
    rtol, atol = reduction_tol(dtype, 48, 9.0)
    check_pairs(lambda x: fn(x)[0] + 0.0, _bt("btsm", dtype, 48), lambda x: ref(x)[0], dtype,
                rtol=rtol, atol=atol)
    check_pairs(lambda x: fn(x)[1] * 1.0, _bt("btmm", dtype, 48), lambda x: ref(x)[1], dtype,
                rtol=rtol, atol=atol)
    check_pairs(lambda x: fn(x)[2] * 1.0, _bt("btmean", dtype, 48), lambda x: ref(x)[2], dtype,
                rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batch_and_sequence_transposes(dtype):
    """[B, T, 2, 4] -> [B, 2, T, 4] (heads split off the static axis: strides 4T, 8T); B and
    T swapped (a stride of 8B); flattening both."""
    def fn(x):
        B, T, _ = x.shape
        h = x.reshape(B, T, 2, 4).transpose(0, 2, 1, 3)
        return (h * 2.0 + 1.0, x.transpose(1, 0, 2) - 1.0, x.reshape(-1) * 3.0)

    def ref(x):
        B, T, _ = x.shape
        return (x.reshape(B, T, 2, 4).transpose(0, 2, 1, 3) * 2 + 1, x.transpose(1, 0, 2) - 1,
                x.reshape(-1) * 3)
    for k in range(3):
        check_pairs(lambda x, k=k: fn(x)[k], _bt(("btt", k), dtype),
                    lambda x, k=k: ref(x)[k], dtype)


@pytest.mark.parametrize("dtype", [F32, F64, np.int32])
def test_mean_along_the_sequence_reads_its_count_at_run_time(dtype):
    """A mean over T divides by T read from the call's extents (a dim node), so batch and
    sequence both vary with one compile; over (B, T) the count is the product."""
    f = jc.jit(lambda x: (x.mean(axis=1), x.mean(axis=(0, 1))), dynamic=True)
    before = compiles()
    for B, T in [(2, 5), (3, 5), (9, 5), (2, 7), (4, 7), (3, 17), (2, 64)]:
        x = make((B, T, 8), dtype, rng=rng_for("mt", B, T))
        got = f(x)
        assert_close(got[0], x.mean(axis=1), got[0].dtype)
        assert_close(got[1], x.mean(axis=(0, 1)), got[1].dtype)
    assert compiles() - before == 1
    text = f.explain(x)
    assert "run-time extents s0 (x dim 0), s1 (x dim 1)" in text, text
    assert "(%x: f32[s0,s1,8])" in f.graph(x) or dtype != F32


@pytest.mark.parametrize("name", ["softmax", "seq_sum", "gemm"])
def test_two_threads_split_batch_times_sequence(name):
    W = make((64, 40), F32, rng=rng_for("bt threads"))
    fn, ref = {"softmax": (lambda x: jc.softmax(x) * 2.0, lambda x: 2 * softmax_ref(x)),
               "seq_sum": (lambda x: x.sum(axis=1), lambda x: x.sum(axis=1)),
               "gemm": (lambda x: jc.relu(x @ W), lambda x: np.maximum(x @ W, 0))}[name]
    dyn, static = jc.jit(fn, dynamic=True, num_threads=2), jc.jit(fn, num_threads=2)
    for B, T in [(3, 2), (40, 50), (7, 613)]:
        x = make((B, T, 64), F32, rng=rng_for("btt", B, T))
        got, same = dyn(x), static(x)
        rtol, atol = reduction_tol(F32, max(T, 64), 3.0)
        assert_close(got, np.float64(same), F32, rtol=rtol, atol=atol)
        assert_close(got, ref(np.float64(x)), F32, rtol=rtol, atol=atol)


# ---- GEMMs over the sequence: run-time N and K; attention over sequence lengths ----------------

def sdpa(q, k, v):
    return jc.softmax(q @ jc.transpose(k, (0, 1, 3, 2)) * 0.25) @ v


def sdpa_ref(q, k, v):
    return softmax_ref(q @ k.transpose(0, 1, 3, 2) * 0.25) @ v


SEQ_PAIRS = [(2, 3), (2, 7), (2, 16), (2, 5), (2, 2), (2, 33), (2, 4), (2, 64), (2, 10), (3, 100)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_attention_one_compile_across_sequence_lengths(dtype):
    """softmax(q @ k^T * scale) @ v on [B, 4, T, 16]: q @ k^T has N = T, the softmax rows are
    T long, att @ v has K = T; one compile for 10 sequence lengths (and batch sizes)."""
    def args(B, T):
        rng = rng_for("sdpa", B, T, str(dtype))
        return [make((B, 4, T, 16), dtype, rng=rng) for _ in range(3)]
    rtol, atol = (1e-4, 1e-5) if dtype == F32 else (1e-11, 1e-12)
    dyn = check_pairs(sdpa, args, sdpa_ref, dtype, pairs=SEQ_PAIRS + [(2, 1), (1, 9), (0, 5)],
                      rtol=rtol, atol=atol)
    text = dyn.explain(*args(2, 9))
    assert "s1 (q dim 2 = k dim 2 = v dim 2)" in text and "k in 0..s1 (reduce)" in text, text


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.int32)], ids=str)
def test_gemm_run_time_n_and_k_over_several_blocks(dtype):
    """s = x @ z^T (N = T) and s @ z (K = T) on [B, T, 64]: sequence lengths past one column
    block (NC) and one k block (KC = 1024 here) run their remainders at run time; integers
    multiply in float64 as numpy's matmul of floats would."""
    def fn(x, z):
        s = x @ jc.transpose(z, (0, 2, 1))
        return s @ z * (1.0 / 64)

    def ref(x, z):
        x, z = np.float64(x), np.float64(z)
        return (x @ z.transpose(0, 2, 1)) @ z * (1.0 / 64)

    def args(B, T):
        rng = rng_for("nk", B, T, str(dtype))
        return [make((B, T, 64), dtype, rng=rng, low=-3, high=3) for _ in range(2)]
    rtol, atol = reduction_tol(F32 if dtype == F32 else F64, 64 * 1100, 64.0)
    out = F64 if dtype.kind == "i" else dtype
    check_pairs(fn, args, ref, out, pairs=[(2, 3), (2, 1100), (3, 17), (2, 1030)],
                rtol=rtol, atol=atol)


def test_flattened_square_of_a_run_time_extent():
    """(x @ x.T).reshape(-1): N = s0, and an output of s0 * s0 elements."""
    def fn(x):
        return (x @ x.T).reshape(-1) + 1.0
    check_sizes(fn, lambda n: [make((n, 24), F64, rng=rng_for("sq", n))],
                lambda x: (x @ x.T).reshape(-1) + 1, F64, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", FLOATS + [np.dtype(np.int32)], ids=str)
def test_transposed_tiles_along_a_run_time_vector_axis(dtype):
    """x.T: register tiles whose vector axis is the batch; its whole blocks of tiles, single
    tiles and scalar columns are counted at run time (130 and 301 rows: all three)."""
    check_sizes(lambda x: x.T + 1, lambda n: [make((n, 24), dtype, rng=rng_for("tt", n))],
                lambda x: x.T + 1, dtype, sizes=SIZES + [130, 301])


def test_two_threads_split_attention_over_sequence_lengths():
    dyn, static = jc.jit(sdpa, dynamic=True, num_threads=2), jc.jit(sdpa, num_threads=2)
    before = compiles()
    for B, T in [(2, 3), (3, 300), (2, 129)]:
        q, k, v = (make((B, 4, T, 16), F32, rng=rng_for("sdpa2", B, T, i)) for i in range(3))
        got = dyn(q, k, v)
        assert_close(got, np.float64(static(q, k, v)), F32, rtol=1e-4, atol=1e-5)
        assert_close(got, sdpa_ref(*map(np.float64, (q, k, v))), F32, rtol=1e-4, atol=1e-5)
    assert compiles() - before <= 1 + 3


# ---- index arithmetic over run-time extents ---------------------------------------------------

def _real(n: int, sizes: dict) -> int:
    """An integer of the symbolic pass at run time: c * s_b * s_t becomes c times the sizes."""
    from jitcore.passes.symbolic import at_sizes
    return at_sizes(sizes)(n)


def _evaluate(e, env: dict, sizes: dict) -> int:
    from jitcore.passes.symbolic import Div, Var
    total = _real(e.const, sizes)
    for atom, c in e.terms:
        if isinstance(atom, Var):
            v = env[atom.name]
        else:
            inner, d = _evaluate(atom.expr, env, sizes), _real(atom.d, sizes)
            v = inner // d if isinstance(atom, Div) else inner % d
        total += _real(c, sizes) * v
    return total


def test_index_splits_by_run_time_extents_hold_at_every_size():
    """Divisions and remainders by run-time extents simplify only where the result holds for
    every size up to the placeholders: (32m + k) // (32 s1) is m // s1, but k // s1 and
    t // s0 (a static range, or another symbol's) stay divisions."""
    from itertools import product

    from jitcore.passes.symbolic import Var, dynamic_extent, floordiv, lin, mod
    s0, s1 = dynamic_extent(0), dynamic_extent(1)
    m, k, t, j = Var("m", s0 * s1), Var("k", 32), Var("t", s1), Var("j", 8)
    exprs = {
        "(32m+k)//(32s1)": (floordiv(32 * lin(m) + k, 32 * s1), lambda m, k, t, j, a, b:
                            (32 * m + k) // (32 * b)),
        "(32m+k)%(32s1)": (mod(32 * lin(m) + k, 32 * s1), lambda m, k, t, j, a, b:
                           (32 * m + k) % (32 * b)),
        "k//s1": (floordiv(lin(k), s1), lambda m, k, t, j, a, b: k // b),
        "k%s1": (mod(lin(k), s1), lambda m, k, t, j, a, b: k % b),
        "t//s0": (floordiv(lin(t), s0), lambda m, k, t, j, a, b: t // a),
        "(m%s1)//s1": (floordiv(mod(lin(m), s1), s1), lambda m, k, t, j, a, b: 0),
        "(8t+j)//(8s1)": (floordiv(8 * lin(t) + j, 8 * s1), lambda m, k, t, j, a, b: 0),
        "(8t+j)%(4s1)": (mod(8 * lin(t) + j, 4 * s1), lambda m, k, t, j, a, b:
                         (8 * t + j) % (4 * b)),
        "flat": (32 * s1 * floordiv(lin(m), s1) + 32 * mod(lin(m), s1) + k,
                 lambda m, k, t, j, a, b: 32 * m + k),
    }
    assert exprs["(32m+k)//(32s1)"][0] == floordiv(lin(m), s1)
    assert exprs["flat"][0] == 32 * lin(m) + k
    for a, b in [(2, 2), (2, 3), (3, 2), (5, 7), (7, 5)]:
        sizes = {0: a, 1: b}
        for mm, kk, tt, jj in product(range(a * b), [0, 1, 7, 31], range(b), [0, 5, 7]):
            env = {"m": mm, "k": kk, "t": tt, "j": jj}
            for name, (e, want) in exprs.items():
                assert _evaluate(e, env, sizes) == want(mm, kk, tt, jj, a, b), (name, a, b, env)


@pytest.mark.parametrize("name", ["chain", "rows", "sdpa"])
def test_bytes_and_flops_are_counted_at_the_call_sizes(name):
    """kernels()/explain() of a dynamic compile report bytes and flops at the call's sizes:
    the static code's figures for the same arguments (not the placeholders' ~2**80)."""
    W = make((8, 12), F32, rng=rng_for("bf"))
    fn, shape = {"chain": (lambda x: jc.relu(x * 2.0) + 1.0, (3, 7, 8)),
                 "rows": (lambda x: jc.softmax(x) @ W, (4, 9, 8)),
                 "sdpa": (sdpa, (2, 4, 9, 16))}[name]
    args = [make(shape, F32, rng=rng_for("bf", i)) for i in range(3 if name == "sdpa" else 1)]
    dyn, static = jc.jit(fn, dynamic=True), jc.jit(fn)
    got, want = dyn.kernels(*args), static.kernels(*args)
    assert sum(k.flops for k in got) == sum(k.flops for k in want) > 0
    assert sum(k.bytes for k in got) == sum(k.bytes for k in want) > 0
    text = dyn.explain(*args)
    assert f"{sum(k.bytes for k in want)} bytes moved (lower bound)" in text, text
    assert "at this call's sizes (s0=" in text


def test_torch_transformer_encoder_layer_one_compile_for_batch_and_sequence():
    """nn.TransformerEncoderLayer: its lowered indices divide by the run-time sizes (the
    [T, B, H, dh] views of its attention): one compile serves every (B, T)."""
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitcore.torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             batch_first=True, dropout=0.0).eval()
    c = jt.compile(layer, torch.randn(2, 8, 32), dynamic=True)
    with torch.no_grad():
        x = torch.randn(2, 8, 32)
        torch.testing.assert_close(c(x), layer(x), rtol=1e-4, atol=1e-5)
        before = compiles()
        for b, t in [(3, 8), (2, 9), (5, 16), (7, 3), (2, 40)]:
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(c(x), layer(x), rtol=1e-4, atol=1e-5)
    assert compiles() - before == 0
    assert "s0 (in0 dim 0), s1 (in0 dim 1)" in c.explain()


def test_the_parallel_grain_of_a_run_time_row_is_computed_per_call():
    """A kernel whose iterations cost c * s1 (a softmax row over T) splits its range by this
    call's row length (work.grain), not the placeholder's."""
    from jitcore.passes.symbolic import dynamic_extent, per_item
    s0, s1 = dynamic_extent(0), dynamic_extent(1)
    assert per_item(12 * s0 * s1 * s1 + 4 * s0 * s1 + 1000, 4 * s0 * s1) == 3 * s1
    assert per_item(5 * s0 * s1 * s1 * s1, s0) == 5 * s1 * s1 * s1
    assert per_item(8 * s0 * s1 + 64, s0 * s1) is None          # a static cost per item
    assert per_item(4096, 64) is None


# ---- what stays static -----------------------------------------------------------------------

@pytest.mark.parametrize("name,fn,ref,why", [
    ("slice", lambda x: x[:3] * 2.0, lambda x: x[:3] * 2, "slicing a dynamic axis"),
    ("float", lambda x: x / float(x.shape[0]), lambda x: x / x.shape[0],
     "Python needs the value of run-time size s0: float()"),
    ("argmax", lambda x: jc.argmax(x, axis=0), lambda x: x.argmax(axis=0), "arg-reductions"),
])
def test_graphs_that_need_the_extent_compile_per_shape(name, fn, ref, why):
    f = jc.jit(fn, dynamic=True)
    before = compiles()
    sizes = [3, 4, 5]
    for n in sizes:
        x = make((n, 24), F32, rng=rng_for(name, n))
        want = ref(np.float64(x))
        got = f(x)
        if name == "argmax":
            assert_close(got, want, got.dtype, exact=True)
        else:
            assert_close(got, want, F32, rtol=1e-5, atol=1e-5)
    assert compiles() - before == len(sizes)          # one per shape, as documented
    text = f.explain(x)
    assert text.startswith("shapes: every extent static (compiled per shape)")
    assert why in text, text


def test_strided_inputs_are_static():
    f = jc.jit(lambda x: x * 2.0, dynamic=True)
    x = make((6, 10), F32)[:, ::2]
    assert_close(f(x), np.float64(x) * 2, F32)
    assert "no extent can vary" in f.explain(x)


def test_explain_names_the_run_time_extents():
    f = jc.jit(lambda a, b: a + b, dynamic=True)
    a, b = make((5, 4), F32), make((5, 4), F32)
    text = f.explain(a, b)
    assert text.startswith("shapes: run-time extents s0 (a dim 0 = b dim 0)"), text
    assert "f32[s0,4]" in text and "0..4*s0" in text


# ---- checks at the call ------------------------------------------------------------------------

def test_mismatched_dynamic_extents_raise_shape_error():
    f = jc.jit(lambda a, b: a + b, dynamic=True)
    f(make((5, 4), F32), make((5, 4), F32))
    f(make((9, 4), F32), make((9, 4), F32))
    with pytest.raises(jc.ShapeError, match=r"\(6, 4\).*\(5, 4\)|\(5, 4\).*\(6, 4\)|broadcast"):
        f(make((6, 4), F32), make((5, 4), F32))
    with pytest.raises(jc.ShapeError):
        f(make((6, 4), F32), make((6, 5), F32))      # a static extent differs


def test_extents_the_graph_does_not_combine_may_differ():
    """Two arguments with equal leading extents at the first call, independent in the graph:
    a later call where they differ compiles once more (another shape class) and is right."""
    f = jc.jit(lambda a, b: (a * 2.0, b.sum(axis=0)), dynamic=True)
    a, b = make((5, 3), F32), make((5, 3), F32)
    f(a, b)
    before = compiles()
    a, b = make((7, 3), F32), make((4, 3), F32)
    r1, r2 = f(a, b)
    assert_close(r1, np.float64(a) * 2, F32)
    assert_close(r2, np.float64(b).sum(0), F32)
    assert compiles() - before == 1
    for n, m in [(3, 9), (11, 2)]:
        a, b = make((n, 3), F32), make((m, 3), F32)
        r1, r2 = f(a, b)
        assert_close(r2, np.float64(b).sum(0), F32)
    assert compiles() - before == 1


def test_out_and_aliasing():
    f = jc.jit(lambda a, b: a * b + 1.0, dynamic=True)
    for n in [4, 9, 2]:
        a, b = make((n, 8), F32), make((n, 8), F32)
        want = np.float64(a) * b + 1
        out = np.empty((n, 8), np.float32)
        assert f(a, b, out=out) is out
        assert_close(out, want, F32)
        f(a, b, out=a)                                 # out= is an input: computed, then copied
        assert_close(a, want, F32)
        with pytest.raises(jc.ShapeError):
            f(a, b, out=np.empty((n + 1, 8), np.float32))


def test_many_sizes_alternating_calls():
    """Sizes alternate call after call: each goes through its own plan, one compile."""
    f = jc.jit(lambda x: jc.softmax(x * 2.0), dynamic=True)
    xs = [make((n, 40), F32, rng=rng_for("alt", n)) for n in (3, 50, 7)]
    before = compiles()
    for _ in range(3):
        for x in xs:
            e = np.exp(2 * np.float64(x) - 2 * np.float64(x).max(-1, keepdims=True))
            assert_close(f(x), e / e.sum(-1, keepdims=True), F32, rtol=1e-5, atol=1e-7)
    assert compiles() - before == 1


def test_dynamic_axis_moved_inside():
    """(n, 6, 8) -> (6, n, 8) -> softmax -> back: the temp's leading stride is 8n."""
    def fn(x):
        y = jc.softmax(x.transpose(1, 0, 2) * 2.0)
        return (y + 1.0).transpose(1, 0, 2)

    def ref(x):
        y = x.transpose(1, 0, 2) * 2
        e = np.exp(y - y.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True) + 1).transpose(1, 0, 2)
    check_sizes(fn, lambda n: [make((n, 6, 8), F32, rng=rng_for("mv", n))], ref, F32)


def test_torch_compile_dynamic_one_export_one_compile():
    """jitcore.torch.compile(dynamic=True): one export and one compile for every batch size
    and sequence length (the view to heads and back splits B * T rows at run time; q @ k^T
    and att @ v have N and K = T)."""
    torch = pytest.importorskip("torch")
    jt = pytest.importorskip("jitcore.torch")

    class Block(torch.nn.Module):
        def __init__(self, d=32, h=4):
            super().__init__()
            self.qkv, self.o, self.h = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d), h
            self.ln = torch.nn.LayerNorm(d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(x).split(C, dim=-1)
            q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v))
            a = torch.softmax(q @ k.transpose(-1, -2) * (C // self.h) ** -0.5, dim=-1) @ v
            return self.ln(self.o(a.transpose(1, 2).reshape(B, T, C)) + x)
    torch.manual_seed(0)
    m = Block().eval()
    c = jt.compile(m, torch.randn(2, 8, 32), dynamic=True)
    before = compiles()
    with torch.no_grad():
        for b in [3, 5, 2, 9, 4, 6, 7, 8, 10, 11]:
            x = torch.randn(b, 8, 32)
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        assert compiles() - before == 0               # the first batch size's compile serves
        for b, t in [(3, 5), (3, 12), (2, 5), (4, 33), (2, 2)]:
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        assert compiles() - before == 0               # ...and every sequence length
    assert len(c._programs) == 1                      # one export
    assert "shapes: run-time extents s0 (in0 dim 0), s1 (in0 dim 1)" in c.explain()


def test_torch_tensors_with_dynamic():
    torch = pytest.importorskip("torch")
    f = jc.jit(lambda x: jc.relu(x) * 3.0, dynamic=True)
    before = compiles()
    for n in [3, 8]:
        t = torch.randn(n, 5)
        assert_close(f(t), np.maximum(t.numpy().astype(np.float64), 0) * 3, F32)
    assert compiles() - before == 1


@pytest.mark.parametrize("name", ["softmax", "col_sum", "gemm"])
def test_two_threads_split_the_run_time_range(name):
    """Sizes large enough for the pool to split the range (a run-time extent over grain)."""
    W = make((64, 96), F32, rng=rng_for("threads"))
    fn, ref = {"softmax": (lambda x: jc.softmax(x) * 2.0, lambda x: 2 * np.exp(
                   x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(
                   -1, keepdims=True)),
               "col_sum": (lambda x: x.sum(axis=0), lambda x: x.sum(axis=0)),
               "gemm": (lambda x: jc.gelu(x @ W, approximate="tanh") + 0.0, None)}[name]
    dyn, static = jc.jit(fn, dynamic=True, num_threads=2), jc.jit(fn, num_threads=2)
    for n in [3, 2000, 4099]:
        x = make((n, 64), F32, rng=rng_for("t", n))
        got, same = dyn(x), static(x)
        rtol, atol = reduction_tol(F32, n, 3.0)
        assert_close(got, np.float64(same), F32, rtol=rtol, atol=atol)
        if ref is not None:
            assert_close(got, ref(np.float64(x)), F32, rtol=rtol, atol=atol)


def test_the_native_fast_call_serves_every_batch_size_of_a_dynamic_plan():
    """A dynamic graph's native fast call reads the extents from its inputs and allocates the
    output at this call's shape: calls with new batch sizes stay on the fast path."""
    f = jc.jit(lambda a, b: a * b + 1.0, dynamic=True)
    x = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)
    f(x, x)
    plan = next(iter(f._plans.values()))
    assert plan.compiled.fastcall_address is not None
    for rows in (2, 3, 9, 64, 5):
        a = np.linspace(-1, 1, rows * 7, dtype=np.float32).reshape(rows, 7)
        got = plan.fast((a, a))
        assert got.shape == (rows, 7) and got.dtype == np.float32
        np.testing.assert_allclose(got, a.astype(np.float64) ** 2 + 1, rtol=1e-6)
    from jitcore.call.plan import MISMATCH
    assert plan.fast((x[:1], x[:1])) is MISMATCH            # size 1 compiles on its own
    # outputs from the output cache's size on go to the Python path (which takes them there)
    from jitcore.cache import outputs as output_cache
    from jitcore.llvm.entry import LARGE_OUTPUT_BYTES
    assert LARGE_OUTPUT_BYTES == output_cache.MIN_BYTES
    big = np.ones((output_cache.MIN_BYTES // 28 + 1, 7), np.float32)
    assert plan.fast((big, big)) is MISMATCH
    np.testing.assert_array_equal(f(big, big), np.full(big.shape, 2, np.float32))


def test_slices_below_every_run_time_extent_stay_dynamic():
    """Each run-time extent is >= 2 in its class, so x[:, :2], x[:, 0] and x[:, 1] read the
    same elements at every size (BERT's [CLS] token): one compile; x[:, :3] needs T >= 3."""
    f = jc.jit(lambda x: x[:, 0] + x[:, 1] * 2.0 + x[:, :2].sum(axis=1), dynamic=True)
    before = compiles()
    for B, T in [(2, 5), (3, 2), (4, 9), (2, 17)]:
        x = make((B, T, 8), F32, rng=rng_for("cls", B, T))
        want = x[:, 0] + x[:, 1] * 2.0 + x[:, :2].sum(axis=1)
        assert_close(f(x), np.float64(want), F32, rtol=1e-6, atol=1e-6)
    assert compiles() - before == 1


# ---- decode attention: matrix-vector products along a run-time cache length ----------------

def decode_attention(q, k, v):
    return jc.softmax(q @ jc.transpose(k, (0, 1, 3, 2)) * 0.25) @ v


def decode_attention_ref(q, k, v):
    return softmax_ref(q @ k.transpose(0, 1, 3, 2) * 0.25) @ v


def decode_args(dtype):
    def args(B, T):
        rng = rng_for("decode", B, T, str(dtype))
        return [make((B, 4, 1, 16), dtype, rng=rng), make((B, 4, T, 16), dtype, rng=rng),
                make((B, 4, T, 16), dtype, rng=rng)]
    return args


DECODE_PAIRS = [(2, 3), (2, 16), (2, 17), (3, 33), (2, 100), (4, 5), (2, 64), (2, 1000)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_decode_attention_gemvs_one_compile_across_cache_lengths(dtype):
    """One query row against a cache of T rows (q [B, 4, 1, 16], k and v [B, 4, T, 16]):
    q @ k^T is the "rows" GEMV with T outputs, p @ v the "columns" one with K = T. Both read
    the run-time T: one compile for every cache length (a decode step must not compile per
    token). Caches stored transposed or [T, B, heads, dim], whose T numpy's shape classes
    do not make run-time, run through torch.export's symbols in tests/test_torch_dynamic.py."""
    args = decode_args(dtype)
    rtol, atol = (1e-4, 1e-5) if dtype == F32 else (1e-11, 1e-12)
    dyn = check_pairs(decode_attention, args, decode_attention_ref, dtype,
                      pairs=DECODE_PAIRS + [(1, 9), (2, 1)], rtol=rtol, atol=atol)
    kinds = [k.kind for k in dyn.kernels(*args(2, 9))]
    assert kinds.count("gemv") == 2, kinds
    assert "compiled per shape" not in dyn.explain(*args(2, 9))


@pytest.mark.parametrize("level", runnable_levels())
def test_run_time_gemvs_are_bitwise_the_static_code(level):
    """q @ k^T (T outputs) and p @ v (K = T) with a run-time T and batch give the per-shape
    compile's bits at every instruction-set level (their loops split K and the outputs at
    run time as a static extent is split), and T past the vectors' and unrolling's
    multiples."""
    def scores(q, k):
        return q @ jc.transpose(k, (0, 1, 3, 2))

    def attention(q, k, v):        # (v's K = T comes from q and k: a [B, 4, 1, T] input's T,
        return scores(q, k) * 0.25 @ v      # its last axis, is no run-time candidate)
    for fn in (scores, attention):
        dyn, static = jc.jit(fn, dynamic=True, target=level), jc.jit(fn, target=level)
        before = compiles()
        for B, T in [(2, 3), (3, 17), (2, 40), (2, 1000)]:
            rng = rng_for("gemv-bits", level, fn.__name__, B, T)
            args = [make((B, 4, 1, 16), F32, rng=rng), make((B, 4, T, 16), F32, rng=rng),
                    make((B, 4, T, 16), F32, rng=rng)][:2 if fn is scores else 3]
            got, want = dyn(*args), static(*args)
            assert got.shape == want.shape and np.array_equal(got, want), (level, B, T)
        assert compiles() - before <= 1 + 4, level        # (4: the static function's)
        kinds = [k.kind for k in dyn.kernels(*args)]
        assert kinds.count("gemv") == (1 if fn is scores else 2), kinds
        assert "compiled per shape" not in dyn.explain(*args)

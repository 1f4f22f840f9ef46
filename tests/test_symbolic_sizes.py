"""Sizes that Python reads in a dynamic trace (jc.jit(dynamic=True)): symbols, never numbers.

`x.shape[k]` of a run-time axis is a `Size`: integer arithmetic stays symbolic, a size used as
a value is read from the call's extents (one compile serves every size), and a question only
the value answers specializes the compile (correct for every size, a compile per value,
explain() says why). Each pattern runs at many sizes, alternating, against numpy in float64;
no placeholder may reach a result, a message or a pass that loops over it.
"""
import math
import operator
import time

import numpy as np
import pytest

import jitcore as jc
from jitcore.ir.sizes import PLACEHOLDERS, Size, SizeValueNeeded, dynamic_extent

from helpers import assert_close

# 0 and 1 compile on their own; primes, sizes around and above the vector width; revisits
SIZES = [5, 2, 0, 7, 1, 13, 8, 17, 3, 31, 64, 5, 2]


def compiles() -> int:
    return jc.cache_info()["compiles"]


def _placeholder_free(text: str) -> bool:
    return not any(str(p)[:8] in text for p in PLACEHOLDERS)


s0, s1 = Size.of(dynamic_extent(0)), Size.of(dynamic_extent(1))


# ---- the Size type ---------------------------------------------------------------------------

def test_integer_arithmetic_stays_symbolic_and_prints_readably():
    assert repr(s0) == "s0" and repr(2 * s0 * s1 - 3) == "2*s0*s1 - 3"
    assert repr(-s0 + 1) == "-s0 + 1" and repr(s0 - s0) == "0"
    assert (4 * s0) // 2 == 2 * s0 and (4 * s0 + 3) % 2 == 1 and (s0 * s1) // s1 == s0
    assert s0 ** 2 == s0 * s0 and (s0 + 1) - 1 == s0 and np.int64(3) * s0 == 3 * s0
    assert (2 * s0).extent == 2 * dynamic_extent(0)
    assert hash(s0 * 1) == hash(s0) and {s0: 1}[s0 + 0] == 1


@pytest.mark.parametrize("question,answer", [
    (lambda: s0 > 1, True), (lambda: s0 >= 2, True), (lambda: s0 == 1, False),
    (lambda: s0 != 0, True), (lambda: 0 < s0, True), (lambda: s0 * s1 > 3, True),
    (lambda: bool(s0), True), (lambda: s0 == s1, False), (lambda: s0 != s1, True),
    (lambda: s0 + 1 > s0, True), (lambda: 1 - s0 < 0, True), (lambda: 1 // s0, 0),
    (lambda: 1 % s0, 1), (lambda: abs(s0), s0),
])
def test_questions_every_size_agrees_on_are_answered(question, answer):
    """Each symbol is >= 2 in its class and distinct symbols are distinct extents."""
    assert question() == answer


@pytest.mark.parametrize("question", [
    lambda: s0 > 3, lambda: s0 == 5, lambda: s0 < s1, lambda: s0 == 2 * s1, lambda: int(s0),
    lambda: float(s0), lambda: math.sqrt(s0), lambda: range(s0), lambda: np.arange(s0),
    lambda: s0 // 2, lambda: s0 % 3, lambda: [0] * s0, lambda: operator.index(s0),
    lambda: np.zeros(s0), lambda: (s0 + 1).extent, lambda: s0 > 2.5,
])
def test_questions_only_the_value_answers_raise_size_value_needed(question):
    with pytest.raises(SizeValueNeeded) as e:
        question()
    assert "run-time size" in str(e.value) and "test_symbolic_sizes.py" in str(e.value)
    assert _placeholder_free(str(e.value))


# ---- sizes used as values: one compile for every size -----------------------------------------

VALUE_PATTERNS = {
    "np_sqrt": (lambda x: x / np.sqrt(x.shape[1]),
                lambda x: x / np.sqrt(x.shape[1])),
    "pow_half": (lambda x: x * x.shape[1] ** -0.5, lambda x: x * x.shape[1] ** -0.5),
    "reciprocal": (lambda x: x * (1 / x.shape[0]), lambda x: x * (1 / x.shape[0])),
    "times_float": (lambda x: x + x.shape[0] * 0.5, lambda x: x + x.shape[0] * 0.5),
    "mean_by_hand": (lambda x: x - x.sum(axis=1, keepdims=True) / x.shape[1],
                     lambda x: x - x.sum(axis=1, keepdims=True) / x.shape[1]),
    "size_attr": (lambda x: x.sum() / x.size + x, lambda x: x.sum() / x.size + x),
    "int_product": (lambda x: x * (x.shape[0] * x.shape[1] - 1),
                    lambda x: x * (x.shape[0] * x.shape[1] - 1)),
    "reshape_merge": (lambda x: x.reshape(x.shape[0] * x.shape[1], -1) * 2.0,
                      lambda x: x.reshape(x.shape[0] * x.shape[1], -1) * 2.0),
    "where_size": (lambda x: jc.where(x > 0.5, x.shape[1], x),
                   lambda x: np.where(x > 0.5, x.shape[1], x)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(VALUE_PATTERNS))
def test_sizes_used_as_values_are_read_at_run_time(name, dtype):
    fn, ref = VALUE_PATTERNS[name]
    f = jc.jit(fn, dynamic=True)
    rng = np.random.default_rng(len(name))
    before, special = compiles(), set()
    for k, n in enumerate(SIZES):
        B, T = (n, 3 + k % 4) if k % 2 else (2 + k % 3, n)
        x = rng.standard_normal((B, T, 4)).astype(dtype)
        try:
            want_dtype, want = np.asarray(ref(x)).dtype, ref(x.astype(np.float64))
        except (ZeroDivisionError, ValueError) as e:     # numpy refuses this size too
            with pytest.raises(type(e)):
                f(x)
            continue
        got = f(x)
        assert got.shape == want.shape and got.dtype == want_dtype
        # (a difference of a sum and the row: absolute error at the rows' scale)
        assert_close(got, want, want_dtype, atol=8 * np.finfo(want_dtype).eps * 4)
        special.add((B, T) if min(B, T) < 2 else "run-time")
    # one compile for every size >= 2, and one per shape with an extent of 0 or 1
    assert compiles() - before <= len(special), (compiles() - before, special)
    x = rng.standard_normal((4, 6, 4)).astype(dtype)
    assert "run-time extents s0 (x dim 0), s1 (x dim 1)" in f.explain(x)


def test_one_compile_serves_every_size_for_a_scaled_attention_score():
    """The pattern the probe found baked: q @ k^T / sqrt(d) with d read as a size."""
    f = jc.jit(lambda q, k: jc.softmax(q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[1]), -1),
               dynamic=True)
    rng = np.random.default_rng(1)
    f(rng.standard_normal((2, 4, 8)), rng.standard_normal((2, 4, 8)))
    before = compiles()
    for T in [5, 9, 16, 3, 33, 7, 12, 2, 20, 6]:
        q, k = rng.standard_normal((2, T, 8)), rng.standard_normal((2, T, 8))
        s = q @ k.transpose(0, 2, 1) / np.sqrt(T)
        e = np.exp(s - s.max(-1, keepdims=True))
        assert_close(f(q, k), e / e.sum(-1, keepdims=True), np.float64)
    assert compiles() == before


# ---- sizes Python must know: specialized, correct, explained ----------------------------------

SPECIALIZING = {
    "branch": (lambda x: x * 2.0 if x.shape[0] > 3 else x - 1.0,
               lambda x: x * 2.0 if x.shape[0] > 3 else x - 1.0, "comparing s0 > 3"),
    "math_sqrt": (lambda x: x / math.sqrt(x.shape[1]), lambda x: x / math.sqrt(x.shape[1]),
                  "float()"),
    "float": (lambda x: x * float(x.shape[0]), lambda x: x * float(x.shape[0]), "float()"),
    "range": (lambda x: sum(x[:, i] * i for i in range(x.shape[1])),
              lambda x: sum(x[:, i] * i for i in range(x.shape[1])), "use as a Python int"),
    "np_arange": (lambda x: x + np.arange(x.shape[1])[:, None],
                  lambda x: x + np.arange(x.shape[1])[:, None], "Python needs the value"),
    "len": (lambda x: x * len(x), lambda x: x * len(x), "len()"),
    "odd": (lambda x: x + (x.shape[0] % 2), lambda x: x + (x.shape[0] % 2), "s0 % 2"),
}


@pytest.mark.parametrize("name", sorted(SPECIALIZING))
def test_sizes_python_must_know_specialize_with_a_reason(name):
    fn, ref, why = SPECIALIZING[name]
    f = jc.jit(fn, dynamic=True)
    rng = np.random.default_rng(len(name))
    for k, n in enumerate(SIZES):
        B, T = (n, 5) if k % 2 else (3, n)
        if name == "range" and T == 0:
            continue                            # (numpy's sum() of nothing is the int 0)
        x = rng.standard_normal((B, T, 4)).astype(np.float32)
        got, want = f(x), ref(x.astype(np.float64))
        dtype = np.asarray(ref(x)).dtype
        tol = T * 2 * np.finfo(dtype).eps                                    # (sums of T)
        assert_close(got, want, dtype, rtol=tol, atol=tol)
    x = rng.standard_normal((4, 6, 4)).astype(np.float32)
    text = f.explain(x)
    assert why in text and "test_symbolic_sizes.py" in text, text
    assert _placeholder_free(text) and _placeholder_free(f.graph(x))


# ---- no pass enumerates a symbolic extent -----------------------------------------------------

FAMILIES = {
    "max_pool_after_relu": lambda x: jc.max_pool2d(jc.relu(x), 2),
    "max_pool_after_clip": lambda x: jc.max_pool2d(jc.clip(x, 0.0, 6.0), 3, 2, 1),
    "avg_pool": lambda x: jc.avg_pool2d(x, 2),
    "adaptive_pool": lambda x: jc.adaptive_avg_pool2d(x, 1),
    "conv_stem": lambda x: jc.max_pool2d(jc.relu(jc.conv2d(x, np.ones((4, 3, 3, 3),
                                                                     np.float32), padding=1)), 2),
    "pad": lambda x: jc.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2))),
    "cumsum": lambda x: jc.cumsum(x, axis=2),
    "concat": lambda x: jc.concatenate([x, x * 2.0], axis=2),
    "slice": lambda x: x[:, :, 1:-1] + 1.0,
    "take": lambda x: jc.take(x, np.array([0, 2, 1]), axis=2),
    "argmax": lambda x: jc.argmax(x, axis=2),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_traced_with_run_time_sizes_compiles_in_bounded_time(name):
    """The pooling rewrite once enumerated ~5e11 placeholder windows: each family must
    compile (dynamically or per shape) in a time that does not grow with a size's value."""
    f = jc.jit(FAMILIES[name], dynamic=True)
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 16, 16), (3, 3, 9, 12)]:
        x = rng.standard_normal(shape).astype(np.float32)
        t0 = time.perf_counter()
        got = f(x)
        assert time.perf_counter() - t0 < 30
        want = jc.jit(FAMILIES[name])(x)            # the static compile
        assert got.shape == want.shape
        if got.dtype.kind == "f":
            # a sum over run-time extents may add in another order than the static kernel
            # (its accumulators and blocks are chosen without the extents): float32 rounding
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(got, want)
        assert _placeholder_free(f.explain(x))


def test_errors_name_sizes_never_placeholders():
    f = jc.jit(lambda x: x.reshape(x.shape[0], 5, -1), dynamic=True)
    with pytest.raises(jc.ShapeError) as e:
        f(np.ones((4, 6, 3), np.float32))
    assert _placeholder_free(str(e.value)), str(e.value)


def test_jc_arange_is_numpys_and_specializes_on_a_run_time_size():
    np.testing.assert_array_equal(jc.arange(5), np.arange(5))
    np.testing.assert_array_equal(jc.arange(2, 11, 3, dtype=jc.float32),
                                  np.arange(2, 11, 3, dtype=np.float32))
    f = jc.jit(lambda x: x + jc.arange(x.shape[1], dtype=np.float32)[:, None], dynamic=True)
    for B, T in [(3, 5), (2, 9), (4, 5)]:
        x = np.ones((B, T, 4), np.float32)
        np.testing.assert_array_equal(f(x), x + np.arange(T, dtype=np.float32)[:, None])
    assert "jc.arange's bound" in f.explain(np.ones((3, 5, 4), np.float32))

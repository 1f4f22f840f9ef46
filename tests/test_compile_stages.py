"""Compile time, made visible and shared: per-stage seconds in explain() and cache_info(),
and kernels equal up to names generated and compiled once per process (a layer repeated in a
model, a kernel shared by graphs), with each graph's own buffers."""
import numpy as np
import pytest

import jitcore as jc
from jitcore.compiler import STAGES
from jitcore.passes.kernel_key import kernel_key
from jitcore.passes.pipeline import run_pipeline
from jitcore.call.signature import signature_of
from jitcore.targetinfo import select_target

RNG = np.random.default_rng(7)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def test_explain_and_cache_info_give_every_stage():
    before = jc.cache_info()["compile_seconds"]
    f = jc.jit(lambda a, w: jc.gelu(a @ w) + jc.exp(a).sum(axis=1, keepdims=True))
    # (shapes no other test compiles: kernels another test built in this process would be
    # linked from memory, with no optimization or machine code stage to report)
    report = f.explain(jc.spec((16, 37), jc.float32), jc.spec((37, 8), jc.float32))
    line = report.splitlines()[-1]
    assert line.startswith("compile: ")
    for label in ("trace", "passes", "IR generation", "link"):
        assert label in line, line
    assert ("optimization" in line and "machine code" in line) or "disk cache load" in line
    after = jc.cache_info()["compile_seconds"]
    assert set(STAGES) | {"total"} <= set(after)
    assert after["total"] > before["total"]
    assert all(after[s] >= before[s] for s in after)


def layers(n):
    def net(x, *ws):
        for w, b in zip(ws[0::2], ws[1::2]):
            x = jc.relu(x @ w + b)
        return x
    return net


def test_repeated_layers_are_generated_and_compiled_once():
    n = 6
    x = randn(8, 24)
    ws = [a for _ in range(n) for a in (randn(24, 24) * 0.3, randn(24))]
    before = jc.cache_info()
    got = jc.jit(layers(n))(x, *ws)
    after = jc.cache_info()
    want = x.astype(np.float64)
    for w, b in zip(ws[0::2], ws[1::2]):
        want = np.maximum(want @ w + b, 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    generated = after["kernels_generated"] - before["kernels_generated"]
    reused = after["kernels_reused"] - before["kernels_reused"]
    # at most three distinct kernels: the first layer reads the input, the middle ones read
    # and write temps, the last one writes the output
    assert generated + reused == n and generated <= 3, (generated, reused)
    assert after["modules_reused"] - before["modules_reused"] >= n - 3


def test_a_kernel_shared_by_graphs_reads_each_graphs_own_buffers():
    """The same kernel (a*b+1 over (64, 33) float32) sits at other slots in other graphs: each
    graph passes its own buffers."""
    a, b, c = randn(64, 33), randn(64, 33), randn(64, 33)
    f1 = jc.jit(lambda p, q: p * q + 1.0)
    f2 = jc.jit(lambda p, q, r: (jc.tanh(r), q * r + 1.0, p * q + 1.0))
    f3 = jc.jit(lambda p, q: (q * p + 1.0, p * p + 1.0))
    np.testing.assert_allclose(f1(a, b), a * b + 1, rtol=1e-6)
    t, u, v = f2(a, b, c)
    np.testing.assert_allclose(t, np.tanh(c), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(u, b * c + 1, rtol=1e-6)
    np.testing.assert_allclose(v, a * b + 1, rtol=1e-6)
    s, sq = f3(a, b)
    np.testing.assert_allclose(s, b * a + 1, rtol=1e-6)
    np.testing.assert_allclose(sq, a * a + 1, rtol=1e-6)


def kernel_keys(fn, *specs):
    """(key, slots) of each kernel a function lowers to, for these specs."""
    f = jc.jit(fn)
    names = [f"a{i}" for i in range(len(specs))]
    sigs = [signature_of(s, i, n) for i, (s, n) in enumerate(zip(specs, names))]
    traced = f._trace(sigs, names)
    target = select_target()
    strides = {inp.arg: sig[2] for inp, sig in zip(traced.inputs, sigs)}
    lowered = run_pipeline(traced, target.vector_bits, strides, target.masked_tails)
    return [kernel_key(k) for k in lowered.kernels]


F32 = jc.spec((64, 40), jc.float32)


@pytest.mark.parametrize("fn_a, fn_b, specs_a, specs_b", [
    (lambda a, b: a * b + 2.0, lambda a, b: a * b + 3.0, (F32, F32), (F32, F32)),   # constant
    (lambda a, b: a * b, lambda a, b: a + b, (F32, F32), (F32, F32)),               # op
    (lambda a, b: a * b, lambda a, b: a * a, (F32, F32), (F32, F32)),               # buffers
    (lambda a, b: a - b, lambda a, b: a - b.T, (F32, F32),
     (F32, jc.spec((40, 64), jc.float32))),                                         # strides
    (lambda a, b: a * b, lambda a, b: a * b, (F32, F32),
     (jc.spec((64, 40), jc.float64), jc.spec((64, 40), jc.float64))),              # dtype
    (lambda a, b: a * b, lambda a, b: a * b, (F32, F32),
     (jc.spec((64, 41), jc.float32), jc.spec((64, 41), jc.float32))),              # shape
    (lambda a: jc.exp(a).sum(axis=1), lambda a: jc.exp(a).sum(axis=0), (F32,), (F32,)),
    (lambda a: a * 0.0, lambda a: a * -0.0, (F32,), (F32,)),                        # -0.0
])
def test_structurally_different_kernels_have_different_keys(fn_a, fn_b, specs_a, specs_b):
    keys_a = [k for k, _ in kernel_keys(fn_a, *specs_a)]
    keys_b = [k for k, _ in kernel_keys(fn_b, *specs_b)]
    assert keys_a != keys_b


def test_equal_kernels_have_equal_keys_and_their_own_slots():
    (key_a, slots_a), = kernel_keys(lambda a, b: jc.relu(a * b + 1.0), F32, F32)
    (key_b, slots_b), = kernel_keys(lambda p, q: jc.relu(p * q + 1.0), F32, F32)
    assert key_a == key_b and len(slots_a) == 3          # two inputs and the output
    hash(key_a)
    # the same kernel at other slots of a bigger graph: equal key, that graph's slots
    keys = kernel_keys(lambda c, a, b: (jc.tanh(c), jc.relu(a * b + 1.0)),
                       jc.spec((7,), jc.float32), F32, F32)
    assert key_a in [k for k, _ in keys]
    assert [s for k, s in keys if k == key_a][0] != slots_a


def test_deep_chains_have_keys_without_recursion():
    def chain(a, b):
        for i in range(1500):
            a = a * b + float(i % 5)
        return a
    keys = kernel_keys(chain, jc.spec((256,), jc.float32), jc.spec((256,), jc.float32))
    assert keys and all(hash(k) is not None for k, _ in keys)

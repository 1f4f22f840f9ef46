"""Every registered kernel kind, under test: a sample program that compiles to a kernel of
that kind, run against numpy in float64, its kind field the registered one, and its line in
explain() naming the kind. SAMPLES must cover the registry (jitcore/llvm/kinds.py), so a
kind registered without a sample fails here."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from jitcore.llvm.kinds import KINDS
from jitcore.passes.kernel import Kind

R = np.random.default_rng(28)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _conv_ref(x, w, pad, groups=1):
    """A direct NCHW convolution (stride 1) in float64."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, cg, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], o, oh, ow))
    og = o // groups
    for g in range(groups):
        xg, wg = x[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", xg[:, :, i:i + oh, j:j + ow], wg[:, :, i, j])
    return out


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# kind -> (program, its inputs, the float64 reference of its output)
SAMPLES = {
    Kind.POINTWISE: (lambda x: jc.exp(x) * 2 + 1, lambda: [f32(300, 37)],
                     lambda x: np.exp(x) * 2 + 1),
    Kind.TILES: (lambda x: x.T + 1, lambda: [f32(256, 300)], lambda x: x.T + 1),
    Kind.REDUCE_HORIZONTAL: (lambda x: x.sum(axis=1), lambda: [f32(300, 513)],
                             lambda x: x.sum(axis=1)),
    Kind.REDUCE_VERTICAL: (lambda x: x.sum(axis=0), lambda: [f32(300, 513)],
                           lambda x: x.sum(axis=0)),
    Kind.SCAN: (lambda x: jc.cumsum(x, axis=1), lambda: [f32(64, 100)],
                lambda x: np.cumsum(x, axis=1)),
    Kind.ROWS: (lambda x: jc.softmax(x, axis=-1), lambda: [f32(64, 1000)], _softmax_ref),
    Kind.GEMM: (lambda a, b: jc.relu(a @ b + 1), lambda: [f32(128, 96), f32(96, 200)],
                lambda a, b: np.maximum(a @ b + 1, 0)),
    Kind.GEMV: (lambda a, v: a @ v, lambda: [f32(300, 200), f32(200)], lambda a, v: a @ v),
    Kind.CONV: (lambda x, w: jc.relu(jc.conv2d(x, w, padding=1)),
                lambda: [f32(2, 8, 12, 12), f32(16, 8, 3, 3)],
                lambda x, w: np.maximum(_conv_ref(x, w, 1), 0)),
    Kind.DEPTHWISE: (lambda x, w: jc.relu(jc.conv2d(x, w, padding=1, groups=8)),
                     lambda: [f32(2, 8, 12, 12), f32(8, 1, 3, 3)],
                     lambda x, w: np.maximum(_conv_ref(x, w, 1, groups=8), 0)),
    Kind.POOL: (lambda x: jc.max_pool2d(x, 2), lambda: [f32(2, 8, 16, 16)],
                lambda x: x.reshape(2, 8, 8, 2, 8, 2).max(axis=(3, 5))),
}


def test_every_kind_is_registered_and_has_a_sample():
    assert set(KINDS) == set(Kind)
    assert set(SAMPLES) == set(KINDS), "register a kind with a sample program here"


@pytest.mark.parametrize("kind", sorted(KINDS, key=str), ids=str)
def test_kind_sample_compiles_matches_numpy_and_reports_its_kind(kind):
    fn, make_inputs, reference = SAMPLES[kind]
    inputs = make_inputs()
    f = jc.jit(fn)
    got = f(*inputs)
    want = reference(*[x.astype(np.float64) for x in inputs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    lowered = f.kernels(*inputs)
    assert [k.kind for k in lowered] == [kind], [str(k) for k in lowered]
    explained = f.explain(*inputs)
    assert f": {kind.value} " in explained or f": {kind.value}\n" in explained, explained


def test_the_pipeline_rejects_a_kernel_whose_fields_do_not_fit_its_kind():
    from jitcore.ir.errors import CompileError
    from jitcore.passes.kernel import kind_error, verify_kinds
    from jitcore.passes.pipeline import run_pipeline

    f = jc.jit(lambda a, b: a @ b)
    names, sigs, weak = f._signatures((f32(8, 4), f32(4, 8)))
    graph = f._trace(sigs, names, weak)
    kernel = run_pipeline(graph, 256).kernels[0]
    assert kernel.kind == Kind.GEMM and kind_error(kernel) is None
    kernel.kind = Kind.POOL
    assert "fields of gemm" in kind_error(kernel)
    with pytest.raises(CompileError, match="fields of gemm"):
        verify_kinds([kernel])

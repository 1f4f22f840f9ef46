"""Constants start on a cache line: the arrays a compiled graph passes its kernels (prepacked
GEMM, GEMV, conv and Winograd panels, bf16 pairs, constants as given) are 64-byte aligned,
whatever the alignment of the user's array, and the results are unchanged."""
import numpy as np
import pytest

import jitcore as jc
from jitcore.ir.graph import CONST_ALIGN, ConstArray, aligned_copy, aligned_zeros, is_aligned
from helpers import assert_close, ref_conv2d

F32 = np.float32


def misaligned(array: np.ndarray, by: int = 4) -> np.ndarray:
    """A copy of `array` whose data starts `by` bytes past a cache line."""
    raw = np.empty(array.nbytes + 2 * CONST_ALIGN, np.uint8)
    skip = -raw.ctypes.data % CONST_ALIGN + by
    out = raw[skip:skip + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    assert out.ctypes.data % CONST_ALIGN == by
    return out


def const_arrays(f, *args):
    return f._compiled(args).layout.consts


@pytest.mark.parametrize("by", [0, 4, 16, 36])
def test_helpers(by):
    a = misaligned(np.arange(37, dtype=F32).reshape(1, 37), by)
    c = aligned_copy(a)
    assert is_aligned(c) and c.shape == a.shape and c.dtype == a.dtype
    np.testing.assert_array_equal(c, a)
    z = aligned_zeros((3, 5, 7), np.int32)
    assert is_aligned(z) and z.shape == (3, 5, 7) and not z.any()
    for const in (ConstArray(a), ConstArray.owned(a.copy()), ConstArray.owned(a[:, ::2]),
                  ConstArray.derived(a.ravel(), ConstArray(a), "test")):
        assert is_aligned(const.array) and not const.array.flags.writeable
    np.testing.assert_array_equal(ConstArray.owned(a[:, ::2]).array, a[:, ::2])


def _cases():
    rng = np.random.default_rng(7)
    x_mat = rng.standard_normal((48, 96)).astype(F32)
    w_mat = rng.standard_normal((96, 80)).astype(F32)
    x_vec = rng.standard_normal((1, 96)).astype(F32)
    x_img = rng.standard_normal((1, 40, 20, 20)).astype(F32)
    w3 = (rng.standard_normal((40, 40, 3, 3)) * 0.1).astype(F32)
    w1 = (rng.standard_normal((72, 40, 1, 1)) * 0.1).astype(F32)
    wd = (rng.standard_normal((40, 1, 3, 3)) * 0.1).astype(F32)
    bias = rng.standard_normal(80).astype(F32)
    # each reference: (float64 value, sum of |terms|, terms per output)
    return [
        ("gemm", lambda x, w: jc.relu(x @ w), x_mat, w_mat,
         lambda x, w: (np.maximum(x @ w, 0), abs(x) @ abs(w), 96)),
        ("gemv", lambda x, w: x @ w, x_vec, w_mat, lambda x, w: (x @ w, abs(x) @ abs(w), 96)),
        ("winograd", lambda x, w: jc.conv2d(x, w, padding=1), x_img, w3,
         lambda x, w: ref_conv2d(x, w, None, padding=1) + (40 * 9 + 12,)),
        ("direct 1x1", lambda x, w: jc.conv2d(x, w), x_img, w1,
         lambda x, w: ref_conv2d(x, w, None) + (40,)),
        ("depthwise", lambda x, w: jc.conv2d(x, w, padding=1, groups=40), x_img, wd,
         lambda x, w: ref_conv2d(x, w, None, padding=1, groups=40) + (9,)),
        ("bias as given", lambda x, w: x @ w_mat + w, x_mat, bias,
         lambda x, w: (x @ w_mat + w, abs(x) @ abs(w_mat) + abs(w), 97)),
    ]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
@pytest.mark.parametrize("by", [4, 16])
def test_compiled_constants_start_on_a_cache_line(case, by):
    _, fn, x, w, ref = case
    w = misaligned(w, by)
    f = jc.jit(fn, constants={"w": w})
    consts = const_arrays(f, x)
    assert consts and all(is_aligned(c) for c in consts), \
        [c.ctypes.data % CONST_ALIGN for c in consts]
    value, magnitude, terms = ref(x.astype(np.float64), w.astype(np.float64))
    # float32 sums of `terms` products (Winograd: its transforms' terms too), each term's
    # rounding bounded by the unit roundoff times the sum of |terms|
    assert_close(f(x), value, F32, rtol=0, atol=2 * terms * 2.0 ** -24 * magnitude)

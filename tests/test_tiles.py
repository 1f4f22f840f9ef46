"""Transposed reads vectorized through register tiles: every dtype, tile edges in both
directions, tile loops that are not the outermost, thread splits, and the cases that cannot
tile (they stay scalar with `non_contiguous_load`). Widths come from jc.target_info(): the
tile tests run at every width this process compiles for (WIDTHS), the others at the default."""
from __future__ import annotations

import numpy as np
import pytest

import jitcore as jc
from helpers import (ALL_DTYPES, F32, F64, WIDTHS, assert_close, assert_same, dtype_id, f64,
                     make, rng_for)

TILE_MAX_LANES = 16          # passes/legality.py: a tile is at most 16 x 16 elements


def _tiled(kernel) -> bool:
    return kernel.vectorized and "tiles" in kernel.loop_nest


@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(16, 16), (33, 47), (64, 100), (130, 17), (300, 270)])
def test_transpose_add_every_dtype_and_edge(dtype, shape, width):
    rng = rng_for("tile", dtype.name, *shape)
    a = make(shape, dtype, rng=rng)
    b = make(shape[::-1], dtype, rng=rng)
    op = (lambda x, y: x | y) if dtype.kind == "b" else (lambda x, y: x + y)
    f = jc.jit(lambda a, b: op(a, b.T), vector_width=width)
    (k,) = f.kernels(a, b)
    assert _tiled(k), k
    assert k.vector_width == width
    assert k.lanes == min(width // (8 * dtype.itemsize), TILE_MAX_LANES)
    got = f(a, b)
    if dtype.kind == "f":
        assert_same(got, f64(a) + f64(b).T, dtype)
    else:
        assert_same(got, op(a, b.T))


def test_tile_loop_inside_an_outer_batch_loop():
    rng = rng_for("batch")
    x = make((3, 40, 70), F32, rng=rng)
    f = jc.jit(lambda x: jc.exp(jc.transpose(x, (0, 2, 1))) * 2.0)
    (k,) = f.kernels(x)
    assert _tiled(k)
    assert_close(f(x), np.exp(f64(x).transpose(0, 2, 1)) * 2.0, F32)


def test_transposed_and_contiguous_operands_mixed_with_broadcast():
    rng = rng_for("mixed")
    a, b = make((48, 80), F64, rng=rng), make((80, 48), F64, rng=rng)
    c = make((80,), F64, rng=rng)
    f = jc.jit(lambda a, b, c: jc.tanh(a * b.T + c) - b.T)
    (k,) = f.kernels(a, b, c)
    assert _tiled(k)
    # the subtraction cancels, and a*b+c may be fused: errors are relative to the terms
    terms = np.abs(a * b.T) + np.abs(c) + np.abs(b.T)
    assert_close(f(a, b, c), np.tanh(a * b.T + c) - b.T, F64, scale=terms)


def test_negative_strides_and_slices_tile():
    rng = rng_for("neg")
    b = make((90, 70), F32, rng=rng)
    view = b[::-1, 5:]                    # (90, 65), row stride -70
    f = jc.jit(lambda v: v.T + 1.0)
    (k,) = f.kernels(view)
    assert _tiled(k)
    assert_close(f(view), f64(view).T + 1.0, F32)


@pytest.mark.parametrize("threads", [1, 2])
def test_tiled_kernel_split_across_threads(threads):
    rng = rng_for("threads", threads)
    a, b = make((1003, 517), F32, rng=rng), make((517, 1003), F32, rng=rng)
    f = jc.jit(lambda a, b: a - b.T, num_threads=threads)
    assert_close(f(a, b), f64(a) - f64(b).T, F32)


def test_transpose_into_out_and_several_outputs():
    rng = rng_for("outs")
    a, b = make((40, 56), F32, rng=rng), make((56, 40), F32, rng=rng)
    f = jc.jit(lambda a, b: (a + b.T, a * b.T))
    (k,) = f.kernels(a, b)
    assert _tiled(k) and len(f.kernels(a, b)) == 1
    o1, o2 = np.empty((40, 56), np.float32), np.empty((40, 56), np.float32)
    f(a, b, out=(o1, o2))
    assert_close(o1, f64(a) + f64(b).T, F32)
    assert_close(o2, f64(a) * f64(b).T, F32)


def test_strided_both_ways_cannot_tile():
    x = make((64, 128), F32, rng=rng_for("both"))[:, ::2]     # inner stride 2, no unit loop
    f = jc.jit(lambda v: v.T * 3.0)
    (k,) = f.kernels(x)
    assert not k.vectorized and k.reason == "non_contiguous_load"
    assert_close(f(x), f64(x).T * 3.0, F32)


def test_too_small_to_tile_stays_scalar():
    # 3 rows: fewer than the float32 lanes of any width (4 at 128 bits), so no tile fits
    x = make((3, 40), F32, rng=rng_for("small"))
    f = jc.jit(lambda v: v.T + 1.0)
    (k,) = f.kernels(x)
    assert k.reason == "non_contiguous_load"
    assert_close(f(x), f64(x).T + 1.0, F32)


def test_asm_shuffles_instead_of_gathers():
    a = make((64, 64), F32, rng=rng_for("asm"))
    f = jc.jit(lambda a: a + a.T)
    asm = f.asm(a)
    assert "gather" not in asm
    assert any(s in asm for s in ("vpermt2ps", "vunpcklps", "vshufps", "vpermt2pd"))

"""Resizing (F.interpolate's "nearest" and "bilinear" modes on NCHW) as jitcore gathers.

Shapes are static at trace time, so the source rows and columns of every output pixel, and
bilinear's weights, are computed here in numpy as torch computes them
(aten/src/ATen/native/UpSample.h: area_pixel_compute_scale, the source index clamped at 0,
nearest's floor(dst * scale)) and become constants: a resize is a jc.take along H, then
along W (bilinear: two takes per axis, blended by the constant weights).
Used by Segformer's decode head and MobileViT on sizes its patches do not divide.
"""
from __future__ import annotations

import numpy as np

import jitcore as jc
from jitcore.ir import build
from jitcore.ops.tracer import Tracer


def _scale(size_in: int, size_out: int, align_corners: bool, factor) -> float:
    """torch's area_pixel_compute_scale: source pixels per output pixel."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / factor if factor is not None and factor > 0 else size_in / size_out


def _const(array) -> Tracer:
    return Tracer(build.const_array(np.ascontiguousarray(array)))


def _factors(scale_factors) -> tuple:
    return tuple(scale_factors) if scale_factors else (None, None)


def nearest(x, size: tuple, scale_factors=None):
    """upsample_nearest2d: output pixel d reads source min(floor(d * scale), in - 1)."""
    for axis, n_out, factor in zip((2, 3), size, _factors(scale_factors)):
        n_in = x.shape[axis]
        scale = np.float32(_scale(n_in, n_out, False, factor))   # torch: in float
        src = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
        x = jc.take(x, _const(np.minimum(src, n_in - 1)), axis=axis)
    return x


def bilinear(x, size: tuple, align_corners: bool, scale_factors=None):
    """upsample_bilinear2d: each axis blends its two nearest source rows (columns)."""
    for axis, n_out, factor in zip((2, 3), size, _factors(scale_factors)):
        n_in = x.shape[axis]
        scale = _scale(n_in, n_out, align_corners, factor)
        dst = np.arange(n_out, dtype=np.float64)
        src = dst * scale if align_corners else np.maximum(scale * (dst + 0.5) - 0.5, 0.0)
        i0 = np.minimum(src.astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        frac = (src - i0).astype(x.dtype)
        weight = _const(frac.reshape((n_out,) + (1,) * (3 - axis)))
        lo, hi = jc.take(x, _const(i0), axis=axis), jc.take(x, _const(i1), axis=axis)
        x = lo + (hi - lo) * weight
    return x

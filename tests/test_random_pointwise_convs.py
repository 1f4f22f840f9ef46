"""Random programs that open with 1x1 convolutions over large images: those that run as GEMMs
(jitcore/llvm/conv_gemm.py) and strided ones that read a subsampled copy
(passes/subsample_convs.py). A float image (float32, or float32 and float64 inputs mixed) of
16 to 80 channels over 28 to 60 rows and columns (batch 1 or 2), a 1x1 conv of constant
weights at a drawn stride with 64 to 96 output channels, a batch norm folded in half the
time, a residual add of a second such conv sometimes, then the random steps of
test_random_graphs.py. Each output is held to the float64 reference within the bound
propagated along the program; a conv the rule gives to the GEMM is checked to have taken it
(convs of the random steps may take it too, or read views that keep the conv plans:
test_conv_gemm.py holds the rule both ways)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import test_random_graphs as rg
from helpers import resolve_padding
from jitcore.llvm import conv_gemm
from jitcore.llvm.gemm import cache_sizes
from jitcore.passes.subsample_convs import MIN_IMAGE_BYTES

STRIDES = [1, 1, 2, (2, 1), (1, 2)]


@st.composite
def large_images(draw):
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    return batch + (draw(st.sampled_from([16, 33, 64, 80])), draw(st.integers(28, 60)),
                    draw(st.integers(28, 60)))


def _pointwise_conv(draw, b, i):
    opts = (("stride", draw(st.sampled_from(STRIDES))), ("padding", 0), ("dilation", 1),
            ("groups", 1), ("bn", draw(st.booleans())))
    cin = b.shape[i][-3]
    return ("conv", i, draw(st.integers(0, 2**31 - 1)),
            (draw(st.sampled_from([64, 70, 96])), cin, 1, 1), opts)


def pointwise_opening(draw, b):
    """A 1x1 conv of the image; sometimes a second one of the same stride added to it."""
    step = _pointwise_conv(draw, b, 0)
    b.add(step)
    first = len(b.shape) - 1
    if draw(st.booleans()):
        other = _pointwise_conv(draw, b, 0)
        other = other[:3] + ((step[3][0],) + other[3][1:], step[4])
        b.add(other)
        b.add(("binary", "add", first, len(b.shape) - 1))


def _pair(v):
    return v if isinstance(v, tuple) else (v, v)


def takes_gemm(program) -> bool:
    """Whether some live 1x1 conv of the image (the contiguous first input) qualifies for
    the GEMM at stride 1 (after the subsampled copy, for a strided one over a large enough
    image)."""
    live = rg.live_values(program)
    for k, (step, vals, out) in enumerate(rg.walk(program), start=len(program.input_shapes)):
        if step[0] != "conv" or step[1] != 0 or k not in live or \
                out.dtype not in (np.float32, np.float64):
            continue
        opts = dict(step[4])
        if tuple(step[3][2:]) != (1, 1) or opts["groups"] != 1 or \
                any(resolve_padding(opts["padding"], (1, 1), (1, 1))):
            continue                 # (the random steps draw convs of every kind)
        item = out.dtype.itemsize
        cout, cin = step[3][:2]
        _, _, h, w = (1,) * (4 - vals[step[1]].ndim) + vals[step[1]].shape
        sh, sw = _pair(opts["stride"])
        if (sh, sw) != (1, 1) and cin * h * w * item < MIN_IMAGE_BYTES:
            continue
        pixels = -(-h // sh) * -(-w // sw)
        if pixels >= conv_gemm.MIN_PIXELS and cout >= conv_gemm.MIN_CHANNELS and \
                (cin + cout) * pixels * item >= conv_gemm.MIN_L2_SHARE * cache_sizes()[2]:
            return True
    return False


SETTINGS = dict(max_examples=6, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


@settings(**SETTINGS)
@given(rg.programs("float32", opening=rg.Opening(large_images(), pointwise_opening))
       .map(rg.returning("conv")))
def test_random_programs_with_pointwise_convs_match_numpy(program):
    check(program)


@settings(**dict(SETTINGS, max_examples=3))
@given(rg.programs("float", opening=rg.Opening(large_images(), pointwise_opening))
       .map(rg.returning("conv")))
def test_random_mixed_float_programs_with_pointwise_convs_match_numpy(program):
    check(program)


def check(program):
    f = rg.check_program(program)
    args = rg.call_args(program, rg.program_inputs(program))
    layouts = [k.layout for k in f.kernels(*args) if k.layout]
    if takes_gemm(program):
        assert conv_gemm.LAYOUT in layouts, f"{program}\n{layouts}"

"""Random programs that open with Winograd convolutions (jitcore/llvm/conv_winograd.py): a
float32 image of at least 32 channels and 32 output tiles (what Winograd needs; the random
programs of test_random_graphs.py stay far smaller), then a 3x3 stride-1 conv of constant
weights with a drawn padding (its zero padding absorbed, sometimes), a batch norm folded in
half the time, a residual add of the input where the shapes allow, a second Winograd conv
sometimes, then the random steps of test_random_graphs.py (their epilogues, reductions,
views, pools, ...). Each output is held to the float64 reference within the bound
propagated along the program, a Winograd conv's own being gamma(C_in + 2 alpha + 4) times
its transformed magnitudes (test_conv_winograd.py); a conv the kind must take Winograd on
is checked to have taken it."""
from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import test_random_graphs as rg
from helpers import resolve_padding
from jitcore import config
from jitcore.llvm import conv_winograd as winograd

PADDINGS = [0, 1, 1, "same", (0, 2), (1, 0)]


@st.composite
def winograd_images(draw, m=2):
    """(C, H, W) or (N, C, H, W) of 32 to 40 channels. F(2x2, 3x3): planes of 10 to 16 rows
    and columns (6 to 12 in a batch of 2): mostly 32 tiles or more, a few fewer (left
    direct). F(4x4, 3x3) (m=4): 15 to 24 (9 to 18), around its 32 4x4 tiles (fewer: F(2x2))."""
    batch = draw(st.sampled_from([(), (1,), (2,)]))
    low, high = (6, 12) if batch == (2,) else (10, 16)
    low, high = (low * 3 // 2, high * 3 // 2) if m == 4 else (low, high)
    return batch + (draw(st.sampled_from([32, 33, 40])), draw(st.integers(low, high)),
                    draw(st.integers(low, high)))


def _winograd_conv(draw, b, i):
    """A 3x3 stride-1 conv of value i (32 to 48 output channels), or None when its padding
    leaves no output."""
    *_, c, h, w = b.shape[i]
    padding = draw(st.sampled_from(PADDINGS))
    pt, pb, pl, pr = resolve_padding(padding, (3, 3), (1, 1))
    if min(h + pt + pb, w + pl + pr) < 3:
        return None
    opts = (("stride", 1), ("padding", padding), ("dilation", 1), ("groups", 1),
            ("bn", draw(st.booleans())))
    cout = draw(st.sampled_from([32, c, 48]))
    return ("conv", i, draw(st.integers(0, 2**31 - 1)), (cout, c, 3, 3), opts)


def winograd_opening(draw, b):
    """Maybe a zero padding of the image, a Winograd conv, maybe a residual add of the
    image, maybe a relu and a second Winograd conv."""
    src = 0
    if draw(st.integers(0, 3)) == 0:      # absorbed into the conv: an asymmetric padding
        widths = ((0, 0),) * (len(b.shape[0]) - 2) + tuple(
            (draw(st.integers(0, 1)), draw(st.integers(0, 1))) for _ in range(2))
        b.add(("pad", 0, widths, "constant", 0))
        src = len(b.shape) - 1
    step = _winograd_conv(draw, b, src)
    if step is None:
        return
    b.add(step)
    out = len(b.shape) - 1
    if b.shape[out][-3:] == b.shape[0][-3:] and draw(st.booleans()):
        b.add(("binary", "add", out, 0))
    if draw(st.booleans()):
        b.add(("unary", "relu", len(b.shape) - 1))
        step = _winograd_conv(draw, b, len(b.shape) - 1)
        if step is not None:
            b.add(step)


def takes_winograd(program) -> bool:
    """Whether some conv an output reads has what Winograd needs (float32 is given): at
    least MIN_CHANNELS channels each way and MIN_TILES F(2x2) tiles, weights of its own
    (equal constants are one buffer, and conv.prepack packs only a weight one kernel reads:
    convs that share theirs stay direct), and JITCORE_WINOGRAD allows it."""
    if not config.get().winograd:
        return False
    live = rg.live_values(program)
    convs = [(k, step) for k, step in enumerate(program.steps, start=len(program.input_shapes))
             if step[0] == "conv" and k in live]
    weights = Counter((step[2], step[3], dict(step[4])["bn"]) for _, step in convs)
    for k, (step, vals, _) in enumerate(rg.walk(program), start=len(program.input_shapes)):
        if (k, step) not in convs or weights[step[2], step[3], dict(step[4])["bn"]] > 1:
            continue
        cout, cin = step[3][:2]
        n, _, h, w = (1,) * (4 - vals[step[1]].ndim) + vals[step[1]].shape
        pt, pb, pl, pr = resolve_padding(dict(step[4])["padding"], (3, 3), (1, 1))
        tiles = n * -(-(h + pt + pb - 2) // 2) * -(-(w + pl + pr - 2) // 2)
        if min(cin, cout) >= winograd.MIN_CHANNELS and tiles >= winograd.MIN_TILES[2]:
            return True
    return False


@settings(max_examples=6, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(rg.programs("float32", opening=rg.Opening(winograd_images(), winograd_opening))
       .map(rg.returning("conv")))
def test_random_programs_with_winograd_convs_match_numpy(program):
    check(program)


@settings(max_examples=2, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(rg.programs("float32", opening=rg.Opening(winograd_images(4), winograd_opening))
       .map(rg.returning("conv")))
def test_random_programs_with_f4_winograd_convs_match_numpy(program):
    """JITCORE_WINOGRAD=4: F(4x4, 3x3) where a batch holds 32 of its tiles, else F(2x2)."""
    with config.override(winograd=4):
        check(program)


def check(program):
    """The program's outputs within their bounds, and Winograd taken where it must be."""
    f = rg.check_program(program)
    args = rg.call_args(program, rg.program_inputs(program))
    layouts = [k.layout for k in f.kernels(*args) if k.layout]
    assert any("Winograd" in lay for lay in layouts) == takes_winograd(program), \
        f"{program}\n{layouts}"

"""The geometry of 2-d pooling (torch.nn.functional semantics), the `arg` of `Op.POOL2D`.

A pooling window is separable: along each spatial axis, output position `o` reads the taps
`first[o] + k * step` for `k` in `[lo[o], hi[o])` (the taps that fall inside the input), and an
average divides by `div[o]` of the rows times `div[o]` of the columns. `Pool2d.windows` gives
these per-axis tables; lowering and codegen only read them, so the padding, ceil_mode and
divisor rules live here and nowhere else.
"""
from __future__ import annotations

from dataclasses import dataclass

from .sizes import HUGE, NotDynamic, extent_text


def pool_output_size(size: int, kernel: int, stride: int, pad: int, dilation: int,
                     ceil_mode: bool) -> int:
    """torch's pooling_output_shape: floor (or ceil) of the window count, where with
    ceil_mode the last window must start inside the input or its left padding."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1 + (stride - 1 if ceil_mode else 0)
    out = span // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


@dataclass(frozen=True)
class Window1d:
    """The windows along one axis: tap k of output o reads input `first[o] + k*step`, for
    k in [lo[o], hi[o]); `div[o]` is this axis' factor of an average's divisor. For a
    regular (strided, not adaptive) axis, `stride`, `pad` and `taps` describe the same windows
    arithmetically: first[o] = o*stride - pad, taps per window."""
    first: tuple
    lo: tuple
    hi: tuple
    div: tuple
    step: int
    stride: int | None = None      # None: adaptive windows (no arithmetic form)
    pad: int = 0
    taps: int = 0
    size: int = 0                  # the input extent

    def full_range(self) -> tuple:
        """[a, e): the outputs whose every tap is inside the input; (0, 0) if irregular."""
        if self.stride is None:
            return 0, 0
        full = [o for o in range(len(self.first)) if self.lo[o] == 0 and self.hi[o] == self.taps]
        return (full[0], full[-1] + 1) if full else (0, 0)

    def vector_range(self, lanes: int) -> tuple:
        """[a, e): outputs computed `lanes` at a time, each tap of a vector read as one run of
        stride*lanes input elements that stays inside the input row (so the last of them may
        be one stride short of the full-window range). (0, 0) when fewer than `lanes`."""
        a, full_end = self.full_range()
        if self.stride is None or full_end - a < lanes:
            return 0, 0
        # the run of tap k at output o0 ends at (o0 + lanes)*stride - 1 + k_max*step - pad
        e = min(full_end, (self.size + self.pad - (self.taps - 1) * self.step) // self.stride)
        return (a, e) if e - a >= lanes else (0, 0)


def _regular_axis(size, kernel, stride, pad, dilation, ceil_mode, count_include_pad, out):
    first, lo, hi, div = [], [], [], []
    for o in range(out):
        start = o * stride - pad
        k_lo = 0
        while k_lo < kernel and start + k_lo * dilation < 0:
            k_lo += 1
        k_hi = kernel
        while k_hi > k_lo and start + (k_hi - 1) * dilation >= size:
            k_hi -= 1
        # torch's avg_pool divisor: the window clipped to the padded input (count_include_pad)
        # or to the input itself (dilation is 1 for averages)
        padded = min(start + kernel, size + pad) - start
        valid = k_hi - k_lo
        first.append(start)
        lo.append(k_lo)
        hi.append(max(k_hi, k_lo))
        div.append(max(padded if count_include_pad else valid, 1))
    return Window1d(tuple(first), tuple(lo), tuple(hi), tuple(div), dilation, stride, pad,
                    kernel, size)


def _adaptive_axis(size, out):
    first, hi = [], []
    for o in range(out):
        start, end = (o * size) // out, -(-((o + 1) * size) // out)
        first.append(start)
        hi.append(end - start)
    return Window1d(tuple(first), (0,) * out, tuple(hi), tuple(hi), 1, None, 0, 0, size)


@dataclass(frozen=True)
class Pool2d:
    """One 2-d pooling over the last two axes of an (N, C, H, W) source.

    kind "max" (padding acts as -inf: padded taps are skipped; NaN propagates) or "avg".
    `adaptive` (out_h, out_w) gives torch's adaptive average windows instead of the kernel."""
    kind: str
    kernel: tuple = (1, 1)
    stride: tuple = (1, 1)
    padding: tuple = (0, 0)
    dilation: tuple = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = True
    adaptive: tuple | None = None

    @property
    def name(self) -> str:
        return "adaptive_avg_pool2d" if self.adaptive else f"{self.kind}_pool2d"

    def output_hw(self, h: int, w: int) -> tuple:
        if self.adaptive:
            return tuple(self.adaptive)
        return tuple(pool_output_size(n, k, s, p, d, self.ceil_mode) for n, k, s, p, d in
                     zip((h, w), self.kernel, self.stride, self.padding, self.dilation))

    def windows(self, h: int, w: int) -> tuple:
        """(rows, cols): the Window1d of each spatial axis for an input of h x w. The tables
        list every output, so a run-time extent (its placeholder) has none: NotDynamic."""
        for n in (h, w):
            if n >= HUGE:
                raise NotDynamic(f"{self.name} over the run-time extent {extent_text(n)}: its "
                                 "windows are laid out per size")
        out = self.output_hw(h, w)
        if self.adaptive:
            return tuple(_adaptive_axis(n, o) for n, o in zip((h, w), out))
        return tuple(_regular_axis(n, k, s, p, d, self.ceil_mode, self.count_include_pad, o)
                     for n, k, s, p, d, o in zip((h, w), self.kernel, self.stride,
                                                 self.padding, self.dilation, out))

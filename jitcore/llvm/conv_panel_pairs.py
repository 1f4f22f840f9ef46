"""bf16 convolutions with few input channels (image models' stems: 3 channels): conv.py's
im2col variant of the pixel plan on bf16 pairs along K, for `vdpbf16ps` under
matmul_precision="bf16" where the target has AVX512_BF16.

The im2col variant packs each work item's inputs into a panel of K = taps x C_in rows of NV
pixel vectors, then runs each channel block as one loop over K: NV vector loads and MR
broadcast weights per step, the GEMM micro-kernel. Here the float32 panel is converted once
per item into ceil(K / 2) rows of NV vectors of bf16 pairs (panel rows k and k + 1 of each
pixel, vcvtne2ps2bf16 and an interleave; an odd K's last pair has a zero second half), and
each step of the loop is NV loads of pairs, MR broadcast weight pairs (w[oc, k], w[oc, k + 1])
prepacked at compile time ([block][ceil(K / 2)][MR] int32: conv_pairs.panel_weights), and
MR x NV vdpbf16ps: half the steps of the float32 loop. The sums and the epilogue are the
pixel plan's (float32).
"""
from __future__ import annotations

from llvmlite import ir

from . import bf16
from . import irutil as u
from .conv import ConvEmitter


class PairsPanelEmitter(ConvEmitter):
    """Emits one conv kernel (Kind.CONV) with a ConvPlan of the im2col variant in pairs."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        self.round_inputs = False      # the conversion to pairs rounds them
        self.k = self.c.taps * self.cin_g
        self.pty = ir.VectorType(u.I32, self.p.lanes)

    def body(self):
        b, p = self.b, self.p
        self.pair_panel = u.alloca_once(
            b, ir.ArrayType(self.pty, -(-self.k // 2) * p.nv), name="pair_panel")
        self.pair_panel.align = 64
        with b.goto_entry_block():    # loop bounds hidden from the full unroller
            self.n_pairs = u.opaque(b, -(-self.k // 2))
            self.n_full = u.opaque(b, self.k // 2)
        super().body()

    def pack_panel(self, pixels, x_image):
        """The float32 panel (conv.py), then its rows in pairs: pair_panel[kk][j] = rows 2kk
        and 2kk + 1 of pixel vector j, rounded to bf16."""
        super().pack_panel(pixels, x_image)
        b, p = self.b, self.p
        panel = b.bitcast(self.panel, self.vty.as_pointer())
        pairs = b.bitcast(self.pair_panel, self.pty.as_pointer())

        def pair_row(kk, odd_row):
            for j in range(p.nv):
                even = b.load(b.gep(panel, [b.add(b.mul(b.mul(kk, u.I64(2)), u.I64(p.nv)),
                                                  u.I64(j))]), align=64)
                odd = u.const(self.vty, 0) if odd_row is None else \
                    b.load(b.gep(panel, [b.add(b.mul(odd_row, u.I64(p.nv)), u.I64(j))]),
                           align=64)
                b.store(bf16.pairs_ir(b, even, odd),
                        b.gep(pairs, [b.add(b.mul(kk, u.I64(p.nv)), u.I64(j))]), align=64)
        with u.for_range(b, u.I64(0), self.n_full, 1, name="pk", unroll=False) as kk:
            pair_row(kk, b.add(b.mul(kk, u.I64(2)), u.I64(1)))
        if self.k % 2:                 # the last row's pair: a zero second half
            pair_row(u.I64(self.k // 2), None)

    def micro_panel(self, blk):
        """accs[r][j] += over the pairs kk of the panel: weight pair kk of channel r .
        pixel vector j's pairs (vdpbf16ps)."""
        b, p = self.b, self.p
        pairs = b.bitcast(self.pair_panel, self.pty.as_pointer())
        w_blk = b.gep(self.base_ptr(self.c.w.buffer),
                      [b.mul(blk, u.I64(-(-self.k // 2) * p.mr))])
        with u.for_range(b, u.I64(0), self.n_pairs, 1, name="kk") as kk:
            xv = [b.load(b.gep(pairs, [b.add(b.mul(kk, u.I64(p.nv)), u.I64(j))]), align=64)
                  for j in range(p.nv)]
            w_k = b.gep(w_blk, [b.mul(kk, u.I64(p.mr))])
            for r in range(p.mr):
                w = u.splat(b, b.load(b.gep(w_k, [u.I64(r)])), p.lanes)     # {1to16}
                for j in range(p.nv):
                    acc = self.accs[r][j]
                    b.store(bf16.dot_pairs(b, b.load(acc), xv[j], w), acc)

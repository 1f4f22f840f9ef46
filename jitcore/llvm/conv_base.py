"""What the conv kinds' emitters share (conv.py's pixel plan, conv_channels.py's channel plan,
depthwise.py): the conv's extents and strides, the element and vector types, the epilogue
along one output axis, and the register tile of sums (zeroed, saved to and restored from a
stack buffer between passes over the input channels or blocks of taps)."""
from __future__ import annotations

from llvmlite import ir

from . import bf16
from . import irutil as u
from .epilogue import EpilogueEmitter


class ConvKernelEmitter(EpilogueEmitter):
    """A conv kind's emitter: `epilogue_axis` (a class attribute) is the output axis (of n, c,
    h, w) its vectors run along. Sets p (the plan), c (the Conv record), elem and vty, xs
    (the input's strides), h and w (the input's extents), cout, oh and ow, kh and kw, cin_g
    and cout_g."""
    epilogue_axis = 3

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p = self.p = plan
        c = self.c = kernel.conv
        self.elem = u.value_type(c.dtype)
        self.vty = ir.VectorType(self.elem, p.lanes)
        self.setup_epilogue(c.out_vars[self.epilogue_axis], p.lanes)
        self.xs = c.strides(c.x, c.x_vars)                       # n, c, h, w
        _, _, self.h, self.w = (v.extent for v in c.x_vars)
        _, self.cout, self.oh, self.ow = (v.extent for v in c.out_vars)
        self.kh, self.kw = (v.extent for v in c.w_vars[2:])
        self.cin_g = c.cin_group
        self.cout_g = self.cout // c.attrs.groups
        # matmul_precision="bf16" without the pairs plan: inputs are rounded to bf16 as they
        # are read (weights were rounded when prepacked, or as read: `rounded`)
        self.round_inputs = c.precision != bf16.FP32

    # -- the register tile of sums (self.accs: rows of stack slots) ---------------------------
    def alloc_sums(self):
        """self.accs: the plan's MR rows of NV vector slots (registers after mem2reg)."""
        p = self.p
        self.accs = [[u.alloca_once(self.b, self.vty, name=f"acc{r}_{h}") for h in range(p.nv)]
                     for r in range(p.mr)]

    def accumulate(self, r, a, vectors):
        """Row r of a register tile's step: accs[r][h] += a * vectors[h]."""
        for h, v in enumerate(vectors):
            acc = self.accs[r][h]
            self.b.store(u.intrinsic(self.b, "fmuladd", [a, v, self.b.load(acc)]), acc)

    def broadcast_micro(self, rows, w_outer, steps):
        """The channel plan's micro-kernel (also Winograd's): for i < steps,
        accs[r][h] += rows[r]'s value at step i (a broadcast from ptr + i * step) times
        w_outer[i][h * lanes ..] (NV vector loads of prepacked weights, NR per step)."""
        b, p = self.b, self.p
        vptr = self.vty.as_pointer()
        with u.for_range(b, u.I64(0), steps, 1, name="inner") as ci:
            wk = b.gep(w_outer, [b.mul(ci, u.I64(p.nr))])
            # unaligned: a prepacked constant's array is only element-aligned
            wv = [b.load(b.bitcast(b.gep(wk, [u.I64(h * p.lanes)]), vptr), align=1)
                  for h in range(p.nv)]
            for r, (ptr, step) in enumerate(rows):
                x = self.rounded(b.load(b.gep(ptr, [b.mul(ci, step)])))
                self.accumulate(r, u.splat(b, x, p.lanes), wv)

    def rounded(self, x):
        """An operand (scalar or vector) as the products see it: rounded to bf16 under the
        emulated bf16 precision (round_inputs), else as it is."""
        return bf16.round_ir(self.b, x) if self.round_inputs else x

    def zero_sums(self):
        zero = u.const(self.vty, 0)
        for row in self.accs:
            for acc in row:
                self.b.store(zero, acc)

    def start_sums(self, saved, first):
        """Zero the sums, or (`first` false at run time) load them from `saved`, a vector
        pointer to the tile's partial sums row by row. first None: always zero."""
        if first is None:
            return self.zero_sums()
        with self.b.if_else(first) as (then, otherwise):
            with then:
                self.zero_sums()
            with otherwise:
                for k, acc in enumerate(acc for row in self.accs for acc in row):
                    self.b.store(self.b.load(self.b.gep(saved, [u.I64(k)]), align=64), acc)

    def save_sums(self, saved):
        """Store the sums to `saved` (the partial sums between passes), row by row."""
        for k, acc in enumerate(acc for row in self.accs for acc in row):
            self.b.store(self.b.load(acc), self.b.gep(saved, [u.I64(k)]), align=64)

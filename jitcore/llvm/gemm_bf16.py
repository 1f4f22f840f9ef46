"""The bf16 GEMMs: float32 operands packed into bf16 pairs for `vdpbf16ps` (PairsGemmEmitter),
or, without AVX512_BF16, rounded to bf16 as they are packed for the float32 FMA kernel
(RoundedGemmEmitter); float32 accumulation in both.

A float32 GEMM under matmul_precision="bf16" on a target with AVX512_BF16 (jitcore/llvm/
bf16.py: precision "bf16", GemmPlan.pairs) runs gemm.py's loop nest with k stepping by 2:

    B panels   [KC/2][NR] 32-bit pairs (B[k, c], B[k+1, c]), bf16, even k in the low half:
               prepacked at compile time for a constant B (gemm._pair_panels), else packed per
               k block from float32 (two vcvtneps2bf16 and an interleave per 16 columns)
    A block    MC rows x KC/2 pairs (A[m, k], A[m, k+1]), packed from float32 per row block
               and k block (one vcvtne2ps2bf16 per 32 values of a row), in L2
    micro      MR x NV accumulators (6 x 4 zmm); per pair of k, NV loads of B and, per row,
               NV `vdpbf16ps acc, b, {1to16} broadcast of A's pair`: 2 x 16 x 2 flops each

Odd K: the last pair's second value is zero in both operands. The epilogue (bias,
activations, residual) and the output are gemm.py's, in float32. A bf16 storage operand would
skip the conversion in its pack (the pair layouts stay).

The fallback ("bf16-emulated") packs A's row blocks as bf16-rounded float32 [MC][KC], once per
row block and k block: rounding each A element in the micro-kernel instead, once per column
panel, ran at 0.43x of the float32 GEMM's speed at x86-64-v3 (128x768 @ 768x768, 1 thread,
Zen 4), packed at 0.8-0.9x. B is rounded as gemm.py packs it (or at compile time when
prepacked).
"""
from __future__ import annotations

from llvmlite import ir

from . import bf16
from . import irutil as u
from .gemm import GemmEmitter, _clamp, _loop


class PairsGemmEmitter(GemmEmitter):
    """gemm.py's GemmEmitter with bf16-pair packing and the vdpbf16ps micro-kernel."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p = self.p
        self.panel_ty = ir.ArrayType(u.I32, p.kp * p.nc)
        self.pty = ir.VectorType(u.I32, p.lanes)         # 16 pairs
        self.a_block = None                              # (apack, ic, rows) of the row block

    def body(self):
        self.apack = u.alloca_once(self.b, ir.ArrayType(u.I32, self.p.mc * self.p.a_stride),
                                   name="apack")
        self.apack.align = 64
        super().body()

    def pairs(self, kc):
        """ceil(kc / 2): the pairs of a k block of kc values."""
        return self.b.sdiv(self.b.add(kc, u.I64(1)), u.I64(2))

    def pair_at(self, load, k_even, k_last):
        """<1 pair> i32 of `load` at env's other vars: (load[k_even], load[k_even + 1]),
        the second zero past k_last."""
        b, g = self.b, self.g
        values = []
        for k in (k_even, b.add(k_even, u.I64(1))):
            self.env[g.k] = u.imin(b, k, k_last)
            x = b.load(b.gep(self.base_ptr(load.buffer), [self.index(load.offset)]))
            values.append(x)
        values[1] = b.select(b.icmp_signed(">", b.add(k_even, u.I64(1)), k_last),
                             u.const(self.elem, 0), values[1])
        two = u.const(ir.VectorType(self.elem, 2), 0)
        for lane, x in enumerate(values):
            two = b.insert_element(two, x, u.I32(lane))
        return b.bitcast(b.fptrunc(two, ir.VectorType(bf16.BF16_TYPE, 2)), u.I32)

    # -- B ------------------------------------------------------------------------------------
    def pack_row(self, panels, dst, col0, counts, masks, pc, kc, kk):
        """Row kk of a panel: the pairs (B[pc + 2kk, col], B[pc + 2kk + 1, col]) from column
        col0 on, zero past the k block (gemm.pack walks the panels and rows)."""
        b, p, g = self.b, self.p, self.g
        k_last = b.add(pc, b.sub(kc, u.I64(1)))
        zero = u.const(self.vty, 0)
        k_even = b.add(pc, b.mul(kk, u.I64(2)))
        k_odd = b.add(k_even, u.I64(1))
        odd_valid = b.icmp_signed("<=", k_odd, k_last)
        for h in range(p.nv):
            col = b.add(col0, u.I64(h * p.lanes))
            self.env[g.k] = k_even
            even = self.load_row(col, counts[h], masks[h])
            self.env[g.k] = u.imin(b, k_odd, k_last)
            odd = b.select(odd_valid, self.load_row(col, counts[h], masks[h]), zero)
            ptr = b.gep(panels, [b.add(dst, u.I64(h * p.lanes))])
            b.store(bf16.pairs_ir(b, even, odd), b.bitcast(ptr, self.pty.as_pointer()),
                    align=64)

    def panel_rows(self, kc):
        return self.pairs(kc)

    @property
    def panel_type(self):
        return self.pty

    @property
    def panel_stride(self) -> int:
        return self.p.kp

    def pack_column(self, panel, pc, kc, c):
        """Column c of a panel from a B strided along n (a transposed operand), pair by pair
        down the column (gemm.pack_strided zeroes a short panel and walks the columns)."""
        b, p, g = self.b, self.p, self.g
        k_last = b.add(pc, b.sub(kc, u.I64(1)))
        with u.for_range(b, u.I64(0), self.pairs(kc), 1, name="kk") as kk:
            pair = self.pair_at(g.b, b.add(pc, b.mul(kk, u.I64(2))), k_last)
            b.store(pair, b.gep(panel, [b.add(b.mul(kk, u.I64(p.nr)), c)]))

    # -- A ------------------------------------------------------------------------------------
    def row_block(self, ic, ic_end, pc, kc):
        """Pack A's rows ic..ic_end, k block pc..pc+kc, into bf16 pairs: apack[row - ic]
        [kk] = (A[row, pc + 2kk], A[row, pc + 2kk + 1]), zero past the block."""
        b, p, g = self.b, self.p, self.g
        apack = b.gep(self.apack, [u.I64(0), u.I64(0)])
        self.a_block = (apack, ic, b.sub(ic_end, ic))
        k_last = b.add(pc, b.sub(kc, u.I64(1)))
        with _loop(b, ic, ic_end, 1, name="ra") as row:
            self.env[g.m] = row
            dst = b.gep(apack, [b.mul(b.sub(row, ic), u.I64(p.a_stride))])
            if g.a.offset.coeff(g.k) == 1:
                self.pack_a_row(dst, pc, kc)
            else:                                         # strided along k: pair by pair
                with u.for_range(b, u.I64(0), self.pairs(kc), 1, name="kk") as kk:
                    pair = self.pair_at(g.a, b.add(pc, b.mul(kk, u.I64(2))), k_last)
                    b.store(pair, b.gep(dst, [kk]))

    def pack_a_row(self, dst, pc, kc):
        """dst[kk] = the pairs of A's row env[m] at pc.., contiguous along k: 32 values (two
        masked loads) to 16 pairs at a time."""
        b, p, g = self.b, self.p, self.g
        span = 2 * p.lanes
        vectors = b.sdiv(b.add(kc, u.I64(span - 1)), u.I64(span))
        with u.for_range(b, u.I64(0), vectors, 1, name="kv") as v:
            left = b.sub(kc, b.mul(v, u.I64(span)))
            halves = []
            for h in range(2):
                self.env[g.k] = b.add(pc, b.add(b.mul(v, u.I64(span)), u.I64(h * p.lanes)))
                ptr = b.bitcast(b.gep(self.base_ptr(g.a.buffer), [self.index(g.a.offset)]),
                                self.vty.as_pointer())
                count = _clamp(b, b.sub(left, u.I64(h * p.lanes)), p.lanes)
                halves.append(u.masked_load(b, ptr, u.lane_mask(b, count, p.lanes), self.vty))
            out = b.bitcast(b.gep(dst, [b.mul(v, u.I64(p.lanes))]), self.pty.as_pointer())
            b.store(bf16.contiguous_pairs_ir(b, *halves), out, align=64)

    # -- the micro-kernel ---------------------------------------------------------------------
    def micro(self, panel, pc, kc, row0, nvec: int = 0):
        """accs[r][h] = sum over pairs kk of the packed A row's pair kk . panel[kk][h*lanes
        ...] (vdpbf16ps), for rows row0.. of the packed block (rows past its end read its
        last row, unused); only the first `nvec` vectors are summed (0: all)."""
        b, p = self.b, self.p
        nvec = nvec or p.nv
        apack, ic, rows = self.a_block
        last = b.sub(rows, u.I64(1))
        a_rows = [b.gep(apack, [b.mul(u.imin(b, b.add(b.sub(row0, ic), u.I64(r)), last),
                                      u.I64(p.a_stride))]) for r in range(p.mr)]
        pptr = self.pty.as_pointer()

        def products(kk, accs):
            bk = b.gep(panel, [b.mul(kk, u.I64(p.nr))])
            # unaligned loads: a prepacked constant's array is only element-aligned
            bv = [b.load(b.bitcast(b.gep(bk, [u.I64(h * p.lanes)]), pptr), align=4)
                  for h in range(nvec)]
            sums = []
            for r in range(p.mr):
                a = u.splat(b, b.load(b.gep(a_rows[r], [kk])), p.lanes)   # {1to16}
                sums.append([bf16.dot_pairs(b, accs[r][h], bv[h], a) for h in range(nvec)])
            return sums
        return self.k_loop(self.pairs(kc), nvec, products)


class RoundedGemmEmitter(GemmEmitter):
    """gemm.py's float32 GEMM on bf16-rounded operands: A's row blocks packed rounded (B is
    rounded by GemmEmitter's packing, `operand`)."""

    def body(self):
        p = self.p
        self.apack = u.alloca_once(self.b, ir.ArrayType(self.elem, p.mc * p.a_stride),
                                   name="apack")
        self.apack.align = 64
        super().body()

    def row_block(self, ic, ic_end, pc, kc):
        """apack[row - ic][kk] = A[row, pc + kk] rounded to bf16, rows ic..ic_end: whole
        vectors where A is contiguous along k, element by element past them (no masked
        loads: the levels without AVX-512 run this)."""
        b, p, g = self.b, self.p, self.g
        apack = b.gep(self.apack, [u.I64(0), u.I64(0)])
        self.a_block = (apack, ic, b.sub(ic_end, ic))
        vectors = u.I64(0)
        if g.a.offset.coeff(g.k) == 1:
            vectors = b.sdiv(kc, u.I64(p.lanes))
        with _loop(b, ic, ic_end, 1, name="ra") as row:
            self.env[g.m] = row
            dst = b.gep(apack, [b.mul(b.sub(row, ic), u.I64(p.a_stride))])
            with u.for_range(b, u.I64(0), vectors, 1, name="kv") as v:
                k = b.mul(v, u.I64(p.lanes))
                self.env[g.k] = b.add(pc, k)
                src = b.gep(self.base_ptr(g.a.buffer), [self.index(g.a.offset)])
                x = b.load(b.bitcast(src, self.vty.as_pointer()), align=1)
                b.store(bf16.round_ir(b, x), b.bitcast(b.gep(dst, [k]), self.vty.as_pointer()),
                        align=64)
            with u.for_range(b, b.mul(vectors, u.I64(p.lanes)), kc, 1, name="ke") as k:
                self.env[g.k] = b.add(pc, k)
                x = b.load(b.gep(self.base_ptr(g.a.buffer), [self.index(g.a.offset)]))
                b.store(bf16.round_ir(b, x), b.gep(dst, [k]))

    def a_rows(self, pc, row0) -> tuple:
        """The packed rows row0.. (rows past the block's end read its last row, unused),
        contiguous along k."""
        b, p = self.b, self.p
        apack, ic, rows = self.a_block
        last = b.sub(rows, u.I64(1))
        return [b.gep(apack, [b.mul(u.imin(b, b.add(b.sub(row0, ic), u.I64(r)), last),
                                    u.I64(p.a_stride))]) for r in range(p.mr)], 1

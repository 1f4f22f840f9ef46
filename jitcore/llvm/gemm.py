"""GEMM kernels: packed B panels, a register-blocked FMA micro-kernel, fused epilogues.

C[b, m, n] = epilogue(sum_k A[b, m, k] * B[b, k, n]) for a kernel of kind "gemm"
(passes/kernel.py: Gemm). The blocking follows the BLIS loop nest:

    for each work item (batch, column block j of NC, row group):    <- split over the pool
      for pc in K, step KC:
        pack B[pc:pc+KC, j*NC:(j+1)*NC] into NR-wide panels        (or use the prepacked ones)
        for ic in the group's rows, step MC:
          for jr in the column block, step NR:                      <- B panel stays in L1
            for ir in ic..ic+MC, step MR:                           <- A rows stream from L2
            (the two loops swapped where KC is short: ROWS_OUTER_MAX_K)
              micro-kernel: MR x NR accumulators (6 x 4 vectors at 512 bits, 6 x 2 below),
              one broadcast of A per row and NR/lanes loads of B per k, all FMAs
              then C += acc (pc > 0), and at the last pc the epilogue, stored with masks
              at the edges

A is read in place through its strides (rows clamped at the edge, so reads stay in bounds);
only B is packed, into a stack buffer, zero-padded to whole panels. The block sizes come from
the cache sizes this machine reports (sysfs, else defaults): KC so that a B panel (KC x NR)
takes an eighth of L2 (it streams from L2 while A's rows stay in L1; measured on Zen 5, 1 MiB
L2, over B panels of 16-128 KiB: 64-128 KiB were best, 16 KiB cost 10-15%; on Emerald
Rapids, 2 MiB L2, 256 KiB beat 96 KiB by 10-20% at K = 1024: one k block), NC
so that the packed block fits the 256 KiB stack buffer, MC so that the A rows of one block
(MC x KC) take a quarter of L2.

Weight prepacking: when B is a constant, `prepack` packs it once at compile time into the
panel layout the kernel reads ([pc block][column block][panel][KC][NR]) and the kernel skips
its packing step.

Under matmul_precision="bf16" (jitcore/llvm/bf16.py) a float32 GEMM either packs B (and A)
into bf16 pairs for `vdpbf16ps` (plan.pairs: gemm_bf16.py, panels [KC/2][NR] of 32-bit
pairs), or, without AVX512_BF16, runs this kernel on operands rounded to bf16 as they are
packed: B into its panels, A into row blocks (plan.pack_a, gemm_bf16.py's RoundedGemmEmitter).
"""
from __future__ import annotations

import functools
import math
import os
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
from llvmlite import ir

from jitcore.ir import dtypes as dt
from jitcore.ir.graph import ConstArray, aligned_zeros
from jitcore.passes.kernel import Buffer, Kernel, Load
from jitcore.passes.symbolic import lin, monomial

from . import bf16
from . import irutil as u
from .epilogue import EpilogueEmitter

DEFAULT_CACHES = {1: 32 * 1024, 2: 512 * 1024}
MAX_PACK_BYTES = 256 * 1024      # the stack buffer of one packed B block
# A row block's micro-tiles run row tile by row tile, each sweeping every column panel (its
# MR output rows are then written front to back: MR store streams), where a k block is at
# most this long; else panel by panel, each down every row tile (the panel stays in L1, but
# every tile writes MR other rows: a row block's worth of store streams, more than the
# prefetchers follow, and a page each at long rows). Short k blocks do little work per
# stored tile, so their stores set the pace. Measured on Intel Ice Lake-SP (1 thread,
# interleaved, rows first / panels first): 1x1 convs as GEMMs, inputs in L3, 16->96 at
# 112x112 2.06x, 64->256 at 56x56 + residual 1.48x, 24->144 at 56x56 1.09x, 256->64 1.10x,
# 1024->256 at 14x14 1.03x; matmuls 2048x64x2048 1.68x, 1024x32x1024 1.06x, 512x64x512
# 1.04x, K = 768..3072 with prepacked weights 0.98-1.04x (noise: the rule leaves them)
ROWS_OUTER_MAX_K = 256


@functools.lru_cache(maxsize=None)
def cache_sizes() -> dict:
    """Data cache bytes per level (1, 2) of cpu0, from sysfs; defaults where unreadable."""
    sizes = dict(DEFAULT_CACHES)
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(root)
    except OSError:
        return sizes
    for entry in entries:
        try:
            with open(f"{root}/{entry}/level") as f:
                level = int(f.read())
            with open(f"{root}/{entry}/type") as f:
                kind = f.read().strip()
            with open(f"{root}/{entry}/size") as f:
                text = f.read().strip().upper()
        except (OSError, ValueError):
            continue
        if level in sizes and kind in ("Data", "Unified") and text[:-1].isdigit():
            scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
            sizes[level] = int(text[:-1]) * scale
    return sizes


@dataclass(frozen=True)
class GemmPlan:
    lanes: int          # elements per vector
    mr: int             # rows per micro-kernel
    nr: int             # columns per micro-kernel (nv vectors)
    nv: int
    kc: int             # k per packed block
    mc: int             # rows per A block
    nc: int             # columns per packed B block (a multiple of nr)
    k_blocks: int       # 0: K is a run-time extent (ceil(K / KC) computed by the kernel)
    n_blocks: int       # work items per batch entry and row group (1 for a run-time N:
    #                     each item then loops over the ceil(N / NC) column blocks)
    m_groups: int       # row groups per column block (work items for the pool)
    group_rows: int     # rows per group (0: M is a run-time extent, rows per group too)
    batch: int
    pairs: bool = False  # k in bf16 pairs: B panels hold KP = ceil(KC / 2) rows of NR pairs
    pack_a: bool = False  # A's row blocks are packed (bf16 pairs, or bf16-rounded floats)
    rows_outer: bool = False  # micro-tiles row tile by row tile (else panel by panel)

    @property
    def items(self) -> int:
        return self.batch * self.n_blocks * self.m_groups

    @property
    def kp(self) -> int:
        """Rows of a packed panel: KC, or KC / 2 pairs (rounded up)."""
        return -(-self.kc // 2) if self.pairs else self.kc

    @property
    def a_stride(self) -> int:
        """Slots (pairs or floats) per row of a packed A block: KP, in whole vectors."""
        return -(-self.kp // self.lanes) * self.lanes


def k_block(nr: int, itemsize: int) -> int:
    """KC before clamping to K: a B panel (KC x NR) of an eighth of L2. 256 KiB on a 2 MiB
    L2 (KC 1024 at fp32 and 512-bit vectors, so K = 1024 is one k block and C is written
    once instead of re-read per block: 10-20% over 2 x L1 = 96 KiB on Emerald Rapids), 128
    KiB on Zen 5's 1 MiB (its best measured size)."""
    return max(8, cache_sizes()[2] // 8 // (nr * itemsize) // 8 * 8)


def plan_threads(threads: int) -> int:
    """The thread count a plan splits work for (0: the graph follows the process setting,
    which may change; plan for every core)."""
    return threads or os.cpu_count() or 1


def plan(kernel: Kernel, vector_bits: int, threads: int) -> GemmPlan:
    g = kernel.gemm
    lanes = max(vector_bits // (8 * g.dtype.itemsize), 1)
    pairs = g.precision == "bf16"
    size = 2 if pairs else g.dtype.itemsize        # bytes of a packed element
    # accumulators mr x nv vectors, plus nv B vectors and an A broadcast, in registers: 32 at
    # 512 bits (6 x 4 measured 5-10% above 12 x 2 on Zen 5: fewer loads per FMA), else 16
    nv = 4 if vector_bits >= 512 else 2
    nr, mr = nv * lanes, 6
    caches = cache_sizes()
    m_ext, n_ext, k_ext = g.m.extent, g.n.extent, g.k.extent
    # run-time N or K (jc.jit(dynamic=True)): full-size blocks, their count at run time
    n_dynamic, k_dynamic = monomial(n_ext) is not None, monomial(k_ext) is not None
    kc = k_block(nr, size)
    if not k_dynamic:
        kc = min(kc, max(k_ext, 1))
    nc = max(nr, MAX_PACK_BYTES // (kc * size) // nr * nr)
    rows_outer = kc <= ROWS_OUTER_MAX_K
    if pairs and g.prepacked:
        # no stack buffer to fit: one column block, so A is packed once per row and k
        # block, not once per column block too (the panels stream from L3 meanwhile;
        # 512x1024x4096 at 1 thread, Zen 4: 154 -> 200 GFLOP/s over NC = 128). Not for
        # fp32, which reads A in place (no packing to repeat): one block measured 0.90-1.03x
        # on BERT's GEMMs and 512x1024x4096, BERT 0.90-0.97x (Zen 4, interleaved A/B)
        nc = max(nc, -(-max(n_ext, 1) // nr) * nr)
    if not n_dynamic:
        nc = min(nc, -(-max(n_ext, 1) // nr) * nr)
    mc = max(mr, caches[2] // 4 // (kc * size) // mr * mr)
    pack_a = g.precision != "fp32"
    if pack_a:              # A's block is packed too, on the stack beside B's
        a_row = -(-(-(-kc // 2) if pairs else kc) // lanes) * lanes * 4
        mc = max(mr, min(mc, MAX_PACK_BYTES // a_row // mr * mr))
    batch = math.prod(v.extent for v in g.batch)
    n_blocks = 1 if n_dynamic else -(-max(n_ext, 1) // nc)
    k_blocks = 0 if k_dynamic else max(-(-k_ext // kc), 1)
    if monomial(m_ext) is not None:
        # M known at run time only: a fixed number of row groups, each ceil(M / groups)
        # rows rounded up to whole micro-kernel rows (computed by the kernel)
        m_groups = 1
        if threads > 1 and 0 < batch * n_blocks < 2 * threads:
            m_groups = -(-2 * threads // (batch * n_blocks))
        return GemmPlan(lanes, mr, nr, nv, kc, mc, nc, k_blocks, n_blocks, m_groups, 0, batch,
                        pairs, pack_a, rows_outer)
    row_panels = max(-(-m_ext // mr), 1)
    m_groups = 1
    if threads > 1 and 0 < batch * n_blocks < 2 * threads:      # batch 0: nothing to split
        m_groups = min(-(-2 * threads // (batch * n_blocks)), row_panels)
    group_rows = -(-row_panels // m_groups) * mr
    m_groups = max(-(-max(m_ext, 1) // group_rows), 1)
    return GemmPlan(lanes, mr, nr, nv, kc, mc, nc, k_blocks, n_blocks, m_groups, group_rows,
                    batch, pairs, pack_a, rows_outer)


def loads_per_slot(lowered) -> Counter:
    """How many loads of the lowered graph's kernels read each buffer slot."""
    return Counter(ld.buffer.slot for k in lowered.kernels for ld in k.loads())


def prepackable(kernel: Kernel, lowered, loads: Counter) -> bool:
    """B is a constant that only this GEMM reads (`loads`: loads_per_slot), the same for
    every batch entry (and the product is no matrix-vector one)."""
    g = kernel.gemm
    if g.matvec:                  # a GEMV reads B once: packing would only copy it
        return False
    if g.b.buffer.kind != "const" or any(g.b.offset.coeff(v) != 0 for v in g.batch):
        return False
    if monomial(g.n.extent) is not None or monomial(g.k.extent) is not None:
        return False              # (panels are laid out for static N and K)
    if g.b.offset.coeff(g.k) is None or g.b.offset.coeff(g.n) is None:
        return False
    return loads[g.b.buffer.slot] == 1


def prepack(lowered, vector_bits: int, threads: int) -> int:
    """Pack constant B operands into panel layout, in place in `lowered` (the const's array
    and buffer are replaced; the GEMM is marked prepacked). Returns the bytes packed."""
    packed_bytes = 0
    const_bufs = lowered.buffers_of_kind("const")
    loads = loads_per_slot(lowered)
    for kernel in lowered.kernels:
        if kernel.gemm is None or not prepackable(kernel, lowered, loads):
            continue
        g = kernel.gemm
        kernel.gemm = replace(g, prepacked=True)       # planned as the emitter will see it
        p = plan(kernel, vector_bits, threads)
        buf = g.b.buffer
        index = const_bufs.index(buf)
        dense = _operand_matrix(lowered.consts[index].array, g.b.offset, g.k, g.n)
        if g.precision == "bf16":
            panels, dtype = _pair_panels(dense, p), dt.int32
        else:
            if g.precision == "bf16-emulated":
                dense = bf16.rounded(dense)
            panels, dtype = _panels(dense, p, g.dtype.np), buf.dtype
        lowered.consts[index] = ConstArray.derived(panels, lowered.consts[index],
                                                   f"gemm panels {p}")
        new = Buffer(buf.name, "const", dtype, panels.shape, (1,), buf.slot)
        lowered.buffers[buf.slot] = new
        const_bufs[index] = new
        kernel.gemm = replace(g, b=Load(new, lin(0)), prepacked=True)
        packed_bytes += panels.nbytes
    return packed_bytes


def _panels(dense: np.ndarray, p: GemmPlan, dtype) -> np.ndarray:
    """B (K, N) in the kernel's packed order, flat: [k block][n block][panel][kk][c], NR
    columns per panel, zero past K and N. Written block by block into the zeroed result (one
    transposing copy ~10x faster than padding B and copying a 5-d transposed view of it)."""
    K, N = dense.shape
    panels = aligned_zeros((p.k_blocks, p.n_blocks, p.nc // p.nr, p.kc, p.nr), dtype)
    for kb in range(p.k_blocks):
        k0 = kb * p.kc
        kn = min(p.kc, K - k0)
        for nb in range(p.n_blocks):
            n0 = nb * p.nc
            nn = min(p.nc, N - n0)
            if kn <= 0 or nn <= 0:
                continue
            whole, rest = divmod(nn, p.nr)
            block = dense[k0:k0 + kn, n0:n0 + nn]
            if whole:
                panels[kb, nb, :whole, :kn, :] = \
                    block[:, :whole * p.nr].reshape(kn, whole, p.nr).transpose(1, 0, 2)
            if rest:
                panels[kb, nb, whole, :kn, :rest] = block[:, whole * p.nr:]
    return panels.ravel()


def _pair_panels(dense: np.ndarray, p: GemmPlan) -> np.ndarray:
    """B (K, N) rounded to bf16 in the pairs kernel's order, flat int32: [k block][n block]
    [panel][KC/2][c] of (B[2j, c], B[2j+1, c]) pairs, the even k in the low half, zero past
    K and N: the 16-bit panels of an even KC (KC + 1 when K itself is an odd KC), paired."""
    even = replace(p, kc=2 * p.kp, pairs=False)
    halves = _panels(bf16.bits(dense), even, np.uint16)
    halves = halves.reshape(-1, p.kp, 2, p.nr).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(halves).view(np.int32).ravel()


def _operand_matrix(flat: np.ndarray, offset, k, n) -> np.ndarray:
    """The (K, N) matrix a load reads: flat[const + ck*k + cn*n], as a strided view of the
    constant where the coefficients allow (no copy: a BERT-base weight took 70-250 ms to
    gather with an index array)."""
    flat = flat.ravel()
    ck, cn, start = offset.coeff(k), offset.coeff(n), offset.const
    if flat.size == 0:
        return np.zeros((k.extent, n.extent), flat.dtype)
    last = start + ck * (k.extent - 1) + cn * (n.extent - 1)
    if ck >= 0 and cn >= 0 and 0 <= start < flat.size and last < flat.size:
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(flat[start:], (k.extent, n.extent),
                                               (ck * item, cn * item), writeable=False)
    ks = np.arange(k.extent)[:, None]
    ns = np.arange(n.extent)[None, :]
    return flat[start + ck * ks + cn * ns]


# ---- code ---------------------------------------------------------------------------------

class GemmEmitter(EpilogueEmitter):
    """Emits one gemm kernel (Kind.GEMM) with its plan (`plan`: a GemmPlan); the shared
    machinery (loop variables, loads, stores, epilogue expressions) is KernelEmitter's."""

    def __init__(self, module, kernel, name: str, masked_tail: bool, stream_bytes: int = 0,
                 plan=None):
        super().__init__(module, kernel, name, masked_tail, stream_bytes, plan)
        p = self.p = plan                  # the GemmPlan (registry: plan)
        self.g = kernel.gemm
        self.elem = u.value_type(self.g.dtype)
        self.vty = ir.VectorType(self.elem, p.lanes)
        self.panel_ty = ir.ArrayType(self.elem, p.kc * p.nc)
        self.out = kernel.stores[0]
        self.setup_epilogue(self.g.n, p.lanes)
        # B's values as the products use them (bf16-rounded where this float32 kernel stands
        # in for the vdpbf16ps one; A is then rounded as it is packed, RoundedGemmEmitter)
        emulated = self.g.precision == "bf16-emulated"
        self.operand = (lambda x: bf16.round_ir(self.b, x)) if emulated else (lambda x: x)

    def body(self):
        b, p, g = self.b, self.p, self.g
        if not g.prepacked:
            self.pack_buf = u.alloca_once(b, self.panel_ty, name="bpack")
            self.pack_buf.align = 64
        self.ctile = u.alloca_once(b, ir.ArrayType(self.vty, p.nv * p.mr), name="ctile")
        self.ctile.align = 64
        per_batch = p.n_blocks * p.m_groups
        with _loop(b, self.start, self.stop, 1, name="item") as t:
            flat, rem = b.sdiv(t, u.I64(per_batch)), b.srem(t, u.I64(per_batch))
            for v in reversed(g.batch):                       # the batch index, last fastest
                self.env[v] = b.srem(flat, self.extent(v.extent))
                flat = b.sdiv(flat, self.extent(v.extent))
            j, group = b.sdiv(rem, u.I64(p.m_groups)), b.srem(rem, u.I64(p.m_groups))
            m_ext = self.extent(g.m.extent)
            group_rows = u.I64(p.group_rows) if p.group_rows else self.run_time_group_rows(m_ext)
            m_lo = b.mul(group, group_rows)
            m_hi = u.imin(b, b.add(m_lo, group_rows), m_ext)
            if monomial(g.n.extent) is None:
                self.column_block(j, m_lo, m_hi)
            else:                         # a run-time N: this item's rows, every column block
                n_blocks = self.blocks(self.extent(g.n.extent), p.nc)
                with _loop(b, u.I64(0), n_blocks, 1, name="jb") as jb:
                    self.column_block(jb, m_lo, m_hi)

    def blocks(self, extent, size: int):
        """ceil(extent / size) for a run-time extent (>= 2: at least one block)."""
        return self.b.sdiv(self.b.add(extent, u.I64(size - 1)), u.I64(size))

    def column_block(self, j, m_lo, m_hi):
        """Columns j*NC.. of rows m_lo..m_hi: every k block, packed, then the row blocks."""
        b, p, g = self.b, self.p, self.g
        n0 = b.mul(j, u.I64(p.nc))
        ncols = u.imin(b, u.I64(p.nc), b.sub(self.extent(g.n.extent), n0))
        k_ext = self.extent(g.k.extent)
        k_blocks = u.I64(p.k_blocks) if p.k_blocks else self.blocks(k_ext, p.kc)
        with _loop(b, u.I64(0), k_blocks, 1, name="pcb") as pci:
            pc = b.mul(pci, u.I64(p.kc))
            kc = u.imin(b, u.I64(p.kc), b.sub(k_ext, pc))
            npanels = b.sdiv(b.add(ncols, u.I64(p.nr - 1)), u.I64(p.nr))
            panels = self.packed_block(pci, j, pc, kc, n0, ncols, npanels)
            if p.k_blocks == 1:               # one k block: known at compile time
                first = last = True
            else:
                last = b.icmp_signed("==", pci, b.sub(k_blocks, u.I64(1)))
                first = b.icmp_signed("==", pci, u.I64(0))
            self.row_blocks(panels, pc, kc, n0, ncols, npanels, m_lo, m_hi, first, last)

    def run_time_group_rows(self, m_ext):
        """ceil(ceil(M / MR) / groups) * MR for a run-time M."""
        b, p = self.b, self.p
        panels = b.sdiv(b.add(m_ext, u.I64(p.mr - 1)), u.I64(p.mr))
        per_group = b.sdiv(b.add(panels, u.I64(p.m_groups - 1)), u.I64(p.m_groups))
        return b.mul(per_group, u.I64(p.mr))

    # -- B panels ---------------------------------------------------------------------------
    def packed_block(self, pci, j, pc, kc, n0, ncols, npanels):
        """Pointer to the packed KC x NC block: the prepacked constant's, or packed now."""
        b, p, g = self.b, self.p, self.g
        if g.prepacked:
            block = b.mul(b.add(b.mul(pci, u.I64(p.n_blocks)), j), u.I64(p.kp * p.nc))
            base = self.base_ptr(g.b.buffer)
            return b.gep(base, [block])
        panels = b.gep(self.pack_buf, [u.I64(0), u.I64(0)])
        self.pack(panels, pc, kc, n0, ncols, npanels)
        return panels

    def pack(self, panels, pc, kc, n0, ncols, npanels):
        """panels[jp][kk][c] = B[pc + kk, n0 + jp*NR + c], zero beyond the last column: per
        panel, panel_rows(kc) rows that pack_row fills (gemm_bf16.py's: bf16 pairs)."""
        b, p, g = self.b, self.p, self.g
        if g.b.offset.coeff(g.n) != 1:
            return self.pack_strided(panels, pc, kc, n0, ncols, npanels)
        with _loop(b, u.I64(0), npanels, 1, name="jp") as jp:
            left = b.sub(ncols, b.mul(jp, u.I64(p.nr)))
            counts = [_clamp(b, b.sub(left, u.I64(h * p.lanes)), p.lanes)
                      for h in range(p.nv)]
            masks = [u.lane_mask(b, c, p.lanes) for c in counts]
            col0 = b.add(n0, b.mul(jp, u.I64(p.nr)))
            dst0 = b.mul(jp, u.I64(self.panel_stride * p.nr))
            with u.for_range(b, u.I64(0), self.panel_rows(kc), 1, name="kk") as kk:
                dst = b.add(dst0, b.mul(kk, u.I64(p.nr)))
                self.pack_row(panels, dst, col0, counts, masks, pc, kc, kk)

    def pack_row(self, panels, dst, col0, counts, masks, pc, kc, kk):
        """Row kk of a panel at panels[dst]: B's row pc + kk from column col0, NV vectors
        (counts/masks: their valid lanes)."""
        b, p, g = self.b, self.p, self.g
        self.env[g.k] = b.add(pc, kk)
        for h in range(p.nv):
            col = b.add(col0, u.I64(h * p.lanes))
            vec = self.operand(self.load_row(col, counts[h], masks[h]))
            ptr = b.gep(panels, [b.add(dst, u.I64(h * p.lanes))])
            b.store(vec, b.bitcast(ptr, self.vty.as_pointer()), align=64)

    def pack_strided(self, panels, pc, kc, n0, ncols, npanels):
        """The panels of a B strided along n (a transposed operand: k^T in attention), one
        column at a time down k (contiguous when B is a transpose), only the valid columns;
        a panel with fewer than NR of them is zeroed first (with N known at run time only,
        a vector-at-a-time gather loaded all NR columns of a short panel: 10x at N = 17).
        A panel holds panel_rows(kc) rows of panel_type vectors, panel_stride rows apart;
        pack_column fills one column (gemm_bf16.py's emitters pack bf16 pairs)."""
        b, p, g = self.b, self.p, self.g
        rows, pty = self.panel_rows(kc), self.panel_type
        zero = u.const(pty, 0)
        with _loop(b, u.I64(0), npanels, 1, name="jp") as jp:
            valid = u.imin(b, b.sub(ncols, b.mul(jp, u.I64(p.nr))), u.I64(p.nr))
            col0 = b.add(n0, b.mul(jp, u.I64(p.nr)))
            panel = b.gep(panels, [b.mul(jp, u.I64(self.panel_stride * p.nr))])
            with b.if_then(b.icmp_signed("<", valid, u.I64(p.nr))):
                with u.for_range(b, u.I64(0), rows, 1, name="kz") as kk:
                    row = b.gep(panel, [b.mul(kk, u.I64(p.nr))])
                    for h in range(p.nv):
                        b.store(zero, b.bitcast(b.gep(row, [u.I64(h * p.lanes)]),
                                                pty.as_pointer()), align=64)
            with _loop(b, u.I64(0), valid, 1, name="c") as c:
                self.env[g.n] = b.add(col0, c)
                self.pack_column(panel, pc, kc, c)

    def panel_rows(self, kc):
        return kc

    @property
    def panel_type(self):
        return self.vty

    @property
    def panel_stride(self) -> int:
        return self.p.kc

    def pack_column(self, panel, pc, kc, c):
        """Column c of a panel: B's column env[n] over the k block pc..pc+kc."""
        b, p, g = self.b, self.p, self.g
        with u.for_range(b, u.I64(0), kc, 1, name="kk") as kk:
            self.env[g.k] = b.add(pc, kk)
            x = b.load(b.gep(self.base_ptr(g.b.buffer), [self.index(g.b.offset)]))
            b.store(self.operand(x), b.gep(panel, [b.add(b.mul(kk, u.I64(p.nr)), c)]))

    def load_row(self, col, count, mask):
        """lanes of B's row env[k] from column `col`, `count` of them valid (the rest zero,
        through a masked load)."""
        b, g = self.b, self.g
        self.env[g.n] = col
        ptr = b.bitcast(b.gep(self.base_ptr(g.b.buffer), [self.index(g.b.offset)]),
                        self.vty.as_pointer())
        full = b.icmp_signed("==", count, u.I64(self.p.lanes))
        with b.if_else(full) as (then, otherwise):
            with then:
                whole = b.load(ptr, align=1)
                then_bb = b.block
            with otherwise:
                part = u.masked_load(b, ptr, mask, self.vty)
                else_bb = b.block
        phi = b.phi(self.vty)
        phi.add_incoming(whole, then_bb)
        phi.add_incoming(part, else_bb)
        return phi

    # -- rows and the micro-kernel ----------------------------------------------------------
    def row_blocks(self, panels, pc, kc, n0, ncols, npanels, m_lo, m_hi, first, last):
        b, p = self.b, self.p
        with _loop(b, m_lo, m_hi, p.mc, "ic", partial=True) as ic:
            ic_end = u.imin(b, b.add(ic, u.I64(p.mc)), m_hi)
            self.row_block(ic, ic_end, pc, kc)
            tiles = (ic, ic_end, panels, pc, kc, n0, ncols, first, last)
            if p.rows_outer:
                with _loop(b, ic, ic_end, p.mr, "ir", partial=True) as row0:
                    with _loop(b, u.I64(0), npanels, 1, name="jr") as jp:
                        self.micro_tile(jp, row0, *tiles)
            else:
                with _loop(b, u.I64(0), npanels, 1, name="jr") as jp:
                    with _loop(b, ic, ic_end, p.mr, "ir", partial=True) as row0:
                        self.micro_tile(jp, row0, *tiles)

    def micro_tile(self, jp, row0, ic, ic_end, panels, pc, kc, n0, ncols, first, last):
        """The micro-kernel on column panel jp and the MR rows from row0 (of the row block
        ic..ic_end), then C's update."""
        b, p = self.b, self.p
        col0 = b.add(n0, b.mul(jp, u.I64(p.nr)))
        ncol = u.imin(b, u.I64(p.nr), b.sub(b.add(n0, ncols), col0))
        panel = b.gep(panels, [b.mul(jp, u.I64(p.kp * p.nr))])
        nrow = u.imin(b, u.I64(p.mr), b.sub(ic_end, row0))
        if monomial(self.g.n.extent) is None:
            accs = self.micro(panel, pc, kc, row0)
        else:
            accs = self.micro_to(panel, pc, kc, row0, ncol)
        self.update(accs, row0, nrow, col0, ncol, first, last)

    def row_block(self, ic, ic_end, pc, kc):
        """Before the panels of rows ic..ic_end at k block pc: nothing (A is read in place;
        the pairs kernel packs it here)."""

    def micro_to(self, panel, pc, kc, row0, ncol):
        """The micro-kernel over the vectors that hold the panel's `ncol` valid columns: a
        run-time N may leave most of a panel padding (N = 16 of NR = 64), whose FMAs a
        static N lets LLVM drop (their sums are never stored); one variant per count. The
        variants' sums meet in stack slots (promoted to registers by LLVM)."""
        b, p = self.b, self.p
        vectors = b.sdiv(b.add(ncol, u.I64(p.lanes - 1)), u.I64(p.lanes))
        slots = [[u.alloca_once(b, self.vty, name=f"sum{r}_{h}") for h in range(p.nv)]
                 for r in range(p.mr)]

        def keep(accs):
            for row, values in zip(slots, accs):
                for slot, value in zip(row, values):
                    b.store(value, slot)

        def from_count(nvec):
            if nvec == p.nv:
                return keep(self.micro(panel, pc, kc, row0))
            with b.if_else(b.icmp_signed("<=", vectors, u.I64(nvec))) as (then, otherwise):
                with then:
                    keep(self.micro(panel, pc, kc, row0, nvec))
                with otherwise:
                    from_count(nvec + 1)
        from_count(1)
        return [[b.load(slot) for slot in row] for row in slots]

    def micro(self, panel, pc, kc, row0, nvec: int = 0):
        """accs[r][h] = sum over kk < kc of A[row0 + r, pc + kk] * panel[kk][h*lanes ...]:
        the MR x NV accumulator vectors, phis of the k loop (SSA from the start: no stack
        slots for LLVM to promote); only the first `nvec` vectors are summed (0: all; the
        others hold no valid column and stay zero)."""
        b, p = self.b, self.p
        nvec = nvec or p.nv
        a_rows, step = self.a_rows(pc, row0)
        vptr = self.vty.as_pointer()

        def products(kk, accs):
            bk = b.gep(panel, [b.mul(kk, u.I64(p.nr))])
            # unaligned loads: a prepacked constant's array is only element-aligned
            bv = [b.load(b.bitcast(b.gep(bk, [u.I64(h * p.lanes)]), vptr), align=1)
                  for h in range(nvec)]
            ak = kk if step == 1 else b.mul(kk, self.extent(step or 0))
            sums = []
            for r in range(p.mr):
                a = b.load(b.gep(a_rows[r], [ak])) if step is not None else \
                    self.a_element(row0, r, b.add(pc, kk))
                a = u.splat(b, a, p.lanes)
                sums.append([u.intrinsic(b, "fmuladd", [a, bv[h], accs[r][h]])
                             for h in range(nvec)])
            return sums
        return self.k_loop(kc, nvec, products)

    def a_rows(self, pc, row0) -> tuple:
        """(pointers to A[row0 + r, pc] for the MR rows, A's stride along k: None where its
        index is not linear in k). Rows past the edge read the last row, unused."""
        b, p, g = self.b, self.p, self.g
        self.env[g.k] = pc
        a_rows, a_base = [], self.base_ptr(g.a.buffer)
        last_row = self.last_row()
        for r in range(p.mr):
            self.env[g.m] = u.imin(b, b.add(row0, u.I64(r)), last_row)
            a_rows.append(b.gep(a_base, [self.index(g.a.offset)]))
        return a_rows, g.a.offset.coeff(g.k)

    def k_loop(self, trips, nvec: int, products):
        """The micro-kernel's loop: kk from 0 to `trips` (not unrolled), the MR x nvec
        accumulators phis of it, updated by products(kk, accs) -> the new sums; returns
        them with the vectors past nvec zero."""
        b, p = self.b, self.p
        fn, before = b.function, b.block
        cond, body, done = (fn.append_basic_block(f"k.{part}") for part in ("cond", "body", "end"))
        b.branch(cond)
        b.position_at_end(cond)
        kk = b.phi(u.I64, name="k")
        accs = [[b.phi(self.vty, name=f"acc{r}_{h}") for h in range(nvec)] for r in range(p.mr)]
        b.cbranch(b.icmp_signed("<", kk, trips), body, done)
        b.position_at_end(body)
        sums = products(kk, accs)
        after = b.block
        kk.add_incoming(u.I64(0), before)
        kk.add_incoming(b.add(kk, u.I64(1)), after)
        zero = u.const(self.vty, 0)
        for row, new in zip(accs, sums):
            for acc, value in zip(row, new):
                acc.add_incoming(zero, before)
                acc.add_incoming(value, after)
        b.branch(cond).set_metadata("llvm.loop", u.no_unroll(b.module))
        b.position_at_end(done)
        return [row + [zero] * (p.nv - nvec) for row in accs]

    def last_row(self):
        """max(M - 1, 0) (rows past the edge read this row)."""
        if monomial(self.g.m.extent) is None:
            return u.I64(max(self.g.m.extent - 1, 0))
        m1 = self.b.sub(self.extent(self.g.m.extent), u.I64(1))
        return self.b.select(self.b.icmp_signed(">", m1, u.I64(0)), m1, u.I64(0))

    def a_element(self, row0, r, k):
        """A[row0 + r, k] through the general index (A's offset is not linear in k)."""
        b, g = self.b, self.g
        self.env[g.m] = u.imin(b, b.add(row0, u.I64(r)), self.last_row())
        self.env[g.k] = k
        return b.load(b.gep(self.base_ptr(g.a.buffer), [self.index(g.a.offset)]))

    def update(self, accs, row0, nrow, col0, ncol, first, last):
        """C rows row0.. (nrow valid), columns col0.. (ncol valid): add the partial sum kept
        in C (after the first k block); at the last k block apply the epilogue. The tile goes
        through a stack copy and runtime loops, so the epilogue is emitted twice (whole
        vectors and masked edge vectors), not once per register. Where every column block
        is whole vectors (N and the block widths multiples of the vector), only the first
        form is emitted: LLVM would otherwise spend time proving the masked one dead."""
        b, p, g = self.b, self.p, self.g
        whole_vectors = monomial(g.n.extent) is None and g.n.extent % p.lanes == 0 \
            and p.nc % p.lanes == 0
        tile = b.bitcast(self.ctile, self.vty.as_pointer())
        for r in range(p.mr):
            for h in range(p.nv):
                b.store(accs[r][h], b.gep(tile, [u.I64(p.nv * r + h)]), align=64)
        with _loop(b, u.I64(0), nrow, 1, name="r") as r:
            self.env[g.m] = b.add(row0, r)
            # LLVM unrolls the column loop (the tile's NV vectors of a row), epilogue math
            # included: rolled, the encoder layer's GELU GEMM (K = 256) took ~1 ms more
            # (the layer 3.5 -> 4.5 ms), far more than its loop overhead
            with u.for_range(b, u.I64(0), u.I64(p.nv), 1, name="h") as h:
                self.env[g.n] = b.add(col0, b.mul(h, u.I64(p.lanes)))
                acc = b.load(b.gep(tile, [b.add(b.mul(r, u.I64(p.nv)), h)]), align=64)
                count = _clamp(b, b.sub(ncol, b.mul(h, u.I64(p.lanes))), p.lanes)
                if whole_vectors:            # count is lanes or 0
                    with b.if_then(b.icmp_signed(">", count, u.I64(0))):
                        self.finish(acc, first, last, None)
                else:
                    whole = b.icmp_signed("==", count, u.I64(p.lanes))
                    with b.if_else(whole) as (then, otherwise):
                        with then:
                            self.finish(acc, first, last, None)
                        with otherwise:
                            with b.if_then(b.icmp_signed(">", count, u.I64(0))):
                                self.finish(acc, first, last, count)

    def finish(self, acc, first, last, count):
        """C = acc (+ C unless first); the epilogue when last. `count`: valid lanes (None:
        all); stores and loads then touch only those. `first` and `last` are i1 values, or
        True when there is one k block."""
        b = self.b
        if first is True and last is True:
            return self.epilogue(acc, count)
        with b.if_else(first) as (then, otherwise):
            with then:
                total_first = acc
                first_bb = b.block
            with otherwise:
                partial = self.c_load(count)
                total_rest = b.fadd(acc, partial)
                rest_bb = b.block
        total = b.phi(self.vty)
        total.add_incoming(total_first, first_bb)
        total.add_incoming(total_rest, rest_bb)
        with b.if_else(last) as (then, otherwise):
            with then:
                self.epilogue(total, count)
            with otherwise:
                self.c_store(total, count)

    def c_load(self, count):
        """The partial sum kept in C at env (m, n): the output's own dtype is the GEMM's."""
        st = self.out
        return self.lanes_masked(
            count, lambda: self.load(Load(st.buffer, st.offset), self.p.lanes))

    def c_store(self, value, count):
        st = self.out
        self.lanes_masked(
            count, lambda: self.store(st.buffer, st.offset, value, self.p.lanes))


def _loop(b, start, stop, step: int = 1, name: str = "i", partial: bool = False):
    """u.for_range that LLVM does not unroll: the register blocking is explicit, and LLVM's
    unrolling of the GEMM's outer loops cost compile time for no measured speed. (The
    contiguous packing loop, a few instructions, and the epilogue's column loop keep it.)"""
    return u.for_range(b, start, stop, step, name, partial, unroll=False)


def _clamp(b, x, hi: int):
    """min(max(x, 0), hi) for i64 x."""
    zero = u.I64(0)
    return u.imin(b, b.select(b.icmp_signed(">", x, zero), x, zero), u.I64(hi))

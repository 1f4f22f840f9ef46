"""Tiled pointwise kernels (Kind.TILES, see passes/legality.py): a transposing read is
vectorized through lanes x lanes register tiles along the tile loop."""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.kernel import Kind, Load, walk
from jitcore.passes.symbolic import monomial

from . import irutil as u
from .codegen import KernelEmitter
from .registry import KindEntry, register

TILE_BLOCK = 8         # tiles along the tile loop per column step of a transposing kernel
TILE_COLUMNS = 8       # ...and columns of tiles per block (tile_block)


class TilesEmitter(KernelEmitter):
    """Loops with the tile loop stepping by whole tiles; the transposed loads of each block
    of tiles read and transposed in registers before the body runs on their columns."""

    def body(self):
        self.tile_nest(0, scalar=False)

    def tile_nest(self, i: int, scalar: bool):
        """Loops i.. of a tiled kernel (see passes/legality.py). The tile loop steps by a
        whole tile; the rows it leaves over (and, in tile_row, the columns) run scalar."""
        k, loops = self.kernel, self.kernel.loops
        lp, first = loops[i], i == 0
        if i == len(loops) - 1:
            return self.loop(lp, self.emit_point, first) if scalar else self.tile_row(lp)
        if scalar or lp.var != k.tile_var:
            return self.loop(lp, lambda: self.tile_nest(i + 1, scalar), first)
        lanes = k.lanes
        lo, hi = (self.start, self.stop) if first else (u.I64(0), self.extent(lp.var.extent))
        start = lo
        if i + 1 == len(loops) - 1 and TILE_BLOCK > 1:
            # blocks of TILE_BLOCK tiles per column step: the transposed source is read in
            # runs of TILE_BLOCK lines per row (fewer pages per line read)
            span = lanes * TILE_BLOCK
            start = self.b.add(lo, self.b.mul(self.b.sdiv(self.b.sub(hi, lo), u.I64(span)),
                                              u.I64(span)))
            with u.for_range(self.b, lo, start, span, name=lp.var.name + "block") as t0:
                self.env[lp.var] = t0
                self.tile_row(loops[i + 1], TILE_BLOCK)
        full_end = self.b.add(start, self.b.mul(self.b.sdiv(self.b.sub(hi, start),
                                                            u.I64(lanes)), u.I64(lanes)))
        with u.for_range(self.b, start, full_end, lanes, name=lp.var.name + "tile") as t0:
            self.env[lp.var] = t0
            self.tile_nest(i + 1, False)
        with u.for_range(self.b, full_end, hi, 1, name=lp.var.name + "rest") as t:
            self.env[lp.var] = t
            self.tile_nest(i + 1, True)

    def tile_row(self, vloop, tiles: int = 1):
        """The tiles of `tiles` rows of tiles from t0 = env[tile var], along the vector loop,
        in blocks of TILE_COLUMNS columns of tiles when tiles > 1 (see tile_block); the
        columns left over run scalar."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, vloop.var, k.lanes
        t0 = self.env[t]
        cols = TILE_COLUMNS if tiles > 1 else 1
        strided = [n for n in walk([s.value for s in k.stores])
                   if isinstance(n, Load) and n.offset.coeff(v) not in (0, 1)]
        stack = {id(ld): u.alloca_once(b, ir.ArrayType(ir.VectorType(
            u.memory_type(ld.dtype), lanes), lanes * tiles * cols), name="tile")
            for ld in strided}
        if monomial(v.extent) is None:
            full = v.extent // lanes * lanes
            blocks = v.extent // (lanes * cols) * (lanes * cols)
            extent = v.extent
        else:                   # a run-time vector axis: the same split, computed here
            extent = self.extent(v.extent)
            full = b.mul(b.sdiv(extent, u.I64(lanes)), u.I64(lanes))
            blocks = b.mul(b.sdiv(extent, u.I64(lanes * cols)), u.I64(lanes * cols))
        if not isinstance(blocks, int) or blocks:
            with u.for_range(b, u.I64(0), _i64(blocks), lanes * cols, name=v.name + "b") as v0:
                self.tile_block(strided, stack, t0, v0, tiles, cols)
        if not isinstance(blocks, int) or blocks < full:
            with u.for_range(b, _i64(blocks), _i64(full), lanes, name=v.name + "t") as v0:
                self.tile_block(strided, stack, t0, v0, tiles, 1)
        if not isinstance(full, int) or full < extent:
            with u.for_range(b, t0, b.add(t0, u.I64(lanes * tiles)), 1,
                             name=t.name + "rest") as tt, \
                    u.for_range(b, _i64(full), _i64(extent), 1, name=v.name + "rest") as j:
                self.env[t], self.env[v] = tt, j
                self.emit_point()

    def tile_block(self, strided: list, stack: dict, t0, v0, tiles: int, cols: int):
        """`tiles` x `cols` tiles of lanes x lanes from (t0, v0), in two passes: each strided
        load's tiles are read (`lanes` vectors along the tile loop each), transposed in
        registers and parked in its stack block; then the body runs once per row of the
        block, a vector per column of tiles. The transposed source is so read in runs of
        `tiles` lines per row, the other operands and the output in runs of `cols` lines."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, k.vector_var, k.lanes

        def transpose(tt0, vv0, first):
            for ld in strided:
                vty = ir.VectorType(u.memory_type(ld.dtype), lanes)
                rows = []
                for r in range(lanes):
                    self.env[t], self.env[v] = tt0, b.add(vv0, u.I64(r))
                    ptr = b.gep(self.base_ptr(ld.buffer), [self.index(ld.offset)])
                    rows.append(b.load(b.bitcast(ptr, vty.as_pointer()), align=1))
                for c, col in enumerate(u.transpose(b, rows)):
                    at = b.add(first, u.I64(c)) if c else first
                    b.store(col, b.gep(stack[id(ld)], [u.I64(0), at]))

        if tiles * cols == 1:
            transpose(t0, v0, u.I64(0))
        else:                      # tile (r, j) at vectors (j * tiles + r) * lanes + column
            with u.for_range(b, u.I64(0), u.I64(cols), 1, name="tj") as j, \
                    u.for_range(b, u.I64(0), u.I64(tiles), 1, name="tr") as r:
                transpose(b.add(t0, b.mul(r, u.I64(lanes))), b.add(v0, b.mul(j, u.I64(lanes))),
                          b.mul(b.add(b.mul(j, u.I64(tiles)), r), u.I64(lanes)))

        def row(c, j):
            self.env[t] = b.add(t0, c)
            self.env[v] = v0 if j is None else b.add(v0, b.mul(j, u.I64(lanes)))
            at = c if j is None else b.add(b.mul(j, u.I64(tiles * lanes)), c)
            memo = {}
            for ld in strided:
                col = b.load(b.gep(stack[id(ld)], [u.I64(0), at]))
                if ld.dtype.name == "bool":
                    col = b.icmp_unsigned("!=", col, u.const(col.type, 0))
                memo[id(ld)] = col
            for st in k.stores:
                self.store(st.buffer, st.offset, self.value(st.value, lanes, memo), lanes)

        with u.for_range(b, u.I64(0), u.I64(lanes * tiles), 1, name="c") as c:
            if cols == 1:
                row(c, None)
            else:
                with u.for_range(b, u.I64(0), u.I64(cols), 1, name="cj") as j:
                    row(c, j)



def _i64(n):
    """An i64 value from an int or an i64 value (a bound known now or at run time)."""
    return u.I64(n) if isinstance(n, int) else n


register(KindEntry(Kind.TILES, TilesEmitter))

"""Tiled pointwise kernels (Kind.TILES, see passes/legality.py): a transposing read is
vectorized through lanes x lanes register tiles along the tile loop, in blocks of tiles
transposed onto the stack (block_shape), large outputs written with streaming stores."""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.kernel import Kind, Load, walk
from jitcore.passes.symbolic import monomial

from . import irutil as u
from .codegen import KernelEmitter
from .registry import KindEntry, register

# The block of a transposing kernel (tile_block), in bytes, so that every width and dtype
# reads runs of the same length: each transposed-source row in a run of `run` bytes per
# block, the other operands' and the output's rows in runs of `columns` bytes. An output that
# streams (streaming.py: it does not fit in this core's share of the cache) gets LONG_RUNS,
# which the hardware prefetchers follow from memory. Intel Xeon Ice Lake-SP @2.8GHz, 2 cores,
# a + b.T 4096x4096, interleaved medians of 15-25 rounds, both streamed: against runs of
# 2048/512, LONG_RUNS f32 AVX-512 0.96-1.0x, f64 1.19x, f32 AVX2 1.06x; 4096/512 0.96x and
# 2048/256 0.74x (f32 AVX-512). Software prefetch of the next block's lines (either operand,
# L1 or L2) measured 0.8-1.0x: the line fill buffers, not the prefetchers, were short. Smaller
# outputs keep SHORT_RUNS (1000x999 f32, in cache: long runs 0.92x). The transposed blocks live
# on the stack, at most TILE_STACK_BYTES for all strided loads together (as gemm.py's packed
# block; fewer tiles along the tile loop where they would not fit).
SHORT_RUNS = (512, 512)          # (run, columns)
LONG_RUNS = (2048, 1024)
TILE_STACK_BYTES = 256 * 1024


def block_shape(kernel, runs: tuple) -> tuple:
    """(tiles along the tile loop, columns of tiles) per block of a transposing kernel that
    reads runs of `runs` bytes (SHORT_RUNS or LONG_RUNS)."""
    lanes, strided = kernel.lanes, strided_loads(kernel)
    vector = lanes * max(ld.dtype.itemsize for ld in strided)
    tiles = max(1, runs[0] // vector)
    cols = max(1, runs[1] // vector)
    while tiles > 1 and tiles * cols * lanes * vector * len(strided) > TILE_STACK_BYTES:
        tiles //= 2
    return tiles, cols


def strided_loads(kernel) -> list:
    """The loads a tiled kernel reads across its vector loop (through the tiles)."""
    v = kernel.vector_var
    return [n for n in walk([s.value for s in kernel.stores])
            if isinstance(n, Load) and n.offset.coeff(v) not in (0, 1)]


class TilesEmitter(KernelEmitter):
    """Loops with the tile loop stepping by whole tiles; the transposed loads of each block
    of tiles read and transposed in registers before the body runs on their columns."""

    def body(self):
        # long runs where the output streams (not where only a placeholder extent said so)
        runs = LONG_RUNS if self.streamed and self.dims is None else SHORT_RUNS
        self.shape = block_shape(self.kernel, runs)
        self.stacks = {}         # (id(strided load), vectors) -> its stack block (stack)
        self.tile_nest(0, scalar=False)

    def tile_nest(self, i: int, scalar: bool):
        """Loops i.. of a tiled kernel (see passes/legality.py). The tile loop steps by a
        whole tile; the rows it leaves over (and, in tile_row, the columns) run scalar.
        Around the vector loop it steps by blocks of tiles (block_shape), the whole tiles
        left over in one shorter block."""
        k, loops = self.kernel, self.kernel.loops
        lp, first = loops[i], i == 0
        if i == len(loops) - 1:
            return self.loop(lp, self.emit_point, first) if scalar else self.tile_row(lp)
        if scalar or lp.var != k.tile_var:
            return self.loop(lp, lambda: self.tile_nest(i + 1, scalar), first)
        b, lanes = self.b, k.lanes
        lo, hi = (self.start, self.stop) if first else (u.I64(0), self.extent(lp.var.extent))
        tiles, _ = self.shape
        full_end = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), u.I64(lanes)), u.I64(lanes)))
        if i + 1 == len(loops) - 1 and tiles > 1:
            span = lanes * tiles
            start = b.add(lo, b.mul(b.sdiv(b.sub(hi, lo), u.I64(span)), u.I64(span)))
            with u.for_range(b, lo, start, span, name=lp.var.name + "block") as t0:
                self.env[lp.var] = t0
                self.tile_row(loops[i + 1], tiles)
            with b.if_then(b.icmp_signed("<", start, full_end)):
                self.env[lp.var] = start
                self.tile_row(loops[i + 1], tiles, b.sdiv(b.sub(full_end, start), u.I64(lanes)))
        else:
            with u.for_range(b, lo, full_end, lanes, name=lp.var.name + "tile") as t0:
                self.env[lp.var] = t0
                self.tile_nest(i + 1, False)
        with u.for_range(b, full_end, hi, 1, name=lp.var.name + "rest") as t:
            self.env[lp.var] = t
            self.tile_nest(i + 1, True)

    def tile_row(self, vloop, tiles: int = 1, count=None):
        """The tiles of `count` (default `tiles`; an i64 value for a last, shorter block)
        rows of tiles from t0 = env[tile var], along the vector loop, in blocks of
        block_shape's columns of tiles when tiles > 1 (see tile_block), the whole tiles
        left over in one narrower block; the columns left over run scalar."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, vloop.var, k.lanes
        t0 = self.env[t]
        count = tiles if count is None else count
        cols = self.shape[1] if tiles > 1 else 1
        strided = strided_loads(k)
        stack = {id(ld): self.stack(ld, lanes * tiles * cols) for ld in strided}
        if monomial(v.extent) is None:
            full = v.extent // lanes * lanes
            blocks = v.extent // (lanes * cols) * (lanes * cols)
            extent = v.extent
        else:                   # a run-time vector axis: the same split, computed here
            extent = self.extent(v.extent)
            full = b.mul(b.sdiv(extent, u.I64(lanes)), u.I64(lanes))
            blocks = b.mul(b.sdiv(extent, u.I64(lanes * cols)), u.I64(lanes * cols))
        skip = self.aligning_columns(t0) if cols > 1 else None
        if skip is not None:
            # the columns before the first vector-aligned one of the output's rows run
            # scalar; the blocks start there, so that their rows stream (streamed_rows)
            rows_end = b.add(t0, b.mul(_i64(count), u.I64(lanes)))
            head = b.select(b.icmp_signed("<", skip, _i64(extent)), skip, _i64(extent))
            with u.for_range(b, t0, rows_end, 1, name=t.name + "head") as tt, \
                    u.for_range(b, u.I64(0), head, 1, name=v.name + "head") as j:
                self.env[t], self.env[v] = tt, j
                self.emit_point()
            after = b.sub(_i64(extent), head)
            full = b.add(head, b.mul(b.sdiv(after, u.I64(lanes)), u.I64(lanes)))
            blocks = b.add(head, b.mul(b.sdiv(after, u.I64(lanes * cols)),
                                       u.I64(lanes * cols)))
        first = u.I64(0) if skip is None else head
        shape = (tiles, cols, count)
        if not isinstance(blocks, int) or blocks:
            with u.for_range(b, first, _i64(blocks), lanes * cols, name=v.name + "b") as v0:
                self.tile_block(strided, stack, t0, v0, shape, cols)
        if isinstance(blocks, int) and isinstance(full, int):
            if blocks < full:
                self.tile_block(strided, stack, t0, u.I64(blocks), shape,
                                u.I64((full - blocks) // lanes))
        elif cols > 1:
            with b.if_then(b.icmp_signed("<", _i64(blocks), _i64(full))):
                self.tile_block(strided, stack, t0, _i64(blocks), shape,
                                b.sdiv(b.sub(_i64(full), _i64(blocks)), u.I64(lanes)))
        if not isinstance(full, int) or full < extent:
            with u.for_range(b, t0, b.add(t0, b.mul(_i64(count), u.I64(lanes))), 1,
                             name=t.name + "rest") as tt, \
                    u.for_range(b, _i64(full), _i64(extent), 1, name=v.name + "rest") as j:
                self.env[t], self.env[v] = tt, j
                self.emit_point()

    def aligning_columns(self, t0):
        """The columns (an i64 value, < lanes) from which the streamed output rows of the
        tile rows from t0 are vector-aligned; None where nothing streams (streamed_rows).
        Outputs not aligned alike, or not to their element size, get 0 (their blocks then
        keep normal stores)."""
        k, b = self.kernel, self.b
        stores = [st for st in k.stores if st.buffer.slot in self.streamed]
        if self.stream_condition(stores) is None:
            return None
        item = stores[0].buffer.dtype.itemsize
        vector = k.lanes * item
        self.env[k.tile_var], self.env[k.vector_var] = t0, u.I64(0)
        address = b.ptrtoint(self.element_ptr(stores[0].buffer, stores[0].offset, True), u.I64)
        gap = b.and_(b.sub(u.I64(0), address), u.I64(vector - 1))
        whole = b.icmp_unsigned("==", b.and_(gap, u.I64(item - 1)), u.I64(0))
        return b.select(whole, b.udiv(gap, u.I64(item)), u.I64(0))

    def stack(self, ld, vectors: int):
        """The stack block of `vectors` vectors for the tiles of strided load `ld`, one per
        load and size in the kernel (the whole blocks and the last, shorter one share it)."""
        key = (id(ld), vectors)
        if key not in self.stacks:
            self.stacks[key] = u.alloca_once(self.b, ir.ArrayType(ir.VectorType(
                u.memory_type(ld.dtype), self.kernel.lanes), vectors), name="tile")
        return self.stacks[key]

    def tile_block(self, strided: list, stack: dict, t0, v0, shape: tuple, ncols):
        """`count` x `ncols` tiles of lanes x lanes from (t0, v0) (shape: the block's
        (tiles, cols) and count; count and ncols at most those, i64 values where a last
        block is shorter), in two passes: each strided load's tiles are read (`lanes`
        vectors along the tile loop each), transposed in registers and parked in its stack
        block; then the body runs once per row of the block, a vector per column of tiles.
        The transposed source is so read in runs of `count` lines per row, the other
        operands and the output in runs of `ncols` lines (written with streaming stores
        where they may: streamed_rows)."""
        k, b = self.kernel, self.b
        t, v, lanes = k.tile_var, k.vector_var, k.lanes
        tiles, cols, count = shape

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
            with u.for_range(b, u.I64(0), _i64(ncols), 1, name="tj") as j, \
                    u.for_range(b, u.I64(0), _i64(count), 1, name="tr") as r:
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

        def run_rows():
            height = b.mul(_i64(count), u.I64(lanes)) if not isinstance(count, int) else \
                u.I64(count * lanes)
            with u.for_range(b, u.I64(0), height, 1, name="c") as c:
                if tiles * cols == 1:
                    row(c, None)
                else:
                    with u.for_range(b, u.I64(0), _i64(ncols), 1, name="cj") as j:
                        row(c, j)

        aligned = self.streamed_rows(t0, v0) if tiles * cols > 1 else None
        if aligned is None:
            return run_rows()
        with b.if_else(aligned, likely=True) as (then, otherwise):
            with then:
                self.streaming = True
                run_rows()
                self.streaming = False
            with otherwise:
                run_rows()

    def stream_condition(self, stores: list):
        """The vector size in bytes of the streamed `stores` where their rows along the tile
        loop are aligned alike, else None (nothing streamed, or run-time extents)."""
        if not stores or self.dims is not None:
            return None
        vector = self.kernel.lanes * stores[0].buffer.dtype.itemsize
        if any((st.offset.coeff(self.kernel.tile_var) * st.buffer.dtype.itemsize) % vector
               for st in stores):
            return None
        return vector

    def streamed_rows(self, t0, v0):
        """Whether the block at (t0, v0) writes its streamed outputs (streaming.py) with
        vector-aligned stores, as an i1 value; None where it never can (nothing streamed,
        run-time extents, or rows of the output that are not all aligned alike)."""
        k, b = self.kernel, self.b
        stores = [st for st in k.stores if st.buffer.slot in self.streamed]
        vector = self.stream_condition(stores)
        if vector is None:
            return None
        self.env[k.tile_var], self.env[k.vector_var] = t0, v0
        aligned = None
        for st in stores:
            address = b.ptrtoint(self.element_ptr(st.buffer, st.offset, True), u.I64)
            ok = b.icmp_unsigned("==", b.and_(address, u.I64(vector - 1)), u.I64(0))
            aligned = ok if aligned is None else b.and_(aligned, ok)
        return aligned


def _i64(n):
    """An i64 value from an int or an i64 value (a bound known now or at run time)."""
    return u.I64(n) if isinstance(n, int) else n


register(KindEntry(Kind.TILES, TilesEmitter))

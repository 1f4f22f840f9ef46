"""Row-fused kernels (Kind.ROWS, passes/fuse_rows.py): per row of the row loop, the parts
(horizontal reductions and pointwise kernels over the row) in order. A large output of the
last part (layer_norm's, softmax's; ROW_STREAM_FACTOR times the target's threshold) is stored
non-temporally (streaming.py)."""
from __future__ import annotations

from llvmlite import ir

from jitcore.passes.kernel import Gather, Kernel, Kind, Load, walk
from jitcore.passes.symbolic import extent_text

from . import irutil as u
from .reduce import ReductionEmitter
from .registry import KindEntry, register
from .row_scratch import scratch_rows
from .streaming import ROW_STREAM_FACTOR, StreamingLoop


class RowsEmitter(StreamingLoop, ReductionEmitter):
    """Each part emitted with this emitter's kernel set to the part (its loops, stores and
    lanes), inside the row loop; kept summands in a scratch row (row_scratch.py)."""

    def body(self):
        k = self.kernel
        # only for an output that streams: otherwise the output itself is the better scratch
        # (its misses for ownership then overlap the summands' math; a stack row moved them
        # to the light last part: softmax 4096x1024 on Zen 4 ran 4-5% slower)
        self.scratch = {slot: (c, u.alloca_once(self.b, ir.ArrayType(
            u.memory_type(self._slot_dtype(slot)), c), name="scratch"))
            for slot, c in scratch_rows(k).items() if slot in self.streamed}
        self.last_part = False
        # a row read once (a mean: its sum, then one element) is read like a sum kernel's;
        # where later parts read it again (softmax, layer_norm) aligned lines did not pay
        self.aligned_rows = sum(len(p.loops) > 1 for p in k.parts) == 1
        self.nest(k.loops, lambda: [self.emit_part(p) for p in k.parts], True)

    def stream_threshold(self) -> int:
        return self.stream_bytes * ROW_STREAM_FACTOR

    def _slot_dtype(self, slot: int):
        return next(st.buffer.dtype for st in self.kernel.stores if st.buffer.slot == slot)

    def element_ptr(self, buf, offset, write: bool):
        """A kept summand's element in the scratch row (the earlier part's store, the last
        part's load): at its offset less the row's start."""
        if buf.slot not in self.scratch or (write and self.last_part):
            return super().element_ptr(buf, offset, write)
        c, row_ptr = self.scratch[buf.slot]
        row = self.kernel.loops[0].var
        rest = self.b.sub(self.index(offset), self.b.mul(self.env[row], u.I64(c)))
        return self.b.gep(row_ptr, [u.I64(0), rest])

    def emit_part(self, part: Kernel):
        """One part of a row-fused kernel, inside the row loop (its first loop)."""
        fused, self.kernel = self.kernel, part
        self.last_part = part is fused.parts[-1]
        inner = part.loops[1:]
        if part.kind == Kind.REDUCE_HORIZONTAL:
            self.nest([lp for lp in inner if lp.kind == "parallel"], self.emit_horizontal, False)
        elif not inner:
            self.emit_point()
        else:
            self.row_values = self.per_row_loads(part)
            # only the last part streams (streaming.streamed_part): what an earlier part
            # writes, a later one reads back from cache
            loop = self.elementwise_loop if part is fused.parts[-1] else \
                (lambda lp, first: self.vector_loop(lp, self.emit_point, first))
            self.nest(inner[:-1], lambda: self.hoisting_gathers(lambda: loop(inner[-1], False)),
                      False)
            self.row_values = {}
        self.kernel = fused

    def per_row_loads(self, part: Kernel) -> dict:
        """The loads of a pointwise part that read one element per row (an earlier part's
        mean, 1 / sqrt(var + eps), 1 / sum), loaded once before the part's loops. LLVM
        would re-load them for every vector: the part's stores might alias them, as far as
        it knows. Not when this part writes the same buffer, nor when an inner loop is empty
        (the element might not exist; the load would not run)."""
        inner = {lp.var for lp in part.loops[1:]}
        written = {st.buffer.slot for st in part.stores}
        if any(v.extent <= 0 for v in inner):
            return {}
        return {id(n): self.load(n, 1) for n in walk([st.value for st in part.stores])
                if isinstance(n, Load) and not isinstance(n, Gather)
                and n.buffer.slot not in written and not n.offset.vars() & inner}


def report(kernel: Kernel) -> tuple:
    """The row loop, then each part's inner loops."""
    row = kernel.loops[0].var
    inner = [p.loop_nest.split(", ", 1)[1] if len(p.loops) > 1 else "(one element)"
             for p in kernel.parts]
    return None, (f"for {row.name} in 0..{extent_text(row.extent)} (parallel): "
                  + "; then ".join(inner))


register(KindEntry(Kind.ROWS, RowsEmitter, report=report))

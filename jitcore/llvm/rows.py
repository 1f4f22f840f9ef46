"""Row-fused kernels (Kind.ROWS, passes/fuse_rows.py): per row of the row loop, the parts
(horizontal reductions and pointwise kernels over the row) in order."""
from __future__ import annotations

from jitcore.passes.kernel import Gather, Kernel, Kind, Load, walk
from jitcore.passes.symbolic import extent_text

from .reduce import ReductionEmitter
from .registry import KindEntry, register


class RowsEmitter(ReductionEmitter):
    """Each part emitted with this emitter's kernel set to the part (its loops, stores and
    lanes), inside the row loop."""

    def body(self):
        k = self.kernel
        self.nest(k.loops, lambda: [self.emit_part(p) for p in k.parts], True)

    def emit_part(self, part: Kernel):
        """One part of a row-fused kernel, inside the row loop (its first loop)."""
        fused, self.kernel = self.kernel, part
        inner = part.loops[1:]
        if part.kind == Kind.REDUCE_HORIZONTAL:
            self.nest([lp for lp in inner if lp.kind == "parallel"], self.emit_horizontal, False)
        elif not inner:
            self.emit_point()
        else:
            self.row_values = self.per_row_loads(part)
            self.nest(inner[:-1], lambda: self.hoisting_gathers(
                lambda: self.vector_loop(inner[-1], self.emit_point, False)),
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

"""A row kernel's kept summands in a scratch row on the stack.

softmax's row kernel computes exp(x - max) once: the sum part stores each summand where the
last part will write its output, and the last part loads it back from there (passes/
fuse_rows.py, _keep_summands). That makes the output a scratch row: every line is read for
ownership and written twice, and the output cannot be streamed. When the row is short enough
to stay in L1 beside its input and the output streams (streaming.py), the summands go to a
row on the kernel's stack instead (one per thread: each call has its own frame), and only
the last part writes the output."""
from __future__ import annotations

from jitcore.passes.kernel import Kernel, Kind, Load, walk
from jitcore.passes.symbolic import lin

SCRATCH_BYTES = 8 << 10    # the largest scratch row: with its input row, half of a 32 KB L1


def scratch_rows(kernel: Kernel) -> dict:
    """{slot: elements per row} of the outputs whose kept summands go to a scratch row: an
    earlier part stores to the slot (a summand beside its reduction) and the last part loads
    it back at the offset it stores it, one row apart per row (`c * row + rest`, 0 <= rest
    < c, c known now and the row at most SCRATCH_BYTES; a run-time extent stands as a huge
    placeholder here, so rows of run-time length never take one)."""
    if kernel.kind != Kind.ROWS or len(kernel.parts) < 2:
        return {}
    *earlier, last = kernel.parts
    row = kernel.loops[0].var
    kept = {st.buffer.slot: st for part in earlier for st in part.stores[1:]}
    loaded = {(n.buffer.slot, n.offset) for n in walk([st.value for st in last.stores])
              if isinstance(n, Load)}
    rows = {}
    for st in last.stores:
        summand = kept.get(st.buffer.slot)
        c = st.offset.coeff(row)
        if summand is None or summand.offset != st.offset or \
                (st.buffer.slot, st.offset) not in loaded or not isinstance(c, int) or c < 1:
            continue
        lo, hi = (st.offset + lin(row) * -c).bounds()
        if 0 <= lo and hi < c and c * st.buffer.dtype.itemsize <= SCRATCH_BYTES:
            rows[st.buffer.slot] = c
    return rows


"""How finely the pool splits a kernel's work: the fewest iterations worth a thread."""
from __future__ import annotations

import math

from jitcore.passes.kernel import Kernel
from jitcore.passes.legality import bytes_moved, flops
from jitcore.passes.symbolic import per_item

MIN_CHUNK_WORK = 1 << 16    # bytes + flops in the smallest chunk worth a thread (~5-10 us)


def grain(kernel: Kernel, extent: int | None = None, halves: bool = False) -> int:
    """Fewest iterations of the kernel's range loop (of `extent` work items, if given) per
    parallel chunk, from its cost. `halves`: split in halves at most (a streaming column
    reduction: narrower column slices turn its long row reads into short strided ones)."""
    extent = kernel.range_extent if extent is None else extent
    work = bytes_moved(kernel) + flops(kernel)
    dynamic_cost = per_item(work, extent)
    if dynamic_cost is not None:    # a row of run-time length: the grain is computed per call
        return -dynamic_cost
    per_iteration = max(work / max(extent, 1), 1)
    g = max(1, math.ceil(MIN_CHUNK_WORK / per_iteration))
    return max(g, -(-extent // 2)) if halves else g

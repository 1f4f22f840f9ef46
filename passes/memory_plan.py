"""Temporary storage: temps whose lifetimes do not overlap share one allocation.

A long program materializes many intermediates (an iterative method stores one per step).
Allocating each its own memory would make the working set grow with the program (and push
the data out of cache on every step); instead each temp is given a block that no temp live
at the same time uses, so a chain of steps ping-pongs between a few warm blocks, as numpy's
allocator does between its short-lived arrays.

A temp is live from the first step that touches it to the last (inclusive, so a kernel's
inputs and outputs never share memory). Temps touched by a forked task are never shared:
the task runs concurrently with the main line between its spawn and wait.
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64


@dataclass
class TempPlan:
    """block_of[slot]: the block a used temp lives in; sizes[b]: block b's bytes."""
    block_of: dict
    sizes: list


def live_ranges(lowered) -> dict:
    """slot -> [first, last] step index of every temp some kernel touches."""
    temps = {b.slot for b in lowered.buffers if b.kind == "temp"}
    position = {arg: pos for pos, (step, arg) in enumerate(lowered.steps) if step == "kernel"}
    ranges, pinned = {}, set()
    for i, kernel in enumerate(lowered.kernels):
        for buf in kernel.buffers():
            if buf.slot not in temps:
                continue
            if kernel.task is not None or i not in position:   # runs inside a forked task
                pinned.add(buf.slot)
                continue
            first, last = ranges.get(buf.slot, (position[i], position[i]))
            ranges[buf.slot] = [min(first, position[i]), max(last, position[i])]
    for slot in pinned:                          # live for the whole run
        ranges[slot] = [-1, len(lowered.steps)]
    return ranges


def plan_temps(lowered) -> TempPlan:
    """Assign every used temp a block, reusing a free block (the smallest that fits, else
    the largest, grown) whenever one is free at the temp's first step."""
    nbytes = {b.slot: max(-(-b.nbytes // ALIGN) * ALIGN, ALIGN)
              for b in lowered.buffers if b.kind == "temp"}
    ranges = live_ranges(lowered)
    block_of, sizes, busy_until = {}, [], []
    for slot in sorted(ranges, key=lambda s: (ranges[s][0], s)):
        first, last = ranges[slot]
        free = [b for b in range(len(sizes)) if busy_until[b] < first]
        fits = [b for b in free if sizes[b] >= nbytes[slot]]
        if fits:
            block = min(fits, key=lambda b: sizes[b])
        elif free:
            block = max(free, key=lambda b: sizes[b])
            sizes[block] = nbytes[slot]
        else:
            block = len(sizes)
            sizes.append(nbytes[slot])
            busy_until.append(last)
        busy_until[block] = last
        block_of[slot] = block
    return TempPlan(block_of, sizes)

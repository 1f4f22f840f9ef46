"""The registry of kernel kinds: what the backend does for each `passes.kernel.Kind`.

Each kind's module registers one `KindEntry` (its plan builder, its work items for the pool,
its emitter and its report); `kinds.py` imports every kind module, and `graph_module.py`
and the compile driver's report dispatch through `entry(kernel)`, once. Adding a kind means
its module (with its `register(...)`) and its line in kinds.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from jitcore.passes.kernel import Kernel, Kind

from .work import grain


def no_plan(kernel: Kernel, vector_bits: int, threads: int):
    """The plan of a kind that needs none."""
    return None


def range_work(kernel: Kernel, plan) -> tuple:
    """(extent, chunk): the iterations of the kernel's range loop, chunked by its cost."""
    return kernel.range_extent, grain(kernel)


def plan_items(kernel: Kernel, plan) -> tuple:
    """(extent, chunk) of a planned kernel: its plan's work items, one per chunk."""
    return plan.items, 1


@dataclass(frozen=True)
class KindEntry:
    """What the backend does for one kernel kind.

    emitter: the KernelEmitter subclass, called as emitter(module, kernel, name, masked_tail,
             stream_bytes, plan) and then .emit();
    plan:    plan(kernel, vector_bits, threads) -> the emitter's plan (blocking, work items)
             or None;
    work:    work(kernel, plan) -> (extent, chunk): the work items the pool hands out for one
             call of the kernel (KernelCode.extent, .grain);
    report:  report(kernel) -> (layout, loop nest text): the kind's part of its line in
             `explain()` (compiler.KernelInfo);
    unrolled: the emitter unrolls its micro-kernel itself (register tiles): LLVM's loop
             unroller only grows its code (engine.TILED instead of engine.KERNEL)."""
    kind: Kind
    emitter: Callable
    plan: Callable = no_plan
    work: Callable = range_work
    report: Callable = None
    unrolled: bool = False

    def describe(self, kernel: Kernel) -> tuple:
        """(layout, loop nest) of the kernel's report."""
        return self.report(kernel) if self.report is not None else (None, kernel.loop_nest)


KINDS: dict = {}


def register(entry: KindEntry) -> KindEntry:
    """Register a kind's entry; a kind registers once."""
    if entry.kind in KINDS:
        raise ValueError(f"kernel kind {entry.kind} is registered twice")
    KINDS[entry.kind] = entry
    return entry


def entry(kernel: Kernel) -> KindEntry:
    """The registered entry of the kernel's kind."""
    return KINDS[kernel.kind]

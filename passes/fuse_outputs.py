"""Multi-output fusion: consecutive pointwise kernels over the same loop nest become one kernel.

`(a + b, a * b)` lowers to two kernels that both walk a and b; a shared transcendental read by
many consumers (see lower.py) to one kernel that stores it and several that load it back. Run
as one loop nest, the inputs are read once per element and a value stored by an earlier kernel
is used straight from the register it was computed in.

A run of kernels merges when every kernel
  - is pointwise with the same loops (variables and kinds) and the same task as the first,
  - reads what an earlier kernel of the run wrote only at the very offset it was stored (an
    element never needs a neighbour computed in another iteration),
  - agrees with the first on being vectorized (merging never makes a vector kernel scalar),
  - does not only write another region of a buffer the run writes (see _other_region_alone),
  - keeps the run within MAX_FUSED_OPS ops.
Stores of temporaries that nothing outside the run reads are dropped: the value never touches
memory. The merged kernel's vector decision is made again by the legality check.
"""
from __future__ import annotations

from .decision_log import debug
from .kernel import MAX_FUSED_OPS, Gather, Kernel, Kind, Load, rebuild
from .legality import check


def _other_region_alone(kernel: Kernel, run: list) -> bool:
    """Whether `kernel` stores into a buffer the run stores into (another region of one
    concatenation) while reading nothing the run reads: merged, nothing would be shared and
    the loop would write two distant streams at once, measured 1.3x slower than writing each
    region's rows in turn (which row fusion does)."""
    stored = {s.buffer.slot for k in run for s in k.stores}
    if not any(s.buffer.slot in stored for s in kernel.stores):
        return False
    read = {ld.buffer.slot for k in run for ld in k.loads()}
    return not any(ld.buffer.slot in read for ld in kernel.loads())


def _merge_stop(kernel: Kernel, run: list, written: dict) -> str | None:
    """Why `kernel` cannot join `run` (None: it can)."""
    first = run[0]
    # (a reduction over extent-1 axes has pointwise loops)
    if not kernel.kind.elementwise or not first.kind.elementwise:
        return f"not pointwise ({kernel.kind} after {first.kind})"
    if len(kernel.ops) + sum(len(k.ops) for k in run) > MAX_FUSED_OPS:
        return f"the kernel would exceed {MAX_FUSED_OPS} ops"
    if not kernel.loops or kernel.loops != first.loops:
        return "another loop nest"
    if kernel.task != first.task:
        return "another task"
    if kernel.vectorized != first.vectorized:
        return "a vector kernel and a scalar one"
    if _other_region_alone(kernel, run):
        return "another region of a concatenation, sharing no input"
    # (a gather's offset is only its static part: it may read any element)
    if not all(ld.offset == written[ld.buffer.slot].offset and not isinstance(ld, Gather)
               for ld in kernel.loads() if ld.buffer.slot in written):
        return "reads a value of the run at another element than it was stored"
    return None


def _merged(run: list, read_later: set, vector_bits: int, masked_tails: bool) -> Kernel:
    written, stores, memo = {}, [], {}
    for k in run:
        for st in k.stores:
            # loads of values stored earlier in the run become those values
            value = rebuild(st.value, lambda n: written[n.buffer.slot].value
                            if isinstance(n, Load) and n.buffer.slot in written else None, memo)
            st = type(st)(st.buffer, st.offset, value)
            written[st.buffer.slot] = st
            stores.append(st)
    stores = [st for st in stores if st.buffer.kind != "temp" or st.buffer.slot in read_later]
    merged = Kernel("+".join(k.name for k in run), list(run[0].loops), stores, None,
                    tuple(op for k in run for op in k.ops), task=run[0].task, kind=Kind.POINTWISE)
    return check(merged, vector_bits, masked_tails)


def fuse_outputs(kernels: list, vector_bits: int, masked_tails: bool = False) -> list:
    """Merge runs of pointwise kernels that share their loop nest; others pass unchanged."""
    runs, written = [], {}
    for k in kernels:
        stop = _merge_stop(k, runs[-1], written) if runs else "first"
        if stop is None:
            runs[-1].append(k)
        else:
            if runs:
                debug("fuse_outputs: fusion stops before %s: %s", k.name, stop)
            runs.append([k])
            written = {}
        written.update({s.buffer.slot: s for s in k.stores})
    out = []
    for i, run in enumerate(runs):
        if len(run) == 1:
            out.append(run[0])
            continue
        read_later = {ld.buffer.slot for later in runs[i + 1:] for k in later
                      for ld in k.loads()}
        out.append(_merged(run, read_later, vector_bits, masked_tails))
    return out


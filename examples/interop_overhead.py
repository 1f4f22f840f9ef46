"""Per-call overhead of a jitted `a*b+c` on 1024 float32 values, by argument kind: numpy
arrays, CPU torch tensors and JAX arrays (the latter two read in place through DLPack), and
numpy with `out=`. Kinds are measured interleaved, each the median of several repeats.

    python examples/interop_overhead.py [--repeat 7] [--calls 20000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("JITCORE_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import jitcore as jc  # noqa: E402


@jc.jit
def fma(a, b, c):
    return a * b + c


def per_call_us(fn, args, calls: int, **kw) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args, **kw)
    return (time.perf_counter() - t0) / calls * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--calls", type=int, default=20000)
    opts = p.parse_args()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(1024, dtype=np.float32) for _ in range(3)]
    out = np.empty(1024, np.float32)
    kinds = {"numpy": (arrays, {}), "numpy out=": (arrays, {"out": out})}
    try:
        import torch
        kinds["torch"] = ([torch.from_numpy(a.copy()) for a in arrays], {})
    except ImportError:
        pass
    try:
        import jax.numpy as jnp
        kinds["jax"] = ([jnp.asarray(a) for a in arrays], {})
    except ImportError:
        pass
    for args, kw in kinds.values():                      # compile and warm up
        per_call_us(fma, args, 100, **kw)
    times = {k: [] for k in kinds}
    for _ in range(opts.repeat):
        for kind, (args, kw) in kinds.items():
            times[kind].append(per_call_us(fma, args, opts.calls, **kw))
    base = statistics.median(times["numpy"])
    for kind, ts in times.items():
        med = statistics.median(ts)
        print(f"{kind:12s} {med:7.2f} us/call  ({med / base:.2f}x numpy)")


if __name__ == "__main__":
    main()

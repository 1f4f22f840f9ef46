"""bfloat16 against float32: elementwise chains on 16M elements, 1 thread (issue 30, item 1).

    PYTHONPATH=. python examples/bfloat16_bench.py [--rounds N]

Prints the median ms (process time, `out=` preallocated, every variant measured once per
round, rounds interleaved) of `a * b + c` and `gelu` in jitcore float32, jitcore bfloat16
(native target: vcvtneps2bf16 where the CPU has AVX512_BF16), jitcore bfloat16 at
x86-64-v4 (the integer rounding sequence) where the host runs it, and torch eager float32 /
bfloat16 when torch is installed. The bfloat16 results are checked against float64 first.
Needs ml_dtypes.
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import jitcore as jc
from jitcore.ir.errors import TargetError
from jitcore.llvm.target import level_target

N = 16 << 20


def _jitcore_cases(base):
    targets = ["native"]
    try:
        level_target("x86-64-v4")
        targets.append("x86-64-v4")
    except TargetError:
        pass
    cases = {}
    for name, dtype in (("float32", np.float32), ("bfloat16", ml_dtypes.bfloat16)):
        a, b, c = (x.astype(dtype) for x in base)
        out = np.empty_like(a)
        for target in targets if name == "bfloat16" else ["native"]:
            fma = jc.jit(lambda x, y, z: x * y + z, target=target)
            gelu = jc.jit(jc.gelu, target=target)
            label = f"jitcore {name}" + ("" if target == "native" else f" {target}")
            cases[f"{label} a*b+c"] = lambda f=fma, a=a, b=b, c=c, o=out: f(a, b, c, out=o)
            cases[f"{label} gelu"] = lambda f=gelu, a=a, o=out: f(a, out=o)
            if name == "bfloat16":
                _check(fma(a, b, c), a, b, c)
    return cases


def _check(got, a, b, c):
    ref = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126))) - 7)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= ulp), "bf16 a*b+c beyond 1 ulp"


def _torch_cases(base):
    try:
        import torch
    except ImportError:
        return {}
    torch.set_num_threads(1)
    cases = {}
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b, c = (torch.from_numpy(x).to(dtype) for x in base)
        out = torch.empty_like(a)
        cases[f"torch {name} a*b+c"] = lambda a=a, b=b, c=c, o=out: torch.addcmul(c, a, b,
                                                                                  out=o)
        cases[f"torch {name} gelu"] = lambda a=a, o=out: torch.ops.aten.gelu.out(a, out=o)
    return cases


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    jc.set_num_threads(1)
    rng = np.random.default_rng(0)
    base = [rng.standard_normal(N, dtype=np.float32) for _ in range(3)]
    cases = {**_jitcore_cases(base), **_torch_cases(base)}
    for fn in cases.values():
        fn()
    times = {k: [] for k in cases}
    for _ in range(rounds):
        for k, fn in cases.items():
            t0 = time.process_time()
            fn()
            times[k].append(time.process_time() - t0)
    print(f"{N} elements, 1 thread, median of {rounds} rounds (process time), "
          f"{jc.target_info()['brand']} ({jc.target_info()['cpu']})")
    for k, ts in times.items():
        print(f"  {k:32s} {1e3 * np.median(ts):8.2f} ms")


if __name__ == "__main__":
    main()

"""bf16 convolutions against float32 on ResNet-18's 3x3 and 1x1 layers, interleaved in one
process (one thread, batch 1): relu(conv(x, W) + b) with W and b constants, compiled as
float32 (its default plans: Winograd F(2x2) for the 3x3 stride-1 layers), float32 direct
(JITCORE_WINOGRAD=0) and matmul_precision="bf16" (vdpbf16ps pairs where the CPU has
AVX512_BF16). Each variant is its own compiled graph; rounds run the variants in turn, each
timed over a few calls by process time; medians of the rounds. GFLOP/s count the direct
conv's 2 x C_out x C_in x 9 (or 1) x OH x OW flops; % of the vdpbf16ps and FMA peaks measured
in the same run (jitcore/bench/peak.py's loops, timed by process time: on a shared machine
their wall-clock best still saw other jobs).

With `resnet18`: the whole ResNet-18 (jitcore/bench/models.py, batch 1, 224x224) through
jitcore.torch.compile at precision "fp32" and "bf16", beside torch eager float32 and under
CPU autocast bf16, interleaved the same way; and each one's normwise error against the
module in float64.

    PYTHONPATH=. taskset -c 1 python examples/conv_bf16_bench.py [rounds] [resnet18]
"""
from __future__ import annotations

import statistics
import sys
import time
from unittest import mock

import numpy as np

import jitcore as jc
from jitcore import config
from jitcore.bench.peak import bf16_peak_gflops, fma_peak_gflops

# (C_in, C_out, input size, kernel, stride): ResNet-18's convs
LAYERS = [(3, 64, 224, 7, 2), (64, 64, 56, 3, 1), (64, 128, 56, 3, 2), (128, 128, 28, 3, 1), (128, 256, 28, 3, 2),
          (256, 256, 14, 3, 1), (256, 512, 14, 3, 2), (512, 512, 7, 3, 1),
          (64, 128, 56, 1, 2), (128, 256, 28, 1, 2), (256, 512, 14, 1, 2)]
VARIANTS = ("fp32", "fp32 direct", "bf16")


def compiled(variant: str, w, b, k: int, s: int, x) -> tuple:
    """(the variant's function, its output): compiled by this first call, under the
    variant's settings."""
    pad = k // 2
    precision = "bf16" if variant == "bf16" else "fp32"
    fn = jc.jit(lambda x: jc.relu(jc.conv2d(x, w, b, stride=s, padding=pad)),
                matmul_precision=precision)
    with config.override(winograd=0 if variant == "fp32 direct" else config.get().winograd):
        return fn, fn(x)


def per_call(f, x, out, calls: int) -> float:
    c0 = time.process_time()
    for _ in range(calls):
        f(x, out=out)
    return (time.process_time() - c0) / calls


def peaks() -> tuple:
    """(vdpbf16ps peak or None, FMA peak) in GFLOP/s, timed by process time."""
    with mock.patch("jitcore.bench.peak.time.perf_counter", time.process_time):
        return bf16_peak_gflops(), fma_peak_gflops()


def layers(rounds: int) -> None:
    jc.set_num_threads(1)
    bf16_peak, fma_peak = peaks()
    print(f"peaks: vdpbf16ps {bf16_peak} GFLOP/s, FMA {fma_peak:.0f} GFLOP/s (1 thread)")
    rng = np.random.default_rng(0)
    print("layer | " + " | ".join(f"{v} ms (GFLOP/s)" for v in VARIANTS) +
          " | bf16 % of bf16 peak | bf16 speed-up over fp32")
    for cin, cout, size, k, s in LAYERS:
        x = rng.standard_normal((1, cin, size, size)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        fns, outs = {}, {}
        for v in VARIANTS:
            fns[v], outs[v] = compiled(v, w, b, k, s, x)
        o = outs["fp32"].shape[-1]
        flops = 2 * cout * cin * k * k * o * o
        calls = max(1, int(2e9 / 100e9 * 1e9 // flops // 10))   # ~20 ms per timing at 100
        times = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for v in VARIANTS:
                times[v].append(per_call(fns[v], x, outs[v], calls))
        med = {v: statistics.median(t) for v, t in times.items()}
        cells = [f"{med[v] * 1e3:.3f} ({flops / med[v] / 1e9:.0f})" for v in VARIANTS]
        pct = f"{flops / med['bf16'] / 1e9 / bf16_peak * 100:.0f}%" if bf16_peak else "-"
        print(f"{cin}->{cout} {k}x{k}/s{s} at {size} | " + " | ".join(cells) +
              f" | {pct} | {med['fp32'] / med['bf16']:.2f}x", flush=True)


def resnet18(rounds: int) -> None:
    import torch

    import jitcore.torch as jt
    from jitcore.bench import models
    torch.set_num_threads(1)
    jc.set_num_threads(1)
    module, (x,) = models.build("resnet18", tiny=False)
    with torch.inference_mode():
        exact = module.double()(x.double()).numpy()
        module.float()
        fp32 = jt.compile(module, x, precision="fp32")
        bf16 = jt.compile(module, x, precision="bf16")

        def autocast():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return module(x)
        systems = {"jitcore fp32": lambda: fp32(x), "jitcore bf16": lambda: bf16(x),
                   "torch eager fp32": lambda: module(x), "torch autocast bf16": autocast}
        times = {name: [] for name in systems}
        for name, f in systems.items():
            got = f().float().numpy()
            err = np.linalg.norm(got - exact) / np.linalg.norm(exact)
            print(f"{name}: normwise error against float64 {err:.2e}")
        for _ in range(rounds):
            for name, f in systems.items():
                c0 = time.process_time()
                f()
                f()
                times[name].append((time.process_time() - c0) / 2)
    for name, t in times.items():
        print(f"{name}: {statistics.median(t) * 1e3:.1f} ms (median CPU time of {rounds})")
    text = bf16.explain()
    print(f"jitcore bf16: {text.count('(vdpbf16ps)')} kernels on bf16 pairs, "
          f"{text.count('bf16-rounded operands')} on rounded operands (the fallback)")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 9
    (resnet18 if sys.argv[2:] == ["resnet18"] else layers)(count)

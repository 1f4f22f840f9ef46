"""jitcore against eager on zoo models, interleaved in one process (one thread): the check
for a loaded machine, where the zoo bench's per-system children run minutes apart and get
different shares of their core.

    taskset -c 1 python examples/zoo_interleaved.py bert,llama,deit

Per model (2 layers, jitcore/bench/zoo.py): five rounds of two calls each, jitcore then
eager; the median CPU ms per call of each, their ratio (eager's / jitcore's), and the
median wall ms.
"""
from __future__ import annotations

import statistics
import sys
import time
import warnings

import torch

import jitcore as jc
import jitcore.torch as jt
from jitcore.bench import zoo


def per_call(f) -> tuple:
    """(CPU s, wall s) per call over two calls."""
    w0, c0 = time.perf_counter(), time.process_time()
    f()
    f()
    return (time.process_time() - c0) / 2, (time.perf_counter() - w0) / 2


def main(names: list) -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    jc.set_num_threads(1)
    torch.inference_mode().__enter__()
    for name in names:
        module, inputs = zoo.build(name, 2)
        compiled = jt.compile(module, *inputs)
        calls = {"jitcore": lambda: compiled(*inputs), "eager": lambda: module(*inputs)}
        for f in calls.values():
            f()
        samples = {k: [] for k in calls}
        for _ in range(5):
            for k, f in calls.items():
                samples[k].append(per_call(f))
        cpu = {k: statistics.median(s[0] for s in v) for k, v in samples.items()}
        wall = {k: statistics.median(s[1] for s in v) for k, v in samples.items()}
        print(f"{name:16s} CPU ms: jitcore {cpu['jitcore'] * 1e3:7.1f}, eager "
              f"{cpu['eager'] * 1e3:7.1f}, {cpu['eager'] / cpu['jitcore']:.2f}x; wall ms: "
              f"{wall['jitcore'] * 1e3:7.1f}, {wall['eager'] * 1e3:7.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else list(zoo.BY_NAME))

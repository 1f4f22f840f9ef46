"""jitcore.torch next to torch's own thread pool: a ResNet-18 (width 32, 96x96) whose
convolutions and pools run in torch while jitcore lacks them, pinned to ONE core, CPU seconds
per call (process_time: wall time on a shared machine says more about the scheduler than
about us) with torch's pool following jitcore's count (what jitcore.torch does) and with
torch left at 2 threads (two pools on one core). Run: `taskset -c 0 python
examples/torch_threads_bench.py`."""
import os
import statistics
import time
import warnings

import torch

import jitcore as jc
import jitcore.torch as jt
from jitcore.bench.models import ResNet18, _randomize_batch_norms
from jitcore.torch import module

warnings.filterwarnings("ignore")


def cpu_per_call(f, n=15) -> float:
    c0 = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - c0) / n


def main():
    torch.manual_seed(0)
    m = _randomize_batch_norms(ResNet18(100, 32)).eval()
    x = torch.randn(1, 3, 96, 96)
    jc.set_num_threads(1)
    c = jt.compile(m, x)
    print(f"{c}; pinned to cores {sorted(os.sched_getaffinity(0))}")
    coordinated = module.threads.match_torch_threads
    res = {"torch follows jitcore (1)": [], "torch left at 2 threads": [], "eager, 1 thread": []}
    with torch.inference_mode():
        for _ in range(5):                                # interleaved
            module.threads.match_torch_threads = coordinated
            res["torch follows jitcore (1)"].append(cpu_per_call(lambda: c(x)))
            module.threads.match_torch_threads = lambda: None
            torch.set_num_threads(2)
            res["torch left at 2 threads"].append(cpu_per_call(lambda: c(x)))
            torch.set_num_threads(1)
            res["eager, 1 thread"].append(cpu_per_call(lambda: m(x)))
    module.threads.match_torch_threads = coordinated
    for k, v in res.items():
        print(f"{k:28s} {statistics.median(v) * 1e3:7.2f} ms CPU per call")


if __name__ == "__main__":
    main()

"""GEMM benchmarks: jitcore's matmul vs numpy (OpenBLAS) and torch, in GFLOP/s, per thread count.

Four sections: plain float32 GEMM (square 256-2048; goal >= 0.9x the best peer at sizes >= 512),
plain float64 GEMM (512, 1024; informational), a tanh-GELU layer gelu(x @ W + b) and a 2-layer
MLP gelu(x @ W1 + b1) @ W2 + b2 (goal >= 1.1x the best peer for both). GFLOP/s counts the
GEMMs only (2*M*N*K per matmul) from median times; ratio = jitcore GFLOP/s (weights passed
as arguments, like every peer's) / best peer GFLOP/s (> 1 means jitcore is faster). Peers:
numpy and torch (torch.mm / torch.addmm, under one torch.inference_mode) for the plain GEMMs,
plus torch.compile (compiled once before timing) for the MLPs.

jitcore also runs the MLPs with the weights bound as constants, a variant no peer has: "jc
const" (jc.jit(fn, constants={...}), prepacked at compile time) and "jc nopack" (constants,
prepack_weights=False). They are shown in their own columns, labelled, and their gain over
"jitcore" printed apart; they do not enter the ratio. Every column, peers included, is
checked against a float64 numpy reference before it is timed.

Each thread count N runs in a subprocess of this script pinned to N cores (CPU affinity, so
every library's threads share them), started with OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and
MKL_NUM_THREADS set to N (OpenBLAS fixes its threads when numpy is imported); jitcore gets
num_threads=N and torch torch.set_num_threads(N) and set_num_interop_threads(N).

    python examples/gemm_bench.py [--threads 1 2] [--quick] [--repeat N] [--no-torch]
                                  [--only gemm,gemm_f64,mlp,mlp2]

--quick: every dimension / 4, 3 repeats, no torch.compile. Slow cells take fewer repeats
(at least MIN_REPEAT) to stay near CELL_BUDGET_S seconds a cell. After each thread count the
parent prints how many CPUs other processes kept busy meanwhile (/proc/stat): on a machine
with few cores such load skews the timings, most of all with as many threads as cores.
"""
from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import jitcore as jc
from jitcore.bench.peers_numpy import np_linear_gelu, np_mlp
from jitcore.bench.workloads import jc_linear_gelu, jc_mlp
from timing import median_time

try:
    import torch
    from jitcore.bench.peers_torch import t_linear_gelu, t_mlp
except ImportError:
    torch = t_linear_gelu = t_mlp = None

QUICK_DIV = 4                 # --quick divides every dimension by this
CELL_BUDGET_S = 1.5           # a cell's repeats are cut (to MIN_REPEAT) to stay near this
MIN_REPEAT = 3
MIN_SAMPLE_S = 0.02           # a timing sample repeats short calls up to this long
SETTLE_S = 0.3                # pause before each cell: the previous system's idle workers
                              # spin on (OpenBLAS ~0.1 s) and would take the cores
ATOL_PER_K = 4.0              # atol = ATOL_PER_K * K * eps(dtype) on O(1) outputs
THREAD_ENV = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
SECTIONS = {
    "gemm": "plain GEMM, float32, x[M,K] @ W[K,N]; goal >= 0.9x at sizes >= 512",
    "gemm_f64": "plain GEMM, float64, x[M,K] @ W[K,N]; informational",
    "mlp": "gelu(x @ W + b), tanh GELU, shape MxKxN; goal >= 1.1x",
    "mlp2": "gelu(x @ W1 + b1) @ W2 + b2, tanh GELU, shape MxKxHxN; goal >= 1.1x",
}
# jitcore columns: prepack_weights for the constants= variants, None: weights as arguments
JC_VARIANTS = {"jitcore": None, "jc const": True, "jc nopack": False}
CONST_VARIANTS = ("jc const", "jc nopack")        # weights as constants: no peer's equivalent
PEERS = ("numpy", "torch", "torch.compile")


# -- the workloads: jitcore traces, numpy (also the float64 reference), torch -----------------
def matmul(x, W):
    return x @ W


def torch_mm(x, W):
    return torch.mm(x, W)


@dataclass(frozen=True)
class Workload:
    section: str
    shapes: dict              # parameter name -> shape at full size, in parameter order
    jitcore: Callable         # traced by jc.jit
    numpy: Callable           # timed on the inputs; on float64 copies, the reference
    torch: Callable           # on tensors; timed eager (and compiled where `compile`)
    dtype: type = np.float32
    goal: float | None = None
    constants: tuple = ()     # parameters bound by constants= in the "jc const"/"jc nopack" cells
    compile: bool = False     # add a torch.compile column


def gemm(n: int, dtype=np.float32, goal=None) -> Workload:
    section = "gemm" if dtype == np.float32 else "gemm_f64"
    return Workload(section, {"x": (n, n), "W": (n, n)}, matmul, matmul, torch_mm, dtype, goal)


WORKLOADS = [
    gemm(256), gemm(512, goal=0.9), gemm(1024, goal=0.9), gemm(2048, goal=0.9),
    gemm(512, np.float64), gemm(1024, np.float64),
    Workload("mlp", {"x": (512, 1024), "W": (1024, 4096), "b": (4096,)},
             jc_linear_gelu, np_linear_gelu, t_linear_gelu, goal=1.1, constants=("W",),
             compile=True),
    Workload("mlp2", {"x": (256, 1024), "W1": (1024, 4096), "b1": (4096,),
                      "W2": (4096, 1024), "b2": (1024,)},
             jc_mlp, np_mlp, t_mlp, goal=1.1, constants=("W1", "W2"), compile=True),
]


@dataclass
class Result:
    workload: Workload
    shapes: dict
    gflops: dict = field(default_factory=dict)      # column -> GFLOP/s

    def best(self, columns) -> tuple:
        """(column, GFLOP/s) of the fastest of `columns` that has a number."""
        return max(((c, self.gflops[c]) for c in columns if c in self.gflops),
                   key=lambda x: x[1])


# -- inputs, flops, tolerance -------------------------------------------------------------------
def scaled(shapes: dict, quick: bool) -> dict:
    return {k: tuple(d // QUICK_DIV for d in s) if quick else s for k, s in shapes.items()}


def make_inputs(shapes: dict, dtype) -> dict:
    """x standard normal, weights N(0, 1/K) (outputs stay O(1)), biases N(0, 0.01)."""
    rng = np.random.default_rng(0)
    scale = {"W": lambda s: 1 / math.sqrt(s[0]), "b": lambda s: 0.1, "x": lambda s: 1.0}
    return {k: (rng.standard_normal(s) * scale[k[0]](s)).astype(dtype)
            for k, s in shapes.items()}


def gemm_flops(shapes: dict) -> int:
    """2*M*K*N summed over the matmuls of a chain x @ W... (M = rows of x)."""
    return 2 * shapes["x"][0] * sum(math.prod(s) for k, s in shapes.items() if k[0] == "W")


def shape_label(shapes: dict) -> str:
    """MxK(xH)xN of a chain x @ W...."""
    dims = list(shapes["x"]) + [s[1] for k, s in shapes.items() if k[0] == "W"]
    return "x".join(str(d) for d in dims)


def check(name: str, got, ref, shapes: dict, dtype):
    """Every column's output against the float64 reference (a peer's too)."""
    got = got.numpy() if hasattr(got, "numpy") else got
    k = max(s[0] for key, s in shapes.items() if key[0] == "W")
    atol = ATOL_PER_K * k * np.finfo(dtype).eps
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=atol,
                               err_msg=f"{name} differs from the float64 reference")


# -- timing -------------------------------------------------------------------------------------
def gflops_of(fn, flops: int, repeat: int) -> float:
    """GFLOP/s from the median time; slow calls get fewer repeats (see CELL_BUDGET_S)."""
    time.sleep(SETTLE_S)
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    n = min(repeat, max(MIN_REPEAT, int(CELL_BUDGET_S / once)))
    return flops / median_time(fn, n, min_time=MIN_SAMPLE_S) / 1e9


def jitcore_variant(w: Workload, inputs: dict, threads: int, prepack):
    """(jitted function, its arguments); prepack None: every input passed as an argument."""
    if prepack is None:
        return jc.jit(w.jitcore, num_threads=threads), tuple(inputs.values())
    consts = {k: inputs[k] for k in w.constants}
    f = jc.jit(w.jitcore, num_threads=threads, constants=consts, prepack_weights=prepack)
    return f, tuple(v for k, v in inputs.items() if k not in consts)


def time_jitcore(w: Workload, inputs: dict, ref, result: Result, threads: int, repeat: int):
    flops = gemm_flops(result.shapes)
    for column, prepack in JC_VARIANTS.items():
        if prepack is not None and not w.constants:
            continue
        f, args = jitcore_variant(w, inputs, threads, prepack)
        check(f"{w.section} {column}", f(*args), ref, result.shapes, w.dtype)
        result.gflops[column] = gflops_of(lambda: f(*args), flops, repeat)


def time_torch(w: Workload, inputs: dict, ref, result: Result, repeat: int, compile_: bool):
    targs = tuple(torch.from_numpy(a) for a in inputs.values())
    flops = gemm_flops(result.shapes)
    with torch.inference_mode():                              # once, not per call
        check(f"{w.section} torch", w.torch(*targs), ref, result.shapes, w.dtype)
        result.gflops["torch"] = gflops_of(lambda: w.torch(*targs), flops, repeat)
        if compile_ and w.compile:
            compiled = torch.compile(w.torch, dynamic=False)
            check(f"{w.section} torch.compile", compiled(*targs), ref, result.shapes,
                  w.dtype)                                     # compiles, outside timing
            result.gflops["torch.compile"] = gflops_of(lambda: compiled(*targs), flops, repeat)


def run_workload(w: Workload, threads: int, opts) -> Result:
    shapes = scaled(w.shapes, opts.quick)
    inputs = make_inputs(shapes, w.dtype)
    result = Result(w, shapes)
    ref = w.numpy(*(a.astype(np.float64) for a in inputs.values()))
    time_jitcore(w, inputs, ref, result, threads, opts.repeat)
    check(f"{w.section} numpy", w.numpy(*inputs.values()), ref, shapes, w.dtype)
    result.gflops["numpy"] = gflops_of(lambda: w.numpy(*inputs.values()),
                                       gemm_flops(shapes), opts.repeat)
    if torch is not None and opts.torch:
        time_torch(w, inputs, ref, result, opts.repeat, opts.compile)
    return result


# -- report -------------------------------------------------------------------------------------
def verdict(r: Result, ratio: float) -> str:
    goal = r.workload.goal
    return "-" if goal is None else f">= {goal}x {'met' if ratio >= goal else 'NOT met'}"


def fmt_cell(r: Result, column: str) -> str:
    return f"{r.gflops[column]:.1f}" if column in r.gflops else "-"


def print_section(section: str, results: list) -> list:
    """Print one section's table; returns whether each row that has a goal met it."""
    columns = [c for c in (*JC_VARIANTS, *PEERS)
               if any(c in r.gflops for r in results)]
    consts = any(c in r.gflops for r in results for c in CONST_VARIANTS)
    head = (f"{'shape':>18s} " + " ".join(f"{c:>13s}" for c in columns)
            + f"  {'best peer':>20s} {'ratio':>7s}  goal"
            + ("   const/args (jitcore only)" if consts else ""))
    print(f"\n{SECTIONS[section]} (GFLOP/s; ratio = jitcore, weights as arguments, / best "
          f"peer)")
    print(head)
    print("-" * len(head))
    outcomes = []
    for r in results:
        cells = " ".join(f"{fmt_cell(r, c):>13s}" for c in columns)
        peer, peer_best = r.best(PEERS)
        ratio = r.gflops["jitcore"] / peer_best
        gain = ""
        if consts:
            const_col, const_best = r.best(CONST_VARIANTS)
            gain = f"   {const_col} {const_best / r.gflops['jitcore']:.2f}x"
        print(f"{shape_label(r.shapes):>18s} {cells}  {f'{peer} {peer_best:.1f}':>20s} "
              f"{ratio:6.2f}x  {verdict(r, ratio)}{gain}")
        if r.workload.goal is not None:
            outcomes.append(ratio >= r.workload.goal)
    return outcomes


def run_child(threads: int, opts):
    """One thread count; this process was started with THREAD_ENV set to `threads`."""
    if torch is not None:
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(threads)
    env = ", ".join(f"{k}={os.environ.get(k, 'unset')}" for k in THREAD_ENV)
    torch_threads = torch.get_num_threads() if torch is not None else "-"
    print(f"\n=== {threads} thread(s): jitcore num_threads={threads}, torch {torch_threads}, "
          f"{env}; median of <= {opts.repeat} ===", flush=True)
    outcomes = []
    for section in SECTIONS:
        workloads = [w for w in WORKLOADS if w.section == section and section in opts.only]
        if workloads:
            outcomes += print_section(section, [run_workload(w, threads, opts)
                                                for w in workloads])
            sys.stdout.flush()
    print(f"\n{threads} thread(s): goals met {sum(outcomes)} of {len(outcomes)}")


# -- driver: the parent prints the header and starts one child per thread count ---------------
def print_header(opts):
    info = jc.target_info()
    blas = np.__config__.CONFIG["Build Dependencies"]["blas"]
    versions = [f"jitcore {jc.__version__}",
                f"numpy {np.__version__} ({blas['name']} {blas['version']})",
                f"torch {torch.__version__ if torch else 'not installed'}",
                f"python {sys.version.split()[0]}"]
    print(f"{info['brand']} ({info['cpu']}), {info['isa']}, {info['vector_bits']}-bit vectors, "
          f"{os.cpu_count()} cpus; " + ", ".join(versions))
    if opts.quick:
        print(f"--quick: every dimension / {QUICK_DIV} (goals as for the full-size rows), "
              "no torch.compile")


def child_command(threads: int, opts) -> list:
    cmd = [sys.executable, os.path.abspath(__file__), "--_child", str(threads),
           "--repeat", str(opts.repeat), "--only", ",".join(opts.only)]
    return cmd + ["--quick"] * opts.quick + ["--no-torch"] * (not opts.torch)


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine has been busy since boot (/proc/stat); 0 off Linux."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]
    except OSError:
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")   # less idle, iowait


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_measured(cmd: list, env: dict, threads: int) -> int:
    """Run one child pinned to `threads` cores; report the CPUs other processes kept busy
    meanwhile."""
    pin = None
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))[:threads]
        pin = lambda: os.sched_setaffinity(0, cores)                   # noqa: E731
    busy, own, t0 = busy_cpu_seconds(), children_cpu_seconds(), time.perf_counter()
    rc = subprocess.run(cmd, env=env, preexec_fn=pin).returncode
    wall = time.perf_counter() - t0
    others = (busy_cpu_seconds() - busy) - (children_cpu_seconds() - own)
    print(f"(other processes kept {max(others, 0.0) / wall:.2f} cpus busy during this "
          f"{wall:.0f} s run{'; timings are skewed' if others > 0.1 * wall else ''})")
    return rc


def run_parent(opts) -> int:
    print_header(opts)
    failed = []
    for n in opts.threads:
        sys.stdout.flush()
        env = {**os.environ, **{k: str(n) for k in THREAD_ENV}}
        if run_measured(child_command(n, opts), env, n) != 0:
            failed.append(n)
    if failed:
        print(f"\nthe run(s) with {', '.join(map(str, failed))} thread(s) failed")
    return 1 if failed else 0


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quick", action="store_true",
                    help=f"every dimension / {QUICK_DIV}, 3 repeats, no torch.compile")
    ap.add_argument("--repeat", type=int, help="timed samples per median (default 9, quick 3)")
    ap.add_argument("--no-torch", dest="torch", action="store_false", help="skip torch")
    ap.add_argument("--only", help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--_child", type=int, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    opts.only = opts.only.split(",") if opts.only else list(SECTIONS)
    unknown = set(opts.only) - set(SECTIONS)
    if unknown:
        ap.error(f"--only: unknown section(s) {', '.join(sorted(unknown))}; "
                 f"choose from {', '.join(SECTIONS)}")
    opts.compile = opts.torch and not opts.quick
    opts.repeat = opts.repeat or (3 if opts.quick else 9)
    return opts


def main():
    opts = parse_args()
    if opts._child is not None:
        run_child(opts._child, opts)
    else:
        sys.exit(run_parent(opts))


if __name__ == "__main__":
    main()

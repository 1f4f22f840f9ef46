"""Kernel benchmarks: jitcore vs the best of numpy, numexpr and torch.compile, per thread count.

Nine float32 workloads (elementwise chain, tanh GELU, row softmax, layer_norm, row and column
sums, a three-way broadcast, a transposed add, a uint8-masked row max). Each jitcore result is
checked against numpy before timing. Every call allocates its outputs (jitcore included), as a
user's call would. Times are medians; speedup = best peer time / jitcore time (> 1 means
jitcore is faster), where the best peer is the fastest of numpy, numexpr and torch.compile
(torch eager is shown for information only). Goal: speedup >= 1.25x.

Peers get the same thread count as jitcore (numexpr.set_num_threads, torch.set_num_threads);
numpy runs single-threaded. For the chain, a roofline line compares its bandwidth (3 inputs read
+ 1 output written) with the best copy/triad bandwidth measured in the same run (goal >= 80%).
First-call times (trace + compile + run) of jitcore and torch.compile are printed as information.

    python examples/kernel_bench.py [--threads 1 2] [--quick] [--repeat N] [--no-torch]
                                    [--only chain,softmax,...]

--quick: first dimension / 8, 3 repeats, no torch.compile. numexpr and torch columns show "-"
where the package is not installed (or the workload does not fit numexpr).
"""
from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import jitcore as jc
from timing import median_time

try:
    import numexpr
except ImportError:
    numexpr = None
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

GOAL_SPEEDUP = 1.25
GOAL_BANDWIDTH = 0.80
QUICK_DIV = 8                     # --quick divides each workload's first dimension by this
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# numexpr computes in float64 when a constant is a Python float: bind float32 scalars instead
NE_CONSTANTS = {"quarter": np.float32(0.25), "half": np.float32(0.5), "one": np.float32(1.0),
                "k": np.float32(SQRT_2_OVER_PI), "c3": np.float32(0.044715)}
PEERS = ("numpy", "numexpr", "torch.compile")
COLUMNS = ("jitcore",) + PEERS + ("torch eager",)


def first_call(fn, *args):
    """(result, seconds) of one call: for a jitted function, trace + compile + run."""
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def ne(expr: str, **arrays):
    return numexpr.evaluate(expr, local_dict={**NE_CONSTANTS, **arrays})


# -- inputs: (shape, rng) -> arrays -------------------------------------------------------------
def randn(rng, shape):
    return rng.standard_normal(shape, dtype=np.float32)


def normal(count: int):
    """`count` standard normal arrays of the shape."""
    def make(shape, rng):
        return tuple(randn(rng, shape) for _ in range(count))
    return make


def rows_with_params(shape, rng):
    """x, weight, bias for layer_norm over the last axis."""
    return randn(rng, shape), randn(rng, shape[-1:]), randn(rng, shape[-1:])


def three_directions(shape, rng):
    """a[N,1], b[1,M], c[N,M]."""
    n, m = shape
    return randn(rng, (n, 1)), randn(rng, (1, m)), randn(rng, shape)


def with_transposed(shape, rng):
    """a[N,M], b[M,N]."""
    return randn(rng, shape), randn(rng, shape[::-1])


def masked(shape, rng):
    """A uint8 0/1 mask and x, both of `shape`."""
    return (rng.random(shape) < 0.5).astype(np.uint8), randn(rng, shape)


# -- numpy implementations (in place where that saves a temporary) -----------------------------
def np_chain(a, b, c):
    t = a * b
    t += c
    np.maximum(t, 0, out=t)
    t *= 0.5
    return t


def np_gelu_tanh(x):
    t = x * x
    t *= x
    t *= 0.044715
    t += x
    t *= SQRT_2_OVER_PI
    np.tanh(t, out=t)
    t += 1
    t *= x
    t *= 0.5
    return t


def np_softmax(x):
    e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def np_layer_norm(x, w, b, eps=1e-5):
    d = x - x.mean(axis=-1, keepdims=True)
    d *= 1.0 / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps)
    d *= w
    d += b
    return d


def np_broadcast3(a, b, c):
    t = a + b
    t += c
    return t


@dataclass(frozen=True)
class Workload:
    name: str
    shape: tuple                  # full size
    make: Callable                # (shape, rng) -> input arrays
    jitcore: Callable             # traced by jc.jit
    numpy: Callable
    torch: Callable               # on tensors; timed eager and through torch.compile
    numexpr: Callable | None = None   # on the arrays; None where it does not fit numexpr
    rtol: float = 1e-5
    atol: float = 1e-5


WORKLOADS = [
    Workload("chain", (1 << 24,), normal(3),
             lambda a, b, c: jc.relu(a * b + c) * 0.5, np_chain,
             lambda a, b, c: torch.relu(a * b + c) * 0.5,
             # relu(t) * 0.5 == (t + |t|) * 0.25 exactly; faster in numexpr than its where()
             lambda a, b, c: ne("(a*b+c + abs(a*b+c)) * quarter", a=a, b=b, c=c)),
    Workload("gelu_tanh", (1 << 24,), normal(1),
             lambda x: jc.gelu(x, approximate="tanh"), np_gelu_tanh,
             lambda x: F.gelu(x, approximate="tanh"),
             lambda x: ne("half * x * (one + tanh(k * (x + c3 * x * x * x)))", x=x)),
    Workload("softmax", (4096, 1024), normal(1),
             lambda x: jc.softmax(x, axis=-1), np_softmax,
             lambda x: torch.softmax(x, dim=-1)),
    Workload("layer_norm", (8192, 768), rows_with_params,
             lambda x, w, b: jc.layer_norm(x, w, b, eps=1e-5), np_layer_norm,
             lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, eps=1e-5),
             rtol=1e-4, atol=1e-4),
    Workload("row_sum", (4096, 4096), normal(1),
             lambda x: x.sum(axis=1), lambda x: x.sum(axis=1),
             lambda x: x.sum(dim=1),
             lambda x: ne("sum(x, axis=1)", x=x), rtol=1e-4, atol=1e-3),
    Workload("col_sum", (4096, 4096), normal(1),
             lambda x: x.sum(axis=0), lambda x: x.sum(axis=0),
             lambda x: x.sum(dim=0),
             lambda x: ne("sum(x, axis=0)", x=x), rtol=1e-4, atol=1e-3),
    Workload("broadcast3", (4096, 4096), three_directions,
             lambda a, b, c: a + b + c, np_broadcast3,
             lambda a, b, c: a + b + c,
             lambda a, b, c: ne("a + b + c", a=a, b=b, c=c)),
    Workload("add_transposed", (4096, 4096), with_transposed,
             lambda a, b: a + b.T, lambda a, b: a + b.T,
             lambda a, b: a + b.T,
             lambda a, b: ne("a + bt", a=a, bt=b.T)),
    Workload("masked_row_max", (2048, 2047), masked,
             lambda m, x: jc.where(m, x, -np.inf).max(axis=1),
             lambda m, x: np.where(m, x, -np.inf).max(axis=1),
             lambda m, x: torch.where(m != 0, x, float("-inf")).amax(dim=1)),
]


@dataclass
class Result:
    name: str
    shape: tuple
    times: dict = field(default_factory=dict)        # column -> median seconds
    first_calls: dict = field(default_factory=dict)  # "jitcore" / "torch.compile" -> seconds

    def best_peer(self):
        """(name, seconds) of the fastest of numpy, numexpr and torch.compile."""
        return min(((p, self.times[p]) for p in PEERS if p in self.times), key=lambda x: x[1])


def scaled(shape: tuple, quick: bool) -> tuple:
    return (shape[0] // QUICK_DIV, *shape[1:]) if quick else shape


def set_peer_threads(n: int):
    if numexpr is not None:
        numexpr.set_num_threads(n)
    if torch is not None:
        torch.set_num_threads(n)


def time_torch(w: Workload, args, result: Result, repeat: int, compile_: bool):
    targs = tuple(torch.from_numpy(a) for a in args)
    with torch.no_grad():
        result.times["torch eager"] = median_time(lambda: w.torch(*targs), repeat)
        if compile_:
            compiled = torch.compile(w.torch, dynamic=False)
            _, result.first_calls["torch.compile"] = first_call(compiled, *targs)
            result.times["torch.compile"] = median_time(lambda: compiled(*targs), repeat)


def run_workload(w: Workload, shape: tuple, threads: int, repeat: int, opts) -> Result:
    args = w.make(shape, np.random.default_rng(0))
    result = Result(w.name, shape)
    f = jc.jit(w.jitcore, num_threads=threads)     # a fresh function: the first call compiles
    got, result.first_calls["jitcore"] = first_call(f, *args)
    np.testing.assert_allclose(got, w.numpy(*args), rtol=w.rtol, atol=w.atol,
                               err_msg=f"{w.name}: jitcore differs from numpy")
    result.times["jitcore"] = median_time(lambda: f(*args), repeat)
    result.times["numpy"] = median_time(lambda: w.numpy(*args), repeat)
    if numexpr is not None and w.numexpr is not None:
        result.times["numexpr"] = median_time(lambda: w.numexpr(*args), repeat)
    if torch is not None and opts.torch:
        time_torch(w, args, result, repeat, opts.compile)
    return result


def bandwidths(n: int, threads: int, repeat: int, use_torch: bool) -> dict:
    """GB/s of a copy into a preallocated array and of a triad a + s*b into a fresh output,
    counting bytes read + written, on n float32."""
    a, b = normal(2)((n,), np.random.default_rng(1))
    dst = np.empty_like(a)
    copy_bytes, triad_bytes = 2 * a.nbytes, 3 * a.nbytes
    triad = jc.jit(lambda a, b: a + 3.0 * b, num_threads=threads)
    runs = {"copy np.copyto": (copy_bytes, lambda: np.copyto(dst, a)),
            "triad jitcore": (triad_bytes, lambda: triad(a, b))}
    if numexpr is not None:
        s = np.float32(3.0)
        runs["triad numexpr"] = (triad_bytes, lambda: ne("a + s * b", a=a, b=b, s=s))
    if torch is not None and use_torch:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        runs["triad torch"] = (triad_bytes, lambda: torch.add(ta, tb, alpha=3.0))
    return {name: nbytes / median_time(fn, repeat) / 1e9 for name, (nbytes, fn) in runs.items()}


def fmt_ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def print_table(results: list):
    head = (f"{'workload':15s} {'shape':>11s} " + " ".join(f"{c:>13s}" for c in COLUMNS)
            + f"  {'best peer':>22s} {'speedup':>8s}  goal >= {GOAL_SPEEDUP}x")
    print(head)
    print("-" * len(head))
    for r in results:
        shape = "x".join(str(d) for d in r.shape)
        cells = " ".join(f"{fmt_ms(r.times.get(c)):>13s}" for c in COLUMNS)
        peer, t_peer = r.best_peer()
        speedup = t_peer / r.times["jitcore"]
        met = "met" if speedup >= GOAL_SPEEDUP else "NOT met"
        print(f"{r.name:15s} {shape:>11s} {cells}  {f'{peer} {fmt_ms(t_peer)}':>22s} "
              f"{speedup:7.2f}x  {met}")


def print_first_calls(results: list):
    print("\nfirst call (trace + compile + run), ms, for information "
          "(torch.compile may reuse its on-disk cache):")
    for r in results:
        print(f"  {r.name:15s} jitcore {fmt_ms(r.first_calls['jitcore']):>9s}   "
              f"torch.compile {fmt_ms(r.first_calls.get('torch.compile')):>9s}")


def print_roofline(chain: Result, bw: dict):
    n = chain.shape[0]
    achieved = 4 * n * 4 / chain.times["jitcore"] / 1e9        # 3 reads + 1 write, float32
    best_name, best = max(bw.items(), key=lambda x: x[1])
    frac = achieved / best
    measured = ", ".join(f"{k} {v:.1f}" for k, v in bw.items())
    print(f"\nroofline, chain on {n:,} float32: measured GB/s: {measured}")
    print(f"  chain (jitcore) {achieved:.1f} GB/s = {frac:.0%} of best ({best_name} {best:.1f}); "
          f"goal >= {GOAL_BANDWIDTH:.0%}: {'met' if frac >= GOAL_BANDWIDTH else 'NOT met'}")


def run_pass(workloads: list, threads: int, repeat: int, opts):
    set_peer_threads(threads)
    print(f"\n=== {threads} thread(s): jitcore num_threads={threads}, numexpr and torch "
          f"{threads}, numpy 1; median of {repeat}; times in ms ===")
    results = [run_workload(w, scaled(w.shape, opts.quick), threads, repeat, opts)
               for w in workloads]
    print_table(results)
    print_first_calls(results)
    chain = next((r for r in results if r.name == "chain"), None)
    if chain is not None:
        print_roofline(chain, bandwidths(chain.shape[0], threads, repeat, opts.torch))


def print_header():
    info = jc.target_info()
    versions = [f"jitcore {jc.__version__}", f"numpy {np.__version__}",
                f"numexpr {numexpr.__version__ if numexpr else 'not installed'}",
                f"torch {torch.__version__ if torch else 'not installed'}"]
    print(f"{info['brand']} ({info['cpu']}), {info['isa']}, {info['vector_bits']}-bit vectors, "
          f"{os.cpu_count()} cpus; " + ", ".join(versions))


def parse_args():
    names = [w.name for w in WORKLOADS]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--quick", action="store_true",
                    help=f"first dimension / {QUICK_DIV}, 3 repeats, no torch.compile")
    ap.add_argument("--repeat", type=int, help="timed calls per median (default 11, quick 3)")
    ap.add_argument("--no-torch", dest="torch", action="store_false", help="skip torch")
    ap.add_argument("--only", help="comma-separated workloads: " + ",".join(names))
    opts = ap.parse_args()
    unknown = set(opts.only.split(",")) - set(names) if opts.only else set()
    if unknown:
        ap.error(f"--only: unknown workload(s) {', '.join(sorted(unknown))}; "
                 f"choose from {', '.join(names)}")
    opts.compile = opts.torch and not opts.quick
    opts.repeat = opts.repeat or (3 if opts.quick else 11)
    return opts


def main():
    opts = parse_args()
    only = opts.only.split(",") if opts.only else None
    workloads = [w for w in WORKLOADS if only is None or w.name in only]
    print_header()
    for threads in opts.threads:
        run_pass(workloads, threads, opts.repeat, opts)


if __name__ == "__main__":
    main()

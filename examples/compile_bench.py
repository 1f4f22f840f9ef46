"""Where compile time goes: per stage (trace, passes, IR generation, LLVM's optimization and
machine code, link), for the benchmark suite's graphs and a few larger ones, cold (empty disk
cache) and warm (a new process that finds the graph stored whole on disk: no IR generation).

Each graph compiles in a fresh process of its own, after a tiny warm-up graph so the one-time
set-up (LLVM's target, the thread pools) is not counted; 1 thread. The figures are the first
call's stages as `jc.cache_info()["compile_seconds"]` records them, medians of --repeat
process pairs (each pair with its own cache directory).

    python examples/compile_bench.py [--repeat 3] [--only chain,softmax] [--json PATH]

--json writes {"stamp": where the figures come from (jitcore/bench/stamp.py), "graphs": the
medians per graph and start}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, sys
import numpy as np
import jitcore as jc
from jitcore.bench import workloads as wl

jc.set_num_threads(1)
jc.jit(lambda a: a + 1.0)(np.ones(8, np.float32))        # set-up apart from the graph
rng = np.random.default_rng(0)
name = sys.argv[1]


def encoder_layer(x, wq, wk, wv, wo, w1, w2, g1, b1, g2, b2):
    # a transformer encoder layer: batch 2, sequence 128, width 256, 4 heads
    B, T, D, H = 2, 128, 256, 4
    def heads(t):
        return t.reshape(B, T, H, D // H).transpose((0, 2, 1, 3))
    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    att = jc.softmax(q @ k.transpose((0, 1, 3, 2)) * (1.0 / 8.0), axis=-1)
    ctx = (att @ v).transpose((0, 2, 1, 3)).reshape(B, T, D)
    h = jc.layer_norm(x + ctx @ wo, g1, b1)
    return jc.layer_norm(h + jc.gelu(h @ w1) @ w2, g2, b2)


def randn(*shape):
    return (rng.standard_normal(shape) * 0.05).astype(np.float32)


if name in wl.BY_NAME:
    w = wl.BY_NAME[name]
    fn, args = wl.JITCORE[name], w.inputs(w.shapes(False), rng)
elif name == "encoder_layer":
    D = 256
    fn = encoder_layer
    args = (randn(2, 128, D), randn(D, D), randn(D, D), randn(D, D), randn(D, D),
            randn(D, 4 * D), randn(4 * D, D), randn(D), randn(D), randn(D), randn(D))
elif name == "encoder_x8":
    D = 256
    def fn(x, *ws):
        for _ in range(8):
            x = encoder_layer(x, *ws)
        return x
    args = (randn(2, 128, D), randn(D, D), randn(D, D), randn(D, D), randn(D, D),
            randn(D, 4 * D), randn(4 * D, D), randn(D), randn(D), randn(D), randn(D))
elif name == "mlp12":
    def fn(x, *ws):
        for w_, b_ in zip(ws[0::2], ws[1::2]):
            x = jc.relu(x @ w_ + b_)
        return x
    args = (randn(64, 512),) + tuple(a for _ in range(12) for a in (randn(512, 512), randn(512)))
elif name == "chain800":
    def fn(a, b):
        for i in range(400):
            a = a * b + float(i % 7)
        return a
    args = (randn(4096), randn(4096))
else:
    raise SystemExit(f"unknown graph {name}")
jc.jit(fn)(*args)
info = jc.cache_info()
print(json.dumps({"seconds": info["compile_seconds"], "disk_hits": info["disk_hits"], "compiled": info["modules_compiled"], "reused": info["modules_reused"]}))
"""

GRAPHS = ["chain", "softmax", "layer_norm", "linear_gelu", "mlp2", "encoder_layer",
          "encoder_x8", "mlp12", "chain800"]
COLUMNS = [("trace", "trace"), ("passes", "passes"), ("ir_generation", "IR gen"),
           ("parse", "parse"), ("optimize", "opt"), ("machine_code", "mc"),
           ("disk_load", "disk"), ("link", "link")]


def run_child(name: str, cache_dir: str) -> dict:
    env = {**os.environ, "JITCORE_CACHE_DIR": cache_dir, "JITCORE_NUM_THREADS": "1"}
    env.pop("JITCORE_DISK_CACHE", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, name], capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated graph names")
    ap.add_argument("--json", help="write the medians here")
    opts = ap.parse_args(argv)
    names = [n for n in opts.only.split(",") if n] or GRAPHS
    results = {}
    header = f"{'graph':<14} {'start':<5} {'total ms':>9} " + " ".join(
        f"{label:>7}" for _, label in COLUMNS)
    print(header)
    print("-" * len(header))
    for name in names:
        runs = {"cold": [], "warm": []}
        for _ in range(opts.repeat):
            with tempfile.TemporaryDirectory() as cache_dir:
                runs["cold"].append(run_child(name, cache_dir)["seconds"])
                runs["warm"].append(run_child(name, cache_dir)["seconds"])
        results[name] = {}
        for start, samples in runs.items():
            med = {k: statistics.median(s[k] for s in samples) for k in samples[0]}
            results[name][start] = med
            print(f"{name:<14} {start:<5} {med['total'] * 1e3:9.1f} " + " ".join(
                f"{med[k] * 1e3:7.1f}" for k, _ in COLUMNS), flush=True)
    print("\nms per stage, medians of", opts.repeat, "fresh processes; opt = LLVM optimization, "
          "mc = machine code, disk = loading the object from the disk cache (warm)")
    if opts.json:
        from jitcore.bench.stamp import stamp
        command = ["python examples/compile_bench.py", *(sys.argv[1:] if argv is None else argv)]
        settings = {"command": " ".join(command), "repeat": opts.repeat, "graphs": names,
                    "threads": 1}
        with open(opts.json, "w") as f:
            json.dump({"stamp": stamp(settings), "graphs": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
